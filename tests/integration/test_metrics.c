/*  test_metrics: a broker started with --metrics serves GET /metrics; the
    text passes `promtool check metrics`, and its counters follow the jobs
    a worker runs (done from 0 to N, the latency histogram's count N) and
    the waits held (up while a producer waits for a job, down once it is
    answered). A
    bad address is refused at start with a reason. Without promtool the
    check is skipped with a message, unless CI is set: then it fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "harness.h"
#include "scrape.h"
#include "onceq/limits.h"

#define S_JOBS           20
#define S_POLL_MS        50
#define S_HTTP_TIMEOUT_S 10
#define S_CALL_MS        5000
#define S_WAIT_S         600 /* a wait answered by its job's end, not by this */

static int s_setup(void **state)
{
    *state = it_new("metrics");
    return *state ? 0 : -1;
}

/* GET url; the body (caller frees) and the status in *status. */
static char *s_get(const char *url, long *status)
{
    const char *error = NULL;
    char *text = oq_scrape_get(url, S_HTTP_TIMEOUT_S, status, &error);
    if (!text)
        fail_msg("GET %s: %s", url, error);
    return text;
}

/* Scrape until the sample reaches want (the loop renders every 250 ms). */
static char *s_scrape_until(const char *url, const char *series, double want)
{
    int64_t end = it_now_ms() + IT_WAIT_MS;
    for (;;) {
        long status = 0;
        char *text = s_get(url, &status);
        if (status == 200 && oq_scrape_value(text, series) == want)
            return text;
        if (it_now_ms() > end)
            fail_msg("%s never reached %g; last scrape (HTTP %ld):\n%s", series, want, status,
                     text);
        free(text);
        usleep(S_POLL_MS * 1000);
    }
}

static bool s_promtool_present(void)
{
    return system("command -v promtool >/dev/null 2>&1") == 0;
}

/* promtool check metrics on text: its exit status, and its output printed
   on failure. */
static void s_promtool_check(it_t *it, const char *text)
{
    if (!s_promtool_present()) {
        const char *ci = getenv("CI");
        if (ci && *ci && strcmp(ci, "0") != 0 && strcmp(ci, "false") != 0)
            fail_msg("promtool is missing and CI is set: install the Debian package "
                     "prometheus (deploy/install-deps.sh)");
        print_message("SKIPPED promtool check: promtool is missing (Debian package "
                      "prometheus; deploy/install-deps.sh installs it)\n");
        return;
    }
    char path[512], cmd[1200];
    snprintf(path, sizeof path, "%s/metrics.txt", it->dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' > '%s.out' 2>&1", path, path);
    int status = system(cmd);
    if (status != 0) {
        snprintf(cmd, sizeof cmd, "cat '%s.out'", path);
        if (system(cmd) != 0)
            print_message("(no promtool output)\n");
        fail_msg("promtool check metrics failed (status %d) on %s", status, path);
    }
}

static void test_metrics_follow_the_jobs(void **state)
{
    it_t *it = *state;
    const char *broker_flags[] = {"--heartbeat-ms", "200", "--metrics", "127.0.0.1:0", NULL};
    assert_true(it_start_broker(it, broker_flags) > 0);
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metrics", it_metrics_port(it));

    /* Before any job: served, valid, and nothing done. */
    char *text = s_scrape_until(url, "onceq_workers_connected", 0);
    assert_non_null(strstr(text, "onceq_build_info{version=\""));
    double done = oq_scrape_value(text, "onceq_queue_done_total{queue=\"default\"}");
    assert_true(done == -1 || done == 0);
    s_promtool_check(it, text);
    free(text);

    const char *worker_flags[] = {"--processes", "1", NULL};
    assert_true(it_start_worker(it, "worker", worker_flags) > 0);
    free(s_scrape_until(url, "onceq_workers_connected", 1));
    for (int i = 0; i < S_JOBS; i++)
        assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);

    text = s_scrape_until(url, "onceq_queue_done_total{queue=\"default\"}", S_JOBS);
    assert_true(oq_scrape_value(text, "onceq_queue_dispatched_total{queue=\"default\"}") == S_JOBS);
    assert_true(oq_scrape_value(text, "onceq_type_done_total{type=\"noop\"}") == S_JOBS);
    assert_true(oq_scrape_value(
                    text, "onceq_queue_job_duration_seconds_count{queue=\"default\"}") == S_JOBS);
    assert_true(oq_scrape_value(text, "onceq_queue_job_duration_seconds_bucket{queue=\"default\","
                                      "le=\"+Inf\"}") == S_JOBS);
    assert_true(oq_scrape_value(text, "onceq_queue_ready_jobs{queue=\"default\"}") == 0);
    /* Exported, and nothing was handed back or paused in this run. */
    assert_true(oq_scrape_value(text, "onceq_queue_returned_total{queue=\"default\"}") == 0);
    assert_true(oq_scrape_value(text, "onceq_workers_unavailable") == 0);
    /* The journal fsynced the jobs' records (fsync always), and timed it. */
    double fsyncs = oq_scrape_value(text, "onceq_journal_fsyncs_total");
    assert_true(fsyncs > 0);
    assert_true(oq_scrape_value(text, "onceq_journal_fsync_duration_seconds_count") == fsyncs);
    assert_true(oq_scrape_value(text, "onceq_auth_curve") == 1);
    assert_true(oq_scrape_value(text, "onceq_waits_held") == 0);
    assert_true(oq_scrape_value(text, "onceq_waits_max") == OQ_MAX_WAITERS);
    assert_true(oq_scrape_value(text, "onceq_waits_max_per_connection") == OQ_MAX_WAITERS_PER_PEER);
    s_promtool_check(it, text);
    free(text);

    /* A producer waits for a delayed job: held; cancelled: answered, and
       no longer held. */
    oq_job_msg_t later = {.delay_ms = 600000, .has_delay = true};
    uint64_t id = it_dispatch(it, "noop", NULL, &later);
    assert_true(id > 0);
    void *producer = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_wait(&buf, 1, id, S_WAIT_S * 1000);
    it_send(producer, &buf);
    free(s_scrape_until(url, "onceq_waits_held", 1));
    msgpack_sbuffer_destroy(&buf);
    it_cancel(it, id);
    oq_msg_t reply;
    assert_int_equal(it_expect(producer, OQ_CMD_WAITED, &reply, S_CALL_MS), 0);
    assert_int_equal(reply.wait_state, OQ_WAIT_CANCELLED);
    oq_proto_msg_release(&reply);
    text = s_scrape_until(url, "onceq_waits_held", 0);
    s_promtool_check(it, text);
    free(text);

    /* Anything but GET /metrics is refused, and the server still serves. */
    long status = 0;
    char other[128];
    snprintf(other, sizeof other, "http://127.0.0.1:%u/other", it_metrics_port(it));
    free(s_get(other, &status));
    assert_int_equal(status, 404);
    free(s_get(url, &status));
    assert_int_equal(status, 200);
}

static void test_bad_metrics_address_is_refused(void **state)
{
    it_t *it = *state;
    const char *broker_flags[] = {"--metrics", "nowhere", NULL};
    assert_true(it_start_broker(it, broker_flags) < 0);
    char *log = it_read_log(it, "broker");
    if (!strstr(log, "refusing to start: metrics address 'nowhere'"))
        fail_msg("no reason in the log:\n%s", log);
    free(log);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics_follow_the_jobs, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_bad_metrics_address_is_refused, s_setup, it_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
