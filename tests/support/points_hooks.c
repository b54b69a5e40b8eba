/*  points_hooks.c: grant_points with its test hooks, and the unguarded
    twin. Test builds only; the production handler (worker/points) has no
    hooks. The hooked grant_points runs the production handler's own steps
    (oq_points_decode, oq_grant_order_points, oq_points_report) and adds the
    hooks around them, so that what a chaos run tests is the production
    path plus pauses, not a copy of it. */
#include "points_hooks.h"
#include "support.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "onceq/effects_worker.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "points/grant.h"

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

/* ---- payload ---------------------------------------------------------- */

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

/* The test_* keys. */
static int s_decode_hooks(const oq_job_t *job, const oq_points_args_t *args, s_hooks_t *hooks,
                          oq_report_t *report)
{
    memset(hooks, 0, sizeof *hooks);
    hooks->job_id = job->id;
    hooks->order_id = args->order_id;
    hooks->attempt = job->attempt;
    hooks->pause_attempt = 1;
    hooks->pause_after_commit_attempt = 1;
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

/* Inside the transaction, after the grant row went in: hold the row lock
   for a while, so that a second run of the job (a redelivery after the
   lease ran out) meets the first one mid-transaction. */
static void s_after_insert(void *arg)
{
    const s_hooks_t *hooks = arg;
    if (hooks->pause_ms == 0 || hooks->attempt != hooks->pause_attempt)
        return;
    oq_info("test hook: pausing inside transaction for %" PRIu64 " ms", hooks->pause_ms);
    oq_support_sleep_ms((int)hooks->pause_ms); /* at most OQ_MAX_TIMEOUT_MS */
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
        oq_support_sleep_ms((int)hooks->pause_after_commit_ms);
    }
    if (hooks->kill_after_commit_attempt && hooks->attempt == hooks->kill_after_commit_attempt) {
        oq_warn("test hook: SIGKILL after commit (job %" PRIu64 ", order %" PRId64 ", pid %d)",
                hooks->job_id, hooks->order_id, (int)getpid());
        raise(SIGKILL);
    }
    if (hooks->fail_after_commit_attempt && hooks->attempt == hooks->fail_after_commit_attempt)
        oq_report_retry(report, "test hook: failing after commit");
}

/* ---- the handlers ----------------------------------------------------- */

static void s_grant_points(const oq_job_t *job, void *state, oq_report_t *report)
{
    oq_points_handler_t *points = state;
    oq_points_args_t args;
    s_hooks_t hooks;
    if (oq_points_decode(job, &args, report) < 0 || s_decode_hooks(job, &args, &hooks, report) < 0)
        return;
    s_trace(&hooks);
    if (oq_points_handler_begin_job(points, job, report) < 0)
        return;
    oq_grant_hooks_t grant_hooks = {s_after_insert, &hooks};
    oq_grant_result_t result;
    int rc =
        oq_grant_order_points(oq_points_handler_ledger(points), oq_points_handler_txn(points),
                              args.order_id, args.customer_id, args.points, &grant_hooks, &result);
    oq_points_report(job, &args, &result, report);
    if (rc == 0)
        s_after_commit(&hooks, report);
}

/* The batch function of the hooked grant_points: the production one
   (oq_points_grant_batch) for the jobs it can take, with the hooks around
   it. A job whose hooks act inside the transaction (the pause after its
   INSERT) runs alone through s_grant_points, as it would without
   batching; the after-COMMIT hooks act after the batch's COMMIT, for the
   jobs it committed: a pause holds every job of the batch committed and
   unacked, a SIGKILL loses all their acks at once, which is what a chaos
   run wants to see survived. */
void oq_points_test_grant_batch(const oq_job_t *const *jobs, size_t count, void *state,
                                oq_report_t *reports)
{
    oq_points_handler_t *points = state;
    s_hooks_t *hooks = calloc(count, sizeof *hooks);
    const oq_job_t **batch = calloc(count, sizeof *batch);
    oq_report_t *batch_reports = calloc(count, sizeof *batch_reports);
    size_t *which = calloc(count, sizeof *which); /* job of each batched one */
    assert(hooks && batch && batch_reports && which);
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        oq_points_args_t args;
        if (oq_points_decode(jobs[i], &args, &reports[i]) < 0 ||
            s_decode_hooks(jobs[i], &args, &hooks[i], &reports[i]) < 0)
            continue;
        if (hooks[i].pause_ms && hooks[i].attempt == hooks[i].pause_attempt) {
            s_grant_points(jobs[i], state, &reports[i]);
            continue;
        }
        s_trace(&hooks[i]);
        which[n] = i;
        batch[n++] = jobs[i];
    }
    if (n > 0)
        oq_points_grant_batch(batch, n, points, batch_reports);
    for (size_t k = 0; k < n; k++)
        reports[which[k]] = batch_reports[k];
    for (size_t k = 0; k < n; k++)
        if (reports[which[k]].outcome == OQ_OUTCOME_OK)
            s_after_commit(&hooks[which[k]], &reports[which[k]]);
    free(which);
    free(batch_reports);
    free(batch);
    free(hooks);
}

/* The body of grant_points_unguarded: the balance first, then the grant
   row with its outcome ignored. A second run adds the points again. */
typedef struct {
    oq_ledger_t *ledger;
    oq_ledger_grant_t grant;
    s_hooks_t *hooks;
} s_unguarded_t;

static int s_unguarded_body(oq_txn_t *txn, void *arg, oq_pg_error_t *error)
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
    oq_points_handler_t *points = state;
    oq_points_args_t args;
    s_hooks_t hooks;
    if (oq_points_decode(job, &args, report) < 0 || s_decode_hooks(job, &args, &hooks, report) < 0)
        return;
    s_trace(&hooks);
    if (oq_points_handler_begin_job(points, job, report) < 0)
        return;
    s_unguarded_t ctx = {
        .ledger = oq_points_handler_ledger(points),
        .grant = {args.order_id, OQ_GRANT_REASON_ORDER, args.customer_id, args.points},
        .hooks = &hooks,
    };
    oq_pg_error_t error;
    if (oq_txn_run(oq_points_handler_txn(points), s_unguarded_body, &ctx, &error) < 0) {
        oq_effects_report_error(report, job, &error);
        return;
    }
    oq_report_ok(report, OQ_RESULT_APPLIED);
    s_after_commit(&hooks, report);
}

int oq_points_test_register(oq_registry_t *registry, oq_points_handler_t *points)
{
    assert(registry && points);
    oq_warn("test hooks are on (%s=1): test_* payload keys are honoured and the "
            "unguarded job type %s exists; never run production jobs like this",
            OQ_POINTS_TEST_HOOKS_ENV, OQ_POINTS_UNGUARDED_JOB_TYPE);
    if (oq_registry_add(registry, OQ_POINTS_JOB_TYPE, s_grant_points, points) < 0 ||
        oq_registry_set_batch(registry, OQ_POINTS_JOB_TYPE, oq_points_test_grant_batch,
                              OQ_WORKER_MAX_BATCH) < 0 ||
        oq_registry_add(registry, OQ_POINTS_UNGUARDED_JOB_TYPE, s_grant_points_unguarded, points) <
            0)
        return -1;
    /* Both run on the one connection of this process. */
    if (oq_points_handler_needs_database(points, registry, OQ_POINTS_JOB_TYPE) < 0)
        return -1;
    return oq_points_handler_needs_database(points, registry, OQ_POINTS_UNGUARDED_JOB_TYPE);
}

bool oq_points_test_hooks_wanted(void)
{
    const char *value = getenv(OQ_POINTS_TEST_HOOKS_ENV);
    return value && strcmp(value, "1") == 0;
}
