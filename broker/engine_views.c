/*  engine_views.c: what the engine shows: queue and type counters, job
    views and the restart order of every live job, the retention horizons
    and the numbers the metrics read. */
#include "engine.h"

#include <assert.h>
#include <string.h>

#include "engine_jobs.h"
#include "engine_queues.h"

size_t oq_engine_queue_count(const oq_engine_t *self)
{
    return self->queue_count;
}

void oq_engine_queue_stats(const oq_engine_t *self, size_t i, oq_queue_stats_t *s)
{
    assert(i < self->queue_count);
    const oq_eng_queue_t *q = self->queues[i];
    s->name = q->name;
    s->retry_after_ms = q->retry_after_ms;
    s->timeout_ms = q->timeout_ms;
    s->ready = q->count[OQ_ENG_READY];
    s->delayed = q->count[OQ_ENG_DELAYED];
    s->leased = q->count[OQ_ENG_LEASED];
    s->failed = q->count[OQ_ENG_FAILED];
    s->review = q->count[OQ_ENG_REVIEW];
    s->waiting = q->count[OQ_ENG_WAITING];
    s->dispatched = q->dispatched;
    s->done = q->done;
    s->retried = q->retried;
    s->redelivered = q->redelivered;
    s->late_acks = q->late_acks;
    s->ignored_acks = q->ignored_acks;
    s->duplicates = q->duplicates;
    s->cancelled = q->cancelled;
    s->returned = q->returned;
}

size_t oq_engine_type_count(const oq_engine_t *self)
{
    return self->type_count;
}

void oq_engine_type_stats(const oq_engine_t *self, size_t i, oq_type_stats_t *stats)
{
    assert(i < self->type_count);
    const oq_eng_type_t *t = self->type_list[i];
    stats->name = t->name;
    stats->done = t->done;
    stats->applied = t->applied;
    stats->duplicates = t->duplicates;
    stats->failed = t->failed;
    stats->ready = t->ready;
    /* A worker that named no types takes every type but those it handed
       back (oq_eng_worker_refuse_type). */
    stats->workers = t->workers + self->any_type_workers - t->refusing;
    stats->unhandled = stats->workers == 0 ? t->ready : 0;
}

uint64_t oq_engine_unknown_acks(const oq_engine_t *self)
{
    return self->unknown_acks;
}

uint64_t oq_engine_fenced_acks(const oq_engine_t *self)
{
    return self->fenced_acks;
}

uint64_t oq_engine_stale_touches(const oq_engine_t *self)
{
    return self->stale_touches;
}

size_t oq_engine_job_count(const oq_engine_t *self)
{
    return oq_idset_size(self->jobs);
}

uint64_t oq_engine_bytes(const oq_engine_t *self)
{
    return self->bytes;
}

uint64_t oq_engine_max_bytes(const oq_engine_t *self)
{
    return self->config.max_bytes;
}

const char *oq_engine_job_state(const oq_engine_t *self, uint64_t id)
{
    const oq_eng_job_t *job = oq_idset_get(self->jobs, id);
    return job ? oq_eng_state_names[job->state] : NULL;
}

int oq_engine_job_view(const oq_engine_t *self, uint64_t id, oq_job_view_t *view)
{
    const oq_eng_job_t *job = oq_idset_get(self->jobs, id);
    if (!job)
        return -1;
    oq_eng_job_view(self, job, view);
    return 0;
}

struct s_each_ctx {
    oq_engine_t *self;
    void (*fn)(void *ctx, const oq_job_view_t *job);
    void *ctx;
};

static void s_each_ready(void *ctx, oq_eng_job_t *job)
{
    struct s_each_ctx *each = ctx;
    oq_job_view_t view;
    oq_eng_job_view(each->self, job, &view);
    each->fn(each->ctx, &view);
}

static void s_each_waiting(void *ctx, oq_link_t *node)
{
    s_each_ready(ctx, oq_container_of(node, oq_eng_job_t, link));
}

void oq_engine_job_each(oq_engine_t *self, void (*fn)(void *ctx, const oq_job_view_t *job),
                        void *ctx)
{
    oq_job_view_t view;
    for (oq_link_t *n = self->workers_all.next; n != &self->workers_all; n = n->next) {
        oq_worker_t *w = oq_container_of(n, oq_worker_t, all);
        for (oq_link_t *l = w->leases.next; l != &w->leases; l = l->next) {
            oq_eng_job_view(self, oq_container_of(l, oq_eng_job_t, link), &view);
            fn(ctx, &view);
        }
    }
    struct s_each_ctx each = {self, fn, ctx};
    for (size_t i = 0; i < self->queue_count; i++)
        oq_eng_ready_each(self, self->queues[i], s_each_ready, &each);
    oq_overlap_each_waiting(self->overlap, s_each_waiting, &each);
    for (size_t i = 0; i < oq_heap_size(self->timers); i++) {
        oq_eng_job_t *job = oq_container_of(oq_heap_at(self->timers, i), oq_eng_job_t, u.t.timer);
        if (job->state != OQ_ENG_DELAYED)
            continue;
        oq_eng_job_view(self, job, &view);
        fn(ctx, &view);
    }
    for (size_t i = 0; i < self->queue_count; i++) {
        oq_eng_queue_t *q = self->queues[i];
        for (oq_link_t *l = q->failed.next; l != &q->failed; l = l->next) {
            oq_eng_job_view(self, oq_container_of(l, oq_eng_job_t, link), &view);
            fn(ctx, &view);
        }
    }
    for (size_t i = 0; i < self->queue_count; i++) {
        oq_eng_queue_t *q = self->queues[i];
        for (oq_link_t *l = q->review.next; l != &q->review; l = l->next) {
            oq_eng_job_view(self, oq_container_of(l, oq_eng_job_t, link), &view);
            fn(ctx, &view);
        }
    }
}

uint64_t oq_engine_next_id(const oq_engine_t *self)
{
    return self->next_id;
}

static void s_horizon_default(const oq_engine_t *self, const char *name, int64_t retry_after_ms,
                              oq_queue_horizon_t *h)
{
    memset(h, 0, sizeof *h);
    h->name = name;
    h->retry_after_ms = retry_after_ms;
    h->max_tries = self->config.max_tries;
    h->backoff_ms = self->config.backoff_ms;
}

/* How long the runs of a job with this budget can span, in ms (as a double:
   1000 tries of 30 days overflow no integer type, but neither matters). */
static double s_span_ms(uint32_t max_tries, int64_t retry_after_ms, int64_t backoff_ms)
{
    return (double)max_tries * ((double)retry_after_ms + (double)backoff_ms);
}

void oq_engine_default_horizon(const oq_engine_t *self, oq_queue_horizon_t *horizon)
{
    s_horizon_default(self, "*", self->config.retry_after_ms, horizon);
}

static void s_horizon_job(void *ctx, const oq_job_view_t *job)
{
    oq_engine_t *self = ((void **)ctx)[0];
    oq_queue_horizon_t *out = ((void **)ctx)[1];
    const oq_eng_queue_t *q = zhashx_lookup(self->queues_by_name, job->queue);
    oq_queue_horizon_t *h = &out[q->index];
    if (job->max_tries > h->max_tries)
        h->max_tries = job->max_tries;
    int64_t backoff_ms = job->backoff_ms ? 0 : self->config.backoff_ms;
    for (uint32_t k = 0; job->backoff_ms && k < job->backoff_len; k++)
        if (job->backoff_ms[k] > backoff_ms)
            backoff_ms = job->backoff_ms[k];
    if (backoff_ms > h->backoff_ms)
        h->backoff_ms = backoff_ms;
    /* Which one job holds the floor up: named to the operator. */
    double span = s_span_ms(job->max_tries, q->retry_after_ms, backoff_ms);
    double least =
        h->job.id ? s_span_ms(h->job.max_tries, q->retry_after_ms, h->job.backoff_ms)
                  : s_span_ms(self->config.max_tries, q->retry_after_ms, self->config.backoff_ms);
    if (span > least) {
        h->job.id = job->id;
        h->job.type = job->type;
        h->job.max_tries = job->max_tries;
        h->job.attempt = job->attempt;
        h->job.backoff_ms = backoff_ms;
    }
}

void oq_engine_horizons(oq_engine_t *self, oq_queue_horizon_t *out)
{
    for (size_t i = 0; i < self->queue_count; i++)
        s_horizon_default(self, self->queues[i]->name, self->queues[i]->retry_after_ms, &out[i]);
    void *ctx[2] = {self, out};
    oq_engine_job_each(self, s_horizon_job, ctx);
}

uint64_t oq_engine_queue_expired(const oq_engine_t *self, size_t i)
{
    assert(i < self->queue_count);
    return self->queues[i]->expired;
}

const oq_histogram_t *oq_engine_queue_latency(const oq_engine_t *self, size_t i)
{
    assert(i < self->queue_count);
    return &self->queues[i]->latency;
}

uint64_t oq_engine_workers_dead(const oq_engine_t *self)
{
    return self->workers_dead;
}

/* ---- unique and overlap keys ---- */

void oq_engine_unique_each_window(const oq_engine_t *self,
                                  void (*fn)(void *ctx, const char *key, uint64_t id,
                                             int64_t expires_ms),
                                  void *ctx)
{
    oq_unique_each_window(self->unique, fn, ctx);
}

int64_t oq_engine_unique_longest_window_ms(const oq_engine_t *self)
{
    return oq_unique_longest_window_ms(self->unique, oq_clock_wall_ms(self->clock));
}

void oq_engine_keys_stats(const oq_engine_t *self, oq_keys_stats_t *stats)
{
    stats->unique_keys = oq_unique_count(self->unique);
    stats->unique_hits = self->unique_hits;
    stats->unique_evicted = oq_unique_evicted(self->unique);
    stats->overlap_held = oq_overlap_held(self->overlap);
    stats->overlap_waiting = oq_overlap_waiting(self->overlap);
}
