/*  handler.c: the grant_points job handler (and, with test hooks, its
    deliberately broken twin grant_points_unguarded).

    The handler decides nothing about the effect itself: the use case
    (grant.c) and the database do. What it owns is the translation at both
    ends: a payload into checked arguments, and a result into an outcome,
    with an error text that names the field, the customer or the database
    class involved. */
#include "points/handler.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "onceq/log.h"
#include "pg/pg.h"
#include "points/grant.h"
#include "points/ledger_pg.h"
#include "worker_limits.h"

#define S_APPLICATION_NAME "onceq-worker"
#define S_NS_PER_MS        1000000L
#define S_MS_PER_S         1000

struct oq_points_handler {
    oq_pg_t *pg;         /* owned; NULL when the ledger is borrowed */
    oq_ledger_t *ledger; /* owned when pg is set */
    oq_txn_t *txn;       /* owned when pg is set */
    bool test_hooks;     /* test_* payload keys count; the unguarded type exists */
};

/* A grant's arguments, checked. */
typedef struct {
    int64_t order_id;
    int64_t customer_id;
    int64_t points;
} s_args_t;

/* The test hooks a payload asked for (all 0 without test hooks). */
typedef struct {
    uint64_t job_id;                     /* for the hook log lines a chaos run reads */
    int64_t order_id;                    /* likewise */
    uint32_t attempt;                    /* the job's delivery attempt */
    uint64_t fail_after_commit_attempt;  /* on this attempt, report retry after COMMIT */
    uint64_t kill_after_commit_attempt;  /* on this attempt, SIGKILL after COMMIT */
    uint64_t pause_ms;                   /* pause this long inside the transaction ... */
    uint64_t pause_attempt;              /* ... on this attempt (default 1) */
    uint64_t pause_after_commit_ms;      /* pause this long after COMMIT, before the ack ... */
    uint64_t pause_after_commit_attempt; /* ... on this attempt (default 1) */
    uint64_t trace;                      /* 1: log which process runs the job */
} s_hooks_t;

/* ---- lifecycle -------------------------------------------------------- */

oq_points_handler_t *oq_points_handler_new(const oq_points_config_t *config)
{
    assert(config);
    oq_points_handler_t *self = calloc(1, sizeof *self);
    assert(self);
    self->pg = oq_pg_new(config->database_url, S_APPLICATION_NAME);
    self->ledger = oq_ledger_pg_new(self->pg);
    self->txn = oq_txn_new(oq_txn_pg_ops(), self->pg, config->isolation);
    self->test_hooks = config->test_hooks;
    return self;
}

oq_points_handler_t *oq_points_handler_new_on(oq_ledger_t *ledger, oq_txn_t *txn, bool test_hooks)
{
    assert(ledger && txn);
    oq_points_handler_t *self = calloc(1, sizeof *self);
    assert(self);
    self->ledger = ledger;
    self->txn = txn;
    self->test_hooks = test_hooks;
    return self;
}

void oq_points_handler_destroy(oq_points_handler_t **self_p)
{
    assert(self_p);
    oq_points_handler_t *self = *self_p;
    if (!self)
        return;
    if (self->pg) {
        oq_txn_destroy(&self->txn);
        oq_ledger_destroy(&self->ledger);
        oq_pg_destroy(&self->pg);
    }
    free(self);
    *self_p = NULL;
}

/* ---- payload ---------------------------------------------------------- */

/* A required integer field in [1, max]. 0, or -1 after reporting fail. */
static int s_required(const oq_job_t *job, const char *key, int64_t max, int64_t *out,
                      oq_report_t *report)
{
    uint64_t value;
    if (!oq_payload_get(job, key)) {
        oq_report_fail(report, "%s: payload field \"%s\" is missing", job->type, key);
        return -1;
    }
    if (oq_payload_uint(job, key, &value) < 0 || value < 1 || value > (uint64_t)max) {
        oq_report_fail(report, "%s: payload field \"%s\" must be an integer from 1 to %" PRId64,
                       job->type, key, max);
        return -1;
    }
    *out = (int64_t)value;
    return 0;
}

static int s_decode(const oq_job_t *job, s_args_t *args, oq_report_t *report)
{
    if (s_required(job, "order_id", INT64_MAX, &args->order_id, report) < 0 ||
        s_required(job, "customer_id", INT64_MAX, &args->customer_id, report) < 0 ||
        s_required(job, "points", OQ_MAX_POINTS, &args->points, report) < 0)
        return -1;
    return 0;
}

/* An optional unsigned hook field; absent leaves *out alone. */
static int s_optional(const oq_job_t *job, const char *key, uint64_t max, uint64_t *out,
                      oq_report_t *report)
{
    if (!oq_payload_get(job, key))
        return 0;
    if (oq_payload_uint(job, key, out) < 0 || *out > max) {
        oq_report_fail(report, "%s: payload field \"%s\" must be an integer from 0 to %" PRIu64,
                       job->type, key, max);
        return -1;
    }
    return 0;
}

/* The test_* keys, read only when test hooks are on: in production they
   are ignored like any other unknown key. */
static int s_decode_hooks(const oq_points_handler_t *self, const oq_job_t *job,
                          const s_args_t *args, s_hooks_t *hooks, oq_report_t *report)
{
    memset(hooks, 0, sizeof *hooks);
    hooks->job_id = job->id;
    hooks->order_id = args->order_id;
    hooks->attempt = job->attempt;
    hooks->pause_attempt = 1;
    hooks->pause_after_commit_attempt = 1;
    if (!self->test_hooks)
        return 0;
    if (s_optional(job, "test_fail_after_commit_attempt", UINT32_MAX,
                   &hooks->fail_after_commit_attempt, report) < 0 ||
        s_optional(job, "test_kill_after_commit_attempt", UINT32_MAX,
                   &hooks->kill_after_commit_attempt, report) < 0 ||
        s_optional(job, "test_pause_in_txn_ms", (uint64_t)OQ_MAX_TIMEOUT_MS, &hooks->pause_ms,
                   report) < 0 ||
        s_optional(job, "test_pause_attempt", UINT32_MAX, &hooks->pause_attempt, report) < 0 ||
        s_optional(job, "test_pause_after_commit_ms", (uint64_t)OQ_MAX_TIMEOUT_MS,
                   &hooks->pause_after_commit_ms, report) < 0 ||
        s_optional(job, "test_pause_after_commit_attempt", UINT32_MAX,
                   &hooks->pause_after_commit_attempt, report) < 0 ||
        s_optional(job, "test_trace", 1, &hooks->trace, report) < 0)
        return -1;
    return 0;
}

/* ---- test hooks ------------------------------------------------------- */

static void s_sleep_ms(uint64_t ms)
{
    struct timespec pause = {.tv_sec = (time_t)(ms / S_MS_PER_S),
                             .tv_nsec = (long)(ms % S_MS_PER_S) * S_NS_PER_MS};
    while (nanosleep(&pause, &pause) < 0 && errno == EINTR)
        ;
}

/* Inside the transaction, after the grant row went in: hold the row lock
   for a while, so that a second run of the job (a redelivery after the
   lease ran out) meets the first one mid-transaction. */
static void s_after_insert(void *arg)
{
    const s_hooks_t *hooks = arg;
    if (hooks->pause_ms == 0 || hooks->attempt != hooks->pause_attempt)
        return;
    oq_info("test hook: pausing inside transaction for %" PRIu64 " ms", hooks->pause_ms);
    s_sleep_ms(hooks->pause_ms);
}

/* Before the work: which process runs which job. A chaos run that kills a
   process reads this to know which job it took down with it; the pid is in
   the line because every process of a pool writes to the same log. */
static void s_trace(const s_hooks_t *hooks)
{
    if (!hooks->trace)
        return;
    oq_info("test hook: pid %d runs job %" PRIu64 " attempt %u (order %" PRId64 ")", (int)getpid(),
            hooks->job_id, hooks->attempt, hooks->order_id);
}

/* After a COMMIT that succeeded: the ways a worker can lose the fact that
   it committed (its ack, its life). The pause holds the process in exactly
   that window, committed and not yet acked, long enough for a chaos run to
   SIGKILL it there from outside; the line names the job, the order and the
   process so that it knows whom to kill. */
static void s_after_commit(const s_hooks_t *hooks, oq_report_t *report)
{
    if (hooks->pause_after_commit_ms && hooks->attempt == hooks->pause_after_commit_attempt) {
        oq_info("test hook: pausing after commit for %" PRIu64 " ms (job %" PRIu64
                ", order %" PRId64 ", pid %d)",
                hooks->pause_after_commit_ms, hooks->job_id, hooks->order_id, (int)getpid());
        s_sleep_ms(hooks->pause_after_commit_ms);
    }
    if (hooks->kill_after_commit_attempt && hooks->attempt == hooks->kill_after_commit_attempt) {
        oq_warn("test hook: SIGKILL after commit (job %" PRIu64 ", order %" PRId64 ", pid %d)",
                hooks->job_id, hooks->order_id, (int)getpid());
        raise(SIGKILL);
    }
    if (hooks->fail_after_commit_attempt && hooks->attempt == hooks->fail_after_commit_attempt)
        oq_report_retry(report, "test hook: failing after commit");
}

/* ---- outcome ---------------------------------------------------------- */

static void s_report_error(const oq_job_t *job, const oq_pg_error_t *error, oq_report_t *report)
{
    oq_outcome_t outcome = oq_pg_errors_outcome(error->cls);
    const char *sqlstate = error->sqlstate[0] ? error->sqlstate : "-";
    char text[OQ_MAX_ERROR_LEN + 1];
    if (error->cls == OQ_PG_ERR_UNKNOWN) {
        oq_warn("job %" PRIu64 ": the database connection was lost during COMMIT; reporting "
                "retry (a second run finds the grant if it was committed)",
                job->id);
        snprintf(text, sizeof text,
                 "%s: connection lost during COMMIT, outcome unknown (safe to retry: a second "
                 "run finds the grant if it was committed): %s",
                 job->type, error->message);
    } else {
        const char *hint = oq_pg_errors_hint(error);
        snprintf(text, sizeof text, "%s: database error (%s, SQLSTATE %s): %s%s%s", job->type,
                 oq_pg_errors_class_name(error->cls), sqlstate, error->message, hint ? "; " : "",
                 hint ? hint : "");
    }
    if (outcome == OQ_OUTCOME_FAIL)
        oq_report_fail(report, "%s", text);
    else
        oq_report_retry(report, "%s", text);
}

static void s_report(const oq_job_t *job, const s_args_t *args, const oq_grant_result_t *result,
                     oq_report_t *report)
{
    switch (result->status) {
    case OQ_GRANT_GRANTED:
        oq_debug("job %" PRIu64 ": granted %" PRId64 " points to customer %" PRId64
                 " for order %" PRId64,
                 job->id, args->points, args->customer_id, args->order_id);
        oq_report_ok(report, OQ_RESULT_APPLIED);
        break;
    case OQ_GRANT_ALREADY_GRANTED:
        oq_info("job %" PRIu64 ": order %" PRId64 " was already granted; nothing changed", job->id,
                args->order_id);
        oq_report_ok(report, OQ_RESULT_ALREADY_APPLIED);
        break;
    case OQ_GRANT_UNKNOWN_CUSTOMER:
    case OQ_GRANT_CONFLICT:
    case OQ_GRANT_INVALID:
        oq_report_fail(report, "%s: %s", job->type, result->error.message);
        break;
    case OQ_GRANT_ERROR:
        s_report_error(job, &result->error, report);
        break;
    }
}

/* ---- the handlers ----------------------------------------------------- */

static void s_grant_points(const oq_job_t *job, void *state, oq_report_t *report)
{
    oq_points_handler_t *self = state;
    s_args_t args;
    s_hooks_t hooks;
    if (s_decode(job, &args, report) < 0 || s_decode_hooks(self, job, &args, &hooks, report) < 0)
        return;
    s_trace(&hooks);
    if (self->pg)
        oq_pg_set_timeout(self->pg, job->timeout_ms);
    oq_grant_hooks_t grant_hooks = {s_after_insert, &hooks};
    oq_grant_result_t result;
    int rc = oq_grant_order_points(self->ledger, self->txn, args.order_id, args.customer_id,
                                   args.points, &grant_hooks, &result);
    s_report(job, &args, &result, report);
    if (rc == 0)
        s_after_commit(&hooks, report);
}

/* The body of grant_points_unguarded: the balance first, then the grant
   row with its outcome ignored. A second run adds the points again. */
typedef struct {
    oq_ledger_t *ledger;
    oq_ledger_grant_t grant;
    s_hooks_t *hooks;
} s_unguarded_t;

static int s_unguarded_body(void *arg, oq_pg_error_t *error)
{
    s_unguarded_t *ctx = arg;
    bool found;
    if (oq_ledger_add_to_balance(ctx->ledger, ctx->grant.customer_id, ctx->grant.points, &found,
                                 error) < 0)
        return -1;
    if (!found) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "customer %" PRId64 " has no balance row (add it with: onceq customer "
                         "add %" PRId64 ")",
                         ctx->grant.customer_id, ctx->grant.customer_id);
        return -1;
    }
    s_after_insert(ctx->hooks);
    oq_ledger_insert_t ignored;
    return oq_ledger_insert_grant(ctx->ledger, &ctx->grant, &ignored, error);
}

static void s_grant_points_unguarded(const oq_job_t *job, void *state, oq_report_t *report)
{
    oq_points_handler_t *self = state;
    s_args_t args;
    s_hooks_t hooks;
    if (s_decode(job, &args, report) < 0 || s_decode_hooks(self, job, &args, &hooks, report) < 0)
        return;
    s_trace(&hooks);
    if (self->pg)
        oq_pg_set_timeout(self->pg, job->timeout_ms);
    s_unguarded_t ctx = {
        .ledger = self->ledger,
        .grant = {args.order_id, OQ_GRANT_REASON_ORDER, args.customer_id, args.points},
        .hooks = &hooks,
    };
    oq_pg_error_t error;
    if (oq_txn_run(self->txn, s_unguarded_body, &ctx, &error) < 0) {
        s_report_error(job, &error, report);
        return;
    }
    oq_report_ok(report, OQ_RESULT_APPLIED);
    s_after_commit(&hooks, report);
}

int oq_points_handler_register(oq_points_handler_t *self, oq_registry_t *registry)
{
    assert(self && registry);
    if (oq_registry_add(registry, OQ_POINTS_JOB_TYPE, s_grant_points, self) < 0)
        return -1;
    if (!self->test_hooks)
        return 0;
    oq_warn("test hooks are on (ONCEQ_TEST_HOOKS=1): test_* payload keys are honoured and the "
            "unguarded job type %s exists; never run production jobs like this",
            OQ_POINTS_UNGUARDED_JOB_TYPE);
    return oq_registry_add(registry, OQ_POINTS_UNGUARDED_JOB_TYPE, s_grant_points_unguarded, self);
}
