/*  proto.c: the wire protocol v1 codec. Decoding is two passes: oq_mpcheck
    bounds the structure, msgpack-c builds the object tree, then each command's
    fields are read with strict types and ranges. Unknown keys are ignored so
    that a newer peer can add optional fields without a version bump. */
#include "onceq/proto.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpcheck.h"

static const char *s_cmd_names[OQ_CMD_COUNT_] = {
    [OQ_CMD_UNKNOWN] = "unknown",
    [OQ_CMD_DISPATCH] = "dispatch",
    [OQ_CMD_STATS] = "stats",
    [OQ_CMD_FAILED] = "failed",
    [OQ_CMD_PING] = "ping",
    [OQ_CMD_DISPATCHED] = "dispatched",
    [OQ_CMD_PONG] = "pong",
    [OQ_CMD_ERROR] = "error",
    [OQ_CMD_READY] = "ready",
    [OQ_CMD_HEARTBEAT] = "heartbeat",
    [OQ_CMD_ACK] = "ack",
    [OQ_CMD_DRAIN] = "drain",
    [OQ_CMD_DISCONNECT] = "disconnect",
    [OQ_CMD_WELCOME] = "welcome",
    [OQ_CMD_JOB] = "job",
    [OQ_CMD_RECONNECT] = "reconnect",
    [OQ_CMD_REQUEUE] = "requeue",
    [OQ_CMD_REQUEUED] = "requeued",
    [OQ_CMD_TOUCH] = "touch",
    [OQ_CMD_FORGET] = "forget",
    [OQ_CMD_FORGOTTEN] = "forgotten",
    [OQ_CMD_FLUSH] = "flush",
    [OQ_CMD_FLUSHED] = "flushed",
    [OQ_CMD_REQUEUE_ALL] = "requeue_all",
    [OQ_CMD_REQUEUED_ALL] = "requeued_all",
    [OQ_CMD_CANCEL] = "cancel",
    [OQ_CMD_CANCELLED] = "cancelled",
    [OQ_CMD_HORIZON] = "horizon",
    [OQ_CMD_REVIEW] = "review",
    [OQ_CMD_REVIEW_SHOW] = "review_show",
    [OQ_CMD_RESOLVE] = "resolve",
    [OQ_CMD_RESOLVED] = "resolved",
    [OQ_CMD_STATUS] = "status",
    [OQ_CMD_JOBS] = "jobs",
    [OQ_CMD_ACKS] = "acks",
    [OQ_CMD_WAIT] = "wait",
    [OQ_CMD_WAITED] = "waited",
    [OQ_CMD_PRUNE_FAILED] = "prune_failed",
    [OQ_CMD_PRUNED_FAILED] = "pruned_failed",
    [OQ_CMD_CLEAR] = "clear",
    [OQ_CMD_CLEARED] = "cleared",
    [OQ_CMD_DISPATCH_BATCH] = "dispatch_batch",
    [OQ_CMD_BATCH_DISPATCHED] = "batch_dispatched",
    [OQ_CMD_BATCH] = "batch",
    [OQ_CMD_CHAIN] = "chain",
};

static const char *s_err_names[OQ_ERR_COUNT_] = {
    [OQ_ERR_NONE] = "none",
    [OQ_ERR_MALFORMED] = "malformed",
    [OQ_ERR_TOO_LARGE] = "too_large",
    [OQ_ERR_BAD_VERSION] = "bad_version",
    [OQ_ERR_UNKNOWN_COMMAND] = "unknown_command",
    [OQ_ERR_BAD_REQUEST] = "bad_request",
    [OQ_ERR_TIMEOUT_RULE] = "timeout_rule",
    [OQ_ERR_FULL] = "full",
    [OQ_ERR_INTERNAL] = "internal",
    [OQ_ERR_UNAVAILABLE] = "unavailable",
    [OQ_ERR_NOT_FOUND] = "not_found",
    [OQ_ERR_WRONG_STATE] = "wrong_state",
    [OQ_ERR_FORBIDDEN] = "forbidden",
};

static const char *s_outcome_names[] = {NULL,      "ok",     "retry",  "fail",
                                        "timeout", "return", "review", "unavailable"};
static const char *s_action_names[] = {NULL, "done", "retry", "fail"};
static const char *s_status_names[] = {NULL, "ready", "unavailable"};
static const char *s_result_names[] = {"none", "applied", "already_applied"};
static const char *s_wait_state_names[] = {NULL,     "pending", "done",
                                           "failed", "review",  "cancelled"};

const char *oq_proto_cmd_name(oq_cmd_t cmd)
{
    return (cmd > 0 && cmd < OQ_CMD_COUNT_) ? s_cmd_names[cmd] : "unknown";
}

const char *oq_proto_err_name(oq_err_t code)
{
    return (code > 0 && code < OQ_ERR_COUNT_) ? s_err_names[code] : "internal";
}

const char *oq_proto_outcome_name(oq_outcome_t outcome)
{
    return (outcome >= OQ_OUTCOME_OK && outcome <= OQ_OUTCOME_UNAVAILABLE)
               ? s_outcome_names[outcome]
               : "unknown";
}

const char *oq_proto_wait_state_name(oq_wait_state_t state)
{
    return (state >= OQ_WAIT_PENDING && state <= OQ_WAIT_CANCELLED) ? s_wait_state_names[state]
                                                                    : "unknown";
}

const char *oq_proto_status_name(oq_worker_status_t status)
{
    return (status >= OQ_STATUS_READY && status <= OQ_STATUS_UNAVAILABLE) ? s_status_names[status]
                                                                          : "unknown";
}

const char *oq_proto_result_name(oq_result_t result)
{
    return (result <= OQ_RESULT_ALREADY_APPLIED) ? s_result_names[result] : "none";
}

int oq_proto_outcome_parse(const char *name, size_t len, oq_outcome_t *outcome)
{
    for (int i = OQ_OUTCOME_OK; i <= OQ_OUTCOME_UNAVAILABLE; i++) {
        if (strlen(s_outcome_names[i]) == len && memcmp(s_outcome_names[i], name, len) == 0) {
            *outcome = (oq_outcome_t)i;
            return 0;
        }
    }
    return -1;
}

const char *oq_proto_review_action_name(oq_review_action_t action)
{
    return (action >= OQ_REVIEW_DONE && action <= OQ_REVIEW_FAIL) ? s_action_names[action]
                                                                  : "unknown";
}

int oq_proto_review_action_parse(const char *name, size_t len, oq_review_action_t *action)
{
    for (int i = OQ_REVIEW_DONE; i <= OQ_REVIEW_FAIL; i++) {
        if (name && strlen(s_action_names[i]) == len && memcmp(s_action_names[i], name, len) == 0) {
            *action = (oq_review_action_t)i;
            return 0;
        }
    }
    return -1;
}

bool oq_proto_name_valid(const char *name, size_t len)
{
    if (len == 0 || len > OQ_MAX_NAME_LEN)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == ':' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

bool oq_proto_dispatch_id_valid(const char *id, size_t len)
{
    if (len == 0 || len > OQ_MAX_DISPATCH_ID_LEN)
        return false;
    for (size_t i = 0; i < len; i++)
        if (id[i] < 0x21 || id[i] > 0x7e)
            return false;
    return true;
}

bool oq_proto_job_key_valid(const char *key, size_t len)
{
    if (len == 0 || len > OQ_MAX_JOB_KEY_LEN)
        return false;
    for (size_t i = 0; i < len; i++)
        if (key[i] < 0x21 || key[i] > 0x7e)
            return false;
    return true;
}

oq_str_t oq_proto_list_at(const msgpack_object *list, uint32_t i)
{
    const msgpack_object *o = &list->via.array.ptr[i];
    oq_str_t s = {o->via.str.ptr, o->via.str.size};
    return s;
}

uint32_t oq_proto_list_size(const msgpack_object *list)
{
    return list ? list->via.array.size : 0;
}

oq_str_t oq_str(const char *text)
{
    oq_str_t s = {text, text ? strlen(text) : 0};
    return s;
}

void oq_str_copy(oq_str_t s, char *out, size_t out_len)
{
    if (out_len == 0)
        return;
    size_t n = s.len < out_len - 1 ? s.len : out_len - 1;
    if (n)
        memcpy(out, s.ptr, n);
    out[n] = 0;
}

size_t oq_proto_quote(oq_str_t s, char *out, size_t out_len)
{
    static const char hex[] = "0123456789abcdef";
    if (out_len == 0)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        bool plain = c >= 0x20 && c <= 0x7e && c != '\\' && c != '"';
        size_t need = plain ? 1 : OQ_PROTO_QUOTE_MAX_BYTES;
        if (n + need > out_len - 1)
            break;
        if (plain) {
            out[n++] = (char)c;
        } else {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    out[n] = 0;
    return n;
}

bool oq_str_eq(oq_str_t s, const char *text)
{
    size_t n = strlen(text);
    return s.len == n && (n == 0 || memcmp(s.ptr, text, n) == 0);
}

/* ---- decoding ---------------------------------------------------------- */

typedef struct {
    oq_err_t *code;
    char *reason;
    size_t reason_len;
} s_errctx_t;

#define S_FAIL(ctx, c, ...)                                                                        \
    do {                                                                                           \
        *(ctx)->code = (c);                                                                        \
        snprintf((ctx)->reason, (ctx)->reason_len, __VA_ARGS__);                                   \
        return -1;                                                                                 \
    } while (0)

const msgpack_object *oq_proto_map_get(const msgpack_object *obj, const char *key)
{
    if (!obj || obj->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t n = strlen(key);
    for (uint32_t i = 0; i < obj->via.map.size; i++) {
        const msgpack_object *k = &obj->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            memcmp(k->via.str.ptr, key, n) == 0)
            return &obj->via.map.ptr[i].val;
    }
    return NULL;
}

static int s_get_uint(s_errctx_t *ctx, const msgpack_object *map, const char *key, bool required,
                      uint64_t min, uint64_t max, uint64_t *out, bool *present)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    if (present)
        *present = o != NULL;
    if (!o) {
        if (required)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "missing field \"%s\"", key);
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" must be a non-negative integer", key);
    if (o->via.u64 < min || o->via.u64 > max)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" is %llu, must be between %llu and %llu", key,
               (unsigned long long)o->via.u64, (unsigned long long)min, (unsigned long long)max);
    *out = o->via.u64;
    return 0;
}

static int s_get_bool(s_errctx_t *ctx, const msgpack_object *map, const char *key, bool *out)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    *out = false;
    if (!o)
        return 0;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" must be true or false", key);
    *out = o->via.boolean;
    return 0;
}

static int s_get_int(s_errctx_t *ctx, const msgpack_object *map, const char *key, int64_t min,
                     int64_t max, int64_t *out, bool *present)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    *present = o != NULL;
    if (!o)
        return 0;
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
        v = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        v = o->via.i64;
    else
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" must be an integer", key);
    if (v < min || v > max)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" is %lld, must be between %lld and %lld", key,
               (long long)v, (long long)min, (long long)max);
    *out = v;
    return 0;
}

/* A duration on the wire is seconds, as an integer or a float; kept in ms. */
/* Seconds within min_ms .. max_ms, as ms; also follows the range in the
   error (another value the field takes), so that every refusal states the
   range the field really has. */
static int s_seconds_within(s_errctx_t *ctx, const msgpack_object *o, const char *what,
                            int64_t min_ms, int64_t max_ms, const char *also, int64_t *out)
{
    double ms;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        ms = o->via.u64 > (uint64_t)(max_ms / 1000 + 1) ? (double)max_ms + 1000.0
                                                        : (double)o->via.u64 * 1000.0;
    else if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
        ms = o->via.f64 * 1000.0;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        ms = -1.0;
    else
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "%s must be a number of seconds", what);
    if (!isfinite(ms) || ms < (double)min_ms || ms > (double)max_ms)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "%s must be between %lld and %lld seconds%s", what,
               (long long)(min_ms / 1000), (long long)(max_ms / 1000), also);
    *out = (int64_t)llround(ms);
    return 0;
}

static int s_seconds_to_ms(s_errctx_t *ctx, const msgpack_object *o, const char *what,
                           int64_t max_ms, int64_t *out)
{
    return s_seconds_within(ctx, o, what, 0, max_ms, "", out);
}

static int s_get_seconds(s_errctx_t *ctx, const msgpack_object *map, const char *key,
                         int64_t max_ms, int64_t *out, bool *present)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    *present = o != NULL;
    if (!o)
        return 0;
    char what[64];
    snprintf(what, sizeof what, "field \"%s\"", key);
    return s_seconds_to_ms(ctx, o, what, max_ms, out);
}

static int s_get_str(s_errctx_t *ctx, const msgpack_object *map, const char *key, bool required,
                     size_t max_len, oq_str_t *out)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    if (!o) {
        if (required)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "missing field \"%s\"", key);
        out->ptr = NULL;
        out->len = 0;
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_STR)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" must be a string", key);
    if (o->via.str.size > max_len)
        S_FAIL(ctx, OQ_ERR_TOO_LARGE, "field \"%s\" is %u bytes, the limit is %zu", key,
               o->via.str.size, max_len);
    out->ptr = o->via.str.ptr;
    out->len = o->via.str.size;
    return 0;
}

static int s_get_name(s_errctx_t *ctx, const msgpack_object *map, const char *key, bool required,
                      oq_str_t *out)
{
    if (s_get_str(ctx, map, key, required, OQ_MAX_NAME_LEN, out) < 0)
        return -1;
    if (out->ptr && !oq_proto_name_valid(out->ptr, out->len))
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST,
               "field \"%s\" must be 1 to %d characters of A-Z a-z 0-9 _ . : -", key,
               OQ_MAX_NAME_LEN);
    return 0;
}

/* An optional array of 1..max valid names (ready's types and queues). The
   error names the offending item and its position. */
static int s_get_names(s_errctx_t *ctx, const msgpack_object *map, const char *key, uint32_t max,
                       const msgpack_object **out)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    *out = NULL;
    if (!o)
        return 0;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" must be an array of names", key);
    if (o->via.array.size > max)
        S_FAIL(ctx, OQ_ERR_TOO_LARGE, "field \"%s\" has %u names, the limit is %u", key,
               o->via.array.size, max);
    if (o->via.array.size == 0)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" is empty (leave it out to mean every one)",
               key);
    for (uint32_t k = 0; k < o->via.array.size; k++) {
        const msgpack_object *item = &o->via.array.ptr[k];
        if (item->type != MSGPACK_OBJECT_STR)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" item %u must be a string", key, k);
        if (item->via.str.size > OQ_MAX_NAME_LEN)
            S_FAIL(ctx, OQ_ERR_TOO_LARGE, "field \"%s\" item %u is %u bytes, the limit is %d", key,
                   k, item->via.str.size, OQ_MAX_NAME_LEN);
        if (!oq_proto_name_valid(item->via.str.ptr, item->via.str.size)) {
            char shown[OQ_PROTO_QUOTED_BYTES(OQ_MAX_NAME_LEN)];
            oq_proto_quote((oq_str_t){item->via.str.ptr, item->via.str.size}, shown, sizeof shown);
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST,
                   "field \"%s\" item %u \"%s\" must be 1 to %d characters of A-Z a-z 0-9 _ . : "
                   "-",
                   key, k, shown, OQ_MAX_NAME_LEN);
        }
    }
    *out = o;
    return 0;
}

static int s_get_job_key(s_errctx_t *ctx, const msgpack_object *map, const char *key, oq_str_t *out)
{
    if (s_get_str(ctx, map, key, false, OQ_MAX_JOB_KEY_LEN, out) < 0)
        return -1;
    if (out->ptr && !oq_proto_job_key_valid(out->ptr, out->len))
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST,
               "field \"%s\" must be 1 to %d printable ASCII characters without spaces", key,
               OQ_MAX_JOB_KEY_LEN);
    return 0;
}

/* A dispatch's unique_key, unique_for (seconds, or "done") and overlap_key. */
static int s_decode_job_keys(s_errctx_t *ctx, oq_job_msg_t *j, const msgpack_object *job)
{
    if (s_get_job_key(ctx, job, "unique_key", &j->unique_key) < 0 ||
        s_get_job_key(ctx, job, "overlap_key", &j->overlap_key) < 0)
        return -1;
    const msgpack_object *o = oq_proto_map_get(job, "unique_for");
    j->unique_for_ms = 0;
    if (!o)
        return 0;
    if (!j->unique_key.ptr)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"unique_for\" needs a \"unique_key\"");
    if (o->type == MSGPACK_OBJECT_STR && o->via.str.size == 4 &&
        memcmp(o->via.str.ptr, "done", 4) == 0)
        return 0;
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER && o->type != MSGPACK_OBJECT_NEGATIVE_INTEGER &&
        o->type != MSGPACK_OBJECT_FLOAT32 && o->type != MSGPACK_OBJECT_FLOAT64)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST,
               "field \"unique_for\" must be seconds (%lld to %lld) or \"done\"",
               OQ_MIN_UNIQUE_FOR_MS / 1000, OQ_MAX_UNIQUE_FOR_MS / 1000);
    int64_t ms;
    if (s_seconds_within(ctx, o, "field \"unique_for\"", OQ_MIN_UNIQUE_FOR_MS, OQ_MAX_UNIQUE_FOR_MS,
                         ", or \"done\"", &ms) < 0)
        return -1;
    j->unique_for_ms = ms;
    return 0;
}

/* The bytes o takes packed as msgpack_pack_object packs it (the smallest
   encoding of each value), counted without packing it. Depth is bounded:
   the frame it came in passed oq_mpcheck. */
static size_t s_packed_size(const msgpack_object *o)
{
    size_t n;
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return o->via.u64 < 128           ? 1
               : o->via.u64 <= UINT8_MAX  ? 2
               : o->via.u64 <= UINT16_MAX ? 3
               : o->via.u64 <= UINT32_MAX ? 5
                                          : 9;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return o->via.i64 >= -32         ? 1
               : o->via.i64 >= INT8_MIN  ? 2
               : o->via.i64 >= INT16_MIN ? 3
               : o->via.i64 >= INT32_MIN ? 5
                                         : 9;
    case MSGPACK_OBJECT_FLOAT32:
        return 5;
    case MSGPACK_OBJECT_FLOAT64:
        return 9;
    case MSGPACK_OBJECT_STR:
        n = o->via.str.size;
        return n + (n < 32 ? 1 : n <= UINT8_MAX ? 2 : n <= UINT16_MAX ? 3 : 5);
    case MSGPACK_OBJECT_BIN:
        n = o->via.bin.size;
        return n + (n <= UINT8_MAX ? 2 : n <= UINT16_MAX ? 3 : 5);
    case MSGPACK_OBJECT_EXT:
        n = o->via.ext.size;
        if (n == 1 || n == 2 || n == 4 || n == 8 || n == 16)
            return n + 2;
        return n + (n <= UINT8_MAX ? 3 : n <= UINT16_MAX ? 4 : 6);
    case MSGPACK_OBJECT_ARRAY:
        n = o->via.array.size < 16 ? 1 : o->via.array.size <= UINT16_MAX ? 3 : 5;
        for (uint32_t k = 0; k < o->via.array.size; k++)
            n += s_packed_size(&o->via.array.ptr[k]);
        return n;
    case MSGPACK_OBJECT_MAP:
        n = o->via.map.size < 16 ? 1 : o->via.map.size <= UINT16_MAX ? 3 : 5;
        for (uint32_t k = 0; k < o->via.map.size; k++)
            n += s_packed_size(&o->via.map.ptr[k].key) + s_packed_size(&o->via.map.ptr[k].val);
        return n;
    default: /* nil, boolean */
        return 1;
    }
}

/* What a job without a payload is given: an empty map. */
static const msgpack_object s_empty_map = {.type = MSGPACK_OBJECT_MAP};

/* Decode the job map into j. The payload is packed into packed, its own
   buffer, or with view set left where it is in the tree (*view, a map). */
static int s_decode_job_into(s_errctx_t *ctx, oq_job_msg_t *j, msgpack_sbuffer *packed,
                             const msgpack_object **view, const msgpack_object *job, bool delivery)
{
    if (!job || job->type != MSGPACK_OBJECT_MAP)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"job\" must be a map");
    bool present;
    uint64_t u;
    int64_t i;
    if (delivery) {
        if (s_get_uint(ctx, job, "id", true, 1, UINT64_MAX, &j->id, NULL) < 0 ||
            s_get_uint(ctx, job, "attempt", true, 1, UINT32_MAX, &u, NULL) < 0)
            return -1;
        j->attempt = (uint32_t)u;
        if (s_get_uint(ctx, job, "lease", false, 0, UINT64_MAX, &j->lease, &j->has_lease) < 0)
            return -1;
    }
    if (s_get_name(ctx, job, "type", true, &j->type) < 0 ||
        s_get_name(ctx, job, "queue", false, &j->queue) < 0)
        return -1;
    if (!j->queue.ptr)
        j->queue = oq_str(OQ_DEFAULT_QUEUE);

    const msgpack_object *payload = oq_proto_map_get(job, "payload");
    if (!payload || payload->type == MSGPACK_OBJECT_NIL)
        payload = &s_empty_map;
    else if (payload->type != MSGPACK_OBJECT_MAP)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"payload\" must be a map");
    size_t payload_size;
    if (view) {
        *view = payload;
        payload_size = s_packed_size(payload);
    } else {
        msgpack_sbuffer_init(packed);
        msgpack_packer pk;
        msgpack_packer_init(&pk, packed, msgpack_sbuffer_write);
        msgpack_pack_object(&pk, *payload);
        payload_size = packed->size;
        j->payload = (const uint8_t *)packed->data;
        j->payload_len = packed->size;
    }
    if (payload_size > OQ_MAX_PAYLOAD_BYTES)
        S_FAIL(ctx, OQ_ERR_TOO_LARGE, "payload is %zu bytes, the limit is %d", payload_size,
               OQ_MAX_PAYLOAD_BYTES);

    if (s_get_uint(ctx, job, "max_tries", false, 1, OQ_MAX_TRIES_LIMIT, &u, &j->has_max_tries) < 0)
        return -1;
    if (j->has_max_tries)
        j->max_tries = (uint32_t)u;
    if (s_get_seconds(ctx, job, "timeout", OQ_MAX_TIMEOUT_MS, &j->timeout_ms, &j->has_timeout) < 0)
        return -1;
    if (j->has_timeout && j->timeout_ms == 0)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"timeout\" must be more than 0 seconds");
    /* A delivery always carries the budget and the timeout the worker enforces. */
    if (delivery && (!j->has_max_tries || !j->has_timeout))
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "a delivered job must carry \"max_tries\" and \"timeout\"");
    if (s_get_seconds(ctx, job, "delay", OQ_MAX_DELAY_MS, &j->delay_ms, &j->has_delay) < 0)
        return -1;
    if (s_get_int(ctx, job, "priority", -OQ_MAX_PRIORITY, OQ_MAX_PRIORITY, &i, &present) < 0)
        return -1;
    j->has_priority = present;
    j->priority = present ? (int32_t)i : 0;

    const msgpack_object *backoff = oq_proto_map_get(job, "backoff");
    if (backoff) {
        if (backoff->type != MSGPACK_OBJECT_ARRAY)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"backoff\" must be an array of seconds");
        if (backoff->via.array.size == 0 || backoff->via.array.size > OQ_MAX_BACKOFF_STEPS)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"backoff\" must have 1 to %d steps",
                   OQ_MAX_BACKOFF_STEPS);
        for (uint32_t k = 0; k < backoff->via.array.size; k++) {
            if (s_seconds_to_ms(ctx, &backoff->via.array.ptr[k], "each backoff step",
                                OQ_MAX_BACKOFF_MS, &j->backoff_ms[k]) < 0)
                return -1;
        }
        j->backoff_len = backoff->via.array.size;
    }
    return delivery ? 0 : s_decode_job_keys(ctx, j, job);
}

int oq_proto_decode_job_object(const msgpack_object *map, oq_job_msg_t *job,
                               msgpack_sbuffer *packed, oq_err_t *code, char *reason,
                               size_t reason_len)
{
    memset(job, 0, sizeof *job);
    msgpack_sbuffer_init(packed);
    s_errctx_t ctx = {code, reason, reason_len};
    *code = OQ_ERR_NONE;
    if (reason_len)
        reason[0] = 0;
    return s_decode_job_into(&ctx, job, packed, NULL, map, false);
}

static int s_decode_job(s_errctx_t *ctx, oq_msg_t *msg, const msgpack_object *job, bool delivery)
{
    return s_decode_job_into(ctx, &msg->job, &msg->payload_, NULL, job, delivery);
}

/* The entries of a "jobs" or "acks" message: an array of 1..max maps. What
   is wrong here is wrong with the whole message; what is wrong inside an
   entry is found by oq_proto_decode_entry, for that entry alone. */
static int s_get_entries(s_errctx_t *ctx, oq_msg_t *msg, const msgpack_object *root,
                         const char *key, uint32_t max)
{
    const msgpack_object *o = oq_proto_map_get(root, key);
    if (!o)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "missing field \"%s\"", key);
    if (o->type != MSGPACK_OBJECT_ARRAY)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" must be an array of maps", key);
    if (o->via.array.size == 0)
        S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" is empty", key);
    if (o->via.array.size > max)
        S_FAIL(ctx, OQ_ERR_TOO_LARGE, "field \"%s\" has %u entries, the limit is %u", key,
               o->via.array.size, max);
    for (uint32_t k = 0; k < o->via.array.size; k++)
        if (o->via.array.ptr[k].type != MSGPACK_OBJECT_MAP)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" entry %u must be a map", key, k);
    msg->entries = o;
    return 0;
}

static int s_decode_fields(s_errctx_t *ctx, oq_msg_t *msg, const msgpack_object *root)
{
    uint64_t u;
    oq_str_t s;
    switch (msg->cmd) {
    case OQ_CMD_DISPATCH:
        if (s_decode_job(ctx, msg, oq_proto_map_get(root, "job"), false) < 0 ||
            s_get_str(ctx, root, "dispatch_id", false, OQ_MAX_DISPATCH_ID_LEN,
                      &msg->job.dispatch_id) < 0 ||
            s_get_seconds(ctx, root, "wait", OQ_MAX_WAIT_MS, &msg->wait_ms, &msg->has_wait) < 0)
            return -1;
        if (msg->job.dispatch_id.ptr &&
            !oq_proto_dispatch_id_valid(msg->job.dispatch_id.ptr, msg->job.dispatch_id.len))
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST,
                   "field \"dispatch_id\" must be 1 to %d printable ASCII characters without "
                   "spaces",
                   OQ_MAX_DISPATCH_ID_LEN);
        /* The broker dispatches a batch's callbacks under these: a producer's
           job with one would stand in for the callback. */
        if ((msg->job.dispatch_id.len >= 6 && memcmp(msg->job.dispatch_id.ptr, "batch:", 6) == 0) ||
            (msg->job.dispatch_id.len >= 6 && memcmp(msg->job.dispatch_id.ptr, "chain:", 6) == 0))
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST,
                   "field \"dispatch_id\" may not begin with \"batch:\" or \"chain:\": those are "
                   "the broker's own, for the callbacks of batches and the links of chains");
        msg->chain = oq_proto_map_get(root, "chain");
        msg->chain_catch = oq_proto_map_get(root, "chain_catch");
        if (msg->chain && msg->chain->type == MSGPACK_OBJECT_NIL)
            msg->chain = NULL;
        if (msg->chain_catch && msg->chain_catch->type == MSGPACK_OBJECT_NIL)
            msg->chain_catch = NULL;
        if (msg->chain && msg->chain->type != MSGPACK_OBJECT_ARRAY)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"chain\" must be an array of job maps");
        if (msg->chain && msg->chain->via.array.size > OQ_MAX_CHAIN_LINKS)
            S_FAIL(ctx, OQ_ERR_TOO_LARGE, "field \"chain\" has %u links, the limit is %d",
                   msg->chain->via.array.size, OQ_MAX_CHAIN_LINKS);
        for (uint32_t k = 0; msg->chain && k < msg->chain->via.array.size; k++)
            if (msg->chain->via.array.ptr[k].type != MSGPACK_OBJECT_MAP)
                S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"chain\" link %u must be a job map", k);
        if (msg->chain_catch && msg->chain_catch->type != MSGPACK_OBJECT_MAP)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"chain_catch\" must be a job map");
        return 0;
    case OQ_CMD_CHAIN:
        return s_get_uint(ctx, root, "id", true, 1, UINT64_MAX, &msg->id, NULL);
    case OQ_CMD_DISPATCH_BATCH: {
        static const char *const names[3] = {"then", "catch", "finally"};
        if (s_get_entries(ctx, msg, root, "jobs", OQ_MAX_BATCH_JOBS) < 0 ||
            s_get_str(ctx, root, "dispatch_id", false, OQ_MAX_DISPATCH_ID_LEN,
                      &msg->job.dispatch_id) < 0 ||
            s_get_bool(ctx, root, "allow_failures", &msg->allow_failures) < 0)
            return -1;
        if (msg->job.dispatch_id.ptr &&
            !oq_proto_dispatch_id_valid(msg->job.dispatch_id.ptr, msg->job.dispatch_id.len))
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST,
                   "field \"dispatch_id\" must be 1 to %d printable ASCII characters without "
                   "spaces",
                   OQ_MAX_DISPATCH_ID_LEN);
        for (int i = 0; i < 3; i++) {
            const msgpack_object *c = oq_proto_map_get(root, names[i]);
            if (c && c->type == MSGPACK_OBJECT_NIL)
                c = NULL;
            if (c && c->type != MSGPACK_OBJECT_MAP)
                S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"%s\" must be a job map", names[i]);
            msg->callbacks[i] = c;
        }
        return 0;
    }
    case OQ_CMD_BATCH_DISPATCHED:
        if (s_get_uint(ctx, root, "batch", true, 1, UINT64_MAX, &msg->id, NULL) < 0 ||
            s_get_uint(ctx, root, "first", true, 1, UINT64_MAX, &msg->after, NULL) < 0 ||
            s_get_uint(ctx, root, "count", true, 1, OQ_MAX_BATCH_JOBS, &msg->count, NULL) < 0)
            return -1;
        return 0;
    case OQ_CMD_BATCH: {
        bool has_id;
        if (s_get_str(ctx, root, "op", true, 16, &msg->name) < 0 ||
            s_get_uint(ctx, root, "id", false, 1, UINT64_MAX, &msg->id, &has_id) < 0)
            return -1;
        bool list = oq_str_eq(msg->name, "list");
        if (!list && !oq_str_eq(msg->name, "show") && !oq_str_eq(msg->name, "cancel"))
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"op\" must be show, list or cancel");
        /* A reply carries no op of its own but the request's; it names
           the batch in "batch" (show, cancel) or lists them (list). */
        if (!list && !has_id && !oq_proto_map_get(root, "batch"))
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "missing field \"id\" (the batch)");
        return 0;
    }
    case OQ_CMD_REQUEUE:
    case OQ_CMD_REQUEUED:
    case OQ_CMD_FORGET:
    case OQ_CMD_FORGOTTEN:
    case OQ_CMD_CANCEL:
    case OQ_CMD_CANCELLED:
        return s_get_uint(ctx, root, "id", true, 1, UINT64_MAX, &msg->id, NULL);
    case OQ_CMD_FLUSH:
    case OQ_CMD_REQUEUE_ALL:
        return s_get_name(ctx, root, "queue", false, &msg->name);
    case OQ_CMD_FLUSHED:
    case OQ_CMD_REQUEUED_ALL:
        return s_get_uint(ctx, root, "count", true, 0, UINT64_MAX, &msg->count, NULL);
    case OQ_CMD_PRUNE_FAILED: {
        bool limited;
        const msgpack_object *age = oq_proto_map_get(root, "older_than");
        if (!age)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "missing field \"older_than\" (seconds)");
        if (s_seconds_within(ctx, age, "field \"older_than\"", OQ_MIN_PRUNE_AGE_MS,
                             OQ_MAX_PRUNE_AGE_MS, "", &msg->wait_ms) < 0 ||
            s_get_name(ctx, root, "queue", false, &msg->name) < 0 ||
            s_get_uint(ctx, root, "limit", false, 1, OQ_MAX_PRUNE_PER_CALL, &u, &limited) < 0)
            return -1;
        msg->limit = limited ? (uint32_t)u : OQ_MAX_PRUNE_PER_CALL;
        return 0;
    }
    case OQ_CMD_CLEAR: {
        bool limited;
        if (s_get_name(ctx, root, "queue", true, &msg->name) < 0 ||
            s_get_uint(ctx, root, "limit", false, 1, OQ_MAX_CLEAR_PER_CALL, &u, &limited) < 0)
            return -1;
        msg->limit = limited ? (uint32_t)u : OQ_MAX_CLEAR_PER_CALL;
        return 0;
    }
    case OQ_CMD_PRUNED_FAILED:
    case OQ_CMD_CLEARED: {
        const msgpack_object *more = oq_proto_map_get(root, "more");
        if (more && more->type != MSGPACK_OBJECT_BOOLEAN)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"more\" must be a boolean");
        return s_get_uint(ctx, root, "count", true, 0, UINT64_MAX, &msg->count, NULL);
    }
    case OQ_CMD_JOB:
        return s_decode_job(ctx, msg, oq_proto_map_get(root, "job"), true);
    case OQ_CMD_JOBS:
        return s_get_entries(ctx, msg, root, "jobs", OQ_MAX_JOBS_PER_MSG);
    case OQ_CMD_ACKS:
        return s_get_entries(ctx, msg, root, "acks", OQ_MAX_ACKS_PER_MSG);
    case OQ_CMD_DISPATCHED: {
        const msgpack_object *unique = oq_proto_map_get(root, "unique");
        if (unique && unique->type != MSGPACK_OBJECT_BOOLEAN)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"unique\" must be a boolean");
        msg->unique = unique && unique->via.boolean;
        return s_get_uint(ctx, root, "id", true, 1, UINT64_MAX, &msg->id, NULL);
    }
    case OQ_CMD_WAIT: {
        bool present;
        if (s_get_uint(ctx, root, "id", true, 1, UINT64_MAX, &msg->id, NULL) < 0 ||
            s_get_seconds(ctx, root, "timeout", OQ_MAX_WAIT_MS, &msg->wait_ms, &present) < 0)
            return -1;
        if (!present)
            msg->wait_ms = OQ_DEFAULT_WAIT_MS;
        return 0;
    }
    case OQ_CMD_WAITED: {
        if (s_get_uint(ctx, root, "id", true, 1, UINT64_MAX, &msg->id, NULL) < 0 ||
            s_get_str(ctx, root, "state", true, OQ_MAX_NAME_LEN, &s) < 0 ||
            s_get_str(ctx, root, "error", false, OQ_MAX_ERROR_LEN, &msg->err_text) < 0)
            return -1;
        for (size_t k = 1; k < sizeof s_wait_state_names / sizeof *s_wait_state_names; k++)
            if (oq_str_eq(s, s_wait_state_names[k]))
                msg->wait_state = (oq_wait_state_t)k;
        if (!msg->wait_state)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST,
                   "field \"state\" must be one of pending, done, failed, review, cancelled");
        return 0;
    }
    case OQ_CMD_REVIEW_SHOW:
        /* A request carries "id"; a reply carries "job". */
        if (oq_proto_map_get(root, "job"))
            return 0;
        return s_get_uint(ctx, root, "id", true, 1, UINT64_MAX, &msg->id, NULL);
    case OQ_CMD_RESOLVE:
    case OQ_CMD_RESOLVED: {
        oq_review_action_t action;
        oq_str_t note;
        if (s_get_uint(ctx, root, "id", true, 1, UINT64_MAX, &msg->id, NULL) < 0 ||
            s_get_str(ctx, root, "action", true, OQ_MAX_NAME_LEN, &s) < 0 ||
            s_get_str(ctx, root, "note", false, OQ_MAX_REVIEW_NOTE_LEN, &note) < 0)
            return -1;
        if (oq_proto_review_action_parse(s.ptr, s.len, &action) < 0)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"action\" must be one of done, retry, fail");
        return 0;
    }
    case OQ_CMD_STATS: {
        /* A request carries an optional page of workers ("limit", "after");
           a reply carries "broker". */
        if (oq_proto_map_get(root, "broker"))
            return 0;
        bool present;
        if (s_get_uint(ctx, root, "limit", false, 0, OQ_MAX_STATS_WORKERS, &u, &present) < 0)
            return -1;
        msg->limit = present ? (uint32_t)u : OQ_DEFAULT_STATS_WORKERS;
        return s_get_uint(ctx, root, "after", false, 0, UINT64_MAX, &msg->after, NULL);
    }
    case OQ_CMD_REVIEW:
    case OQ_CMD_FAILED: {
        /* A request carries optional "queue" and "limit"; a reply carries "jobs". */
        if (oq_proto_map_get(root, "jobs"))
            return 0;
        if (s_get_name(ctx, root, "queue", false, &msg->name) < 0)
            return -1;
        bool present;
        if (s_get_uint(ctx, root, "limit", false, 1, OQ_MAX_FAILED_LIST, &u, &present) < 0)
            return -1;
        msg->limit = present ? (uint32_t)u : OQ_DEFAULT_FAILED_LIST;
        if (s_get_uint(ctx, root, "after", false, 0, UINT64_MAX, &msg->after, NULL) < 0 ||
            s_get_uint(ctx, root, "after_at", false, 0, INT64_MAX, &u, &msg->has_after_at) < 0)
            return -1;
        msg->after_at = msg->has_after_at ? (int64_t)u : 0;
        return 0;
    }
    case OQ_CMD_ERROR: {
        if (s_get_str(ctx, root, "code", true, OQ_MAX_NAME_LEN, &s) < 0 ||
            s_get_str(ctx, root, "message", false, OQ_MAX_ERROR_LEN, &msg->err_text) < 0)
            return -1;
        msg->err_code = OQ_ERR_INTERNAL;
        for (int k = 1; k < OQ_ERR_COUNT_; k++)
            if (oq_str_eq(s, s_err_names[k]))
                msg->err_code = (oq_err_t)k;
        return 0;
    }
    case OQ_CMD_READY: {
        bool present;
        if (s_get_uint(ctx, root, "credit", true, 0, OQ_MAX_CREDIT, &u, NULL) < 0)
            return -1;
        msg->credit = (uint32_t)u;
        if (s_get_name(ctx, root, "name", false, &msg->name) < 0)
            return -1;
        if (s_get_uint(ctx, root, "pid", false, 0, UINT32_MAX, &u, &present) < 0)
            return -1;
        msg->pid = present ? (uint32_t)u : 0;
        if (s_get_uint(ctx, root, "jobs_per_msg", false, 1, OQ_MAX_JOBS_PER_MSG, &u, &present) < 0)
            return -1;
        msg->jobs_per_msg = present ? (uint32_t)u : 1;
        if (s_get_names(ctx, root, "types", OQ_MAX_WORKER_TYPES, &msg->types) < 0 ||
            s_get_names(ctx, root, "queues", OQ_MAX_WORKER_QUEUES, &msg->queues) < 0)
            return -1;
        return 0;
    }
    case OQ_CMD_TOUCH: {
        oq_ack_msg_t *a = &msg->ack;
        if (s_get_uint(ctx, root, "id", true, 1, UINT64_MAX, &a->id, NULL) < 0 ||
            s_get_uint(ctx, root, "attempt", true, 1, UINT32_MAX, &u, NULL) < 0 ||
            s_get_uint(ctx, root, "lease", true, 0, UINT64_MAX, &a->lease, NULL) < 0)
            return -1;
        a->attempt = (uint32_t)u;
        a->has_lease = true;
        return 0;
    }
    case OQ_CMD_ACK: {
        oq_ack_msg_t *a = &msg->ack;
        bool present;
        if (s_get_uint(ctx, root, "id", true, 1, UINT64_MAX, &a->id, NULL) < 0 ||
            s_get_uint(ctx, root, "attempt", true, 1, UINT32_MAX, &u, NULL) < 0)
            return -1;
        a->attempt = (uint32_t)u;
        if (s_get_str(ctx, root, "outcome", true, OQ_MAX_NAME_LEN, &s) < 0)
            return -1;
        if (oq_proto_outcome_parse(s.ptr, s.len, &a->outcome) < 0)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST,
                   "field \"outcome\" must be one of ok, retry, fail, timeout, return, review, "
                   "unavailable");
        if (s_get_str(ctx, root, "result", false, OQ_MAX_NAME_LEN, &s) < 0)
            return -1;
        a->result = OQ_RESULT_NONE;
        if (s.ptr) {
            if (oq_str_eq(s, "applied"))
                a->result = OQ_RESULT_APPLIED;
            else if (oq_str_eq(s, "already_applied"))
                a->result = OQ_RESULT_ALREADY_APPLIED;
            else
                S_FAIL(ctx, OQ_ERR_BAD_REQUEST,
                       "field \"result\" must be \"applied\" or \"already_applied\"");
        }
        if (s_get_str(ctx, root, "error", false, OQ_MAX_ERROR_LEN, &a->error) < 0)
            return -1;
        if (s_get_uint(ctx, root, "credit", false, 0, OQ_MAX_CREDIT, &u, &present) < 0)
            return -1;
        a->credit = present ? (uint32_t)u : 0;
        if (s_get_uint(ctx, root, "lease", false, 0, UINT64_MAX, &a->lease, &a->has_lease) < 0 ||
            s_get_seconds(ctx, root, "delay", OQ_MAX_DELAY_MS, &a->delay_ms, &a->has_delay) < 0)
            return -1;
        if (a->has_delay && a->outcome != OQ_OUTCOME_RETRY && a->outcome != OQ_OUTCOME_RETURN &&
            a->outcome != OQ_OUTCOME_UNAVAILABLE)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST,
                   "field \"delay\" goes only with outcome retry, return or unavailable, not %s",
                   oq_proto_outcome_name(a->outcome));
        if (s_get_bool(ctx, root, "held", &a->held) < 0)
            return -1;
        if (a->held && a->outcome != OQ_OUTCOME_RETURN)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"held\" goes only with outcome return, not %s",
                   oq_proto_outcome_name(a->outcome));
        return 0;
    }
    case OQ_CMD_STATUS: {
        bool present;
        if (s_get_str(ctx, root, "state", true, OQ_MAX_NAME_LEN, &s) < 0)
            return -1;
        msg->status = 0;
        for (int k = OQ_STATUS_READY; k <= OQ_STATUS_UNAVAILABLE; k++)
            if (oq_str_eq(s, s_status_names[k]))
                msg->status = (oq_worker_status_t)k;
        if (msg->status == 0)
            S_FAIL(ctx, OQ_ERR_BAD_REQUEST, "field \"state\" must be \"ready\" or \"unavailable\"");
        if (s_get_seconds(ctx, root, "since", OQ_MAX_DELAY_MS, &msg->status_ms, &present) < 0)
            return -1;
        return s_get_str(ctx, root, "error", false, OQ_MAX_ERROR_LEN, &msg->err_text);
    }
    case OQ_CMD_WELCOME: {
        if (s_get_uint(ctx, root, "heartbeat_ms", true, OQ_MIN_HEARTBEAT_MS, OQ_MAX_HEARTBEAT_MS,
                       &u, NULL) < 0)
            return -1;
        msg->heartbeat_ms = (uint32_t)u;
        if (s_get_uint(ctx, root, "liveness", true, 1, OQ_MAX_LIVENESS, &u, NULL) < 0)
            return -1;
        msg->liveness = (uint32_t)u;
        bool present;
        if (s_get_uint(ctx, root, "acks_per_msg", false, 1, OQ_MAX_ACKS_PER_MSG, &u, &present) < 0)
            return -1;
        msg->acks_per_msg = present ? (uint32_t)u : 0;
        return 0;
    }
    case OQ_CMD_RECONNECT:
        return s_get_str(ctx, root, "reason", false, OQ_MAX_ERROR_LEN, &msg->err_text);
    default:
        return 0;
    }
}

/* The request id of a frame refused as too large, so that the error can be
   matched to its request: read only if the frame is well-formed msgpack
   (checked first, so its decoding is bounded by its size, which libzmq
   bounds by OQ_MAX_WIRE_MSG_BYTES). */
static bool s_peek_req(const void *data, size_t size, uint64_t *req)
{
    const uint8_t *b = data;
    char why[160];
    if (!((b[0] >= 0x80 && b[0] <= 0x8f) || b[0] == 0xde || b[0] == 0xdf) ||
        oq_mpcheck(data, size, OQ_MAX_DEPTH, why, sizeof why) < 0)
        return false;
    msgpack_unpacked unpacked;
    msgpack_unpacked_init(&unpacked);
    bool found = false;
    if (msgpack_unpack_next(&unpacked, data, size, NULL) == MSGPACK_UNPACK_SUCCESS) {
        const msgpack_object *r = oq_proto_map_get(&unpacked.data, "req");
        if (r && r->type == MSGPACK_OBJECT_POSITIVE_INTEGER && r->via.u64 <= INT64_MAX) {
            *req = r->via.u64;
            found = true;
        }
    }
    msgpack_unpacked_destroy(&unpacked);
    return found;
}

/* Decode one frame; with shallow set, a "job" message's job is left to
   oq_proto_decode_delivery. */
static int s_decode(oq_msg_t *msg, const void *data, size_t size, oq_err_t *code, char *reason,
                    size_t reason_len, bool shallow)
{
    memset(msg, 0, sizeof *msg);
    s_errctx_t ctx = {code, reason, reason_len};
    *code = OQ_ERR_NONE;
    if (reason_len)
        reason[0] = 0;
    if (size > OQ_MAX_FRAME_BYTES) {
        msg->has_req = s_peek_req(data, size, &msg->req);
        S_FAIL(&ctx, OQ_ERR_TOO_LARGE, "frame is %zu bytes, the limit is %d", size,
               OQ_MAX_FRAME_BYTES);
    }
    if (size == 0)
        S_FAIL(&ctx, OQ_ERR_MALFORMED, "empty frame");
    const uint8_t *b = data;
    /* The first byte must open a map; checked before anything else so that
       stray text ("GET / HTTP/1.1") gets a plain answer. */
    if (!((b[0] >= 0x80 && b[0] <= 0x8f) || b[0] == 0xde || b[0] == 0xdf))
        S_FAIL(&ctx, OQ_ERR_MALFORMED, "message must be a msgpack map");
    char why[160];
    if (oq_mpcheck(data, size, OQ_MAX_DEPTH, why, sizeof why) < 0)
        S_FAIL(&ctx, OQ_ERR_MALFORMED, "malformed msgpack: %s", why);

    /* msgpack-c's unpacker does not copy strings: the tree points into the
       bytes it was given. The header promises that decoded strings live as long
       as the message, so the message decodes (and keeps) its own copy, freed
       with its zone. */
    char *copy = malloc(size);
    if (!copy)
        S_FAIL(&ctx, OQ_ERR_INTERNAL, "out of memory");
    memcpy(copy, data, size);
    msgpack_unpacked_init(&msg->unpacked_);
    msg->live_ = true;
    size_t off = 0;
    if (msgpack_unpack_next(&msg->unpacked_, copy, size, &off) != MSGPACK_UNPACK_SUCCESS) {
        free(copy);
        S_FAIL(&ctx, OQ_ERR_MALFORMED, "malformed msgpack");
    }
    /* The root is a map, so the unpacker has made a zone. */
    if (!msg->unpacked_.zone || !msgpack_zone_push_finalizer(msg->unpacked_.zone, free, copy)) {
        free(copy);
        S_FAIL(&ctx, OQ_ERR_INTERNAL, "out of memory");
    }
    if (off != size)
        S_FAIL(&ctx, OQ_ERR_MALFORMED, "malformed msgpack");
    msg->root = msg->unpacked_.data;
    const msgpack_object *root = &msg->root;

    const msgpack_object *req = oq_proto_map_get(root, "req");
    if (req) {
        if (req->type != MSGPACK_OBJECT_POSITIVE_INTEGER || req->via.u64 > INT64_MAX)
            S_FAIL(&ctx, OQ_ERR_BAD_REQUEST, "field \"req\" must be an integer from 0 to 2^63-1");
        msg->has_req = true;
        msg->req = req->via.u64;
    }

    /* After req, so that even a version error can be matched to its request. */
    const msgpack_object *v = oq_proto_map_get(root, "v");
    if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 != OQ_PROTO_VERSION)
        S_FAIL(&ctx, OQ_ERR_BAD_VERSION, "field \"v\" must be %d (this broker speaks protocol v%d)",
               OQ_PROTO_VERSION, OQ_PROTO_VERSION);

    const msgpack_object *cmd = oq_proto_map_get(root, "cmd");
    if (!cmd || cmd->type != MSGPACK_OBJECT_STR)
        S_FAIL(&ctx, OQ_ERR_BAD_REQUEST, "field \"cmd\" must be a string");
    oq_str_t name = {cmd->via.str.ptr, cmd->via.str.size};
    for (int k = 1; k < OQ_CMD_COUNT_; k++) {
        if (oq_str_eq(name, s_cmd_names[k])) {
            msg->cmd = (oq_cmd_t)k;
            break;
        }
    }
    if (msg->cmd == OQ_CMD_UNKNOWN) {
        char shown[OQ_PROTO_QUOTED_BYTES(OQ_MAX_NAME_LEN)];
        oq_proto_quote(name, shown, sizeof shown);
        S_FAIL(&ctx, OQ_ERR_UNKNOWN_COMMAND, "unknown command \"%s\"", shown);
    }
    if (shallow && msg->cmd == OQ_CMD_JOB)
        return 0;
    return s_decode_fields(&ctx, msg, root);
}

int oq_proto_decode(oq_msg_t *msg, const void *data, size_t size, oq_err_t *code, char *reason,
                    size_t reason_len)
{
    return s_decode(msg, data, size, code, reason, reason_len, false);
}

int oq_proto_decode_shallow(oq_msg_t *msg, const void *data, size_t size, oq_err_t *code,
                            char *reason, size_t reason_len)
{
    return s_decode(msg, data, size, code, reason, reason_len, true);
}

void oq_proto_msg_release(oq_msg_t *msg)
{
    if (msg->live_) {
        msgpack_unpacked_destroy(&msg->unpacked_);
        msg->live_ = false;
    }
    if (msg->payload_.data) {
        msgpack_sbuffer_destroy(&msg->payload_);
        msg->payload_.data = NULL;
    }
}

uint32_t oq_proto_entry_count(const oq_msg_t *msg)
{
    return msg->entries ? msg->entries->via.array.size : 0;
}

int oq_proto_decode_entry(const oq_msg_t *msg, uint32_t i, oq_msg_t *entry, oq_err_t *code,
                          char *reason, size_t reason_len)
{
    memset(entry, 0, sizeof *entry);
    s_errctx_t ctx = {code, reason, reason_len};
    *code = OQ_ERR_NONE;
    if (reason_len)
        reason[0] = 0;
    if (i >= oq_proto_entry_count(msg) || (msg->cmd != OQ_CMD_JOBS && msg->cmd != OQ_CMD_ACKS))
        S_FAIL(&ctx, OQ_ERR_INTERNAL, "no entry %u in this message", i);
    entry->root = msg->entries->via.array.ptr[i];
    if (msg->cmd == OQ_CMD_JOBS) {
        entry->cmd = OQ_CMD_JOB;
        return s_decode_job(&ctx, entry, &entry->root, true);
    }
    entry->cmd = OQ_CMD_ACK;
    return s_decode_fields(&ctx, entry, &entry->root);
}

int oq_proto_decode_delivery(const oq_msg_t *msg, uint32_t i, oq_job_msg_t *job,
                             const msgpack_object **payload, oq_err_t *code, char *reason,
                             size_t reason_len)
{
    memset(job, 0, sizeof *job);
    s_errctx_t ctx = {code, reason, reason_len};
    *code = OQ_ERR_NONE;
    if (reason_len)
        reason[0] = 0;
    const msgpack_object *entry;
    if (msg->cmd == OQ_CMD_JOB)
        entry = oq_proto_map_get(&msg->root, "job");
    else if (msg->cmd == OQ_CMD_JOBS && i < oq_proto_entry_count(msg))
        entry = &msg->entries->via.array.ptr[i];
    else
        S_FAIL(&ctx, OQ_ERR_INTERNAL, "no delivery %u in this message", i);
    return s_decode_job_into(&ctx, job, NULL, payload, entry, true);
}

int oq_proto_entry_ids(const oq_msg_t *msg, uint32_t i, uint64_t *id, uint32_t *attempt,
                       bool *has_lease, uint64_t *lease)
{
    const msgpack_object *e = NULL;
    if (msg->cmd == OQ_CMD_JOB)
        e = oq_proto_map_get(&msg->root, "job");
    else if ((msg->cmd == OQ_CMD_JOBS || msg->cmd == OQ_CMD_ACKS) && i < oq_proto_entry_count(msg))
        e = &msg->entries->via.array.ptr[i];
    const msgpack_object *o_id = oq_proto_map_get(e, "id");
    const msgpack_object *o_attempt = oq_proto_map_get(e, "attempt");
    if (!o_id || o_id->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o_id->via.u64 == 0 ||
        !o_attempt || o_attempt->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        o_attempt->via.u64 == 0 || o_attempt->via.u64 > UINT32_MAX)
        return -1;
    *id = o_id->via.u64;
    *attempt = (uint32_t)o_attempt->via.u64;
    const msgpack_object *o_lease = oq_proto_map_get(e, "lease");
    *has_lease = o_lease && o_lease->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
    *lease = *has_lease ? o_lease->via.u64 : 0;
    return 0;
}

int oq_proto_resolve_get(const oq_msg_t *msg, oq_review_action_t *action, oq_str_t *note)
{
    if (msg->cmd != OQ_CMD_RESOLVE && msg->cmd != OQ_CMD_RESOLVED)
        return -1;
    const msgpack_object *a = oq_proto_map_get(&msg->root, "action");
    const msgpack_object *n = oq_proto_map_get(&msg->root, "note");
    if (!a || a->type != MSGPACK_OBJECT_STR ||
        oq_proto_review_action_parse(a->via.str.ptr, a->via.str.size, action) < 0)
        return -1;
    note->ptr = n && n->type == MSGPACK_OBJECT_STR ? n->via.str.ptr : "";
    note->len = n && n->type == MSGPACK_OBJECT_STR ? n->via.str.size : 0;
    return 0;
}

/* ---- encoding ---------------------------------------------------------- */

void oq_proto_pack_cstr(msgpack_packer *pk, const char *text)
{
    size_t n = strlen(text);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, text, n);
}

void oq_proto_pack_str(msgpack_packer *pk, oq_str_t s)
{
    msgpack_pack_str(pk, s.len);
    if (s.len)
        msgpack_pack_str_body(pk, s.ptr, s.len);
}

/* text, cut to its first max bytes (error texts, notes). */
static void s_pack_capped(msgpack_packer *pk, const char *text, size_t max)
{
    size_t n = strlen(text);
    oq_proto_pack_str(pk, (oq_str_t){text, n > max ? max : n});
}

static void s_pack_seconds(msgpack_packer *pk, int64_t ms)
{
    if (ms % 1000 == 0)
        msgpack_pack_int64(pk, ms / 1000);
    else
        msgpack_pack_double(pk, (double)ms / 1000.0);
}

void oq_proto_begin(msgpack_packer *pk, oq_cmd_t cmd, int64_t req, uint32_t extra)
{
    msgpack_pack_map(pk, 2 + (req >= 0 ? 1 : 0) + extra);
    oq_proto_pack_cstr(pk, "v");
    msgpack_pack_uint32(pk, OQ_PROTO_VERSION);
    oq_proto_pack_cstr(pk, "cmd");
    oq_proto_pack_cstr(pk, oq_proto_cmd_name(cmd));
    if (req >= 0) {
        oq_proto_pack_cstr(pk, "req");
        msgpack_pack_uint64(pk, (uint64_t)req);
    }
}

static void s_init(msgpack_packer *pk, msgpack_sbuffer *buf)
{
    msgpack_packer_init(pk, buf, msgpack_sbuffer_write);
}

static void s_pack_job(msgpack_packer *pk, const oq_job_msg_t *j, bool delivery)
{
    uint32_t n = 3 + (delivery ? 3 : 0) + (delivery && j->has_lease) +
                 (j->has_max_tries && !delivery) + (j->has_timeout || delivery) +
                 (j->has_delay && !delivery) + (j->has_priority && !delivery) +
                 (j->backoff_len > 0);
    bool unique = !delivery && j->unique_key.len > 0, overlap = !delivery && j->overlap_key.len > 0;
    n += unique * 2 + overlap;
    msgpack_pack_map(pk, n);
    if (delivery) {
        oq_proto_pack_cstr(pk, "id");
        msgpack_pack_uint64(pk, j->id);
        oq_proto_pack_cstr(pk, "attempt");
        msgpack_pack_uint32(pk, j->attempt);
        oq_proto_pack_cstr(pk, "max_tries");
        msgpack_pack_uint32(pk, j->max_tries);
        if (j->has_lease) {
            oq_proto_pack_cstr(pk, "lease");
            msgpack_pack_uint64(pk, j->lease);
        }
    }
    oq_proto_pack_cstr(pk, "type");
    oq_proto_pack_str(pk, j->type);
    oq_proto_pack_cstr(pk, "queue");
    oq_proto_pack_str(pk, j->queue.ptr ? j->queue : oq_str(OQ_DEFAULT_QUEUE));
    oq_proto_pack_cstr(pk, "payload");
    if (j->payload && j->payload_len)
        msgpack_pack_str_body(pk, j->payload, j->payload_len); /* raw: already msgpack */
    else
        msgpack_pack_map(pk, 0);
    if (j->has_max_tries && !delivery) {
        oq_proto_pack_cstr(pk, "max_tries");
        msgpack_pack_uint32(pk, j->max_tries);
    }
    if (j->has_timeout || delivery) {
        oq_proto_pack_cstr(pk, "timeout");
        s_pack_seconds(pk, j->timeout_ms);
    }
    if (j->has_delay && !delivery) {
        oq_proto_pack_cstr(pk, "delay");
        s_pack_seconds(pk, j->delay_ms);
    }
    if (j->has_priority && !delivery) {
        oq_proto_pack_cstr(pk, "priority");
        msgpack_pack_int32(pk, j->priority);
    }
    if (j->backoff_len > 0) {
        oq_proto_pack_cstr(pk, "backoff");
        msgpack_pack_array(pk, j->backoff_len);
        for (uint32_t k = 0; k < j->backoff_len; k++)
            s_pack_seconds(pk, j->backoff_ms[k]);
    }
    if (unique) {
        oq_proto_pack_cstr(pk, "unique_key");
        oq_proto_pack_str(pk, j->unique_key);
        oq_proto_pack_cstr(pk, "unique_for");
        if (j->unique_for_ms > 0)
            s_pack_seconds(pk, j->unique_for_ms);
        else
            oq_proto_pack_cstr(pk, "done");
    }
    if (overlap) {
        oq_proto_pack_cstr(pk, "overlap_key");
        oq_proto_pack_str(pk, j->overlap_key);
    }
}

/* A dispatch, with "wait" if wait_ms >= 0. */
static void s_encode_dispatch(msgpack_sbuffer *buf, int64_t req, const oq_job_msg_t *job,
                              int64_t wait_ms)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    bool has_dispatch_id = job->dispatch_id.len > 0, has_wait = wait_ms >= 0;
    oq_proto_begin(&pk, OQ_CMD_DISPATCH, req, 1 + has_dispatch_id + has_wait);
    if (has_dispatch_id) {
        oq_proto_pack_cstr(&pk, "dispatch_id");
        oq_proto_pack_str(&pk, job->dispatch_id);
    }
    if (has_wait) {
        oq_proto_pack_cstr(&pk, "wait");
        s_pack_seconds(&pk, wait_ms > OQ_MAX_WAIT_MS ? OQ_MAX_WAIT_MS : wait_ms);
    }
    oq_proto_pack_cstr(&pk, "job");
    s_pack_job(&pk, job, false);
}

void oq_proto_encode_dispatch(msgpack_sbuffer *buf, int64_t req, const oq_job_msg_t *job)
{
    s_encode_dispatch(buf, req, job, -1);
}

void oq_proto_encode_dispatch_wait(msgpack_sbuffer *buf, int64_t req, const oq_job_msg_t *job,
                                   int64_t wait_ms)
{
    s_encode_dispatch(buf, req, job, wait_ms < 0 ? 0 : wait_ms);
}

void oq_proto_encode_job(msgpack_sbuffer *buf, const oq_job_msg_t *job)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_JOB, -1, 1);
    oq_proto_pack_cstr(&pk, "job");
    s_pack_job(&pk, job, true);
}

void oq_proto_encode_jobs(msgpack_sbuffer *buf, const oq_job_msg_t *jobs, size_t count)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_JOBS, -1, 1);
    oq_proto_pack_cstr(&pk, "jobs");
    msgpack_pack_array(&pk, count);
    for (size_t i = 0; i < count; i++)
        s_pack_job(&pk, &jobs[i], true);
}

void oq_proto_encode_dispatched(msgpack_sbuffer *buf, int64_t req, uint64_t id)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_DISPATCHED, req, 1);
    oq_proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, id);
}

void oq_proto_encode_dispatched_unique(msgpack_sbuffer *buf, int64_t req, uint64_t id)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_DISPATCHED, req, 2);
    oq_proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, id);
    oq_proto_pack_cstr(&pk, "unique");
    msgpack_pack_true(&pk);
}

void oq_proto_encode_requeue(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, uint64_t id)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, cmd, req, 1);
    oq_proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, id);
}

void oq_proto_encode_error(msgpack_sbuffer *buf, int64_t req, oq_err_t code, const char *text)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_ERROR, req, 2);
    oq_proto_pack_cstr(&pk, "code");
    oq_proto_pack_cstr(&pk, oq_proto_err_name(code));
    oq_proto_pack_cstr(&pk, "message");
    s_pack_capped(&pk, text, OQ_MAX_ERROR_LEN);
}

void oq_proto_encode_simple(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, cmd, req, 0);
}

void oq_proto_encode_stats(msgpack_sbuffer *buf, int64_t req, uint64_t after, uint32_t limit)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_STATS, req, (after ? 1 : 0) + 1);
    if (after) {
        oq_proto_pack_cstr(&pk, "after");
        msgpack_pack_uint64(&pk, after);
    }
    oq_proto_pack_cstr(&pk, "limit");
    msgpack_pack_uint32(&pk, limit);
}

void oq_proto_encode_failed_request(msgpack_sbuffer *buf, int64_t req, const char *queue,
                                    uint32_t limit)
{
    oq_proto_encode_failed_page(buf, req, queue, 0, limit);
}

/* A page request of the failed store or the review store: after_at < 0 for
   no failure time in the cursor. */
static void s_encode_page(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, const char *queue,
                          int64_t after_at, uint64_t after, uint32_t limit)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    bool has_at = after_at >= 0;
    oq_proto_begin(&pk, cmd, req, (queue ? 1 : 0) + (after ? 1 : 0) + has_at + 1);
    if (queue) {
        oq_proto_pack_cstr(&pk, "queue");
        oq_proto_pack_cstr(&pk, queue);
    }
    if (after) {
        oq_proto_pack_cstr(&pk, "after");
        msgpack_pack_uint64(&pk, after);
    }
    if (has_at) {
        oq_proto_pack_cstr(&pk, "after_at");
        msgpack_pack_uint64(&pk, (uint64_t)after_at);
    }
    oq_proto_pack_cstr(&pk, "limit");
    msgpack_pack_uint32(&pk, limit);
}

void oq_proto_encode_dispatch_batch(msgpack_sbuffer *buf, int64_t req, const oq_job_msg_t *jobs,
                                    size_t count, const oq_job_msg_t *const callbacks[3],
                                    bool allow_failures, oq_str_t dispatch_id)
{
    static const char *const names[3] = {"then", "catch", "finally"};
    msgpack_packer pk;
    s_init(&pk, buf);
    uint32_t extra = 1 + (dispatch_id.len > 0) + allow_failures;
    for (int i = 0; i < 3; i++)
        extra += callbacks[i] != NULL;
    oq_proto_begin(&pk, OQ_CMD_DISPATCH_BATCH, req, extra);
    if (dispatch_id.len) {
        oq_proto_pack_cstr(&pk, "dispatch_id");
        oq_proto_pack_str(&pk, dispatch_id);
    }
    if (allow_failures) {
        oq_proto_pack_cstr(&pk, "allow_failures");
        msgpack_pack_true(&pk);
    }
    for (int i = 0; i < 3; i++) {
        if (!callbacks[i])
            continue;
        oq_proto_pack_cstr(&pk, names[i]);
        s_pack_job(&pk, callbacks[i], false);
    }
    oq_proto_pack_cstr(&pk, "jobs");
    msgpack_pack_array(&pk, count);
    for (size_t i = 0; i < count; i++)
        s_pack_job(&pk, &jobs[i], false);
}

void oq_proto_encode_dispatch_chain(msgpack_sbuffer *buf, int64_t req, const oq_job_msg_t *job,
                                    const oq_job_msg_t *links, size_t count,
                                    const oq_job_msg_t *chain_catch)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    bool has_dispatch_id = job->dispatch_id.len > 0;
    oq_proto_begin(&pk, OQ_CMD_DISPATCH, req, 2 + has_dispatch_id + (chain_catch != NULL));
    if (has_dispatch_id) {
        oq_proto_pack_cstr(&pk, "dispatch_id");
        oq_proto_pack_str(&pk, job->dispatch_id);
    }
    oq_proto_pack_cstr(&pk, "job");
    s_pack_job(&pk, job, false);
    oq_proto_pack_cstr(&pk, "chain");
    msgpack_pack_array(&pk, count);
    for (size_t i = 0; i < count; i++)
        s_pack_job(&pk, &links[i], false);
    if (chain_catch) {
        oq_proto_pack_cstr(&pk, "chain_catch");
        s_pack_job(&pk, chain_catch, false);
    }
}

void oq_proto_encode_batch_dispatched(msgpack_sbuffer *buf, int64_t req, uint64_t batch,
                                      uint64_t first, uint64_t count)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_BATCH_DISPATCHED, req, 3);
    oq_proto_pack_cstr(&pk, "batch");
    msgpack_pack_uint64(&pk, batch);
    oq_proto_pack_cstr(&pk, "first");
    msgpack_pack_uint64(&pk, first);
    oq_proto_pack_cstr(&pk, "count");
    msgpack_pack_uint64(&pk, count);
}

void oq_proto_encode_batch_request(msgpack_sbuffer *buf, int64_t req, const char *op, uint64_t id)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_BATCH, req, 1 + (id != 0));
    oq_proto_pack_cstr(&pk, "op");
    oq_proto_pack_cstr(&pk, op);
    if (id) {
        oq_proto_pack_cstr(&pk, "id");
        msgpack_pack_uint64(&pk, id);
    }
}

void oq_proto_encode_job_id(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, uint64_t id)
{
    oq_proto_encode_requeue(buf, cmd, req, id);
}

void oq_proto_encode_queue_op(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, const char *queue)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, cmd, req, queue ? 1 : 0);
    if (queue) {
        oq_proto_pack_cstr(&pk, "queue");
        oq_proto_pack_cstr(&pk, queue);
    }
}

void oq_proto_encode_count(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, uint64_t count)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, cmd, req, 1);
    oq_proto_pack_cstr(&pk, "count");
    msgpack_pack_uint64(&pk, count);
}

void oq_proto_encode_prune_failed(msgpack_sbuffer *buf, int64_t req, const char *queue,
                                  int64_t older_than_ms, uint32_t limit)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_PRUNE_FAILED, req, 1 + (queue ? 1 : 0) + (limit ? 1 : 0));
    oq_proto_pack_cstr(&pk, "older_than");
    s_pack_seconds(&pk, older_than_ms);
    if (queue) {
        oq_proto_pack_cstr(&pk, "queue");
        oq_proto_pack_cstr(&pk, queue);
    }
    if (limit) {
        oq_proto_pack_cstr(&pk, "limit");
        msgpack_pack_uint32(&pk, limit);
    }
}

/* pruned_failed or cleared: {count, more}. */
static void s_encode_count_more(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, uint64_t count,
                                bool more)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, cmd, req, 2);
    oq_proto_pack_cstr(&pk, "count");
    msgpack_pack_uint64(&pk, count);
    oq_proto_pack_cstr(&pk, "more");
    if (more)
        msgpack_pack_true(&pk);
    else
        msgpack_pack_false(&pk);
}

void oq_proto_encode_pruned_failed(msgpack_sbuffer *buf, int64_t req, uint64_t count, bool more)
{
    s_encode_count_more(buf, OQ_CMD_PRUNED_FAILED, req, count, more);
}

void oq_proto_encode_clear(msgpack_sbuffer *buf, int64_t req, const char *queue, uint32_t limit)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_CLEAR, req, 1 + (limit ? 1 : 0));
    oq_proto_pack_cstr(&pk, "queue");
    oq_proto_pack_cstr(&pk, queue);
    if (limit) {
        oq_proto_pack_cstr(&pk, "limit");
        msgpack_pack_uint32(&pk, limit);
    }
}

void oq_proto_encode_cleared(msgpack_sbuffer *buf, int64_t req, uint64_t count, bool more)
{
    s_encode_count_more(buf, OQ_CMD_CLEARED, req, count, more);
}

void oq_proto_encode_failed_page(msgpack_sbuffer *buf, int64_t req, const char *queue,
                                 uint64_t after, uint32_t limit)
{
    s_encode_page(buf, OQ_CMD_FAILED, req, queue, -1, after, limit);
}

void oq_proto_encode_failed_cursor(msgpack_sbuffer *buf, int64_t req, const char *queue,
                                   int64_t after_at, uint64_t after, uint32_t limit)
{
    s_encode_page(buf, OQ_CMD_FAILED, req, queue, after_at, after, limit);
}

void oq_proto_encode_review_page(msgpack_sbuffer *buf, int64_t req, const char *queue,
                                 int64_t after_at, uint64_t after, uint32_t limit)
{
    s_encode_page(buf, OQ_CMD_REVIEW, req, queue, after_at, after, limit);
}

void oq_proto_encode_review_show(msgpack_sbuffer *buf, int64_t req, uint64_t id)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_REVIEW_SHOW, req, 1);
    oq_proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, id);
}

void oq_proto_encode_resolve(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, uint64_t id,
                             oq_review_action_t action, const char *note)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    bool has_note = note && note[0];
    oq_proto_begin(&pk, cmd, req, 2 + has_note);
    oq_proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, id);
    oq_proto_pack_cstr(&pk, "action");
    oq_proto_pack_cstr(&pk, oq_proto_review_action_name(action));
    if (has_note) {
        oq_proto_pack_cstr(&pk, "note");
        s_pack_capped(&pk, note, OQ_MAX_REVIEW_NOTE_LEN);
    }
}

static void s_pack_names(msgpack_packer *pk, const char *key, const char *const *names,
                         size_t count)
{
    oq_proto_pack_cstr(pk, key);
    msgpack_pack_array(pk, count);
    for (size_t i = 0; i < count; i++)
        oq_proto_pack_cstr(pk, names[i]);
}

void oq_proto_encode_ready(msgpack_sbuffer *buf, uint32_t credit, const char *name, uint32_t pid)
{
    oq_proto_encode_ready_routed(buf, credit, name, pid, NULL, 0, NULL, 0);
}

void oq_proto_encode_ready_routed(msgpack_sbuffer *buf, uint32_t credit, const char *name,
                                  uint32_t pid, const char *const *types, size_t type_count,
                                  const char *const *queues, size_t queue_count)
{
    oq_proto_encode_ready_multi(buf, credit, name, pid, types, type_count, queues, queue_count, 1);
}

void oq_proto_encode_ready_multi(msgpack_sbuffer *buf, uint32_t credit, const char *name,
                                 uint32_t pid, const char *const *types, size_t type_count,
                                 const char *const *queues, size_t queue_count,
                                 uint32_t jobs_per_msg)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    bool has_types = types && type_count > 0, has_queues = queues && queue_count > 0;
    bool multi = jobs_per_msg > 1;
    oq_proto_begin(&pk, OQ_CMD_READY, -1, 2 + (name ? 1 : 0) + has_types + has_queues + multi);
    if (multi) {
        oq_proto_pack_cstr(&pk, "jobs_per_msg");
        msgpack_pack_uint32(&pk, jobs_per_msg > OQ_MAX_JOBS_PER_MSG ? OQ_MAX_JOBS_PER_MSG
                                                                    : jobs_per_msg);
    }
    if (has_types)
        s_pack_names(&pk, "types", types, type_count);
    if (has_queues)
        s_pack_names(&pk, "queues", queues, queue_count);
    oq_proto_pack_cstr(&pk, "credit");
    msgpack_pack_uint32(&pk, credit);
    oq_proto_pack_cstr(&pk, "pid");
    msgpack_pack_uint32(&pk, pid);
    if (name) {
        oq_proto_pack_cstr(&pk, "name");
        oq_proto_pack_cstr(&pk, name);
    }
}

void oq_proto_encode_welcome(msgpack_sbuffer *buf, uint32_t heartbeat_ms, uint32_t liveness)
{
    oq_proto_encode_welcome_acks(buf, heartbeat_ms, liveness, 0);
}

void oq_proto_encode_welcome_acks(msgpack_sbuffer *buf, uint32_t heartbeat_ms, uint32_t liveness,
                                  uint32_t acks_per_msg)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_WELCOME, -1, 2 + (acks_per_msg > 0));
    oq_proto_pack_cstr(&pk, "heartbeat_ms");
    msgpack_pack_uint32(&pk, heartbeat_ms);
    oq_proto_pack_cstr(&pk, "liveness");
    msgpack_pack_uint32(&pk, liveness);
    if (acks_per_msg > 0) {
        oq_proto_pack_cstr(&pk, "acks_per_msg");
        msgpack_pack_uint32(&pk, acks_per_msg > OQ_MAX_ACKS_PER_MSG ? OQ_MAX_ACKS_PER_MSG
                                                                    : acks_per_msg);
    }
}

/* An ack's fields: as a whole "ack" message (entry false: v and cmd
   first), or as one map of an "acks" message's list. */
static void s_pack_ack(msgpack_packer *pk, const oq_ack_msg_t *ack, bool entry)
{
    bool has_result = ack->outcome == OQ_OUTCOME_OK && ack->result != OQ_RESULT_NONE;
    bool has_error = ack->outcome != OQ_OUTCOME_OK && ack->error.len > 0;
    bool has_delay =
        ack->has_delay && (ack->outcome == OQ_OUTCOME_RETRY || ack->outcome == OQ_OUTCOME_RETURN ||
                           ack->outcome == OQ_OUTCOME_UNAVAILABLE);
    bool held = ack->held && ack->outcome == OQ_OUTCOME_RETURN;
    uint32_t fields = 4 + has_result + has_error + ack->has_lease + has_delay + held;
    if (entry)
        msgpack_pack_map(pk, fields);
    else
        oq_proto_begin(pk, OQ_CMD_ACK, -1, fields);
    oq_proto_pack_cstr(pk, "id");
    msgpack_pack_uint64(pk, ack->id);
    oq_proto_pack_cstr(pk, "attempt");
    msgpack_pack_uint32(pk, ack->attempt);
    oq_proto_pack_cstr(pk, "outcome");
    oq_proto_pack_cstr(pk, oq_proto_outcome_name(ack->outcome));
    oq_proto_pack_cstr(pk, "credit");
    msgpack_pack_uint32(pk, ack->credit);
    if (has_result) {
        oq_proto_pack_cstr(pk, "result");
        oq_proto_pack_cstr(pk, oq_proto_result_name(ack->result));
    }
    if (has_error) {
        oq_proto_pack_cstr(pk, "error");
        oq_str_t e = ack->error;
        if (e.len > OQ_MAX_ERROR_LEN)
            e.len = OQ_MAX_ERROR_LEN;
        oq_proto_pack_str(pk, e);
    }
    if (ack->has_lease) {
        oq_proto_pack_cstr(pk, "lease");
        msgpack_pack_uint64(pk, ack->lease);
    }
    if (has_delay) {
        oq_proto_pack_cstr(pk, "delay");
        s_pack_seconds(pk, ack->delay_ms);
    }
    if (held) {
        oq_proto_pack_cstr(pk, "held");
        msgpack_pack_true(pk);
    }
}

void oq_proto_encode_ack(msgpack_sbuffer *buf, const oq_ack_msg_t *ack)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    s_pack_ack(&pk, ack, false);
}

void oq_proto_encode_acks(msgpack_sbuffer *buf, const oq_ack_msg_t *acks, size_t count)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_ACKS, -1, 1);
    oq_proto_pack_cstr(&pk, "acks");
    msgpack_pack_array(&pk, count);
    for (size_t i = 0; i < count; i++)
        s_pack_ack(&pk, &acks[i], true);
}

void oq_proto_encode_touch(msgpack_sbuffer *buf, const oq_ack_msg_t *touch)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_TOUCH, -1, 3);
    oq_proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, touch->id);
    oq_proto_pack_cstr(&pk, "attempt");
    msgpack_pack_uint32(&pk, touch->attempt);
    oq_proto_pack_cstr(&pk, "lease");
    msgpack_pack_uint64(&pk, touch->lease);
}

void oq_proto_encode_status(msgpack_sbuffer *buf, oq_worker_status_t status, int64_t since_ms,
                            const char *error)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    bool has_error = error && error[0];
    oq_proto_begin(&pk, OQ_CMD_STATUS, -1, 2 + has_error);
    oq_proto_pack_cstr(&pk, "state");
    oq_proto_pack_cstr(&pk, oq_proto_status_name(status));
    oq_proto_pack_cstr(&pk, "since");
    s_pack_seconds(&pk, since_ms < 0 ? 0 : since_ms > OQ_MAX_DELAY_MS ? OQ_MAX_DELAY_MS : since_ms);
    if (has_error) {
        oq_proto_pack_cstr(&pk, "error");
        s_pack_capped(&pk, error, OQ_MAX_ERROR_LEN);
    }
}

void oq_proto_encode_wait(msgpack_sbuffer *buf, int64_t req, uint64_t id, int64_t timeout_ms)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_WAIT, req, 2);
    oq_proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, id);
    oq_proto_pack_cstr(&pk, "timeout");
    s_pack_seconds(&pk, timeout_ms < 0                ? 0
                        : timeout_ms > OQ_MAX_WAIT_MS ? OQ_MAX_WAIT_MS
                                                      : timeout_ms);
}

void oq_proto_encode_waited(msgpack_sbuffer *buf, int64_t req, uint64_t id, oq_wait_state_t state,
                            const char *error)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    bool has_error = error && error[0];
    oq_proto_begin(&pk, OQ_CMD_WAITED, req, 2 + has_error);
    oq_proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, id);
    oq_proto_pack_cstr(&pk, "state");
    oq_proto_pack_cstr(&pk, oq_proto_wait_state_name(state));
    if (has_error) {
        oq_proto_pack_cstr(&pk, "error");
        s_pack_capped(&pk, error, OQ_MAX_ERROR_LEN);
    }
}

void oq_proto_encode_reconnect(msgpack_sbuffer *buf, const char *reason)
{
    msgpack_packer pk;
    s_init(&pk, buf);
    oq_proto_begin(&pk, OQ_CMD_RECONNECT, -1, 1);
    oq_proto_pack_cstr(&pk, "reason");
    oq_proto_pack_cstr(&pk, reason);
}
