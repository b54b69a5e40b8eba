/*  record.c: encoding and decoding of the journal format. Encoders write the
    frame's length and CRC last, once the body is in the buffer; the decoder
    reads through a cursor that refuses to step past the end, and each record
    type must fill its body exactly: a record of the right CRC but the wrong
    shape was written by a different program and is refused, not guessed at. */
#include "record.h"

#include <stdio.h>
#include <string.h>

#include "crc32c.h"
#include "onceq/limits.h"

/* Header field offsets (docs/journal.md, "File header"). */
#define S_HDR_VERSION  8
#define S_HDR_FLAGS    12
#define S_HDR_CREATED  16
#define S_HDR_KEY      24
#define S_HDR_RESERVED (S_HDR_KEY + OQ_SIPHASH_KEY_BYTES)
#define S_HDR_CRC      44

/* Fixed parts of the bodies, after the type byte. */
#define S_ID_BYTES      8
#define S_ATTEMPT_BYTES 4
#define S_TIME_BYTES    8
#define S_TYPE_BYTES    1
#define S_DISPATCHED_FIXED_BYTES                                                                   \
    (S_ID_BYTES + 2 * S_TIME_BYTES + 4 /* timeout */ + 4 /* priority */ + 4 /* max_tries */ +      \
     1 /* backoff_len */ + 1 /* type_len */ + 1 /* queue_len */ + 1 /* dispatch_id_len */ +        \
     4 /* payload_len */)
#define S_DEDUPE_BODY_BYTES (OQ_SIPHASH_DIGEST_BYTES + S_ID_BYTES + S_TIME_BYTES)

_Static_assert(S_HDR_RESERVED + 4 == S_HDR_CRC, "header layout");
_Static_assert(S_HDR_CRC + 4 == OQ_RECORD_HEADER_BYTES, "header layout");

static const char *s_type_names[] = {
    [OQ_RECORD_DISPATCHED] = "dispatched",
    [OQ_RECORD_LEASED] = "leased",
    [OQ_RECORD_RETRY] = "retry",
    [OQ_RECORD_FAILED] = "failed",
    [OQ_RECORD_DONE] = "done",
    [OQ_RECORD_REQUEUED] = "requeued",
    [OQ_RECORD_DEDUPE] = "dedupe",
    [OQ_RECORD_NEXT_ID] = "next_id",
    [OQ_RECORD_FORGOTTEN] = "forgotten",
    [OQ_RECORD_CANCELLED] = "cancelled",
    [OQ_RECORD_REVIEW] = "review",
    [OQ_RECORD_RESOLVED] = "resolved",
    [OQ_RECORD_KEYS] = "keys",
    [OQ_RECORD_GENERATION] = "generation",
    [OQ_RECORD_BATCH] = "batch",
    [OQ_RECORD_BATCH_FIRED] = "batch_fired",
    [OQ_RECORD_BATCH_CANCELLED] = "batch_cancelled",
    [OQ_RECORD_CHAIN] = "chain",
    [OQ_RECORD_CHAIN_FIRED] = "chain_fired",
};

#define S_TYPE_SLOTS ((int)(sizeof s_type_names / sizeof s_type_names[0]))

bool oq_record_type_known(int type)
{
    return type > 0 && type < S_TYPE_SLOTS && s_type_names[type] != NULL;
}

const char *oq_record_type_name(int type)
{
    return oq_record_type_known(type) ? s_type_names[type] : "unknown";
}

/* ---- little-endian helpers ---- */

static void s_store(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t s_load(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---- the header ---- */

void oq_record_header_encode(const oq_record_header_t *h, uint8_t out[OQ_RECORD_HEADER_BYTES])
{
    memset(out, 0, OQ_RECORD_HEADER_BYTES);
    memcpy(out, OQ_RECORD_MAGIC, OQ_RECORD_MAGIC_BYTES);
    s_store(out + S_HDR_VERSION, h->version, 4);
    s_store(out + S_HDR_FLAGS, 0, 4);
    s_store(out + S_HDR_CREATED, (uint64_t)h->created_ms, 8);
    memcpy(out + S_HDR_KEY, h->dedupe_key, OQ_SIPHASH_KEY_BYTES);
    s_store(out + S_HDR_CRC, oq_crc32c(0, out, S_HDR_CRC), 4);
}

bool oq_record_header_intact(const uint8_t *data)
{
    return memcmp(data, OQ_RECORD_MAGIC, OQ_RECORD_MAGIC_BYTES) == 0 &&
           (uint32_t)s_load(data + S_HDR_CRC, 4) == oq_crc32c(0, data, S_HDR_CRC);
}

int oq_record_header_decode(const uint8_t *data, size_t len, oq_record_header_t *h, char *why,
                            size_t why_len)
{
    if (len < OQ_RECORD_HEADER_BYTES) {
        snprintf(why, why_len, "the file is %zu bytes, shorter than the %d-byte header", len,
                 OQ_RECORD_HEADER_BYTES);
        return -1;
    }
    if (memcmp(data, OQ_RECORD_MAGIC, OQ_RECORD_MAGIC_BYTES) != 0) {
        snprintf(why, why_len, "not an onceq journal (the file does not start with \"%s\")",
                 OQ_RECORD_MAGIC);
        return -1;
    }
    uint32_t crc = (uint32_t)s_load(data + S_HDR_CRC, 4);
    if (crc != oq_crc32c(0, data, S_HDR_CRC)) {
        snprintf(why, why_len, "the journal header is damaged (bad CRC)");
        return -1;
    }
    h->version = (uint32_t)s_load(data + S_HDR_VERSION, 4);
    if (h->version == 0 || h->version > OQ_JOURNAL_FORMAT_VERSION) {
        snprintf(why, why_len,
                 "journal format version %u is newer than this broker, which reads versions 1 "
                 "to %d: run the broker that wrote it, or a newer one",
                 h->version, OQ_JOURNAL_FORMAT_VERSION);
        return -1;
    }
    uint32_t flags = (uint32_t)s_load(data + S_HDR_FLAGS, 4);
    if (flags != 0) {
        snprintf(why, why_len, "the journal header has flags 0x%x that this broker does not know",
                 flags);
        return -1;
    }
    h->created_ms = (int64_t)s_load(data + S_HDR_CREATED, 8);
    memcpy(h->dedupe_key, data + S_HDR_KEY, OQ_SIPHASH_KEY_BYTES);
    return 0;
}

/* ---- the durable mark ---- */

#define S_MARK_VERSION_AT 8
#define S_MARK_CREATED_AT 16
#define S_MARK_DURABLE_AT 24
#define S_MARK_CRC_AT     32
#define S_MARK_VERSION    1

_Static_assert(S_MARK_CRC_AT + 4 == OQ_RECORD_MARK_BYTES, "mark layout");

void oq_record_mark_encode(const oq_record_mark_t *m, uint8_t out[OQ_RECORD_MARK_BYTES])
{
    memset(out, 0, OQ_RECORD_MARK_BYTES);
    memcpy(out, OQ_RECORD_MARK_MAGIC, OQ_RECORD_MAGIC_BYTES);
    s_store(out + S_MARK_VERSION_AT, S_MARK_VERSION, 4);
    s_store(out + S_MARK_CREATED_AT, (uint64_t)m->created_ms, 8);
    s_store(out + S_MARK_DURABLE_AT, m->durable_bytes, 8);
    s_store(out + S_MARK_CRC_AT, oq_crc32c(0, out, S_MARK_CRC_AT), 4);
}

int oq_record_mark_decode(const uint8_t *data, size_t len, oq_record_mark_t *m, char *why,
                          size_t why_len)
{
    if (len < OQ_RECORD_MARK_BYTES || memcmp(data, OQ_RECORD_MARK_MAGIC, OQ_RECORD_MAGIC_BYTES)) {
        snprintf(why, why_len, "not a durable mark (%zu bytes)", len);
        return -1;
    }
    if ((uint32_t)s_load(data + S_MARK_CRC_AT, 4) != oq_crc32c(0, data, S_MARK_CRC_AT)) {
        snprintf(why, why_len, "a durable mark with a bad CRC");
        return -1;
    }
    uint32_t version = (uint32_t)s_load(data + S_MARK_VERSION_AT, 4);
    if (version != S_MARK_VERSION) {
        snprintf(why, why_len, "a durable mark of version %u, this broker knows %d", version,
                 S_MARK_VERSION);
        return -1;
    }
    m->created_ms = (int64_t)s_load(data + S_MARK_CREATED_AT, 8);
    m->durable_bytes = s_load(data + S_MARK_DURABLE_AT, 8);
    return 0;
}

/* ---- framing ---- */

oq_frame_t oq_record_frame(const uint8_t *data, size_t avail, size_t *frame_bytes)
{
    *frame_bytes = OQ_RECORD_FRAME_BYTES;
    if (avail < OQ_RECORD_FRAME_BYTES)
        return OQ_FRAME_SHORT;
    uint32_t len = (uint32_t)s_load(data, 4);
    if (len == 0 || len > OQ_JOURNAL_MAX_RECORD_BYTES)
        return OQ_FRAME_BAD_LENGTH;
    *frame_bytes = OQ_RECORD_FRAME_BYTES + (size_t)len;
    if (avail < *frame_bytes)
        return OQ_FRAME_SHORT;
    uint32_t crc = (uint32_t)s_load(data + 4, 4);
    if (crc != oq_crc32c(0, data + OQ_RECORD_FRAME_BYTES, len))
        return OQ_FRAME_BAD_CRC;
    return OQ_FRAME_OK;
}

/* Types whose body has a small fixed size; a scan skips a candidate whose
   length does not fit its type before computing any CRC. */
#define S_SMALL_RECORD_MAX_BYTES 64

bool oq_record_verify(const uint8_t *data, size_t avail, size_t *frame_bytes)
{
    if (avail < OQ_RECORD_FRAME_BYTES + S_TYPE_BYTES)
        return false;
    uint32_t len = (uint32_t)s_load(data, 4);
    int type = data[OQ_RECORD_FRAME_BYTES];
    if (!oq_record_type_known(type) || len < S_TYPE_BYTES + S_ID_BYTES)
        return false;
    bool texts = type == OQ_RECORD_DISPATCHED || type == OQ_RECORD_FAILED ||
                 type == OQ_RECORD_REVIEW || type == OQ_RECORD_RESOLVED || type == OQ_RECORD_KEYS;
    if (!texts && len > S_SMALL_RECORD_MAX_BYTES)
        return false;
    if (oq_record_frame(data, avail, frame_bytes) != OQ_FRAME_OK)
        return false;
    oq_record_t rec;
    char why[8];
    return oq_record_decode(data, *frame_bytes, &rec, why, sizeof why) == 0;
}

size_t oq_record_min_dispatched_bytes(void)
{
    /* Type and queue names are at least one byte each. */
    return OQ_RECORD_FRAME_BYTES + S_TYPE_BYTES + S_DISPATCHED_FIXED_BYTES + 2;
}

/* ---- decoding ---- */

typedef struct {
    const uint8_t *p, *end;
    bool short_;
} s_reader_t;

static uint64_t s_get(s_reader_t *r, int bytes)
{
    if (r->end - r->p < bytes) {
        r->short_ = true;
        r->p = r->end;
        return 0;
    }
    uint64_t v = s_load(r->p, bytes);
    r->p += bytes;
    return v;
}

static const uint8_t *s_get_bytes(s_reader_t *r, size_t n)
{
    if ((size_t)(r->end - r->p) < n) {
        r->short_ = true;
        r->p = r->end;
        return NULL;
    }
    const uint8_t *at = r->p;
    r->p += n;
    return at;
}

static oq_str_t s_get_str(s_reader_t *r, int len_bytes)
{
    size_t n = (size_t)s_get(r, len_bytes);
    const uint8_t *at = s_get_bytes(r, n);
    oq_str_t s = {at ? (const char *)at : "", at ? n : 0};
    return s;
}

#define S_BAD(...)                                                                                 \
    do {                                                                                           \
        snprintf(why, why_len, __VA_ARGS__);                                                       \
        return -1;                                                                                 \
    } while (0)

static int s_decode_dispatched(s_reader_t *r, oq_record_t *rec, char *why, size_t why_len)
{
    oq_job_msg_t *j = &rec->job;
    j->id = rec->id = s_get(r, 8);
    rec->dispatched_at_ms = (int64_t)s_get(r, 8);
    rec->at_ms = (int64_t)s_get(r, 8);
    j->timeout_ms = (int64_t)s_get(r, 4);
    j->priority = (int32_t)(uint32_t)s_get(r, 4);
    j->max_tries = (uint32_t)s_get(r, 4);
    j->backoff_len = (uint32_t)s_get(r, 1);
    if (j->backoff_len > OQ_MAX_BACKOFF_STEPS)
        S_BAD("dispatched: %u backoff steps, at most %d", j->backoff_len, OQ_MAX_BACKOFF_STEPS);
    for (uint32_t k = 0; k < j->backoff_len; k++) {
        j->backoff_ms[k] = (int64_t)s_get(r, 8);
        if (j->backoff_ms[k] < 0 || j->backoff_ms[k] > OQ_MAX_BACKOFF_MS)
            S_BAD("dispatched: backoff step out of range");
    }
    j->type = s_get_str(r, 1);
    j->queue = s_get_str(r, 1);
    j->dispatch_id = s_get_str(r, 1);
    uint32_t payload_len = (uint32_t)s_get(r, 4);
    j->payload = s_get_bytes(r, payload_len);
    j->payload_len = payload_len;
    j->has_max_tries = j->has_timeout = true;
    j->has_priority = j->priority != 0;
    if (r->short_)
        S_BAD("dispatched: body too short");
    if (rec->id == 0)
        S_BAD("dispatched: job id 0");
    if (!oq_proto_name_valid(j->type.ptr, j->type.len) ||
        !oq_proto_name_valid(j->queue.ptr, j->queue.len))
        S_BAD("dispatched: invalid job type or queue name");
    if (j->dispatch_id.len && !oq_proto_dispatch_id_valid(j->dispatch_id.ptr, j->dispatch_id.len))
        S_BAD("dispatched: invalid dispatch id");
    if (j->timeout_ms <= 0 || j->timeout_ms > OQ_MAX_TIMEOUT_MS || j->max_tries < 1 ||
        j->max_tries > OQ_MAX_TRIES_LIMIT || j->priority < -OQ_MAX_PRIORITY ||
        j->priority > OQ_MAX_PRIORITY || payload_len > OQ_MAX_PAYLOAD_BYTES)
        S_BAD("dispatched: a field is out of range");
    return 0;
}

static int s_decode_resolved(s_reader_t *r, oq_record_t *rec, char *why, size_t why_len)
{
    rec->id = s_get(r, 8);
    rec->attempt = (uint32_t)s_get(r, 4);
    uint32_t action = (uint32_t)s_get(r, 1);
    rec->reviewed_at_ms = (int64_t)s_get(r, 8);
    rec->at_ms = (int64_t)s_get(r, 8);
    rec->job.type = s_get_str(r, 1);
    rec->job.queue = s_get_str(r, 1);
    rec->error = s_get_str(r, 2);
    rec->note = s_get_str(r, 2);
    if (r->short_)
        S_BAD("resolved: body too short");
    if (action < OQ_REVIEW_DONE || action > OQ_REVIEW_FAIL)
        S_BAD("resolved: unknown action %u", action);
    rec->action = (oq_review_action_t)action;
    if (!oq_proto_name_valid(rec->job.type.ptr, rec->job.type.len) ||
        !oq_proto_name_valid(rec->job.queue.ptr, rec->job.queue.len))
        S_BAD("resolved: invalid job type or queue name");
    if (rec->error.len > OQ_MAX_ERROR_LEN || rec->note.len > OQ_MAX_REVIEW_NOTE_LEN)
        S_BAD("resolved: a reason of %zu or a note of %zu bytes, at most %d and %d", rec->error.len,
              rec->note.len, OQ_MAX_ERROR_LEN, OQ_MAX_REVIEW_NOTE_LEN);
    return 0;
}

#define S_KEYS_WINDOW_ONLY 1 /* KEYS flags: the job holds its unique key by its window only */

static int s_decode_keys(s_reader_t *r, oq_record_t *rec, char *why, size_t why_len)
{
    rec->id = s_get(r, 8);
    uint32_t flags = (uint32_t)s_get(r, 1);
    rec->unique_until_ms = (int64_t)s_get(r, 8);
    rec->unique_key = s_get_str(r, 1);
    rec->overlap_key = s_get_str(r, 1);
    if (r->short_)
        S_BAD("keys: body too short");
    if (flags & ~(uint32_t)S_KEYS_WINDOW_ONLY)
        S_BAD("keys: unknown flags 0x%x", flags);
    rec->window_only = flags & S_KEYS_WINDOW_ONLY;
    if ((rec->unique_key.len &&
         !oq_proto_job_key_valid(rec->unique_key.ptr, rec->unique_key.len)) ||
        (rec->overlap_key.len &&
         !oq_proto_job_key_valid(rec->overlap_key.ptr, rec->overlap_key.len)))
        S_BAD("keys: an invalid unique or overlap key");
    if (rec->unique_until_ms < 0 || (rec->window_only && !rec->unique_key.len))
        S_BAD("keys: a field is out of range");
    return 0;
}

/* A batch's callback: present byte, then has_* flags, the numbers, the
   strings and the payload. */
static int s_decode_callback(s_reader_t *r, oq_job_msg_t *j, bool *present, char *why,
                             size_t why_len)
{
    *present = s_get(r, 1) != 0;
    if (!*present)
        return 0;
    uint8_t flags = (uint8_t)s_get(r, 1);
    j->has_max_tries = flags & 1;
    j->has_timeout = (flags & 2) != 0;
    j->has_delay = (flags & 4) != 0;
    j->max_tries = (uint32_t)s_get(r, 4);
    j->timeout_ms = (int64_t)s_get(r, 4);
    j->delay_ms = (int64_t)s_get(r, 8);
    j->priority = (int32_t)(uint32_t)s_get(r, 4);
    j->has_priority = j->priority != 0;
    j->backoff_len = (uint32_t)s_get(r, 1);
    if (j->backoff_len > OQ_MAX_BACKOFF_STEPS)
        S_BAD("batch: %u backoff steps, at most %d", j->backoff_len, OQ_MAX_BACKOFF_STEPS);
    for (uint32_t k = 0; k < j->backoff_len; k++) {
        j->backoff_ms[k] = (int64_t)s_get(r, 8);
        if (j->backoff_ms[k] < 0 || j->backoff_ms[k] > OQ_MAX_BACKOFF_MS)
            S_BAD("batch: backoff step out of range");
    }
    j->type = s_get_str(r, 1);
    j->queue = s_get_str(r, 1);
    j->overlap_key = s_get_str(r, 1);
    uint32_t payload_len = (uint32_t)s_get(r, 4);
    j->payload = s_get_bytes(r, payload_len);
    j->payload_len = payload_len;
    if (r->short_)
        S_BAD("batch: body too short");
    if (!oq_proto_name_valid(j->type.ptr, j->type.len) ||
        !oq_proto_name_valid(j->queue.ptr, j->queue.len))
        S_BAD("batch: invalid callback type or queue name");
    if ((j->has_max_tries && (j->max_tries < 1 || j->max_tries > OQ_MAX_TRIES_LIMIT)) ||
        (j->has_timeout && (j->timeout_ms <= 0 || j->timeout_ms > OQ_MAX_TIMEOUT_MS)) ||
        j->delay_ms < 0 || j->delay_ms > OQ_MAX_DELAY_MS || j->priority < -OQ_MAX_PRIORITY ||
        j->priority > OQ_MAX_PRIORITY || payload_len > OQ_MAX_PAYLOAD_BYTES ||
        j->overlap_key.len > OQ_MAX_JOB_KEY_LEN)
        S_BAD("batch: a callback field is out of range");
    return 0;
}

static int s_decode_batch(s_reader_t *r, oq_record_t *rec, char *why, size_t why_len)
{
    oq_batch_view_t *b = &rec->batch;
    rec->id = b->id = s_get(r, 8);
    b->first_id = b->id + 1;
    b->created_ms = (int64_t)s_get(r, 8);
    b->total = (uint32_t)s_get(r, 4);
    b->done = (uint32_t)s_get(r, 4);
    b->failed = (uint32_t)s_get(r, 4);
    b->cancelled = (uint32_t)s_get(r, 4);
    uint8_t flags = (uint8_t)s_get(r, 1);
    b->allow_failures = flags & 1;
    b->is_cancelled = (flags & 2) != 0;
    for (int i = 0; i < OQ_BATCH_CALLBACKS; i++)
        b->callback_ids[i] = s_get(r, 8);
    b->dispatch_id = s_get_str(r, 1);
    for (int i = 0; i < OQ_BATCH_CALLBACKS; i++) {
        if (s_decode_callback(r, &rec->callbacks[i], &b->has_callback[i], why, why_len) < 0)
            return -1;
        b->callbacks[i] = b->has_callback[i] ? &rec->callbacks[i] : NULL;
    }
    if (r->short_)
        S_BAD("batch: body too short");
    if (b->total > OQ_MAX_BATCH_JOBS || (uint64_t)b->done + b->failed + b->cancelled > b->total)
        S_BAD("batch: counts out of range");
    if (b->dispatch_id.len && !oq_proto_dispatch_id_valid(b->dispatch_id.ptr, b->dispatch_id.len))
        S_BAD("batch: invalid dispatch id");
    return 0;
}

static int s_decode_chain(s_reader_t *r, oq_record_t *rec, char *why, size_t why_len)
{
    oq_chain_view_t *c = &rec->chain;
    rec->id = c->job_id = s_get(r, 8);
    c->root = s_get(r, 8);
    c->place = (uint32_t)s_get(r, 4);
    c->due = (oq_chain_due_t)s_get(r, 1);
    c->rest_count = (uint32_t)s_get(r, 1);
    if (c->rest_count > OQ_MAX_CHAIN_LINKS || c->due > OQ_CHAIN_CATCH || c->place == 0 ||
        c->root == 0 || c->root > c->job_id)
        S_BAD("chain: a field is out of range");
    c->total = c->place + c->rest_count;
    for (uint32_t i = 0; i <= c->rest_count; i++) {
        bool present;
        if (s_decode_callback(r, &rec->links[i], &present, why, why_len) < 0)
            return -1;
        if (i < c->rest_count && !present)
            S_BAD("chain: link %u missing", i);
        if (i < c->rest_count)
            c->rest[i] = &rec->links[i];
        else
            c->catch_ = present ? &rec->links[i] : NULL;
    }
    return 0;
}

int oq_record_decode(const uint8_t *data, size_t frame_bytes, oq_record_t *rec, char *why,
                     size_t why_len)
{
    memset(rec, 0, sizeof *rec);
    if (frame_bytes < OQ_RECORD_FRAME_BYTES + S_TYPE_BYTES)
        S_BAD("record too short");
    s_reader_t r = {data + OQ_RECORD_FRAME_BYTES + S_TYPE_BYTES, data + frame_bytes, false};
    int type = data[OQ_RECORD_FRAME_BYTES];
    rec->type = (oq_record_type_t)type;
    switch (type) {
    case OQ_RECORD_DISPATCHED:
        if (s_decode_dispatched(&r, rec, why, why_len) < 0)
            return -1;
        break;
    case OQ_RECORD_LEASED:
        rec->id = s_get(&r, 8);
        rec->attempt = (uint32_t)s_get(&r, 4);
        break;
    case OQ_RECORD_RETRY:
        rec->id = s_get(&r, 8);
        rec->attempt = (uint32_t)s_get(&r, 4);
        rec->at_ms = (int64_t)s_get(&r, 8);
        break;
    case OQ_RECORD_FAILED:
        rec->id = s_get(&r, 8);
        rec->attempt = (uint32_t)s_get(&r, 4);
        rec->at_ms = (int64_t)s_get(&r, 8);
        rec->error = s_get_str(&r, 2);
        if (rec->error.len > OQ_MAX_ERROR_LEN)
            S_BAD("failed: error text of %zu bytes, at most %d", rec->error.len, OQ_MAX_ERROR_LEN);
        break;
    case OQ_RECORD_REVIEW:
        rec->id = s_get(&r, 8);
        rec->attempt = (uint32_t)s_get(&r, 4);
        rec->at_ms = (int64_t)s_get(&r, 8);
        rec->error = s_get_str(&r, 2);
        if (rec->error.len > OQ_MAX_ERROR_LEN)
            S_BAD("review: reason of %zu bytes, at most %d", rec->error.len, OQ_MAX_ERROR_LEN);
        break;
    case OQ_RECORD_RESOLVED:
        if (s_decode_resolved(&r, rec, why, why_len) < 0)
            return -1;
        break;
    case OQ_RECORD_KEYS:
        if (s_decode_keys(&r, rec, why, why_len) < 0)
            return -1;
        break;
    case OQ_RECORD_DONE:
    case OQ_RECORD_REQUEUED:
    case OQ_RECORD_NEXT_ID:
    case OQ_RECORD_FORGOTTEN:
    case OQ_RECORD_CANCELLED:
        rec->id = s_get(&r, 8);
        break;
    case OQ_RECORD_GENERATION:
        rec->id = s_get(&r, 8);
        rec->generation = (uint32_t)s_get(&r, 4);
        break;
    case OQ_RECORD_BATCH:
        if (s_decode_batch(&r, rec, why, why_len) < 0)
            return -1;
        break;
    case OQ_RECORD_BATCH_FIRED:
        rec->id = rec->batch.id = s_get(&r, 8);
        rec->which = (oq_batch_callback_t)s_get(&r, 1);
        rec->job_id = s_get(&r, 8);
        if (!r.short_ && (rec->which >= OQ_BATCH_CALLBACKS || rec->job_id == 0))
            S_BAD("batch_fired: callback %d or job id out of range", (int)rec->which);
        break;
    case OQ_RECORD_CHAIN:
        if (s_decode_chain(&r, rec, why, why_len) < 0)
            return -1;
        break;
    case OQ_RECORD_CHAIN_FIRED:
        rec->id = rec->chain.job_id = s_get(&r, 8);
        break;
    case OQ_RECORD_BATCH_CANCELLED:
        rec->id = rec->batch.id = s_get(&r, 8);
        rec->batch.total = (uint32_t)s_get(&r, 4);
        break;
    case OQ_RECORD_DEDUPE: {
        const uint8_t *digest = s_get_bytes(&r, OQ_SIPHASH_DIGEST_BYTES);
        if (digest)
            memcpy(rec->digest, digest, OQ_SIPHASH_DIGEST_BYTES);
        rec->id = s_get(&r, 8);
        rec->at_ms = (int64_t)s_get(&r, 8);
        break;
    }
    default:
        S_BAD("unknown record type %d (written by a newer broker?)", type);
    }
    if (r.short_)
        S_BAD("%s record: body too short", oq_record_type_name(type));
    if (r.p != r.end)
        S_BAD("%s record: %zu bytes more than its fields", oq_record_type_name(type),
              (size_t)(r.end - r.p));
    if (rec->id == 0)
        S_BAD("%s record: id 0", oq_record_type_name(type));
    return 0;
}

/* ---- encoding ---- */

typedef struct {
    msgpack_sbuffer *buf;
    size_t start;
    bool failed;
} s_writer_t;

static void s_put_bytes(s_writer_t *w, const void *data, size_t n)
{
    if (!w->failed && n && msgpack_sbuffer_write(w->buf, data, n) < 0)
        w->failed = true;
}

static void s_put(s_writer_t *w, uint64_t v, int bytes)
{
    uint8_t b[8];
    s_store(b, v, bytes);
    s_put_bytes(w, b, (size_t)bytes);
}

static void s_put_str(s_writer_t *w, const char *text, size_t len, int len_bytes)
{
    s_put(w, len, len_bytes);
    s_put_bytes(w, text, len);
}

static void s_begin(s_writer_t *w, msgpack_sbuffer *buf, oq_record_type_t type)
{
    w->buf = buf;
    w->start = buf->size;
    w->failed = false;
    uint8_t frame[OQ_RECORD_FRAME_BYTES] = {0};
    s_put_bytes(w, frame, sizeof frame);
    s_put(w, type, 1);
}

/* Fill in the frame now that the body is there. */
static int s_end(s_writer_t *w)
{
    if (w->failed) {
        w->buf->size = w->start;
        return -1;
    }
    uint8_t *frame = (uint8_t *)w->buf->data + w->start;
    size_t len = w->buf->size - w->start - OQ_RECORD_FRAME_BYTES;
    s_store(frame, len, 4);
    s_store(frame + 4, oq_crc32c(0, frame + OQ_RECORD_FRAME_BYTES, len), 4);
    return 0;
}

int oq_record_dispatched(msgpack_sbuffer *buf, const oq_job_view_t *job, oq_str_t dispatch_id,
                         int64_t dispatched_at_ms)
{
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_DISPATCHED);
    s_put(&w, job->id, 8);
    s_put(&w, (uint64_t)dispatched_at_ms, 8);
    s_put(&w, (uint64_t)job->not_before_ms, 8);
    s_put(&w, (uint64_t)job->timeout_ms, 4);
    s_put(&w, (uint32_t)job->priority, 4);
    s_put(&w, job->max_tries, 4);
    uint32_t steps = job->backoff_ms ? job->backoff_len : 0;
    s_put(&w, steps, 1);
    for (uint32_t k = 0; k < steps; k++)
        s_put(&w, (uint64_t)job->backoff_ms[k], 8);
    s_put_str(&w, job->type, strlen(job->type), 1);
    s_put_str(&w, job->queue, strlen(job->queue), 1);
    s_put_str(&w, dispatch_id.ptr, dispatch_id.len, 1);
    s_put(&w, job->payload_len, 4);
    s_put_bytes(&w, job->payload, job->payload_len);
    return s_end(&w);
}

size_t oq_record_dispatched_bytes(const oq_job_view_t *job)
{
    size_t steps = job->backoff_ms ? job->backoff_len : 0;
    return OQ_RECORD_FRAME_BYTES + S_TYPE_BYTES + S_DISPATCHED_FIXED_BYTES + 8 * steps +
           strlen(job->type) + strlen(job->queue) + job->payload_len;
}

int oq_record_leased(msgpack_sbuffer *buf, uint64_t id, uint32_t attempt)
{
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_LEASED);
    s_put(&w, id, 8);
    s_put(&w, attempt, 4);
    return s_end(&w);
}

int oq_record_retry(msgpack_sbuffer *buf, uint64_t id, uint32_t attempt, int64_t not_before_ms)
{
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_RETRY);
    s_put(&w, id, 8);
    s_put(&w, attempt, 4);
    s_put(&w, (uint64_t)not_before_ms, 8);
    return s_end(&w);
}

int oq_record_failed(msgpack_sbuffer *buf, uint64_t id, uint32_t attempt, int64_t failed_at_ms,
                     const char *error)
{
    size_t len = error ? strlen(error) : 0;
    if (len > OQ_MAX_ERROR_LEN)
        len = OQ_MAX_ERROR_LEN;
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_FAILED);
    s_put(&w, id, 8);
    s_put(&w, attempt, 4);
    s_put(&w, (uint64_t)failed_at_ms, 8);
    s_put_str(&w, error, len, 2);
    return s_end(&w);
}

static int s_id_only(msgpack_sbuffer *buf, oq_record_type_t type, uint64_t id)
{
    s_writer_t w;
    s_begin(&w, buf, type);
    s_put(&w, id, 8);
    return s_end(&w);
}

int oq_record_done(msgpack_sbuffer *buf, uint64_t id)
{
    return s_id_only(buf, OQ_RECORD_DONE, id);
}

int oq_record_requeued(msgpack_sbuffer *buf, uint64_t id)
{
    return s_id_only(buf, OQ_RECORD_REQUEUED, id);
}

int oq_record_forgotten(msgpack_sbuffer *buf, uint64_t id)
{
    return s_id_only(buf, OQ_RECORD_FORGOTTEN, id);
}

int oq_record_cancelled(msgpack_sbuffer *buf, uint64_t id)
{
    return s_id_only(buf, OQ_RECORD_CANCELLED, id);
}

int oq_record_next_id(msgpack_sbuffer *buf, uint64_t next_id)
{
    return s_id_only(buf, OQ_RECORD_NEXT_ID, next_id);
}

int oq_record_review(msgpack_sbuffer *buf, uint64_t id, uint32_t attempt, int64_t reviewed_at_ms,
                     const char *reason)
{
    size_t len = reason ? strlen(reason) : 0;
    if (len > OQ_MAX_ERROR_LEN)
        len = OQ_MAX_ERROR_LEN;
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_REVIEW);
    s_put(&w, id, 8);
    s_put(&w, attempt, 4);
    s_put(&w, (uint64_t)reviewed_at_ms, 8);
    s_put_str(&w, reason, len, 2);
    return s_end(&w);
}

static size_t s_cut(const char *text, size_t max)
{
    size_t n = text ? strlen(text) : 0;
    return n > max ? max : n;
}

int oq_record_resolved(msgpack_sbuffer *buf, const oq_resolution_t *r)
{
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_RESOLVED);
    s_put(&w, r->id, 8);
    s_put(&w, r->attempt, 4);
    s_put(&w, (uint64_t)r->action, 1);
    s_put(&w, (uint64_t)r->reviewed_at_ms, 8);
    s_put(&w, (uint64_t)r->resolved_at_ms, 8);
    s_put_str(&w, r->type, s_cut(r->type, OQ_MAX_NAME_LEN), 1);
    s_put_str(&w, r->queue, s_cut(r->queue, OQ_MAX_NAME_LEN), 1);
    s_put_str(&w, r->reason, s_cut(r->reason, OQ_MAX_ERROR_LEN), 2);
    s_put_str(&w, r->note, s_cut(r->note, OQ_MAX_REVIEW_NOTE_LEN), 2);
    return s_end(&w);
}

int oq_record_dedupe(msgpack_sbuffer *buf, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES],
                     uint64_t job_id, int64_t expires_ms)
{
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_DEDUPE);
    s_put_bytes(&w, digest, OQ_SIPHASH_DIGEST_BYTES);
    s_put(&w, job_id, 8);
    s_put(&w, (uint64_t)expires_ms, 8);
    return s_end(&w);
}

size_t oq_record_dedupe_bytes(void)
{
    return OQ_RECORD_FRAME_BYTES + S_TYPE_BYTES + S_DEDUPE_BODY_BYTES;
}

int oq_record_keys(msgpack_sbuffer *buf, uint64_t id, const char *unique_key,
                   int64_t unique_until_ms, bool window_only, const char *overlap_key)
{
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_KEYS);
    s_put(&w, id, 8);
    s_put(&w, window_only ? S_KEYS_WINDOW_ONLY : 0, 1);
    s_put(&w, (uint64_t)unique_until_ms, 8);
    s_put_str(&w, unique_key, s_cut(unique_key, OQ_MAX_JOB_KEY_LEN), 1);
    s_put_str(&w, overlap_key, s_cut(overlap_key, OQ_MAX_JOB_KEY_LEN), 1);
    return s_end(&w);
}

int oq_record_generation(msgpack_sbuffer *buf, uint64_t id, uint32_t generation)
{
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_GENERATION);
    s_put(&w, id, 8);
    s_put(&w, generation, 4);
    return s_end(&w);
}

static void s_put_callback(s_writer_t *w, const oq_job_msg_t *j)
{
    s_put(w, j ? 1 : 0, 1);
    if (!j)
        return;
    s_put(w, (j->has_max_tries ? 1u : 0u) | (j->has_timeout ? 2u : 0u) | (j->has_delay ? 4u : 0u),
          1);
    s_put(w, j->has_max_tries ? j->max_tries : 0, 4);
    s_put(w, j->has_timeout ? (uint64_t)j->timeout_ms : 0, 4);
    s_put(w, j->has_delay ? (uint64_t)j->delay_ms : 0, 8);
    s_put(w, (uint32_t)j->priority, 4);
    s_put(w, j->backoff_len, 1);
    for (uint32_t k = 0; k < j->backoff_len; k++)
        s_put(w, (uint64_t)j->backoff_ms[k], 8);
    s_put_str(w, j->type.ptr, j->type.len, 1);
    s_put_str(w, j->queue.ptr, j->queue.len, 1);
    s_put_str(w, j->overlap_key.ptr, j->overlap_key.len, 1);
    s_put(w, j->payload_len, 4);
    s_put_bytes(w, j->payload, j->payload_len);
}

int oq_record_batch(msgpack_sbuffer *buf, const oq_batch_view_t *b)
{
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_BATCH);
    s_put(&w, b->id, 8);
    s_put(&w, (uint64_t)b->created_ms, 8);
    s_put(&w, b->total, 4);
    s_put(&w, b->done, 4);
    s_put(&w, b->failed, 4);
    s_put(&w, b->cancelled, 4);
    s_put(&w, (b->allow_failures ? 1u : 0u) | (b->is_cancelled ? 2u : 0u), 1);
    for (int i = 0; i < OQ_BATCH_CALLBACKS; i++)
        s_put(&w, b->callback_ids[i], 8);
    s_put_str(&w, b->dispatch_id.ptr, b->dispatch_id.len, 1);
    for (int i = 0; i < OQ_BATCH_CALLBACKS; i++)
        s_put_callback(&w, b->callbacks[i]);
    return s_end(&w);
}

int oq_record_batch_fired(msgpack_sbuffer *buf, uint64_t id, oq_batch_callback_t which,
                          uint64_t job_id)
{
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_BATCH_FIRED);
    s_put(&w, id, 8);
    s_put(&w, (uint64_t)which, 1);
    s_put(&w, job_id, 8);
    return s_end(&w);
}

int oq_record_batch_cancelled(msgpack_sbuffer *buf, uint64_t id, uint32_t total)
{
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_BATCH_CANCELLED);
    s_put(&w, id, 8);
    s_put(&w, total, 4);
    return s_end(&w);
}

int oq_record_chain(msgpack_sbuffer *buf, const oq_chain_view_t *c)
{
    s_writer_t w;
    s_begin(&w, buf, OQ_RECORD_CHAIN);
    s_put(&w, c->job_id, 8);
    s_put(&w, c->root, 8);
    s_put(&w, c->place, 4);
    s_put(&w, (uint64_t)c->due, 1);
    s_put(&w, c->rest_count, 1);
    for (uint32_t i = 0; i < c->rest_count; i++)
        s_put_callback(&w, c->rest[i]);
    s_put_callback(&w, c->catch_);
    return s_end(&w);
}

int oq_record_chain_fired(msgpack_sbuffer *buf, uint64_t job_id)
{
    return s_id_only(buf, OQ_RECORD_CHAIN_FIRED, job_id);
}
