/*  engine_restore.c: the calls replay rebuilds the engine with (engine.h,
    "replay"). They bypass the dispatch limits, report nothing to the
    hooks, and move jobs only in the ways replay may (a job that was leased
    comes back ready). */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_jobs.h"
#include "engine_queues.h"
#include "onceq/log.h"

/* A job replay may change: held and not leased (replay leases nothing). */
static oq_eng_job_t *s_restored(oq_engine_t *self, uint64_t id)
{
    oq_eng_job_t *job = oq_idset_get(self->jobs, id);
    return job && job->state != OQ_ENG_LEASED ? job : NULL;
}

/* Ready now, or delayed until a wall-clock time still to come. */
static void s_restore_timed(oq_engine_t *self, oq_eng_job_t *job, int64_t not_before_ms)
{
    int64_t left_ms = not_before_ms - oq_clock_wall_ms(self->clock);
    if (not_before_ms > 0 && left_ms > 0) {
        oq_eng_enter_t how = {.until_ms = oq_eng_now(self) + left_ms};
        oq_eng_transition(self, job, OQ_ENG_DELAYED, OQ_EVENT_RESTORED, &how);
    } else if (job->state != OQ_ENG_READY) {
        oq_eng_transition(self, job, OQ_ENG_READY, OQ_EVENT_RESTORED, NULL);
    }
}

int oq_engine_restore(oq_engine_t *self, const oq_job_msg_t *msg, int64_t not_before_ms,
                      char *reason, size_t reason_len)
{
    char qname[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(msg->queue, qname, sizeof qname);
    oq_eng_queue_t *q = oq_eng_queue_get(self, qname, true);
    oq_eng_type_t *type = q ? oq_eng_type_get(self, msg->type) : NULL;
    if (!q || !type) {
        snprintf(reason, reason_len, "cannot restore job %llu: too many queues or types",
                 (unsigned long long)msg->id);
        return -1;
    }
    int64_t timeout_ms = msg->has_timeout ? msg->timeout_ms : q->timeout_ms;
    /* The queue may have been given a shorter retry_after since the job was
       accepted. Refusing it would lose a confirmed job; keeping its timeout
       would let its handler overlap its own redelivery. The longest timeout
       the rule allows keeps both promises. */
    int64_t longest_ms = q->retry_after_ms - self->config.margin_ms;
    if (longest_ms < 1)
        longest_ms = 1;
    bool clamp = timeout_ms > longest_ms;
    oq_eng_job_t *job;
    int rc = oq_eng_job_new(self, msg, msg->id, q, type, clamp ? longest_ms : timeout_ms, &job);
    if (rc != 0) {
        snprintf(reason, reason_len,
                 rc > 0 ? "job %llu is restored twice" : "out of memory restoring job %llu",
                 (unsigned long long)msg->id);
        return rc;
    }
    if (msg->id >= self->next_id)
        self->next_id = msg->id + 1;
    if (clamp) {
        q->clamped++;
        if (timeout_ms > q->clamped_longest_ms)
            q->clamped_longest_ms = timeout_ms;
    }
    s_restore_timed(self, job, not_before_ms);
    return 0;
}

int oq_engine_restore_leased(oq_engine_t *self, uint64_t id, uint32_t attempt)
{
    oq_eng_job_t *job = s_restored(self, id);
    if (!job || attempt > OQ_ENG_MAX_ATTEMPT || job->state == OQ_ENG_FAILED ||
        job->state == OQ_ENG_REVIEW)
        return -1;
    job->attempt = (uint16_t)attempt;
    job->returned = true; /* its next delivery is a redelivery */
    s_restore_timed(self, job, 0);
    return 0;
}

int oq_engine_restore_retry(oq_engine_t *self, uint64_t id, uint32_t attempt, int64_t not_before_ms)
{
    oq_eng_job_t *job = s_restored(self, id);
    if (!job || attempt > OQ_ENG_MAX_ATTEMPT || job->state == OQ_ENG_FAILED ||
        job->state == OQ_ENG_REVIEW)
        return -1;
    job->attempt = (uint16_t)attempt;
    job->returned = false;
    oq_eng_decide(self, job, attempt); /* that delivery decided: a retry */
    s_restore_timed(self, job, not_before_ms);
    return 0;
}

int oq_engine_restore_failed(oq_engine_t *self, uint64_t id, uint32_t attempt, const char *error,
                             int64_t failed_at_ms)
{
    oq_eng_job_t *job = s_restored(self, id);
    if (!job || attempt > OQ_ENG_MAX_ATTEMPT || job->state == OQ_ENG_FAILED ||
        job->state == OQ_ENG_REVIEW)
        return -1;
    char *copy = strdup(error ? error : "");
    if (!copy)
        return -1;
    job->attempt = (uint16_t)attempt;
    /* The record does not say whether the delivery decided or its lease
       ran out on the last try: taken as decided, so no ack of it changes
       the job after a restart (the job stays failed for a person). */
    oq_eng_decide(self, job, attempt);
    oq_eng_enter_t how = {.error = copy, .failed_at_ms = failed_at_ms};
    oq_eng_transition(self, job, OQ_ENG_FAILED, OQ_EVENT_RESTORED, &how);
    return 0;
}

int oq_engine_restore_review(oq_engine_t *self, uint64_t id, uint32_t attempt, const char *reason,
                             int64_t reviewed_at_ms)
{
    oq_eng_job_t *job = s_restored(self, id);
    if (!job || attempt > OQ_ENG_MAX_ATTEMPT || job->state == OQ_ENG_FAILED ||
        job->state == OQ_ENG_REVIEW)
        return -1;
    char *copy = strdup(reason ? reason : "");
    if (!copy)
        return -1;
    job->attempt = (uint16_t)attempt;
    oq_eng_decide(self, job, attempt); /* that delivery decided: review */
    oq_eng_enter_t how = {.error = copy, .failed_at_ms = reviewed_at_ms};
    oq_eng_transition(self, job, OQ_ENG_REVIEW, OQ_EVENT_RESTORED, &how);
    return 0;
}

int oq_engine_restore_resolution(oq_engine_t *self, const oq_resolution_t *r)
{
    oq_eng_job_t *job = oq_idset_get(self->jobs, r->id);
    if (job && job->state == OQ_ENG_REVIEW)
        return oq_eng_resolve(self, job, r->action, r->note, r->resolved_at_ms, true);
    return oq_review_log_add(self->reviews, r) ? 0 : -1;
}

int oq_engine_restore_done(oq_engine_t *self, uint64_t id)
{
    oq_eng_job_t *job = s_restored(self, id);
    if (!job)
        return -1;
    oq_eng_transition(self, job, OQ_ENG_DONE, OQ_EVENT_RESTORED, NULL);
    return 0;
}

int oq_engine_restore_forgotten(oq_engine_t *self, uint64_t id)
{
    oq_eng_job_t *job = s_restored(self, id);
    if (!job || job->state != OQ_ENG_FAILED)
        return -1;
    /* A batch counts it as what it was (engine_batches.c). */
    self->restore_as = OQ_EVENT_FORGOTTEN;
    oq_eng_transition(self, job, OQ_ENG_DONE, OQ_EVENT_RESTORED, NULL);
    self->restore_as = OQ_EVENT_DONE;
    return 0;
}

int oq_engine_restore_cancelled(oq_engine_t *self, uint64_t id)
{
    oq_eng_job_t *job = s_restored(self, id);
    if (!job || job->state == OQ_ENG_FAILED)
        return -1;
    /* A batch counts it as what it was (engine_batches.c). */
    self->restore_as = OQ_EVENT_CANCELLED;
    oq_eng_transition(self, job, OQ_ENG_DONE, OQ_EVENT_RESTORED, NULL);
    self->restore_as = OQ_EVENT_DONE;
    return 0;
}

int oq_engine_restore_keys(oq_engine_t *self, uint64_t id, oq_str_t unique_key,
                           int64_t unique_until_ms, bool window_only, oq_str_t overlap_key)
{
    oq_eng_job_t *job = oq_idset_get(self->jobs, id);
    int64_t now = oq_clock_wall_ms(self->clock);
    bool live = job && (job->state == OQ_ENG_READY || job->state == OQ_ENG_DELAYED);
    if (live && overlap_key.len && !oq_overlap_key_of(self->overlap, id) &&
        oq_overlap_add(self->overlap, id, overlap_key.ptr, overlap_key.len) < 0)
        return -1;
    if (!unique_key.len)
        return 0;
    if (live && !window_only) {
        if (oq_unique_find(self->unique, unique_key.ptr, unique_key.len, now) == 0)
            oq_eng_keys_take(self, job, unique_key, unique_until_ms, oq_str(NULL));
        return 0;
    }
    return oq_unique_remember(self->unique, unique_key.ptr, unique_key.len, id, unique_until_ms,
                              now);
}

int oq_engine_restore_generation(oq_engine_t *self, uint64_t id, uint32_t generation)
{
    oq_eng_job_t *job = s_restored(self, id);
    if (!job)
        return -1;
    job->gen = generation;
    return 0;
}

void oq_engine_restore_next_id(oq_engine_t *self, uint64_t next_id)
{
    if (next_id > self->next_id)
        self->next_id = next_id;
}

uint64_t oq_engine_restore_report(oq_engine_t *self)
{
    uint64_t total = 0;
    for (size_t i = 0; i < self->queue_count; i++) {
        const oq_eng_queue_t *q = self->queues[i];
        if (!q->clamped)
            continue;
        oq_warn("queue \"%s\": %llu restored job(s) had a timeout (up to %.3g s) not shorter "
                "than retry_after %.3g s by the margin of %.3g s; their timeout is now %.3g s",
                q->name, (unsigned long long)q->clamped, q->clamped_longest_ms / 1000.0,
                q->retry_after_ms / 1000.0, self->config.margin_ms / 1000.0,
                (q->retry_after_ms - self->config.margin_ms) / 1000.0);
        total += q->clamped;
    }
    return total;
}
