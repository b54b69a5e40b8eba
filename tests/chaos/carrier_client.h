/*  carrier_client.h: the harness's view of the carrier (onceq-carrier,
    docs/carrier.md) over its own HTTP API: GET /shipments, the carrier's
    record of what it created, which the verdict judges the shipments by;
    and PUT /faults, which the schedule's error and delay bursts switch on
    and off without a restart (a restart would forget every shipment). */
#ifndef ONCEQ_CHAOS_CARRIER_CLIENT_H
#define ONCEQ_CHAOS_CARRIER_CLIENT_H

#include <stddef.h>
#include <stdint.h>

/* One shipment of GET /shipments. The strings are borrowed for the call. */
typedef struct {
    int64_t order_id;
    const char *key;       /* its Idempotency-Key */
    const char *reference; /* SHP-... */
    const char *address;   /* of the request that created it ("" if none) */
    uint32_t requests;     /* POSTs with its key that were processed */
    uint32_t dropped;      /* ... whose reply was dropped */
} oq_carrier_shipment_t;

/* The carrier's counts of every POST /shipments since it started. */
typedef struct {
    uint64_t posts, created, replayed, conflicts, invalid, injected_errors, dropped_replies,
        delayed_replies;
} oq_carrier_totals_t;

typedef void (*oq_carrier_shipment_fn)(void *ctx, const oq_carrier_shipment_t *shipment);

typedef struct oq_carrier_client oq_carrier_client_t;

/* A client of the carrier at base_url (copied; "http://127.0.0.1:7760").
   Never NULL. */
oq_carrier_client_t *oq_carrier_client_new(const char *base_url);

/* Free and set *self_p to NULL. */
void oq_carrier_client_destroy(oq_carrier_client_t **self_p);

/* PUT /faults with the three settings. 0, or -1 (oq_carrier_client_error). */
int oq_carrier_client_set_faults(oq_carrier_client_t *self, double error_rate, double drop_rate,
                                 uint32_t delay_ms);

/* GET /shipments: fn for each shipment, oldest first, and the totals. 0, or
   -1 if the carrier did not answer or its answer is not the documented
   JSON (oq_carrier_client_error). */
int oq_carrier_client_shipments(oq_carrier_client_t *self, oq_carrier_shipment_fn fn, void *ctx,
                                oq_carrier_totals_t *totals);

/* The last failure's text. Borrowed. */
const char *oq_carrier_client_error(const oq_carrier_client_t *self);

#endif
