/*  engine.c: queues, the job state machine, workers, leases and deadlines.

    Every job is in exactly one state, and every change of state goes
    through s_transition, which asserts that the change is legal and keeps
    the per-queue counts and list memberships right. A job holds one timer
    node in the deadline heap: its delay or backoff end while delayed, its
    lease end while leased, nothing otherwise.

    Redelivery. A job goes back to ready when its lease runs out or its
    worker is found dead; it keeps its attempt count, is put at the front of
    its priority band so it is not starved behind newer work, and is counted
    as redelivered when it is next handed out. On the last allowed attempt it
    goes to failed instead, so a job that kills every worker it touches
    stops circling.

    Observer. s_transition reports each change to the hooks (the journal),
    except a lease, which the pump reports only once the job has really
    been sent. Replay rebuilds jobs through the restore calls, whose moves
    are legal only while restoring (a leased job comes back ready, so a
    retry or a failure is replayed from ready).

    Routing. A worker may name the job types it handles and the queues it
    serves, in priority order; one that names none takes every job. Besides
    its queue's ready list (priority high to low, FIFO within), a ready job
    sits on the list of its (queue, type) lane, in the same order, and each
    queue keeps the list of its lanes that hold ready jobs. A worker's pick
    walks its queues in order (or the queues with ready jobs, round-robin,
    if it named none), and in each queue looks only at the heads of the
    non-empty lanes whose type is in the worker's type bitmap, taking the
    best head (higher priority, then earlier in the queue's order, which
    ready_seq records). So a pick costs O(its queues x the non-empty lanes
    of each), never a scan of the ready jobs, and a worker that found
    nothing is not asked again until some job becomes ready (ready_epoch).
    A job whose type no worker handles simply stays ready: it uses no try.

    Fenced acks. Every delivery carries a lease token, the keyed SipHash of
    (job id, attempt, requeue generation) under the broker's secret. An ack
    or a touch counts only if it echoes the token of a delivery that really
    happened to this job (attempt 1 .. the job's attempt, this generation);
    anything else changes nothing and is counted in fenced_acks. A requeue
    starts a new generation, so the tokens of the job's earlier life die. */
#include "engine.h"

#include <assert.h>
#include <czmq.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heap.h"
#include "histogram.h"
#include "idmap.h"
#include "list.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "siphash.h"

#define S_TYPE_WORDS ((OQ_MAX_TYPES + 63) / 64) /* a worker's type bitmap */

typedef enum {
    S_NEW = 0, /* allocated, not yet placed */
    S_READY,
    S_DELAYED,
    S_LEASED,
    S_FAILED,
    S_REVIEW, /* outcome unknown: held for a person */
    S_DONE,   /* terminal: freed right after */
} s_state_t;

_Static_assert(S_READY == (int)OQ_STATE_READY && S_DELAYED == (int)OQ_STATE_DELAYED &&
                   S_LEASED == (int)OQ_STATE_LEASED && S_FAILED == (int)OQ_STATE_FAILED &&
                   S_REVIEW == (int)OQ_STATE_REVIEW,
               "the public states mirror the private ones");
_Static_assert(OQ_MAX_BACKOFF_STEPS <= UINT8_MAX, "backoff_len is a byte");
_Static_assert(OQ_MAX_TIMEOUT_MS <= UINT32_MAX, "timeout_ms is 32 bits");

static const char *s_state_names[] = {"new",    "ready",  "delayed", "leased",
                                      "failed", "review", "done"};

typedef struct s_queue {
    char *name;
    uint32_t index;         /* in engine->queues */
    oq_link_t lanes;        /* s_lane_t.active: its lanes with ready jobs */
    int64_t retry_after_ms; /* lease length */
    int64_t timeout_ms;     /* default job timeout */
    oq_link_t ready;        /* ready jobs, priority high to low, FIFO within */
    oq_link_t failed;       /* failed jobs, oldest first */
    oq_link_t review;       /* jobs in review, oldest first */
    oq_link_t active;       /* in engine->active while ready is not empty */
    uint64_t count[S_DONE]; /* jobs per state now (index by s_state_t) */
    uint64_t dispatched, done, retried, redelivered, late_acks, ignored_acks, duplicates;
    uint64_t cancelled;     /* ready or delayed jobs withdrawn by an operator */
    uint64_t returned;      /* deliveries handed back unrun (return, unavailable): no try used */
    uint64_t expired;       /* leases that ran out */
    oq_histogram_t latency; /* dispatch to done, of jobs dispatched in this run */
    uint64_t clamped;       /* restored jobs whose timeout broke the rule */
    int64_t clamped_longest_ms; /* the longest timeout among them */
} s_queue_t;

/* A job type, with the outcomes counted per type: how many duplicates the
   effect's unique guard absorbed is a question about a handler, not a queue. */
typedef struct {
    char *name;
    uint32_t index;   /* in engine->type_list */
    uint32_t workers; /* connected workers that named this type */
    uint64_t ready;   /* jobs of this type ready now */
    uint64_t done, applied, duplicates, failed;
} s_type_t;

/* The ready jobs of one type in one queue, in the queue's order. */
typedef struct {
    s_queue_t *queue;
    s_type_t *type;
    oq_link_t ready;  /* s_job_t.lane_link */
    oq_link_t active; /* in queue->lanes while ready is not empty */
    oq_link_t all;    /* in engine->lanes_all, for destroy */
} s_lane_t;

/* A job is one allocation: this header and its payload. The header is kept
   small because a broker holds up to a million of them: fields used only in
   some states share storage (the union), and one link serves whichever list
   the state puts the job on. */
typedef struct s_job {
    uint64_t id;
    s_queue_t *queue;
    s_type_t *type;      /* owned by engine->types */
    int64_t *backoff_ms; /* NULL: the engine default */
    oq_link_t link;      /* queue->ready, ->failed, ->review, or worker->leases while leased */
    oq_link_t lane_link; /* ready only: its (queue, type) lane */
    int64_t ready_seq;   /* ready only: its place in the queue's order within a priority */
    union {
        struct {
            oq_heap_node_t timer; /* delayed: its end; leased: the lease's end */
            oq_worker_t *worker;  /* leased only */
        } t;
        struct {
            char *error; /* failed: the error that ended it; review: the handler's reason */
            int64_t failed_at_ms; /* failed, review: when it got there (wall clock) */
        } f;
    } u;
    int32_t priority;
    uint32_t attempt;
    uint32_t max_tries;
    uint32_t payload_len;
    uint32_t timeout_ms; /* at most OQ_MAX_TIMEOUT_MS, which fits */
    uint32_t gen;        /* requeues so far: part of the lease token */

    /* For the dispatch-to-done histogram; they fill what was padding. */
    uint32_t dispatched_ms; /* engine clock at dispatch, truncated (differences wrap
                               right below 49 days); valid if timed */
    uint8_t timed;          /* dispatched in this run (not restored): dispatched_ms holds */

    uint8_t state;       /* s_state_t */
    uint8_t returned;    /* lease ended without an ack: next delivery is a redelivery */
    uint8_t backoff_len; /* at most OQ_MAX_BACKOFF_STEPS */
    uint8_t payload[];   /* encoded msgpack map */
} s_job_t;

/* A job recently done, remembered so that an ack arriving after it (the
   slower of two overlapping deliveries) is still attributed: it is counted
   as ignored, and its result as what it was: "applied" (the slower run may
   be the one that wrote the effect) or "already_applied" (a duplicate the
   unique guard absorbed). Each delivery's result is counted once: an ack a
   worker sends again after a reconnect is only ignored. A ring of
   OQ_RECENT_DONE_JOBS; the oldest is forgotten. */
typedef struct {
    uint64_t id; /* 0: empty slot */
    s_type_t *type;
    s_queue_t *queue;
    uint32_t attempt, gen; /* to check the token of a later ack */
    uint32_t counted;      /* bit a-1: the result of attempt a (<= 32) is counted */
} s_recent_t;

#define S_COUNTED_ATTEMPTS 32 /* bits of s_recent_t.counted */

struct oq_worker {
    uint8_t identity[256];
    size_t identity_len;
    char key[513]; /* identity in hex, the workers table key */
    char name[OQ_MAX_NAME_LEN + 1];
    uint32_t pid;
    uint32_t credit; /* jobs it may still be sent */
    bool draining;   /* credit stays 0 */
    int64_t last_seen_ms;
    oq_link_t leases; /* s_job_t.lease */
    uint32_t leased;
    oq_link_t waiting; /* in engine->waiting while credit > 0 */
    oq_link_t all;     /* in engine->workers_all */
    bool routed;       /* the first ready's types and queues are taken */
    s_type_t **types;  /* the types it named; NULL: every type */
    uint32_t type_count;
    uint64_t *type_bits; /* the same as a bitmap by s_type_t.index */
    s_queue_t **queues;  /* the queues it serves, in priority order; NULL: every queue */
    uint32_t queue_count;
    s_type_t *refused[OQ_MAX_REFUSED_TYPES]; /* handed back by a worker that named no types */
    uint32_t refused_count;
    uint64_t idle_epoch; /* ready_epoch when its last pick found nothing */
    /* What its last status said: ready, or paused while what its jobs need
       is down (then with the error that paused it); since when. */
    oq_worker_status_t status;
    int64_t status_since_ms;
    char *status_error; /* NULL while ready */
};

struct oq_engine {
    oq_engine_config_t config;
    const oq_clock_t *clock;
    oq_heap_t *timers;
    oq_idmap_t *jobs; /* id -> s_job_t, every live job */
    zhashx_t *queues_by_name;
    s_queue_t **queues; /* in creation order, for stats */
    size_t queue_count;
    zhashx_t *types;      /* name -> s_type_t */
    s_type_t **type_list; /* in creation order, for stats */
    size_t type_count;
    zhashx_t *workers; /* hex identity -> oq_worker_t */
    oq_link_t workers_all;
    oq_link_t waiting; /* workers with credit, served round-robin */
    oq_link_t active;  /* queues with ready jobs, served round-robin */
    uint64_t next_id;
    uint64_t unknown_acks;
    uint64_t bytes;         /* sum of the live jobs' costs, against config.max_bytes */
    uint64_t fenced_acks;   /* acks without a valid token: changed nothing */
    uint64_t stale_touches; /* touches of a lease not current or not the sender's */
    uint64_t workers_dead;  /* workers removed for their silence */
    uint8_t lease_key[OQ_LEASE_KEY_BYTES];
    oq_idmap_t *lanes;                /* (queue index + 1) << 32 | type index -> s_lane_t */
    oq_link_t lanes_all;              /* every lane, for destroy */
    int64_t seq_front, seq_back;      /* ready_seq of the next front / back insertion */
    uint64_t ready_epoch;             /* counts entries to ready */
    uint32_t any_type_workers;        /* connected workers that named no types */
    s_recent_t *recent;               /* ring of recently done jobs */
    size_t recent_next;               /* slot the next done job takes */
    oq_idmap_t *recent_index;         /* id -> s_recent_t */
    oq_engine_hooks_t hooks;          /* the observer; changed is NULL when none */
    oq_review_log_t *reviews;         /* resolutions remembered */
    const oq_resolution_t *resolving; /* the resolution being reported, or NULL */
};

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

static int64_t s_now(const oq_engine_t *self)
{
    return oq_clock_now_ms(self->clock);
}

/* The lease token of one delivery: unguessable without the broker's key. */
static uint64_t s_token(const oq_engine_t *self, uint64_t id, uint32_t attempt, uint32_t gen)
{
    uint8_t in[16], out[OQ_SIPHASH_DIGEST_BYTES];
    for (int i = 0; i < 8; i++)
        in[i] = (uint8_t)(id >> (8 * i));
    for (int i = 0; i < 4; i++) {
        in[8 + i] = (uint8_t)(attempt >> (8 * i));
        in[12 + i] = (uint8_t)(gen >> (8 * i));
    }
    oq_siphash128(self->lease_key, in, sizeof in, out);
    uint64_t token = 0;
    for (int i = 0; i < 8; i++)
        token |= (uint64_t)out[i] << (8 * i);
    return token;
}

/* Does lease prove a delivery of this job on this attempt? */
static bool s_fenced_ok(const oq_engine_t *self, uint64_t id, uint32_t job_attempt, uint32_t gen,
                        uint32_t attempt, bool has_lease, uint64_t lease)
{
    return has_lease && attempt >= 1 && attempt <= job_attempt &&
           lease == s_token(self, id, attempt, gen);
}

void oq_engine_set_lease_key(oq_engine_t *self, const uint8_t key[OQ_LEASE_KEY_BYTES])
{
    memcpy(self->lease_key, key, OQ_LEASE_KEY_BYTES);
}

static void s_free_type(void **item)
{
    s_type_t *type = *item;
    free(type->name);
    free(type);
    *item = NULL;
}

oq_engine_t *oq_engine_new(const oq_engine_config_t *config, const oq_clock_t *clock)
{
    oq_engine_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->config = *config;
    self->clock = clock;
    self->timers = oq_heap_new();
    self->jobs = oq_idmap_new();
    self->queues_by_name = zhashx_new();
    self->types = zhashx_new();
    self->workers = zhashx_new();
    self->queues = calloc(OQ_MAX_QUEUES, sizeof *self->queues);
    self->type_list = calloc(OQ_MAX_TYPES, sizeof *self->type_list);
    self->recent = calloc(OQ_RECENT_DONE_JOBS, sizeof *self->recent);
    self->recent_index = oq_idmap_new();
    self->lanes = oq_idmap_new();
    self->reviews = oq_review_log_new(OQ_MAX_REVIEW_RESOLVED);
    if (!self->lanes || !self->reviews || !self->timers || !self->jobs || !self->queues_by_name ||
        !self->types || !self->workers || !self->queues || !self->type_list || !self->recent ||
        !self->recent_index) {
        oq_engine_destroy(&self);
        return NULL;
    }
    zhashx_set_destructor(self->types, s_free_type);
    oq_list_init(&self->workers_all);
    oq_list_init(&self->waiting);
    oq_list_init(&self->active);
    oq_list_init(&self->lanes_all);
    self->ready_epoch = 1;
    self->next_id = 1;
    return self;
}

static void s_job_free(s_job_t *job)
{
    free(job->backoff_ms);
    if (job->state == S_FAILED || job->state == S_REVIEW)
        free(job->u.f.error);
    free(job);
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
            s_job_t *job = oq_container_of(node, s_job_t, u.t.timer);
            if (job->state == S_DELAYED)
                s_job_free(job);
        }
    }
    /* The rest are reachable from the queues' lists and the workers' leases. */
    for (size_t i = 0; i < self->queue_count; i++) {
        s_queue_t *q = self->queues[i];
        oq_link_t *lists[] = {&q->ready, &q->failed, &q->review};
        for (int l = 0; l < 3; l++) {
            while (!oq_list_empty(lists[l])) {
                s_job_t *job = oq_container_of(lists[l]->next, s_job_t, link);
                oq_list_remove(&job->link);
                s_job_free(job);
            }
        }
    }
    while (!oq_list_empty(&self->workers_all)) {
        oq_worker_t *w = oq_container_of(self->workers_all.next, oq_worker_t, all);
        while (!oq_list_empty(&w->leases)) {
            s_job_t *job = oq_container_of(w->leases.next, s_job_t, link);
            oq_list_remove(&job->link);
            s_job_free(job);
        }
        oq_list_remove(&w->all);
        free(w->types);
        free(w->type_bits);
        free(w->queues);
        free(w);
    }
    while (!oq_list_empty(&self->lanes_all)) {
        s_lane_t *lane = oq_container_of(self->lanes_all.next, s_lane_t, all);
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
    oq_idmap_destroy(&self->jobs);
    zhashx_destroy(&self->queues_by_name);
    zhashx_destroy(&self->types);
    free(self->type_list);
    free(self->recent);
    oq_idmap_destroy(&self->recent_index);
    oq_review_log_destroy(&self->reviews);
    zhashx_destroy(&self->workers);
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

/* ---- queues -------------------------------------------------------------- */

static int s_check_rule(const oq_engine_t *self, const char *queue, int64_t timeout_ms,
                        int64_t retry_after_ms, char *reason, size_t reason_len)
{
    if (retry_after_ms - timeout_ms < self->config.margin_ms &&
        retry_after_ms <= self->config.margin_ms) {
        /* No timeout above 0 fits: only a longer lease can help. */
        snprintf(reason, reason_len,
                 "timeout %.3g s is not shorter than queue \"%s\" retry_after %.3g s by the "
                 "margin of %.3g s, and no timeout is: raise retry_after to at least %.3g s "
                 "(the timeout plus the margin)",
                 timeout_ms / 1000.0, queue, retry_after_ms / 1000.0,
                 self->config.margin_ms / 1000.0, (timeout_ms + self->config.margin_ms) / 1000.0);
        return -1;
    }
    if (retry_after_ms - timeout_ms < self->config.margin_ms) {
        snprintf(reason, reason_len,
                 "timeout %.3g s is not shorter than queue \"%s\" retry_after %.3g s by the "
                 "margin of %.3g s: a handler still running when its lease ends would overlap "
                 "its own redelivery (use a timeout of at most %.3g s)",
                 timeout_ms / 1000.0, queue, retry_after_ms / 1000.0,
                 self->config.margin_ms / 1000.0,
                 (retry_after_ms - self->config.margin_ms) / 1000.0);
        return -1;
    }
    return 0;
}

int oq_engine_check_defaults(const oq_engine_t *self, char *reason, size_t reason_len)
{
    return s_check_rule(self, "*", self->config.timeout_ms, self->config.retry_after_ms, reason,
                        reason_len);
}

static s_queue_t *s_queue_get(oq_engine_t *self, const char *name, bool create)
{
    s_queue_t *q = zhashx_lookup(self->queues_by_name, name);
    if (q || !create || self->queue_count >= OQ_MAX_QUEUES)
        return q;
    q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->name = strdup(name);
    if (!q->name) {
        free(q);
        return NULL;
    }
    oq_histogram_init(&q->latency, oq_histogram_latency_us, oq_histogram_latency_count);
    q->retry_after_ms = self->config.retry_after_ms;
    q->timeout_ms = self->config.timeout_ms;
    q->index = (uint32_t)self->queue_count;
    oq_list_init(&q->lanes);
    oq_list_init(&q->ready);
    oq_list_init(&q->failed);
    oq_list_init(&q->review);
    oq_link_clear(&q->active);
    zhashx_insert(self->queues_by_name, name, q);
    self->queues[self->queue_count++] = q;
    return q;
}

int oq_engine_queue_config(oq_engine_t *self, const char *name, int64_t retry_after_ms,
                           int64_t timeout_ms, char *reason, size_t reason_len)
{
    if (!oq_proto_name_valid(name, strlen(name))) {
        snprintf(reason, reason_len, "invalid queue name \"%s\"", name);
        return -1;
    }
    if (timeout_ms <= 0)
        timeout_ms = self->config.timeout_ms;
    if (s_check_rule(self, name, timeout_ms, retry_after_ms, reason, reason_len) < 0)
        return -1;
    s_queue_t *q = s_queue_get(self, name, true);
    if (!q) {
        snprintf(reason, reason_len, "cannot create queue \"%s\"", name);
        return -1;
    }
    q->retry_after_ms = retry_after_ms;
    q->timeout_ms = timeout_ms;
    return 0;
}

/* ---- the job state machine -------------------------------------------------- */

/* Insert into the ready list: behind every job of the same or higher
   priority (FIFO), or, for a job given back after its lease ended, in front
   of its priority band. Scans from the end the list is normally touched at,
   so equal priorities cost O(1). */
static int32_t s_priority_at(const oq_link_t *at, size_t offset)
{
    return ((const s_job_t *)((const char *)at - offset))->priority;
}

static void s_band_insert(oq_link_t *list, oq_link_t *node, size_t offset, int32_t priority,
                          bool in_front)
{
    if (in_front) {
        oq_link_t *at = list;
        while (at->next != list && s_priority_at(at->next, offset) > priority)
            at = at->next;
        oq_list_insert_after(at, node);
    } else {
        oq_link_t *at = list->prev;
        while (at != list && s_priority_at(at, offset) < priority)
            at = at->prev;
        oq_list_insert_after(at, node);
    }
}

static uint64_t s_lane_key(const s_queue_t *q, const s_type_t *t)
{
    return ((uint64_t)(q->index + 1) << 32) | t->index;
}

static s_lane_t *s_lane_get(oq_engine_t *self, s_queue_t *q, s_type_t *t)
{
    s_lane_t *lane = oq_idmap_get(self->lanes, s_lane_key(q, t));
    if (lane)
        return lane;
    lane = calloc(1, sizeof *lane);
    if (!lane)
        return NULL;
    lane->queue = q;
    lane->type = t;
    oq_list_init(&lane->ready);
    oq_link_clear(&lane->active);
    if (oq_idmap_put(self->lanes, s_lane_key(q, t), lane) < 0) {
        free(lane);
        return NULL;
    }
    oq_list_push_back(&self->lanes_all, &lane->all);
    return lane;
}

/* Into the queue's ready list and its lane, in the same order. */
static void s_ready_insert(oq_engine_t *self, s_queue_t *q, s_job_t *job, bool in_front)
{
    s_band_insert(&q->ready, &job->link, offsetof(s_job_t, link), job->priority, in_front);
    job->ready_seq = in_front ? --self->seq_front : ++self->seq_back;
    job->type->ready++;
    self->ready_epoch++;
    s_lane_t *lane = s_lane_get(self, q, job->type);
    if (!lane) {
        /* Only workers that take every type will see it. */
        oq_error("job %llu: no memory for its routing lane", (unsigned long long)job->id);
        oq_link_clear(&job->lane_link);
        return;
    }
    if (oq_list_empty(&lane->ready))
        oq_list_push_back(&q->lanes, &lane->active);
    s_band_insert(&lane->ready, &job->lane_link, offsetof(s_job_t, lane_link), job->priority,
                  in_front);
}

static void s_ready_remove(oq_engine_t *self, s_job_t *job)
{
    s_queue_t *q = job->queue;
    oq_list_remove(&job->link);
    job->type->ready--;
    if (oq_list_linked(&job->lane_link)) {
        s_lane_t *lane = oq_idmap_get(self->lanes, s_lane_key(q, job->type));
        oq_list_remove(&job->lane_link);
        if (lane && oq_list_empty(&lane->ready))
            oq_list_remove(&lane->active);
    }
}

/* Leave the current state: undo its list, heap and lease memberships. */
static void s_leave(oq_engine_t *self, s_job_t *job)
{
    s_queue_t *q = job->queue;
    switch ((s_state_t)job->state) {
    case S_READY:
        s_ready_remove(self, job);
        if (oq_list_empty(&q->ready))
            oq_list_remove(&q->active);
        break;
    case S_DELAYED:
        oq_heap_remove(self->timers, &job->u.t.timer);
        break;
    case S_LEASED:
        oq_heap_remove(self->timers, &job->u.t.timer);
        oq_list_remove(&job->link);
        job->u.t.worker->leased--;
        job->u.t.worker = NULL;
        break;
    case S_FAILED:
    case S_REVIEW:
        oq_list_remove(&job->link);
        free(job->u.f.error);
        /* The timer shares this storage and must read as "not in the heap". */
        memset(&job->u, 0, sizeof job->u);
        break;
    case S_NEW:
        return;
    case S_DONE:
        assert(!"a done job has no state to leave");
    }
    q->count[job->state]--;
}

static bool s_legal(s_state_t from, s_state_t to, oq_job_event_t event)
{
    if (event == OQ_EVENT_FORGOTTEN)
        return from == S_FAILED && to == S_DONE;
    if (event == OQ_EVENT_CANCELLED)
        return (from == S_READY || from == S_DELAYED) && to == S_DONE;
    if (event == OQ_EVENT_RESTORED && from != S_NEW) {
        /* Replay sees no leases: a job handed out before the stop is ready,
           and its retry, failure or review is replayed from there. */
        if (to == S_DONE)
            return from == S_READY || from == S_DELAYED || from == S_FAILED || from == S_REVIEW;
        if (from == S_REVIEW) /* a resolution */
            return to == S_READY || to == S_FAILED;
        return (from == S_READY || from == S_DELAYED) &&
               (to == S_READY || to == S_DELAYED || to == S_FAILED || to == S_REVIEW);
    }
    switch (from) {
    case S_NEW:
        return to == S_READY || to == S_DELAYED;
    case S_READY:
        return to == S_LEASED || to == S_DONE;
    case S_DELAYED:
        return to == S_READY || to == S_DONE;
    case S_LEASED:
        return to == S_READY || to == S_DELAYED || to == S_FAILED || to == S_REVIEW || to == S_DONE;
    case S_FAILED:
        return to == S_DONE || to == S_READY; /* done by a late ok; ready by a requeue */
    case S_REVIEW:
        /* By a resolution; a late ok is resolved as done (plainly done only
           when memory for remembering that ran out). */
        if (to == S_DONE)
            return event == OQ_EVENT_RESOLVED || event == OQ_EVENT_DONE;
        return event == OQ_EVENT_RESOLVED && (to == S_READY || to == S_FAILED);
    case S_DONE:
        return false;
    }
    return false;
}

typedef struct {
    int64_t until_ms;             /* S_DELAYED, S_LEASED: deadline */
    oq_worker_t *worker;          /* S_LEASED */
    bool in_front;                /* S_READY: given back after a lease ended */
    char *error;                  /* S_FAILED, S_REVIEW: taken over */
    int64_t failed_at_ms;         /* S_FAILED, S_REVIEW: 0 for now */
    const oq_job_msg_t *dispatch; /* OQ_EVENT_DISPATCHED: the request */
} s_enter_t;

static void s_job_view(const oq_engine_t *self, const s_job_t *job, oq_job_view_t *v);

static void s_notify(oq_engine_t *self, oq_job_event_t event, const s_job_t *job,
                     const oq_job_msg_t *dispatch)
{
    if (!self->hooks.changed || event == OQ_EVENT_RESTORED)
        return;
    oq_job_view_t view;
    s_job_view(self, job, &view);
    if (event == OQ_EVENT_RESOLVED)
        view.resolution = self->resolving;
    self->hooks.changed(self->hooks.ctx, event, &view, dispatch);
}

static void s_remember_done(oq_engine_t *self, const s_job_t *job)
{
    s_recent_t *slot = &self->recent[self->recent_next];
    if (slot->id)
        oq_idmap_remove(self->recent_index, slot->id);
    *slot = (s_recent_t){job->id, job->type, job->queue, job->attempt, job->gen, 0};
    if (oq_idmap_put(self->recent_index, job->id, slot) < 0)
        slot->id = 0; /* out of memory: simply not remembered */
    self->recent_next = (self->recent_next + 1) % OQ_RECENT_DONE_JOBS;
}

/* The one place a job changes state. A job entering S_DONE is freed. The
   observer hears of every change but a lease (see oq_engine_pump). */
static void s_transition(oq_engine_t *self, s_job_t *job, s_state_t to, oq_job_event_t event,
                         s_enter_t *how)
{
    assert(s_legal((s_state_t)job->state, to, event));
    s_leave(self, job);
    s_queue_t *q = job->queue;
    job->state = (uint8_t)to;
    switch (to) {
    case S_READY:
        if (oq_list_empty(&q->ready))
            oq_list_push_back(&self->active, &q->active);
        s_ready_insert(self, q, job, how && how->in_front);
        break;
    case S_DELAYED:
        if (oq_heap_push(self->timers, &job->u.t.timer, how->until_ms) < 0) {
            /* Out of memory for the heap: make it ready now rather than lose it. */
            oq_error("job %llu: no memory for its timer, making it ready now",
                     (unsigned long long)job->id);
            job->state = S_READY;
            if (oq_list_empty(&q->ready))
                oq_list_push_back(&self->active, &q->active);
            s_ready_insert(self, q, job, false);
        }
        break;
    case S_LEASED:
        job->u.t.worker = how->worker;
        oq_list_push_back(&how->worker->leases, &job->link);
        how->worker->leased++;
        if (oq_heap_push(self->timers, &job->u.t.timer, how->until_ms) < 0)
            oq_error("job %llu: no memory for its lease timer; it ends with its worker",
                     (unsigned long long)job->id);
        break;
    case S_FAILED:
        if (event != OQ_EVENT_RESTORED)
            job->type->failed++;
        job->u.f.error = how->error;
        job->u.f.failed_at_ms =
            how->failed_at_ms ? how->failed_at_ms : oq_clock_wall_ms(self->clock);
        oq_list_push_back(&q->failed, &job->link);
        break;
    case S_REVIEW:
        job->u.f.error = how->error;
        job->u.f.failed_at_ms =
            how->failed_at_ms ? how->failed_at_ms : oq_clock_wall_ms(self->clock);
        oq_list_push_back(&q->review, &job->link);
        break;
    case S_DONE:
        s_notify(self, event, job, NULL);
        if (event == OQ_EVENT_DONE || event == OQ_EVENT_RESOLVED) /* a review resolved done */
            q->done++;
        if (event == OQ_EVENT_CANCELLED)
            q->cancelled++;
        if (event != OQ_EVENT_RESTORED)
            s_remember_done(self, job);
        oq_idmap_remove(self->jobs, job->id);
        self->bytes -= oq_engine_job_cost(job->payload_len, job->backoff_len);
        s_job_free(job);
        return;
    case S_NEW:
        assert(!"no way back to new");
    }
    q->count[job->state]++;
    if (event != OQ_EVENT_LEASED)
        s_notify(self, event, job, how ? how->dispatch : NULL);
}

static char *s_format(const char *format, ...) __attribute__((format(printf, 1, 2)));
static char *s_format(const char *format, ...)
{
    char text[OQ_MAX_ERROR_LEN + 1];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    return strdup(text);
}

static void s_fail(oq_engine_t *self, s_job_t *job, char *error)
{
    oq_info("job %llu type=%s failed on attempt %u of %u: %s", (unsigned long long)job->id,
            job->type->name, job->attempt, job->max_tries, error ? error : "");
    s_enter_t how = {.error = error};
    s_transition(self, job, S_FAILED, OQ_EVENT_FAILED, &how);
}

/* The handler could not know the outcome: hold the job for a person. */
static void s_review(oq_engine_t *self, s_job_t *job, char *reason)
{
    oq_info("job %llu type=%s needs review (attempt %u of %u): %s", (unsigned long long)job->id,
            job->type->name, job->attempt, job->max_tries, reason ? reason : "");
    s_enter_t how = {.error = reason};
    s_transition(self, job, S_REVIEW, OQ_EVENT_REVIEW, &how);
}

/* Take job, which is in review, out of it by a decision, remember the
   decision and report it (restoring: replay, reported to nobody). 0, or -1
   if memory runs out (nothing changed). */
static int s_resolve(oq_engine_t *self, s_job_t *job, oq_review_action_t action, const char *note,
                     int64_t resolved_at_ms, bool restoring)
{
    assert(job->state == S_REVIEW);
    oq_resolution_t r = {
        .id = job->id,
        .action = action,
        .attempt = job->attempt,
        .reviewed_at_ms = job->u.f.failed_at_ms,
        .resolved_at_ms = resolved_at_ms,
        .type = job->type->name,
        .queue = job->queue->name,
        .reason = job->u.f.error,
        .note = note,
    };
    const oq_resolution_t *kept = oq_review_log_add(self->reviews, &r);
    char *error = NULL;
    if (kept && action == OQ_REVIEW_FAIL) {
        error = s_format("resolved as failed after review%s%s (the handler's reason: %s)",
                         kept->note[0] ? ": " : "", kept->note, kept->reason);
        if (!error)
            return -1; /* the log keeps a decision that was not taken: harmless */
    }
    if (!kept)
        return -1;
    oq_info("job %llu type=%s resolved after review: %s%s%s", (unsigned long long)job->id,
            job->type->name, oq_proto_review_action_name(action), kept->note[0] ? ": " : "",
            kept->note);
    oq_job_event_t event = restoring ? OQ_EVENT_RESTORED : OQ_EVENT_RESOLVED;
    self->resolving = kept;
    switch (action) {
    case OQ_REVIEW_DONE:
        s_transition(self, job, S_DONE, event, NULL);
        break;
    case OQ_REVIEW_RETRY:
        /* As a requeue: a fresh budget, and the tokens of the job's earlier
           deliveries die. */
        job->attempt = 0;
        job->gen++;
        job->returned = false;
        s_transition(self, job, S_READY, event, NULL);
        break;
    case OQ_REVIEW_FAIL: {
        s_enter_t how = {.error = error, .failed_at_ms = resolved_at_ms};
        s_transition(self, job, S_FAILED, event, &how);
        break;
    }
    }
    self->resolving = NULL;
    return 0;
}

/* A lease ended without an ack (ran out, or the worker is gone). */
static void s_lease_end(oq_engine_t *self, s_job_t *job, const char *why)
{
    if (job->attempt >= job->max_tries) {
        s_fail(self, job, s_format("%s on attempt %u of %u", why, job->attempt, job->max_tries));
        return;
    }
    job->returned = true;
    s_enter_t how = {.in_front = true};
    s_transition(self, job, S_READY, OQ_EVENT_RETURNED, &how);
}

/* ---- dispatch -------------------------------------------------------------- */

static s_type_t *s_type_get(oq_engine_t *self, oq_str_t name_str)
{
    char name[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(name_str, name, sizeof name);
    s_type_t *type = zhashx_lookup(self->types, name);
    if (type || self->type_count >= OQ_MAX_TYPES)
        return type;
    type = calloc(1, sizeof *type);
    if (!type)
        return NULL;
    type->name = strdup(name);
    if (!type->name) {
        free(type);
        return NULL;
    }
    zhashx_insert(self->types, name, type);
    type->index = (uint32_t)self->type_count;
    self->type_list[self->type_count++] = type;
    return type;
}

/* Allocate a job for msg with the given id in queue q, held in the id map
   and still S_NEW, into *job_p. 0; 1 if the id is held already; -1 if
   memory runs out. Nothing is left behind unless it returns 0. */
static int s_job_new(oq_engine_t *self, const oq_job_msg_t *msg, uint64_t id, s_queue_t *q,
                     s_type_t *type, int64_t timeout_ms, s_job_t **job_p)
{
    s_job_t *job = calloc(1, sizeof *job + msg->payload_len);
    int64_t *backoff = NULL;
    if (msg->backoff_len) {
        backoff = malloc(msg->backoff_len * sizeof *backoff);
        if (backoff)
            memcpy(backoff, msg->backoff_ms, msg->backoff_len * sizeof *backoff);
    }
    if (!job || (msg->backoff_len && !backoff)) {
        free(job);
        free(backoff);
        return -1;
    }
    job->id = id;
    job->queue = q;
    job->type = type;
    job->priority = msg->priority;
    job->max_tries = msg->has_max_tries ? msg->max_tries : self->config.max_tries;
    job->timeout_ms = (uint32_t)timeout_ms;
    job->backoff_ms = backoff;
    job->backoff_len = (uint8_t)msg->backoff_len;
    job->payload_len = (uint32_t)msg->payload_len;
    if (msg->payload_len)
        memcpy(job->payload, msg->payload, msg->payload_len);
    oq_link_clear(&job->link);
    oq_link_clear(&job->lane_link);
    int rc = oq_idmap_insert(self->jobs, job->id, job);
    if (rc != 0) {
        s_job_free(job);
        return rc;
    }
    self->bytes += oq_engine_job_cost(job->payload_len, job->backoff_len);
    *job_p = job;
    return 0;
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

    if (oq_idmap_size(self->jobs) >= self->config.max_jobs)
        S_REFUSE(OQ_ERR_FULL, "the broker holds its maximum of %zu jobs", self->config.max_jobs);
    /* Refused before the limit, not after: the bytes held never pass it. */
    uint64_t cost = oq_engine_job_cost(msg->payload_len, msg->backoff_len);
    if (self->bytes + cost > self->config.max_bytes)
        S_REFUSE(OQ_ERR_FULL,
                 "the broker holds %llu bytes of jobs; this one needs %llu more (a %zu-byte "
                 "payload and %d bytes per job) and the limit is %llu (--max-bytes)",
                 (unsigned long long)self->bytes, (unsigned long long)cost, msg->payload_len,
                 OQ_JOB_OVERHEAD_BYTES, (unsigned long long)self->config.max_bytes);
    char qname[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(msg->queue, qname, sizeof qname);
    /* Check before creating anything: a refused dispatch leaves no queue behind. */
    s_queue_t *q = s_queue_get(self, qname, false);
    int64_t retry_after_ms = q ? q->retry_after_ms : self->config.retry_after_ms;
    int64_t timeout_ms =
        msg->has_timeout ? msg->timeout_ms : (q ? q->timeout_ms : self->config.timeout_ms);
    if (s_check_rule(self, qname, timeout_ms, retry_after_ms, reason, reason_len) < 0) {
        *code = OQ_ERR_TIMEOUT_RULE;
        return -1;
    }
    if (!q && !(q = s_queue_get(self, qname, true)))
        S_REFUSE(OQ_ERR_FULL,
                 "cannot create queue \"%s\": the broker holds its maximum of %d queues", qname,
                 OQ_MAX_QUEUES);
    s_type_t *type = s_type_get(self, msg->type);
    if (!type)
        S_REFUSE(OQ_ERR_FULL, "the broker knows its maximum of %d job types", OQ_MAX_TYPES);
    s_job_t *job;
    if (s_job_new(self, msg, self->next_id, q, type, timeout_ms, &job) != 0)
        S_REFUSE(OQ_ERR_INTERNAL, "out of memory");
    self->next_id++;
    q->dispatched++;
    job->dispatched_ms = (uint32_t)s_now(self);
    job->timed = 1;
    s_enter_t how = {.dispatch = msg};
    if (msg->has_delay && msg->delay_ms > 0) {
        how.until_ms = s_now(self) + msg->delay_ms;
        s_transition(self, job, S_DELAYED, OQ_EVENT_DISPATCHED, &how);
    } else {
        s_transition(self, job, S_READY, OQ_EVENT_DISPATCHED, &how);
    }
    *id = job->id;
    return 0;
#undef S_REFUSE
}

/* ---- workers ----------------------------------------------------------------- */

static void s_hex(const void *data, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *b = data;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * len] = 0;
}

oq_worker_t *oq_engine_worker_find(oq_engine_t *self, const void *identity, size_t len)
{
    if (len == 0 || len > 255)
        return NULL;
    char key[513];
    s_hex(identity, len, key);
    return zhashx_lookup(self->workers, key);
}

oq_worker_t *oq_engine_worker_add(oq_engine_t *self, const void *identity, size_t len,
                                  oq_str_t name, uint32_t pid)
{
    if (len == 0 || len > 255 || zhashx_size(self->workers) >= OQ_MAX_WORKERS)
        return NULL;
    oq_worker_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    memcpy(w->identity, identity, len);
    w->identity_len = len;
    s_hex(identity, len, w->key);
    oq_str_copy(name, w->name, sizeof w->name);
    w->pid = pid;
    w->last_seen_ms = s_now(self);
    w->status = OQ_STATUS_READY; /* until it says otherwise (a worker may never) */
    w->status_since_ms = w->last_seen_ms;
    oq_list_init(&w->leases);
    oq_link_clear(&w->waiting);
    oq_list_push_back(&self->workers_all, &w->all);
    zhashx_insert(self->workers, w->key, w);
    self->any_type_workers++; /* until its route names types */
    return w;
}

int oq_engine_worker_route(oq_engine_t *self, oq_worker_t *w, const msgpack_object *types,
                           const msgpack_object *queues, char *reason, size_t reason_len)
{
    if (w->routed)
        return 0; /* the first ready's lists hold for the connection's life */
    uint32_t ntypes = oq_proto_list_size(types), nqueues = oq_proto_list_size(queues);
    s_type_t **tv = ntypes ? calloc(ntypes, sizeof *tv) : NULL;
    uint64_t *bits = ntypes ? calloc(S_TYPE_WORDS, sizeof *bits) : NULL;
    s_queue_t **qv = nqueues ? calloc(nqueues, sizeof *qv) : NULL;
    if ((ntypes && (!tv || !bits)) || (nqueues && !qv))
        goto oom;
    uint32_t nt = 0;
    for (uint32_t i = 0; i < ntypes; i++) {
        s_type_t *t = s_type_get(self, oq_proto_list_at(types, i));
        if (!t) {
            snprintf(reason, reason_len, "the broker knows its maximum of %d job types",
                     OQ_MAX_TYPES);
            goto refuse;
        }
        if (bits[t->index / 64] & (1ULL << (t->index % 64)))
            continue; /* named twice */
        bits[t->index / 64] |= 1ULL << (t->index % 64);
        tv[nt++] = t;
    }
    uint32_t nq = 0;
    for (uint32_t i = 0; i < nqueues; i++) {
        char name[OQ_MAX_NAME_LEN + 1];
        oq_str_copy(oq_proto_list_at(queues, i), name, sizeof name);
        s_queue_t *q = s_queue_get(self, name, true);
        if (!q) {
            snprintf(reason, reason_len,
                     "cannot create queue \"%s\": the broker holds its maximum of %d queues", name,
                     OQ_MAX_QUEUES);
            goto refuse;
        }
        bool seen = false;
        for (uint32_t k = 0; k < nq; k++)
            seen |= qv[k] == q;
        if (!seen)
            qv[nq++] = q;
    }
    w->routed = true;
    if (ntypes) {
        w->types = tv;
        w->type_count = nt;
        w->type_bits = bits;
        for (uint32_t i = 0; i < nt; i++)
            tv[i]->workers++;
        self->any_type_workers--;
    }
    w->queues = qv;
    w->queue_count = nq;
    return 0;
oom:
    snprintf(reason, reason_len, "out of memory");
refuse:
    free(tv);
    free(bits);
    free(qv);
    return -1;
}

void oq_engine_worker_seen(oq_engine_t *self, oq_worker_t *worker)
{
    worker->last_seen_ms = s_now(self);
}

void oq_engine_worker_credit(oq_engine_t *self, oq_worker_t *worker, uint32_t credit)
{
    if (worker->draining || credit == 0)
        return;
    uint64_t total = (uint64_t)worker->credit + credit;
    worker->credit = total > OQ_MAX_CREDIT ? OQ_MAX_CREDIT : (uint32_t)total;
    if (!oq_list_linked(&worker->waiting))
        oq_list_push_back(&self->waiting, &worker->waiting);
}

void oq_engine_worker_resume(oq_engine_t *self, oq_worker_t *worker)
{
    (void)self;
    worker->draining = false;
}

void oq_engine_worker_status(oq_engine_t *self, oq_worker_t *worker, oq_worker_status_t status,
                             int64_t since_ms, oq_str_t error)
{
    int64_t now = s_now(self);
    if (status != worker->status)
        oq_info("worker %s (pid %u) is %s%s%.*s", worker->key, worker->pid,
                oq_proto_status_name(status), error.len ? ": " : "", (int)error.len,
                error.ptr ? error.ptr : "");
    worker->status = status;
    worker->status_since_ms = now - (since_ms > 0 ? since_ms : 0);
    free(worker->status_error);
    worker->status_error = NULL;
    if (status == OQ_STATUS_UNAVAILABLE) {
        worker->status_error = malloc(error.len + 1);
        if (worker->status_error)
            oq_str_copy(error, worker->status_error, error.len + 1);
        /* A paused worker takes nothing until its next ready gives credit,
           whatever credit it had: its jobs would only come back. */
        worker->credit = 0;
        if (oq_list_linked(&worker->waiting))
            oq_list_remove(&worker->waiting);
    }
}

size_t oq_engine_workers_unavailable(const oq_engine_t *self)
{
    size_t n = 0;
    for (oq_link_t *node = self->workers_all.next; node != &self->workers_all; node = node->next)
        n += oq_container_of(node, oq_worker_t, all)->status == OQ_STATUS_UNAVAILABLE;
    return n;
}

void oq_engine_worker_drain(oq_engine_t *self, oq_worker_t *worker)
{
    worker->draining = true;
    worker->credit = 0;
    if (oq_list_linked(&worker->waiting))
        oq_list_remove(&worker->waiting);
}

void oq_engine_worker_remove(oq_engine_t *self, oq_worker_t **worker_p, const char *reason)
{
    oq_worker_t *w = *worker_p;
    if (!w)
        return;
    if (w->leased)
        oq_info("worker %s (pid %u) gone (%s): giving back %u leased job(s)", w->key, w->pid,
                reason, w->leased);
    else
        oq_debug("worker %s (pid %u) gone (%s)", w->key, w->pid, reason);
    char why[160];
    snprintf(why, sizeof why, "worker died (%s)", reason);
    while (!oq_list_empty(&w->leases)) {
        s_job_t *job = oq_container_of(w->leases.next, s_job_t, link);
        s_lease_end(self, job, why);
    }
    if (oq_list_linked(&w->waiting))
        oq_list_remove(&w->waiting);
    oq_list_remove(&w->all);
    zhashx_delete(self->workers, w->key);
    if (w->types) {
        for (uint32_t i = 0; i < w->type_count; i++)
            w->types[i]->workers--;
    } else {
        self->any_type_workers--;
    }
    free(w->types);
    free(w->type_bits);
    free(w->queues);
    free(w->status_error);
    free(w);
    *worker_p = NULL;
}

size_t oq_engine_reap_workers(oq_engine_t *self, int64_t silence_ms)
{
    int64_t now = s_now(self);
    size_t removed = 0;
    oq_link_t *node = self->workers_all.next;
    while (node != &self->workers_all) {
        oq_worker_t *w = oq_container_of(node, oq_worker_t, all);
        node = node->next;
        if (now - w->last_seen_ms > silence_ms) {
            char why[64];
            snprintf(why, sizeof why, "silent for %lld ms", (long long)(now - w->last_seen_ms));
            oq_engine_worker_remove(self, &w, why);
            removed++;
            self->workers_dead++;
        }
    }
    return removed;
}

static void s_worker_view(const oq_engine_t *self, const oq_worker_t *w, oq_worker_view_t *v)
{
    v->identity = w->identity;
    v->identity_len = w->identity_len;
    v->name = w->name;
    v->pid = w->pid;
    v->credit = w->credit;
    v->leased = w->leased;
    v->idle_ms = s_now(self) - w->last_seen_ms;
    v->type_count = w->types ? w->type_count : 0;
    v->queue_count = w->queues ? w->queue_count : 0;
    v->status = w->status;
    v->status_ms = s_now(self) - w->status_since_ms;
    v->status_error = w->status_error ? w->status_error : "";
    v->worker_ = w;
}

const char *oq_engine_worker_type(const oq_worker_view_t *view, uint32_t i)
{
    const oq_worker_t *w = view->worker_;
    assert(i < w->type_count);
    return w->types[i]->name;
}

const char *oq_engine_worker_queue(const oq_worker_view_t *view, uint32_t i)
{
    const oq_worker_t *w = view->worker_;
    assert(i < w->queue_count);
    return w->queues[i]->name;
}

void oq_engine_worker_each(oq_engine_t *self, void (*fn)(void *ctx, const oq_worker_view_t *w),
                           void *ctx)
{
    for (oq_link_t *n = self->workers_all.next; n != &self->workers_all; n = n->next) {
        oq_worker_view_t view;
        s_worker_view(self, oq_container_of(n, oq_worker_t, all), &view);
        fn(ctx, &view);
    }
}

size_t oq_engine_worker_count(const oq_engine_t *self)
{
    return zhashx_size(self->workers);
}

/* ---- deliveries ---------------------------------------------------------------- */

static void s_job_view(const oq_engine_t *self, const s_job_t *job, oq_job_view_t *v)
{
    v->id = job->id;
    v->state = (oq_job_state_t)job->state;
    v->type = job->type->name;
    v->queue = job->queue->name;
    v->payload = job->payload;
    v->payload_len = job->payload_len;
    v->attempt = job->attempt;
    v->max_tries = job->max_tries;
    v->timeout_ms = job->timeout_ms;
    v->backoff_ms = job->backoff_ms;
    v->backoff_len = job->backoff_len;
    v->priority = job->priority;
    v->lease = job->attempt ? s_token(self, job->id, job->attempt, job->gen) : 0;
    bool failed = job->state == S_FAILED || job->state == S_REVIEW;
    v->error = failed ? job->u.f.error : NULL;
    v->failed_at_ms = failed ? job->u.f.failed_at_ms : 0;
    v->resolution = NULL;
    v->not_before_ms = 0;
    if (job->state == S_DELAYED) {
        /* The timer runs on the monotonic clock; outside the process only
           wall-clock time means anything. */
        int64_t left_ms = job->u.t.timer.deadline_ms - s_now(self);
        v->not_before_ms = oq_clock_wall_ms(self->clock) + (left_ms > 0 ? left_ms : 0);
    }
}

static bool s_handles(const oq_worker_t *w, const s_type_t *t)
{
    if (w->types)
        return (w->type_bits[t->index / 64] >> (t->index % 64)) & 1;
    for (uint32_t i = 0; i < w->refused_count; i++)
        if (w->refused[i] == t)
            return false;
    return true;
}

/* The better of two ready jobs of one queue: the one its ready list holds first. */
static bool s_before(const s_job_t *a, const s_job_t *b)
{
    return a->priority > b->priority || (a->priority == b->priority && a->ready_seq < b->ready_seq);
}

/* The job w should take from q next, or NULL. */
static s_job_t *s_pick_in(const oq_engine_t *self, const oq_worker_t *w, s_queue_t *q)
{
    (void)self;
    if (!w->types) {
        /* Every type: the queue's head, past the few types it handed back
           (at most OQ_MAX_PICK_SKIP jobs looked at). */
        size_t looked = 0;
        for (oq_link_t *n = q->ready.next; n != &q->ready && looked < OQ_MAX_PICK_SKIP;
             n = n->next, looked++) {
            s_job_t *job = oq_container_of(n, s_job_t, link);
            if (s_handles(w, job->type))
                return job;
        }
        return NULL;
    }
    s_job_t *best = NULL;
    for (oq_link_t *n = q->lanes.next; n != &q->lanes; n = n->next) {
        s_lane_t *lane = oq_container_of(n, s_lane_t, active);
        if (!s_handles(w, lane->type))
            continue;
        s_job_t *head = oq_container_of(lane->ready.next, s_job_t, lane_link);
        if (!best || s_before(head, best))
            best = head;
    }
    return best;
}

/* The job w should take next: from its queues in their order, or, if it
   named none, from the queues with ready jobs round-robin. */
static s_job_t *s_pick(oq_engine_t *self, oq_worker_t *w)
{
    if (w->queues) {
        for (uint32_t i = 0; i < w->queue_count; i++) {
            s_job_t *job = s_pick_in(self, w, w->queues[i]);
            if (job)
                return job;
        }
        return NULL;
    }
    for (oq_link_t *n = self->active.next; n != &self->active; n = n->next) {
        s_queue_t *q = oq_container_of(n, s_queue_t, active);
        s_job_t *job = s_pick_in(self, w, q);
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
        s_job_t *job = w->idle_epoch == self->ready_epoch ? NULL : s_pick(self, w);
        if (!job) {
            w->idle_epoch = self->ready_epoch;
            oq_list_push_back(&idle, &w->waiting);
            continue;
        }
        s_queue_t *q = job->queue;
        if (--w->credit > 0)
            oq_list_push_back(&self->waiting, &w->waiting);

        bool redelivery = job->returned;
        job->attempt++;
        job->returned = false;
        s_enter_t how = {.until_ms = s_now(self) + q->retry_after_ms, .worker = w};
        s_transition(self, job, S_LEASED, OQ_EVENT_LEASED, &how);

        oq_worker_view_t wv;
        oq_job_view_t jv;
        s_worker_view(self, w, &wv);
        s_job_view(self, job, &jv);
        if (deliver(ctx, &wv, &jv) < 0) {
            /* Never left the broker: not an attempt, not a redelivery. */
            job->attempt--;
            job->returned = redelivery;
            s_enter_t back = {.in_front = true};
            s_transition(self, job, S_READY, OQ_EVENT_RETURNED, &back);
            oq_engine_worker_remove(self, &w, "unreachable");
            continue;
        }
        /* Reported only now that the job is out: a lease the worker never
           got must not raise the attempt count a restart would restore. */
        s_notify(self, OQ_EVENT_LEASED, job, NULL);
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

/* ---- acks ------------------------------------------------------------------------ */

static int64_t s_backoff_ms(const oq_engine_t *self, const s_job_t *job)
{
    if (!job->backoff_ms)
        return self->config.backoff_ms;
    uint32_t step = job->attempt - 1;
    if (step >= job->backoff_len)
        step = job->backoff_len - 1;
    return job->backoff_ms[step];
}

/* A worker handed a job back because it does not handle its type: send it
   no more of that type. */
static void s_refuse_type(oq_engine_t *self, oq_worker_t *w, s_type_t *t)
{
    if (w->types) {
        for (uint32_t i = 0; i < w->type_count; i++) {
            if (w->types[i] == t) {
                w->types[i] = w->types[--w->type_count];
                w->type_bits[t->index / 64] &= ~(1ULL << (t->index % 64));
                t->workers--;
                break;
            }
        }
    } else if (s_handles(w, t) && w->refused_count < OQ_MAX_REFUSED_TYPES) {
        w->refused[w->refused_count++] = t;
    }
    oq_info("worker %s (pid %u) handed back a job of type %s: it is sent no more of them", w->key,
            w->pid, t->name);
    (void)self;
}

oq_ack_effect_t oq_engine_ack(oq_engine_t *self, oq_worker_t *worker, const oq_ack_msg_t *ack)
{
    if (worker) {
        oq_engine_worker_seen(self, worker);
        oq_engine_worker_credit(self, worker, ack->credit);
    }
    s_job_t *job = oq_idmap_get(self->jobs, ack->id);
    if (!job) {
        s_recent_t *done = oq_idmap_get(self->recent_index, ack->id);
        if (!done) {
            self->unknown_acks++;
            return OQ_ACK_IGNORED;
        }
        if (!s_fenced_ok(self, done->id, done->attempt, done->gen, ack->attempt, ack->has_lease,
                         ack->lease)) {
            self->fenced_acks++;
            return OQ_ACK_FENCED;
        }
        done->queue->ignored_acks++;
        uint32_t bit = ack->attempt <= S_COUNTED_ATTEMPTS ? 1u << (ack->attempt - 1) : 0;
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
    if (!s_fenced_ok(self, job->id, job->attempt, job->gen, ack->attempt, ack->has_lease,
                     ack->lease)) {
        self->fenced_acks++;
        return OQ_ACK_FENCED;
    }
    s_queue_t *q = job->queue;
    bool current = job->state == S_LEASED && job->attempt == ack->attempt;

    if (ack->outcome == OQ_OUTCOME_OK) {
        /* Whoever finishes first completes the job: the effect is guarded
           by the database, so an earlier delivery's ok is as good as the
           current one's, and the current holder's later ack is ignored. */
        job->type->done++;
        if (job->timed)
            oq_histogram_observe(&q->latency,
                                 (int64_t)(uint32_t)((uint32_t)s_now(self) - job->dispatched_ms) *
                                     1000);
        if (ack->result == OQ_RESULT_APPLIED)
            job->type->applied++;
        if (ack->result == OQ_RESULT_ALREADY_APPLIED) {
            q->duplicates++;
            job->type->duplicates++;
        }
        if (!current)
            q->late_acks++;
        uint64_t id = job->id;
        char note[96];
        snprintf(note, sizeof note, "completed by the ok of an earlier delivery (attempt %u)",
                 ack->attempt);
        /* A job in review leaves it by a decision; an ok that proves the
           effect is one, and is remembered as such. */
        if (job->state != S_REVIEW ||
            s_resolve(self, job, OQ_REVIEW_DONE, note, oq_clock_wall_ms(self->clock), false) < 0)
            s_transition(self, job, S_DONE, OQ_EVENT_DONE, NULL);
        s_recent_t *recent = oq_idmap_get(self->recent_index, id);
        if (recent && ack->attempt <= S_COUNTED_ATTEMPTS)
            recent->counted |= 1u << (ack->attempt - 1);
        return current ? OQ_ACK_APPLIED : OQ_ACK_LATE;
    }
    if (!current) {
        q->ignored_acks++;
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
            s_refuse_type(self, worker, job->type);
        q->returned++;
        job->attempt--;
        job->returned = false;
        if (ack->has_delay && ack->delay_ms > 0) {
            s_enter_t how = {.until_ms = s_now(self) + ack->delay_ms};
            s_transition(self, job, S_DELAYED, OQ_EVENT_RETRY, &how);
        } else {
            s_enter_t how = {.in_front = true};
            s_transition(self, job, S_READY, OQ_EVENT_RETRY, &how);
        }
        return OQ_ACK_APPLIED;
    }
    char error[OQ_MAX_ERROR_LEN + 1];
    if (ack->outcome == OQ_OUTCOME_TIMEOUT && ack->error.len == 0)
        snprintf(error, sizeof error, "timed out after %.3g s", job->timeout_ms / 1000.0);
    else
        oq_str_copy(ack->error, error, sizeof error);

    if (ack->outcome == OQ_OUTCOME_FAIL) {
        s_fail(self, job, strdup(error));
        return OQ_ACK_APPLIED;
    }
    if (ack->outcome == OQ_OUTCOME_REVIEW) {
        s_review(self, job, strdup(error));
        return OQ_ACK_APPLIED;
    }
    q->retried++;
    if (job->attempt >= job->max_tries) {
        s_fail(
            self, job,
            s_format("%s (attempt %u of %u, no tries left)", error, job->attempt, job->max_tries));
        return OQ_ACK_APPLIED;
    }
    /* A release: the handler chose the delay; it still used a try. */
    int64_t wait_ms = ack->outcome == OQ_OUTCOME_RETRY && ack->has_delay ? ack->delay_ms
                                                                         : s_backoff_ms(self, job);
    if (wait_ms == 0) {
        s_transition(self, job, S_READY, OQ_EVENT_RETRY, NULL);
    } else {
        s_enter_t how = {.until_ms = s_now(self) + wait_ms};
        s_transition(self, job, S_DELAYED, OQ_EVENT_RETRY, &how);
    }
    return OQ_ACK_APPLIED;
}

int oq_engine_touch(oq_engine_t *self, oq_worker_t *worker, const oq_ack_msg_t *touch)
{
    if (worker)
        oq_engine_worker_seen(self, worker);
    s_job_t *job = oq_idmap_get(self->jobs, touch->id);
    if (!job || job->state != S_LEASED || job->attempt != touch->attempt || !worker ||
        job->u.t.worker != worker ||
        !s_fenced_ok(self, job->id, job->attempt, job->gen, touch->attempt, touch->has_lease,
                     touch->lease)) {
        self->stale_touches++;
        return -1;
    }
    /* A fresh lease of retry_after from now. The worker restarts its
       watchdog at now + timeout as it sends this, and timeout is shorter
       than retry_after by the margin, so the lease still outlasts the
       handler's time limit. */
    oq_heap_remove(self->timers, &job->u.t.timer);
    if (oq_heap_push(self->timers, &job->u.t.timer, s_now(self) + job->queue->retry_after_ms) < 0)
        oq_error("job %llu: no memory for its lease timer; it ends with its worker",
                 (unsigned long long)job->id);
    return 0;
}

/* ---- deadlines ----------------------------------------------------------------- */

size_t oq_engine_tick(oq_engine_t *self)
{
    int64_t now = s_now(self);
    size_t processed = 0;
    oq_heap_node_t *node;
    while ((node = oq_heap_pop_due(self->timers, now)) != NULL) {
        s_job_t *job = oq_container_of(node, s_job_t, u.t.timer);
        if (job->state == S_DELAYED) {
            s_transition(self, job, S_READY, OQ_EVENT_DUE, NULL);
        } else {
            assert(job->state == S_LEASED);
            char why[96];
            snprintf(why, sizeof why, "lease expired after %.3g s",
                     job->queue->retry_after_ms / 1000.0);
            oq_info("job %llu type=%s: %s on attempt %u", (unsigned long long)job->id,
                    job->type->name, why, job->attempt);
            job->queue->expired++;
            s_lease_end(self, job, why);
        }
        processed++;
    }
    return processed;
}

int64_t oq_engine_next_deadline(const oq_engine_t *self)
{
    const oq_heap_node_t *top = oq_heap_peek(self->timers);
    return top ? top->deadline_ms : -1;
}

/* ---- inspection ------------------------------------------------------------------- */

size_t oq_engine_queue_count(const oq_engine_t *self)
{
    return self->queue_count;
}

void oq_engine_queue_stats(const oq_engine_t *self, size_t i, oq_queue_stats_t *s)
{
    assert(i < self->queue_count);
    const s_queue_t *q = self->queues[i];
    s->name = q->name;
    s->retry_after_ms = q->retry_after_ms;
    s->timeout_ms = q->timeout_ms;
    s->ready = q->count[S_READY];
    s->delayed = q->count[S_DELAYED];
    s->leased = q->count[S_LEASED];
    s->failed = q->count[S_FAILED];
    s->review = q->count[S_REVIEW];
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
    const s_type_t *t = self->type_list[i];
    stats->name = t->name;
    stats->done = t->done;
    stats->applied = t->applied;
    stats->duplicates = t->duplicates;
    stats->failed = t->failed;
    stats->ready = t->ready;
    stats->workers = t->workers + self->any_type_workers;
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
    return oq_idmap_size(self->jobs);
}

size_t oq_engine_failed_each(oq_engine_t *self, const char *queue, size_t limit,
                             void (*fn)(void *ctx, const oq_job_view_t *job), void *ctx)
{
    size_t total = 0;
    for (size_t i = 0; i < self->queue_count; i++) {
        s_queue_t *q = self->queues[i];
        if (queue && strcmp(queue, q->name) != 0)
            continue;
        for (oq_link_t *n = q->failed.next; n != &q->failed; n = n->next) {
            if (total < limit) {
                oq_job_view_t view;
                s_job_view(self, oq_container_of(n, s_job_t, link), &view);
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

static bool s_job_failed_before(const s_job_t *a, const s_job_t *b)
{
    return s_failed_before(a->u.f.failed_at_ms, a->id, b->u.f.failed_at_ms, b->id);
}

/* The page is chosen in one pass over the failed jobs: a max-heap (by the
   order above) of the limit first jobs after the cursor, then sorted.
   O(n log limit), with n the failed jobs, for any page. */
static void s_sift_down(const s_job_t **heap, size_t n, size_t i)
{
    for (;;) {
        size_t big = i, l = 2 * i + 1, r = l + 1;
        if (l < n && s_job_failed_before(heap[big], heap[l]))
            big = l;
        if (r < n && s_job_failed_before(heap[big], heap[r]))
            big = r;
        if (big == i)
            return;
        const s_job_t *t = heap[i];
        heap[i] = heap[big];
        heap[big] = t;
        i = big;
    }
}

static void s_sift_up(const s_job_t **heap, size_t i)
{
    while (i > 0 && s_job_failed_before(heap[(i - 1) / 2], heap[i])) {
        const s_job_t *t = heap[i];
        heap[i] = heap[(i - 1) / 2];
        heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

int oq_engine_failed_cursor(const oq_engine_t *self, uint64_t id, oq_failed_cursor_t *cursor)
{
    const s_job_t *job = oq_idmap_get(self->jobs, id);
    if (!job || (job->state != S_FAILED && job->state != S_REVIEW))
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
    const s_job_t *heap[OQ_MAX_FAILED_LIST];
    size_t n = 0, total = 0, above = 0;
    for (size_t i = 0; i < self->queue_count; i++) {
        s_queue_t *q = self->queues[i];
        if (queue && strcmp(queue, q->name) != 0)
            continue;
        oq_link_t *list = review ? &q->review : &q->failed;
        for (oq_link_t *l = list->next; l != list; l = l->next) {
            const s_job_t *job = oq_container_of(l, s_job_t, link);
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
        const s_job_t *t = heap[0];
        heap[0] = heap[end - 1];
        heap[end - 1] = t;
        s_sift_down(heap, end - 1, 0);
    }
    for (size_t i = 0; i < n; i++) {
        oq_job_view_t view;
        s_job_view(self, heap[i], &view);
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
    s_job_t *job = oq_idmap_get(self->jobs, id);
    if (job && job->state == S_REVIEW) {
        if (s_resolve(self, job, action, note ? note : "", oq_clock_wall_ms(self->clock), false) <
            0) {
            *why = OQ_REFUSED_STATE;
            snprintf(reason, reason_len, "out of memory resolving job %llu; nothing changed",
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
            r->note, job ? "; it is " : "", job ? s_state_names[job->state] : "");
    else
        snprintf(reason, reason_len,
                 "job %llu is not in review and has no resolution on record%s%s",
                 (unsigned long long)id, job ? "; it is " : " (the broker does not hold it)",
                 job ? s_state_names[job->state] : "");
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
    const s_job_t *job = oq_idmap_get(self->jobs, id);
    return job ? s_state_names[job->state] : NULL;
}

int oq_engine_job_view(const oq_engine_t *self, uint64_t id, oq_job_view_t *view)
{
    const s_job_t *job = oq_idmap_get(self->jobs, id);
    if (!job)
        return -1;
    s_job_view(self, job, view);
    return 0;
}

void oq_engine_job_each(oq_engine_t *self, void (*fn)(void *ctx, const oq_job_view_t *job),
                        void *ctx)
{
    oq_job_view_t view;
    for (oq_link_t *n = self->workers_all.next; n != &self->workers_all; n = n->next) {
        oq_worker_t *w = oq_container_of(n, oq_worker_t, all);
        for (oq_link_t *l = w->leases.next; l != &w->leases; l = l->next) {
            s_job_view(self, oq_container_of(l, s_job_t, link), &view);
            fn(ctx, &view);
        }
    }
    for (size_t i = 0; i < self->queue_count; i++) {
        s_queue_t *q = self->queues[i];
        for (oq_link_t *l = q->ready.next; l != &q->ready; l = l->next) {
            s_job_view(self, oq_container_of(l, s_job_t, link), &view);
            fn(ctx, &view);
        }
    }
    for (size_t i = 0; i < oq_heap_size(self->timers); i++) {
        s_job_t *job = oq_container_of(oq_heap_at(self->timers, i), s_job_t, u.t.timer);
        if (job->state != S_DELAYED)
            continue;
        s_job_view(self, job, &view);
        fn(ctx, &view);
    }
    for (size_t i = 0; i < self->queue_count; i++) {
        s_queue_t *q = self->queues[i];
        for (oq_link_t *l = q->failed.next; l != &q->failed; l = l->next) {
            s_job_view(self, oq_container_of(l, s_job_t, link), &view);
            fn(ctx, &view);
        }
    }
    for (size_t i = 0; i < self->queue_count; i++) {
        s_queue_t *q = self->queues[i];
        for (oq_link_t *l = q->review.next; l != &q->review; l = l->next) {
            s_job_view(self, oq_container_of(l, s_job_t, link), &view);
            fn(ctx, &view);
        }
    }
}

uint64_t oq_engine_next_id(const oq_engine_t *self)
{
    return self->next_id;
}

/* A failed job back to ready with a fresh budget. A new generation: the
   tokens of the job's earlier deliveries die. */
static void s_requeue(oq_engine_t *self, s_job_t *job)
{
    job->attempt = 0;
    job->gen++;
    job->returned = false;
    s_transition(self, job, S_READY, OQ_EVENT_REQUEUED, NULL);
}

int oq_engine_requeue(oq_engine_t *self, uint64_t id, char *reason, size_t reason_len)
{
    s_job_t *job = oq_idmap_get(self->jobs, id);
    if (!job || job->state != S_FAILED) {
        snprintf(reason, reason_len, "job %llu is not in the failed store%s",
                 (unsigned long long)id, job ? "" : " (it is done, or the broker never had it)");
        return -1;
    }
    /* A fresh budget: the operator decided the cause is fixed. */
    s_requeue(self, job);
    return 0;
}

/* ---- operator commands ------------------------------------------------------------ */

/* Why a job is refused by a command that wants another state: the state,
   and for a leased job why that matters. */
static int s_refuse(const s_job_t *job, uint64_t id, const char *wanted, oq_refusal_t *why,
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
    switch ((s_state_t)job->state) {
    case S_LEASED:
        snprintf(reason, reason_len,
                 "job %llu is leased (attempt %u of %u is running on a worker): its effect may "
                 "be under way, so it cannot be %s; wait for its outcome",
                 (unsigned long long)id, job->attempt, job->max_tries, wanted);
        break;
    case S_FAILED:
        snprintf(reason, reason_len,
                 "job %llu is failed: it cannot be %s (use 'onceq failed forget %llu' to delete "
                 "it, or 'onceq failed retry %llu' to run it again)",
                 (unsigned long long)id, wanted, (unsigned long long)id, (unsigned long long)id);
        break;
    default:
        snprintf(reason, reason_len, "job %llu is %s, not in the failed store: it cannot be %s",
                 (unsigned long long)id, s_state_names[job->state], wanted);
        break;
    }
    return -1;
}

int oq_engine_forget(oq_engine_t *self, uint64_t id, oq_refusal_t *why, char *reason,
                     size_t reason_len)
{
    s_job_t *job = oq_idmap_get(self->jobs, id);
    if (!job || job->state != S_FAILED)
        return s_refuse(job, id, "forgotten", why, reason, reason_len);
    s_transition(self, job, S_DONE, OQ_EVENT_FORGOTTEN, NULL);
    return 0;
}

/* Apply fn to every failed job of queue (NULL: all), oldest first within
   each queue; fn takes the job out of the failed list. */
static uint64_t s_each_failed(oq_engine_t *self, const char *queue,
                              void (*fn)(oq_engine_t *self, s_job_t *job))
{
    uint64_t count = 0;
    for (size_t i = 0; i < self->queue_count; i++) {
        s_queue_t *q = self->queues[i];
        if (queue && strcmp(queue, q->name) != 0)
            continue;
        while (!oq_list_empty(&q->failed)) {
            fn(self, oq_container_of(q->failed.next, s_job_t, link));
            count++;
        }
    }
    return count;
}

static void s_forget_one(oq_engine_t *self, s_job_t *job)
{
    s_transition(self, job, S_DONE, OQ_EVENT_FORGOTTEN, NULL);
}

uint64_t oq_engine_flush_failed(oq_engine_t *self, const char *queue)
{
    return s_each_failed(self, queue, s_forget_one);
}

uint64_t oq_engine_requeue_all(oq_engine_t *self, const char *queue)
{
    return s_each_failed(self, queue, s_requeue);
}

int oq_engine_cancel(oq_engine_t *self, uint64_t id, oq_refusal_t *why, char *reason,
                     size_t reason_len)
{
    s_job_t *job = oq_idmap_get(self->jobs, id);
    if (!job || (job->state != S_READY && job->state != S_DELAYED))
        return s_refuse(job, id, "cancelled", why, reason, reason_len);
    s_transition(self, job, S_DONE, OQ_EVENT_CANCELLED, NULL);
    return 0;
}

static void s_horizon_default(const oq_engine_t *self, const char *name, int64_t retry_after_ms,
                              oq_queue_horizon_t *h)
{
    h->name = name;
    h->retry_after_ms = retry_after_ms;
    h->max_tries = self->config.max_tries;
    h->backoff_ms = self->config.backoff_ms;
}

void oq_engine_default_horizon(const oq_engine_t *self, oq_queue_horizon_t *horizon)
{
    s_horizon_default(self, "*", self->config.retry_after_ms, horizon);
}

static void s_horizon_job(void *ctx, const oq_job_view_t *job)
{
    oq_engine_t *self = ((void **)ctx)[0];
    oq_queue_horizon_t *out = ((void **)ctx)[1];
    const s_queue_t *q = zhashx_lookup(self->queues_by_name, job->queue);
    oq_queue_horizon_t *h = &out[q->index];
    if (job->max_tries > h->max_tries)
        h->max_tries = job->max_tries;
    for (uint32_t k = 0; job->backoff_ms && k < job->backoff_len; k++)
        if (job->backoff_ms[k] > h->backoff_ms)
            h->backoff_ms = job->backoff_ms[k];
}

void oq_engine_horizons(oq_engine_t *self, oq_queue_horizon_t *out)
{
    for (size_t i = 0; i < self->queue_count; i++)
        s_horizon_default(self, self->queues[i]->name, self->queues[i]->retry_after_ms, &out[i]);
    void *ctx[2] = {self, out};
    oq_engine_job_each(self, s_horizon_job, ctx);
}

int64_t oq_engine_oldest_failed_ms(const oq_engine_t *self)
{
    int64_t oldest = 0;
    for (size_t i = 0; i < self->queue_count; i++) {
        const s_queue_t *q = self->queues[i];
        for (const oq_link_t *l = q->failed.next; l != &q->failed; l = l->next) {
            int64_t at = oq_container_of(l, const s_job_t, link)->u.f.failed_at_ms;
            if (oldest == 0 || at < oldest)
                oldest = at;
        }
    }
    return oldest;
}

/* ---- replay ---------------------------------------------------------------------- */

/* A job replay may change: held and not leased (replay leases nothing). */
static s_job_t *s_restored(oq_engine_t *self, uint64_t id)
{
    s_job_t *job = oq_idmap_get(self->jobs, id);
    return job && job->state != S_LEASED ? job : NULL;
}

/* Ready now, or delayed until a wall-clock time still to come. */
static void s_restore_timed(oq_engine_t *self, s_job_t *job, int64_t not_before_ms)
{
    int64_t left_ms = not_before_ms - oq_clock_wall_ms(self->clock);
    if (not_before_ms > 0 && left_ms > 0) {
        s_enter_t how = {.until_ms = s_now(self) + left_ms};
        s_transition(self, job, S_DELAYED, OQ_EVENT_RESTORED, &how);
    } else if (job->state != S_READY) {
        s_transition(self, job, S_READY, OQ_EVENT_RESTORED, NULL);
    }
}

int oq_engine_restore(oq_engine_t *self, const oq_job_msg_t *msg, int64_t not_before_ms,
                      char *reason, size_t reason_len)
{
    char qname[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(msg->queue, qname, sizeof qname);
    s_queue_t *q = s_queue_get(self, qname, true);
    s_type_t *type = q ? s_type_get(self, msg->type) : NULL;
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
    s_job_t *job;
    int rc = s_job_new(self, msg, msg->id, q, type, clamp ? longest_ms : timeout_ms, &job);
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
    s_job_t *job = s_restored(self, id);
    if (!job || job->state == S_FAILED || job->state == S_REVIEW)
        return -1;
    job->attempt = attempt;
    job->returned = true; /* its next delivery is a redelivery */
    s_restore_timed(self, job, 0);
    return 0;
}

int oq_engine_restore_retry(oq_engine_t *self, uint64_t id, uint32_t attempt, int64_t not_before_ms)
{
    s_job_t *job = s_restored(self, id);
    if (!job || job->state == S_FAILED || job->state == S_REVIEW)
        return -1;
    job->attempt = attempt;
    job->returned = false;
    s_restore_timed(self, job, not_before_ms);
    return 0;
}

int oq_engine_restore_failed(oq_engine_t *self, uint64_t id, uint32_t attempt, const char *error,
                             int64_t failed_at_ms)
{
    s_job_t *job = s_restored(self, id);
    if (!job || job->state == S_FAILED || job->state == S_REVIEW)
        return -1;
    char *copy = strdup(error ? error : "");
    if (!copy)
        return -1;
    job->attempt = attempt;
    s_enter_t how = {.error = copy, .failed_at_ms = failed_at_ms};
    s_transition(self, job, S_FAILED, OQ_EVENT_RESTORED, &how);
    return 0;
}

int oq_engine_restore_review(oq_engine_t *self, uint64_t id, uint32_t attempt, const char *reason,
                             int64_t reviewed_at_ms)
{
    s_job_t *job = s_restored(self, id);
    if (!job || job->state == S_FAILED || job->state == S_REVIEW)
        return -1;
    char *copy = strdup(reason ? reason : "");
    if (!copy)
        return -1;
    job->attempt = attempt;
    s_enter_t how = {.error = copy, .failed_at_ms = reviewed_at_ms};
    s_transition(self, job, S_REVIEW, OQ_EVENT_RESTORED, &how);
    return 0;
}

int oq_engine_restore_resolution(oq_engine_t *self, const oq_resolution_t *r)
{
    s_job_t *job = oq_idmap_get(self->jobs, r->id);
    if (job && job->state == S_REVIEW)
        return s_resolve(self, job, r->action, r->note, r->resolved_at_ms, true);
    return oq_review_log_add(self->reviews, r) ? 0 : -1;
}

int oq_engine_restore_done(oq_engine_t *self, uint64_t id)
{
    s_job_t *job = s_restored(self, id);
    if (!job)
        return -1;
    s_transition(self, job, S_DONE, OQ_EVENT_RESTORED, NULL);
    return 0;
}

int oq_engine_restore_forgotten(oq_engine_t *self, uint64_t id)
{
    s_job_t *job = s_restored(self, id);
    if (!job || job->state != S_FAILED)
        return -1;
    s_transition(self, job, S_DONE, OQ_EVENT_RESTORED, NULL);
    return 0;
}

int oq_engine_restore_cancelled(oq_engine_t *self, uint64_t id)
{
    s_job_t *job = s_restored(self, id);
    if (!job || job->state == S_FAILED)
        return -1;
    s_transition(self, job, S_DONE, OQ_EVENT_RESTORED, NULL);
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
        const s_queue_t *q = self->queues[i];
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

/* ---- metrics ------------------------------------------------------------------ */

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
