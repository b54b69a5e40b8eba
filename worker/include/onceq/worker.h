/*  onceq/worker.h: the worker SDK (libonceq-worker; pkg-config onceq-worker).
    A handler is a function registered under a job type; oq_worker_main
    turns a program into a complete worker that runs it on its main thread,
    one job at a time, and reports what it returns to the broker. Handlers must be idempotent in
   their effects: a job can run more than once (retries, lease expiry, a worker killed before its
   ack). Write effects in a database transaction guarded by a UNIQUE constraint, and key external
   calls by the business operation, never by the job id.

    A handler's state pointer is given at registration and only ever used on
    the worker's main thread, so per-process state (a database connection) needs no
    lock. */
#ifndef ONCEQ_WORKER_H
#define ONCEQ_WORKER_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onceq/flags.h"
#include "onceq/limits.h"
#include "onceq/proto.h"

/* libonceq-worker is built with -fvisibility=hidden: what this header
   declares is its whole ABI, and nothing else of the runtime (session,
   keeper, supervisor) is exported. The pragma marks every declaration
   below, so a function added here is exported without a second list to
   keep in step. */
#pragma GCC visibility push(default)

/* A delivered job as a handler sees it. Everything is borrowed for the
   duration of the handler call. */
typedef struct {
    uint64_t id; /* broker's id: stable across retries, never an idempotency key */
    const char *type;
    const char *queue;
    uint32_t attempt; /* 1 on the first delivery */
    uint32_t max_tries;
    int64_t timeout_ms;
    const msgpack_object *payload; /* a map */
    void *runtime_;                /* the worker's; for oq_job_touch */
} oq_job_t;

/* What a handler reports. Fill it with the oq_report_* helpers. */
typedef struct {
    oq_outcome_t outcome; /* OQ_OUTCOME_OK, _RETRY, _FAIL, _RETURN, _REVIEW or _UNAVAILABLE */
    oq_result_t result;   /* with OK: APPLIED, ALREADY_APPLIED or NONE */
    char error[OQ_MAX_ERROR_LEN + 1];
    int64_t delay_ms; /* with RETRY (a release), RETURN or UNAVAILABLE: ready after this */
    bool has_delay;
} oq_report_t;

typedef void (*oq_handler_fn)(const oq_job_t *job, void *state, oq_report_t *report);

void oq_report_ok(oq_report_t *report, oq_result_t result);
/* Retryable failure: the broker retries after the job's backoff while tries remain. */
void oq_report_retry(oq_report_t *report, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Permanent failure: the job goes straight to the failed store. */
void oq_report_fail(oq_report_t *report, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Outcome unknown: the job goes to the broker's review store, where it
   waits, never retried on its own, until a person resolves it (`onceq
   review`). For an external call that may or may not have taken effect
   and that a retry cannot settle. The message is the context a person
   needs (what was sent, what came back, under which key) and is kept with
   the job and with the resolution. */
void oq_report_review(oq_report_t *report, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Release (Laravel's release): retry after delay_ms of the handler's choosing
   (0 .. 366 days) instead of the job's backoff. It uses a try like any retry:
   on the last one the job goes to the failed store. */
void oq_report_release(oq_report_t *report, int64_t delay_ms, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
/* Hand the job back unrun: it uses no try and is ready again at once, or
   after delay_ms (> 0). For a job this worker cannot run now (a type it does
   not handle: the broker then sends it no more of that type). */
void oq_report_return(oq_report_t *report, int64_t delay_ms, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
/* Something the job needs is down (its database cannot be reached, has no
   connection slot left, is restarting): hand the job back unrun. It uses
   no try and is ready again at once for a worker that can run it; the
   reason is shown in the broker's stats. This worker pauses: it takes no
   job until the probe its handler declared (oq_registry_set_resource)
   succeeds, probing after a pause that doubles from 100 ms to 5 s, with
   jitter. Never for something about the job
   itself: a job that always reports this would never fail. The effects
   SDK reports it for its infrastructure errors (onceq/effects_worker.h). */
void oq_report_unavailable(oq_report_t *report, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Tell the broker the handler is making progress: its lease restarts at now
   + the queue's retry_after, and the worker's watchdog at now + the job's
   timeout (so the lease still outlasts the time limit). Call it from the
   handler, as often as you like: touches are sent at most every 250 ms.
   0, or -1 if it could not be passed to the worker. */
int oq_job_touch(const oq_job_t *job);

/* Payload accessors. Each returns 0 with the value, or -1 if the key is
   missing or of another type. Strings are borrowed and not NUL-terminated. */
int oq_payload_uint(const oq_job_t *job, const char *key, uint64_t *out);
int oq_payload_int(const oq_job_t *job, const char *key, int64_t *out);
int oq_payload_str(const oq_job_t *job, const char *key, oq_str_t *out);
int oq_payload_bool(const oq_job_t *job, const char *key, bool *out);

/* The raw value under key, or NULL if the payload has no such key: tells an
   optional field that is absent from one of the wrong type. Borrowed. */
const msgpack_object *oq_payload_get(const oq_job_t *job, const char *key);

/* The handler registry: job type -> handler. */
typedef struct oq_registry oq_registry_t;

/* An empty registry. */
oq_registry_t *oq_registry_new(void);

/* Free the registry and set *self_p to NULL. */
void oq_registry_destroy(oq_registry_t **self_p);

/* Register fn under type (copied). -1 if the type is invalid or taken. */
int oq_registry_add(oq_registry_t *self, const char *type, oq_handler_fn fn, void *state);

/* Find the handler of a type: 0 with fn and state, or -1 if none. */
int oq_registry_find(const oq_registry_t *self, const char *type, oq_handler_fn *fn, void **state);

/* What a handler needs beyond the broker that can be down for a while (its
   database): how to tell whether it answers again, and how to let go of
   what it holds while the worker has no job. Both run on the worker's main thread,
   between jobs, with the ctx given here.

   probe: 0 if the resource answers now, or -1 with a reason (one line,
   cut to reason_len). It must return within a few seconds: the worker
   takes no job while it runs. A probe may open the connection the next
   job uses (it should: a probe that connects and closes again lets
   another process take the slot).
   release: close connections (or anything a process should not hold while
   idle). The next job opens them again. */
typedef int (*oq_probe_fn)(void *ctx, char *reason, size_t reason_len);
typedef void (*oq_release_fn)(void *ctx);

/* Declare that the handler of type needs a resource that can be down,
   with its probe and release (either may be NULL) and their ctx (often
   the same as the handler's state, or a part of it). This is how a
   handler says it needs a database: after a job of this type reports
   unavailable, the worker pauses until probe succeeds; without a probe it
   waits one pause and then lets the next job find out. release is called
   once the worker has been idle for --idle-release and when it stops;
   types that share a ctx and release are released once. 0, or -1 if type
   has no handler. A worker whose handlers declare nothing never pauses
   for them (noop, sleep). */
int oq_registry_set_resource(oq_registry_t *self, const char *type, oq_probe_fn probe,
                             oq_release_fn release, void *ctx);

/* Give the worker's command line a flag of the handlers' own (the
   carrier's URL of a shipment handler, say), declared like any flag of the
   table in onceq/flags.h: a long name, an ONCEQ_* environment variable, a
   kind, a default, a destination. oq_worker_main parses it with its own
   flags (command line, else the variable, else the default; the same
   errors), lists it in --help under "options of the handlers", and writes
   it to dest before it forks any worker process, so every process sees
   it. A value its parser refuses (give an OQ_FLAG_CUSTOM parser to check
   one) stops the worker at start with a usage error naming the flag, the
   value and why, rather than failing jobs later. The table entry is
   copied; dest and the strings it points to must stay valid until
   oq_worker_main returns. 0, or -1 (logged) if the name is empty, taken by
   another handler flag, or OQ_WORKER_MAX_HANDLER_FLAGS are registered;
   a name that clashes with one of the worker's own flags is refused by
   oq_worker_main as a usage error. */
#define OQ_WORKER_MAX_HANDLER_FLAGS 32
int oq_registry_add_flag(oq_registry_t *self, const oq_flag_t *flag);

/* ---- batches ----

   A type whose effects can be applied together (one multi-row statement,
   one transaction) may declare a batch function beside its handler. When
   the worker holds more than one leased job of that type (prefetch, see
   --prefetch), it may hand up to max_jobs of them, in delivery order, to
   the batch function in one call on the worker's main thread; with one job it calls
   the handler. The state is the handler's (oq_registry_add).

   reports has count entries, zeroed, one per job in the same order: fill
   each with an oq_report_* helper. Acks stay per job: each report is sent
   for its own job, as the handler's would be. A report left unfilled is
   sent as a retry ("the batch left no report for this job"). A batch
   function must give each job the outcome the handler would have given
   it: on an error that concerns one job it falls back to running the jobs
   one by one (the effects SDK's oq_effects_run_batch does this), so that
   one bad job never fails its neighbours. */
typedef void (*oq_batch_fn)(const oq_job_t *const *jobs, size_t count, void *state,
                            oq_report_t *reports);

/* The most jobs a batch function is ever given in one call. */
#define OQ_WORKER_MAX_BATCH 256

/* Declare fn as the batch function of type, for 2 .. max_jobs jobs at a
   time (max_jobs is capped at OQ_WORKER_MAX_BATCH). 0, or -1 (logged) if
   type has no handler, fn is NULL or max_jobs is under 2. */
int oq_registry_set_batch(oq_registry_t *self, const char *type, oq_batch_fn fn, size_t max_jobs);

/* Register the built-in handlers: noop, sleep, fail, crash. */
void oq_builtin_register(oq_registry_t *self);

/* The number of registered handlers, and the type of the i-th (0-based,
   in registration order; borrowed, valid while the registry lives; NULL
   past the end). The worker announces these types to the broker, which
   sends it no other type. */
size_t oq_registry_count(const oq_registry_t *self);
const char *oq_registry_type(const oq_registry_t *self, size_t i);

/* ---- the worker program ---- */

/* Run a complete worker with the handlers in the registry, the whole of
   onceq-worker's command line included (see worker/README.md, or --help):

     --broker ENDPOINT, --name NAME, --heartbeat-ms N, --processes N (a
     supervisor of N worker processes) with --stop-timeout S, --log-level,
     --database URL, --isolation LEVEL, --idle-release S, --help (lists the
     registered job types), --version; each with its environment variable.

   Takes ownership of the registry (it is destroyed before this returns,
   also on an error). With --processes each worker process is forked
   from this one and gets its own copy of the registry and of the handlers'
   state pointers; a handler that keeps per-process state (a database
   connection) must therefore create no connection before this call:
   connect lazily, on the first job, in the process that runs it.

   Call it from main, before any thread or ZeroMQ context exists: it
   blocks SIGTERM and SIGINT and forks. SIGTERM or SIGINT drains (no new
   job, the current one finishes and is acked) and ends the worker.
   Returns the process exit status: 0 after a graceful stop or --help, 2 on
   a usage error (an empty registry is one), OQ_EXIT_BROKEN if the worker
   could not start. A worker whose handler overran its job's timeout exits
   the process with OQ_EXIT_TIMEOUT and does not return. */
int oq_worker_main(int argc, char **argv, oq_registry_t *handlers);

/* The settings a handler may need that the worker does not use itself.
   The runtime does not link a database client: it only checks that
   isolation is one of the three words, and hands both strings on. */
typedef struct {
    /* --database / ONCEQ_DATABASE_URL: a libpq conninfo or URI; "" when not
       set (libpq's defaults: PGHOST, PGDATABASE, ...). */
    const char *database_url;
    /* --isolation / ONCEQ_DB_ISOLATION: "read-committed" (the default),
       "repeatable-read" or "serializable". */
    const char *isolation;
    /* --db-timeout / ONCEQ_DB_TIMEOUT: the longest a job's database work
       may wait on the server, in ms, when that is shorter than the job's
       timeout (oq_effects_begin_job takes the smaller); 0: the job's
       timeout. Appended last: older handlers never read it. */
    int64_t db_timeout_ms;
} oq_worker_settings_t;

/* The settings of this worker process. Valid once oq_worker_main has
   parsed the command line, in every worker process (read them from a
   handler, e.g. when it connects on its first job); before that, NULL.
   Borrowed: valid until the process exits. */
const oq_worker_settings_t *oq_worker_settings(void);

#pragma GCC visibility pop

#endif
