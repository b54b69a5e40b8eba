/*  malformed.c: one builder per kind of damage; a kind is drawn uniformly.
    Where a kind wraps an otherwise valid message (bytes after it, two
    frames, nesting), that message is a ping on the front and a heartbeat on
    the back: harmless if it were ever taken as valid. */
#include "malformed.h"

#include <assert.h>
#include <string.h>

#include "onceq/limits.h"
#include "onceq/proto.h"

#define S_RANDOM_MAX_BYTES 64
#define S_RESERVED_BYTE    0xc1 /* never used by msgpack */
#define S_MAP32            0xdf
#define S_STR32            0xdb
#define S_OVERLONG_NAME    (OQ_MAX_NAME_LEN * 3)
#define S_DEPTH_BEYOND     (OQ_MAX_DEPTH + 8)
#define S_BAD_VERSION      99

typedef enum {
    S_RANDOM = 0,
    S_ARRAY,
    S_NO_VERSION,
    S_BAD_VERSION_KIND,
    S_UNKNOWN_CMD,
    S_MAP_TOO_LONG,
    S_STR_TOO_LONG,
    S_TOO_DEEP,
    S_TRAILING,
    S_TWO_FRAMES,
    S_EMPTY,
    S_WRONG_TYPES,
    S_NAME_TOO_LONG,
    S_KIND_COUNT
} s_kind_t;

static void s_head(msgpack_packer *pk, uint32_t pairs, uint64_t version, const char *cmd)
{
    msgpack_pack_map(pk, pairs);
    oq_proto_pack_cstr(pk, "v");
    msgpack_pack_uint64(pk, version);
    oq_proto_pack_cstr(pk, "cmd");
    oq_proto_pack_cstr(pk, cmd);
}

static const char *s_harmless(oq_malformed_socket_t socket)
{
    return socket == OQ_MALFORMED_FRONT ? "ping" : "heartbeat";
}

void oq_malformed_make(oq_rng_t *rng, oq_malformed_socket_t socket, msgpack_sbuffer *buf,
                       size_t *split)
{
    msgpack_sbuffer_clear(buf);
    *split = 0;
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    uint8_t bytes[S_RANDOM_MAX_BYTES];
    switch ((s_kind_t)oq_rng_below(rng, S_KIND_COUNT)) {
    case S_RANDOM: {
        size_t n = 1 + (size_t)oq_rng_below(rng, sizeof bytes);
        for (size_t i = 0; i < n; i++)
            bytes[i] = (uint8_t)oq_rng_next(rng);
        bytes[0] = S_RESERVED_BYTE; /* so that it can never be a map */
        msgpack_sbuffer_write(buf, (const char *)bytes, n);
        break;
    }
    case S_ARRAY:
        msgpack_pack_array(&pk, 3);
        msgpack_pack_uint64(&pk, 1);
        oq_proto_pack_cstr(&pk, "cmd");
        oq_proto_pack_cstr(&pk, s_harmless(socket));
        break;
    case S_NO_VERSION:
        msgpack_pack_map(&pk, 1);
        oq_proto_pack_cstr(&pk, "cmd");
        oq_proto_pack_cstr(&pk, s_harmless(socket));
        break;
    case S_BAD_VERSION_KIND:
        s_head(&pk, 2, S_BAD_VERSION, s_harmless(socket));
        break;
    case S_UNKNOWN_CMD:
        s_head(&pk, 2, OQ_PROTO_VERSION, "explode");
        break;
    case S_MAP_TOO_LONG: {
        const uint8_t head[] = {S_MAP32, 0x7f, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01};
        msgpack_sbuffer_write(buf, (const char *)head, sizeof head);
        break;
    }
    case S_STR_TOO_LONG: {
        const uint8_t head[] = {0x81, S_STR32, 0x7f, 0xff, 0xff, 0xff, 'c', 'm', 'd'};
        msgpack_sbuffer_write(buf, (const char *)head, sizeof head);
        break;
    }
    case S_TOO_DEEP:
        s_head(&pk, 3, OQ_PROTO_VERSION, s_harmless(socket));
        oq_proto_pack_cstr(&pk, "deep");
        for (int i = 0; i < S_DEPTH_BEYOND; i++)
            msgpack_pack_array(&pk, 1);
        msgpack_pack_nil(&pk);
        break;
    case S_TRAILING:
        s_head(&pk, 2, OQ_PROTO_VERSION, s_harmless(socket));
        msgpack_pack_nil(&pk);
        break;
    case S_TWO_FRAMES:
        s_head(&pk, 2, OQ_PROTO_VERSION, s_harmless(socket));
        *split = buf->size / 2;
        break;
    case S_EMPTY:
        break;
    case S_WRONG_TYPES:
        if (socket == OQ_MALFORMED_FRONT) {
            s_head(&pk, 3, OQ_PROTO_VERSION, "dispatch");
            oq_proto_pack_cstr(&pk, "job");
            msgpack_pack_uint64(&pk, 7);
        } else {
            /* Job id 0 is never a job's, and the outcome is not one. */
            s_head(&pk, 5, OQ_PROTO_VERSION, "ack");
            oq_proto_pack_cstr(&pk, "id");
            oq_proto_pack_cstr(&pk, "zero");
            oq_proto_pack_cstr(&pk, "attempt");
            msgpack_pack_uint64(&pk, 0);
            oq_proto_pack_cstr(&pk, "outcome");
            oq_proto_pack_cstr(&pk, "maybe");
        }
        break;
    case S_NAME_TOO_LONG: {
        char name[S_OVERLONG_NAME + 1];
        memset(name, 'x', S_OVERLONG_NAME);
        name[S_OVERLONG_NAME] = 0;
        /* A dispatch with a type over the limit: too_large, nothing queued.
           On the back, a heartbeat with an over-long field of no meaning. */
        s_head(&pk, 3, OQ_PROTO_VERSION,
               socket == OQ_MALFORMED_FRONT ? "dispatch" : s_harmless(socket));
        oq_proto_pack_cstr(&pk, socket == OQ_MALFORMED_FRONT ? "job" : "name");
        if (socket == OQ_MALFORMED_FRONT) {
            msgpack_pack_map(&pk, 1);
            oq_proto_pack_cstr(&pk, "type");
        }
        oq_proto_pack_cstr(&pk, name);
        break;
    }
    case S_KIND_COUNT:
        assert(false);
    }
}
