/*  wire_raw.c: hand-packed wire messages (wire_raw.h). */
#include "wire_raw.h"

#include "onceq/proto.h"

void oq_wire_raw_ready(msgpack_sbuffer *buf, const char *key, const char *name, size_t len)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    oq_proto_pack_cstr(&pk, "v");
    msgpack_pack_uint32(&pk, 1);
    oq_proto_pack_cstr(&pk, "cmd");
    oq_proto_pack_cstr(&pk, "ready");
    oq_proto_pack_cstr(&pk, "credit");
    msgpack_pack_uint32(&pk, 1);
    oq_proto_pack_cstr(&pk, key);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_str(&pk, len);
    msgpack_pack_str_body(&pk, name, len);
}
