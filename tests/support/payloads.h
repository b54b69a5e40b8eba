/*  payloads.h: the payloads the tests and the benches send, packed in one
    place so that a change to a type's fields is made once: grant_points
    ({order_id, customer_id, points}), request_shipment ({order_id, address,
    items: [{sku, qty}]}), and padding of a chosen size for a type that
    ignores its fields (noop). Each packs a map into a caller's buffer; none
    checks the values, so a test may send what a handler must refuse. */
#ifndef ONCEQ_TEST_PAYLOADS_H
#define ONCEQ_TEST_PAYLOADS_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

/* Pack grant_points' three fields (six objects: key, value, ...) into a map
   the caller opened with room for them. */
void oq_payload_pack_grant(msgpack_packer *pk, uint64_t order, uint64_t customer, uint64_t points);

/* Clear buf and pack {order_id, customer_id, points} into it. */
void oq_payload_grant(msgpack_sbuffer *buf, uint64_t order, uint64_t customer, uint64_t points);

/* Clear buf and pack {order_id, address, items: [{sku, qty}]} into it. */
void oq_payload_shipment(msgpack_sbuffer *buf, uint64_t order, const char *address, const char *sku,
                         uint64_t qty);

/* Clear buf and pack {b: a binary of bytes zero bytes} into it. */
void oq_payload_blob(msgpack_sbuffer *buf, size_t bytes);

/* Clear buf and pack {pad: a string of bytes 'x'} into it. */
void oq_payload_pad(msgpack_sbuffer *buf, size_t bytes);

#endif
