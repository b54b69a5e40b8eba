/*  shipments_hooks.h: a deliberately broken twin of request_shipment, for
    test builds only (never linked into a production handler):

      request_shipment_unkeyed  sends the job id as its Idempotency-Key
                                ("job-{id}"), the mistake the article warns
                                of: a job id is new on every dispatch, so an
                                order dispatched twice makes two shipments.

    The chaos harness runs it to prove that its verdict sees them
    (chaos.broken_shipments). It calls the carrier at ONCEQ_CARRIER_URL
    (--carrier-url belongs to the production handler), keeps no record and
    reports ok on a 2xx, retry on anything else. */
#ifndef ONCEQ_SHIPMENTS_HOOKS_H
#define ONCEQ_SHIPMENTS_HOOKS_H

#include "onceq/worker.h"

/* The job type of the unkeyed twin. */
#define OQ_SHIPMENTS_UNKEYED_JOB_TYPE "request_shipment_unkeyed"

/* Register request_shipment_unkeyed. Call it with test hooks on only, after
   a shipment handler was made (it sets up libcurl). 0 or -1. */
int oq_shipments_test_register(oq_registry_t *registry);

#endif
