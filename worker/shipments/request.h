/*  request.h: a request_shipment payload, checked, and what goes to the
    carrier for it: the idempotency key taken from the business operation
    (shipment-request:{order_id}, never the job id) and the JSON body, built
    the same way from the same payload on every try so that the carrier
    sees the same request (it answers a key reused with another body 422).

      {order_id: uint 1 .. 2^53-1, address: str 1 .. 1024 bytes,
       items?: [{sku: str, qty: uint}, ...]}

    The handler checks what it needs (the order id, that the address and
    items have the right shapes); the carrier checks its own rules (item
    counts, sku lengths, quantities) and refuses with 400, which fails the
    job with the carrier's message. */
#ifndef ONCEQ_SHIPMENTS_REQUEST_H
#define ONCEQ_SHIPMENTS_REQUEST_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "shipments/shipments_limits.h"

typedef struct {
    int64_t order_id;
    char key[OQ_SHIPMENT_MAX_KEY_LEN];
    char *body; /* canonical JSON (sorted keys, compact); owned */
} oq_shipment_request_t;

/* Build the request from a payload map. 0 with *request filled (free it
   with oq_shipment_request_clear), or -1 with why naming the field. */
int oq_shipment_request_decode(const msgpack_object *payload, oq_shipment_request_t *request,
                               char *why, size_t why_len);

/* Free what a request holds. */
void oq_shipment_request_clear(oq_shipment_request_t *request);

#endif
