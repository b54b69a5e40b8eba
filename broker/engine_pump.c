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

size_t oq_engine_pump(oq_engine_t *self, oq_deliver_fn deliver, void *ctx)
{
    size_t delivered = 0;
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
        oq_eng_queue_t *q = oq_eng_job_queue(self, job);
        if (--w->credit > 0)
            oq_list_push_back(&self->waiting, &w->waiting);

        bool redelivery = job->returned;
        job->attempt++;
        job->returned = false;
        oq_eng_enter_t how = {.until_ms = oq_eng_now(self) + q->retry_after_ms, .worker = w};
        oq_eng_transition(self, job, OQ_ENG_LEASED, OQ_EVENT_LEASED, &how);

        oq_worker_view_t wv;
        oq_job_view_t jv;
        oq_eng_worker_view(self, w, &wv);
        oq_eng_job_view(self, job, &jv);
        if (deliver(ctx, &wv, &jv) < 0) {
            /* Never left the broker: not an attempt, not a redelivery. */
            job->attempt--;
            job->returned = redelivery;
            oq_eng_enter_t back = {.in_front = true};
            oq_eng_transition(self, job, OQ_ENG_READY, OQ_EVENT_RETURNED, &back);
            oq_engine_worker_remove(self, &w, "unreachable");
            continue;
        }
        /* Reported only now that the job is out: a lease the worker never
           got must not raise the attempt count a restart would restore. */
        oq_eng_notify(self, OQ_EVENT_LEASED, job, NULL);
        if (redelivery)
            q->redelivered++;
        delivered++;
    }
    while (!oq_list_empty(&idle)) {
        oq_link_t *n = idle.next;
        oq_list_remove(n);
        oq_list_push_back(&self->waiting, n);
    }
    return delivered;
}
