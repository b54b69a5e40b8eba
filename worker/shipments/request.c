/*  request.c: from a payload to the carrier's body. The body is built with
    jansson and dumped with sorted keys, so one payload always gives the
    same bytes; the carrier compares JSON values anyway, and the record in
    PostgreSQL compares them as jsonb. */
#include "shipments/request.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/proto.h"

#define S_FAIL(...)                                                                                \
    do {                                                                                           \
        snprintf(why, why_len, __VA_ARGS__);                                                       \
        goto fail;                                                                                 \
    } while (0)

static bool s_is_str(const msgpack_object *o)
{
    return o && o->type == MSGPACK_OBJECT_STR;
}

/* One item {sku: str, qty: uint} as JSON, or NULL after filling why. */
static json_t *s_item(const msgpack_object *o, uint32_t i, char *why, size_t why_len)
{
    json_t *item = NULL;
    if (o->type != MSGPACK_OBJECT_MAP)
        S_FAIL("payload field \"items\" item %u must be a map {sku, qty}", i);
    const msgpack_object *sku = oq_proto_map_get(o, "sku"), *qty = oq_proto_map_get(o, "qty");
    if (!s_is_str(sku))
        S_FAIL("payload field \"items\" item %u: \"sku\" must be a string", i);
    if (!qty || qty->type != MSGPACK_OBJECT_POSITIVE_INTEGER || qty->via.u64 > INT64_MAX)
        S_FAIL("payload field \"items\" item %u: \"qty\" must be a whole number", i);
    if (o->via.map.size != 2)
        S_FAIL("payload field \"items\" item %u may hold only \"sku\" and \"qty\"", i);
    json_t *text = json_stringn(sku->via.str.ptr, sku->via.str.size);
    if (!text)
        S_FAIL("payload field \"items\" item %u: \"sku\" must be UTF-8 text", i);
    item = json_object();
    json_object_set_new(item, "sku", text);
    json_object_set_new(item, "qty", json_integer((json_int_t)qty->via.u64));
    return item;
fail:
    json_decref(item);
    return NULL;
}

int oq_shipment_request_decode(const msgpack_object *payload, oq_shipment_request_t *request,
                               char *why, size_t why_len)
{
    memset(request, 0, sizeof *request);
    json_t *body = NULL;
    const msgpack_object *order = oq_proto_map_get(payload, "order_id");
    if (!order)
        S_FAIL("payload field \"order_id\" is missing");
    if (order->type != MSGPACK_OBJECT_POSITIVE_INTEGER || order->via.u64 < 1 ||
        order->via.u64 > (uint64_t)OQ_SHIPMENT_MAX_ORDER_ID)
        S_FAIL("payload field \"order_id\" must be an integer from 1 to %lld",
               (long long)OQ_SHIPMENT_MAX_ORDER_ID);
    request->order_id = (int64_t)order->via.u64;
    const msgpack_object *address = oq_proto_map_get(payload, "address");
    if (!address)
        S_FAIL("payload field \"address\" is missing");
    if (!s_is_str(address) || address->via.str.size < 1 ||
        address->via.str.size > OQ_SHIPMENT_MAX_ADDRESS_LEN)
        S_FAIL("payload field \"address\" must be a string of 1 to %d bytes",
               OQ_SHIPMENT_MAX_ADDRESS_LEN);
    body = json_object();
    json_object_set_new(body, "order_id", json_integer((json_int_t)request->order_id));
    json_t *text = json_stringn(address->via.str.ptr, address->via.str.size);
    if (!text)
        S_FAIL("payload field \"address\" must be UTF-8 text");
    json_object_set_new(body, "address", text);
    const msgpack_object *items = oq_proto_map_get(payload, "items");
    if (items) {
        if (items->type != MSGPACK_OBJECT_ARRAY)
            S_FAIL("payload field \"items\" must be an array of {sku, qty}");
        json_t *list = json_array();
        json_object_set_new(body, "items", list);
        for (uint32_t i = 0; i < items->via.array.size; i++) {
            json_t *item = s_item(&items->via.array.ptr[i], i, why, why_len);
            if (!item)
                goto fail;
            json_array_append_new(list, item);
        }
    }
    request->body = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    if (!request->body)
        S_FAIL("payload cannot be written as JSON (a sku that is not UTF-8 text?)");
    json_decref(body);
    snprintf(request->key, sizeof request->key, OQ_SHIPMENT_KEY_PREFIX "%" PRId64,
             request->order_id);
    return 0;
fail:
    json_decref(body);
    oq_shipment_request_clear(request);
    return -1;
}

void oq_shipment_request_clear(oq_shipment_request_t *request)
{
    free(request->body);
    request->body = NULL;
}
