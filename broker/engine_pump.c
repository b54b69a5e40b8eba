/*  engine_pump.c: jobs going out to workers with credit.

    Routing. A worker may name the job types it handles and the queues it
    serves, in priority order; one that names none takes every job. A
    worker's pick walks its queues in order (or the queues with ready jobs,
    round-robin, if it named none), and in each queue looks only at the
    heads of the non-empty lanes (engine_queues.c) whose type is in the
    worker's type bitmap, taking the best head (higher priority, then
    earlier in the queue's order). So a pick costs O(its queues x the
    non-empty lanes of each), never a scan of the ready jobs, and a worker
    that found nothing is not asked again until some job becomes ready
    (ready_epoch). A job whose type no worker handles simply stays ready: it
    uses no try. */
#include "engine.h"

#include <assert.h>

#include "engine_jobs.h"
#include "engine_queues.h"
#include "engine_workers.h"

/* The job w should take from q next, or NULL: the first in the queue's
   order among the lanes of the types it handles (for a worker that named
   none, every type but those it handed back). */
static oq_eng_job_t *s_pick_in(const oq_engine_t *self, const oq_worker_t *w, oq_eng_queue_t *q)
{
    (void)self;
    oq_eng_job_t *best = NULL;
    for (oq_link_t *n = q->lanes.next; n != &q->lanes; n = n->next) {
        oq_eng_lane_t *lane = oq_container_of(n, oq_eng_lane_t, active);
        if (!oq_eng_worker_handles(w, lane->type))
            continue;
        oq_eng_job_t *head = oq_container_of(lane->ready.next, oq_eng_job_t, link);
        if (!best || oq_eng_ready_before(head, best))
            best = head;
    }
    return best;
}

/* The job w should take next: from its queues in their order, or, if it
   named none, from the queues with ready jobs round-robin. */
static oq_eng_job_t *s_pick(oq_engine_t *self, oq_worker_t *w)
{
    if (w->queues) {
        for (uint32_t i = 0; i < w->queue_count; i++) {
            oq_eng_job_t *job = s_pick_in(self, w, w->queues[i]);
            if (job)
                return job;
        }
        return NULL;
    }
    for (oq_link_t *n = self->active.next; n != &self->active; n = n->next) {
        oq_eng_queue_t *q = oq_container_of(n, oq_eng_queue_t, active);
        oq_eng_job_t *job = s_pick_in(self, w, q);
        if (job) {
            oq_list_remove(&q->active);
            oq_list_push_back(&self->active, &q->active);
            return job;
        }
    }
    return NULL;
}

/* One pump: oq_engine_pump sends each lease alone (one), oq_engine_pump_many
   what a worker is leased in the pump together (many). */
typedef struct {
    oq_engine_t *engine;
    oq_deliver_fn one;
    oq_deliver_many_fn many;
    void *ctx;
    oq_link_t sending; /* workers with leases not sent yet (oq_worker_t.sending) */
    size_t delivered;
} s_pump_t;

/* What a job counts against a "jobs" message's budget. */
static size_t s_cost(const oq_eng_job_t *job)
{
    return (size_t)job->payload_len + OQ_MAX_JOB_ENVELOPE_BYTES;
}

/* Send w's unsent leases: the last w->unsent of its leases, in lease
   order. If they cannot go out they never left the broker: not an
   attempt, not a redelivery; they are ready again in front, in their
   order, and the worker is dead: -1 then (w is freed), 0 otherwise. */
static int s_flush(s_pump_t *p, oq_worker_t *w)
{
    oq_engine_t *self = p->engine;
    uint32_t n = w->unsent;
    if (oq_list_linked(&w->sending))
        oq_list_remove(&w->sending);
    w->unsent = 0;
    w->unsent_bytes = 0;
    if (n == 0)
        return 0;
    assert(n <= OQ_MAX_JOBS_PER_MSG && n <= w->leased);
    oq_eng_job_t *jobs[OQ_MAX_JOBS_PER_MSG];
    oq_job_view_t views[OQ_MAX_JOBS_PER_MSG];
    oq_link_t *at = w->leases.prev;
    for (uint32_t i = n; i-- > 0; at = at->prev)
        jobs[i] = oq_container_of(at, oq_eng_job_t, link);
    for (uint32_t i = 0; i < n; i++)
        oq_eng_job_view(self, jobs[i], &views[i]);
    oq_worker_view_t wv;
    oq_eng_worker_view(self, w, &wv);
    int rc = p->many ? p->many(p->ctx, &wv, views, n) : p->one(p->ctx, &wv, &views[0]);
    if (rc < 0) {
        for (uint32_t i = n; i-- > 0;) {
            jobs[i]->attempt--;
            oq_eng_enter_t back = {.in_front = true};
            oq_eng_transition(self, jobs[i], OQ_ENG_READY, OQ_EVENT_RETURNED, &back);
        }
        oq_engine_worker_remove(self, &w, "unreachable");
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        /* Reported only now that the job is out: a lease the worker never
           got must not raise the attempt count a restart would restore. */
        oq_eng_notify(self, OQ_EVENT_LEASED, jobs[i], NULL);
        if (jobs[i]->returned)
            oq_eng_job_queue(self, jobs[i])->redelivered++;
        jobs[i]->returned = false;
        p->delivered++;
    }
    return 0;
}

static size_t s_pump(s_pump_t *p)
{
    oq_engine_t *self = p->engine;
    oq_list_init(&p->sending);
    /* Workers with credit but nothing they can take wait here until the pump ends. */
    oq_link_t idle;
    oq_list_init(&idle);
    while (!oq_list_empty(&self->waiting) && !oq_list_empty(&self->active)) {
        /* Round-robin over workers with credit: one job each per round. */
        oq_worker_t *w = oq_container_of(self->waiting.next, oq_worker_t, waiting);
        oq_list_remove(&w->waiting);
        oq_eng_job_t *job = w->idle_epoch == self->ready_epoch ? NULL : s_pick(self, w);
        /* A job whose overlap key another holds waits off the ready list,
           using no try, so the jobs behind it are not held up. */
        while (job && oq_overlap_jobs(self->overlap) &&
               oq_overlap_blocked(self->overlap, job->id)) {
            oq_eng_transition(self, job, OQ_ENG_WAITING, OQ_EVENT_WAITING, NULL);
            job = s_pick(self, w);
        }
        if (!job) {
            w->idle_epoch = self->ready_epoch;
            oq_list_push_back(&idle, &w->waiting);
            continue;
        }
        /* One message holds what fits its budget; this job opens the next. */
        if (w->unsent > 0 && w->unsent_bytes + s_cost(job) > OQ_MAX_JOBS_MSG_BYTES &&
            s_flush(p, w) < 0)
            continue;
        oq_eng_queue_t *q = oq_eng_job_queue(self, job);
        if (--w->credit > 0)
            oq_list_push_back(&self->waiting, &w->waiting);

        /* job->returned (a redelivery) is cleared once it is sent. */
        job->attempt++;
        oq_eng_enter_t how = {.until_ms = oq_eng_now(self) + q->retry_after_ms, .worker = w};
        oq_eng_transition(self, job, OQ_ENG_LEASED, OQ_EVENT_LEASED, &how);
        if (w->unsent++ == 0)
            oq_list_push_back(&p->sending, &w->sending);
        w->unsent_bytes += s_cost(job);
        if (!p->many || w->unsent >= w->jobs_per_msg)
            s_flush(p, w);
    }
    while (!oq_list_empty(&p->sending))
        s_flush(p, oq_container_of(p->sending.next, oq_worker_t, sending));
    while (!oq_list_empty(&idle)) {
        oq_link_t *n = idle.next;
        oq_list_remove(n);
        oq_list_push_back(&self->waiting, n);
    }
    return p->delivered;
}

size_t oq_engine_pump(oq_engine_t *self, oq_deliver_fn deliver, void *ctx)
{
    s_pump_t p = {.engine = self, .one = deliver, .ctx = ctx};
    return s_pump(&p);
}

size_t oq_engine_pump_many(oq_engine_t *self, oq_deliver_many_fn deliver, void *ctx)
{
    s_pump_t p = {.engine = self, .many = deliver, .ctx = ctx};
    return s_pump(&p);
}
