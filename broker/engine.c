/*  engine.c: the engine's life and its clock: configuration defaults, new
    and destroy, the observer and the lease key, and the deadlines (tick).

    The engine is split along its seams, each part in its own file over
    the shared data of engine_model.h:
      engine_jobs.c      the job table and the state machine, lease tokens
      engine_queues.c    queues, job types, ready lists and routing lanes
      engine_dispatch.c  jobs coming in
      engine_memory.c    what is held against --max-bytes, making room
      engine_pump.c      jobs going out to workers (picking by route)
      engine_acks.c      workers' outcomes and lease touches
      engine_workers.c   workers: credit, routes, drain, status, reaping
      engine_stores.c    the failed and review stores, operator commands,
                         the ring of recently done jobs
      engine_views.c     stats, job views, horizons, metrics
      engine_restore.c   the restore calls replay uses
    Only engine.h is seen by the rest of the broker. */
#include "engine.h"

#include <assert.h>
#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_batches.h"
#include "engine_jobs.h"
#include "engine_memory.h"
#include "engine_model.h"
#include "engine_stores.h"
#include "onceq/limits.h"
#include "onceq/log.h"

oq_engine_config_t oq_engine_config_default(void)
{
    oq_engine_config_t c = {
        .retry_after_ms = OQ_DEFAULT_RETRY_AFTER_MS,
        .timeout_ms = OQ_DEFAULT_TIMEOUT_MS,
        .margin_ms = OQ_DEFAULT_MARGIN_MS,
        .max_tries = OQ_DEFAULT_MAX_TRIES,
        .backoff_ms = OQ_DEFAULT_BACKOFF_MS,
        .max_jobs = OQ_DEFAULT_MAX_JOBS,
        .max_bytes = oq_engine_default_max_bytes(),
        .dedupe_window_ms = OQ_DEFAULT_DEDUPE_WINDOW_MS,
        .dedupe_max = OQ_MAX_DEDUPE_ENTRIES,
    };
    return c;
}

/* The cgroup v2 memory limit of this process, or 0 if none can be read
   ("max", no cgroup v2, no file). A broker in a container or under a
   systemd MemoryMax= must size itself from that, not from the host. */
static uint64_t s_cgroup_memory_max(void)
{
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (!f)
        return 0;
    unsigned long long limit = 0;
    if (fscanf(f, "%llu", &limit) != 1)
        limit = 0;
    fclose(f);
    return limit;
}

uint64_t oq_engine_default_max_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    uint64_t memory = pages > 0 && page_size > 0 ? (uint64_t)pages * (uint64_t)page_size : 0;
    uint64_t cgroup = s_cgroup_memory_max();
    if (cgroup && (memory == 0 || cgroup < memory))
        memory = cgroup;
    uint64_t bytes = memory / OQ_DEFAULT_MAX_BYTES_DIVISOR;
    if (bytes < (uint64_t)OQ_MIN_DEFAULT_MAX_BYTES)
        bytes = OQ_MIN_DEFAULT_MAX_BYTES;
    if (bytes > (uint64_t)OQ_MAX_DEFAULT_MAX_BYTES)
        bytes = OQ_MAX_DEFAULT_MAX_BYTES;
    return bytes;
}

uint64_t oq_engine_job_cost(size_t payload_len, size_t backoff_len)
{
    return (uint64_t)payload_len + backoff_len * sizeof(int64_t) + OQ_JOB_OVERHEAD_BYTES;
}

void oq_engine_set_lease_key(oq_engine_t *self, const uint8_t key[OQ_LEASE_KEY_BYTES])
{
    memcpy(self->lease_key, key, OQ_LEASE_KEY_BYTES);
}

static void s_free_type(void **item)
{
    oq_eng_type_t *type = *item;
    free(type->name);
    free(type);
    *item = NULL;
}

static void s_free_name(void **item)
{
    free(*item);
    *item = NULL;
}

/* The id a job is filed under in the job table. */
static uint64_t s_job_id(const void *job)
{
    return ((const oq_eng_job_t *)job)->id;
}

oq_engine_t *oq_engine_new(const oq_engine_config_t *config, const oq_clock_t *clock)
{
    oq_engine_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->config = *config;
    self->clock = clock;
    self->timers = oq_heap_new();
    self->jobs = oq_idset_new(s_job_id);
    self->queues_by_name = zhashx_new();
    self->types = zhashx_new();
    self->workers = zhashx_new();
    self->names = zhashx_new();
    self->queues = calloc(OQ_MAX_QUEUES, sizeof *self->queues);
    self->type_list = calloc(OQ_MAX_TYPES, sizeof *self->type_list);
    self->recent = calloc(OQ_RECENT_DONE_JOBS, sizeof *self->recent);
    self->recent_index = oq_idmap_new();
    self->decided = oq_idmap_new();
    self->lanes = oq_idmap_new();
    self->chains = oq_idmap_new();
    oq_list_init(&self->chains_all);
    self->reviews = oq_review_log_new(OQ_MAX_REVIEW_RESOLVED);
    self->dispatch_ids = oq_dedupe_new(config->dedupe_max);
    self->unique = oq_unique_new(OQ_MAX_UNIQUE_KEYS);
    self->overlap = oq_overlap_new();
    if (oq_eng_memory_init(self) < 0 || !self->unique || !self->overlap || !self->lanes ||
        !self->reviews || !self->dispatch_ids || !self->timers || !self->jobs ||
        !self->queues_by_name || !self->types || !self->workers || !self->names || !self->queues ||
        !self->type_list || !self->recent || !self->recent_index || !self->decided ||
        !self->chains) {
        oq_engine_destroy(&self);
        return NULL;
    }
    zhashx_set_destructor(self->types, s_free_type);
    zhashx_set_destructor(self->names, s_free_name);
    oq_list_init(&self->workers_all);
    oq_list_init(&self->names_all);
    oq_list_init(&self->waiting);
    oq_list_init(&self->active);
    oq_list_init(&self->lanes_all);
    self->ready_epoch = 1;
    self->next_id = 1;
    self->restore_as = OQ_EVENT_DONE;
    return self;
}

static void s_free_waiting(void *ctx, oq_link_t *node)
{
    (void)ctx;
    oq_eng_job_free(oq_container_of(node, oq_eng_job_t, link));
}

void oq_engine_destroy(oq_engine_t **self_p)
{
    assert(self_p);
    oq_engine_t *self = *self_p;
    if (!self)
        return;
    /* Delayed jobs sit only in the heap; empty it first, while every node
       it points at is still allocated. */
    if (self->timers) {
        oq_heap_node_t *node;
        while ((node = oq_heap_pop_due(self->timers, INT64_MAX)) != NULL) {
            oq_eng_job_t *job = oq_container_of(node, oq_eng_job_t, u.t.timer);
            if (job->state == OQ_ENG_DELAYED)
                oq_eng_job_free(job);
        }
    }
    /* Jobs waiting for an overlap key are on that key's list only. */
    if (self->overlap)
        oq_overlap_each_waiting(self->overlap, s_free_waiting, NULL);
    /* The rest are reachable from the lanes, the queues' lists and the
       workers' leases. */
    for (oq_link_t *n = self->lanes_all.next; n != &self->lanes_all; n = n->next) {
        oq_eng_lane_t *lane = oq_container_of(n, oq_eng_lane_t, all);
        while (!oq_list_empty(&lane->ready)) {
            oq_eng_job_t *job = oq_container_of(lane->ready.next, oq_eng_job_t, link);
            oq_list_remove(&job->link);
            oq_eng_job_free(job);
        }
    }
    for (size_t i = 0; i < self->queue_count; i++) {
        oq_eng_queue_t *q = self->queues[i];
        oq_link_t *lists[] = {&q->failed, &q->review};
        for (int l = 0; l < 2; l++) {
            while (!oq_list_empty(lists[l])) {
                oq_eng_job_t *job = oq_container_of(lists[l]->next, oq_eng_job_t, link);
                oq_list_remove(&job->link);
                oq_eng_job_free(job);
            }
        }
    }
    while (!oq_list_empty(&self->workers_all)) {
        oq_worker_t *w = oq_container_of(self->workers_all.next, oq_worker_t, all);
        while (!oq_list_empty(&w->leases)) {
            oq_eng_job_t *job = oq_container_of(w->leases.next, oq_eng_job_t, link);
            oq_list_remove(&job->link);
            oq_eng_job_free(job);
        }
        oq_list_remove(&w->all);
        free(w->types);
        free(w->type_bits);
        free(w->queues);
        free(w);
    }
    while (!oq_list_empty(&self->lanes_all)) {
        oq_eng_lane_t *lane = oq_container_of(self->lanes_all.next, oq_eng_lane_t, all);
        oq_list_remove(&lane->all);
        free(lane);
    }
    oq_idmap_destroy(&self->lanes);
    for (size_t i = 0; i < self->queue_count; i++) {
        free(self->queues[i]->name);
        free(self->queues[i]);
    }
    free(self->queues);
    oq_heap_destroy(&self->timers);
    oq_idset_destroy(&self->jobs);
    zhashx_destroy(&self->queues_by_name);
    zhashx_destroy(&self->types);
    free(self->type_list);
    free(self->recent);
    oq_idmap_destroy(&self->recent_index);
    oq_idmap_destroy(&self->decided);
    oq_review_log_destroy(&self->reviews);
    oq_eng_batches_destroy(self);
    oq_eng_chains_destroy(self);
    oq_dedupe_destroy(&self->dispatch_ids);
    oq_unique_destroy(&self->unique);
    oq_overlap_destroy(&self->overlap);
    oq_throttle_destroy(&self->memory_log);
    zhashx_destroy(&self->workers);
    zhashx_destroy(&self->names);
    free(self);
    *self_p = NULL;
}

void oq_engine_set_hooks(oq_engine_t *self, const oq_engine_hooks_t *hooks)
{
    if (hooks)
        self->hooks = *hooks;
    else
        memset(&self->hooks, 0, sizeof self->hooks);
}

size_t oq_engine_tick(oq_engine_t *self)
{
    int64_t now = oq_eng_now(self);
    size_t processed = oq_engine_batches_retry(self);
    oq_heap_node_t *node;
    while ((node = oq_heap_pop_due(self->timers, now)) != NULL) {
        oq_eng_job_t *job = oq_container_of(node, oq_eng_job_t, u.t.timer);
        if (job->state == OQ_ENG_DELAYED) {
            oq_eng_transition(self, job, OQ_ENG_READY, OQ_EVENT_DUE, NULL);
        } else {
            assert(job->state == OQ_ENG_LEASED);
            char why[96];
            snprintf(why, sizeof why, "lease expired after %.3g s",
                     oq_eng_job_queue(self, job)->retry_after_ms / 1000.0);
            oq_info("job %llu type=%s: %s on attempt %u", (unsigned long long)job->id,
                    oq_eng_job_type(self, job)->name, why, job->attempt);
            oq_eng_job_queue(self, job)->expired++;
            oq_eng_lease_end(self, job, why);
        }
        processed++;
    }
    oq_dedupe_expire(self->dispatch_ids, oq_clock_wall_ms(self->clock));
    oq_unique_expire(self->unique, oq_clock_wall_ms(self->clock));
    oq_eng_memory_note(self);
    return processed;
}

int64_t oq_engine_next_deadline(const oq_engine_t *self)
{
    const oq_heap_node_t *top = oq_heap_peek(self->timers);
    return top ? oq_heap_deadline(self->timers, top) : -1;
}
