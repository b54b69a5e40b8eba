/*  engine_acks.c: workers' outcomes and lease touches.

    Fenced acks. Every delivery carries a lease token (engine_jobs.h),
    bound to the key of the worker it went to. An ack or a touch counts
    only if it echoes the token of a delivery that really happened to this
    job (attempt 1 .. the job's attempt, this generation) and comes with
    that delivery's key; anything else changes nothing and is counted in
    fenced_acks. A requeue starts a new generation, so the tokens of the
    job's earlier life die.

    Credit. An ack gives back its credit only if its token proves a
    delivery of the job to the sender: in this generation, or in one of
    the OQ_ENG_STALE_GENERATIONS before a requeue (the ack changes
    nothing, but its worker is free again and must not lose the slot), or
    for a job the broker no longer remembers (it cannot tell). A worker
    whose acks are fenced (one that never echoes the token, or replays
    another worker's) gets nothing for them, so it is sent no more jobs
    than the credit it gave.

    First decision stands. A delivery reports one outcome; the first that
    reaches the broker is its decision (engine_jobs.h, oq_eng_decide), and
    any later ack of the same delivery is counted as ignored and changes
    nothing: an ok after the delivery's own fail leaves the job failed.
    An ok from an earlier delivery that decided nothing (its lease ran
    out) still completes the job, as below.

    Late acks. A job recently done is remembered (engine_stores.h), so
    that an ack arriving after it (the slower of two overlapping
    deliveries) is still attributed: it is counted as ignored, and its
    result as what it was: "applied" (the slower run may be the one that
    wrote the effect) or "already_applied" (a duplicate the unique guard
    absorbed). Each delivery's result is counted once: an ack a worker
    sends again after a reconnect is only ignored. */
#include "engine.h"

#include <stdio.h>
#include <string.h>

#include "engine_jobs.h"
#include "engine_stores.h"
#include "engine_workers.h"
#include "onceq/log.h"

static int64_t s_backoff_ms(const oq_engine_t *self, const oq_eng_job_t *job)
{
    const int64_t *backoff_ms = oq_eng_job_backoff(job);
    if (!backoff_ms)
        return self->config.backoff_ms;
    uint32_t step = job->attempt - 1;
    if (step >= job->backoff_len)
        step = job->backoff_len - 1;
    return backoff_ms[step];
}

/* An ack whose token proves nothing in the job's generation gen: fenced.
 *credited says whether it still proves a delivery from before a requeue. */
static oq_ack_effect_t s_fenced(oq_engine_t *self, uint64_t id, uint32_t gen, const uint8_t *key,
                                const oq_ack_msg_t *ack, bool *credited)
{
    self->fenced_acks++;
    *credited = oq_eng_stale_token(self, id, gen, key, ack->attempt, ack->has_lease, ack->lease);
    return OQ_ACK_FENCED;
}

/* Apply ack; *credited says whether its credit comes back (see above). */
static oq_ack_effect_t s_apply(oq_engine_t *self, oq_worker_t *worker, const uint8_t *key,
                               const oq_ack_msg_t *ack, bool *credited)
{
    *credited = true;
    oq_eng_job_t *job = oq_idset_get(self->jobs, ack->id);
    if (!job) {
        oq_eng_recent_t *done = oq_eng_done_find(self, ack->id);
        if (!done) {
            self->unknown_acks++;
            return OQ_ACK_IGNORED;
        }
        if (!oq_eng_fenced_ok(self, done->id, done->attempt, done->gen, key, ack->attempt,
                              ack->has_lease, ack->lease))
            return s_fenced(self, done->id, done->gen, key, ack, credited);
        done->queue->ignored_acks++;
        uint32_t bit = ack->attempt <= OQ_ENG_COUNTED_ATTEMPTS ? 1u << (ack->attempt - 1) : 0;
        if (ack->outcome != OQ_OUTCOME_OK || (done->counted & bit))
            return OQ_ACK_IGNORED;
        done->counted |= bit;
        if (ack->result == OQ_RESULT_APPLIED)
            done->type->applied++;
        if (ack->result == OQ_RESULT_ALREADY_APPLIED) {
            done->queue->duplicates++;
            done->type->duplicates++;
        }
        return OQ_ACK_IGNORED;
    }
    /* Only a delivery that happened, proven by its token, may change the job. */
    if (!oq_eng_fenced_ok(self, job->id, job->attempt, job->gen, key, ack->attempt, ack->has_lease,
                          ack->lease))
        return s_fenced(self, job->id, job->gen, key, ack, credited);
    oq_eng_queue_t *q = oq_eng_job_queue(self, job);
    bool current = job->state == OQ_ENG_LEASED && job->attempt == ack->attempt;
    /* The current delivery has decided nothing (a decision ends its lease),
       whatever the bit it shares past OQ_ENG_DECIDED_ATTEMPTS says. */
    if (!current && oq_eng_decided(self, job, ack->attempt)) {
        q->ignored_acks++; /* the delivery decided already: that stands */
        return OQ_ACK_IGNORED;
    }

    if (ack->outcome == OQ_OUTCOME_OK) {
        /* Whoever finishes first completes the job: the effect is guarded
           by the database, so an earlier delivery's ok is as good as the
           current one's, and the current holder's later ack is ignored. */
        oq_eng_job_type(self, job)->done++;
        if (job->timed)
            oq_histogram_observe(
                &q->latency,
                (int64_t)(uint32_t)((uint32_t)oq_eng_now(self) - job->dispatched_ms) * 1000);
        if (ack->result == OQ_RESULT_APPLIED)
            oq_eng_job_type(self, job)->applied++;
        if (ack->result == OQ_RESULT_ALREADY_APPLIED) {
            q->duplicates++;
            oq_eng_job_type(self, job)->duplicates++;
        }
        if (!current)
            q->late_acks++;
        uint64_t id = job->id;
        char note[96];
        snprintf(note, sizeof note, "completed by the ok of an earlier delivery (attempt %u)",
                 ack->attempt);
        /* A job in review leaves it by a decision; an ok that proves the
           effect is one, and is remembered as such. */
        if (job->state != OQ_ENG_REVIEW || oq_eng_resolve(self, job, OQ_REVIEW_DONE, note,
                                                          oq_clock_wall_ms(self->clock), false) < 0)
            oq_eng_transition(self, job, OQ_ENG_DONE, OQ_EVENT_DONE, NULL);
        oq_eng_recent_t *recent = oq_eng_done_find(self, id);
        if (recent && ack->attempt <= OQ_ENG_COUNTED_ATTEMPTS)
            recent->counted |= 1u << (ack->attempt - 1);
        return current ? OQ_ACK_APPLIED : OQ_ACK_LATE;
    }
    if (!current) {
        q->ignored_acks++;
        oq_eng_decide(self, job, ack->attempt);
        return OQ_ACK_IGNORED;
    }
    if (ack->outcome == OQ_OUTCOME_RETURN || ack->outcome == OQ_OUTCOME_UNAVAILABLE) {
        /* Given back unrun: the delivery used no try. A return says the
           worker cannot handle the type at all; unavailable only that
           something the job needs is down for now (the worker pauses), so
           the worker keeps the type, as it does after a return of a job it
           only held (prefetched). At once and in front: another worker
           that can reach the database takes it. */
        if (ack->outcome == OQ_OUTCOME_RETURN && !ack->held && worker && job->u.t.worker == worker)
            oq_eng_worker_refuse_type(self, worker, oq_eng_job_type(self, job));
        q->returned++;
        job->attempt--;
        job->returned = false;
        if (ack->has_delay && ack->delay_ms > 0) {
            oq_eng_enter_t how = {.until_ms = oq_eng_now(self) + ack->delay_ms};
            oq_eng_transition(self, job, OQ_ENG_DELAYED, OQ_EVENT_RETRY, &how);
        } else {
            oq_eng_enter_t how = {.in_front = true};
            oq_eng_transition(self, job, OQ_ENG_READY, OQ_EVENT_RETRY, &how);
        }
        return OQ_ACK_APPLIED;
    }
    /* Retry, timeout, fail, review: the delivery's decision. (A return
       or unavailable gives the attempt back: the next delivery has the
       same attempt, and decides afresh.) */
    oq_eng_decide(self, job, ack->attempt);
    char error[OQ_MAX_ERROR_LEN + 1];
    if (ack->outcome == OQ_OUTCOME_TIMEOUT && ack->error.len == 0)
        snprintf(error, sizeof error, "timed out after %.3g s", job->timeout_ms / 1000.0);
    else
        oq_str_copy(ack->error, error, sizeof error);

    if (ack->outcome == OQ_OUTCOME_FAIL) {
        oq_eng_fail(self, job, strdup(error));
        return OQ_ACK_APPLIED;
    }
    if (ack->outcome == OQ_OUTCOME_REVIEW) {
        oq_eng_review(self, job, strdup(error));
        return OQ_ACK_APPLIED;
    }
    q->retried++;
    if (job->attempt >= job->max_tries) {
        oq_eng_fail(self, job,
                    oq_eng_format("%s (attempt %u of %u, no tries left)", error, job->attempt,
                                  job->max_tries));
        return OQ_ACK_APPLIED;
    }
    /* A release: the handler chose the delay; it still used a try. */
    int64_t wait_ms = ack->outcome == OQ_OUTCOME_RETRY && ack->has_delay ? ack->delay_ms
                                                                         : s_backoff_ms(self, job);
    if (wait_ms == 0) {
        oq_eng_transition(self, job, OQ_ENG_READY, OQ_EVENT_RETRY, NULL);
    } else {
        oq_eng_enter_t how = {.until_ms = oq_eng_now(self) + wait_ms};
        oq_eng_transition(self, job, OQ_ENG_DELAYED, OQ_EVENT_RETRY, &how);
    }
    return OQ_ACK_APPLIED;
}

oq_ack_effect_t oq_engine_ack(oq_engine_t *self, oq_worker_t *worker, const uint8_t *key,
                              const oq_ack_msg_t *ack)
{
    if (worker)
        oq_engine_worker_seen(self, worker);
    bool credited;
    oq_ack_effect_t effect = s_apply(self, worker, key, ack, &credited);
    if (worker && credited)
        oq_engine_worker_credit(self, worker, ack->credit);
    return effect;
}

int oq_engine_touch(oq_engine_t *self, oq_worker_t *worker, const uint8_t *key,
                    const oq_ack_msg_t *touch)
{
    if (worker)
        oq_engine_worker_seen(self, worker);
    oq_eng_job_t *job = oq_idset_get(self->jobs, touch->id);
    if (!job || job->state != OQ_ENG_LEASED || job->attempt != touch->attempt || !worker ||
        job->u.t.worker != worker ||
        !oq_eng_fenced_ok(self, job->id, job->attempt, job->gen, key, touch->attempt,
                          touch->has_lease, touch->lease)) {
        self->stale_touches++;
        return -1;
    }
    /* A fresh lease of retry_after from now. The worker restarts its
       watchdog at now + timeout as it sends this, and timeout is shorter
       than retry_after by the margin, so the lease still outlasts the
       handler's time limit. */
    oq_heap_remove(self->timers, &job->u.t.timer);
    if (oq_heap_push(self->timers, &job->u.t.timer,
                     oq_eng_now(self) + oq_eng_job_queue(self, job)->retry_after_ms) < 0)
        oq_error("job %llu: no memory for its lease timer; it ends with its worker",
                 (unsigned long long)job->id);
    return 0;
}
