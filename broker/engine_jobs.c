/*  engine_jobs.c: the job table and the job state machine.

    Every job is in exactly one state, and every change of state goes
    through oq_eng_transition, which asserts that the change is legal and
    keeps the per-queue counts and list memberships right.

    Redelivery. A job goes back to ready when its lease runs out or its
    worker is found dead; it keeps its attempt count, is put at the front of
    its priority band so it is not starved behind newer work, and is counted
    as redelivered when it is next handed out. On the last allowed attempt it
    goes to failed instead, so a job that kills every worker it touches
    stops circling.

    Observer. oq_eng_transition reports each change to the hooks (the
    journal), except a lease, which the pump reports only once the job has
    really been sent. Replay rebuilds jobs through the restore calls, whose
    moves are legal only while restoring (a leased job comes back ready, so
    a retry or a failure is replayed from ready).

    Lease tokens. Every delivery carries a token, the keyed SipHash of
    (job id, attempt, requeue generation, the worker's key) under the
    broker's secret (engine_acks.c checks them). The worker's key is the
    CURVE public key its connection authenticated with, so a token is
    worth nothing from another key: an ack is checked against the
    sender's own key, never against a key the broker remembers. A worker
    without a key (--insecure) has nothing that proves who it is (its
    socket identity changes with every reconnect and any peer may claim
    one), so its tokens hash the first three alone.

    Decisions. A delivery decides once: the first outcome it reports
    (retry, fail, review, timeout) is remembered, by attempt, for as long
    as the job is live in its generation, and stands: a later ack of the
    same delivery (an ok after its fail) changes nothing. Most jobs never
    decide anything but ok, which ends them, so the decisions live in a map
    beside the jobs (engine->decided), not in every job's header. */
#include "engine_jobs.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_batches.h"
#include "engine_memory.h"
#include "engine_queues.h"
#include "engine_stores.h"
#include "onceq/log.h"
#include "siphash.h"

const char *const oq_eng_state_names[] = {"new",    "ready",  "delayed", "leased",
                                          "failed", "review", "waiting", "done"};

int64_t oq_eng_now(const oq_engine_t *self)
{
    return oq_clock_now_ms(self->clock);
}

/* The lease token of one delivery: unguessable without the broker's key.
   Without a worker key the input is 16 bytes, with one 48: SipHash mixes
   the length in, so no keyless token equals a keyed one by construction. */
uint64_t oq_eng_token(const oq_engine_t *self, uint64_t id, uint32_t attempt, uint32_t gen,
                      const uint8_t *key)
{
    uint8_t in[16 + OQ_KEY_BYTES], out[OQ_SIPHASH_DIGEST_BYTES];
    for (int i = 0; i < 8; i++)
        in[i] = (uint8_t)(id >> (8 * i));
    for (int i = 0; i < 4; i++) {
        in[8 + i] = (uint8_t)(attempt >> (8 * i));
        in[12 + i] = (uint8_t)(gen >> (8 * i));
    }
    if (key)
        memcpy(in + 16, key, OQ_KEY_BYTES);
    oq_siphash128(self->lease_key, in, key ? sizeof in : 16, out);
    uint64_t token = 0;
    for (int i = 0; i < 8; i++)
        token |= (uint64_t)out[i] << (8 * i);
    return token;
}

/* Does lease prove a delivery of this job on this attempt to key? */
bool oq_eng_fenced_ok(const oq_engine_t *self, uint64_t id, uint32_t job_attempt, uint32_t gen,
                      const uint8_t *key, uint32_t attempt, bool has_lease, uint64_t lease)
{
    return has_lease && attempt >= 1 && attempt <= job_attempt &&
           lease == oq_eng_token(self, id, attempt, gen, key);
}

/* The last OQ_ENG_STALE_GENERATIONS generations before gen are tried: a
   job is requeued a handful of times at most, and an ack from further
   back only loses its credit. */
bool oq_eng_stale_token(const oq_engine_t *self, uint64_t id, uint32_t gen, const uint8_t *key,
                        uint32_t attempt, bool has_lease, uint64_t lease)
{
    if (!has_lease || attempt < 1 || attempt > OQ_ENG_MAX_ATTEMPT)
        return false;
    for (uint32_t back = 1; back <= OQ_ENG_STALE_GENERATIONS && back <= gen; back++)
        if (lease == oq_eng_token(self, id, attempt, gen - back, key))
            return true;
    return false;
}

/* Bit of attempt in a job's decisions: the last bit serves every attempt
   from OQ_ENG_DECIDED_ATTEMPTS on, so a decision past it makes the late ok
   of a later, expired delivery count as decided too (the job then runs
   again rather than trusting an ok the broker cannot place; the effect's
   guard absorbs it). The current delivery is never taken as decided
   (engine_acks.c), so a job past that attempt still completes. */
static uint64_t s_decision_bit(uint32_t attempt)
{
    uint32_t at = attempt < OQ_ENG_DECIDED_ATTEMPTS ? attempt : OQ_ENG_DECIDED_ATTEMPTS;
    return (uint64_t)1 << (at - 1);
}

_Static_assert(UINTPTR_MAX >= UINT64_MAX, "a job's decisions are kept as the map's value");

bool oq_eng_decided(const oq_engine_t *self, const oq_eng_job_t *job, uint32_t attempt)
{
    if (attempt < 1 || oq_idmap_size(self->decided) == 0)
        return false;
    uintptr_t bits = (uintptr_t)oq_idmap_get(self->decided, job->id);
    return (bits & s_decision_bit(attempt)) != 0;
}

void oq_eng_decide(oq_engine_t *self, const oq_eng_job_t *job, uint32_t attempt)
{
    if (attempt < 1)
        return;
    uintptr_t bits = (uintptr_t)oq_idmap_get(self->decided, job->id);
    if (oq_idmap_put(self->decided, job->id, (void *)(bits | s_decision_bit(attempt))) < 0)
        oq_warn("job %llu: no memory to remember that attempt %u decided; a later ack of that "
                "delivery may still change the job",
                (unsigned long long)job->id, attempt);
}

/* A job done, or starting a new generation, decided nothing yet. */
static void s_decisions_forget(oq_engine_t *self, const oq_eng_job_t *job)
{
    if (oq_idmap_size(self->decided))
        oq_idmap_remove(self->decided, job->id);
}

void oq_eng_job_free(oq_eng_job_t *job)
{
    if (job->state == OQ_ENG_FAILED || job->state == OQ_ENG_REVIEW)
        free(job->u.f.error);
    free(job);
}

/* Allocate a job for msg with the given id in queue q, held in the id map
   and still OQ_ENG_NEW, into *job_p. 0; 1 if the id is held already; -1 if
   memory runs out. Nothing is left behind unless it returns 0. */
int oq_eng_job_new(oq_engine_t *self, const oq_job_msg_t *msg, uint64_t id, oq_eng_queue_t *q,
                   oq_eng_type_t *type, int64_t timeout_ms, oq_eng_job_t **job_p)
{
    if (oq_eng_lane_make(self, q, type) < 0)
        return -1;
    oq_eng_job_t *job = calloc(1, oq_eng_job_bytes(msg->payload_len, msg->backoff_len));
    if (!job)
        return -1;
    job->id = id;
    job->queue_index = (uint16_t)q->index;
    job->type_index = (uint16_t)type->index;
    job->priority = (int16_t)msg->priority;
    job->max_tries = (uint16_t)(msg->has_max_tries ? msg->max_tries : self->config.max_tries);
    job->timeout_ms = (uint32_t)timeout_ms;
    job->backoff_len = (uint8_t)msg->backoff_len;
    job->payload_len = (uint32_t)msg->payload_len;
    if (msg->payload_len)
        memcpy(job->payload, msg->payload, msg->payload_len);
    if (msg->backoff_len)
        memcpy(oq_eng_job_backoff(job), msg->backoff_ms, msg->backoff_len * sizeof(int64_t));
    oq_link_clear(&job->link);
    int rc = oq_idset_insert(self->jobs, job);
    if (rc != 0) {
        oq_eng_job_free(job);
        return rc;
    }
    self->bytes += oq_engine_job_cost(job->payload_len, job->backoff_len);
    *job_p = job;
    return 0;
}

void oq_eng_job_unmake(oq_engine_t *self, oq_eng_job_t *job)
{
    assert(job->state == OQ_ENG_NEW);
    oq_idset_remove(self->jobs, job->id);
    self->bytes -= oq_engine_job_cost(job->payload_len, job->backoff_len);
    oq_eng_job_free(job);
}

/* Leave the current state: undo its list, heap and lease memberships. */
static void s_leave(oq_engine_t *self, oq_eng_job_t *job)
{
    oq_eng_queue_t *q = oq_eng_job_queue(self, job);
    switch ((oq_eng_state_t)job->state) {
    case OQ_ENG_READY:
        oq_eng_ready_remove(self, job);
        if (oq_list_empty(&q->lanes))
            oq_list_remove(&q->active);
        /* The timer shares this storage and must read as "not in the heap". */
        memset(&job->u, 0, sizeof job->u);
        break;
    case OQ_ENG_DELAYED:
        oq_heap_remove(self->timers, &job->u.t.timer);
        break;
    case OQ_ENG_LEASED:
        oq_heap_remove(self->timers, &job->u.t.timer);
        oq_list_remove(&job->link);
        job->u.t.worker->leased--;
        job->u.t.worker = NULL;
        break;
    case OQ_ENG_WAITING:
        oq_overlap_unwait(self->overlap, job->id, &job->link);
        break;
    case OQ_ENG_FAILED:
    case OQ_ENG_REVIEW:
        oq_list_remove(&job->link);
        free(job->u.f.error);
        /* The timer shares this storage and must read as "not in the heap". */
        memset(&job->u, 0, sizeof job->u);
        break;
    case OQ_ENG_NEW:
        return;
    case OQ_ENG_DONE:
        assert(!"a done job has no state to leave");
    }
    q->count[job->state]--;
}

static bool s_legal(oq_eng_state_t from, oq_eng_state_t to, oq_job_event_t event)
{
    if (event == OQ_EVENT_FORGOTTEN)
        return from == OQ_ENG_FAILED && to == OQ_ENG_DONE;
    if (event == OQ_EVENT_CANCELLED)
        return (from == OQ_ENG_READY || from == OQ_ENG_DELAYED || from == OQ_ENG_WAITING) &&
               to == OQ_ENG_DONE;
    if (event == OQ_EVENT_WAITING) /* for its overlap key, and back when it comes free */
        return (from == OQ_ENG_READY && to == OQ_ENG_WAITING) ||
               (from == OQ_ENG_WAITING && to == OQ_ENG_READY);
    if (event == OQ_EVENT_RESTORED && from != OQ_ENG_NEW) {
        /* Replay sees no leases: a job handed out before the stop is ready,
           and its retry, failure or review is replayed from there. */
        if (to == OQ_ENG_DONE)
            return from == OQ_ENG_READY || from == OQ_ENG_DELAYED || from == OQ_ENG_FAILED ||
                   from == OQ_ENG_REVIEW;
        if (from == OQ_ENG_REVIEW) /* a resolution */
            return to == OQ_ENG_READY || to == OQ_ENG_FAILED;
        return (from == OQ_ENG_READY || from == OQ_ENG_DELAYED) &&
               (to == OQ_ENG_READY || to == OQ_ENG_DELAYED || to == OQ_ENG_FAILED ||
                to == OQ_ENG_REVIEW);
    }
    switch (from) {
    case OQ_ENG_NEW:
        return to == OQ_ENG_READY || to == OQ_ENG_DELAYED;
    case OQ_ENG_READY:
        return to == OQ_ENG_LEASED || to == OQ_ENG_DONE;
    case OQ_ENG_DELAYED:
        return to == OQ_ENG_READY || to == OQ_ENG_DONE;
    case OQ_ENG_LEASED:
        return to == OQ_ENG_READY || to == OQ_ENG_DELAYED || to == OQ_ENG_FAILED ||
               to == OQ_ENG_REVIEW || to == OQ_ENG_DONE;
    case OQ_ENG_FAILED:
        return to == OQ_ENG_DONE || to == OQ_ENG_READY; /* done by a late ok; ready by a requeue */
    case OQ_ENG_REVIEW:
        /* By a resolution; a late ok is resolved as done (plainly done only
           when memory for remembering that ran out). */
        if (to == OQ_ENG_DONE)
            return event == OQ_EVENT_RESOLVED || event == OQ_EVENT_DONE;
        return event == OQ_EVENT_RESOLVED && (to == OQ_ENG_READY || to == OQ_ENG_FAILED);
    case OQ_ENG_WAITING:
        /* By the late ok of an earlier delivery, as from ready. */
        return to == OQ_ENG_DONE && event == OQ_EVENT_DONE;
    case OQ_ENG_DONE:
        return false;
    }
    return false;
}

bool oq_engine_asked(oq_job_event_t event)
{
    return event == OQ_EVENT_DISPATCHED || event == OQ_EVENT_REQUEUED ||
           event == OQ_EVENT_FORGOTTEN || event == OQ_EVENT_CANCELLED || event == OQ_EVENT_RESOLVED;
}

/* What happened before a change is undone. Hooks report what already
   happened; a record the observer cannot keep does not change that. */
void oq_eng_notify(oq_engine_t *self, oq_job_event_t event, const oq_eng_job_t *job,
                   const oq_job_msg_t *dispatch)
{
    if (!self->hooks.changed || event == OQ_EVENT_RESTORED || event == OQ_EVENT_WAITING)
        return;
    oq_job_view_t view;
    oq_eng_job_view(self, job, &view);
    if (event == OQ_EVENT_RESOLVED)
        view.resolution = self->resolving;
    /* A failure is the observer's to note (the journal turns unhealthy). */
    (void)self->hooks.changed(self->hooks.ctx, event, &view, dispatch);
}

/* Report an asked change before it is made, with the job as it will be
   after it: 0, or -1 if the observer cannot record it. */
static int s_report_ahead(oq_engine_t *self, const oq_eng_job_t *job, oq_eng_state_t to,
                          oq_job_event_t event, const oq_eng_enter_t *how)
{
    if (!self->hooks.changed)
        return 0;
    oq_job_view_t view;
    oq_eng_job_view(self, job, &view);
    view.state = (oq_job_state_t)to;
    if (to == OQ_ENG_DELAYED) {
        int64_t left_ms = how->until_ms - oq_eng_now(self);
        view.not_before_ms = oq_clock_wall_ms(self->clock) + (left_ms > 0 ? left_ms : 0);
    }
    if (to == OQ_ENG_FAILED) {
        view.error = how->error;
        view.failed_at_ms = how->failed_at_ms ? how->failed_at_ms : oq_clock_wall_ms(self->clock);
    }
    if (event == OQ_EVENT_RESOLVED)
        view.resolution = self->resolving;
    return self->hooks.changed(self->hooks.ctx, event, &view, how ? how->dispatch : NULL);
}

/* Live: the job may still run, and so holds its unique key. */
static bool s_live(oq_eng_state_t state)
{
    return state == OQ_ENG_READY || state == OQ_ENG_DELAYED || state == OQ_ENG_LEASED ||
           state == OQ_ENG_WAITING;
}

/* The keys' side of job's change to `to`, once it is sure to happen: the
   unique key is let go when the job stops being live (its window may hold
   it on); the overlap key when its lease ends. Returns the job to wake:
   the one that waited longest for the overlap key, if the key is free now
   (also when a job of the key leaves the ready list without taking it),
   else NULL. */
static oq_eng_job_t *s_keys_leave(oq_engine_t *self, const oq_eng_job_t *job, oq_eng_state_t to)
{
    oq_eng_state_t from = (oq_eng_state_t)job->state;
    if (oq_unique_live_count(self->unique) && s_live(from) && !s_live(to))
        oq_unique_release(self->unique, job->id, oq_clock_wall_ms(self->clock));
    if (!oq_overlap_jobs(self->overlap))
        return NULL;
    oq_link_t *woken = NULL;
    if (from == OQ_ENG_LEASED)
        woken = oq_overlap_release(self->overlap, job->id);
    else if (from == OQ_ENG_READY && to != OQ_ENG_LEASED && to != OQ_ENG_WAITING)
        woken = oq_overlap_wake(self->overlap, job->id);
    return woken ? oq_container_of(woken, oq_eng_job_t, link) : NULL;
}

/* A job whose overlap key came free: ready again, in front of its band
   (it was at the head when it began to wait). */
static void s_wake(oq_engine_t *self, oq_eng_job_t *woken)
{
    if (!woken)
        return;
    oq_eng_enter_t how = {.in_front = true};
    oq_eng_transition(self, woken, OQ_ENG_READY, OQ_EVENT_WAITING, &how);
}

int oq_eng_transition(oq_engine_t *self, oq_eng_job_t *job, oq_eng_state_t to, oq_job_event_t event,
                      oq_eng_enter_t *how)
{
    assert(s_legal((oq_eng_state_t)job->state, to, event));
    /* For its batch and its chain, told after the move (the job may be
       freed by then). */
    uint64_t id = job->id;
    oq_eng_state_t from = (oq_eng_state_t)job->state;
    bool asked = oq_engine_asked(event);
    if (asked && s_report_ahead(self, job, to, event, how) < 0)
        return -1;
    if (to == OQ_ENG_DONE ||
        (to == OQ_ENG_READY && (job->state == OQ_ENG_FAILED || job->state == OQ_ENG_REVIEW)))
        s_decisions_forget(self, job); /* done, or a requeue or resolve: a fresh budget */
    oq_eng_job_t *woken = s_keys_leave(self, job, to);
    s_leave(self, job);
    oq_eng_queue_t *q = oq_eng_job_queue(self, job);
    job->state = (uint8_t)to;
    switch (to) {
    case OQ_ENG_READY:
        if (oq_list_empty(&q->lanes))
            oq_list_push_back(&self->active, &q->active);
        oq_eng_ready_insert(self, q, job, how && how->in_front);
        break;
    case OQ_ENG_DELAYED:
        if (oq_heap_push(self->timers, &job->u.t.timer, how->until_ms) < 0) {
            /* Out of memory for the heap: make it ready now rather than lose it. */
            oq_error("job %llu: no memory for its timer, making it ready now",
                     (unsigned long long)job->id);
            job->state = OQ_ENG_READY;
            if (oq_list_empty(&q->lanes))
                oq_list_push_back(&self->active, &q->active);
            oq_eng_ready_insert(self, q, job, false);
        }
        break;
    case OQ_ENG_WAITING:
        oq_overlap_wait(self->overlap, job->id, &job->link);
        break;
    case OQ_ENG_LEASED:
        job->u.t.worker = how->worker;
        oq_list_push_back(&how->worker->leases, &job->link);
        how->worker->leased++;
        oq_overlap_hold(self->overlap, job->id);
        if (oq_heap_push(self->timers, &job->u.t.timer, how->until_ms) < 0)
            oq_error("job %llu: no memory for its lease timer; it ends with its worker",
                     (unsigned long long)job->id);
        break;
    case OQ_ENG_FAILED:
        if (event != OQ_EVENT_RESTORED)
            oq_eng_job_type(self, job)->failed++;
        job->u.f.error = how->error;
        job->u.f.failed_at_ms =
            how->failed_at_ms ? how->failed_at_ms : oq_clock_wall_ms(self->clock);
        oq_list_push_back(&q->failed, &job->link);
        break;
    case OQ_ENG_REVIEW:
        job->u.f.error = how->error;
        job->u.f.failed_at_ms =
            how->failed_at_ms ? how->failed_at_ms : oq_clock_wall_ms(self->clock);
        oq_list_push_back(&q->review, &job->link);
        break;
    case OQ_ENG_DONE:
        if (!asked)
            oq_eng_notify(self, event, job, NULL);
        if (event == OQ_EVENT_DONE || event == OQ_EVENT_RESOLVED) /* a review resolved done */
            q->done++;
        if (event == OQ_EVENT_CANCELLED)
            q->cancelled++;
        if (event != OQ_EVENT_RESTORED)
            oq_eng_done_remember(self, job);
        oq_idset_remove(self->jobs, job->id);
        oq_overlap_remove(self->overlap, job->id);
        self->bytes -= oq_engine_job_cost(job->payload_len, job->backoff_len);
        oq_eng_job_free(job);
        s_wake(self, woken);
        if (self->batch_count)
            oq_eng_batch_note(self, id, from, to, event);
        if (oq_idmap_size(self->chains))
            oq_eng_chain_note(self, id, from, to, event);
        return 0;
    case OQ_ENG_NEW:
        assert(!"no way back to new");
    }
    q->count[job->state]++;
    if (event != OQ_EVENT_LEASED && !asked)
        oq_eng_notify(self, event, job, how ? how->dispatch : NULL);
    s_wake(self, woken);
    if (self->batch_count)
        oq_eng_batch_note(self, id, from, to, event);
    if (oq_idmap_size(self->chains))
        oq_eng_chain_note(self, id, from, to, event);
    return 0;
}

char *oq_eng_format(const char *format, ...)
{
    char text[OQ_MAX_ERROR_LEN + 1];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    return strdup(text);
}

void oq_eng_fail(oq_engine_t *self, oq_eng_job_t *job, char *error)
{
    oq_info("job %llu type=%s failed on attempt %u of %u: %s", (unsigned long long)job->id,
            oq_eng_job_type(self, job)->name, job->attempt, job->max_tries, error ? error : "");
    oq_eng_enter_t how = {.error = error};
    oq_eng_transition(self, job, OQ_ENG_FAILED, OQ_EVENT_FAILED, &how);
}

/* The handler could not know the outcome: hold the job for a person. */
void oq_eng_review(oq_engine_t *self, oq_eng_job_t *job, char *reason)
{
    oq_info("job %llu type=%s needs review (attempt %u of %u): %s", (unsigned long long)job->id,
            oq_eng_job_type(self, job)->name, job->attempt, job->max_tries, reason ? reason : "");
    oq_eng_enter_t how = {.error = reason};
    oq_eng_transition(self, job, OQ_ENG_REVIEW, OQ_EVENT_REVIEW, &how);
}

int oq_eng_resolve(oq_engine_t *self, oq_eng_job_t *job, oq_review_action_t action,
                   const char *note, int64_t resolved_at_ms, bool restoring)
{
    assert(job->state == OQ_ENG_REVIEW);
    note = note ? note : "";
    oq_resolution_t r = {
        .id = job->id,
        .action = action,
        .attempt = job->attempt,
        .reviewed_at_ms = job->u.f.failed_at_ms,
        .resolved_at_ms = resolved_at_ms,
        .type = oq_eng_job_type(self, job)->name,
        .queue = oq_eng_job_queue(self, job)->name,
        .reason = job->u.f.error,
        .note = note,
    };
    /* The job's reason is freed as it leaves review: the log gets a copy. */
    char *reason = strdup(r.reason ? r.reason : "");
    char *error = NULL;
    if (reason && action == OQ_REVIEW_FAIL)
        error = oq_eng_format("resolved as failed after review%s%.*s (the handler's reason: %s)",
                              note[0] ? ": " : "", OQ_MAX_REVIEW_NOTE_LEN, note, reason);
    if (!reason || (action == OQ_REVIEW_FAIL && !error)) {
        free(reason);
        return -1;
    }
    oq_job_event_t event = restoring ? OQ_EVENT_RESTORED : OQ_EVENT_RESOLVED;
    uint32_t attempt = job->attempt, gen = job->gen;
    uint8_t returned = job->returned;
    self->resolving = &r;
    int rc = 0;
    switch (action) {
    case OQ_REVIEW_DONE:
        rc = oq_eng_transition(self, job, OQ_ENG_DONE, event, NULL);
        break;
    case OQ_REVIEW_RETRY:
        /* As a requeue: a fresh budget, and the tokens of the job's earlier
           deliveries die. */
        job->attempt = 0;
        job->gen++;
        job->returned = false;
        rc = oq_eng_transition(self, job, OQ_ENG_READY, event, NULL);
        break;
    case OQ_REVIEW_FAIL: {
        oq_eng_enter_t how = {.error = error, .failed_at_ms = resolved_at_ms};
        rc = oq_eng_transition(self, job, OQ_ENG_FAILED, event, &how);
        break;
    }
    }
    self->resolving = NULL;
    if (rc < 0) {
        /* Not recorded, so not taken: the job is in review as it was. */
        job->attempt = attempt;
        job->gen = gen;
        job->returned = returned;
        free(error);
        free(reason);
        return -1;
    }
    oq_info("job %llu type=%s resolved after review: %s%s%s", (unsigned long long)r.id, r.type,
            oq_proto_review_action_name(action), note[0] ? ": " : "", note);
    r.reason = reason;
    const oq_resolution_t *kept = oq_review_log_add(self->reviews, &r);
    free(reason);
    if (!kept && !restoring)
        oq_warn("job %llu: out of memory remembering its resolution; it was carried out and "
                "recorded",
                (unsigned long long)r.id);
    return kept || !restoring ? 0 : -1;
}

/* A lease ended without an ack (ran out, or the worker is gone). */
void oq_eng_lease_end(oq_engine_t *self, oq_eng_job_t *job, const char *why)
{
    if (job->attempt >= job->max_tries) {
        oq_eng_fail(self, job,
                    oq_eng_format("%s on attempt %u of %u", why, job->attempt, job->max_tries));
        return;
    }
    job->returned = true;
    oq_eng_enter_t how = {.in_front = true};
    oq_eng_transition(self, job, OQ_ENG_READY, OQ_EVENT_RETURNED, &how);
}

void oq_eng_keys_take(oq_engine_t *self, const oq_eng_job_t *job, oq_str_t unique_key,
                      int64_t unique_until_ms, oq_str_t overlap_key)
{
    if (unique_key.len && oq_unique_take(self->unique, unique_key.ptr, unique_key.len, job->id,
                                         unique_until_ms, oq_clock_wall_ms(self->clock)) < 0)
        oq_warn("job %llu: its unique key %.*s is not kept (%zu keys held, the limit is %d, or "
                "memory ran out): a dispatch with it queues another job",
                (unsigned long long)job->id, (int)unique_key.len, unique_key.ptr,
                oq_unique_count(self->unique), OQ_MAX_UNIQUE_KEYS);
    oq_eng_memory_note(self);
    if (overlap_key.len &&
        oq_overlap_add(self->overlap, job->id, overlap_key.ptr, overlap_key.len) < 0)
        oq_warn("job %llu: no memory for its overlap key %.*s: it may run beside another job "
                "of the key",
                (unsigned long long)job->id, (int)overlap_key.len, overlap_key.ptr);
}

void oq_eng_keys_drop(oq_engine_t *self, const oq_eng_job_t *job)
{
    oq_unique_forget(self->unique, job->id);
    oq_overlap_remove(self->overlap, job->id);
}

void oq_eng_job_view(const oq_engine_t *self, const oq_eng_job_t *job, oq_job_view_t *v)
{
    v->id = job->id;
    /* Outside the pump a job waiting for its overlap key is ready. */
    v->state = job->state == OQ_ENG_WAITING ? OQ_STATE_READY : (oq_job_state_t)job->state;
    /* Looked up only while some job has a key: views are made for every
       record the journal writes. */
    v->unique_until_ms = 0;
    v->unique_key = oq_unique_live_count(self->unique)
                        ? oq_unique_key_of(self->unique, job->id, &v->unique_until_ms)
                        : NULL;
    v->overlap_key =
        oq_overlap_jobs(self->overlap) ? oq_overlap_key_of(self->overlap, job->id) : NULL;
    v->type = oq_eng_job_type(self, job)->name;
    v->queue = oq_eng_job_queue(self, job)->name;
    v->payload = job->payload;
    v->payload_len = job->payload_len;
    v->attempt = job->attempt;
    v->generation = job->gen;
    v->max_tries = job->max_tries;
    v->timeout_ms = job->timeout_ms;
    v->backoff_ms = oq_eng_job_backoff(job);
    v->backoff_len = job->backoff_len;
    v->priority = job->priority;
    /* While leased, the token its worker got; otherwise the keyless one. */
    const oq_worker_t *holder = job->state == OQ_ENG_LEASED ? job->u.t.worker : NULL;
    v->lease = job->attempt ? oq_eng_token(self, job->id, job->attempt, job->gen,
                                           holder && holder->has_key ? holder->curve_key : NULL)
                            : 0;
    bool failed = job->state == OQ_ENG_FAILED || job->state == OQ_ENG_REVIEW;
    v->error = failed ? job->u.f.error : NULL;
    v->failed_at_ms = failed ? job->u.f.failed_at_ms : 0;
    v->resolution = NULL;
    v->not_before_ms = 0;
    if (job->state == OQ_ENG_DELAYED) {
        /* The timer runs on the monotonic clock; outside the process only
           wall-clock time means anything. */
        int64_t left_ms = oq_heap_deadline(self->timers, &job->u.t.timer) - oq_eng_now(self);
        v->not_before_ms = oq_clock_wall_ms(self->clock) + (left_ms > 0 ? left_ms : 0);
    }
}
