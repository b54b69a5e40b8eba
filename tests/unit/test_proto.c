/*  test_proto.c: the wire protocol v1 codec (common/src/proto.c) against
    docs/protocol.md. Every encoder round-trips through the decoder, and a
    table of malformed and out-of-range messages checks the error code each one
    gets.

    Most test messages are written in a small text notation and packed with
    msgpack-c's packer (s_pack_text):
        {v:1, cmd:'ping', req:7}     map; a bare word is a str
        [1, -2, 0.25, 0.5f]          array; int, negative int, float64, float32
        'x'*65                       a str repeated 65 times
        nil true false nan inf       the obvious values
    Inputs msgpack-c would never produce (truncated, reserved bytes, lying
    lengths) are raw bytes. Framing (REQ's empty delimiter, several frames) is
    the broker's business: the codec sees exactly one frame. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "onceq/limits.h"
#include "onceq/proto.h"
#include "wire_raw.h"

/* ---- the text notation --------------------------------------------------- */

typedef struct {
    const char *p;
} s_text_t;

static void s_skip_blanks(s_text_t *t)
{
    while (*t->p == ' ' || *t->p == '\n')
        t->p++;
}

static int s_is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static void s_pack_value(s_text_t *t, msgpack_packer *pk);

/* Pack the elements of a map or an array into a buffer of their own first,
   counting them, since msgpack wants the count before the elements. */
static void s_pack_container(s_text_t *t, msgpack_packer *pk, char close, bool map)
{
    msgpack_sbuffer inner;
    msgpack_sbuffer_init(&inner);
    msgpack_packer ipk;
    msgpack_packer_init(&ipk, &inner, msgpack_sbuffer_write);
    uint32_t n = 0;
    s_skip_blanks(t);
    while (*t->p != close) {
        s_pack_value(t, &ipk);
        s_skip_blanks(t);
        if (map) {
            if (*t->p != ':')
                fail_msg("text notation: ':' expected at \"%s\"", t->p);
            t->p++;
            s_pack_value(t, &ipk);
            s_skip_blanks(t);
        }
        n++;
        if (*t->p == ',') {
            t->p++;
            s_skip_blanks(t);
        } else if (*t->p != close) {
            fail_msg("text notation: ',' or '%c' expected at \"%s\"", close, t->p);
        }
    }
    t->p++;
    if (map)
        msgpack_pack_map(pk, n);
    else
        msgpack_pack_array(pk, n);
    msgpack_sbuffer_write(pk->data, inner.data, inner.size);
    msgpack_sbuffer_destroy(&inner);
}

static void s_pack_value(s_text_t *t, msgpack_packer *pk)
{
    s_skip_blanks(t);
    char c = *t->p;
    if (c == '{' || c == '[') {
        t->p++;
        s_pack_container(t, pk, c == '{' ? '}' : ']', c == '{');
    } else if (c == '\'') {
        const char *start = ++t->p;
        while (*t->p && *t->p != '\'')
            t->p++;
        size_t len = (size_t)(t->p - start);
        t->p++;
        unsigned long times = 1;
        if (*t->p == '*') {
            char *end;
            times = strtoul(t->p + 1, &end, 10);
            t->p = end;
        }
        msgpack_pack_str(pk, len * times);
        for (unsigned long k = 0; k < times; k++)
            msgpack_pack_str_body(pk, start, len);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        const char *start = t->p;
        char *end;
        bool is_float = false;
        for (const char *q = start + 1; *q == '.' || (*q >= '0' && *q <= '9') || *q == 'e'; q++)
            is_float |= *q == '.' || *q == 'e';
        if (is_float) {
            double d = strtod(start, &end);
            if (*end == 'f') {
                msgpack_pack_float(pk, (float)d);
                end++;
            } else {
                msgpack_pack_double(pk, d);
            }
        } else if (c == '-') {
            msgpack_pack_int64(pk, strtoll(start, &end, 10));
        } else {
            msgpack_pack_uint64(pk, strtoull(start, &end, 10));
        }
        t->p = end;
    } else if (s_is_word(c)) {
        const char *start = t->p;
        while (s_is_word(*t->p))
            t->p++;
        size_t len = (size_t)(t->p - start);
        if (len == 3 && memcmp(start, "nil", 3) == 0)
            msgpack_pack_nil(pk);
        else if (len == 4 && memcmp(start, "true", 4) == 0)
            msgpack_pack_true(pk);
        else if (len == 5 && memcmp(start, "false", 5) == 0)
            msgpack_pack_false(pk);
        else if (len == 3 && memcmp(start, "nan", 3) == 0)
            msgpack_pack_double(pk, NAN);
        else if (len == 3 && memcmp(start, "inf", 3) == 0)
            msgpack_pack_double(pk, INFINITY);
        else {
            msgpack_pack_str(pk, len);
            msgpack_pack_str_body(pk, start, len);
        }
    } else {
        fail_msg("text notation: unexpected \"%s\"", t->p);
    }
}

/* Append the msgpack for text to buf. */
static void s_pack_text(msgpack_sbuffer *buf, const char *text)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    s_text_t t = {text};
    s_pack_value(&t, &pk);
    s_skip_blanks(&t);
    if (*t.p)
        fail_msg("text notation: trailing \"%s\"", t.p);
}

/* ---- helpers ------------------------------------------------------------- */

/* Decode buf, which must succeed. */
static void s_decode_ok(oq_msg_t *msg, const msgpack_sbuffer *buf)
{
    oq_err_t code = OQ_ERR_INTERNAL;
    char why[256] = "unset";
    int rc = oq_proto_decode(msg, buf->data, buf->size, &code, why, sizeof why);
    if (rc != 0)
        fail_msg("decode failed: %s: %s", oq_proto_err_name(code), why);
    assert_int_equal(code, OQ_ERR_NONE);
    assert_string_equal(why, "");
}

/* Decode the text notation, which must succeed. */
static void s_decode_text_ok(oq_msg_t *msg, const char *text)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    s_pack_text(&buf, text);
    s_decode_ok(msg, &buf);
    msgpack_sbuffer_destroy(&buf);
}

/* Decode data, which must fail with code and a reason; release twice. */
static void s_decode_bad(const char *what, const void *data, size_t size, oq_err_t want)
{
    oq_msg_t msg;
    oq_err_t code = OQ_ERR_NONE;
    char why[256];
    memset(why, 'Z', sizeof why);
    int rc = oq_proto_decode(&msg, data, size, &code, why, sizeof why);
    if (rc != -1 || code != want)
        fail_msg("%s: want %s, got rc %d code %s (%s)", what, oq_proto_err_name(want), rc,
                 oq_proto_err_name(code), rc == 0 ? "" : why);
    assert_non_null(memchr(why, 0, sizeof why));
    if (strlen(why) == 0)
        fail_msg("%s: empty reason", what);
    oq_proto_msg_release(&msg);
    oq_proto_msg_release(&msg);
}

/* Decode the text notation, which must fail with code. */
static void s_decode_bad_text(const char *text, oq_err_t want)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    s_pack_text(&buf, text);
    s_decode_bad(text, buf.data, buf.size, want);
    msgpack_sbuffer_destroy(&buf);
}

static void s_str_equal(oq_str_t s, const char *want)
{
    if (!oq_str_eq(s, want))
        fail_msg("\"%.*s\" != \"%s\"", (int)s.len, s.ptr ? s.ptr : "", want);
}

/* ---- round trips ---------------------------------------------------------- */

/* 64 bytes: every character a name may hold. */
static const char s_type64[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX0123456789_.:-";

/* A payload using every msgpack type the packer writes. */
static void s_pack_payload(msgpack_sbuffer *buf)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9);
    oq_proto_pack_cstr(&pk, "user");
    msgpack_pack_uint64(&pk, 42);
    oq_proto_pack_cstr(&pk, "big");
    msgpack_pack_uint64(&pk, UINT64_MAX);
    oq_proto_pack_cstr(&pk, "neg");
    msgpack_pack_int64(&pk, INT64_MIN);
    oq_proto_pack_cstr(&pk, "ratio");
    msgpack_pack_double(&pk, 0.5);
    oq_proto_pack_cstr(&pk, "f32");
    msgpack_pack_float(&pk, 1.25f);
    oq_proto_pack_cstr(&pk, "nothing");
    msgpack_pack_nil(&pk);
    oq_proto_pack_cstr(&pk, "blob");
    msgpack_pack_bin(&pk, 3);
    msgpack_pack_bin_body(&pk, "\x00\xff\x01", 3);
    oq_proto_pack_cstr(&pk, "ext");
    msgpack_pack_ext(&pk, 2, 7);
    msgpack_pack_ext_body(&pk, "ab", 2);
    oq_proto_pack_cstr(&pk, "nested");
    msgpack_pack_array(&pk, 3);
    msgpack_pack_true(&pk);
    msgpack_pack_map(&pk, 1);
    oq_proto_pack_cstr(&pk, "utf8");
    oq_proto_pack_cstr(&pk, "gr\xc3\xbc\xc3\x9f");
    msgpack_pack_array(&pk, 0);
}

static void test_roundtrip_dispatch_all_fields(void **state)
{
    msgpack_sbuffer payload, buf;
    msgpack_sbuffer_init(&payload);
    msgpack_sbuffer_init(&buf);
    s_pack_payload(&payload);

    oq_job_msg_t job = {
        .type = oq_str(s_type64),
        .queue = oq_str("emails.high-1:x_y"),
        .payload = (const uint8_t *)payload.data,
        .payload_len = payload.size,
        .max_tries = OQ_MAX_TRIES_LIMIT,
        .backoff_ms = {250, 10000, 90500, OQ_MAX_BACKOFF_MS},
        .backoff_len = 4,
        .timeout_ms = 250,
        .delay_ms = 1500,
        .priority = -OQ_MAX_PRIORITY,
        .has_max_tries = true,
        .has_timeout = true,
        .has_delay = true,
        .has_priority = true,
    };
    oq_proto_encode_dispatch(&buf, 7, &job);

    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_DISPATCH);
    assert_true(msg.has_req);
    assert_int_equal(msg.req, 7);
    const oq_job_msg_t *j = &msg.job;
    assert_int_equal(j->id, 0);
    s_str_equal(j->type, s_type64);
    s_str_equal(j->queue, "emails.high-1:x_y");
    assert_int_equal(j->payload_len, payload.size);
    assert_memory_equal(j->payload, payload.data, payload.size);
    assert_true(j->has_max_tries);
    assert_int_equal(j->max_tries, OQ_MAX_TRIES_LIMIT);
    assert_true(j->has_timeout);
    assert_int_equal(j->timeout_ms, 250);
    assert_true(j->has_delay);
    assert_int_equal(j->delay_ms, 1500);
    assert_true(j->has_priority);
    assert_int_equal(j->priority, -OQ_MAX_PRIORITY);
    assert_int_equal(j->backoff_len, 4);
    assert_int_equal(j->backoff_ms[0], 250);
    assert_int_equal(j->backoff_ms[1], 10000);
    assert_int_equal(j->backoff_ms[2], 90500);
    assert_int_equal(j->backoff_ms[3], OQ_MAX_BACKOFF_MS);

    /* The wire form uses seconds, with a fraction where needed. */
    const msgpack_object *wj = oq_proto_map_get(&msg.root, "job");
    const msgpack_object *wt = oq_proto_map_get(wj, "timeout");
    assert_non_null(wt);
    assert_int_equal(wt->type, MSGPACK_OBJECT_FLOAT64);
    assert_true(wt->via.f64 == 0.25);
    const msgpack_object *wd = oq_proto_map_get(wj, "delay");
    assert_true(wd->via.f64 == 1.5);
    const msgpack_object *wb = oq_proto_map_get(wj, "backoff");
    assert_int_equal(wb->via.array.ptr[1].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    assert_int_equal(wb->via.array.ptr[1].via.u64, 10);

    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
    msgpack_sbuffer_destroy(&payload);
}

/* Batches and chains on the wire: a producer's dispatch_id may not take the
   broker's own names for callbacks and links; the batch and chain fields
   are checked before anything reaches the engine. */
static void test_batch_and_chain_fields(void **state)
{
    (void)state;
    const char *reserved[] = {"batch:3:then", "chain:3:2"};
    for (size_t i = 0; i < 2; i++) {
        msgpack_sbuffer buf;
        msgpack_sbuffer_init(&buf);
        oq_job_msg_t job = {.type = oq_str("noop"), .dispatch_id = oq_str(reserved[i])};
        oq_proto_encode_dispatch(&buf, 1, &job);
        s_decode_bad(reserved[i], buf.data, buf.size, OQ_ERR_BAD_REQUEST);
        msgpack_sbuffer_destroy(&buf);
    }
    s_decode_bad_text("{v:1, cmd:dispatch, req:1, job:{type:noop}, chain:7}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:dispatch, req:1, job:{type:noop}, chain:[3]}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:dispatch, req:1, job:{type:noop}, chain_catch:[]}",
                      OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:dispatch_batch, req:1}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:dispatch_batch, req:1, jobs:[]}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:dispatch_batch, req:1, jobs:[1]}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:dispatch_batch, req:1, jobs:[{type:noop}], then:3}",
                      OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:dispatch_batch, req:1, jobs:[{type:noop}], allow_failures:1}",
                      OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:batch, req:1, op:drop, id:3}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:batch, req:1, op:show}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:chain, req:1}", OQ_ERR_BAD_REQUEST);
    oq_msg_t msg;
    s_decode_text_ok(&msg, "{v:1, cmd:dispatch_batch, req:1, dispatch_id:import7, "
                           "jobs:[{type:noop}, {type:noop}], then:{type:bonus}, "
                           "allow_failures:true}");
    assert_int_equal(oq_proto_entry_count(&msg), 2);
    assert_non_null(msg.callbacks[0]);
    assert_null(msg.callbacks[1]);
    assert_true(msg.allow_failures);
    oq_proto_msg_release(&msg);
    s_decode_text_ok(&msg, "{v:1, cmd:dispatch, req:1, job:{type:noop}, chain:[{type:ship}], "
                           "chain_catch:{type:alert}}");
    assert_non_null(msg.chain);
    assert_non_null(msg.chain_catch);
    oq_proto_msg_release(&msg);
    s_decode_text_ok(&msg, "{v:1, cmd:batch, req:1, op:list}");
    oq_proto_msg_release(&msg);
}

static void test_roundtrip_dispatch_id_and_requeue(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_job_msg_t job = {.type = oq_str("noop"), .dispatch_id = oq_str("order-42:grant")};
    oq_proto_encode_dispatch(&buf, 3, &job);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_DISPATCH);
    s_str_equal(msg.job.dispatch_id, "order-42:grant");
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    /* None given: none on the wire, none decoded. */
    job.dispatch_id = oq_str(NULL);
    oq_proto_encode_dispatch(&buf, 3, &job);
    s_decode_ok(&msg, &buf);
    assert_null(oq_proto_map_get(&msg.root, "dispatch_id"));
    assert_int_equal(msg.job.dispatch_id.len, 0);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    oq_proto_encode_requeue(&buf, OQ_CMD_REQUEUE, 4, 99);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_REQUEUE);
    assert_int_equal(msg.id, 99);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_requeue(&buf, OQ_CMD_REQUEUED, 4, 99);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_REQUEUED);
    assert_int_equal(msg.id, 99);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);

    assert_true(oq_proto_dispatch_id_valid("a", 1));
    assert_false(oq_proto_dispatch_id_valid("a\x7f", 2));
    assert_string_equal(oq_proto_err_name(OQ_ERR_UNAVAILABLE), "unavailable");
    assert_string_equal(oq_proto_err_name(OQ_ERR_FORBIDDEN), "forbidden");
}

static void test_roundtrip_dispatch_wait(void **state)
{
    (void)state;
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_job_msg_t job = {.type = oq_str("noop"), .dispatch_id = oq_str("d-1")};
    oq_proto_encode_dispatch_wait(&buf, 3, &job, 2500);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_DISPATCH);
    assert_true(msg.has_wait);
    assert_int_equal(msg.wait_ms, 2500);
    s_str_equal(msg.job.dispatch_id, "d-1");
    s_str_equal(msg.job.type, "noop");
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    /* 0 only asks; past the limit it is cut to it */
    oq_proto_encode_dispatch_wait(&buf, 3, &job, 0);
    s_decode_ok(&msg, &buf);
    assert_true(msg.has_wait);
    assert_int_equal(msg.wait_ms, 0);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_dispatch_wait(&buf, 3, &job, OQ_MAX_WAIT_MS + 1);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.wait_ms, OQ_MAX_WAIT_MS);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    /* a plain dispatch has none */
    oq_proto_encode_dispatch(&buf, 3, &job);
    s_decode_ok(&msg, &buf);
    assert_false(msg.has_wait);
    assert_null(oq_proto_map_get(&msg.root, "wait"));
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
}

static void test_roundtrip_dispatch_defaults(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_job_msg_t job = {.type = oq_str("noop")};
    oq_proto_encode_dispatch(&buf, -1, &job);

    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_DISPATCH);
    assert_false(msg.has_req);
    s_str_equal(msg.job.type, "noop");
    s_str_equal(msg.job.queue, OQ_DEFAULT_QUEUE);
    assert_int_equal(msg.job.payload_len, 1);
    assert_int_equal(msg.job.payload[0], 0x80); /* {} */
    assert_false(msg.job.has_max_tries);
    assert_false(msg.job.has_timeout);
    assert_false(msg.job.has_delay);
    assert_false(msg.job.has_priority);
    assert_int_equal(msg.job.priority, 0);
    assert_int_equal(msg.job.backoff_len, 0);
    oq_proto_msg_release(&msg);

    /* Hand-written with the optional keys absent or nil: the same defaults. */
    s_decode_text_ok(&msg, "{v:1, cmd:dispatch, job:{type:noop, payload:nil}}");
    s_str_equal(msg.job.queue, OQ_DEFAULT_QUEUE);
    assert_non_null(msg.job.payload);
    assert_int_equal(msg.job.payload_len, 1);
    assert_int_equal(msg.job.payload[0], 0x80);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
}

static void test_roundtrip_job_delivery(void **state)
{
    msgpack_sbuffer payload, buf;
    msgpack_sbuffer_init(&payload);
    msgpack_sbuffer_init(&buf);
    s_pack_payload(&payload);
    oq_job_msg_t job = {
        .id = UINT64_MAX,
        .type = oq_str("grant_points"),
        .queue = oq_str("rewards"),
        .payload = (const uint8_t *)payload.data,
        .payload_len = payload.size,
        .attempt = 3,
        .max_tries = 5,
        .backoff_ms = {1000, 60000},
        .backoff_len = 2,
        .timeout_ms = 60000,
    };
    oq_proto_encode_job(&buf, &job);

    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_JOB);
    assert_false(msg.has_req);
    assert_true(msg.job.id == UINT64_MAX);
    assert_int_equal(msg.job.attempt, 3);
    assert_true(msg.job.has_max_tries);
    assert_int_equal(msg.job.max_tries, 5);
    assert_true(msg.job.has_timeout);
    assert_int_equal(msg.job.timeout_ms, 60000);
    s_str_equal(msg.job.type, "grant_points");
    s_str_equal(msg.job.queue, "rewards");
    assert_int_equal(msg.job.payload_len, payload.size);
    assert_memory_equal(msg.job.payload, payload.data, payload.size);
    assert_int_equal(msg.job.backoff_len, 2);
    assert_int_equal(msg.job.backoff_ms[0], 1000);
    assert_int_equal(msg.job.backoff_ms[1], 60000);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
    msgpack_sbuffer_destroy(&payload);
}

static void test_roundtrip_dispatched(void **state)
{
    const uint64_t ids[] = {1, 1042, UINT64_MAX};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        msgpack_sbuffer buf;
        msgpack_sbuffer_init(&buf);
        oq_proto_encode_dispatched(&buf, INT64_MAX, ids[k]);
        oq_msg_t msg;
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, OQ_CMD_DISPATCHED);
        assert_true(msg.has_req);
        assert_true(msg.req == (uint64_t)INT64_MAX);
        assert_true(msg.id == ids[k]);
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_destroy(&buf);
    }
}

static void test_roundtrip_error(void **state)
{
    for (int c = OQ_ERR_MALFORMED; c < OQ_ERR_COUNT_; c++) {
        msgpack_sbuffer buf;
        msgpack_sbuffer_init(&buf);
        oq_proto_encode_error(&buf, c, (oq_err_t)c, "job timeout 90 s is not shorter");
        oq_msg_t msg;
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, OQ_CMD_ERROR);
        assert_true(msg.has_req);
        assert_int_equal(msg.req, c);
        assert_int_equal(msg.err_code, c);
        s_str_equal(msg.err_text, "job timeout 90 s is not shorter");
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_destroy(&buf);
    }

    /* A text over the limit is cut to it on the way out, so it still decodes. */
    char long_text[OQ_MAX_ERROR_LEN + 100];
    memset(long_text, 'e', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = 0;
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_error(&buf, -1, OQ_ERR_BAD_REQUEST, long_text);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_false(msg.has_req);
    assert_int_equal(msg.err_code, OQ_ERR_BAD_REQUEST);
    assert_int_equal(msg.err_text.len, OQ_MAX_ERROR_LEN);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);

    /* A code this codec does not know reads as internal, not as success. */
    s_decode_text_ok(&msg, "{v:1, cmd:error, code:'from_the_future', message:'x'}");
    assert_int_equal(msg.err_code, OQ_ERR_INTERNAL);
    oq_proto_msg_release(&msg);
}

static void test_roundtrip_simple(void **state)
{
    const oq_cmd_t cmds[] = {OQ_CMD_STATS,     OQ_CMD_PING,  OQ_CMD_PONG,
                             OQ_CMD_HEARTBEAT, OQ_CMD_DRAIN, OQ_CMD_DISCONNECT};
    const int64_t reqs[] = {-1, 0, 10, INT64_MAX};
    for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++) {
        for (size_t r = 0; r < sizeof reqs / sizeof reqs[0]; r++) {
            msgpack_sbuffer buf;
            msgpack_sbuffer_init(&buf);
            oq_proto_encode_simple(&buf, cmds[k], reqs[r]);
            oq_msg_t msg;
            s_decode_ok(&msg, &buf);
            assert_int_equal(msg.cmd, cmds[k]);
            assert_int_equal(msg.has_req, reqs[r] >= 0);
            if (reqs[r] >= 0)
                assert_true(msg.req == (uint64_t)reqs[r]);
            assert_int_equal(msg.root.type, MSGPACK_OBJECT_MAP);
            assert_int_equal(msg.root.via.map.size, reqs[r] >= 0 ? 3 : 2);
            oq_proto_msg_release(&msg);
            msgpack_sbuffer_destroy(&buf);
        }
    }
}

static void test_roundtrip_failed_request(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_failed_request(&buf, 9, "mail", OQ_MAX_FAILED_LIST);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_FAILED);
    assert_int_equal(msg.req, 9);
    s_str_equal(msg.name, "mail");
    assert_int_equal(msg.limit, OQ_MAX_FAILED_LIST);
    oq_proto_msg_release(&msg);

    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_failed_request(&buf, 10, NULL, 1);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_FAILED);
    assert_null(msg.name.ptr);
    assert_int_equal(msg.limit, 1);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);

    /* Without a limit: the documented default. */
    s_decode_text_ok(&msg, "{v:1, cmd:failed, req:3}");
    assert_int_equal(msg.limit, OQ_DEFAULT_FAILED_LIST);
    oq_proto_msg_release(&msg);

    /* The reply (with "jobs") is the same command and passes through. */
    s_decode_text_ok(&msg, "{v:1, cmd:failed, req:3, total:0, jobs:[]}");
    assert_int_equal(msg.cmd, OQ_CMD_FAILED);
    assert_non_null(oq_proto_map_get(&msg.root, "jobs"));
    oq_proto_msg_release(&msg);
}

/* wait and waited: a job id and a timeout in seconds (the default when
   absent), the end state by name with the job's error. */
static void test_roundtrip_wait(void **state)
{
    (void)state;
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_msg_t msg;
    oq_proto_encode_wait(&buf, 9, 42, 2500);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_WAIT);
    assert_int_equal(msg.req, 9);
    assert_int_equal(msg.id, 42);
    assert_int_equal(msg.wait_ms, 2500);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    s_decode_text_ok(&msg, "{v:1, cmd:wait, req:1, id:3}");
    assert_int_equal(msg.wait_ms, OQ_DEFAULT_WAIT_MS);
    oq_proto_msg_release(&msg);
    s_decode_text_ok(&msg, "{v:1, cmd:wait, req:1, id:3, timeout:0}");
    assert_int_equal(msg.wait_ms, 0);
    oq_proto_msg_release(&msg);
    s_decode_bad_text("{v:1, cmd:wait, req:1}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:wait, req:1, id:0}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:wait, req:1, id:-3}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:wait, req:1, id:3, timeout:-1}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:wait, req:1, id:3, timeout:3601}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:wait, req:1, id:3, timeout:soon}", OQ_ERR_BAD_REQUEST);

    const oq_wait_state_t states[] = {OQ_WAIT_PENDING, OQ_WAIT_DONE, OQ_WAIT_FAILED, OQ_WAIT_REVIEW,
                                      OQ_WAIT_CANCELLED};
    for (size_t i = 0; i < sizeof states / sizeof *states; i++) {
        oq_proto_encode_waited(&buf, 4, 42, states[i], states[i] == OQ_WAIT_FAILED ? "boom" : NULL);
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, OQ_CMD_WAITED);
        assert_int_equal(msg.id, 42);
        assert_int_equal(msg.wait_state, states[i]);
        if (states[i] == OQ_WAIT_FAILED)
            s_str_equal(msg.err_text, "boom");
        else
            assert_null(msg.err_text.ptr);
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_clear(&buf);
    }
    s_decode_bad_text("{v:1, cmd:waited, req:1, id:3, state:finished}", OQ_ERR_BAD_REQUEST);
    msgpack_sbuffer_destroy(&buf);
}

/* The admin commands on the failed store and waiting jobs, and the failed
   list's whole cursor. */
static void test_roundtrip_store_commands(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_msg_t msg;
    const oq_cmd_t with_id[] = {OQ_CMD_FORGET, OQ_CMD_FORGOTTEN, OQ_CMD_CANCEL, OQ_CMD_CANCELLED};
    for (size_t i = 0; i < sizeof with_id / sizeof with_id[0]; i++) {
        oq_proto_encode_job_id(&buf, with_id[i], 5, 41);
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, with_id[i]);
        assert_int_equal(msg.req, 5);
        assert_int_equal(msg.id, 41);
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_clear(&buf);
    }
    s_decode_bad_text("{v:1, cmd:forget, req:1}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:cancel, req:1, id:0}", OQ_ERR_BAD_REQUEST);

    const oq_cmd_t with_queue[] = {OQ_CMD_FLUSH, OQ_CMD_REQUEUE_ALL};
    for (size_t i = 0; i < 2; i++) {
        oq_proto_encode_queue_op(&buf, with_queue[i], 6, "mail");
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, with_queue[i]);
        s_str_equal(msg.name, "mail");
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_clear(&buf);
        oq_proto_encode_queue_op(&buf, with_queue[i], 6, NULL);
        s_decode_ok(&msg, &buf);
        assert_null(msg.name.ptr);
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_clear(&buf);
    }
    s_decode_bad_text("{v:1, cmd:flush, req:1, queue:'a b'}", OQ_ERR_BAD_REQUEST);

    const oq_cmd_t with_count[] = {OQ_CMD_FLUSHED, OQ_CMD_REQUEUED_ALL};
    for (size_t i = 0; i < 2; i++) {
        oq_proto_encode_count(&buf, with_count[i], 7, 123456);
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, with_count[i]);
        assert_int_equal(msg.count, 123456);
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_clear(&buf);
    }
    s_decode_bad_text("{v:1, cmd:flushed, req:1}", OQ_ERR_BAD_REQUEST);

    /* prune_failed: an age in seconds, within its bounds; a limit within
       its, the broker's maximum when absent. */
    oq_proto_encode_prune_failed(&buf, 10, "mail", 7LL * 24 * 3600 * 1000, 5);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_PRUNE_FAILED);
    s_str_equal(msg.name, "mail");
    assert_int_equal(msg.wait_ms, 7LL * 24 * 3600 * 1000);
    assert_int_equal(msg.limit, 5);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_prune_failed(&buf, 10, NULL, OQ_MIN_PRUNE_AGE_MS, 0);
    s_decode_ok(&msg, &buf);
    assert_null(msg.name.ptr);
    assert_int_equal(msg.wait_ms, OQ_MIN_PRUNE_AGE_MS);
    assert_int_equal(msg.limit, OQ_MAX_PRUNE_PER_CALL);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    s_decode_text_ok(&msg, "{v:1, cmd:prune_failed, older_than:1.5}");
    assert_int_equal(msg.wait_ms, 1500);
    oq_proto_msg_release(&msg);
    s_decode_bad_text("{v:1, cmd:prune_failed, req:1}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:prune_failed, req:1, older_than:0}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:prune_failed, req:1, older_than:0.5}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:prune_failed, req:1, older_than:-1}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:prune_failed, req:1, older_than:'7d'}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:prune_failed, req:1, older_than:315360001}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:prune_failed, req:1, older_than:60, limit:0}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:prune_failed, req:1, older_than:60, limit:1001}",
                      OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:prune_failed, req:1, older_than:60, queue:'a b'}",
                      OQ_ERR_BAD_REQUEST);
    for (int more = 0; more < 2; more++) {
        oq_proto_encode_pruned_failed(&buf, 11, 1000, more);
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, OQ_CMD_PRUNED_FAILED);
        assert_int_equal(msg.count, 1000);
        const msgpack_object *m = oq_proto_map_get(&msg.root, "more");
        assert_non_null(m);
        assert_int_equal(m->via.boolean, more);
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_clear(&buf);
    }
    s_decode_bad_text("{v:1, cmd:pruned_failed, req:1, count:3, more:1}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:pruned_failed, req:1, more:false}", OQ_ERR_BAD_REQUEST);

    /* clear: a queue, required and valid; a limit within its bounds, the
       broker's maximum when absent; cleared as pruned_failed. */
    oq_proto_encode_clear(&buf, 12, "mail", 5);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_CLEAR);
    s_str_equal(msg.name, "mail");
    assert_int_equal(msg.limit, 5);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_clear(&buf, 12, "mail", 0);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.limit, OQ_MAX_CLEAR_PER_CALL);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    s_decode_bad_text("{v:1, cmd:clear, req:1}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:clear, req:1, queue:''}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:clear, req:1, queue:'a b'}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:clear, req:1, queue:7}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:clear, req:1, queue:mail, limit:0}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:clear, req:1, queue:mail, limit:1001}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:clear, req:1, queue:mail, limit:-1}", OQ_ERR_BAD_REQUEST);
    for (int more = 0; more < 2; more++) {
        oq_proto_encode_cleared(&buf, 13, 1000, more);
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, OQ_CMD_CLEARED);
        assert_int_equal(msg.count, 1000);
        const msgpack_object *m = oq_proto_map_get(&msg.root, "more");
        assert_non_null(m);
        assert_int_equal(m->via.boolean, more);
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_clear(&buf);
    }
    s_decode_bad_text("{v:1, cmd:cleared, req:1, count:3, more:1}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:cleared, req:1, more:false}", OQ_ERR_BAD_REQUEST);

    oq_proto_encode_simple(&buf, OQ_CMD_HORIZON, 8);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_HORIZON);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    oq_proto_encode_failed_cursor(&buf, 9, NULL, 1700000000123LL, 77, 10);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.after, 77);
    assert_true(msg.has_after_at);
    assert_int_equal(msg.after_at, 1700000000123LL);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_failed_page(&buf, 9, NULL, 77, 10);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.after, 77);
    assert_false(msg.has_after_at);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);

    assert_string_equal(oq_proto_err_name(OQ_ERR_NOT_FOUND), "not_found");
    assert_string_equal(oq_proto_err_name(OQ_ERR_WRONG_STATE), "wrong_state");
}

static void test_roundtrip_ready(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready(&buf, OQ_MAX_CREDIT, "host-1.example:4711", UINT32_MAX);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_READY);
    assert_false(msg.has_req);
    assert_int_equal(msg.credit, OQ_MAX_CREDIT);
    assert_true(msg.pid == UINT32_MAX);
    s_str_equal(msg.name, "host-1.example:4711");
    oq_proto_msg_release(&msg);

    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_ready(&buf, 0, NULL, 123);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.credit, 0);
    assert_int_equal(msg.pid, 123);
    assert_null(msg.name.ptr);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
}

static void test_roundtrip_welcome(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_welcome(&buf, OQ_DEFAULT_HEARTBEAT_MS, OQ_DEFAULT_LIVENESS);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_WELCOME);
    assert_int_equal(msg.heartbeat_ms, OQ_DEFAULT_HEARTBEAT_MS);
    assert_int_equal(msg.liveness, OQ_DEFAULT_LIVENESS);
    oq_proto_msg_release(&msg);

    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_welcome(&buf, OQ_MIN_HEARTBEAT_MS, 1);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.heartbeat_ms, OQ_MIN_HEARTBEAT_MS);
    assert_int_equal(msg.liveness, 1);
    oq_proto_msg_release(&msg);

    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_welcome(&buf, OQ_MAX_HEARTBEAT_MS, 3);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.heartbeat_ms, OQ_MAX_HEARTBEAT_MS);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
}

static void test_roundtrip_ack_result(void **state)
{
    const oq_result_t results[] = {OQ_RESULT_NONE, OQ_RESULT_APPLIED, OQ_RESULT_ALREADY_APPLIED};
    for (size_t k = 0; k < 3; k++) {
        oq_ack_msg_t ack = {.id = 1042 + k,
                            .attempt = 2,
                            .outcome = OQ_OUTCOME_OK,
                            .result = results[k],
                            .credit = 1};
        msgpack_sbuffer buf;
        msgpack_sbuffer_init(&buf);
        oq_proto_encode_ack(&buf, &ack);
        oq_msg_t msg;
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, OQ_CMD_ACK);
        assert_int_equal(msg.ack.id, 1042 + k);
        assert_int_equal(msg.ack.attempt, 2);
        assert_int_equal(msg.ack.outcome, OQ_OUTCOME_OK);
        assert_int_equal(msg.ack.result, results[k]);
        assert_int_equal(msg.ack.credit, 1);
        assert_int_equal(msg.ack.error.len, 0);
        assert_int_equal(oq_proto_map_get(&msg.root, "result") != NULL,
                         results[k] != OQ_RESULT_NONE);
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_destroy(&buf);
    }
}

static void test_roundtrip_ack_error(void **state)
{
    const oq_outcome_t outcomes[] = {OQ_OUTCOME_RETRY, OQ_OUTCOME_FAIL, OQ_OUTCOME_TIMEOUT};
    char max_text[OQ_MAX_ERROR_LEN + 1];
    memset(max_text, 'x', OQ_MAX_ERROR_LEN);
    max_text[OQ_MAX_ERROR_LEN] = 0;
    for (size_t k = 0; k < 3; k++) {
        const char *text = k == 1 ? max_text : "SMTP 451: try later";
        oq_ack_msg_t ack = {.id = UINT64_MAX,
                            .attempt = UINT32_MAX,
                            .outcome = outcomes[k],
                            .error = oq_str(text),
                            .credit = 0};
        msgpack_sbuffer buf;
        msgpack_sbuffer_init(&buf);
        oq_proto_encode_ack(&buf, &ack);
        oq_msg_t msg;
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, OQ_CMD_ACK);
        assert_true(msg.ack.id == UINT64_MAX);
        assert_true(msg.ack.attempt == UINT32_MAX);
        assert_int_equal(msg.ack.outcome, outcomes[k]);
        assert_int_equal(msg.ack.result, OQ_RESULT_NONE);
        assert_int_equal(msg.ack.credit, 0);
        s_str_equal(msg.ack.error, text);
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_destroy(&buf);
    }
}

/* The outcome "review" carries its reason like fail, and the review store's
   admin commands round-trip with their fields. */
static void test_roundtrip_review(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_ack_msg_t ack = {.id = 7,
                        .attempt = 3,
                        .outcome = OQ_OUTCOME_REVIEW,
                        .error = oq_str("carrier: timed out after the request went out"),
                        .credit = 1,
                        .lease = 9,
                        .has_lease = true};
    oq_proto_encode_ack(&buf, &ack);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.ack.outcome, OQ_OUTCOME_REVIEW);
    s_str_equal(msg.ack.error, "carrier: timed out after the request went out");
    assert_string_equal(oq_proto_outcome_name(OQ_OUTCOME_REVIEW), "review");
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    oq_proto_encode_review_page(&buf, 3, "ships", -1, 40, 25);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_REVIEW);
    s_str_equal(msg.name, "ships");
    assert_int_equal(msg.after, 40);
    assert_int_equal(msg.limit, 25);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    oq_proto_encode_review_show(&buf, 4, 42);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_REVIEW_SHOW);
    assert_int_equal(msg.id, 42);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    const oq_review_action_t actions[] = {OQ_REVIEW_DONE, OQ_REVIEW_RETRY, OQ_REVIEW_FAIL};
    const char *names[] = {"done", "retry", "fail"};
    for (int k = 0; k < 3; k++) {
        oq_proto_encode_resolve(&buf, k == 1 ? OQ_CMD_RESOLVED : OQ_CMD_RESOLVE, 5, 42, actions[k],
                                k == 2 ? NULL : "checked with the carrier: SHP-000042");
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, k == 1 ? OQ_CMD_RESOLVED : OQ_CMD_RESOLVE);
        assert_int_equal(msg.id, 42);
        oq_review_action_t action;
        oq_str_t note;
        assert_int_equal(oq_proto_resolve_get(&msg, &action, &note), 0);
        assert_int_equal(action, actions[k]);
        s_str_equal(note, k == 2 ? "" : "checked with the carrier: SHP-000042");
        assert_string_equal(oq_proto_review_action_name(actions[k]), names[k]);
        oq_review_action_t parsed;
        assert_int_equal(oq_proto_review_action_parse(names[k], strlen(names[k]), &parsed), 0);
        assert_int_equal(parsed, actions[k]);
        oq_proto_msg_release(&msg);
        msgpack_sbuffer_clear(&buf);
    }
    oq_review_action_t parsed;
    assert_int_equal(oq_proto_review_action_parse("don", 3, &parsed), -1);
    msgpack_sbuffer_destroy(&buf);
}

/* Decode the text notation, which must fail with code and a reason naming what. */
static void s_text_bad(const char *text, oq_err_t want, const char *names)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    s_pack_text(&buf, text);
    oq_msg_t msg;
    oq_err_t code = OQ_ERR_NONE;
    char why[256] = "";
    int rc = oq_proto_decode(&msg, buf.data, buf.size, &code, why, sizeof why);
    if (rc != -1 || code != want || !strstr(why, names))
        fail_msg("%s: want %s naming \"%s\", got rc %d %s: %s", text, oq_proto_err_name(want),
                 names, rc, oq_proto_err_name(code), why);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
}

static void test_ready_types_and_queues(void **state)
{
    const char *types[] = {"noop", "grant_points"};
    const char *queues[] = {"high", "default"};
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready_routed(&buf, 1, "w1", 42, types, 2, queues, 2);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_READY);
    assert_int_equal(oq_proto_list_size(msg.types), 2);
    assert_int_equal(oq_proto_list_size(msg.queues), 2);
    s_str_equal(oq_proto_list_at(msg.types, 1), "grant_points");
    s_str_equal(oq_proto_list_at(msg.queues, 0), "high");
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);

    /* Absent lists: every type, every queue (a worker from before). */
    s_decode_text_ok(&msg, "{v:1, cmd:ready, credit:1}");
    assert_null(msg.types);
    assert_null(msg.queues);
    assert_int_equal(oq_proto_list_size(msg.types), 0);
    oq_proto_msg_release(&msg);

    s_text_bad("{v:1, cmd:ready, credit:1, types:[]}", OQ_ERR_BAD_REQUEST, "\"types\" is empty");
    s_text_bad("{v:1, cmd:ready, credit:1, types:noop}", OQ_ERR_BAD_REQUEST, "\"types\"");
    s_text_bad("{v:1, cmd:ready, credit:1, queues:[high, 'b@d']}", OQ_ERR_BAD_REQUEST,
               "item 1 \"b@d\"");
    s_text_bad("{v:1, cmd:ready, credit:1, types:[noop, 7]}", OQ_ERR_BAD_REQUEST, "item 1");

    /* A name that is not UTF-8 is quoted with its bytes escaped: the
       error text is valid UTF-8 whatever the peer sent. */
    msgpack_sbuffer_init(&buf);
    oq_wire_raw_ready(&buf, "queues", "q\xff\xc3\\", 4);
    oq_err_t code;
    char why[256];
    assert_int_equal(oq_proto_decode(&msg, buf.data, buf.size, &code, why, sizeof why), -1);
    if (!strstr(why, "item 0 \"q\\xff\\xc3\\x5c\" must be"))
        fail_msg("got: %s", why);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);

    /* Over the limits: one name too long, one name too many. */
    char text[64 + 24 * (OQ_MAX_WORKER_QUEUES + 1)];
    char long_name[OQ_MAX_NAME_LEN + 2];
    memset(long_name, 'q', OQ_MAX_NAME_LEN + 1);
    long_name[OQ_MAX_NAME_LEN + 1] = 0;
    snprintf(text, sizeof text, "{v:1, cmd:ready, credit:1, queues:[%s]}", long_name);
    s_text_bad(text, OQ_ERR_TOO_LARGE, "65 bytes, the limit is 64");
    size_t n = (size_t)snprintf(text, sizeof text, "{v:1, cmd:ready, credit:1, queues:[");
    for (int i = 0; i <= OQ_MAX_WORKER_QUEUES; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%sq%d", i ? ", " : "", i);
    snprintf(text + n, sizeof text - n, "]}");
    s_text_bad(text, OQ_ERR_TOO_LARGE, "33 names, the limit is 32");
}

/* Peer input in an error text: printable ASCII as sent, every other byte
   (and the backslash and the quote) as \xNN, cut only between escapes. */
static void test_quote_escapes_what_is_not_printable_ascii(void **state)
{
    (void)state;
    char out[OQ_PROTO_QUOTED_BYTES(8)];
    assert_int_equal(oq_proto_quote((oq_str_t){"a-b.c", 5}, out, sizeof out), 5);
    assert_string_equal(out, "a-b.c");
    oq_proto_quote((oq_str_t){"\xff\x00\"\\\n\xc3\xa9z", 8}, out, sizeof out);
    assert_string_equal(out, "\\xff\\x00\\x22\\x5c\\x0a\\xc3\\xa9z");
    char small[6];
    assert_int_equal(oq_proto_quote((oq_str_t){"ab\xff"
                                               "c",
                                               4},
                                    small, sizeof small),
                     2);
    assert_string_equal(small, "ab"); /* "\xff" would not fit whole */
    assert_int_equal(oq_proto_quote((oq_str_t){"abc", 3}, out, 0), 0);
}

static void test_lease_touch_delay_and_return(void **state)
{
    /* A delivery carries its lease. */
    oq_job_msg_t job = {.id = 9,
                        .attempt = 2,
                        .max_tries = 3,
                        .has_max_tries = true,
                        .timeout_ms = 1000,
                        .has_timeout = true,
                        .type = oq_str("noop"),
                        .lease = UINT64_MAX - 1,
                        .has_lease = true};
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_job(&buf, &job);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_true(msg.job.has_lease);
    assert_true(msg.job.lease == UINT64_MAX - 1);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    /* An ack echoes it; a release carries its delay; return is an outcome. */
    oq_ack_msg_t ack = {.id = 9,
                        .attempt = 2,
                        .outcome = OQ_OUTCOME_RETRY,
                        .error = oq_str("later"),
                        .lease = 77,
                        .has_lease = true,
                        .delay_ms = 2500,
                        .has_delay = true};
    oq_proto_encode_ack(&buf, &ack);
    s_decode_ok(&msg, &buf);
    assert_true(msg.ack.has_lease && msg.ack.lease == 77);
    assert_true(msg.ack.has_delay);
    assert_int_equal(msg.ack.delay_ms, 2500);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    ack.outcome = OQ_OUTCOME_RETURN;
    ack.has_delay = false;
    oq_proto_encode_ack(&buf, &ack);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.ack.outcome, OQ_OUTCOME_RETURN);
    assert_false(msg.ack.has_delay);
    assert_false(msg.ack.held);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    /* A held (prefetched) job handed back says so; only a return may. */
    ack.held = true;
    oq_proto_encode_ack(&buf, &ack);
    s_decode_ok(&msg, &buf);
    assert_true(msg.ack.held);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    ack.held = false;

    oq_ack_msg_t touch = {.id = 9, .attempt = 2, .lease = 77};
    oq_proto_encode_touch(&buf, &touch);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_TOUCH);
    assert_int_equal(msg.ack.id, 9);
    assert_int_equal(msg.ack.attempt, 2);
    assert_true(msg.ack.lease == 77);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);

    s_text_bad("{v:1, cmd:ack, id:1, attempt:1, outcome:ok, delay:3}", OQ_ERR_BAD_REQUEST,
               "\"delay\" goes only with outcome retry, return or unavailable, not ok");
    s_text_bad("{v:1, cmd:ack, id:1, attempt:1, outcome:retry, lease:-1}", OQ_ERR_BAD_REQUEST,
               "\"lease\"");
    s_text_bad("{v:1, cmd:ack, id:1, attempt:1, outcome:ok, held:true}", OQ_ERR_BAD_REQUEST,
               "\"held\" goes only with outcome return, not ok");
    s_text_bad("{v:1, cmd:ack, id:1, attempt:1, outcome:return, held:1}", OQ_ERR_BAD_REQUEST,
               "\"held\" must be true or false");
    s_text_bad("{v:1, cmd:touch, id:1, attempt:1}", OQ_ERR_BAD_REQUEST, "missing field \"lease\"");
}

/* unavailable: handed back for an outage, with an optional delay; status
   tells the broker the worker's state, how long it has been in it, and
   the error that paused it. */
static void test_unavailable_and_status(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_ack_msg_t ack = {.id = 5,
                        .attempt = 1,
                        .outcome = OQ_OUTCOME_UNAVAILABLE,
                        .error = oq_str("grant_points: database unavailable"),
                        .lease = 3,
                        .has_lease = true,
                        .delay_ms = 1500,
                        .has_delay = true};
    oq_proto_encode_ack(&buf, &ack);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.ack.outcome, OQ_OUTCOME_UNAVAILABLE);
    assert_string_equal(oq_proto_outcome_name(msg.ack.outcome), "unavailable");
    assert_true(msg.ack.has_delay);
    assert_int_equal(msg.ack.delay_ms, 1500);
    s_str_equal(msg.ack.error, "grant_points: database unavailable");
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    oq_proto_encode_status(&buf, OQ_STATUS_UNAVAILABLE, 12500, "cannot connect to the database");
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_STATUS);
    assert_int_equal(msg.status, OQ_STATUS_UNAVAILABLE);
    assert_int_equal(msg.status_ms, 12500);
    s_str_equal(msg.err_text, "cannot connect to the database");
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);

    oq_proto_encode_status(&buf, OQ_STATUS_READY, -5, NULL);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.status, OQ_STATUS_READY);
    assert_int_equal(msg.status_ms, 0);
    assert_int_equal(msg.err_text.len, 0);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);

    s_text_bad("{v:1, cmd:status}", OQ_ERR_BAD_REQUEST, "missing field \"state\"");
    s_text_bad("{v:1, cmd:status, state:paused}", OQ_ERR_BAD_REQUEST,
               "\"state\" must be \"ready\" or \"unavailable\"");
    s_text_bad("{v:1, cmd:status, state:ready, since:-1}", OQ_ERR_BAD_REQUEST, "\"since\"");
    s_text_bad("{v:1, cmd:ack, id:1, attempt:1, outcome:paused}", OQ_ERR_BAD_REQUEST,
               "unavailable");
}

static void test_roundtrip_reconnect(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_reconnect(&buf, "unknown worker");
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_RECONNECT);
    s_str_equal(msg.err_text, "unknown worker");
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);

    s_decode_text_ok(&msg, "{v:1, cmd:reconnect}");
    assert_int_equal(msg.cmd, OQ_CMD_RECONNECT);
    assert_int_equal(msg.err_text.len, 0);
    oq_proto_msg_release(&msg);
}

/* Durations are seconds on the wire, integer or float, kept in ms. */
static void test_decode_seconds(void **state)
{
    static const struct {
        const char *text;
        int64_t ms;
    } cases[] = {
        {"0.25", 250},
        {"1.5", 1500},
        {"0.5f", 500},
        {"90", 90000},
        {"0.001", 1},
        {"0.0016", 2}, /* rounded to the nearest ms */
        {"86400", OQ_MAX_TIMEOUT_MS},
        {"86400.0", OQ_MAX_TIMEOUT_MS},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[160];
        snprintf(text, sizeof text,
                 "{v:1, cmd:dispatch, job:{type:t, timeout:%s, delay:%s, backoff:[%s]}}",
                 cases[k].text, cases[k].text, cases[k].text);
        oq_msg_t msg;
        s_decode_text_ok(&msg, text);
        if (msg.job.timeout_ms != cases[k].ms || msg.job.delay_ms != cases[k].ms ||
            msg.job.backoff_ms[0] != cases[k].ms)
            fail_msg("%s s: timeout %lld delay %lld backoff %lld ms, want %lld", cases[k].text,
                     (long long)msg.job.timeout_ms, (long long)msg.job.delay_ms,
                     (long long)msg.job.backoff_ms[0], (long long)cases[k].ms);
        oq_proto_msg_release(&msg);
    }

    /* delay and backoff may be 0; the edges of every range are accepted. */
    oq_msg_t msg;
    s_decode_text_ok(&msg, "{v:1, cmd:dispatch, job:{type:t, delay:0, backoff:[0, 2592000], "
                           "priority:1000, max_tries:1}}");
    assert_true(msg.job.has_delay);
    assert_int_equal(msg.job.delay_ms, 0);
    assert_int_equal(msg.job.backoff_ms[0], 0);
    assert_int_equal(msg.job.backoff_ms[1], OQ_MAX_BACKOFF_MS);
    assert_int_equal(msg.job.priority, OQ_MAX_PRIORITY);
    assert_int_equal(msg.job.max_tries, 1);
    oq_proto_msg_release(&msg);
    s_decode_text_ok(&msg, "{v:1, cmd:dispatch, job:{type:t, delay:31622400}}");
    assert_int_equal(msg.job.delay_ms, OQ_MAX_DELAY_MS);
    oq_proto_msg_release(&msg);
    s_decode_text_ok(&msg, "{v:1, cmd:dispatch, job:{type:t, backoff:[1,1,1,1,1,1,1,1,1,1,1,1,1,"
                           "1,1,2]}}");
    assert_int_equal(msg.job.backoff_len, OQ_MAX_BACKOFF_STEPS);
    assert_int_equal(msg.job.backoff_ms[OQ_MAX_BACKOFF_STEPS - 1], 2000);
    oq_proto_msg_release(&msg);
}

/* ---- malformed and invalid input ----------------------------------------- */

typedef struct {
    const char *name;
    const char *text; /* the text notation, or NULL for raw */
    const char *raw;
    size_t raw_len;
    oq_err_t code;
} s_bad_t;

#define TXT(t)  t, NULL, 0
#define RAW(r)  NULL, r, sizeof r - 1
#define MALF    OQ_ERR_MALFORMED
#define BIG     OQ_ERR_TOO_LARGE
#define BADV    OQ_ERR_BAD_VERSION
#define UNKNOWN OQ_ERR_UNKNOWN_COMMAND
#define BADR    OQ_ERR_BAD_REQUEST
#define D(job)  "{v:1, cmd:dispatch, req:1, job:{" job "}}"
#define J(job)  "{v:1, cmd:job, job:{id:5, attempt:1, " job "}}"
#define ACK(f)  "{v:1, cmd:ack, " f "}"

static const s_bad_t s_bad[] = {
    /* dispatch ids */
    {"empty dispatch_id", TXT("{v:1, cmd:dispatch, dispatch_id:'', job:{type:t}}"), BADR},
    {"dispatch_id with a space", TXT("{v:1, cmd:dispatch, dispatch_id:'a b', job:{type:t}}"), BADR},
    {"dispatch_id not a str", TXT("{v:1, cmd:dispatch, dispatch_id:7, job:{type:t}}"), BADR},
    {"dispatch_id too long",
     TXT("{v:1, cmd:dispatch, job:{type:t}, "
         "dispatch_id:'0123456789012345678901234567890123456789012345678901234567890123x'}"),
     BIG},
    {"requeue without id", TXT("{v:1, cmd:requeue, req:1}"), BADR},
    /* the review store */
    {"resolve without action", TXT("{v:1, cmd:resolve, req:1, id:5}"), BADR},
    {"resolve unknown action", TXT("{v:1, cmd:resolve, req:1, id:5, action:maybe}"), BADR},
    {"resolve without id", TXT("{v:1, cmd:resolve, req:1, action:done}"), BADR},
    {"resolve note not a str", TXT("{v:1, cmd:resolve, req:1, id:5, action:done, note:7}"), BADR},
    {"resolve note too long", TXT("{v:1, cmd:resolve, req:1, id:5, action:done, note:'n'*1025}"),
     BIG},
    {"review_show id 0", TXT("{v:1, cmd:review_show, req:1, id:0}"), BADR},
    {"review limit 0", TXT("{v:1, cmd:review, req:1, limit:0}"), BADR},
    {"review bad queue", TXT("{v:1, cmd:review, req:1, queue:'a b'}"), BADR},
    {"requeue id 0", TXT("{v:1, cmd:requeue, req:1, id:0}"), BADR},
    /* not one msgpack map */
    {"empty frame", RAW(""), MALF},
    {"array", TXT("[1, 2]"), MALF},
    {"empty array", TXT("[]"), MALF},
    {"int", TXT("7"), MALF},
    {"negative int", TXT("-7"), MALF},
    {"str", TXT("'{v:1}'"), MALF},
    {"nil", TXT("nil"), MALF},
    {"http", RAW("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), MALF},
    {"json", RAW("{\"v\":1,\"cmd\":\"ping\"}"), MALF},
    {"two maps",
     RAW("\x82\xa1v\x01\xa3"
         "cmd\xa4ping\x82\xa1v\x01\xa3"
         "cmd\xa4ping"),
     MALF},
    /* bad msgpack */
    {"truncated map",
     RAW("\x82\xa1v\x01\xa3"
         "cmd\xa4pin"),
     MALF},
    {"map missing a value",
     RAW("\x82\xa1v\x01\xa3"
         "cmd"),
     MALF},
    {"map16 header cut", RAW("\xde\x00"), MALF},
    {"map32 declares 2^32-1 pairs", RAW("\xdf\xff\xff\xff\xff\xa1v\x01"), MALF},
    {"map16 declares 65535 pairs",
     RAW("\xde\xff\xff\xa1v\x01\xa3"
         "cmd\xa4ping"),
     MALF},
    {"array32 declares 2^32-1", RAW("\x81\xa1x\xdd\xff\xff\xff\xff\x01"), MALF},
    {"str32 declares 4 GiB",
     RAW("\x81\xa1x\xdb\xff\xff\xff\xff"
         "abc"),
     MALF},
    {"str8 declares 200 bytes",
     RAW("\x81\xa1x\xd9\xc8"
         "abc"),
     MALF},
    {"bin32 declares 4 GiB", RAW("\x81\xa1x\xc6\xff\xff\xff\xff\x00"), MALF},
    {"ext32 declares 4 GiB", RAW("\x81\xa1x\xc9\xff\xff\xff\xff\x01\x00"), MALF},
    {"float64 cut", RAW("\x81\xa1x\xcb\x3f\xd0"), MALF},
    {"reserved 0xc1 as value",
     RAW("\x82\xa1v\x01\xa3"
         "cmd\xc1"),
     MALF},
    {"reserved 0xc1 as key", RAW("\x82\xa1v\x01\xc1\xa4ping"), MALF},
    {"trailing byte",
     RAW("\x82\xa1v\x01\xa3"
         "cmd\xa4ping\x00"),
     MALF},
    {"trailing 0xc1",
     RAW("\x82\xa1v\x01\xa3"
         "cmd\xa4ping\xc1"),
     MALF},
    /* limits of the frame */
    {"frame over 1 MiB", TXT("{v:1, cmd:ping, pad:'x'*1048576}"), BIG},
    /* version */
    {"v missing", TXT("{cmd:ping}"), BADV},
    {"v 2", TXT("{v:2, cmd:ping}"), BADV},
    {"v 0", TXT("{v:0, cmd:ping}"), BADV},
    {"v -1", TXT("{v:-1, cmd:ping}"), BADV},
    {"v as str", TXT("{v:'1', cmd:ping}"), BADV},
    {"v as float", TXT("{v:1.0, cmd:ping}"), BADV},
    {"v nil", TXT("{v:nil, cmd:ping}"), BADV},
    {"V upper case", TXT("{V:1, cmd:ping}"), BADV},
    /* envelope */
    {"req negative", TXT("{v:1, cmd:ping, req:-1}"), BADR},
    {"req as str", TXT("{v:1, cmd:ping, req:'7'}"), BADR},
    {"req 2^63", TXT("{v:1, cmd:ping, req:9223372036854775808}"), BADR},
    {"req float", TXT("{v:1, cmd:ping, req:7.5}"), BADR},
    {"cmd missing", TXT("{v:1}"), BADR},
    {"cmd int", TXT("{v:1, cmd:1}"), BADR},
    {"cmd nil", TXT("{v:1, cmd:nil}"), BADR},
    {"cmd array", TXT("{v:1, cmd:[ping]}"), BADR},
    {"cmd unknown", TXT("{v:1, cmd:fly}"), UNKNOWN},
    {"cmd empty", TXT("{v:1, cmd:''}"), UNKNOWN},
    {"cmd 'unknown'", TXT("{v:1, cmd:unknown}"), UNKNOWN},
    {"cmd upper case", TXT("{v:1, cmd:PING}"), UNKNOWN},
    {"cmd with NUL",
     RAW("\x82\xa1v\x01\xa3"
         "cmd\xa5ping\x00"),
     UNKNOWN},
    {"cmd prefix", TXT("{v:1, cmd:pin}"), UNKNOWN},
    {"cmd long junk", TXT("{v:1, cmd:'\x01\xff'*300}"), UNKNOWN},
    /* dispatch: the job envelope */
    {"dispatch without job", TXT("{v:1, cmd:dispatch}"), BADR},
    {"job nil", TXT("{v:1, cmd:dispatch, job:nil}"), BADR},
    {"job array", TXT("{v:1, cmd:dispatch, job:[type, t]}"), BADR},
    {"job str", TXT("{v:1, cmd:dispatch, job:t}"), BADR},
    {"type missing", TXT(D("queue:q")), BADR},
    {"type empty", TXT(D("type:''")), BADR},
    {"type with a space", TXT(D("type:'grant points'")), BADR},
    {"type with a slash", TXT(D("type:'a/b'")), BADR},
    {"type with UTF-8", TXT(D("type:'gr\xc3\xbc\xc3\x9f'")), BADR},
    {"type 65 chars", TXT(D("type:'x'*65")), BIG},
    {"type int", TXT(D("type:7")), BADR},
    {"queue empty", TXT(D("type:t, queue:''")), BADR},
    {"queue invalid", TXT(D("type:t, queue:'a b'")), BADR},
    {"queue 65 chars", TXT(D("type:t, queue:'q'*65")), BIG},
    {"queue int", TXT(D("type:t, queue:1")), BADR},
    {"payload array", TXT(D("type:t, payload:[1]")), BADR},
    {"payload str", TXT(D("type:t, payload:'{}'")), BADR},
    {"payload int", TXT(D("type:t, payload:0")), BADR},
    {"payload over 256 KiB", TXT(D("type:t, payload:{k:'x'*262144}")), BIG},
    {"max_tries 0", TXT(D("type:t, max_tries:0")), BADR},
    {"max_tries 1001", TXT(D("type:t, max_tries:1001")), BADR},
    {"max_tries -1", TXT(D("type:t, max_tries:-1")), BADR},
    {"max_tries str", TXT(D("type:t, max_tries:'3'")), BADR},
    {"max_tries float", TXT(D("type:t, max_tries:3.0")), BADR},
    {"timeout 0", TXT(D("type:t, timeout:0")), BADR},
    {"timeout 0.0", TXT(D("type:t, timeout:0.0")), BADR},
    {"timeout under 1 ms", TXT(D("type:t, timeout:0.0001")), BADR},
    {"timeout negative", TXT(D("type:t, timeout:-5")), BADR},
    {"timeout negative float", TXT(D("type:t, timeout:-0.5")), BADR},
    {"timeout str", TXT(D("type:t, timeout:'60'")), BADR},
    {"timeout nil", TXT(D("type:t, timeout:nil")), BADR},
    {"timeout over 24 h", TXT(D("type:t, timeout:86401")), BADR},
    {"timeout over 24 h float", TXT(D("type:t, timeout:86400.001")), BADR},
    {"timeout 2^64-1", TXT(D("type:t, timeout:18446744073709551615")), BADR},
    {"timeout nan", TXT(D("type:t, timeout:nan")), BADR},
    {"timeout inf", TXT(D("type:t, timeout:inf")), BADR},
    {"delay over 366 days", TXT(D("type:t, delay:31622401")), BADR},
    {"delay float over", TXT(D("type:t, delay:3.2e7")), BADR},
    {"delay negative", TXT(D("type:t, delay:-1")), BADR},
    {"delay bool", TXT(D("type:t, delay:true")), BADR},
    {"priority 1001", TXT(D("type:t, priority:1001")), BADR},
    {"priority -1001", TXT(D("type:t, priority:-1001")), BADR},
    {"priority 2^64-1", TXT(D("type:t, priority:18446744073709551615")), BADR},
    {"priority float", TXT(D("type:t, priority:1.5")), BADR},
    {"priority str", TXT(D("type:t, priority:'1'")), BADR},
    {"backoff empty", TXT(D("type:t, backoff:[]")), BADR},
    {"backoff 17 steps", TXT(D("type:t, backoff:[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]")), BADR},
    {"backoff non-number", TXT(D("type:t, backoff:[10, '60']")), BADR},
    {"backoff nested", TXT(D("type:t, backoff:[[10]]")), BADR},
    {"backoff not an array", TXT(D("type:t, backoff:10")), BADR},
    {"backoff step negative", TXT(D("type:t, backoff:[10, -1]")), BADR},
    {"backoff step over 30 days", TXT(D("type:t, backoff:[2592001]")), BADR},
    /* job (a delivery) */
    {"job without id", TXT("{v:1, cmd:job, job:{attempt:1, type:t}}"), BADR},
    {"job id 0", TXT("{v:1, cmd:job, job:{id:0, attempt:1, type:t}}"), BADR},
    {"job without attempt", TXT("{v:1, cmd:job, job:{id:5, type:t}}"), BADR},
    {"job attempt 0", TXT("{v:1, cmd:job, job:{id:5, attempt:0, type:t}}"), BADR},
    {"job attempt 2^32", TXT("{v:1, cmd:job, job:{id:5, attempt:4294967296, type:t}}"), BADR},
    {"job without job", TXT("{v:1, cmd:job}"), BADR},
    {"job bad type", TXT(J("type:'a b'")), BADR},
    {"job bad timeout", TXT(J("type:t, timeout:0")), BADR},
    {"job max_tries 1001", TXT(J("type:t, max_tries:1001")), BADR},
    /* ack */
    {"ack bad outcome", TXT(ACK("id:1, attempt:1, outcome:done")), BADR},
    {"ack outcome upper case", TXT(ACK("id:1, attempt:1, outcome:OK")), BADR},
    {"ack outcome empty", TXT(ACK("id:1, attempt:1, outcome:''")), BADR},
    {"ack outcome int", TXT(ACK("id:1, attempt:1, outcome:1")), BADR},
    {"ack outcome missing", TXT(ACK("id:1, attempt:1")), BADR},
    {"ack missing id", TXT(ACK("attempt:1, outcome:ok")), BADR},
    {"ack id 0", TXT(ACK("id:0, attempt:1, outcome:ok")), BADR},
    {"ack id negative", TXT(ACK("id:-1, attempt:1, outcome:ok")), BADR},
    {"ack id str", TXT(ACK("id:'1', attempt:1, outcome:ok")), BADR},
    {"ack missing attempt", TXT(ACK("id:1, outcome:ok")), BADR},
    {"ack attempt 0", TXT(ACK("id:1, attempt:0, outcome:ok")), BADR},
    {"ack result unknown", TXT(ACK("id:1, attempt:1, outcome:ok, result:maybe")), BADR},
    {"ack result empty", TXT(ACK("id:1, attempt:1, outcome:ok, result:''")), BADR},
    {"ack result int", TXT(ACK("id:1, attempt:1, outcome:ok, result:1")), BADR},
    {"ack error over 1024 bytes", TXT(ACK("id:1, attempt:1, outcome:fail, error:'e'*1025")), BIG},
    {"ack error int", TXT(ACK("id:1, attempt:1, outcome:fail, error:5")), BADR},
    {"ack credit 1001", TXT(ACK("id:1, attempt:1, outcome:ok, credit:1001")), BADR},
    {"ack credit negative", TXT(ACK("id:1, attempt:1, outcome:ok, credit:-1")), BADR},
    /* ready */
    {"ready credit over max", TXT("{v:1, cmd:ready, credit:1001}"), BADR},
    {"ready credit missing", TXT("{v:1, cmd:ready, pid:1}"), BADR},
    {"ready credit negative", TXT("{v:1, cmd:ready, credit:-1}"), BADR},
    {"ready credit str", TXT("{v:1, cmd:ready, credit:'1'}"), BADR},
    {"ready pid 2^32", TXT("{v:1, cmd:ready, credit:1, pid:4294967296}"), BADR},
    {"ready pid str", TXT("{v:1, cmd:ready, credit:1, pid:'12'}"), BADR},
    {"ready name 65 chars", TXT("{v:1, cmd:ready, credit:1, name:'w'*65}"), BIG},
    {"ready name invalid", TXT("{v:1, cmd:ready, credit:1, name:'worker one'}"), BADR},
    {"ready name empty", TXT("{v:1, cmd:ready, credit:1, name:''}"), BADR},
    {"ready name int", TXT("{v:1, cmd:ready, credit:1, name:1}"), BADR},
    /* failed */
    {"failed limit 0", TXT("{v:1, cmd:failed, req:1, limit:0}"), BADR},
    {"failed limit 1001", TXT("{v:1, cmd:failed, req:1, limit:1001}"), BADR},
    {"failed limit str", TXT("{v:1, cmd:failed, req:1, limit:'10'}"), BADR},
    {"failed queue invalid", TXT("{v:1, cmd:failed, req:1, queue:'a b'}"), BADR},
    {"failed queue 65 chars", TXT("{v:1, cmd:failed, req:1, queue:'q'*65}"), BIG},
    /* welcome */
    {"welcome heartbeat too short", TXT("{v:1, cmd:welcome, heartbeat_ms:9, liveness:3}"), BADR},
    {"welcome heartbeat too long", TXT("{v:1, cmd:welcome, heartbeat_ms:60001, liveness:3}"), BADR},
    {"welcome heartbeat missing", TXT("{v:1, cmd:welcome, liveness:3}"), BADR},
    {"welcome liveness 0", TXT("{v:1, cmd:welcome, heartbeat_ms:1000, liveness:0}"), BADR},
    {"welcome liveness missing", TXT("{v:1, cmd:welcome, heartbeat_ms:1000}"), BADR},
    /* replies */
    {"dispatched id missing", TXT("{v:1, cmd:dispatched, req:1}"), BADR},
    {"dispatched id 0", TXT("{v:1, cmd:dispatched, req:1, id:0}"), BADR},
    {"error code missing", TXT("{v:1, cmd:error, message:m}"), BADR},
    {"error code int", TXT("{v:1, cmd:error, code:1}"), BADR},
    {"error message over 1024", TXT("{v:1, cmd:error, code:internal, message:'m'*1025}"), BIG},
    {"reconnect reason int", TXT("{v:1, cmd:reconnect, reason:1}"), BADR},
    {"reconnect reason over 1024", TXT("{v:1, cmd:reconnect, reason:'r'*1025}"), BIG},
};

static void test_dispatch_unique_and_overlap_keys(void **state)
{
    (void)state;
    oq_job_msg_t job = {.type = oq_str("t"),
                        .unique_key = oq_str("order:42"),
                        .unique_for_ms = 90500,
                        .overlap_key = oq_str("customer:7")};
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_dispatch(&buf, 3, &job);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    s_str_equal(msg.job.unique_key, "order:42");
    assert_int_equal(msg.job.unique_for_ms, 90500);
    s_str_equal(msg.job.overlap_key, "customer:7");
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    /* "done", and the default: only while the job is live. */
    job.unique_for_ms = 0;
    oq_proto_encode_dispatch(&buf, 3, &job);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.job.unique_for_ms, 0);
    oq_proto_msg_release(&msg);
    s_decode_text_ok(&msg, D("type:t, unique_key:k, unique_for:done"));
    s_str_equal(msg.job.unique_key, "k");
    assert_int_equal(msg.job.unique_for_ms, 0);
    oq_proto_msg_release(&msg);
    /* A delivery carries no keys. */
    msgpack_sbuffer_clear(&buf);
    job.id = 9;
    job.attempt = 1;
    job.has_max_tries = job.has_timeout = true;
    job.max_tries = 1;
    job.timeout_ms = 1000;
    oq_proto_encode_job(&buf, &job);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.job.unique_key.len, 0);
    assert_int_equal(msg.job.overlap_key.len, 0);
    oq_proto_msg_release(&msg);
    /* The reply to a dispatch whose key is held. */
    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_dispatched_unique(&buf, 4, 77);
    s_decode_ok(&msg, &buf);
    assert_true(msg.unique);
    assert_true(msg.id == 77);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_dispatched(&buf, 4, 78);
    s_decode_ok(&msg, &buf);
    assert_false(msg.unique);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);

    /* Bad input: an error naming the field and its limit. */
    s_text_bad(D("type:t, unique_key:k, unique_for:0"), OQ_ERR_BAD_REQUEST,
               "between 1 and 2592000");
    s_text_bad(D("type:t, unique_key:k, unique_for:0.5"), OQ_ERR_BAD_REQUEST,
               "between 1 and 2592000 seconds, or \"done\"");
    s_text_bad(D("type:t, unique_key:k, unique_for:2592001"), OQ_ERR_BAD_REQUEST,
               "between 1 and 2592000 seconds, or \"done\"");
    s_text_bad(D("type:t, unique_key:k, unique_for:-1"), OQ_ERR_BAD_REQUEST,
               "between 1 and 2592000 seconds, or \"done\"");
    s_text_bad(D("type:t, unique_key:k, unique_for:forever"), OQ_ERR_BAD_REQUEST, "\"done\"");
    s_text_bad(D("type:t, unique_for:10"), OQ_ERR_BAD_REQUEST, "needs a \"unique_key\"");
    s_text_bad(D("type:t, unique_key:''"), OQ_ERR_BAD_REQUEST, "unique_key");
    s_text_bad(D("type:t, unique_key:7"), OQ_ERR_BAD_REQUEST, "unique_key");
    s_text_bad(D("type:t, overlap_key:'a b'"), OQ_ERR_BAD_REQUEST, "overlap_key");
    char text[512];
    char key[OQ_MAX_JOB_KEY_LEN + 2];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = 0;
    snprintf(text, sizeof text, D("type:t, overlap_key:%s"), key);
    s_text_bad(text, OQ_ERR_TOO_LARGE, "the limit is 128");
    snprintf(text, sizeof text, D("type:t, unique_key:%s"), key);
    s_text_bad(text, OQ_ERR_TOO_LARGE, "the limit is 128");
}

/* ---- several jobs or acks per message ---------------------------------------- */

/* Decode entry i of msg, which must succeed. */
static void s_entry_ok(const oq_msg_t *msg, uint32_t i, oq_msg_t *entry)
{
    oq_err_t code = OQ_ERR_INTERNAL;
    char why[256] = "unset";
    if (oq_proto_decode_entry(msg, i, entry, &code, why, sizeof why) != 0)
        fail_msg("entry %u failed: %s: %s", i, oq_proto_err_name(code), why);
    assert_int_equal(code, OQ_ERR_NONE);
}

static void test_roundtrip_jobs(void **state)
{
    oq_job_msg_t jobs[3];
    memset(jobs, 0, sizeof jobs);
    const char *payloads[] = {"\x81\xa1k\x01", "\x80", "\x81\xa1x\xa1y"};
    for (int k = 0; k < 3; k++) {
        jobs[k].id = 100 + (uint64_t)k;
        jobs[k].type = oq_str(k == 1 ? "grant_points" : "noop");
        jobs[k].queue = oq_str("default");
        jobs[k].payload = (const uint8_t *)payloads[k];
        jobs[k].payload_len = strlen(payloads[k]);
        jobs[k].attempt = 1 + (uint32_t)k;
        jobs[k].max_tries = 3;
        jobs[k].timeout_ms = 2500;
        jobs[k].lease = UINT64_MAX - (uint64_t)k;
        jobs[k].has_lease = true;
    }
    jobs[2].backoff_ms[0] = 10000;
    jobs[2].backoff_len = 1;
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_jobs(&buf, jobs, 3);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_JOBS);
    assert_int_equal(oq_proto_entry_count(&msg), 3);
    for (uint32_t k = 0; k < 3; k++) {
        oq_msg_t entry;
        s_entry_ok(&msg, k, &entry);
        assert_int_equal(entry.cmd, OQ_CMD_JOB);
        assert_int_equal(entry.job.id, 100 + k);
        assert_int_equal(entry.job.attempt, 1 + k);
        assert_true(entry.job.has_lease && entry.job.lease == UINT64_MAX - k);
        assert_int_equal(entry.job.timeout_ms, 2500);
        s_str_equal(entry.job.type, k == 1 ? "grant_points" : "noop");
        assert_int_equal(entry.job.payload_len, strlen(payloads[k]));
        assert_memory_equal(entry.job.payload, payloads[k], strlen(payloads[k]));
        assert_int_equal(entry.job.backoff_len, k == 2 ? 1 : 0);
        uint64_t id, lease;
        uint32_t attempt;
        bool has_lease;
        assert_int_equal(oq_proto_entry_ids(&msg, k, &id, &attempt, &has_lease, &lease), 0);
        assert_true(id == 100 + k && attempt == 1 + k && has_lease && lease == UINT64_MAX - k);
        oq_proto_msg_release(&entry);
    }
    /* Past the end, or of another command: no entry. */
    oq_msg_t entry;
    oq_err_t code;
    char why[128];
    assert_int_equal(oq_proto_decode_entry(&msg, 3, &entry, &code, why, sizeof why), -1);
    oq_proto_msg_release(&entry);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
}

static void test_roundtrip_acks(void **state)
{
    oq_ack_msg_t acks[3] = {
        {.id = 7,
         .attempt = 1,
         .outcome = OQ_OUTCOME_OK,
         .result = OQ_RESULT_APPLIED,
         .credit = 1,
         .lease = 99,
         .has_lease = true},
        {.id = 8,
         .attempt = 2,
         .outcome = OQ_OUTCOME_RETRY,
         .error = oq_str("db down"),
         .credit = 1,
         .lease = 100,
         .has_lease = true,
         .delay_ms = 1500,
         .has_delay = true},
        {.id = 9,
         .attempt = 1,
         .outcome = OQ_OUTCOME_RETURN,
         .held = true,
         .credit = 0,
         .lease = UINT64_MAX,
         .has_lease = true},
    };
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_acks(&buf, acks, 3);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_ACKS);
    assert_int_equal(oq_proto_entry_count(&msg), 3);
    for (uint32_t k = 0; k < 3; k++) {
        oq_msg_t entry;
        s_entry_ok(&msg, k, &entry);
        assert_int_equal(entry.cmd, OQ_CMD_ACK);
        assert_int_equal(entry.ack.id, acks[k].id);
        assert_int_equal(entry.ack.attempt, acks[k].attempt);
        assert_int_equal(entry.ack.outcome, acks[k].outcome);
        assert_int_equal(entry.ack.credit, acks[k].credit);
        assert_true(entry.ack.has_lease && entry.ack.lease == acks[k].lease);
        assert_int_equal(entry.ack.held, acks[k].held);
        assert_int_equal(entry.ack.has_delay, acks[k].has_delay);
        oq_proto_msg_release(&entry);
    }
    oq_msg_t entry;
    s_entry_ok(&msg, 0, &entry);
    assert_int_equal(entry.ack.result, OQ_RESULT_APPLIED);
    oq_proto_msg_release(&entry);
    s_entry_ok(&msg, 1, &entry);
    s_str_equal(entry.ack.error, "db down");
    assert_int_equal(entry.ack.delay_ms, 1500);
    oq_proto_msg_release(&entry);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
}

/* A bad entry is refused on its own, with the reason an ack alone would
   get; its neighbours decode. */
static void test_acks_bad_entry_alone(void **state)
{
    oq_msg_t msg;
    s_decode_text_ok(&msg, "{v:1, cmd:acks, acks:[{id:1, attempt:1, outcome:ok, lease:5},"
                           " {id:2, attempt:1, outcome:maybe, lease:6},"
                           " {id:0, attempt:1, outcome:ok},"
                           " {id:4, attempt:1, outcome:ok, lease:8, error:'x'*1025},"
                           " {id:5, attempt:2, outcome:fail, lease:9}]}");
    assert_int_equal(oq_proto_entry_count(&msg), 5);
    const oq_err_t want[] = {OQ_ERR_NONE, OQ_ERR_BAD_REQUEST, OQ_ERR_BAD_REQUEST, OQ_ERR_TOO_LARGE,
                             OQ_ERR_NONE};
    for (uint32_t k = 0; k < 5; k++) {
        oq_msg_t entry;
        oq_err_t code;
        char why[256];
        int rc = oq_proto_decode_entry(&msg, k, &entry, &code, why, sizeof why);
        assert_int_equal(rc, want[k] == OQ_ERR_NONE ? 0 : -1);
        assert_int_equal(code, want[k]);
        if (rc < 0)
            assert_true(strlen(why) > 0);
        oq_proto_msg_release(&entry);
    }
    uint64_t id, lease;
    uint32_t attempt;
    bool has_lease;
    assert_int_equal(oq_proto_entry_ids(&msg, 1, &id, &attempt, &has_lease, &lease), 0);
    assert_true(id == 2 && attempt == 1 && has_lease && lease == 6);
    assert_int_equal(oq_proto_entry_ids(&msg, 2, &id, &attempt, &has_lease, &lease), -1);
    oq_proto_msg_release(&msg);
}

/* What is wrong with the list itself refuses the whole message. */
static void test_jobs_and_acks_lists(void **state)
{
    s_decode_bad_text("{v:1, cmd:acks}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:acks, acks:{}}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:acks, acks:[]}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:acks, acks:[{id:1, attempt:1, outcome:ok}, 7]}",
                      OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:jobs, jobs:nil}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:jobs, jobs:[[]]}", OQ_ERR_BAD_REQUEST);
    /* One over the count limit, of the smallest maps. */
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_ACKS, -1, 1);
    oq_proto_pack_cstr(&pk, "acks");
    msgpack_pack_array(&pk, OQ_MAX_ACKS_PER_MSG + 1);
    for (int k = 0; k < OQ_MAX_ACKS_PER_MSG + 1; k++)
        msgpack_pack_map(&pk, 0);
    s_decode_bad("acks over the limit", buf.data, buf.size, OQ_ERR_TOO_LARGE);
    msgpack_sbuffer_destroy(&buf);
    /* jobs_per_msg and acks_per_msg: optional, in range. */
    oq_msg_t msg;
    s_decode_text_ok(&msg, "{v:1, cmd:ready, credit:4}");
    assert_int_equal(msg.jobs_per_msg, 1);
    oq_proto_msg_release(&msg);
    s_decode_bad_text("{v:1, cmd:ready, credit:4, jobs_per_msg:0}", OQ_ERR_BAD_REQUEST);
    s_decode_bad_text("{v:1, cmd:ready, credit:4, jobs_per_msg:65}", OQ_ERR_BAD_REQUEST);
    s_decode_text_ok(&msg, "{v:1, cmd:welcome, heartbeat_ms:1000, liveness:3}");
    assert_int_equal(msg.acks_per_msg, 0);
    oq_proto_msg_release(&msg);
    s_decode_bad_text("{v:1, cmd:welcome, heartbeat_ms:1000, liveness:3, acks_per_msg:65}",
                      OQ_ERR_BAD_REQUEST);
}

static void test_roundtrip_ready_multi_and_welcome_acks(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    const char *types[] = {"noop"};
    oq_proto_encode_ready_multi(&buf, 8, "w1", 42, types, 1, NULL, 0, 8);
    oq_msg_t msg;
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_READY);
    assert_int_equal(msg.credit, 8);
    assert_int_equal(msg.jobs_per_msg, 8);
    assert_int_equal(oq_proto_list_size(msg.types), 1);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    /* 1: the key is left out, as a worker from before it would. */
    oq_proto_encode_ready_multi(&buf, 1, NULL, 42, NULL, 0, NULL, 0, 1);
    s_decode_ok(&msg, &buf);
    assert_null(oq_proto_map_get(&msg.root, "jobs_per_msg"));
    assert_int_equal(msg.jobs_per_msg, 1);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_welcome_acks(&buf, 1000, 3, OQ_MAX_ACKS_PER_MSG);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.acks_per_msg, OQ_MAX_ACKS_PER_MSG);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
}

static void test_decode_rejects(void **state)
{
    for (size_t k = 0; k < sizeof s_bad / sizeof s_bad[0]; k++) {
        const s_bad_t *c = &s_bad[k];
        if (c->text) {
            msgpack_sbuffer buf;
            msgpack_sbuffer_init(&buf);
            s_pack_text(&buf, c->text);
            s_decode_bad(c->name, buf.data, buf.size, c->code);
            msgpack_sbuffer_destroy(&buf);
        } else {
            /* Copied to the heap so that AddressSanitizer sees any over-read. */
            void *copy = malloc(c->raw_len ? c->raw_len : 1);
            memcpy(copy, c->raw, c->raw_len);
            s_decode_bad(c->name, copy, c->raw_len, c->code);
            free(copy);
        }
    }
}

/* Every proper prefix of a valid message is malformed, never a crash. */
static void test_decode_rejects_every_truncation(void **state)
{
    msgpack_sbuffer payload, buf;
    msgpack_sbuffer_init(&payload);
    msgpack_sbuffer_init(&buf);
    s_pack_payload(&payload);
    oq_job_msg_t job = {.type = oq_str("t"),
                        .payload = (const uint8_t *)payload.data,
                        .payload_len = payload.size,
                        .timeout_ms = 250,
                        .has_timeout = true,
                        .backoff_ms = {1000},
                        .backoff_len = 1};
    oq_proto_encode_dispatch(&buf, 7, &job);
    for (size_t n = 0; n < buf.size; n++) {
        char *prefix = malloc(n ? n : 1);
        memcpy(prefix, buf.data, n);
        char what[64];
        snprintf(what, sizeof what, "prefix of %zu bytes", n);
        s_decode_bad(what, prefix, n, OQ_ERR_MALFORMED);
        free(prefix);
    }
    msgpack_sbuffer_destroy(&buf);
    msgpack_sbuffer_destroy(&payload);
}

/* {v:1, cmd:ping, x:<levels-1 nested arrays>}: the root map is level 1. */
static void s_pack_nested(msgpack_sbuffer *buf, int levels, bool empty_inside)
{
    msgpack_sbuffer_clear(buf);
    s_pack_text(buf, "{v:1, cmd:ping, x:nil}");
    buf->size--; /* drop the nil: x's value follows */
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    for (int k = 1; k < levels; k++)
        msgpack_pack_array(&pk, (k == levels - 1 && empty_inside) ? 0 : 1);
    if (!empty_inside || levels == 1)
        msgpack_pack_int(&pk, 1);
}

static void test_decode_depth_limit(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_msg_t msg;
    for (int empty = 0; empty <= 1; empty++) {
        s_pack_nested(&buf, OQ_MAX_DEPTH, empty);
        s_decode_ok(&msg, &buf);
        assert_int_equal(msg.cmd, OQ_CMD_PING);
        oq_proto_msg_release(&msg);

        s_pack_nested(&buf, OQ_MAX_DEPTH + 1, empty);
        s_decode_bad(empty ? "33 levels, the last empty" : "33 levels", buf.data, buf.size,
                     OQ_ERR_MALFORMED);
        s_pack_nested(&buf, 1000, empty);
        s_decode_bad("1000 levels", buf.data, buf.size, OQ_ERR_MALFORMED);
    }
    msgpack_sbuffer_destroy(&buf);
}

/* {v:1, cmd:ping, pad:'x'*n} of exactly size bytes. */
static void s_pack_padded(msgpack_sbuffer *buf, size_t size)
{
    const size_t head = 1 + 2 + 1 + 4 + 5 + 4 + 5; /* map, v, 1, cmd, ping, pad, str32 */
    msgpack_sbuffer_clear(buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_PING, -1, 1);
    oq_proto_pack_cstr(&pk, "pad");
    size_t n = size - head;
    char *body = malloc(n);
    memset(body, 'x', n);
    msgpack_pack_str(&pk, n);
    msgpack_pack_str_body(&pk, body, n);
    free(body);
    assert_int_equal(buf->size, size);
}

static void test_decode_frame_limit(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_msg_t msg;
    s_pack_padded(&buf, OQ_MAX_FRAME_BYTES);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_PING);
    oq_proto_msg_release(&msg);

    s_pack_padded(&buf, OQ_MAX_FRAME_BYTES + 1);
    s_decode_bad("frame one byte over", buf.data, buf.size, OQ_ERR_TOO_LARGE);

    msgpack_sbuffer_destroy(&buf);

    /* The size is checked first: even garbage over the limit is too_large. */
    char *junk = calloc(1, OQ_MAX_FRAME_BYTES + 1);
    s_decode_bad("garbage over the limit", junk, OQ_MAX_FRAME_BYTES + 1, OQ_ERR_TOO_LARGE);
    oq_err_t code;
    char reason[256];
    assert_int_equal(
        oq_proto_decode(&msg, junk, OQ_MAX_FRAME_BYTES + 1, &code, reason, sizeof reason), -1);
    assert_false(msg.has_req); /* nothing to read it from */
    oq_proto_msg_release(&msg);
    free(junk);

    /* A well-formed frame over the limit still tells its req, so that the
       error can be matched to the request. */
    msgpack_sbuffer big;
    msgpack_sbuffer_init(&big);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &big, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_PING, 77, 1);
    oq_proto_pack_cstr(&pk, "pad");
    size_t n = 2 * OQ_MAX_FRAME_BYTES;
    char *pad = calloc(1, n);
    msgpack_pack_str(&pk, n);
    msgpack_pack_str_body(&pk, pad, n);
    free(pad);
    assert_int_equal(oq_proto_decode(&msg, big.data, big.size, &code, reason, sizeof reason), -1);
    assert_int_equal(code, OQ_ERR_TOO_LARGE);
    assert_true(msg.has_req);
    assert_int_equal(msg.req, 77);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&big);
}

/* dispatch with payload {k:'x'*n}, whose encoding is exactly size bytes. */
static void s_pack_payload_sized(msgpack_sbuffer *buf, size_t size)
{
    const size_t head = 1 + 2 + 5; /* fixmap, "k", str32 header */
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    oq_proto_pack_cstr(&pk, "k");
    size_t n = size - head;
    char *body = malloc(n);
    memset(body, 'p', n);
    msgpack_pack_str(&pk, n);
    msgpack_pack_str_body(&pk, body, n);
    free(body);
    assert_int_equal(payload.size, size);
    oq_job_msg_t job = {
        .type = oq_str("t"), .payload = (const uint8_t *)payload.data, .payload_len = payload.size};
    msgpack_sbuffer_clear(buf);
    oq_proto_encode_dispatch(buf, 1, &job);
    msgpack_sbuffer_destroy(&payload);
}

static void test_decode_payload_limit(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_msg_t msg;
    s_pack_payload_sized(&buf, OQ_MAX_PAYLOAD_BYTES);
    s_decode_ok(&msg, &buf);
    assert_int_equal(msg.job.payload_len, OQ_MAX_PAYLOAD_BYTES);
    oq_proto_msg_release(&msg);

    s_pack_payload_sized(&buf, OQ_MAX_PAYLOAD_BYTES + 1);
    s_decode_bad("payload one byte over", buf.data, buf.size, OQ_ERR_TOO_LARGE);
    msgpack_sbuffer_destroy(&buf);
}

/* A later minor revision may add keys; this one must not mind them. */
static void test_decode_ignores_unknown_keys(void **state)
{
    oq_msg_t msg;
    s_decode_text_ok(&msg, "{v:1, cmd:dispatch, req:4, trace:{id:'abc', spans:[1, 2.5, nil]}, "
                           "job:{type:t, tenant:7, payload:{a:1}, future:[[[]]]}, "
                           "'':'', 7:8, [1]:{}}");
    assert_int_equal(msg.cmd, OQ_CMD_DISPATCH);
    assert_int_equal(msg.req, 4);
    s_str_equal(msg.job.type, "t");
    assert_int_equal(msg.job.payload_len, 4);
    assert_memory_equal(msg.job.payload,
                        "\x81\xa1"
                        "a\x01",
                        4);
    oq_proto_msg_release(&msg);

    s_decode_text_ok(&msg, "{v:1, cmd:ack, id:9, attempt:1, outcome:ok, duration_ms:12, "
                           "host:'h', credit:1}");
    assert_int_equal(msg.ack.id, 9);
    assert_int_equal(msg.ack.credit, 1);
    oq_proto_msg_release(&msg);

    s_decode_text_ok(&msg, "{cmd:heartbeat, extra:nil, v:1}"); /* order does not matter */
    assert_int_equal(msg.cmd, OQ_CMD_HEARTBEAT);
    assert_false(msg.has_req);
    oq_proto_msg_release(&msg);
}

static void test_release_is_safe(void **state)
{
    oq_msg_t msg;
    memset(&msg, 0, sizeof msg);
    oq_proto_msg_release(&msg); /* zeroed */
    oq_proto_msg_release(&msg);

    /* After failures at each stage: before unpacking, after it, mid-job. */
    static const char *const texts[] = {"[1]", "{v:2, cmd:ping}", "{v:1, cmd:fly}",
                                        D("type:t, payload:[1]"),
                                        D("type:t, payload:{a:1}, max_tries:0")};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        msgpack_sbuffer buf;
        msgpack_sbuffer_init(&buf);
        s_pack_text(&buf, texts[k]);
        s_decode_bad(texts[k], buf.data, buf.size,
                     k == 0   ? OQ_ERR_MALFORMED
                     : k == 1 ? OQ_ERR_BAD_VERSION
                     : k == 2 ? OQ_ERR_UNKNOWN_COMMAND
                              : OQ_ERR_BAD_REQUEST);
        msgpack_sbuffer_destroy(&buf);
    }

    /* After a success, twice; then the struct can decode again. */
    s_decode_text_ok(&msg, D("type:t, payload:{a:1}"));
    oq_proto_msg_release(&msg);
    oq_proto_msg_release(&msg);
    s_decode_text_ok(&msg, "{v:1, cmd:ping}");
    oq_proto_msg_release(&msg);

    /* A reason buffer of any size, even none, is honoured. */
    oq_err_t code;
    char tiny[4];
    assert_int_equal(oq_proto_decode(&msg, "\x90", 1, &code, tiny, sizeof tiny), -1);
    assert_int_equal(code, OQ_ERR_MALFORMED);
    assert_int_equal(strlen(tiny), 3);
    oq_proto_msg_release(&msg);
    assert_int_equal(oq_proto_decode(&msg, "\x90", 1, &code, NULL, 0), -1);
    assert_int_equal(code, OQ_ERR_MALFORMED);
    oq_proto_msg_release(&msg);
}

/* Bug: decoded strings pointed into the caller's frame, not into the message
   as proto.h promises, so they dangled once the frame was closed. */
static void test_strings_outlive_the_frame(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    s_pack_text(&buf, "{v:1, cmd:dispatch, job:{type:grant_points, queue:rewards, "
                      "payload:{user:42}}}");
    char *frame = malloc(buf.size);
    memcpy(frame, buf.data, buf.size);
    oq_msg_t msg;
    oq_err_t code;
    char why[128];
    assert_int_equal(oq_proto_decode(&msg, frame, buf.size, &code, why, sizeof why), 0);
    memset(frame, 0xc1, buf.size);
    free(frame); /* as the broker closes the zmq frame */
    s_str_equal(msg.job.type, "grant_points");
    s_str_equal(msg.job.queue, "rewards");
    const msgpack_object *job = oq_proto_map_get(&msg.root, "job");
    assert_non_null(job);
    const msgpack_object *type = oq_proto_map_get(job, "type");
    assert_non_null(type);
    assert_int_equal(type->via.str.size, 12);
    assert_memory_equal(type->via.str.ptr, "grant_points", 12);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
}

/* ---- names and small helpers ---------------------------------------------- */

static void test_names(void **state)
{
    for (int c = 1; c < OQ_CMD_COUNT_; c++) {
        const char *name = oq_proto_cmd_name((oq_cmd_t)c);
        assert_string_not_equal(name, "unknown");
        for (int d = 1; d < c; d++)
            assert_string_not_equal(name, oq_proto_cmd_name((oq_cmd_t)d));
    }
    assert_string_equal(oq_proto_cmd_name(OQ_CMD_COUNT_), "unknown");
    assert_string_equal(oq_proto_cmd_name((oq_cmd_t)-1), "unknown");
    for (int c = 1; c < OQ_ERR_COUNT_; c++)
        for (int d = 1; d < c; d++)
            assert_string_not_equal(oq_proto_err_name((oq_err_t)c), oq_proto_err_name((oq_err_t)d));
    assert_string_equal(oq_proto_err_name(OQ_ERR_TIMEOUT_RULE), "timeout_rule");
    assert_string_equal(oq_proto_err_name(OQ_ERR_COUNT_), "internal");

    static const char *const outcomes[] = {"ok", "retry", "fail", "timeout"};
    for (int k = 0; k < 4; k++) {
        oq_outcome_t o = 0;
        assert_int_equal(oq_proto_outcome_parse(outcomes[k], strlen(outcomes[k]), &o), 0);
        assert_int_equal(o, OQ_OUTCOME_OK + k);
        assert_string_equal(oq_proto_outcome_name(o), outcomes[k]);
    }
    oq_outcome_t o = OQ_OUTCOME_FAIL;
    assert_int_equal(oq_proto_outcome_parse("okay", 4, &o), -1);
    assert_int_equal(oq_proto_outcome_parse("ok", 1, &o), -1);
    assert_int_equal(oq_proto_outcome_parse("", 0, &o), -1);
    assert_int_equal(o, OQ_OUTCOME_FAIL);
    assert_string_equal(oq_proto_outcome_name((oq_outcome_t)0), "unknown");
    assert_string_equal(oq_proto_result_name(OQ_RESULT_ALREADY_APPLIED), "already_applied");

    assert_int_equal(strlen(s_type64), OQ_MAX_NAME_LEN);
    assert_true(oq_proto_name_valid(s_type64, OQ_MAX_NAME_LEN));
    assert_true(oq_proto_name_valid("a", 1));
    assert_false(oq_proto_name_valid("", 0));
    assert_false(oq_proto_name_valid("a b", 3));
    assert_false(oq_proto_name_valid("a\0b", 3));
    char long_name[OQ_MAX_NAME_LEN + 1];
    memset(long_name, 'n', sizeof long_name);
    assert_false(oq_proto_name_valid(long_name, sizeof long_name));

    char out[4];
    oq_str_copy(oq_str("hello"), out, sizeof out);
    assert_string_equal(out, "hel");
    oq_str_copy(oq_str(NULL), out, sizeof out);
    assert_string_equal(out, "");
    assert_true(oq_str_eq(oq_str("abc"), "abc"));
    assert_false(oq_str_eq(oq_str("abc"), "ab"));
    assert_true(oq_str_eq(oq_str(NULL), ""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_dispatch_all_fields),
        cmocka_unit_test(test_quote_escapes_what_is_not_printable_ascii),
        cmocka_unit_test(test_roundtrip_dispatch_defaults),
        cmocka_unit_test(test_roundtrip_dispatch_id_and_requeue),
        cmocka_unit_test(test_batch_and_chain_fields),
        cmocka_unit_test(test_roundtrip_dispatch_wait),
        cmocka_unit_test(test_roundtrip_job_delivery),
        cmocka_unit_test(test_roundtrip_dispatched),
        cmocka_unit_test(test_dispatch_unique_and_overlap_keys),
        cmocka_unit_test(test_roundtrip_error),
        cmocka_unit_test(test_roundtrip_simple),
        cmocka_unit_test(test_roundtrip_failed_request),
        cmocka_unit_test(test_roundtrip_wait),
        cmocka_unit_test(test_roundtrip_store_commands),
        cmocka_unit_test(test_roundtrip_ready),
        cmocka_unit_test(test_roundtrip_welcome),
        cmocka_unit_test(test_roundtrip_ack_result),
        cmocka_unit_test(test_roundtrip_ack_error),
        cmocka_unit_test(test_roundtrip_review),
        cmocka_unit_test(test_roundtrip_reconnect),
        cmocka_unit_test(test_ready_types_and_queues),
        cmocka_unit_test(test_lease_touch_delay_and_return),
        cmocka_unit_test(test_unavailable_and_status),
        cmocka_unit_test(test_decode_seconds),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_decode_rejects_every_truncation),
        cmocka_unit_test(test_decode_depth_limit),
        cmocka_unit_test(test_decode_frame_limit),
        cmocka_unit_test(test_decode_payload_limit),
        cmocka_unit_test(test_decode_ignores_unknown_keys),
        cmocka_unit_test(test_release_is_safe),
        cmocka_unit_test(test_strings_outlive_the_frame),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_roundtrip_jobs),
        cmocka_unit_test(test_roundtrip_acks),
        cmocka_unit_test(test_acks_bad_entry_alone),
        cmocka_unit_test(test_jobs_and_acks_lists),
        cmocka_unit_test(test_roundtrip_ready_multi_and_welcome_acks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
