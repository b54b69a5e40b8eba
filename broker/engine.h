/*  engine.h: the broker's state without its sockets. Queues of jobs, the job
    state machine (ready, delayed, leased, done, failed, review), workers with their
    credit and leases, and every deadline, all driven by calls from the event
    loop and by an injected clock. Keeping the sockets out makes leases,
    redelivery and heartbeat deaths testable without a network or sleeps.

    The engine knows nothing of files either: every change of a job's state
    is reported to an observer (oq_engine_set_hooks), which is how the journal
    sees them, and a journal is read back through the restore calls below. */
#ifndef ONCEQ_ENGINE_H
#define ONCEQ_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedupe.h"
#include "histogram.h"
#include "onceq/clock.h"
#include "onceq/proto.h"
#include "review_log.h"
#include "siphash.h"

typedef struct oq_engine oq_engine_t;
typedef struct oq_worker oq_worker_t;

typedef struct {
    int64_t retry_after_ms;   /* lease length of queues without their own */
    int64_t timeout_ms;       /* job timeout of queues without their own */
    int64_t margin_ms;        /* timeout must be shorter than retry_after by this */
    uint32_t max_tries;       /* default retry budget */
    int64_t backoff_ms;       /* default backoff (one step, repeating) */
    size_t max_jobs;          /* live jobs held at most */
    uint64_t max_bytes;       /* bytes held at most: jobs, keys, ids, workers (engine_memory.c) */
    int64_t dedupe_window_ms; /* a repeated dispatch_id maps to its job this long */
    size_t dedupe_max;        /* dispatch ids remembered at most (a power of two), also
                                 bounded by max_bytes */
} oq_engine_config_t;

/* The defaults from onceq/limits.h; max_bytes sized from the machine
   (oq_engine_default_max_bytes). */
oq_engine_config_t oq_engine_config_default(void);

/* The default byte limit: physical memory (or the cgroup's memory.max, if
   lower) / OQ_DEFAULT_MAX_BYTES_DIVISOR, within OQ_MIN_DEFAULT_MAX_BYTES and
   OQ_MAX_DEFAULT_MAX_BYTES. */
uint64_t oq_engine_default_max_bytes(void);

/* What a job with this payload and this many backoff steps counts against
   max_bytes: payload + steps + OQ_JOB_OVERHEAD_BYTES. */
uint64_t oq_engine_job_cost(size_t payload_len, size_t backoff_len);

/* A live job's state (done jobs are gone). */
typedef enum {
    OQ_STATE_READY = 1,
    OQ_STATE_DELAYED,
    OQ_STATE_LEASED,
    OQ_STATE_FAILED,
    OQ_STATE_REVIEW, /* outcome unknown: held for a person (oq_engine_review_resolve) */
} oq_job_state_t;

/* What a job looks like from outside (stats, failed listing, deliveries,
   the journal). All pointers borrowed until the next engine call. */
typedef struct {
    uint64_t id;
    oq_job_state_t state;
    const char *type;
    const char *queue;
    const uint8_t *payload;
    size_t payload_len;
    uint32_t attempt, max_tries;
    int64_t timeout_ms;
    const int64_t *backoff_ms; /* NULL when the job has no own backoff */
    uint32_t backoff_len;
    const char *error;    /* failed jobs: the error that ended them; review jobs: the
                             handler's reason; NULL otherwise */
    int64_t failed_at_ms; /* wall clock, failed and review jobs only: when they got there */
    int32_t priority;
    int64_t not_before_ms; /* wall clock: when a delayed job becomes ready; 0 otherwise */
    uint64_t lease;        /* while leased, the token its worker got (bound to the worker's key);
                              otherwise a keyless token of its latest attempt (0 if never delivered) */
    uint32_t generation;   /* requeues so far (and retries after review): tokens are made of it */
    const oq_resolution_t *resolution; /* OQ_EVENT_RESOLVED only: the decision; else NULL */
    const char *unique_key;            /* the unique key it holds while live (unique.h), or NULL */
    int64_t unique_until_ms;           /* wall clock: the end of its unique window; 0: none */
    const char *overlap_key;           /* its overlap key (overlap.h), or NULL */
} oq_job_view_t;

/* What happened to a job, as reported to the observer. */
typedef enum {
    OQ_EVENT_DISPATCHED, /* queued: ready, or delayed until not_before_ms */
    OQ_EVENT_LEASED,     /* handed to a worker (reported after the send): attempt */
    OQ_EVENT_RETURNED,   /* lease ended without an ack, or the send failed: ready again */
    OQ_EVENT_RETRY,      /* a retry outcome: ready, or delayed until not_before_ms */
    OQ_EVENT_DUE,        /* a delayed job became ready */
    OQ_EVENT_FAILED,     /* to the failed store: attempt, error, failed_at_ms */
    OQ_EVENT_DONE,       /* completed; the job is freed right after the call */
    OQ_EVENT_REQUEUED,   /* from the failed store back to ready, attempt 0 */
    OQ_EVENT_REVIEW,     /* to the review store: attempt, error (the reason), failed_at_ms */
    OQ_EVENT_RESOLVED,   /* out of the review store by a decision: resolution says which
                            (done: the job is freed right after the call) */
    OQ_EVENT_RESTORED,   /* rebuilt by replay; never reported */
    /* operator commands on the failed store and on waiting jobs */
    OQ_EVENT_FORGOTTEN, /* deleted from the failed store; freed right after the call */
    OQ_EVENT_CANCELLED, /* a ready or delayed job withdrawn; freed right after the call */
    OQ_EVENT_WAITING,   /* off the ready list while another job holds its overlap key, and
                           back; never reported (to the outside it stays ready) */
} oq_job_event_t;

/* The observer. changed returns 0, or -1 if it could not record the
   change; dispatch is the request for OQ_EVENT_DISPATCHED (its dispatch_id
   included) and NULL otherwise. It must not call back into the engine.

   The changes a producer or an operator asks for (DISPATCHED, REQUEUED,
   FORGOTTEN, CANCELLED, RESOLVED) are reported before they are made, with
   the job as it will be after: -1 refuses the change, and the call that
   asked for it fails with nothing changed (so a reply never promises what
   a restart would not keep). Every other event reports what already
   happened (a worker's outcome, a lease that ran out, a job becoming due)
   after the change, with the job as it is now: the engine must follow the
   world, so -1 there changes nothing in the engine, and the observer
   deals with its own failure (the journal turns unhealthy, which refuses
   new dispatches until it can write again). */
/* ---- batches (engine_batches.c) ------------------------------------------
   A batch is jobs dispatched together, with up to three callback jobs:
   then (every job done), catch (the first failure, unless failures are
   allowed) and finally (every job settled). Its jobs get consecutive ids
   right after the batch's own id, so membership is a range, not a
   per-job field. Each callback is dispatched once, as a job with the
   deterministic dispatch_id "batch:<id>:then" (":catch", ":finally"),
   and the firing is reported (OQ_BATCH_FIRED) right after that job's
   DISPATCHED: a restart that finds the batch due again without the
   firing dispatches it again under the same dispatch_id, which the
   dedupe table answers with the first job. */

typedef enum {
    OQ_BATCH_THEN = 0,
    OQ_BATCH_CATCH,
    OQ_BATCH_FINALLY,
    OQ_BATCH_CALLBACKS /* how many */
} oq_batch_callback_t;

/* What happened to a batch, as reported to the observer. */
typedef enum {
    OQ_BATCH_CREATED = 1, /* before its jobs are dispatched (asked: -1 refuses it) */
    OQ_BATCH_FIRED,       /* a callback was dispatched (after its job's DISPATCHED) */
    OQ_BATCH_CANCELLED,   /* asked: before its waiting jobs are withdrawn */
} oq_batch_event_t;

/* A batch from outside (show, list, the journal). Pointers borrowed until
   the next engine call. */
typedef struct {
    uint64_t id;       /* the batch; its jobs are first_id ... first_id + total - 1 */
    uint64_t first_id; /* id + 1 */
    uint32_t total;
    uint32_t done;        /* completed (ok, or resolved done after review) */
    uint32_t failed;      /* ended in the failed store (and not requeued since) */
    uint32_t cancelled;   /* withdrawn before they ran */
    uint32_t pending;     /* not settled yet: total - done - failed - cancelled */
    uint32_t failed_held; /* of failed: still held in the failed store */
    bool allow_failures;
    bool is_cancelled;  /* the batch was cancelled: then and catch never run */
    bool live;          /* held by the engine (false: a settled one remembered) */
    int64_t created_ms; /* wall clock */
    bool has_callback[OQ_BATCH_CALLBACKS];
    uint64_t callback_ids[OQ_BATCH_CALLBACKS];         /* the job each fired; 0: not (yet) */
    const oq_job_msg_t *callbacks[OQ_BATCH_CALLBACKS]; /* live only; NULL: none */
    oq_str_t dispatch_id; /* the producer's, as sent (empty: none); live only */
} oq_batch_view_t;

/* A dispatch_batch request. Jobs carry neither a dispatch_id nor a
   unique_key (the batch's ids are one range); callbacks no unique_key. */
typedef struct {
    const oq_job_msg_t *jobs;
    size_t count;                                      /* 1 ... OQ_MAX_BATCH_JOBS */
    const oq_job_msg_t *callbacks[OQ_BATCH_CALLBACKS]; /* NULL: none */
    bool allow_failures;
    oq_str_t dispatch_id; /* empty: none */
} oq_batch_msg_t;

/* The observer. changed returns 0, or -1 if it could not record the
   change; dispatch is the request for OQ_EVENT_DISPATCHED (its dispatch_id
   included) and NULL otherwise. It must not call back into the engine.

   The changes a producer or an operator asks for (DISPATCHED, REQUEUED,
   FORGOTTEN, CANCELLED, RESOLVED) are reported before they are made, with
   the job as it will be after: -1 refuses the change, and the call that
   asked for it fails with nothing changed (so a reply never promises what
   a restart would not keep). Every other event reports what already
   happened (a worker's outcome, a lease that ran out, a job becoming due)
   after the change, with the job as it is now: the engine must follow the
   world, so -1 there changes nothing in the engine, and the observer
   deals with its own failure (the journal turns unhealthy, which refuses
   new dispatches until it can write again).

   batch (NULL: batches are not observed) hears of batches the same way:
   CREATED and CANCELLED before they are made (-1 refuses), FIRED after;
   which names the callback of FIRED. */
/* ---- chains (engine_chains.c) -------------------------------------------
   A chain is a job with the links that follow it: on its ok the next link
   is dispatched, with the rest of the chain, as a job with the dispatch_id
   "chain:<first job id>:<place>"; on its final failure (the failed store)
   the chain stops and its chain_catch, if any, is dispatched as
   "chain:<first job id>:catch". A cancelled or forgotten link stops the
   chain with nothing dispatched. As with batches, the move on is reported
   (OQ_CHAIN_FIRED) after the next job's DISPATCHED, and a replay that
   finds a link due again dispatches it under the same dispatch_id. */

typedef enum {
    OQ_CHAIN_LIVE = 0,  /* its job has not ended */
    OQ_CHAIN_NEXT = 1,  /* its job is done: the next link is due */
    OQ_CHAIN_CATCH = 2, /* its job failed: chain_catch is due, the chain stops */
} oq_chain_due_t;

typedef enum {
    OQ_CHAIN_CREATED = 1, /* a job took a chain (after its DISPATCHED) */
    OQ_CHAIN_FIRED,       /* the job's chain moved on or stopped: forget it */
} oq_chain_event_t;

/* A job's place in its chain. Pointers borrowed until the next engine
   call. */
typedef struct {
    uint64_t job_id;    /* the link this is about */
    uint64_t root;      /* the chain's first job */
    uint32_t place;     /* 1: the first job */
    uint32_t total;     /* links in all: place + rest_count */
    oq_chain_due_t due; /* LIVE while the job has not ended */
    uint32_t rest_count;
    const oq_job_msg_t *rest[OQ_MAX_CHAIN_LINKS]; /* the links after it, in order */
    const oq_job_msg_t *catch_;                   /* chain_catch, or NULL */
} oq_chain_view_t;

typedef struct {
    int (*changed)(void *ctx, oq_job_event_t event, const oq_job_view_t *job,
                   const oq_job_msg_t *dispatch);
    void *ctx;
    int (*batch)(void *ctx, oq_batch_event_t event, const oq_batch_view_t *batch,
                 oq_batch_callback_t which);
    /* chains, likewise (NULL: not observed): both after the fact */
    int (*chain)(void *ctx, oq_chain_event_t event, const oq_chain_view_t *chain);
} oq_engine_hooks_t;

/* Is event one a producer or an operator asks for (dispatched, requeued,
   forgotten, cancelled, resolved)? Those are reported to the observer
   before the change, and refused if it cannot record them; every other
   event reports what already happened (a worker's outcome, a lease that
   ran out) after the change, which a failed record cannot undo. An
   observer in front of another asks this to pass on a refusal. */
bool oq_engine_asked(oq_job_event_t event);

typedef struct {
    const char *name;
    int64_t retry_after_ms, timeout_ms;
    uint64_t ready, delayed, leased, failed, review; /* now */
    uint64_t waiting; /* now: ready, but another job holds its overlap key */
    uint64_t dispatched, done, retried, redelivered; /* since start */
    uint64_t late_acks, ignored_acks, duplicates;    /* since start */
    uint64_t cancelled;                              /* since start (oq_engine_cancel) */
    uint64_t returned; /* since start: handed back unrun (return, unavailable), no try used */
} oq_queue_stats_t;

/* Outcomes per job type, since start. */
typedef struct {
    const char *name;
    uint64_t done;       /* completed (ok) */
    uint64_t applied;    /* ok with result "applied": the effect was written */
    uint64_t duplicates; /* ok with "already_applied": the unique guard absorbed a rerun */
    uint64_t failed;     /* went to the failed store */
    uint64_t ready;      /* ready now */
    uint64_t workers;    /* connected workers that take it (named it, or name no types) */
    uint64_t unhandled;  /* ready now with no connected worker taking the type */
} oq_type_stats_t;

typedef struct {
    const void *identity;
    size_t identity_len;
    const char *name;
    uint32_t pid;
    uint64_t seq; /* registration order: a later worker has a higher one */
    uint32_t credit;
    uint32_t leased;
    int64_t idle_ms;
    uint32_t type_count;       /* types it named (oq_engine_worker_type); 0: every type */
    uint32_t queue_count;      /* queues it serves (oq_engine_worker_queue); 0: every queue */
    oq_worker_status_t status; /* its last status (ready until it sends one) */
    int64_t status_ms;         /* how long it has been in it */
    const char *status_error;  /* while unavailable: why; "" otherwise */
    uint32_t jobs_per_msg;     /* deliveries it takes in one message (its ready said) */
    const oq_worker_t *worker_;
} oq_worker_view_t;

/* Type or queue i the viewed worker named, in its order. Borrowed. */
const char *oq_engine_worker_type(const oq_worker_view_t *view, uint32_t i);
const char *oq_engine_worker_queue(const oq_worker_view_t *view, uint32_t i);

/* Called for each delivery: send job to worker. Return 0 if it went out, -1
   if the worker cannot be reached (the engine then declares it dead). */
typedef int (*oq_deliver_fn)(void *ctx, const oq_worker_view_t *worker, const oq_job_view_t *job);

/* Called by oq_engine_pump_many for the deliveries one worker gets in one
   message: jobs[0 .. count-1], in lease order, at most the worker's
   jobs_per_msg and, counted as payload plus OQ_MAX_JOB_ENVELOPE_BYTES
   each, at most OQ_MAX_JOBS_MSG_BYTES together. Send them (as one "jobs"
   message if count > 1); return 0 if they went out, -1 if the worker
   cannot be reached (the engine then puts them back, unsent, and declares
   the worker dead). */
typedef int (*oq_deliver_many_fn)(void *ctx, const oq_worker_view_t *worker,
                                  const oq_job_view_t *jobs, size_t count);

/* A new engine using clock (borrowed). NULL if memory runs out. */
oq_engine_t *oq_engine_new(const oq_engine_config_t *config, const oq_clock_t *clock);

/* Free every job, queue and worker; set *self_p to NULL. */
void oq_engine_destroy(oq_engine_t **self_p);

/* The broker's secret for lease tokens (copied). Set it before the first
   delivery; a broker keeps it across restarts so late acks still count. */
void oq_engine_set_lease_key(oq_engine_t *self, const uint8_t key[OQ_LEASE_KEY_BYTES]);

/* Report every state change to hooks (copied); NULL stops reporting. */
void oq_engine_set_hooks(oq_engine_t *self, const oq_engine_hooks_t *hooks);

/* Configure a queue's retry_after and default timeout (timeout_ms <= 0 keeps
   the engine default). Refuses (-1, reason naming the numbers) a timeout not
   shorter than retry_after by the margin. */
int oq_engine_queue_config(oq_engine_t *self, const char *name, int64_t retry_after_ms,
                           int64_t timeout_ms, char *reason, size_t reason_len);

/* Check the engine defaults against the timeout rule: 0, or -1 with reason.
   When no timeout fits (retry_after is not above the margin) the reason says
   how far to raise retry_after. */
int oq_engine_check_defaults(const oq_engine_t *self, char *reason, size_t reason_len);

/* ---- dispatch (engine_dispatch.c) ----------------------------------------
   A dispatch may carry a dispatch_id: a producer that sends it again
   because its answer never came (the Lazy Pirate pattern) gets the first
   job's id back instead of a second job, for config.dedupe_window_ms after
   the first dispatch (wall clock), whatever became of that job. The ids
   are remembered as keyed digests (dedupe.h), at most config.dedupe_max,
   and within max_bytes: a job that needs the room takes it from the
   oldest ids (engine_memory.c, oq_engine_dedupe_window_held_ms). */

/* Queue a dispatched job: 0 with *id of the new job, or of the job an
   earlier dispatch with the same dispatch_id created within the window
   (then nothing is queued or reported, and oq_engine_dedupe_hits counts
   it); 1 with *id of the live job holding the dispatch's unique_key (or
   whose unique window is open: nothing is queued, oq_engine_keys_stats
   counts it); or -1 with *code and reason (OQ_ERR_UNAVAILABLE: the observer
   could not record it, nothing was queued). */
int oq_engine_dispatch(oq_engine_t *self, const oq_job_msg_t *job, uint64_t *id, oq_err_t *code,
                       char *reason, size_t reason_len);

/* The key dispatch ids are digested with (copied): the journal's, so that
   the digests a snapshot keeps (OQ_RECORD_DEDUPE) still match after a
   restart. Set it before the first dispatch; all zeros until then. */
void oq_engine_set_dispatch_key(oq_engine_t *self, const uint8_t key[OQ_SIPHASH_KEY_BYTES]);

/* Call fn for every dispatch id still inside its window, oldest first (fn
   must not change the engine): what a snapshot keeps. */
void oq_engine_dispatch_id_each(const oq_engine_t *self, oq_dedupe_fn fn, void *ctx);

/* Dispatch ids remembered now; dispatches answered with an earlier job
   (since start); ids forgotten before their window ended because the
   table was full (since start). */
size_t oq_engine_dispatch_ids(const oq_engine_t *self);
uint64_t oq_engine_dedupe_hits(const oq_engine_t *self);
uint64_t oq_engine_dedupe_evicted(const oq_engine_t *self);

/* The window the dispatch-id table holds now, in ms: config.dedupe_window_ms
   unless an id was forgotten before its window ended within the last
   window; then the age of the oldest id still held. */
int64_t oq_engine_dedupe_window_held_ms(const oq_engine_t *self);

/* Everything counted against max_bytes now: jobs (oq_engine_bytes), unique
   and overlap keys, dispatch ids, workers, and the outside bytes. */
uint64_t oq_engine_held_bytes(const oq_engine_t *self);

/* What the broker holds beside the engine against the same limit (waits,
   connections), set before a dispatch. */
void oq_engine_set_outside_bytes(oq_engine_t *self, uint64_t bytes);

/* ---- workers ------------------------------------------------------------ */

/* The worker with this identity, or NULL. Borrowed. */
oq_worker_t *oq_engine_worker_find(oq_engine_t *self, const void *identity, size_t len);

/* Register a worker (identity copied) whose connection authenticated with
   key (its CURVE public key, OQ_KEY_BYTES, copied; NULL: none, as under
   --insecure): the lease tokens of its deliveries are bound to that key.
   NULL if full or out of memory. */
oq_worker_t *oq_engine_worker_add(oq_engine_t *self, const void *identity, size_t len,
                                  oq_str_t name, uint32_t pid, const uint8_t *key);

/* Take the types it handles and the queues it serves from its first ready
   (lists of names from the codec; NULL: every type / every queue). Later
   calls change nothing. 0, or -1 with reason (too many types or queues in
   the broker, or out of memory). */
int oq_engine_worker_route(oq_engine_t *self, oq_worker_t *worker, const msgpack_object *types,
                           const msgpack_object *queues, char *reason, size_t reason_len);

/* The worker was heard from now (any message). */
void oq_engine_worker_seen(oq_engine_t *self, oq_worker_t *worker);

/* Add credit (capped at OQ_MAX_CREDIT). */
void oq_engine_worker_credit(oq_engine_t *self, oq_worker_t *worker, uint32_t credit);

/* The worker's status message: ready, or unavailable (paused while what its
   jobs need is down) since since_ms ago, with the error that paused it
   (copied). Unavailable also takes its credit away: it is sent nothing
   until a ready gives credit again. Its leases stay. */
void oq_engine_worker_status(oq_engine_t *self, oq_worker_t *worker, oq_worker_status_t status,
                             int64_t since_ms, oq_str_t error);

/* Connected workers whose last status is unavailable. */
size_t oq_engine_workers_unavailable(const oq_engine_t *self);

/* Send the worker nothing more; its leases stay. Credit returned with acks
   is ignored until the worker sends ready again (oq_engine_worker_resume). */
void oq_engine_worker_drain(oq_engine_t *self, oq_worker_t *worker);

/* How many deliveries the worker takes in one message (ready's
   jobs_per_msg; clamped to 1 ... OQ_MAX_JOBS_PER_MSG). */
void oq_engine_worker_jobs_per_msg(oq_engine_t *self, oq_worker_t *worker, uint32_t jobs);

/* End a drain: the worker takes jobs again with the credit given next (a
   worker whose stop was cancelled sends ready). */
void oq_engine_worker_resume(oq_engine_t *self, oq_worker_t *worker);

/* Forget the worker: its leased jobs become ready at once (or fail on their
   last attempt, with reason in the error). *worker_p is set to NULL. */
void oq_engine_worker_remove(oq_engine_t *self, oq_worker_t **worker_p, const char *reason);

/* Remove every worker not heard from since before now - silence_ms. Returns
   how many were removed. */
size_t oq_engine_reap_workers(oq_engine_t *self, int64_t silence_ms);

/* Call fn for every worker (fn must not add or remove workers). */
void oq_engine_worker_each(oq_engine_t *self, void (*fn)(void *ctx, const oq_worker_view_t *w),
                           void *ctx);

/* Call fn for each worker registered after the one whose seq is after (0:
   from the first), in registration order, until fn returns false. fn must
   not add or remove workers. */
void oq_engine_worker_page(oq_engine_t *self, uint64_t after,
                           bool (*fn)(void *ctx, const oq_worker_view_t *w), void *ctx);

/* Call fn for each name connected workers gave (the empty one too), in
   the order the names first came, with how many workers gave it and how
   many of them are paused, until fn returns false. */
void oq_engine_worker_names(const oq_engine_t *self,
                            bool (*fn)(void *ctx, const char *name, uint32_t workers,
                                       uint32_t unavailable),
                            void *ctx);

/* The distinct names of the connected workers. */
size_t oq_engine_worker_names_count(const oq_engine_t *self);

size_t oq_engine_worker_count(const oq_engine_t *self);

/* ---- deliveries, acks, deadlines ----------------------------------------- */

/* Hand ready jobs to workers with credit, one per worker per round, each
   worker only jobs of the types and queues it takes (its queues in their
   order), until no worker with credit can take a ready job. Returns the
   number of jobs delivered. */
size_t oq_engine_pump(oq_engine_t *self, oq_deliver_fn deliver, void *ctx);

/* The same, but what one worker is leased in this pump goes out in as few
   calls of deliver as its jobs_per_msg and the message budget allow (in
   lease order, the round-robin over workers unchanged): a worker that
   takes one job per message gets one call per job. */
size_t oq_engine_pump_many(oq_engine_t *self, oq_deliver_many_fn deliver, void *ctx);

typedef enum {
    OQ_ACK_APPLIED, /* the current delivery's outcome was applied */
    OQ_ACK_LATE,    /* an ok from an earlier delivery completed the job */
    OQ_ACK_IGNORED, /* the job was done already, or the delivery is not current */
    OQ_ACK_FENCED,  /* no valid lease token for a delivery of the job: nothing changed */
} oq_ack_effect_t;

/* Apply a worker's report. worker may be NULL (an ack from an unknown peer);
   key is the CURVE key the message came with (OQ_KEY_BYTES; NULL: none).
   Acks are matched by job id, attempt and lease token, never by the
   sender's socket identity: the token proves the delivery, and it was
   made for the key the delivery went to, so it proves nothing from
   another key (OQ_ACK_FENCED). The first outcome a delivery reports is
   its decision: a later ack of the same delivery changes nothing
   (OQ_ACK_IGNORED). The ack's credit is added to worker only if its token
   proves a delivery of the job to key (in this generation, or in one of
   the 8 before a requeue), or the job is unknown:
   a worker whose acks are fenced is sent no more than it was given. */
oq_ack_effect_t oq_engine_ack(oq_engine_t *self, oq_worker_t *worker, const uint8_t *key,
                              const oq_ack_msg_t *ack);

/* Restart the lease of the job worker holds at now + retry_after (touch's
   id, attempt, lease; key as for oq_engine_ack). 0, or -1 (counted) if the
   lease is not current, not the worker's or the token is wrong: nothing
   changes. */
int oq_engine_touch(oq_engine_t *self, oq_worker_t *worker, const uint8_t *key,
                    const oq_ack_msg_t *touch);

/* Process every deadline due by now: delayed jobs become ready, leases that
   ran out give their jobs back. Returns the number processed. Dispatch ids
   whose window ended are forgotten too (not counted). */
size_t oq_engine_tick(oq_engine_t *self);

/* The earliest pending deadline in monotonic ms, or -1 if none. */
int64_t oq_engine_next_deadline(const oq_engine_t *self);

/* ---- inspection -------------------------------------------------------- */

size_t oq_engine_queue_count(const oq_engine_t *self);

/* Counters of queue i (0 <= i < oq_engine_queue_count). */
void oq_engine_queue_stats(const oq_engine_t *self, size_t i, oq_queue_stats_t *stats);

size_t oq_engine_type_count(const oq_engine_t *self);

/* Counters of job type i (0 <= i < oq_engine_type_count). */
void oq_engine_type_stats(const oq_engine_t *self, size_t i, oq_type_stats_t *stats);

/* Acks for ids the broker does not hold and does not remember (done longer
   ago than the last OQ_RECENT_DONE_JOBS, or never issued). */
uint64_t oq_engine_unknown_acks(const oq_engine_t *self);

/* Acks without a valid lease token, and touches that changed nothing. */
uint64_t oq_engine_fenced_acks(const oq_engine_t *self);
uint64_t oq_engine_stale_touches(const oq_engine_t *self);

/* Live jobs (ready, delayed, leased, failed). */
size_t oq_engine_job_count(const oq_engine_t *self);

/* Call fn for failed jobs, oldest first, of one queue or all (queue NULL),
   stopping after limit calls. Returns the number of matching failed jobs. */
size_t oq_engine_failed_each(oq_engine_t *self, const char *queue, size_t limit,
                             void (*fn)(void *ctx, const oq_job_view_t *job), void *ctx);

/* A place in the failed store's order: by failure time, then by job id. */
typedef struct {
    int64_t failed_at_ms; /* wall clock */
    uint64_t id;
} oq_failed_cursor_t;

/* The cursor of failed job id (its failure time and id), or of a job in
   review (the time it went there): 0, or -1 if the job is in neither
   store. */
int oq_engine_failed_cursor(const oq_engine_t *self, uint64_t id, oq_failed_cursor_t *cursor);

/* One page of the failed store, oldest failure first across queues (ties by
   job id): fn for at most limit (1 ... OQ_MAX_FAILED_LIST) failed jobs of
   queue (NULL: all) that come after the cursor (NULL: from the first). A
   cursor by (failed_at, id) is stable while jobs fail, are requeued or
   forgotten between pages. Returns the number of matching failed jobs (all
   of them, whatever the cursor); *more is set if jobs after the last one
   shown remain. */
size_t oq_engine_failed_page(oq_engine_t *self, const char *queue, const oq_failed_cursor_t *after,
                             size_t limit, void (*fn)(void *ctx, const oq_job_view_t *job),
                             void *ctx, bool *more);

/* Why an operator command refused a job. */
typedef enum {
    OQ_REFUSED_UNKNOWN = 1, /* the broker does not hold it: done, or never issued */
    OQ_REFUSED_STATE,       /* held, in a state the command does not apply to */
    OQ_REFUSED_UNRECORDED,  /* the change could not be recorded (see oq_engine_hooks_t), or
                               memory ran out: nothing changed, try again later */
} oq_refusal_t;

/* ---- the review store --------------------------------------------------
   A handler that cannot know the outcome (outcome "review") sends its job
   here; it stays, using no try and never retried on its own, until a
   person resolves it. Resolutions are remembered (review_log.h). */

/* One page of the jobs in review, as oq_engine_failed_page, by the time
   each went to review, then by id. */
size_t oq_engine_review_page(oq_engine_t *self, const char *queue, const oq_failed_cursor_t *after,
                             size_t limit, void (*fn)(void *ctx, const oq_job_view_t *job),
                             void *ctx, bool *more);

/* Resolve job id, which must be in review, with action and note (copied;
   NULL: none): done completes it, retry makes it ready with attempt 0 and
   its full budget, fail moves it to the failed store with the note and the
   handler's reason. The decision is remembered and reported to the hooks
   (OQ_EVENT_RESOLVED). 0, or -1 with *why and reason naming the job: not in
   review (with what its last resolution decided, if one is remembered), or
   out of memory (nothing changed). */
int oq_engine_review_resolve(oq_engine_t *self, uint64_t id, oq_review_action_t action,
                             const char *note, oq_refusal_t *why, char *reason, size_t reason_len);

/* The newest remembered resolution of job id, or NULL. Borrowed. */
const oq_resolution_t *oq_engine_review_resolution(const oq_engine_t *self, uint64_t id);

/* Call fn for every remembered resolution, oldest first. */
void oq_engine_review_each_resolved(const oq_engine_t *self,
                                    void (*fn)(void *ctx, const oq_resolution_t *r), void *ctx);

/* Resolutions remembered. */
size_t oq_engine_review_resolved_count(const oq_engine_t *self);

/* Bytes of live jobs held now (the sum of their oq_engine_job_cost). */
uint64_t oq_engine_bytes(const oq_engine_t *self);

/* The byte limit (config.max_bytes). */
uint64_t oq_engine_max_bytes(const oq_engine_t *self);

/* A job's state by id, for tests and admin: "ready", "delayed", "leased",
   "failed", "review", or NULL if the broker does not hold it (done or unknown). */
const char *oq_engine_job_state(const oq_engine_t *self, uint64_t id);

/* The view of a held job, or -1 if not held. */
int oq_engine_job_view(const oq_engine_t *self, uint64_t id, oq_job_view_t *view);

/* Call fn for every live job, in the order a restart should restore them:
   leased jobs first (they are given back first), then each queue's ready
   jobs in delivery order, then delayed jobs, then failed jobs oldest first,
   then jobs in review oldest first.
   fn must not change the engine. */
void oq_engine_job_each(oq_engine_t *self, void (*fn)(void *ctx, const oq_job_view_t *job),
                        void *ctx);

/* The id the next dispatch will get. */
uint64_t oq_engine_next_id(const oq_engine_t *self);

/* Put a failed job back to ready with a fresh retry budget (attempt 0).
   0, or -1 with *why and reason: the job is not in the failed store, or
   the requeue could not be recorded. */
int oq_engine_requeue(oq_engine_t *self, uint64_t id, oq_refusal_t *why, char *reason,
                      size_t reason_len);

/* ---- operator commands on the failed store and waiting jobs ------------
   Each change is reported to the hooks (the journal). A job forgotten or
   cancelled is remembered like a done one (OQ_RECENT_DONE_JOBS), so that
   the ack of a delivery still under way is attributed, not "unknown". */

/* Delete a failed job for good. 0, or -1 with *why and reason naming the
   job and its state. */
int oq_engine_forget(oq_engine_t *self, uint64_t id, oq_refusal_t *why, char *reason,
                     size_t reason_len);

/* Delete every failed job of queue (NULL: all queues). 0, or -1 if a
   deletion could not be recorded (the walk stops there); *count gets how
   many were deleted either way. */
int oq_engine_flush_failed(oq_engine_t *self, const char *queue, uint64_t *count);

/* Requeue (as oq_engine_requeue) every failed job of queue (NULL: all),
   oldest failure first within each queue. 0, or -1 if a requeue could not
   be recorded (the walk stops there); *count gets how many were requeued
   either way. */
int oq_engine_requeue_all(oq_engine_t *self, const char *queue, uint64_t *count);

/* Delete (as oq_engine_forget) the failed jobs of queue (NULL: all) that
   failed more than older_than_ms before now on the wall clock, at most
   limit (1 ... OQ_MAX_PRUNE_PER_CALL) of them. *count gets how many were
   deleted and *more whether another such job remains (send it again).
   0, or -1 if a deletion could not be recorded (the walk stops there;
   *count says how many went before it). */
int oq_engine_prune_failed(oq_engine_t *self, const char *queue, int64_t older_than_ms,
                           size_t limit, uint64_t *count, bool *more);

/* Withdraw a ready or delayed job: it is never delivered again. A leased
   job is refused (its effect may be under way), and so are failed ones
   (oq_engine_forget is for those) and jobs not held. 0, or -1 with *why
   and reason naming the state. */
int oq_engine_cancel(oq_engine_t *self, uint64_t id, oq_refusal_t *why, char *reason,
                     size_t reason_len);

/* Cancel (as oq_engine_cancel) up to limit (1 ... OQ_MAX_CLEAR_PER_CALL)
   jobs of queue that have not started: ready, delayed, or waiting for an
   overlap key; leased ones are left to finish or fail. *count gets how
   many were cancelled and *more whether such jobs of the queue remain
   (send it again). An unknown queue clears nothing. 0, or -1 if a cancel
   could not be recorded or memory ran out (*count says how many went
   before). */
int oq_engine_clear(oq_engine_t *self, const char *queue, size_t limit, uint64_t *count,
                    bool *more);

/* What bounds the time within which a run of a held job can still start,
   for the retention floor of guard rows (docs/operations.md). */
typedef struct {
    const char *name;
    int64_t retry_after_ms; /* the queue's lease length */
    uint32_t max_tries;     /* the largest budget: the default, or a held job's own */
    int64_t backoff_ms;     /* the largest backoff step: the default, or a held job's own */
    /* The held job whose own runs span longest, max_tries x (retry_after +
       its largest backoff step), if that is longer than the defaults' span:
       the job an operator is told about when it holds a prune back (id 0:
       none). type is borrowed until the next engine call. */
    struct {
        uint64_t id;
        const char *type;
        uint32_t max_tries, attempt;
        int64_t backoff_ms;
    } job;
} oq_queue_horizon_t;

/* The horizon of every queue, into out[0 .. oq_engine_queue_count - 1] in
   stats order, from the defaults and the jobs each holds now: one pass over
   the live jobs. */
void oq_engine_horizons(oq_engine_t *self, oq_queue_horizon_t *out);

/* The engine defaults as a horizon (name "*"): what a queue created later,
   and a job without its own budget, get. */
void oq_engine_default_horizon(const oq_engine_t *self, oq_queue_horizon_t *horizon);

/* The failure time of the oldest job in the failed store (wall clock ms),
   or 0 if it is empty. */
int64_t oq_engine_oldest_failed_ms(const oq_engine_t *self);

/* ---- replay (broker/replay.c) --------------------------------------------
   The journal is read back through these calls before the broker serves.
   They bypass the dispatch limits (a job once accepted is never refused on
   the way back: jobs and bytes may end above max_jobs and max_bytes) and
   report nothing to the hooks. A job that was leased when the broker
   stopped comes back ready, with its attempt count. Configure the queues
   first: a restored job whose timeout breaks its queue's timeout rule is
   clamped to the longest legal timeout (see oq_engine_restore_report). */

/* Recreate a dispatched job with its own id (job->id) and its resolved
   max_tries and timeout (has_max_tries, has_timeout set): ready, or delayed
   if not_before_ms (wall clock) is in the future. The next id becomes at
   least id + 1. 0; 1 if a job with that id is held already (nothing
   changes); -1 with reason if memory runs out. */
int oq_engine_restore(oq_engine_t *self, const oq_job_msg_t *job, int64_t not_before_ms,
                      char *reason, size_t reason_len);

/* The job was handed out on this attempt: ready again with that count. */
int oq_engine_restore_leased(oq_engine_t *self, uint64_t id, uint32_t attempt);

/* A retry outcome: ready, or delayed until not_before_ms (wall clock). */
int oq_engine_restore_retry(oq_engine_t *self, uint64_t id, uint32_t attempt,
                            int64_t not_before_ms);

/* The job went to the failed store. error is copied. */
int oq_engine_restore_failed(oq_engine_t *self, uint64_t id, uint32_t attempt, const char *error,
                             int64_t failed_at_ms);

/* The job went to the review store with the handler's reason (copied). */
int oq_engine_restore_review(oq_engine_t *self, uint64_t id, uint32_t attempt, const char *reason,
                             int64_t reviewed_at_ms);

/* A resolution: if its job is in review, it is resolved as then (and
   remembered); otherwise (a snapshot's record of a job that left the store
   long ago) it is only remembered. 0, or -1 if memory runs out. */
int oq_engine_restore_resolution(oq_engine_t *self, const oq_resolution_t *resolution);

/* The job completed: it is forgotten. */
int oq_engine_restore_done(oq_engine_t *self, uint64_t id);

/* The job was deleted from the failed store (it must be failed), or
   cancelled while ready or delayed (it must be ready or delayed). */
int oq_engine_restore_forgotten(oq_engine_t *self, uint64_t id);
int oq_engine_restore_cancelled(oq_engine_t *self, uint64_t id);

/* Remember the dispatch_id of a restored job (a DISPATCHED record:
   dispatched at dispatched_at_ms, wall clock), if its window has not ended
   yet; an empty dispatch_id is nothing to remember. 0, or -1 if memory
   runs out. */
int oq_engine_restore_dispatch_id(oq_engine_t *self, oq_str_t dispatch_id, uint64_t job_id,
                                  int64_t dispatched_at_ms);

/* Remember a dispatch id by its digest until expires_ms (wall clock; a
   snapshot's DEDUPE record), if that is still to come. 0, or -1 if memory
   runs out. */
int oq_engine_restore_dispatch_digest(oq_engine_t *self,
                                      const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES],
                                      uint64_t job_id, int64_t expires_ms);

/* The keys of job id (KEYS record): a ready or delayed job takes its
   overlap key and, unless window_only, its unique key with its window's end
   (0: none); otherwise (the job is gone or no longer live, or window_only)
   the unique key is remembered until unique_until_ms. 0, or -1 if memory
   runs out. */
int oq_engine_restore_keys(oq_engine_t *self, uint64_t id, oq_str_t unique_key,
                           int64_t unique_until_ms, bool window_only, oq_str_t overlap_key);

/* The job's requeue generation (a snapshot's GENERATION record), so that
   the tokens of deliveries before a requeue stay dead. 0, or -1 if the job
   is not held. */
int oq_engine_restore_generation(oq_engine_t *self, uint64_t id, uint32_t generation);

/* Never hand out an id below next_id (a snapshot remembers it). */
void oq_engine_restore_next_id(oq_engine_t *self, uint64_t next_id);

/* After replay: log one line per queue whose restored jobs had their
   timeout clamped, with the numbers. Returns how many jobs were clamped. */
uint64_t oq_engine_restore_report(oq_engine_t *self);

/* ---- batches (engine_batches.c; the types are above the hooks) ---------- */

/* Dispatch a batch: 0 with *batch_id and *first_id (its jobs are first_id
   ... first_id + b->count - 1, in the order given), also for a resend of
   the same dispatch_id within the window (nothing is queued again); or -1
   with *code and reason, nothing queued. Every limit (jobs, bytes,
   OQ_MAX_BATCHES, each job's timeout rule) is checked before anything is
   created or recorded. */
int oq_engine_dispatch_batch(oq_engine_t *self, const oq_batch_msg_t *b, uint64_t *batch_id,
                             uint64_t *first_id, oq_err_t *code, char *reason, size_t reason_len);

/* The view of batch id, held or remembered after it settled: 0, or -1 if
   the engine knows no such batch. */
int oq_engine_batch_view(const oq_engine_t *self, uint64_t id, oq_batch_view_t *view);

/* The batch job id belongs to, or 0. */
uint64_t oq_engine_batch_of(const oq_engine_t *self, uint64_t job_id);

/* Call fn for every held batch, oldest first (fn must not change the
   engine), then, with settled, for the remembered settled ones, oldest
   first. Returns the number of calls. */
size_t oq_engine_batch_each(const oq_engine_t *self, bool settled,
                            void (*fn)(void *ctx, const oq_batch_view_t *b), void *ctx);

/* Batches held now. */
size_t oq_engine_batch_count(const oq_engine_t *self);

/* Cancel batch id: then and catch will not run; its ready and delayed jobs
   are withdrawn (*withdrawn counts them), leased ones run on, and finally
   runs once all have settled. 0, or -1 with *why and reason (not held,
   cancelled already, or the change could not be recorded). */
int oq_engine_batch_cancel(oq_engine_t *self, uint64_t id, uint64_t *withdrawn, oq_refusal_t *why,
                           char *reason, size_t reason_len);

/* Dispatch every callback that is due and not dispatched yet (after a
   replay, and for one an earlier attempt could not dispatch: the broker
   was full or could not record it), and let settled batches go. Returns
   how many callbacks were dispatched. Call it after the hooks are set. */
size_t oq_engine_batches_settle(oq_engine_t *self);

/* oq_engine_batches_settle for the batches whose callback was refused
   before (oq_engine_tick calls it). */
size_t oq_engine_batches_retry(oq_engine_t *self);

/* While held (replay holds them from its first record to its last), no
   callback is dispatched: what the journal replays was recorded, and
   what became due is dispatched by oq_engine_batches_settle after. */
void oq_engine_batches_hold(oq_engine_t *self, bool held);

/* Replay: a batch as its CREATED record (or a snapshot) says, with the
   counts of its jobs no longer held (a snapshot's; 0 in a CREATED
   record), and callback_ids of the callbacks fired. Its jobs follow, and
   next_id becomes at least first_id + total. 0; -1 with reason. */
int oq_engine_restore_batch(oq_engine_t *self, const oq_batch_view_t *b, char *reason,
                            size_t reason_len);

/* Replay: callback which of batch id fired as job_id. */
int oq_engine_restore_batch_fired(oq_engine_t *self, uint64_t id, oq_batch_callback_t which,
                                  uint64_t job_id);

/* Replay: batch id was cancelled, holding total jobs from then on (fewer
   than it was created with if dispatching its jobs broke off). */
int oq_engine_restore_batch_cancelled(oq_engine_t *self, uint64_t id, uint32_t total);

/* ---- chains (engine_chains.c; the types are above the hooks) ------------ */

/* Dispatch first (as oq_engine_dispatch, without a unique_key) with the
   links that follow it (count 0 ... OQ_MAX_CHAIN_LINKS, none with a
   dispatch_id or unique_key) and catch_ (NULL: none): 0 with *id, or -1
   with *code and reason. Every link is checked against the timeout rule
   before anything is queued. A resend of first's dispatch_id answers with
   the first job, and gives it its chain if a crash lost it. */
int oq_engine_dispatch_chain(oq_engine_t *self, const oq_job_msg_t *first,
                             const oq_job_msg_t *links, size_t count, const oq_job_msg_t *catch_,
                             uint64_t *id, oq_err_t *code, char *reason, size_t reason_len);

/* The chain job_id is a link of, while it is held: 0, or -1 if none. */
int oq_engine_chain_view(const oq_engine_t *self, uint64_t job_id, oq_chain_view_t *view);

/* Call fn for every chain held (fn must not change the engine). */
void oq_engine_chain_each(const oq_engine_t *self, void (*fn)(void *ctx, const oq_chain_view_t *c),
                          void *ctx);

/* Dispatch every link or chain_catch that is due and not yet dispatched
   (after a replay; one refused before). Returns how many went out. */
size_t oq_engine_chains_settle(oq_engine_t *self);

/* Replay: a CHAIN record (the view's links point into the record). */
int oq_engine_restore_chain(oq_engine_t *self, const oq_chain_view_t *chain, char *reason,
                            size_t reason_len);

/* Replay: the chain of job_id moved on or stopped (CHAIN_FIRED). */
int oq_engine_restore_chain_fired(oq_engine_t *self, uint64_t job_id);

/* ---- unique and overlap keys --------------------------------------------- */

/* Call fn for every unique key held only by its window (its job is done or
   no longer live), for snapshots. */
void oq_engine_unique_each_window(const oq_engine_t *self,
                                  void (*fn)(void *ctx, const char *key, uint64_t id,
                                             int64_t expires_ms),
                                  void *ctx);

typedef struct {
    uint64_t unique_keys;     /* unique keys held now (by live jobs and by windows) */
    uint64_t unique_hits;     /* since start: dispatches answered with a key's holder */
    uint64_t unique_evicted;  /* since start: windows forgotten early (table full) */
    uint64_t overlap_held;    /* overlap keys held by a leased job now */
    uint64_t overlap_waiting; /* jobs waiting for their overlap key now */
} oq_keys_stats_t;

void oq_engine_keys_stats(const oq_engine_t *self, oq_keys_stats_t *stats);

/* The longest unique_for among the unique keys held now, in ms (0: none):
   a term of the retention floor (oq_stats_encode_horizon). */
int64_t oq_engine_unique_longest_window_ms(const oq_engine_t *self);

/* ---- metrics (metrics.c) ------------------------------------------------ */

/* Leases of queue i that ran out, since start. */
uint64_t oq_engine_queue_expired(const oq_engine_t *self, size_t i);

/* Dispatch-to-done latency of queue i's jobs, observed at the ok ack of
   jobs dispatched since start (restored jobs are not timed). Borrowed. */
const oq_histogram_t *oq_engine_queue_latency(const oq_engine_t *self, size_t i);

/* Workers removed for their silence (missed heartbeats), since start. */
uint64_t oq_engine_workers_dead(const oq_engine_t *self);

#endif
