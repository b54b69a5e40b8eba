/*  payloads.c: the built-in job types' payloads (payloads.h). */
#include "payloads.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/proto.h"

void oq_payload_pack_grant(msgpack_packer *pk, uint64_t order, uint64_t customer, uint64_t points)
{
    oq_proto_pack_cstr(pk, "order_id");
    msgpack_pack_uint64(pk, order);
    oq_proto_pack_cstr(pk, "customer_id");
    msgpack_pack_uint64(pk, customer);
    oq_proto_pack_cstr(pk, "points");
    msgpack_pack_uint64(pk, points);
}

/* Clear buf and open a map of fields in it, for pk to fill. */
static void s_open(msgpack_sbuffer *buf, msgpack_packer *pk, uint32_t fields)
{
    msgpack_sbuffer_clear(buf);
    msgpack_packer_init(pk, buf, msgpack_sbuffer_write);
    msgpack_pack_map(pk, fields);
}

void oq_payload_grant(msgpack_sbuffer *buf, uint64_t order, uint64_t customer, uint64_t points)
{
    msgpack_packer pk;
    s_open(buf, &pk, 3);
    oq_payload_pack_grant(&pk, order, customer, points);
}

void oq_payload_shipment(msgpack_sbuffer *buf, uint64_t order, const char *address, const char *sku,
                         uint64_t qty)
{
    msgpack_packer pk;
    s_open(buf, &pk, 3);
    oq_proto_pack_cstr(&pk, "order_id");
    msgpack_pack_uint64(&pk, order);
    oq_proto_pack_cstr(&pk, "address");
    oq_proto_pack_cstr(&pk, address);
    oq_proto_pack_cstr(&pk, "items");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 2);
    oq_proto_pack_cstr(&pk, "sku");
    oq_proto_pack_cstr(&pk, sku);
    oq_proto_pack_cstr(&pk, "qty");
    msgpack_pack_uint64(&pk, qty);
}

void oq_payload_pad(msgpack_sbuffer *buf, size_t bytes)
{
    char *pad = malloc(bytes ? bytes : 1);
    assert(pad);
    memset(pad, 'x', bytes);
    msgpack_packer pk;
    s_open(buf, &pk, 1);
    msgpack_pack_str_with_body(&pk, "pad", 3);
    msgpack_pack_str_with_body(&pk, pad, bytes);
    free(pad);
}

void oq_payload_blob(msgpack_sbuffer *buf, size_t bytes)
{
    char *blob = calloc(1, bytes ? bytes : 1);
    assert(blob);
    msgpack_packer pk;
    s_open(buf, &pk, 1);
    oq_proto_pack_cstr(&pk, "b");
    msgpack_pack_bin(&pk, bytes);
    msgpack_pack_bin_body(&pk, blob, bytes);
    free(blob);
}
