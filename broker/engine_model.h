/*  engine_model.h: the engine's data, shared by the files that make up the
    engine (engine.c and engine_*.c) and by nothing else: the rest of the
    broker sees only engine.h. A job, its queue, its type and its routing
    lane; a worker; the engine itself. Names with the oq_eng_ prefix are the
    engine's internals, shared between its parts; oq_engine_ names are its
    API.

    Every job is in exactly one state (oq_eng_state_t), changed only by
    oq_eng_transition (engine_jobs.h). A job holds one timer node in the
    deadline heap: its delay or backoff end while delayed, its lease end
    while leased, nothing otherwise. */
#ifndef ONCEQ_ENGINE_MODEL_H
#define ONCEQ_ENGINE_MODEL_H

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

#include "dedupe.h"
#include "engine.h"
#include "heap.h"
#include "histogram.h"
#include "idmap.h"
#include "idset.h"
#include "list.h"
#include "onceq/keys.h"
#include "onceq/limits.h"
#include "overlap.h"
#include "review_log.h"
#include "throttle.h"
#include "unique.h"

#define OQ_ENG_TYPE_WORDS ((OQ_MAX_TYPES + 63) / 64) /* a worker's type bitmap */

typedef enum {
    OQ_ENG_NEW = 0, /* allocated, not yet placed */
    OQ_ENG_READY,
    OQ_ENG_DELAYED,
    OQ_ENG_LEASED,
    OQ_ENG_FAILED,
    OQ_ENG_REVIEW,  /* outcome unknown: held for a person */
    OQ_ENG_WAITING, /* ready, but another job holds its overlap key (overlap.h) */
    OQ_ENG_DONE,    /* terminal: freed right after */
} oq_eng_state_t;

_Static_assert(OQ_ENG_READY == (int)OQ_STATE_READY && OQ_ENG_DELAYED == (int)OQ_STATE_DELAYED &&
                   OQ_ENG_LEASED == (int)OQ_STATE_LEASED && OQ_ENG_FAILED == (int)OQ_STATE_FAILED &&
                   OQ_ENG_REVIEW == (int)OQ_STATE_REVIEW,
               "the public states mirror the private ones");
_Static_assert(OQ_MAX_BACKOFF_STEPS <= UINT8_MAX, "backoff_len is a byte");
_Static_assert(OQ_MAX_TIMEOUT_MS <= UINT32_MAX, "timeout_ms is 32 bits");
_Static_assert(OQ_MAX_QUEUES <= UINT16_MAX + 1 && OQ_MAX_TYPES <= UINT16_MAX + 1,
               "a job names its queue and its type by a 16-bit index");
_Static_assert(OQ_MAX_PRIORITY <= INT16_MAX, "priority is 16 bits");
/* attempt never passes max_tries by more than one (a job restored leased
   on its last try is delivered once more), far below the 16-bit limit;
   restore refuses a record whose attempt does not fit. */
_Static_assert(OQ_MAX_TRIES_LIMIT < UINT16_MAX, "max_tries and attempt are 16 bits");
#define OQ_ENG_MAX_ATTEMPT UINT16_MAX

typedef struct oq_eng_queue {
    char *name;
    uint32_t index;              /* in engine->queues */
    oq_link_t lanes;             /* oq_eng_lane_t.active: its lanes with ready jobs */
    int64_t retry_after_ms;      /* lease length */
    int64_t timeout_ms;          /* default job timeout */
    oq_link_t failed;            /* failed jobs, oldest first */
    oq_link_t review;            /* jobs in review, oldest first */
    oq_link_t active;            /* in engine->active while it has ready jobs */
    uint64_t count[OQ_ENG_DONE]; /* jobs per state now (index by oq_eng_state_t) */
    uint64_t dispatched, done, retried, redelivered, late_acks, ignored_acks, duplicates;
    uint64_t cancelled;     /* ready or delayed jobs withdrawn by an operator */
    uint64_t returned;      /* deliveries handed back unrun (return, unavailable): no try used */
    uint64_t expired;       /* leases that ran out */
    oq_histogram_t latency; /* dispatch to done, of jobs dispatched in this run */
    uint64_t clamped;       /* restored jobs whose timeout broke the rule */
    int64_t clamped_longest_ms; /* the longest timeout among them */
} oq_eng_queue_t;

/* A job type, with the outcomes counted per type: how many duplicates the
   effect's unique guard absorbed is a question about a handler, not a queue. */
typedef struct {
    char *name;
    uint32_t index;    /* in engine->type_list */
    uint32_t workers;  /* connected workers that named this type */
    uint32_t refusing; /* connected workers that named no types but handed this one back */
    uint64_t ready;    /* jobs of this type ready now */
    uint64_t done, applied, duplicates, failed;
} oq_eng_type_t;

/* The ready jobs of one type in one queue, in the queue's order. A lane
   is made with the first job of its (queue, type) and lives as long as
   the engine, so a job becoming ready always has its lane. */
typedef struct {
    oq_eng_queue_t *queue;
    oq_eng_type_t *type;
    oq_link_t ready;  /* oq_eng_job_t.link of its ready jobs */
    oq_link_t active; /* in queue->lanes while ready is not empty */
    oq_link_t all;    /* in engine->lanes_all, for destroy */
} oq_eng_lane_t;

/* A job is one allocation: this header, its payload, and its own backoff
   steps if it has any (8-aligned behind the payload; oq_eng_job_backoff).
   The header is kept small because a broker holds up to a million of them
   and every byte of it is paid a million times: fields used only in some
   states share storage (the union), and one link serves whichever list
   the state puts the job on (a ready job is on its lane only). */
typedef struct oq_eng_job {
    uint64_t id;
    oq_link_t link; /* its lane's ready list, queue->failed, ->review, worker->leases */
    union {
        struct {
            int64_t seq; /* its place in the queue's order within a priority */
        } r;             /* ready */
        struct {
            oq_heap_node_t timer; /* delayed: its end; leased: the lease's end */
            oq_worker_t *worker;  /* leased only */
        } t;                      /* delayed, leased */
        struct {
            char *error; /* failed: the error that ended it; review: the handler's reason */
            int64_t failed_at_ms; /* failed, review: when it got there (wall clock) */
        } f;                      /* failed, review */
    } u;                          /* all zero while new and whenever a state is left */
    uint32_t payload_len;
    uint32_t timeout_ms;    /* at most OQ_MAX_TIMEOUT_MS, which fits */
    uint32_t gen;           /* requeues so far: part of the lease token */
    uint32_t dispatched_ms; /* engine clock at dispatch, truncated (differences wrap
                               right below 49 days), for the dispatch-to-done
                               histogram; valid if timed */
    uint16_t queue_index;   /* in engine->queues (oq_eng_job_queue) */
    uint16_t type_index;    /* in engine->type_list (oq_eng_job_type) */
    int16_t priority;       /* within +-OQ_MAX_PRIORITY */
    uint16_t attempt;       /* at most OQ_ENG_MAX_ATTEMPT */
    uint16_t max_tries;     /* at most OQ_MAX_TRIES_LIMIT */
    uint8_t backoff_len;    /* own backoff steps, at most OQ_MAX_BACKOFF_STEPS; 0: the default */
    uint8_t state : 4;      /* oq_eng_state_t */
    uint8_t returned : 1;   /* lease ended without an ack: next delivery is a redelivery */
    uint8_t timed : 1;      /* dispatched in this run (not restored): dispatched_ms holds */
    uint8_t payload[];      /* encoded msgpack map */
} oq_eng_job_t;

_Static_assert(OQ_ENG_DONE < 16, "state is 4 bits");

/* The header's budget: with a 100-byte payload a job is one 176-byte
   malloc chunk (glibc: the request plus 8, rounded up to 16). A byte more
   costs every queued 100-byte job 16 bytes. */
#define OQ_ENG_JOB_HEADER_BYTES 68
_Static_assert(offsetof(oq_eng_job_t, payload) <= OQ_ENG_JOB_HEADER_BYTES,
               "the job header grew past its budget");

/* Where a job's own backoff steps start: the first 8-aligned offset past
   its payload. */
static inline size_t oq_eng_job_backoff_at(size_t payload_len)
{
    return (offsetof(oq_eng_job_t, payload) + payload_len + 7) & ~(size_t)7;
}

/* The bytes of one job's allocation: header, payload, own backoff steps. */
static inline size_t oq_eng_job_bytes(size_t payload_len, size_t backoff_len)
{
    if (backoff_len == 0)
        return offsetof(oq_eng_job_t, payload) + payload_len;
    return oq_eng_job_backoff_at(payload_len) + backoff_len * sizeof(int64_t);
}

/* The job's own backoff steps (backoff_len of them), or NULL: the default. */
static inline int64_t *oq_eng_job_backoff(const oq_eng_job_t *job)
{
    if (job->backoff_len == 0)
        return NULL;
    return (int64_t *)((char *)job + oq_eng_job_backoff_at(job->payload_len));
}

/* A job recently done, remembered so that an ack arriving after it (the
   slower of two overlapping deliveries) is still attributed: it is counted
   as ignored, and its result as what it was: "applied" (the slower run may
   be the one that wrote the effect) or "already_applied" (a duplicate the
   unique guard absorbed). Each delivery's result is counted once: an ack a
   worker sends again after a reconnect is only ignored. A ring of
   OQ_RECENT_DONE_JOBS; the oldest is forgotten. */
typedef struct {
    uint64_t id; /* 0: empty slot */
    oq_eng_type_t *type;
    oq_eng_queue_t *queue;
    uint32_t attempt, gen; /* to check the token of a later ack */
    uint32_t counted;      /* bit a-1: the result of attempt a (<= 32) is counted */
} oq_eng_recent_t;

#define OQ_ENG_COUNTED_ATTEMPTS 32 /* bits of oq_eng_recent_t.counted */

/* A live job's decisions (oq_eng_decided): one bit per attempt in the
   value of engine->decided, the last bit for every attempt from this one
   on. */
#define OQ_ENG_DECIDED_ATTEMPTS 64

/* Generations before the current one in which an ack's token is looked
   for (oq_eng_stale_token), so that the worker of a delivery from before
   a requeue gets its credit back. */
#define OQ_ENG_STALE_GENERATIONS 8

/* The connected workers of one name (a host, a deployment), counted as
   they come, go and pause, so that stats summarises a fleet of any size
   in one entry per name. Freed with its last worker. */
typedef struct {
    char name[OQ_MAX_NAME_LEN + 1];
    uint32_t workers;     /* connected with this name */
    uint32_t unavailable; /* of them, paused (OQ_STATUS_UNAVAILABLE) */
    oq_link_t all;        /* in engine->names_all, in the order the names came */
} oq_eng_name_t;

struct oq_worker {
    uint8_t identity[256];
    size_t identity_len;
    char key[513];                   /* identity in hex, the workers table key */
    uint8_t curve_key[OQ_KEY_BYTES]; /* the CURVE key it registered with: its tokens' binding */
    bool has_key;                    /* false: no key (--insecure) */
    char name[OQ_MAX_NAME_LEN + 1];
    oq_eng_name_t *named; /* the workers of its name */
    uint32_t pid;
    uint64_t seq;    /* its place in registration order: the stats pages' cursor */
    uint32_t credit; /* jobs it may still be sent */
    bool draining;   /* credit stays 0 */
    int64_t last_seen_ms;
    oq_link_t leases; /* oq_eng_job_t.lease */
    uint32_t leased;
    /* Several deliveries per message (oq_engine_pump_many): how many this
       worker takes in one (1: one message each), and, during a pump, how
       many of its last leases and how many of their bytes (as the "jobs"
       message budget counts them) are not sent yet; it is then on the
       pump's sending list. */
    uint32_t jobs_per_msg;
    uint32_t unsent;
    size_t unsent_bytes;
    oq_link_t sending;
    oq_link_t waiting;     /* in engine->waiting while credit > 0 */
    oq_link_t all;         /* in engine->workers_all */
    bool routed;           /* the first ready's types and queues are taken */
    oq_eng_type_t **types; /* the types it named; NULL: every type */
    uint32_t type_count;
    uint64_t *type_bits;     /* the same as a bitmap by oq_eng_type_t.index */
    oq_eng_queue_t **queues; /* the queues it serves, in priority order; NULL: every queue */
    uint32_t queue_count;
    oq_eng_type_t *refused[OQ_MAX_REFUSED_TYPES]; /* handed back by a worker that named no types */
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
    oq_idset_t *jobs; /* every live job (oq_eng_job_t), by id */
    zhashx_t *queues_by_name;
    oq_eng_queue_t **queues; /* in creation order, for stats */
    size_t queue_count;
    zhashx_t *types;           /* name -> oq_eng_type_t */
    oq_eng_type_t **type_list; /* in creation order, for stats */
    size_t type_count;
    zhashx_t *workers;     /* hex identity -> oq_worker_t */
    oq_link_t workers_all; /* in registration order (oq_worker_t.seq ascending) */
    uint64_t worker_seq;   /* the last worker's seq */
    zhashx_t *names;       /* worker name -> oq_eng_name_t */
    oq_link_t names_all;   /* oq_eng_name_t.all */
    oq_link_t waiting;     /* workers with credit, served round-robin */
    oq_link_t active;      /* queues with ready jobs, served round-robin */
    uint64_t next_id;
    uint64_t unknown_acks;
    uint64_t bytes;         /* sum of the live jobs' costs, against config.max_bytes */
    uint64_t fenced_acks;   /* acks without a valid token: changed nothing */
    uint64_t stale_touches; /* touches of a lease not current or not the sender's */
    uint64_t workers_dead;  /* workers removed for their silence */
    uint8_t lease_key[OQ_LEASE_KEY_BYTES];
    oq_idmap_t *lanes;                /* (queue index + 1) << 32 | type index -> oq_eng_lane_t */
    oq_link_t lanes_all;              /* every lane, for destroy */
    int64_t seq_front, seq_back;      /* u.r.seq of the next front / back insertion */
    uint64_t ready_epoch;             /* counts entries to ready */
    uint32_t any_type_workers;        /* connected workers that named no types */
    oq_eng_recent_t *recent;          /* ring of recently done jobs */
    size_t recent_next;               /* slot the next done job takes */
    oq_idmap_t *recent_index;         /* id -> oq_eng_recent_t */
    oq_idmap_t *decided;              /* live job id -> its decisions (oq_eng_decided) */
    oq_engine_hooks_t hooks;          /* the observer; changed is NULL when none */
    oq_review_log_t *reviews;         /* resolutions remembered */
    const oq_resolution_t *resolving; /* the resolution being reported, or NULL */
    oq_dedupe_t *dispatch_ids;        /* dispatch_id digest -> its job, for the window */
    uint8_t dispatch_key[OQ_SIPHASH_KEY_BYTES]; /* digests dispatch ids */
    uint64_t dedupe_hits;                       /* dispatches answered with an earlier job */
    oq_unique_t *unique;                        /* unique keys (unique.h) */
    oq_overlap_t *overlap;                      /* overlap keys (overlap.h) */
    uint64_t unique_hits;                       /* dispatches answered with a unique key's holder */
    uint64_t outside_bytes; /* held beside the engine against max_bytes (waits, connections) */
    uint64_t dedupe_evicted_seen; /* oq_dedupe_evicted when last noted */
    uint64_t unique_evicted_seen; /* oq_unique_evicted when last noted */
    int64_t dedupe_shrunk_ms;     /* wall clock: an id was last forgotten early; 0: never */
    oq_throttle_t *memory_log;    /* a shrunken window is said once per interval */
    /* Batches (engine_batches.c): held ones by id ascending (ids only
       grow, so a new one is appended and a job's batch is found by
       binary search over the id ranges), settled ones in a ring. */
    struct oq_eng_batch **batches;
    size_t batch_count;
    oq_batch_view_t *batches_settled; /* OQ_RECENT_BATCHES slots, NULL until needed */
    size_t batches_settled_next, batches_settled_count;
    uint64_t batch_bytes;      /* held batches' costs, against max_bytes */
    oq_job_event_t restore_as; /* replay: what a restored move to done stands for */
    bool batch_firing;         /* a callback is being dispatched: do not fire within it */
    bool batches_due;          /* some batch or chain has a dispatch refused before (retry on
                                  tick) */
    oq_idmap_t *chains;        /* job id -> struct oq_eng_chain (engine_chains.c) */
    oq_link_t chains_all;      /* every chain held, for snapshots and settling */
    bool batches_held;         /* replaying: no callback is dispatched (oq_engine_batches_hold) */
};

/* A job's queue and type: queues and types are never removed, so their
   index, 2 bytes in the job where a pointer took 8, names them for good. */
static inline oq_eng_queue_t *oq_eng_job_queue(const oq_engine_t *self, const oq_eng_job_t *job)
{
    return self->queues[job->queue_index];
}

static inline oq_eng_type_t *oq_eng_job_type(const oq_engine_t *self, const oq_eng_job_t *job)
{
    return self->type_list[job->type_index];
}

/* How a job enters its new state (oq_eng_transition). */
typedef struct {
    int64_t until_ms;             /* OQ_ENG_DELAYED, OQ_ENG_LEASED: deadline */
    oq_worker_t *worker;          /* OQ_ENG_LEASED */
    bool in_front;                /* OQ_ENG_READY: given back after a lease ended */
    char *error;                  /* OQ_ENG_FAILED, OQ_ENG_REVIEW: taken over */
    int64_t failed_at_ms;         /* OQ_ENG_FAILED, OQ_ENG_REVIEW: 0 for now */
    const oq_job_msg_t *dispatch; /* OQ_EVENT_DISPATCHED: the request */
} oq_eng_enter_t;

#endif
