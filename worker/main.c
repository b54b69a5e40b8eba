/*  main.c: onceq-worker, a thin main over oq_worker_main (libonceq-worker)
    with the built-in handlers, the points handler (grant_points) and the
    shipments handler (request_shipment, with --carrier-url) registered.
    Every flag and behaviour is the library's. */
#include "onceq/log.h"
#include "onceq/worker.h"
#include "points/handler.h"
#include "shipments/handler.h"

int main(int argc, char **argv)
{
    oq_registry_t *registry = oq_registry_new();
    oq_builtin_register(registry);
    /* The points state is made here, before any fork, but opens its
       database from the worker's settings on the first job of each worker
       process (a connection must not cross a fork). oq_worker_main
       returns in every process, which then closes its own connection. */
    oq_points_handler_t *points = oq_points_handler_new(NULL);
    if (oq_points_handler_register(points, registry) < 0)
        oq_error("the %s handler is not available", OQ_POINTS_JOB_TYPE);
    /* The same for request_shipment, which also adds --carrier-url. */
    oq_shipments_handler_t *shipments = oq_shipments_handler_new(NULL);
    if (oq_shipments_handler_register(shipments, registry) < 0)
        oq_error("the %s handler is not available", OQ_SHIPMENTS_JOB_TYPE);
    int rc = oq_worker_main(argc, argv, registry);
    oq_shipments_handler_destroy(&shipments);
    oq_points_handler_destroy(&points);
    return rc;
}
