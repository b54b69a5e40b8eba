/*  onceq/effects.h: exactly-once effects in PostgreSQL, for job handlers
    (libonceq-effects, pkg-config onceq-effects).

    A job runs at least once; its effect must happen once. This library gives
    a handler what that takes: one PostgreSQL connection per worker process
    (opened on first use, dropped when lost and opened again on the next use,
    bounded in time by the job's timeout), a transaction runner that re-runs
    a transaction in place when the server asks for it (serialization
    failure, deadlock), a classification of every failure into what the job
    does next (retry, fail, or "unknown": retry, safe because of the guard),
    the once-guard (oq_once) for effects without a business table of their
    own, schema migrations, and for a worker that waits out an outage of
    its database, a probe (oq_effects_probe) and a way to let an idle
    connection go (oq_effects_release).

    It knows nothing of the wire protocol or of the worker runtime: results
    are its own (oq_pg_error_t, oq_effects_verdict_t). onceq/effects_worker.h
    turns them into a job's report. Not thread-safe: a handle, its
    connection and its runner belong to one thread (a worker's main thread,
    which runs its handlers, or a command-line tool). The reasoning behind the error table is in
    docs/handlers.md and docs/points.md. */
#ifndef ONCEQ_EFFECTS_H
#define ONCEQ_EFFECTS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- limits ------------------------------------------------------------- */

/* Error text kept from a failed statement, in bytes. */
#define OQ_PG_MAX_ERROR_LEN 512

/* A transaction that hits a serialization failure or a deadlock is run again
   in place up to this many times, after a jittered pause that starts at
   OQ_TXN_BACKOFF_BASE_MS and doubles up to OQ_TXN_BACKOFF_MAX_MS. */
#define OQ_TXN_MAX_RETRIES     4
#define OQ_TXN_BACKOFF_BASE_MS 10
#define OQ_TXN_BACKOFF_MAX_MS  200

/* oq_effects_probe waits at most this long for a connection and for the
   answer to its SELECT 1. */
#define OQ_EFFECTS_PROBE_TIMEOUT_MS 5000

/* The once-guard's scope and key, in bytes (the table's CHECKs say the
   same: deploy/sql/0002_once.sql). */
#define OQ_ONCE_MAX_SCOPE_LEN 64
#define OQ_ONCE_MAX_KEY_LEN   256

/* ---- errors: classified, not guessed ------------------------------------ */

/* What a failure means for the work that met it. */
typedef enum {
    OQ_PG_ERR_NONE = 0,
    /* Serialization failure (40001) or deadlock (40P01): the server rolled
       the transaction back and running it again is expected to succeed. The
       transaction runner does that in place. */
    OQ_PG_ERR_RETRY_TXN,
    /* Infrastructure: the database cannot be used now. The connection is
       gone or never came up (the server is down, unreachable, starting up
       or shutting down, out of connection slots: 53300; it ended our
       session: 57P01, 57P02; a connection exception: 08xxx) and nothing
       was committed. Running the job again later is expected to succeed
       and nothing about the job is wrong: a worker hands it back without
       using a try and waits until the database answers (oq_effects_probe);
       the next statement reconnects. */
    OQ_PG_ERR_CONNECTION,
    /* Infrastructure too: the connection was lost during COMMIT, so the
       transaction may or may not have committed. Run the job again: the
       guard (oq_once, or a UNIQUE constraint of your own) makes the second
       run find the first one's row if there is one. */
    OQ_PG_ERR_UNKNOWN,
    /* The server refused for now (statement timeout, out of resources,
       shutting down), or in-place retries ran out: retry the job later. */
    OQ_PG_ERR_TRANSIENT,
    /* The statement or its data is wrong (bad value, constraint, missing
       table, a domain rule such as an unknown customer): running it again
       gives the same answer. Fail the job. */
    OQ_PG_ERR_FAIL,
} oq_pg_class_t;

/* A classified error, filled by whoever saw it. */
typedef struct {
    oq_pg_class_t cls;
    char sqlstate[6];                      /* "" when there is none (libpq's own errors) */
    char message[OQ_PG_MAX_ERROR_LEN + 1]; /* one line */
} oq_pg_error_t;

/* What the job does about a class: the four answers a handler reports. */
typedef enum {
    OQ_EFFECTS_OK = 0,  /* committed (OQ_PG_ERR_NONE) */
    OQ_EFFECTS_RETRY,   /* nothing committed; run the job again later */
    OQ_EFFECTS_UNKNOWN, /* may have committed; run the job again: the guard decides */
    OQ_EFFECTS_FAIL,    /* the same work fails the same way every time */
    /* the database cannot be used now (OQ_PG_ERR_CONNECTION): nothing is
       wrong with the work; run it again once the database answers, without
       counting this run against its tries */
    OQ_EFFECTS_UNAVAILABLE,
} oq_effects_verdict_t;

/* The class of an error. sqlstate may be NULL or "" (libpq reports a lost
   connection without one); connection_ok says the connection was still up
   after the error; in_commit says the statement was COMMIT. */
oq_pg_class_t oq_pg_errors_classify(const char *sqlstate, bool connection_ok, bool in_commit);

/* Fill error with a class, a SQLSTATE (NULL for none) and a message; the
   message is cut at OQ_PG_MAX_ERROR_LEN and its line breaks become spaces. */
void oq_pg_errors_set(oq_pg_error_t *error, oq_pg_class_t cls, const char *sqlstate,
                      const char *format, ...) __attribute__((format(printf, 4, 5)));

/* Reset error to "no error". */
void oq_pg_errors_clear(oq_pg_error_t *error);

/* The verdict for a class: OK for none, FAIL for OQ_PG_ERR_FAIL, UNKNOWN for
   OQ_PG_ERR_UNKNOWN, UNAVAILABLE for OQ_PG_ERR_CONNECTION, RETRY for every
   other class. */
oq_effects_verdict_t oq_pg_errors_verdict(oq_pg_class_t cls);

/* True for the infrastructure classes, OQ_PG_ERR_CONNECTION and
   OQ_PG_ERR_UNKNOWN: the database (or the way to it) failed, not the work.
   Such an error says nothing against the job: it is run again without
   using a try, once the database answers. Data errors (OQ_PG_ERR_FAIL),
   collisions the runner re-runs in place (OQ_PG_ERR_RETRY_TXN) and the
   server's refusals for now (OQ_PG_ERR_TRANSIENT: a statement timeout, a
   lock, a full disk) are not infrastructure. */
bool oq_pg_errors_infrastructure(oq_pg_class_t cls);

/* Advice for an operator that the error itself does not give (a missing
   table: run the migrations), or NULL. Static text. */
const char *oq_pg_errors_hint(const oq_pg_error_t *error);

/* "none", "retry_txn", "connection", "unknown", "transient" or "fail". */
const char *oq_pg_errors_class_name(oq_pg_class_t cls);

/* "ok", "retry", "unknown", "fail" or "unavailable". */
const char *oq_effects_verdict_name(oq_effects_verdict_t verdict);

/* ---- the connection ----------------------------------------------------- */

/* One connection, the way a worker process uses it: opened on first use,
   dropped when lost and opened again on the next use, and bounded in time
   by the current job's timeout (the server's statement_timeout ends a
   statement before the job's watchdog would; the client's own wait ends
   soon after, should the server not answer at all). Statements go with
   bound parameters only; the single exception, oq_pg_exec_script, runs
   migration files from disk. */
typedef struct oq_pg oq_pg_t;

/* A connection to be, for conninfo: a libpq keyword string or URI (copied;
   NULL or "" means libpq's defaults, PGHOST and friends). application_name
   is what pg_stat_activity shows unless conninfo names one (copied; NULL:
   "onceq"). Does not connect. */
oq_pg_t *oq_pg_new(const char *conninfo, const char *application_name);

/* Close the connection if open, free, and set *self_p to NULL. */
void oq_pg_destroy(oq_pg_t **self_p);

/* Bound the statements that follow by a job timeout of timeout_ms: the
   server's statement_timeout becomes timeout_ms less a margin (a tenth, at
   most 1 s; set on the session when it changes, outside transactions), and
   the client waits for any one answer (or for the socket to take what it
   sends) at most half a margin longer than that, then drops the
   connection. A connection attempt waits at most that long too, or 10 s
   if less. timeout_ms 0 removes both bounds. */
void oq_pg_set_timeout(oq_pg_t *self, int64_t timeout_ms);

/* The same for a job: the statements that follow, until the next call of
   either, share the bound. Each gets at most what the waits for the
   answers before it left of the job's statement time (within the client's
   grace), so that several statements that each wait on a lock still end
   before the job's timeout, with 57014 (transient). Connecting counts
   against the bound too, and a statement that got no answer at all is
   not sent again on a new connection, so a hung server ends the job with
   OQ_PG_ERR_CONNECTION before its timeout. */
void oq_pg_set_job_timeout(oq_pg_t *self, int64_t timeout_ms);

/* Connect now if not connected. 0, or -1 with error (OQ_PG_ERR_CONNECTION,
   with the server's SQLSTATE when it refused us: 53300 too many
   connections, 57P03 starting up or shutting down, 28P01, 3D000, ...). An
   attempt that got no answer in time is kept, and the next connect waits
   on it again (for up to a minute from its start) instead of opening
   another one. Every connection has TCP keepalives and a
   tcp_user_timeout by default, which conninfo may override. */
int oq_pg_connect(oq_pg_t *self, oq_pg_error_t *error);

/* Close the connection (and abandon a kept connection attempt) if no
   transaction runs on it; the next statement opens a new one. Returns
   true if a connection was closed. */
bool oq_pg_disconnect(oq_pg_t *self);

/* Run one statement; params are text values ($1 .. $nparams; NULL is SQL
   NULL). With result non-NULL, 0 gives the result (caller PQclear()s it);
   -1 leaves *result NULL and fills error. Connects first if needed (not
   inside a transaction whose connection was lost: that is an error). */
int oq_pg_exec(oq_pg_t *self, const char *sql, int nparams, const char *const *params,
               PGresult **result, oq_pg_error_t *error);

/* Run a script of several statements without parameters (simple query
   protocol). Only for trusted SQL from files the operator installed
   (migrations), never for anything built from data. 0 or -1 with error. */
int oq_pg_exec_script(oq_pg_t *self, const char *sql, oq_pg_error_t *error);

/* BEGIN with the given statement ("BEGIN ISOLATION LEVEL ..."), COMMIT,
   ROLLBACK. oq_pg_begin readies the connection (connected, the timeout
   set, BEGIN and COMMIT prepared) and sends nothing else: BEGIN goes with
   the transaction's first statement in one pipeline, and if BEGIN fails
   that statement is skipped and BEGIN's error is its error. A transaction
   without a statement commits without a round trip. oq_pg_commit fails
   unless the server answers COMMIT (an aborted transaction answers
   ROLLBACK), and classifies a connection lost meanwhile as
   OQ_PG_ERR_UNKNOWN. oq_pg_rollback ignores errors: after it the session
   is out of the transaction or the connection is gone. Handlers use the
   transaction runner instead. */
int oq_pg_begin(oq_pg_t *self, const char *begin_sql, oq_pg_error_t *error);
int oq_pg_commit(oq_pg_t *self, oq_pg_error_t *error);
void oq_pg_rollback(oq_pg_t *self);

/* True if a connection is open (it may still turn out to be dead). */
bool oq_pg_connected(const oq_pg_t *self);

/* The server process of the open connection (for tests that end it), or 0. */
int oq_pg_backend_pid(const oq_pg_t *self);

/* ---- the transaction runner --------------------------------------------- */

/* The runner runs a body between BEGIN (at a chosen isolation level) and
   COMMIT, rolls back when the body or COMMIT fails, and runs the whole
   transaction again, in place, when the server asked for that
   (OQ_PG_ERR_RETRY_TXN), up to OQ_TXN_MAX_RETRIES times with a jittered
   pause. Other errors end the run and are returned. */
typedef enum {
    OQ_TXN_READ_COMMITTED,
    OQ_TXN_REPEATABLE_READ,
    OQ_TXN_SERIALIZABLE,
} oq_txn_isolation_t;

typedef struct oq_txn oq_txn_t;

/* The seam: how to open, commit and roll back a transaction on db, so that
   unit tests run the same runner (and the same bodies) over a database in
   memory, with faults injected by name. begin and commit return 0 or -1
   with a classified error; rollback never fails (afterwards db is out of
   the transaction, or its connection is gone). once (may be NULL: then
   oq_once fails on this db) is the once-guard's insert, see oq_once.
   oq_txn_pg_ops() is the PostgreSQL table. */
typedef struct {
    int (*begin)(void *db, oq_txn_isolation_t isolation, oq_pg_error_t *error);
    int (*commit)(void *db, oq_pg_error_t *error);
    void (*rollback)(void *db);
    int (*once)(void *db, const char *scope, const char *key, uint64_t job_id, bool *applied,
                oq_pg_error_t *error);
} oq_txn_ops_t;

/* The work inside the transaction. Returns 0 to commit, or -1 with error
   filled to roll back (error->cls OQ_PG_ERR_RETRY_TXN asks for a re-run).
   It may run more than once per oq_txn_run, so it must start from its
   inputs every time, not from what an earlier run left in ctx. txn is the
   runner: pass it to oq_once, or get the connection with oq_txn_pg. */
typedef int (*oq_txn_body_fn)(oq_txn_t *txn, void *ctx, oq_pg_error_t *error);

/* Sleep ms milliseconds between re-runs; replaceable for tests. */
typedef void (*oq_txn_sleep_fn)(void *ctx, uint32_t ms);

/* A runner over db (borrowed) through ops (borrowed, static). */
oq_txn_t *oq_txn_new(const oq_txn_ops_t *ops, void *db, oq_txn_isolation_t isolation);

/* Free the runner and set *self_p to NULL. */
void oq_txn_destroy(oq_txn_t **self_p);

/* The PostgreSQL ops: db is an oq_pg_t. */
const oq_txn_ops_t *oq_txn_pg_ops(void);

/* Replace the sleep between re-runs (tests record it instead of waiting). */
void oq_txn_set_sleep(oq_txn_t *self, oq_txn_sleep_fn fn, void *ctx);

/* Run body in a transaction. 0 if it committed; -1 with error otherwise. A
   serialization failure or deadlock that persists through every re-run is
   returned as OQ_PG_ERR_TRANSIENT: retry the job later. */
int oq_txn_run(oq_txn_t *self, oq_txn_body_fn body, void *ctx, oq_pg_error_t *error);

/* How many times the last oq_txn_run began the transaction (1: no re-run). */
uint32_t oq_txn_attempts(const oq_txn_t *self);

/* True while a body of this runner runs (between BEGIN and COMMIT). */
bool oq_txn_active(const oq_txn_t *self);

/* The connection of a runner over oq_txn_pg_ops(), or NULL for other ops. */
oq_pg_t *oq_txn_pg(const oq_txn_t *self);

/* Parse "read-committed", "repeatable-read" or "serializable". 0 or -1. */
int oq_txn_isolation_parse(const char *text, oq_txn_isolation_t *out);

/* The name oq_txn_isolation_parse takes. */
const char *oq_txn_isolation_name(oq_txn_isolation_t isolation);

/* ---- batches: several items in one transaction --------------------------- */

/* A batch runs the effects of several items (jobs) in one transaction:
   one multi-row statement and one COMMIT instead of one of each per item.
   On any error of the batch's transaction (after its in-place re-runs for
   40001 and 40P01) nothing of it has committed, and the runner falls back
   to one transaction per item, run by the single runner with the same
   classes, so that one bad item fails alone and its neighbours are
   applied: they pay one rolled-back batch, no more. */

/* The most items one batch runs: the worker SDK's OQ_WORKER_MAX_BATCH. */
#define OQ_BATCH_MAX_ITEMS 256

/* What became of one item of a batch. */
typedef struct {
    /* Committed (error.cls OQ_PG_ERR_NONE): true if this run did the
       item's effect (its guard's row went in), false if a run before it
       had. */
    bool applied;
    /* OQ_PG_ERR_NONE if the item's effect is committed (or was before);
       otherwise why not, classified as the single runner classifies it. */
    oq_pg_error_t error;
} oq_batch_item_t;

/* The batch's transaction body, for items[0 .. count): 0 to commit, with
   items[i].applied set for every item; an item the body refuses without
   having written anything of it (a fact about its data that another run
   would find again: a contradicting second request) may get
   items[i].error set to OQ_PG_ERR_FAIL with the reason, and the others
   still commit. -1 with error filled rolls the whole batch back
   (OQ_PG_ERR_RETRY_TXN asks for a re-run in place; any other class makes
   the runner fall back to one item per transaction). It may run more than
   once: items is cleared before every run, and the body must start from
   its inputs. */
typedef int (*oq_batch_body_fn)(oq_txn_t *txn, void *ctx, size_t count, oq_batch_item_t *items,
                                oq_pg_error_t *error);

/* The transaction body of item index alone, as the item's single handler
   runs it: 0 to commit with *applied set, -1 with error to roll back
   (OQ_PG_ERR_RETRY_TXN: re-run in place). Used for a batch of one and
   for the fallback. It may run more than once. */
typedef int (*oq_batch_one_fn)(oq_txn_t *txn, void *ctx, size_t index, bool *applied,
                               oq_pg_error_t *error);

/* Run count items (1 .. OQ_BATCH_MAX_ITEMS) on txn: batch in one
   transaction (one at a time through `one` when count is 1), re-run in
   place for 40001 and 40P01 as oq_txn_run does; if it still fails, each
   item through `one` in a transaction of its own, in order. In the
   fallback, an item whose database cannot be reached (OQ_PG_ERR_CONNECTION)
   ends it: the items after it get the same error without being tried,
   since they would only wait for the same connection. items[count] is
   filled with every item's fate. batch_error (may be NULL) gets why the
   batch fell back, OQ_PG_ERR_NONE if it did not. 0 if every item's
   effect is committed (applied or not), -1 if at least one item's is
   not (its error says why). */
int oq_txn_run_batch(oq_txn_t *txn, size_t count, oq_batch_body_fn batch, oq_batch_one_fn one,
                     void *ctx, oq_batch_item_t *items, oq_pg_error_t *batch_error);

/* ---- the once-guard ----------------------------------------------------- */

/* Record, inside txn's transaction, that the effect named (scope, key) has
   happened: INSERT INTO onceq_once ... ON CONFLICT (scope, key) DO NOTHING.
   *applied is true if this call's row went in (this run owns the effect:
   do it, in the same transaction), false if the pair was on record (a run
   before this one did it: do nothing). A concurrent transaction holding the
   same pair uncommitted makes this call wait for it. job_id is recorded
   for people reading the table (0: none, stored as NULL). scope (1 to
   OQ_ONCE_MAX_SCOPE_LEN bytes) names the kind of effect, e.g. the job
   type; key (1 to OQ_ONCE_MAX_KEY_LEN bytes) names the business operation
   (never the job id). 0, or -1 with error (OQ_PG_ERR_FAIL for a scope or key
   out of bounds or a call outside a transaction body). */
int oq_once(oq_txn_t *txn, const char *scope, const char *key, uint64_t job_id, bool *applied,
            oq_pg_error_t *error);

/* ---- migrations --------------------------------------------------------- */

/* Versioned SQL files NNNN_name.sql in one directory are applied in version
   order, each in its own transaction together with its row in
   onceq_migrations(version, name, applied_at); a session advisory lock
   makes two migrators take turns. Files must not contain BEGIN or COMMIT,
   nor statements that cannot run in a transaction. */

/* Told about each migration as it is applied. */
typedef void (*oq_migrate_report_fn)(void *ctx, uint32_t version, const char *name);

/* Apply the migrations of dir that onceq_migrations does not record.
   report (may be NULL) hears of each one applied. 0 with *applied set to
   the number applied (0: up to date) and *latest to the highest version now
   recorded; -1 with error (a file problem is OQ_PG_ERR_FAIL). */
int oq_migrate_run(oq_pg_t *pg, const char *dir, oq_migrate_report_fn report, void *ctx,
                   uint32_t *applied, uint32_t *latest, oq_pg_error_t *error);

/* ---- the per-process handle --------------------------------------------- */

/* What a handler keeps per worker process: one connection and one runner
   over it. Create it in the process that runs the jobs (after fork, e.g.
   where the handler registers); it connects on the first job. */
typedef struct oq_effects oq_effects_t;

/* A handle for conninfo (as oq_pg_new) whose transactions run at
   isolation. application_name as oq_pg_new. Does not connect. */
oq_effects_t *oq_effects_new(const char *conninfo, oq_txn_isolation_t isolation,
                             const char *application_name);

/* The process's shared handle for conninfo and isolation: the first call
   makes it (as oq_effects_new, with this application_name), and every later
   call with the same conninfo and isolation returns the same handle, so
   that the handlers of one worker process share one connection rather than
   holding one each. Match every call with an oq_effects_destroy: the last
   one closes and frees it. Like the handles themselves, not thread-safe:
   call it on the thread that uses them (a worker's main thread, on
   its first job). */
oq_effects_t *oq_effects_shared(const char *conninfo, oq_txn_isolation_t isolation,
                                const char *application_name);

/* Close the connection if open, free, and set *self_p to NULL. A shared
   handle (oq_effects_shared) is only let go of by this user: it is closed
   and freed when its last user destroys it. */
void oq_effects_destroy(oq_effects_t **self_p);

/* Bound the statements of the job about to run, together, by its timeout
   (as oq_pg_set_job_timeout). Call it at the start of every job; under
   onceq-worker's runtime, oq_effects_worker_begin_job
   (onceq/effects_worker.h) calls it with the worker's --db-timeout where
   that is shorter. */
void oq_effects_begin_job(oq_effects_t *self, int64_t timeout_ms);

/* Run body in a transaction (oq_txn_run on the handle's runner). */
int oq_effects_run(oq_effects_t *self, oq_txn_body_fn body, void *ctx, oq_pg_error_t *error);

/* Run a batch on the handle's runner (oq_txn_run_batch). Call
   oq_effects_begin_job first, with the shortest timeout of the batch's
   jobs. */
int oq_effects_run_batch(oq_effects_t *self, size_t count, oq_batch_body_fn batch,
                         oq_batch_one_fn one, void *ctx, oq_batch_item_t *items,
                         oq_pg_error_t *batch_error);

/* Does the database answer now? Connects if the handle has no connection
   and runs SELECT 1, within a few seconds (OQ_EFFECTS_PROBE_TIMEOUT_MS).
   The connection stays open for the next job: a probe takes no connection
   beyond the handle's one. 0, or -1 with the classified error. For a
   worker waiting out an outage (onceq/effects_worker.h does the wiring).
   Not inside a transaction body. */
int oq_effects_probe(oq_effects_t *self, oq_pg_error_t *error);

/* Let the connection go (oq_pg_disconnect), for a worker process that
   idles or stops: a connection an idle process holds is one that another
   process may be refused for (max_connections). The next statement
   connects again. Not inside a transaction body. */
void oq_effects_release(oq_effects_t *self);

/* The handle's connection and runner (borrowed). */
oq_pg_t *oq_effects_pg(oq_effects_t *self);
oq_txn_t *oq_effects_txn(oq_effects_t *self);

#endif
