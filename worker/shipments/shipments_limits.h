/*  shipments_limits.h: the limits and timers of the shipment requests, with
    their units in the names. The carrier's own limits are its business;
    these are what the handler sends and waits for. */
#ifndef ONCEQ_SHIPMENTS_LIMITS_H
#define ONCEQ_SHIPMENTS_LIMITS_H

/* An order id the carrier takes: 1 to 2^53 - 1 (a JSON integer exact in a
   double). */
#define OQ_SHIPMENT_MAX_ORDER_ID 9007199254740991LL

/* A shipping address, in bytes. */
#define OQ_SHIPMENT_MAX_ADDRESS_LEN 1024

/* The idempotency key: "shipment-request:" and the order id. */
#define OQ_SHIPMENT_KEY_PREFIX  "shipment-request:"
#define OQ_SHIPMENT_MAX_KEY_LEN 64

/* A carrier's reference kept with a confirmed request, in bytes. */
#define OQ_SHIPMENT_MAX_REFERENCE_LEN 64

/* The carrier's answer read at most; a longer body is cut (its reference
   and message come first in every answer the carrier gives). */
#define OQ_SHIPMENT_MAX_ANSWER_BYTES (64 * 1024)

/* The call's time budget comes from the job's timeout, which the broker
   keeps shorter than the lease: what is left after a reserve for the two
   short database transactions around the call. The reserve is a quarter
   of the timeout, at most OQ_SHIPMENT_DB_RESERVE_MAX_MS; connecting may
   take half the call's budget, at most OQ_SHIPMENT_CONNECT_MAX_MS. */
#define OQ_SHIPMENT_DB_RESERVE_MAX_MS 5000
#define OQ_SHIPMENT_CONNECT_MAX_MS    5000
#define OQ_SHIPMENT_MIN_CALL_MS       100

#endif
