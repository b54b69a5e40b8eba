/*  test_metrics_text: the rendered text has every family once, label values
    escaped as the format requires, histograms cumulative and ending in
    +Inf with count equal to it; and what rendering a large broker costs
    (printed, for docs/operations.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine_fixture.h"
#include "metrics.h"

static int64_t s_now(void *ctx)
{
    return *(int64_t *)ctx;
}

static oq_engine_t *s_engine(oq_clock_t *clock)
{
    oq_engine_config_t config = oq_engine_config_default();
    config.max_jobs = 100000;
    oq_engine_t *engine = oq_engine_new(&config, clock);
    assert_non_null(engine);
    return engine;
}

static void s_dispatch(oq_engine_t *engine, const char *queue, const char *type)
{
    oq_job_msg_t job = EF_JOB(.type = type, .queue = queue);
    uint64_t id;
    oq_err_t code;
    char reason[256];
    assert_int_equal(oq_engine_dispatch(engine, &job, &id, &code, reason, sizeof reason), 0);
}

static char *s_render(oq_engine_t *engine, const oq_histogram_t *fsync, size_t *len)
{
    oq_stats_journal_t j = {.enabled = fsync != NULL, .error = "", .fsync = "always"};
    oq_stats_auth_t a = {.curve = true};
    oq_stats_messages_t m = {.job_sent = 3, .jobs_sent = 2, .jobs_entries = 11};
    oq_stats_waits_t w = {.held = 7, .max = 65536, .max_per_peer = 256};
    oq_metrics_source_t source = {.engine = engine,
                                  .journal = &j,
                                  .auth = &a,
                                  .messages = &m,
                                  .waits = &w,
                                  .fsync_latency = fsync,
                                  .uptime_ms = 1500};
    char *text = oq_metrics_render(&source, len);
    assert_non_null(text);
    assert_int_equal(strlen(text), *len);
    return text;
}

static void test_labels_are_escaped_and_histograms_cumulative(void **state)
{
    (void)state;
    int64_t now = 1000;
    oq_clock_t clock = {s_now, s_now, &now};
    oq_engine_t *engine = s_engine(&clock);
    s_dispatch(engine, "we\"ird\\q", "noop");
    oq_histogram_t fsync;
    oq_histogram_init(&fsync, oq_histogram_fsync_us, oq_histogram_fsync_count);
    oq_histogram_observe(&fsync, 75);   /* le 0.0001 */
    oq_histogram_observe(&fsync, 3000); /* le 0.005 */
    size_t len;
    char *text = s_render(engine, &fsync, &len);
    assert_non_null(strstr(text, "onceq_queue_ready_jobs{queue=\"we\\\"ird\\\\q\"} 1\n"));
    assert_non_null(strstr(text, "onceq_type_ready_jobs{type=\"noop\"} 1\n"));
    assert_non_null(strstr(text, "onceq_journal_fsync_duration_seconds_bucket{le=\"5e-05\"} 0\n"));
    assert_non_null(strstr(text, "onceq_journal_fsync_duration_seconds_bucket{le=\"0.0001\"} 1\n"));
    assert_non_null(strstr(text, "onceq_journal_fsync_duration_seconds_bucket{le=\"0.005\"} 2\n"));
    assert_non_null(strstr(text, "onceq_journal_fsync_duration_seconds_bucket{le=\"+Inf\"} 2\n"));
    assert_non_null(strstr(text, "onceq_journal_fsync_duration_seconds_sum 0.003075\n"));
    assert_non_null(strstr(text, "onceq_journal_fsync_duration_seconds_count 2\n"));
    assert_non_null(strstr(text, "onceq_uptime_seconds 1.500\n"));
    assert_non_null(strstr(text, "onceq_worker_messages_total{cmd=\"jobs\"} 2\n"));
    assert_non_null(strstr(text, "onceq_worker_message_entries_total{cmd=\"jobs\"} 11\n"));
    assert_non_null(strstr(text, "onceq_worker_message_entries_total{cmd=\"job\"} 3\n"));
    assert_non_null(strstr(text, "# TYPE onceq_waits_held gauge\nonceq_waits_held 7\n"));
    assert_non_null(strstr(text, "onceq_waits_max 65536\n"));
    assert_non_null(strstr(text, "onceq_waits_max_per_connection 256\n"));
    /* Each family's TYPE line once. */
    assert_non_null(strstr(text, "# TYPE onceq_queue_done_total counter\n"));
    const char *first = strstr(text, "# TYPE onceq_queue_done_total");
    assert_null(strstr(first + 1, "# TYPE onceq_queue_done_total"));
    free(text);
    oq_engine_destroy(&engine);
}

/* The largest broker: every queue and a job type per queue. Printed, not
   asserted: a machine's speed is no test. */
static void test_rendering_a_large_broker(void **state)
{
    (void)state;
    int64_t now = 1000;
    oq_clock_t clock = {s_now, s_now, &now};
    oq_engine_t *engine = s_engine(&clock);
    char queue[32], type[32];
    for (int i = 0; i < OQ_MAX_QUEUES; i++) {
        snprintf(queue, sizeof queue, "queue-%d", i);
        snprintf(type, sizeof type, "type-%d", i);
        s_dispatch(engine, queue, type);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t len;
    char *text = s_render(engine, NULL, &len);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    print_message("rendered %d queues and %d types: %zu bytes in %.2f ms\n", OQ_MAX_QUEUES,
                  OQ_MAX_QUEUES, len, ms);
    assert_non_null(strstr(text, "onceq_queue_ready_jobs{queue=\"queue-1023\"} 1\n"));
    free(text);
    oq_engine_destroy(&engine);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_labels_are_escaped_and_histograms_cumulative),
        cmocka_unit_test(test_rendering_a_large_broker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
