/*  hello.c: a complete onceq worker for one job type, "hello", built on the
    installed SDK alone (onceq/worker.h, onceq/effects.h).

    A hello job carries {"name": TEXT} and greets that name once: however
    often a job for the same name runs (a retry, a redelivery, the same
    name dispatched twice), exactly one greeting is recorded, and the job
    reports "applied" the first time and "already_applied" after that.

    The greeting is a row in hello_greetings, a log with no key of its own.
    What makes it happen once is the once-guard: oq_once(scope "hello", key
    NAME) inserts a row into onceq_once in the same transaction as the
    greeting, and only the run whose guard row went in writes the greeting.
    Both commit together or neither does.

    Build against an installed onceq:

      cc hello.c $(pkg-config --cflags --libs onceq-worker onceq-effects) -o hello-worker

    and run it with every flag of onceq-worker (--broker, --processes,
    --database, --isolation, ...; see --help). README.md walks through it. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <onceq/effects.h>
#include <onceq/effects_worker.h>
#include <onceq/log.h>
#include <onceq/worker.h>

#define HELLO_JOB_TYPE "hello"
/* The once-guard's scope: the kind of effect. The key is the name. */
#define HELLO_ONCE_SCOPE "hello"
/* The name is the guard's key, so the guard's bound is the name's bound. */
#define HELLO_MAX_NAME_BYTES OQ_ONCE_MAX_KEY_LEN
/* How much of a refused name an error message quotes, in bytes. */
#define HELLO_QUOTE_BYTES 32
/* What pg_stat_activity shows for this worker's connections. */
#define HELLO_APPLICATION_NAME "onceq-hello"

/* The example's own table. No UNIQUE on name, on purpose: the table only
   records what happened, and the once-guard alone decides that it happens
   once per name. (A table with a natural key can be its own guard instead:
   see docs/handlers.md, "the other pattern".) */
static const char *const s_schema_sql = "CREATE TABLE IF NOT EXISTS hello_greetings ("
                                        " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                                        " name text NOT NULL,"
                                        " job_id bigint NOT NULL,"
                                        " greeted_at timestamptz NOT NULL DEFAULT now())";

/* Worker processes that start together would race in CREATE TABLE IF NOT
   EXISTS (two of them can both find no table, and one then fails on the
   catalog's unique index); a transaction-scoped advisory lock makes them
   take turns. */
static const char *const s_schema_lock_sql = "SELECT pg_advisory_xact_lock(hashtext($1))";

/* Per worker process. main makes one before oq_worker_main forks, so each
   worker process has its own copy, without a connection until its first
   job: a connection must never cross a fork. Only the main thread uses it. */
typedef struct {
    oq_effects_t *fx;  /* this process's connection and runner; NULL before the first job */
    bool schema_ready; /* hello_greetings is known to exist */
} hello_t;

/* One greeting, the transaction body's input and output. */
typedef struct {
    const char *name; /* the guard's key and the greeting's subject */
    uint64_t job_id;  /* recorded for people reading the tables */
    bool applied;     /* out: this run's guard row went in */
} greeting_t;

/* ---- payload ---------------------------------------------------------- */

static const char *s_type_name(msgpack_object_type type)
{
    switch (type) {
    case MSGPACK_OBJECT_NIL:
        return "null";
    case MSGPACK_OBJECT_BOOLEAN:
        return "a boolean";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return "a number";
    case MSGPACK_OBJECT_ARRAY:
        return "an array";
    case MSGPACK_OBJECT_MAP:
        return "an object";
    case MSGPACK_OBJECT_BIN:
        return "binary data";
    default:
        return "another type";
    }
}

/* Copy the payload's "name" into name (HELLO_MAX_NAME_BYTES + 1 bytes).
   0, or -1 after reporting fail with what is wrong and the value: a bad
   payload fails the same way on every try, so it is never retried. */
static int s_read_name(const oq_job_t *job, char *name, oq_report_t *report)
{
    const msgpack_object *value = oq_payload_get(job, "name");
    oq_str_t text;
    if (!value) {
        oq_report_fail(report, "%s: payload field \"name\" is missing (expected {\"name\": TEXT})",
                       job->type);
        return -1;
    }
    if (oq_payload_str(job, "name", &text) < 0) {
        oq_report_fail(report, "%s: payload field \"name\" must be text, not %s", job->type,
                       s_type_name(value->type));
        return -1;
    }
    if (text.len == 0) {
        oq_report_fail(report, "%s: payload field \"name\" is empty", job->type);
        return -1;
    }
    if (text.len > HELLO_MAX_NAME_BYTES) {
        oq_report_fail(report, "%s: payload field \"name\" (\"%.*s...\") is %zu bytes, at most %d",
                       job->type, HELLO_QUOTE_BYTES, text.ptr, text.len, HELLO_MAX_NAME_BYTES);
        return -1;
    }
    /* A NUL would cut the C string short and greet another name. */
    if (memchr(text.ptr, '\0', text.len)) {
        oq_report_fail(report, "%s: payload field \"name\" (\"%.*s...\") contains a NUL byte",
                       job->type, HELLO_QUOTE_BYTES, text.ptr);
        return -1;
    }
    memcpy(name, text.ptr, text.len);
    name[text.len] = '\0';
    return 0;
}

/* ---- the database ----------------------------------------------------- */

/* On the first job of this process: a handle from the worker's --database
   and --isolation. It connects on its first statement. 0, or -1 after
   reporting fail. */
static int s_open(hello_t *self, const oq_job_t *job, oq_report_t *report)
{
    if (self->fx)
        return 0;
    const oq_worker_settings_t *settings = oq_worker_settings();
    oq_txn_isolation_t isolation;
    if (!settings || oq_txn_isolation_parse(settings->isolation, &isolation) < 0) {
        oq_report_fail(report,
                       "%s: no database settings in this process (run it under "
                       "oq_worker_main)",
                       job->type);
        return -1;
    }
    self->fx = oq_effects_new(settings->database_url, isolation, HELLO_APPLICATION_NAME);
    return 0;
}

/* Transaction body: create hello_greetings unless it exists. */
static int s_create_schema(oq_txn_t *txn, void *ctx, oq_pg_error_t *error)
{
    (void)ctx;
    oq_pg_t *pg = oq_txn_pg(txn);
    const char *lock_name[] = {"hello_greetings"};
    if (oq_pg_exec(pg, s_schema_lock_sql, 1, lock_name, NULL, error) < 0)
        return -1;
    return oq_pg_exec(pg, s_schema_sql, 0, NULL, NULL, error);
}

/* Transaction body: the guard first, then the greeting, only if the guard's
   row went in. It may run more than once (the runner re-runs it after a
   serialization failure), so it starts from its inputs every time. */
static int s_greet_once(oq_txn_t *txn, void *ctx, oq_pg_error_t *error)
{
    greeting_t *greeting = ctx;
    if (oq_once(txn, HELLO_ONCE_SCOPE, greeting->name, greeting->job_id, &greeting->applied,
                error) < 0)
        return -1;
    if (!greeting->applied)
        return 0; /* a run before this one greeted this name: nothing to do */
    char job_id[24];
    snprintf(job_id, sizeof job_id, "%" PRIu64, greeting->job_id);
    const char *params[] = {greeting->name, job_id};
    return oq_pg_exec(oq_txn_pg(txn), "INSERT INTO hello_greetings (name, job_id) VALUES ($1, $2)",
                      2, params, NULL, error);
}

/* ---- the handler ------------------------------------------------------ */

static void s_hello(const oq_job_t *job, void *state, oq_report_t *report)
{
    hello_t *self = state;
    char name[HELLO_MAX_NAME_BYTES + 1];
    if (s_read_name(job, name, report) < 0 || s_open(self, job, report) < 0)
        return;
    /* Statements of this job end before the job's timeout (or the
       worker's --db-timeout) would. */
    oq_effects_worker_begin_job(self->fx, job);
    oq_pg_error_t error;
    if (!self->schema_ready) {
        if (oq_effects_run(self->fx, s_create_schema, NULL, &error) < 0) {
            oq_effects_report_error(report, job, &error);
            return;
        }
        self->schema_ready = true;
    }
    greeting_t greeting = {.name = name, .job_id = job->id};
    if (oq_effects_run(self->fx, s_greet_once, &greeting, &error) < 0) {
        /* fail for bad data; unavailable (no try used) when the database is
           down or the connection was lost, even during COMMIT: the guard's
           row, if it committed, makes the next run a no-op; retry for the
           rest. */
        oq_effects_report_error(report, job, &error);
        return;
    }
    if (greeting.applied)
        oq_info("hello, %s! (job %" PRIu64 ")", name, job->id);
    else
        oq_info("%s was greeted before; job %" PRIu64 " changes nothing", name, job->id);
    oq_effects_report_ok(report, greeting.applied);
}

int main(int argc, char **argv)
{
    static hello_t hello; /* per process after the fork; lives until exit */
    oq_registry_t *handlers = oq_registry_new();
    /* hello needs the database behind hello.fx: while it is down the
       worker takes no job and probes it, and an idle worker closes its
       connection (docs/handlers.md, "When the database is away"). */
    if (oq_registry_add(handlers, HELLO_JOB_TYPE, s_hello, &hello) < 0 ||
        oq_effects_worker_needs(handlers, HELLO_JOB_TYPE, &hello.fx) < 0) {
        oq_registry_destroy(&handlers);
        return 2;
    }
    return oq_worker_main(argc, argv, handlers);
}
