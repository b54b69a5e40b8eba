/*  engine_batches.c: batches of jobs and their callbacks.

    A batch takes one id and its jobs the ids right after it, so which
    batch a job belongs to is a range lookup (binary search over the held
    batches, which are kept by id and only ever appended), and a job costs
    nothing more for being in one. The batch keeps counts, not lists:
    oq_eng_transition tells it (oq_eng_batch_note) when one of its jobs
    ends done, fails, is requeued from the failed store, is cancelled or
    is forgotten, and replay goes through the same calls, so the counts
    after a restart are the counts before it.

    Callbacks. then runs when every job is done (or, with allow_failures,
    when every job has settled); catch on the first failure unless
    failures are allowed; finally when every job has settled, done,
    failed or cancelled. A cancelled batch runs only finally. Each is a
    job dispatched through oq_engine_dispatch with the dispatch_id
    "batch:<id>:<callback>", so the DISPATCHED record that makes it
    durable is written before the job exists, and a FIRED report follows.
    A crash between the two leaves a batch that looks due on replay:
    oq_engine_batches_settle dispatches it again under the same
    dispatch_id, and the dedupe table, rebuilt from that DISPATCHED
    record, answers with the first job. A callback the broker cannot take
    now (full, or its record cannot be kept) stays due and is tried again
    by oq_engine_batches_settle; nothing is dropped.

    Refuse before you create (engine_dispatch.c's rule): every limit of
    every job in the batch is checked before the batch is recorded, so
    that a batch is queued whole or not at all. A batch whose jobs could
    not all be queued after its record was written (memory ran out
    between two of them) is cancelled with the number that were, which
    its CANCELLED record keeps.

    A settled batch (no job pending, none held in the failed store, no
    callback due) is let go and remembered in a ring of
    OQ_RECENT_BATCHES for "batch show"; a snapshot keeps held batches
    only. */
#include "engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_batches.h"
#include "engine_jobs.h"
#include "engine_memory.h"
#include "engine_queues.h"
#include "onceq/log.h"

/* Room for "batch:<20 digits>:finally" and for "batch:dispatch:" + a
   producer's dispatch_id. */
#define S_DISPATCH_ID_BYTES (32 + OQ_MAX_DISPATCH_ID_LEN)

typedef struct oq_eng_batch {
    oq_batch_view_t v;                    /* counts and callbacks' ids; pending unused */
    oq_job_msg_t *cb[OQ_BATCH_CALLBACKS]; /* copies (oq_eng_msg_copy); NULL: none */
    char *dispatch_id;                    /* the producer's; NULL: none */
    uint64_t cost;                        /* against max_bytes */
    uint32_t failed_held;                 /* of failed: still in the failed store */
    bool due;                             /* a callback could not be dispatched yet */
    bool retrying;                        /* it was said so once */
} oq_eng_batch_t;

static const char *const s_callback_names[OQ_BATCH_CALLBACKS] = {"then", "catch", "finally"};

/* A job message copied into one allocation with its strings and payload;
   dispatch_id and unique_key are dropped (a callback gets its own id). */
oq_job_msg_t *oq_eng_msg_copy(const oq_job_msg_t *m, size_t *bytes)
{
    size_t size =
        sizeof *m + m->type.len + 1 + m->queue.len + 1 + m->payload_len + m->overlap_key.len + 1;
    oq_job_msg_t *c = calloc(1, size);
    if (!c)
        return NULL;
    *c = *m;
    char *at = (char *)(c + 1);
    memcpy(at, m->type.ptr, m->type.len);
    c->type.ptr = at;
    at += m->type.len + 1;
    memcpy(at, m->queue.ptr, m->queue.len);
    c->queue.ptr = at;
    at += m->queue.len + 1;
    if (m->payload_len)
        memcpy(at, m->payload, m->payload_len);
    c->payload = (const uint8_t *)at;
    at += m->payload_len;
    if (m->overlap_key.len)
        memcpy(at, m->overlap_key.ptr, m->overlap_key.len);
    c->overlap_key.ptr = at;
    c->dispatch_id = (oq_str_t){0};
    c->unique_key = (oq_str_t){0};
    c->unique_for_ms = 0;
    *bytes = size;
    return c;
}

static void s_batch_free(oq_eng_batch_t *b)
{
    for (int i = 0; i < OQ_BATCH_CALLBACKS; i++)
        free(b->cb[i]);
    free(b->dispatch_id);
    free(b);
}

/* The held batch with this id (exact): its index, or -1. */
static ssize_t s_index_of(const oq_engine_t *self, uint64_t id)
{
    size_t lo = 0, hi = self->batch_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t at = self->batches[mid]->v.id;
        if (at == id)
            return (ssize_t)mid;
        if (at < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* The held batch whose range holds job id, or NULL: the last batch with
   an id below it, if the job falls within its jobs. */
static oq_eng_batch_t *s_find(const oq_engine_t *self, uint64_t job_id)
{
    size_t lo = 0, hi = self->batch_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (self->batches[mid]->v.id < job_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    oq_eng_batch_t *b = self->batches[lo - 1];
    return job_id < b->v.first_id + b->v.total ? b : NULL;
}

static uint32_t s_pending(const oq_eng_batch_t *b)
{
    uint32_t settled = b->v.done + b->v.failed + b->v.cancelled;
    return settled < b->v.total ? b->v.total - settled : 0;
}

static void s_view(const oq_eng_batch_t *b, oq_batch_view_t *out)
{
    *out = b->v;
    out->pending = s_pending(b);
    out->failed_held = b->failed_held;
    out->live = true;
    for (int i = 0; i < OQ_BATCH_CALLBACKS; i++)
        out->callbacks[i] = b->cb[i];
    out->dispatch_id = b->dispatch_id ? oq_str(b->dispatch_id) : (oq_str_t){0};
}

/* Report to the batch observer: 0, or -1 if it could not record. */
static int s_report(oq_engine_t *self, oq_batch_event_t event, const oq_eng_batch_t *b,
                    oq_batch_callback_t which)
{
    if (!self->hooks.batch)
        return 0;
    oq_batch_view_t view;
    s_view(b, &view);
    return self->hooks.batch(self->hooks.ctx, event, &view, which);
}

/* Put b among the held batches in id order (appended, but for replay). */
static int s_insert(oq_engine_t *self, oq_eng_batch_t *b)
{
    oq_eng_batch_t **grown = realloc(self->batches, (self->batch_count + 1) * sizeof *grown);
    if (!grown)
        return -1;
    self->batches = grown;
    size_t at = self->batch_count;
    while (at > 0 && self->batches[at - 1]->v.id > b->v.id)
        at--;
    memmove(self->batches + at + 1, self->batches + at,
            (self->batch_count - at) * sizeof *self->batches);
    self->batches[at] = b;
    self->batch_count++;
    self->batch_bytes += b->cost;
    return 0;
}

/* A settled batch: let go, remembered in the ring. */
static void s_retire(oq_engine_t *self, oq_eng_batch_t *b)
{
    ssize_t at = s_index_of(self, b->v.id);
    if (at < 0)
        return;
    if (!self->batches_settled)
        self->batches_settled = calloc(OQ_RECENT_BATCHES, sizeof *self->batches_settled);
    if (self->batches_settled) {
        oq_batch_view_t *slot = &self->batches_settled[self->batches_settled_next];
        s_view(b, slot);
        slot->live = false;
        memset(slot->callbacks, 0, sizeof slot->callbacks);
        slot->dispatch_id = (oq_str_t){0};
        self->batches_settled_next = (self->batches_settled_next + 1) % OQ_RECENT_BATCHES;
        if (self->batches_settled_count < OQ_RECENT_BATCHES)
            self->batches_settled_count++;
    }
    oq_info("batch %" PRIu64 " settled: %u done, %u failed, %u cancelled of %u", b->v.id, b->v.done,
            b->v.failed, b->v.cancelled, b->v.total);
    memmove(self->batches + at, self->batches + at + 1,
            (self->batch_count - (size_t)at - 1) * sizeof *self->batches);
    self->batch_count--;
    self->batch_bytes -= b->cost;
    s_batch_free(b);
}

/* Dispatch callback which of b if it has one that has not been
   dispatched: 1 if it was now, 0 if nothing was to do, -1 if the broker
   refused it (it stays due). */
static int s_fire(oq_engine_t *self, oq_eng_batch_t *b, oq_batch_callback_t which)
{
    if (!b->cb[which] || b->v.callback_ids[which])
        return 0;
    char dispatch_id[S_DISPATCH_ID_BYTES];
    snprintf(dispatch_id, sizeof dispatch_id, "batch:%" PRIu64 ":%s", b->v.id,
             s_callback_names[which]);
    oq_job_msg_t msg = *b->cb[which];
    msg.dispatch_id = oq_str(dispatch_id);
    uint64_t id = 0;
    oq_err_t code;
    char reason[OQ_MAX_ERROR_LEN + 1];
    self->batch_firing = true;
    int rc = oq_engine_dispatch(self, &msg, &id, &code, reason, sizeof reason);
    self->batch_firing = false;
    if (rc < 0) {
        if (!b->retrying)
            oq_warn("batch %" PRIu64 ": its %s callback is due but was not dispatched (%s): "
                    "tried again on every loop turn until it is",
                    b->v.id, s_callback_names[which], reason);
        b->due = b->retrying = true;
        self->batches_due = true;
        return -1;
    }
    b->v.callback_ids[which] = id;
    oq_info("batch %" PRIu64 ": %s callback dispatched as job %" PRIu64, b->v.id,
            s_callback_names[which], id);
    /* What already happened: a failed record is the journal's to note,
       and a replay without it is answered by the dispatch id. */
    (void)s_report(self, OQ_BATCH_FIRED, b, which);
    return 1;
}

/* Dispatch what b's counts make due, and let it go once settled.
   Returns how many callbacks went out. b may be freed. */
static size_t s_settle(oq_engine_t *self, oq_eng_batch_t *b)
{
    if (self->batch_firing || self->batches_held) {
        b->due = true;
        return 0;
    }
    b->due = false;
    size_t fired = 0;
    uint32_t pending = s_pending(b);
    bool clean = b->v.failed == 0 && b->v.cancelled == 0;
    int rc;
    if (!b->v.is_cancelled && !b->v.allow_failures && b->v.failed > 0 &&
        (rc = s_fire(self, b, OQ_BATCH_CATCH)) > 0)
        fired++;
    if (pending == 0 && !b->v.is_cancelled && (clean || b->v.allow_failures) &&
        (rc = s_fire(self, b, OQ_BATCH_THEN)) > 0)
        fired++;
    if (pending == 0 && (rc = s_fire(self, b, OQ_BATCH_FINALLY)) > 0)
        fired++;
    if (pending == 0 && b->failed_held == 0 && !b->due)
        s_retire(self, b);
    return fired;
}

void oq_eng_batch_note(oq_engine_t *self, uint64_t id, oq_eng_state_t from, oq_eng_state_t to,
                       oq_job_event_t event)
{
    oq_eng_batch_t *b = s_find(self, id);
    if (!b)
        return;
    oq_job_event_t as = event == OQ_EVENT_RESTORED && to == OQ_ENG_DONE ? self->restore_as : event;
    if (to == OQ_ENG_FAILED) {
        b->v.failed++;
        b->failed_held++;
    } else if (from == OQ_ENG_FAILED && to == OQ_ENG_READY) { /* requeued: pending again */
        b->v.failed--;
        b->failed_held--;
    } else if (to == OQ_ENG_DONE && from == OQ_ENG_FAILED) {
        b->failed_held--;
        if (as != OQ_EVENT_FORGOTTEN) { /* the late ok of a run that failed */
            b->v.failed--;
            b->v.done++;
        }
    } else if (to == OQ_ENG_DONE) {
        if (as == OQ_EVENT_CANCELLED)
            b->v.cancelled++;
        else
            b->v.done++;
    } else {
        return;
    }
    if (event != OQ_EVENT_RESTORED)
        s_settle(self, b);
}

/* The dedupe table's key of a batch's dispatch_id: in a namespace of its
   own, so that a job's dispatch_id never answers for a batch. */
static void s_digest(const oq_engine_t *self, oq_str_t dispatch_id,
                     uint8_t digest[OQ_SIPHASH_DIGEST_BYTES])
{
    char key[S_DISPATCH_ID_BYTES];
    int n = snprintf(key, sizeof key, "batch:dispatch:%.*s", (int)dispatch_id.len, dispatch_id.ptr);
    oq_siphash128(self->dispatch_key, key, (size_t)n < sizeof key ? (size_t)n : sizeof key - 1,
                  digest);
}

static void s_remember(oq_engine_t *self, oq_str_t dispatch_id, uint64_t id, int64_t at_ms)
{
    if (!dispatch_id.len)
        return;
    int64_t expires_ms = at_ms + self->config.dedupe_window_ms;
    if (expires_ms <= oq_clock_wall_ms(self->clock))
        return;
    uint8_t digest[OQ_SIPHASH_DIGEST_BYTES];
    s_digest(self, dispatch_id, digest);
    if (oq_dedupe_add_within(self->dispatch_ids, digest, id, expires_ms, oq_eng_room_left(self)) <
        0)
        oq_warn("out of memory remembering the dispatch id of batch %" PRIu64, id);
    oq_eng_memory_note(self);
}

/* The batch itself, not yet held: its callbacks copied. NULL if memory
   runs out. */
static oq_eng_batch_t *s_make(const oq_batch_msg_t *m, uint64_t id, int64_t created_ms)
{
    oq_eng_batch_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->cost = OQ_BATCH_OVERHEAD_BYTES;
    b->v.id = id;
    b->v.first_id = id + 1;
    b->v.total = (uint32_t)m->count;
    b->v.allow_failures = m->allow_failures;
    b->v.created_ms = created_ms;
    for (int i = 0; i < OQ_BATCH_CALLBACKS; i++) {
        if (!m->callbacks[i])
            continue;
        size_t bytes = 0;
        if (!(b->cb[i] = oq_eng_msg_copy(m->callbacks[i], &bytes))) {
            s_batch_free(b);
            return NULL;
        }
        b->v.has_callback[i] = true;
        b->cost += bytes;
    }
    if (m->dispatch_id.len && !(b->dispatch_id = strndup(m->dispatch_id.ptr, m->dispatch_id.len))) {
        s_batch_free(b);
        return NULL;
    }
    return b;
}

/* The timeout rule of one job (or callback) against its queue as it is,
   without creating the queue. */
static int s_check_rule(oq_engine_t *self, const oq_job_msg_t *j, char *reason, size_t reason_len)
{
    char qname[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(j->queue, qname, sizeof qname);
    oq_eng_queue_t *q = oq_eng_queue_get(self, qname, false);
    int64_t retry_after_ms = q ? q->retry_after_ms : self->config.retry_after_ms;
    int64_t timeout_ms =
        j->has_timeout ? j->timeout_ms : (q ? q->timeout_ms : self->config.timeout_ms);
    return oq_eng_check_rule(self, qname, timeout_ms, retry_after_ms, reason, reason_len);
}

int oq_engine_dispatch_batch(oq_engine_t *self, const oq_batch_msg_t *m, uint64_t *batch_id,
                             uint64_t *first_id, oq_err_t *code, char *reason, size_t reason_len)
{
#define S_REFUSE(c, ...)                                                                           \
    do {                                                                                           \
        *code = (c);                                                                               \
        snprintf(reason, reason_len, __VA_ARGS__);                                                 \
        return -1;                                                                                 \
    } while (0)

    int64_t wall_ms = oq_clock_wall_ms(self->clock);
    if (m->dispatch_id.len) {
        uint8_t digest[OQ_SIPHASH_DIGEST_BYTES];
        s_digest(self, m->dispatch_id, digest);
        uint64_t first = oq_dedupe_find(self->dispatch_ids, digest, wall_ms);
        if (first) {
            self->dedupe_hits++;
            *batch_id = first;
            *first_id = first + 1;
            return 0;
        }
    }
    if (m->count == 0 || m->count > OQ_MAX_BATCH_JOBS)
        S_REFUSE(OQ_ERR_BAD_REQUEST, "a batch holds 1 to %d jobs; this one has %zu",
                 OQ_MAX_BATCH_JOBS, m->count);
    if (self->batch_count >= OQ_MAX_BATCHES)
        S_REFUSE(OQ_ERR_FULL, "the broker holds its maximum of %d unsettled batches",
                 OQ_MAX_BATCHES);
    size_t callbacks = 0, callback_payload = 0;
    uint64_t cost = OQ_BATCH_OVERHEAD_BYTES;
    for (int i = 0; i < OQ_BATCH_CALLBACKS; i++) {
        const oq_job_msg_t *c = m->callbacks[i];
        if (!c)
            continue;
        if (c->unique_key.len || c->dispatch_id.len)
            S_REFUSE(OQ_ERR_BAD_REQUEST,
                     "the %s callback may not carry a unique_key or a dispatch_id (it is "
                     "dispatched once, as batch:<id>:%s)",
                     s_callback_names[i], s_callback_names[i]);
        if (s_check_rule(self, c, reason, reason_len) < 0) {
            *code = OQ_ERR_TIMEOUT_RULE;
            return -1;
        }
        callbacks++;
        callback_payload += c->payload_len;
        cost += sizeof *c + c->type.len + c->queue.len + c->payload_len + c->overlap_key.len + 3;
    }
    if (callback_payload > OQ_MAX_BATCH_CALLBACK_PAYLOAD_BYTES)
        S_REFUSE(OQ_ERR_TOO_LARGE,
                 "the callbacks' payloads are %zu bytes together, the limit is %d",
                 callback_payload, OQ_MAX_BATCH_CALLBACK_PAYLOAD_BYTES);
    for (size_t i = 0; i < m->count; i++) {
        const oq_job_msg_t *j = &m->jobs[i];
        if (j->unique_key.len || j->dispatch_id.len)
            S_REFUSE(OQ_ERR_BAD_REQUEST,
                     "job %zu of the batch carries a %s: a batch's jobs take neither (the batch "
                     "has its own dispatch_id)",
                     i, j->unique_key.len ? "unique_key" : "dispatch_id");
        if (s_check_rule(self, j, reason, reason_len) < 0) {
            *code = OQ_ERR_TIMEOUT_RULE;
            return -1;
        }
        cost += oq_engine_job_cost(j->payload_len, j->backoff_len) +
                (j->overlap_key.len ? OQ_JOB_KEY_COST_BYTES : 0);
    }
    if (oq_idset_size(self->jobs) + m->count + callbacks > self->config.max_jobs)
        S_REFUSE(OQ_ERR_FULL,
                 "the broker holds %zu jobs; this batch needs %zu more with its callbacks and the "
                 "limit is %zu",
                 oq_idset_size(self->jobs), m->count + callbacks, self->config.max_jobs);
    if (!oq_eng_fits(self, cost))
        S_REFUSE(OQ_ERR_FULL,
                 "the broker holds %llu bytes; this batch needs %llu more and the limit is %llu "
                 "(--max-bytes)",
                 (unsigned long long)oq_eng_held_bytes(self), (unsigned long long)cost,
                 (unsigned long long)self->config.max_bytes);
    /* Every check has passed. */
    oq_eng_batch_t *b = s_make(m, self->next_id, wall_ms);
    if (!b)
        S_REFUSE(OQ_ERR_INTERNAL, "out of memory");
    if (s_report(self, OQ_BATCH_CREATED, b, OQ_BATCH_THEN) < 0) {
        s_batch_free(b);
        S_REFUSE(OQ_ERR_UNAVAILABLE,
                 "the broker could not keep the batch's record for a restart; nothing was "
                 "queued, try again later");
    }
    if (oq_eng_make_room(self, cost) < 0 || s_insert(self, b) < 0) {
        /* Recorded but not held: replay would hold it with no jobs, so
           its record is followed by a cancellation of all of them. */
        b->v.total = 0;
        b->v.is_cancelled = true;
        (void)s_report(self, OQ_BATCH_CANCELLED, b, OQ_BATCH_THEN);
        s_batch_free(b);
        S_REFUSE(OQ_ERR_INTERNAL, "out of memory holding the batch");
    }
    uint64_t id = self->next_id++;
    for (size_t i = 0; i < m->count; i++) {
        uint64_t job_id = 0;
        if (oq_engine_dispatch(self, &m->jobs[i], &job_id, code, reason, reason_len) == 0 &&
            job_id == id + 1 + i)
            continue;
        /* Broke off: the batch holds the jobs queued so far, cancelled. */
        oq_error("batch %" PRIu64 ": job %zu of %zu could not be queued (%s); the batch is "
                 "cancelled",
                 id, i, m->count, reason);
        b->v.total = (uint32_t)i;
        b->v.is_cancelled = true;
        (void)s_report(self, OQ_BATCH_CANCELLED, b, OQ_BATCH_THEN);
        for (uint64_t k = id + 1; k < id + 1 + i; k++) {
            oq_refusal_t why;
            char ignored[OQ_MAX_ERROR_LEN + 1];
            (void)oq_engine_cancel(self, k, &why, ignored, sizeof ignored);
        }
        ssize_t at = s_index_of(self, id);
        if (at >= 0)
            s_settle(self, self->batches[at]);
        if (*code == OQ_ERR_NONE)
            *code = OQ_ERR_INTERNAL;
        return -1;
    }
    s_remember(self, m->dispatch_id, id, wall_ms);
    *batch_id = id;
    *first_id = id + 1;
    return 0;
#undef S_REFUSE
}

int oq_engine_batch_view(const oq_engine_t *self, uint64_t id, oq_batch_view_t *view)
{
    ssize_t at = s_index_of(self, id);
    if (at >= 0) {
        s_view(self->batches[at], view);
        return 0;
    }
    for (size_t i = 0; i < self->batches_settled_count; i++)
        if (self->batches_settled[i].id == id) {
            *view = self->batches_settled[i];
            return 0;
        }
    return -1;
}

uint64_t oq_engine_batch_of(const oq_engine_t *self, uint64_t job_id)
{
    const oq_eng_batch_t *b = s_find(self, job_id);
    return b ? b->v.id : 0;
}

size_t oq_engine_batch_each(const oq_engine_t *self, bool settled,
                            void (*fn)(void *ctx, const oq_batch_view_t *b), void *ctx)
{
    size_t calls = 0;
    for (size_t i = 0; i < self->batch_count; i++, calls++) {
        oq_batch_view_t view;
        s_view(self->batches[i], &view);
        fn(ctx, &view);
    }
    if (!settled)
        return calls;
    size_t n = self->batches_settled_count;
    size_t start = (self->batches_settled_next + OQ_RECENT_BATCHES - n) % OQ_RECENT_BATCHES;
    for (size_t i = 0; i < n; i++, calls++)
        fn(ctx, &self->batches_settled[(start + i) % OQ_RECENT_BATCHES]);
    return calls;
}

size_t oq_engine_batch_count(const oq_engine_t *self)
{
    return self->batch_count;
}

int oq_engine_batch_cancel(oq_engine_t *self, uint64_t id, uint64_t *withdrawn, oq_refusal_t *why,
                           char *reason, size_t reason_len)
{
    *withdrawn = 0;
    ssize_t at = s_index_of(self, id);
    if (at < 0) {
        *why = OQ_REFUSED_UNKNOWN;
        snprintf(reason, reason_len, "batch %" PRIu64 " is not held (settled, or never dispatched)",
                 id);
        return -1;
    }
    oq_eng_batch_t *b = self->batches[at];
    if (b->v.is_cancelled) {
        *why = OQ_REFUSED_STATE;
        snprintf(reason, reason_len, "batch %" PRIu64 " is cancelled already", id);
        return -1;
    }
    b->v.is_cancelled = true;
    if (s_report(self, OQ_BATCH_CANCELLED, b, OQ_BATCH_THEN) < 0) {
        b->v.is_cancelled = false;
        *why = OQ_REFUSED_UNRECORDED;
        snprintf(reason, reason_len,
                 "the cancellation of batch %" PRIu64 " could not be recorded; nothing changed",
                 id);
        return -1;
    }
    uint64_t first = b->v.first_id, end = b->v.first_id + b->v.total;
    for (uint64_t k = first; k < end; k++) {
        const char *state = oq_engine_job_state(self, k);
        if (!state || (strcmp(state, "ready") != 0 && strcmp(state, "delayed") != 0))
            continue;
        oq_refusal_t ignored_why;
        char ignored[OQ_MAX_ERROR_LEN + 1];
        if (oq_engine_cancel(self, k, &ignored_why, ignored, sizeof ignored) == 0)
            (*withdrawn)++;
    }
    /* The last withdrawal may have settled it already. */
    if ((at = s_index_of(self, id)) >= 0)
        s_settle(self, self->batches[at]);
    oq_info("batch %" PRIu64 " cancelled: %" PRIu64 " waiting jobs withdrawn", id, *withdrawn);
    return 0;
}

size_t oq_engine_batches_retry(oq_engine_t *self)
{
    if (!self->batches_due)
        return 0;
    self->batches_due = false;
    size_t fired = oq_engine_chains_settle(self);
    for (size_t i = self->batch_count; i > 0; i--)
        if (self->batches[i - 1]->due)
            fired += s_settle(self, self->batches[i - 1]);
    return fired;
}

size_t oq_engine_batches_settle(oq_engine_t *self)
{
    size_t fired = 0;
    /* Downwards: a batch let go moves only those after it. */
    for (size_t i = self->batch_count; i > 0; i--)
        fired += s_settle(self, self->batches[i - 1]);
    return fired;
}

int oq_engine_restore_batch(oq_engine_t *self, const oq_batch_view_t *v, char *reason,
                            size_t reason_len)
{
    if (s_index_of(self, v->id) >= 0)
        return 0;
    if (v->total > OQ_MAX_BATCH_JOBS || v->first_id != v->id + 1) {
        snprintf(reason, reason_len, "batch %" PRIu64 ": %u jobs from %" PRIu64 " do not fit",
                 v->id, v->total, v->first_id);
        return -1;
    }
    oq_batch_msg_t m = {
        .count = v->total, .allow_failures = v->allow_failures, .dispatch_id = v->dispatch_id};
    for (int i = 0; i < OQ_BATCH_CALLBACKS; i++)
        m.callbacks[i] = v->callbacks[i];
    oq_eng_batch_t *b = s_make(&m, v->id, v->created_ms);
    if (!b || s_insert(self, b) < 0) {
        if (b)
            s_batch_free(b);
        snprintf(reason, reason_len, "out of memory restoring batch %" PRIu64, v->id);
        return -1;
    }
    b->v.done = v->done;
    b->v.failed = v->failed;
    b->v.cancelled = v->cancelled;
    b->v.is_cancelled = v->is_cancelled;
    memcpy(b->v.callback_ids, v->callback_ids, sizeof b->v.callback_ids);
    oq_engine_restore_next_id(self, v->first_id + v->total);
    s_remember(self, v->dispatch_id, v->id, v->created_ms);
    return 0;
}

int oq_engine_restore_batch_fired(oq_engine_t *self, uint64_t id, oq_batch_callback_t which,
                                  uint64_t job_id)
{
    ssize_t at = s_index_of(self, id);
    if (at < 0 || which >= OQ_BATCH_CALLBACKS)
        return -1;
    self->batches[at]->v.callback_ids[which] = job_id;
    return 0;
}

int oq_engine_restore_batch_cancelled(oq_engine_t *self, uint64_t id, uint32_t total)
{
    ssize_t at = s_index_of(self, id);
    if (at < 0)
        return -1;
    oq_eng_batch_t *b = self->batches[at];
    b->v.is_cancelled = true;
    if (total < b->v.total)
        b->v.total = total;
    return 0;
}

void oq_engine_batches_hold(oq_engine_t *self, bool held)
{
    self->batches_held = held;
}

void oq_eng_batches_destroy(oq_engine_t *self)
{
    for (size_t i = 0; i < self->batch_count; i++)
        s_batch_free(self->batches[i]);
    free(self->batches);
    self->batches = NULL;
    self->batch_count = 0;
    free(self->batches_settled);
    self->batches_settled = NULL;
}
