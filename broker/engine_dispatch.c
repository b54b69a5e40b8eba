/*  engine_dispatch.c: jobs coming in, and the dispatch ids that make a
    resent dispatch return the first job.

    A dispatch with a dispatch_id seen within the window is answered from
    the table before any limit is checked: the resend of a job accepted
    when the broker had room must not be refused because it is full now.
    Otherwise a dispatch is checked against the limits (jobs, bytes,
    queues, types) and the timeout rule before anything is created, so a
    refused dispatch leaves nothing behind; its dispatch_id is remembered
    only once the job is queued. The bytes are the job's and its keys'
    (engine_memory.c): room is taken from what is only remembered (old
    dispatch ids, unique windows) once every other check has passed, so a
    refused dispatch forgets nothing either.

    The table is rebuilt on a restart from the journal's own records: the
    DISPATCHED record of a job carries its dispatch_id and the time it was
    sent, and a snapshot keeps the ids whose job is gone as DEDUPE records
    of their digests (oq_engine_restore_dispatch_id and _digest). */
#include "engine.h"

#include <stdio.h>
#include <string.h>

#include "engine_jobs.h"
#include "engine_memory.h"
#include "engine_queues.h"
#include "onceq/log.h"

static void s_digest(const oq_engine_t *self, oq_str_t dispatch_id,
                     uint8_t digest[OQ_SIPHASH_DIGEST_BYTES])
{
    oq_siphash128(self->dispatch_key, dispatch_id.ptr, dispatch_id.len, digest);
}

/* Remember digest -> id until expires_ms, unless that has passed: in the
   room left under max_bytes, or in place of the oldest id. 0, or -1 if
   memory runs out. */
static int s_remember(oq_engine_t *self, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES], uint64_t id,
                      int64_t expires_ms)
{
    if (expires_ms <= oq_clock_wall_ms(self->clock))
        return 0;
    int rc =
        oq_dedupe_add_within(self->dispatch_ids, digest, id, expires_ms, oq_eng_room_left(self));
    oq_eng_memory_note(self);
    return rc;
}

/* What a dispatch adds against max_bytes: its job and its keys. */
static uint64_t s_cost(const oq_job_msg_t *msg)
{
    uint64_t keys = (msg->unique_key.len ? 1 : 0) + (msg->overlap_key.len ? 1 : 0);
    return oq_engine_job_cost(msg->payload_len, msg->backoff_len) + keys * OQ_JOB_KEY_COST_BYTES;
}

int oq_engine_dispatch(oq_engine_t *self, const oq_job_msg_t *msg, uint64_t *id, oq_err_t *code,
                       char *reason, size_t reason_len)
{
#define S_REFUSE(c, ...)                                                                           \
    do {                                                                                           \
        *code = (c);                                                                               \
        snprintf(reason, reason_len, __VA_ARGS__);                                                 \
        return -1;                                                                                 \
    } while (0)

    uint8_t digest[OQ_SIPHASH_DIGEST_BYTES];
    int64_t wall_ms = oq_clock_wall_ms(self->clock);
    if (msg->dispatch_id.len) {
        s_digest(self, msg->dispatch_id, digest);
        uint64_t first = oq_dedupe_find(self->dispatch_ids, digest, wall_ms);
        if (first) {
            self->dedupe_hits++;
            oq_debug("dispatch id %.*s seen before: job %llu", (int)msg->dispatch_id.len,
                     msg->dispatch_id.ptr, (unsigned long long)first);
            *id = first;
            return 0;
        }
    }
    /* A unique key held answers before any limit too: the dispatch adds
       nothing. Its dispatch_id then names the holder, so that a resend
       after the key is let go still queues nothing. */
    uint64_t holder = msg->unique_key.len ? oq_unique_find(self->unique, msg->unique_key.ptr,
                                                           msg->unique_key.len, wall_ms)
                                          : 0;
    if (holder) {
        self->unique_hits++;
        oq_debug("unique key %.*s is held by job %llu", (int)msg->unique_key.len,
                 msg->unique_key.ptr, (unsigned long long)holder);
        if (msg->dispatch_id.len &&
            s_remember(self, digest, holder, wall_ms + self->config.dedupe_window_ms) < 0)
            oq_warn("out of memory remembering dispatch id of job %llu",
                    (unsigned long long)holder);
        *id = holder;
        return 1;
    }
    if (oq_idset_size(self->jobs) >= self->config.max_jobs)
        S_REFUSE(OQ_ERR_FULL, "the broker holds its maximum of %zu jobs", self->config.max_jobs);
    /* Refused before the limit, not after: the bytes held never pass it. */
    uint64_t cost = s_cost(msg);
    if (!oq_eng_fits(self, cost))
        S_REFUSE(OQ_ERR_FULL,
                 "the broker holds %llu bytes (%llu of them jobs'); this job needs %llu more (a "
                 "%zu-byte payload, %d bytes per job and %d per key) and the limit is %llu "
                 "(--max-bytes)",
                 (unsigned long long)oq_eng_held_bytes(self), (unsigned long long)self->bytes,
                 (unsigned long long)cost, msg->payload_len, OQ_JOB_OVERHEAD_BYTES,
                 OQ_JOB_KEY_COST_BYTES, (unsigned long long)self->config.max_bytes);
    char qname[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(msg->queue, qname, sizeof qname);
    /* Check before creating anything: a refused dispatch leaves no queue behind. */
    oq_eng_queue_t *q = oq_eng_queue_get(self, qname, false);
    int64_t retry_after_ms = q ? q->retry_after_ms : self->config.retry_after_ms;
    int64_t timeout_ms =
        msg->has_timeout ? msg->timeout_ms : (q ? q->timeout_ms : self->config.timeout_ms);
    if (oq_eng_check_rule(self, qname, timeout_ms, retry_after_ms, reason, reason_len) < 0) {
        *code = OQ_ERR_TIMEOUT_RULE;
        return -1;
    }
    if (!q && !(q = oq_eng_queue_get(self, qname, true)))
        S_REFUSE(OQ_ERR_FULL,
                 "cannot create queue \"%s\": the broker holds its maximum of %d queues", qname,
                 OQ_MAX_QUEUES);
    oq_eng_type_t *type = oq_eng_type_get(self, msg->type);
    if (!type)
        S_REFUSE(OQ_ERR_FULL, "the broker knows its maximum of %d job types", OQ_MAX_TYPES);
    /* Every check has passed: only now is anything remembered forgotten. */
    if (oq_eng_make_room(self, cost) < 0)
        S_REFUSE(OQ_ERR_INTERNAL, "out of memory making room for the job");
    oq_eng_job_t *job;
    if (oq_eng_job_new(self, msg, self->next_id, q, type, timeout_ms, &job) != 0)
        S_REFUSE(OQ_ERR_INTERNAL, "out of memory");
    job->dispatched_ms = (uint32_t)oq_eng_now(self);
    job->timed = 1;
    /* Before the record: it carries them (a KEYS record after DISPATCHED). */
    oq_eng_keys_take(self, job, msg->unique_key,
                     msg->unique_for_ms ? wall_ms + msg->unique_for_ms : 0, msg->overlap_key);
    oq_eng_enter_t how = {.dispatch = msg};
    bool delayed = msg->has_delay && msg->delay_ms > 0;
    if (delayed)
        how.until_ms = oq_eng_now(self) + msg->delay_ms;
    if (oq_eng_transition(self, job, delayed ? OQ_ENG_DELAYED : OQ_ENG_READY, OQ_EVENT_DISPATCHED,
                          &how) < 0) {
        /* Its record could not be kept: the job was never queued. */
        oq_eng_keys_drop(self, job);
        oq_eng_job_unmake(self, job);
        S_REFUSE(OQ_ERR_UNAVAILABLE,
                 "the broker could not keep the job's record for a restart (out of memory); "
                 "nothing was queued, try again later");
    }
    self->next_id++;
    q->dispatched++;
    *id = job->id;
    if (msg->dispatch_id.len &&
        s_remember(self, digest, job->id, wall_ms + self->config.dedupe_window_ms) < 0)
        oq_warn("out of memory remembering dispatch id of job %llu", (unsigned long long)job->id);
    return 0;
#undef S_REFUSE
}

void oq_engine_set_dispatch_key(oq_engine_t *self, const uint8_t key[OQ_SIPHASH_KEY_BYTES])
{
    memcpy(self->dispatch_key, key, OQ_SIPHASH_KEY_BYTES);
}

int oq_engine_restore_dispatch_id(oq_engine_t *self, oq_str_t dispatch_id, uint64_t job_id,
                                  int64_t dispatched_at_ms)
{
    if (!dispatch_id.len)
        return 0;
    uint8_t digest[OQ_SIPHASH_DIGEST_BYTES];
    s_digest(self, dispatch_id, digest);
    return s_remember(self, digest, job_id, dispatched_at_ms + self->config.dedupe_window_ms);
}

int oq_engine_restore_dispatch_digest(oq_engine_t *self,
                                      const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES],
                                      uint64_t job_id, int64_t expires_ms)
{
    return s_remember(self, digest, job_id, expires_ms);
}

/* Only those still inside their window: the table forgets lazily. */
typedef struct {
    oq_dedupe_fn fn;
    void *ctx;
    int64_t now_ms;
} s_each_t;

static void s_each_live(void *ctx, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES], uint64_t job_id,
                        int64_t expires_ms)
{
    const s_each_t *each = ctx;
    if (expires_ms > each->now_ms)
        each->fn(each->ctx, digest, job_id, expires_ms);
}

void oq_engine_dispatch_id_each(const oq_engine_t *self, oq_dedupe_fn fn, void *ctx)
{
    s_each_t each = {fn, ctx, oq_clock_wall_ms(self->clock)};
    oq_dedupe_each(self->dispatch_ids, s_each_live, &each);
}

size_t oq_engine_dispatch_ids(const oq_engine_t *self)
{
    return oq_dedupe_count(self->dispatch_ids);
}

uint64_t oq_engine_dedupe_hits(const oq_engine_t *self)
{
    return self->dedupe_hits;
}

uint64_t oq_engine_dedupe_evicted(const oq_engine_t *self)
{
    return oq_dedupe_evicted(self->dispatch_ids);
}
