/*  handler.h: the request_shipment job handler. It asks the carrier for an
    order's shipment with the idempotency key shipment-request:{order_id},
    keeps the request's record in PostgreSQL (store.h), and reports what
    the carrier's answer means (classify.h):

      confirmed            ok (applied; already_applied when the carrier
                           replayed an earlier try's answer)
      failed               fail, with the carrier's reason
      retry                retry: the broker's backoff, then the same key
      review               review: the broker's review store, for a person
      bad payload          fail, naming the field
      database error       retry or fail, by its class (onceq/effects.h)

    The carrier's base URL is the worker's --carrier-url (ONCEQ_CARRIER_URL),
    a flag the handler adds to the worker's command line: a URL that does
    not parse stops the worker at start. A worker without one hands the
    jobs back (return): the broker sends it no more of them. The call's
    connection and total timeouts come from the job's timeout, which the
    broker keeps inside the lease, so no call outlives its lease.

    Written against the public SDK only (onceq/worker.h, onceq/effects.h,
    onceq/effects_worker.h), as a user's handler would be. */
#ifndef ONCEQ_SHIPMENTS_HANDLER_H
#define ONCEQ_SHIPMENTS_HANDLER_H

#include <stdint.h>

#include "onceq/effects.h"
#include "onceq/worker.h"

/* The job type of the handler. */
#define OQ_SHIPMENTS_JOB_TYPE "request_shipment"

typedef struct {
    const char *carrier_url;      /* base URL (copied); NULL: --carrier-url */
    const char *database_url;     /* NULL or "": libpq's defaults */
    oq_txn_isolation_t isolation; /* of the record's transactions */
} oq_shipments_config_t;

typedef struct oq_shipments_handler oq_shipments_handler_t;

/* State of the handler. With config NULL the carrier URL is the worker's
   --carrier-url and the database the worker's --database and --isolation,
   read on the first job of each worker process. Sets up libcurl: make it
   in the main thread, before oq_worker_main. Does not connect. */
oq_shipments_handler_t *oq_shipments_handler_new(const oq_shipments_config_t *config);

/* Close the connection if open, free, and set *self_p to NULL. */
void oq_shipments_handler_destroy(oq_shipments_handler_t **self_p);

/* Register request_shipment, and, for state made without a config, the
   worker flag --carrier-url. self must outlive the registry's use. 0 or -1. */
int oq_shipments_handler_register(oq_shipments_handler_t *self, oq_registry_t *registry);

/* The call's budget for a job timeout: *connect_ms to connect, *total_ms
   in all, both within the timeout less a reserve for the database. */
void oq_shipments_call_budget(int64_t timeout_ms, int64_t *connect_ms, int64_t *total_ms);

#endif
