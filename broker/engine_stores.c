/*  engine_stores.c: the failed store and the review store (pages in
    failure order, requeue, resolve) with the operator commands on them and
    on waiting jobs (forget, flush, prune by age, requeue all, cancel, clear
    a queue), and
    the ring of recently done jobs. */
#include "engine_stores.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_jobs.h"
#include "engine_queues.h"

size_t oq_engine_failed_each(oq_engine_t *self, const char *queue, size_t limit,
                             void (*fn)(void *ctx, const oq_job_view_t *job), void *ctx)
{
    size_t total = 0;
    for (size_t i = 0; i < self->queue_count; i++) {
        oq_eng_queue_t *q = self->queues[i];
        if (queue && strcmp(queue, q->name) != 0)
            continue;
        for (oq_link_t *n = q->failed.next; n != &q->failed; n = n->next) {
            if (total < limit) {
                oq_job_view_t view;
                oq_eng_job_view(self, oq_container_of(n, oq_eng_job_t, link), &view);
                fn(ctx, &view);
            }
            total++;
        }
    }
    return total;
}

/* The failed store's order: failure time, then id (ids are unique, so
   the order is total and a cursor never lands between equals). Failure
   times come from the wall clock and are journaled, so the order is the
   same after a restart or a compaction. */
static bool s_failed_before(int64_t a_at, uint64_t a_id, int64_t b_at, uint64_t b_id)
{
    return a_at < b_at || (a_at == b_at && a_id < b_id);
}

static bool s_job_failed_before(const oq_eng_job_t *a, const oq_eng_job_t *b)
{
    return s_failed_before(a->u.f.failed_at_ms, a->id, b->u.f.failed_at_ms, b->id);
}

/* The page is chosen in one pass over the failed jobs: a max-heap (by the
   order above) of the limit first jobs after the cursor, then sorted.
   O(n log limit), with n the failed jobs, for any page. */
static void s_sift_down(const oq_eng_job_t **heap, size_t n, size_t i)
{
    for (;;) {
        size_t big = i, l = 2 * i + 1, r = l + 1;
        if (l < n && s_job_failed_before(heap[big], heap[l]))
            big = l;
        if (r < n && s_job_failed_before(heap[big], heap[r]))
            big = r;
        if (big == i)
            return;
        const oq_eng_job_t *t = heap[i];
        heap[i] = heap[big];
        heap[big] = t;
        i = big;
    }
}

static void s_sift_up(const oq_eng_job_t **heap, size_t i)
{
    while (i > 0 && s_job_failed_before(heap[(i - 1) / 2], heap[i])) {
        const oq_eng_job_t *t = heap[i];
        heap[i] = heap[(i - 1) / 2];
        heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

int oq_engine_failed_cursor(const oq_engine_t *self, uint64_t id, oq_failed_cursor_t *cursor)
{
    const oq_eng_job_t *job = oq_idset_get(self->jobs, id);
    if (!job || (job->state != OQ_ENG_FAILED && job->state != OQ_ENG_REVIEW))
        return -1;
    cursor->failed_at_ms = job->u.f.failed_at_ms;
    cursor->id = job->id;
    return 0;
}

/* A page of the failed store (review false) or of the review store, in
   the order above (for the review store: the time the job went there). */
static size_t s_store_page(oq_engine_t *self, bool review, const char *queue,
                           const oq_failed_cursor_t *after, size_t limit,
                           void (*fn)(void *ctx, const oq_job_view_t *job), void *ctx, bool *more)
{
    assert(limit >= 1 && limit <= OQ_MAX_FAILED_LIST);
    const oq_eng_job_t *heap[OQ_MAX_FAILED_LIST];
    size_t n = 0, total = 0, above = 0;
    for (size_t i = 0; i < self->queue_count; i++) {
        oq_eng_queue_t *q = self->queues[i];
        if (queue && strcmp(queue, q->name) != 0)
            continue;
        oq_link_t *list = review ? &q->review : &q->failed;
        for (oq_link_t *l = list->next; l != list; l = l->next) {
            const oq_eng_job_t *job = oq_container_of(l, oq_eng_job_t, link);
            total++;
            if (after &&
                !s_failed_before(after->failed_at_ms, after->id, job->u.f.failed_at_ms, job->id))
                continue;
            above++;
            if (n < limit) {
                heap[n] = job;
                s_sift_up(heap, n++);
            } else if (s_job_failed_before(job, heap[0])) {
                heap[0] = job;
                s_sift_down(heap, n, 0);
            }
        }
    }
    /* Heapsort in place: oldest first. */
    for (size_t end = n; end > 1; end--) {
        const oq_eng_job_t *t = heap[0];
        heap[0] = heap[end - 1];
        heap[end - 1] = t;
        s_sift_down(heap, end - 1, 0);
    }
    for (size_t i = 0; i < n; i++) {
        oq_job_view_t view;
        oq_eng_job_view(self, heap[i], &view);
        fn(ctx, &view);
    }
    *more = above > n;
    return total;
}

size_t oq_engine_failed_page(oq_engine_t *self, const char *queue, const oq_failed_cursor_t *after,
                             size_t limit, void (*fn)(void *ctx, const oq_job_view_t *job),
                             void *ctx, bool *more)
{
    return s_store_page(self, false, queue, after, limit, fn, ctx, more);
}

size_t oq_engine_review_page(oq_engine_t *self, const char *queue, const oq_failed_cursor_t *after,
                             size_t limit, void (*fn)(void *ctx, const oq_job_view_t *job),
                             void *ctx, bool *more)
{
    return s_store_page(self, true, queue, after, limit, fn, ctx, more);
}

int oq_engine_review_resolve(oq_engine_t *self, uint64_t id, oq_review_action_t action,
                             const char *note, oq_refusal_t *why, char *reason, size_t reason_len)
{
    oq_eng_job_t *job = oq_idset_get(self->jobs, id);
    if (job && job->state == OQ_ENG_REVIEW) {
        if (oq_eng_resolve(self, job, action, note ? note : "", oq_clock_wall_ms(self->clock),
                           false) < 0) {
            *why = OQ_REFUSED_UNRECORDED;
            snprintf(reason, reason_len,
                     "the resolution of job %llu could not be recorded (out of memory); nothing "
                     "changed, try again later",
                     (unsigned long long)id);
            return -1;
        }
        return 0;
    }
    const oq_resolution_t *r = oq_review_log_find(self->reviews, id);
    *why = job || r ? OQ_REFUSED_STATE : OQ_REFUSED_UNKNOWN;
    if (r)
        snprintf(
            reason, reason_len, "job %llu is not in review: it was resolved already (%s%s%s)%s%s",
            (unsigned long long)id, oq_proto_review_action_name(r->action), r->note[0] ? ": " : "",
            r->note, job ? "; it is " : "", job ? oq_eng_state_names[job->state] : "");
    else
        snprintf(reason, reason_len,
                 "job %llu is not in review and has no resolution on record%s%s",
                 (unsigned long long)id, job ? "; it is " : " (the broker does not hold it)",
                 job ? oq_eng_state_names[job->state] : "");
    return -1;
}

const oq_resolution_t *oq_engine_review_resolution(const oq_engine_t *self, uint64_t id)
{
    return oq_review_log_find(self->reviews, id);
}

void oq_engine_review_each_resolved(const oq_engine_t *self,
                                    void (*fn)(void *ctx, const oq_resolution_t *r), void *ctx)
{
    oq_review_log_each(self->reviews, fn, ctx);
}

size_t oq_engine_review_resolved_count(const oq_engine_t *self)
{
    return oq_review_log_count(self->reviews);
}

/* Why an operator's change was refused although the job was in the right
   state: its record could not be kept. */
static int s_unrecorded(uint64_t id, const char *what, oq_refusal_t *why, char *reason,
                        size_t reason_len)
{
    *why = OQ_REFUSED_UNRECORDED;
    snprintf(reason, reason_len,
             "job %llu could not be %s: its record could not be kept for a restart (out of "
             "memory); nothing changed, try again later",
             (unsigned long long)id, what);
    return -1;
}

/* A failed job back to ready with a fresh budget. A new generation: the
   tokens of the job's earlier deliveries die. 0, or -1 if the requeue
   could not be recorded (the job stays failed). */
static int s_requeue(oq_engine_t *self, oq_eng_job_t *job)
{
    uint32_t attempt = job->attempt, gen = job->gen;
    uint8_t returned = job->returned;
    job->attempt = 0;
    job->gen++;
    job->returned = false;
    if (oq_eng_transition(self, job, OQ_ENG_READY, OQ_EVENT_REQUEUED, NULL) < 0) {
        job->attempt = attempt;
        job->gen = gen;
        job->returned = returned;
        return -1;
    }
    return 0;
}

int oq_engine_requeue(oq_engine_t *self, uint64_t id, oq_refusal_t *why, char *reason,
                      size_t reason_len)
{
    oq_eng_job_t *job = oq_idset_get(self->jobs, id);
    if (!job || job->state != OQ_ENG_FAILED) {
        *why = job ? OQ_REFUSED_STATE : OQ_REFUSED_UNKNOWN;
        snprintf(reason, reason_len, "job %llu is not in the failed store%s",
                 (unsigned long long)id, job ? "" : " (it is done, or the broker never had it)");
        return -1;
    }
    /* A fresh budget: the operator decided the cause is fixed. */
    if (s_requeue(self, job) < 0)
        return s_unrecorded(id, "requeued", why, reason, reason_len);
    return 0;
}

/* Why a job is refused by a command that wants another state: the state,
   and for a leased job why that matters. */
static int s_refuse(const oq_eng_job_t *job, uint64_t id, const char *wanted, oq_refusal_t *why,
                    char *reason, size_t reason_len)
{
    if (!job) {
        *why = OQ_REFUSED_UNKNOWN;
        snprintf(reason, reason_len,
                 "job %llu is unknown to the broker: it is done (or was forgotten or "
                 "cancelled), or was never dispatched",
                 (unsigned long long)id);
        return -1;
    }
    *why = OQ_REFUSED_STATE;
    switch ((oq_eng_state_t)job->state) {
    case OQ_ENG_LEASED:
        snprintf(reason, reason_len,
                 "job %llu is leased (attempt %u of %u is running on a worker): its effect may "
                 "be under way, so it cannot be %s; wait for its outcome",
                 (unsigned long long)id, job->attempt, job->max_tries, wanted);
        break;
    case OQ_ENG_FAILED:
        snprintf(reason, reason_len,
                 "job %llu is failed: it cannot be %s (use 'onceq failed forget %llu' to delete "
                 "it, or 'onceq failed retry %llu' to run it again)",
                 (unsigned long long)id, wanted, (unsigned long long)id, (unsigned long long)id);
        break;
    default:
        snprintf(reason, reason_len, "job %llu is %s, not in the failed store: it cannot be %s",
                 (unsigned long long)id, oq_eng_state_names[job->state], wanted);
        break;
    }
    return -1;
}

int oq_engine_forget(oq_engine_t *self, uint64_t id, oq_refusal_t *why, char *reason,
                     size_t reason_len)
{
    oq_eng_job_t *job = oq_idset_get(self->jobs, id);
    if (!job || job->state != OQ_ENG_FAILED)
        return s_refuse(job, id, "forgotten", why, reason, reason_len);
    if (oq_eng_transition(self, job, OQ_ENG_DONE, OQ_EVENT_FORGOTTEN, NULL) < 0)
        return s_unrecorded(id, "forgotten", why, reason, reason_len);
    return 0;
}

/* Apply fn to every failed job of queue (NULL: all), oldest first within
   each queue; fn takes the job out of the failed list, or fails (-1) and
   the walk stops there. 0, or -1; *count gets the jobs done. */
static int s_each_failed(oq_engine_t *self, const char *queue,
                         int (*fn)(oq_engine_t *self, oq_eng_job_t *job), uint64_t *count)
{
    *count = 0;
    for (size_t i = 0; i < self->queue_count; i++) {
        oq_eng_queue_t *q = self->queues[i];
        if (queue && strcmp(queue, q->name) != 0)
            continue;
        while (!oq_list_empty(&q->failed)) {
            if (fn(self, oq_container_of(q->failed.next, oq_eng_job_t, link)) < 0)
                return -1;
            (*count)++;
        }
    }
    return 0;
}

static int s_forget_one(oq_engine_t *self, oq_eng_job_t *job)
{
    return oq_eng_transition(self, job, OQ_ENG_DONE, OQ_EVENT_FORGOTTEN, NULL);
}

int oq_engine_flush_failed(oq_engine_t *self, const char *queue, uint64_t *count)
{
    return s_each_failed(self, queue, s_forget_one, count);
}

int oq_engine_requeue_all(oq_engine_t *self, const char *queue, uint64_t *count)
{
    return s_each_failed(self, queue, s_requeue, count);
}

/* Pruning by age. A queue's failed list is mostly in failure order, but
   not always (a snapshot restores failed jobs in its own order, and the
   wall clock can step back), so the walk does not stop at the first young
   job: it reads every failed job of the queues it covers, as a page of the
   store does. What it changes is bounded by limit: each deletion costs a
   journal record, the job's memory and the answers to its waiters. It
   stops at the first due job past the limit, so *more is exact, and the
   next call starts again from the heads of the lists, where the oldest
   jobs mostly are. */
int oq_engine_prune_failed(oq_engine_t *self, const char *queue, int64_t older_than_ms,
                           size_t limit, uint64_t *count, bool *more)
{
    assert(limit >= 1 && limit <= OQ_MAX_PRUNE_PER_CALL);
    assert(older_than_ms >= 0);
    int64_t cutoff_ms = oq_clock_wall_ms(self->clock) - older_than_ms;
    *count = 0;
    *more = false;
    for (size_t i = 0; i < self->queue_count; i++) {
        oq_eng_queue_t *q = self->queues[i];
        if (queue && strcmp(queue, q->name) != 0)
            continue;
        for (oq_link_t *l = q->failed.next, *next; l != &q->failed; l = next) {
            next = l->next; /* the deletion unlinks l */
            oq_eng_job_t *job = oq_container_of(l, oq_eng_job_t, link);
            if (job->u.f.failed_at_ms >= cutoff_ms)
                continue;
            if (*count == limit) {
                *more = true;
                return 0;
            }
            if (s_forget_one(self, job) < 0)
                return -1;
            (*count)++;
        }
    }
    return 0;
}

/* A job that has not started: ready, delayed, or waiting for its overlap
   key. Only those are cancelled; a leased one may be running its effect. */
static bool s_cancellable(const oq_eng_job_t *job)
{
    return job->state == OQ_ENG_READY || job->state == OQ_ENG_DELAYED ||
           job->state == OQ_ENG_WAITING;
}

static int s_cancel_one(oq_engine_t *self, oq_eng_job_t *job)
{
    return oq_eng_transition(self, job, OQ_ENG_DONE, OQ_EVENT_CANCELLED, NULL);
}

int oq_engine_cancel(oq_engine_t *self, uint64_t id, oq_refusal_t *why, char *reason,
                     size_t reason_len)
{
    oq_eng_job_t *job = oq_idset_get(self->jobs, id);
    if (!job || !s_cancellable(job))
        return s_refuse(job, id, "cancelled", why, reason, reason_len);
    if (s_cancel_one(self, job) < 0)
        return s_unrecorded(id, "cancelled", why, reason, reason_len);
    return 0;
}

/* The jobs a clear picks, by id: gathered first and cancelled after, as
   a cancel changes the lists being walked (a ready job's cancel can wake
   a waiting one of its overlap key into ready, and the heap moves). */
typedef struct {
    uint32_t queue_index;
    uint64_t ids[OQ_MAX_CLEAR_PER_CALL];
    size_t n, cap;
} s_clear_pick_t;

static void s_pick(s_clear_pick_t *pick, const oq_eng_job_t *job)
{
    if (pick->n < pick->cap && job->queue_index == pick->queue_index && s_cancellable(job))
        pick->ids[pick->n++] = job->id;
}

static void s_pick_waiting(void *ctx, oq_link_t *node)
{
    s_pick(ctx, oq_container_of(node, oq_eng_job_t, link));
}

/* Clearing a queue: cancel (as oq_engine_cancel, one journal record each)
   up to limit of its jobs that have not started, ready ones first (from
   its lanes), then those waiting for an overlap key, then delayed ones
   (from the deadline heap, which has no per-queue list: the walk reads
   the heap until it has its pick). Leased jobs are left to finish or fail.
   *more is exact: the queue's own counts say whether any such job is
   left. */
int oq_engine_clear(oq_engine_t *self, const char *queue, size_t limit, uint64_t *count, bool *more)
{
    assert(limit >= 1 && limit <= OQ_MAX_CLEAR_PER_CALL);
    *count = 0;
    *more = false;
    oq_eng_queue_t *q = oq_eng_queue_get(self, queue, false);
    if (!q)
        return 0; /* a queue the broker never had holds nothing to clear */
    s_clear_pick_t *pick = malloc(sizeof *pick);
    if (!pick)
        return -1;
    *pick = (s_clear_pick_t){.queue_index = q->index, .n = 0, .cap = limit};
    for (oq_link_t *l = q->lanes.next; l != &q->lanes && pick->n < pick->cap; l = l->next) {
        oq_eng_lane_t *lane = oq_container_of(l, oq_eng_lane_t, active);
        for (oq_link_t *j = lane->ready.next; j != &lane->ready && pick->n < pick->cap; j = j->next)
            s_pick(pick, oq_container_of(j, oq_eng_job_t, link));
    }
    if (q->count[OQ_ENG_WAITING] && pick->n < pick->cap)
        oq_overlap_each_waiting(self->overlap, s_pick_waiting, pick);
    for (size_t i = 0;
         i < oq_heap_size(self->timers) && q->count[OQ_ENG_DELAYED] && pick->n < pick->cap; i++)
        s_pick(pick, oq_container_of(oq_heap_at(self->timers, i), oq_eng_job_t, u.t.timer));
    int rc = 0;
    for (size_t i = 0; i < pick->n; i++) {
        oq_eng_job_t *job = oq_idset_get(self->jobs, pick->ids[i]);
        if (!job || !s_cancellable(job))
            continue;
        if (s_cancel_one(self, job) < 0) {
            rc = -1;
            break;
        }
        (*count)++;
    }
    free(pick);
    *more = q->count[OQ_ENG_READY] + q->count[OQ_ENG_DELAYED] + q->count[OQ_ENG_WAITING] > 0;
    return rc;
}

int64_t oq_engine_oldest_failed_ms(const oq_engine_t *self)
{
    int64_t oldest = 0;
    for (size_t i = 0; i < self->queue_count; i++) {
        const oq_eng_queue_t *q = self->queues[i];
        for (const oq_link_t *l = q->failed.next; l != &q->failed; l = l->next) {
            int64_t at = oq_container_of(l, const oq_eng_job_t, link)->u.f.failed_at_ms;
            if (oldest == 0 || at < oldest)
                oldest = at;
        }
    }
    return oldest;
}

void oq_eng_done_remember(oq_engine_t *self, const oq_eng_job_t *job)
{
    oq_eng_recent_t *slot = &self->recent[self->recent_next];
    if (slot->id)
        oq_idmap_remove(self->recent_index, slot->id);
    *slot = (oq_eng_recent_t){
        job->id, oq_eng_job_type(self, job), oq_eng_job_queue(self, job), job->attempt, job->gen,
        0};
    if (oq_idmap_put(self->recent_index, job->id, slot) < 0)
        slot->id = 0; /* out of memory: simply not remembered */
    self->recent_next = (self->recent_next + 1) % OQ_RECENT_DONE_JOBS;
}

oq_eng_recent_t *oq_eng_done_find(oq_engine_t *self, uint64_t id)
{
    return oq_idmap_get(self->recent_index, id);
}
