/*  test_worker.c: onceq-test-worker, the worker the tests start when they
    need handlers that must never ship in a production binary. It is built
    on the public SDK like any user's worker (oq_worker_main over a
    registry), and installed only with the other test tools: the testing
    component, the onceq-testing package beside onceq-chaos, never the
    production onceq package.

    Handlers: the built-ins (noop, sleep, fail, crash), and
      settings {}   logs "settings: database_url=<url> isolation=<level>"
                    (oq_worker_settings as the worker process sees it), ok
      grant_points, grant_points_unguarded
                    with ONCEQ_TEST_HOOKS=1: the order-points handler with
                    its test hooks, and its unguarded twin (points_hooks.h);
                    otherwise the production grant_points only; over the
                    worker's --database
      request_shipment
                    the production shipment handler, with --carrier-url
      request_shipment_unkeyed
                    with ONCEQ_TEST_HOOKS=1: its broken twin that keys the
                    carrier call by the job id (shipments_hooks.h)
      review {reason?: str}
                    the outcome unknown: to the broker's review store with
                    the reason (the dashboard's browser test resolves it)
      gate {file: str}
                    fails for good while FILE exists, else ok: a job that
                    fails until the test opens the gate and retries it
      tally {ms?: uint, fail?: bool}
                    a type with a batch function (up to 8 jobs): alone it
                    sleeps ms, then ok; a batch logs "tally: one call for N
                    jobs" and reports each job ok, or fail where fail is
                    true, on its own

    ONCEQ_TEST_WORKER_EMPTY=1 registers nothing, to show that a worker
    without handlers is refused. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "onceq/log.h"
#include "onceq/worker.h"
#include "points_hooks.h"
#include "shipments_hooks.h"
#include "shipments/handler.h"

static void s_settings(const oq_job_t *job, void *state, oq_report_t *report)
{
    const oq_worker_settings_t *settings = oq_worker_settings();
    if (!settings) {
        oq_report_fail(report, "settings: oq_worker_settings() is NULL in a worker process");
        return;
    }
    oq_info("settings: database_url=%s isolation=%s", settings->database_url, settings->isolation);
    oq_report_ok(report, OQ_RESULT_NONE);
}

static void s_review(const oq_job_t *job, void *state, oq_report_t *report)
{
    (void)state;
    oq_str_t reason = {0};
    if (oq_payload_str(job, "reason", &reason) == 0 && reason.len > 0)
        oq_report_review(report, "%.*s", (int)reason.len, reason.ptr);
    else
        oq_report_review(report, "review: told the outcome is unknown");
}

static void s_gate(const oq_job_t *job, void *state, oq_report_t *report)
{
    (void)state;
    oq_str_t file = {0};
    char path[512];
    if (oq_payload_str(job, "file", &file) < 0 || file.len == 0 || file.len >= sizeof path) {
        oq_report_fail(report, "gate: payload field \"file\" must name a file");
        return;
    }
    memcpy(path, file.ptr, file.len);
    path[file.len] = 0;
    struct stat st;
    if (stat(path, &st) == 0)
        oq_report_fail(report, "gate: closed while %s exists", path);
    else
        oq_report_ok(report, OQ_RESULT_APPLIED);
}

static void s_tally(const oq_job_t *job, void *state, oq_report_t *report)
{
    (void)state;
    uint64_t ms = 0;
    bool fail = false;
    oq_payload_uint(job, "ms", &ms);
    oq_payload_bool(job, "fail", &fail);
    if (ms > 0) {
        struct timespec pause = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        while (nanosleep(&pause, &pause) < 0)
            ;
    }
    if (fail)
        oq_report_fail(report, "tally: told to fail");
    else
        oq_report_ok(report, OQ_RESULT_APPLIED);
}

static void s_tally_batch(const oq_job_t *const *jobs, size_t count, void *state,
                          oq_report_t *reports)
{
    (void)state;
    oq_info("tally: one call for %zu jobs", count);
    for (size_t i = 0; i < count; i++) {
        bool fail = false;
        oq_payload_bool(jobs[i], "fail", &fail);
        if (fail)
            oq_report_fail(&reports[i], "tally: told to fail");
        else
            oq_report_ok(&reports[i], OQ_RESULT_APPLIED);
    }
}

int main(int argc, char **argv)
{
    oq_registry_t *registry = oq_registry_new();
    oq_points_handler_t *points = NULL;
    oq_shipments_handler_t *shipments = NULL;
    const char *empty = getenv("ONCEQ_TEST_WORKER_EMPTY");
    if (!empty || strcmp(empty, "1") != 0) {
        oq_builtin_register(registry);
        if (oq_registry_add(registry, "settings", s_settings, NULL) < 0 ||
            oq_registry_add(registry, "review", s_review, NULL) < 0 ||
            oq_registry_add(registry, "gate", s_gate, NULL) < 0)
            return 2;
        /* Opens its database on the first job of each worker process. The
           hooked handlers only with ONCEQ_TEST_HOOKS=1; the production one
           otherwise, as onceq-worker registers it. */
        points = oq_points_handler_new(NULL);
        if ((oq_points_test_hooks_wanted() ? oq_points_test_register(registry, points)
                                           : oq_points_handler_register(points, registry)) < 0)
            return 2;
        shipments = oq_shipments_handler_new(NULL);
        if (oq_shipments_handler_register(shipments, registry) < 0 ||
            oq_registry_add(registry, "tally", s_tally, NULL) < 0 ||
            oq_registry_set_batch(registry, "tally", s_tally_batch, 8) < 0)
            return 2;
        if (oq_points_test_hooks_wanted() && oq_shipments_test_register(registry) < 0)
            return 2;
    }
    int rc = oq_worker_main(argc, argv, registry);
    oq_shipments_handler_destroy(&shipments);
    oq_points_handler_destroy(&points);
    return rc;
}
