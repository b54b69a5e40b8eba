/*  test_timeout: a handler that overruns its timeout. The worker reports
    `timeout` and exits with its distinct status, the supervisor starts a
    fresh worker, the broker retries the job after its backoff, and after
    max_tries it sits in `onceq failed list` with the error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sys/wait.h>

#include "harness.h"

static int s_setup(void **state)
{
    *state = it_new("timeout");
    return *state ? 0 : -1;
}

static bool s_failed(const it_stats_t *s, const void *arg)
{
    (void)arg;
    return s->failed == 1;
}

static void test_overrun_restarts_worker_retries_then_fails(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--heartbeat-ms",
                           "200",
                           "--retry-after",
                           "3",
                           "--timeout",
                           "1",
                           "--timeout-margin",
                           "0.5",
                           NULL};
    assert_true(it_start_broker(it, flags) > 0);
    const char *worker_flags[] = {"--processes", "1", NULL};
    assert_true(it_start_worker_counted(it, "workers", worker_flags, 1) > 0);
    it_stats_t s;

    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    it_payload_uint(&payload, "ms", 20000);
    oq_job_msg_t options = {.timeout_ms = 1000,
                            .has_timeout = true,
                            .max_tries = 2,
                            .has_max_tries = true,
                            .backoff_ms = {500},
                            .backoff_len = 1};
    uint64_t id = it_dispatch(it, "sleep", &payload, &options);
    msgpack_sbuffer_destroy(&payload);
    assert_true(id > 0);

    int64_t waited = it_wait_stats(it, s_failed, NULL, IT_WAIT_MS, &s);
    assert_true(waited >= 0);
    /* Two runs of 1 s each and one backoff of 0.5 s cannot take less. */
    assert_true(waited >= 2500);
    assert_int_equal(s.retried, 2);
    assert_int_equal(s.done, 0);

    /* The supervisor restarted the worker after each overrun. */
    assert_int_equal(it_wait_log(it, "workers", "started worker pid=", 3, IT_WAIT_MS), 0);
    assert_int_equal(it_log_count(it, "workers", "outcome=timeout"), 2);
    assert_int_equal(it_log_count(it, "workers", "exited with status 3"), 2);

    /* `onceq failed list` shows it with its error. */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' failed list --json --broker '%s' > '%s/failed.json'",
             it_bin("onceq"), it->front, it->dir);
    assert_int_equal(system(cmd), 0);
    char path[300];
    snprintf(path, sizeof path, "%s/failed.json", it->dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char text[8192] = {0};
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    assert_true(got > 0);
    char want_id[64];
    snprintf(want_id, sizeof want_id, "%llu", (unsigned long long)id);
    assert_non_null(strstr(text, want_id));
    assert_non_null(strstr(text, "timeout"));
    assert_non_null(strstr(text, "attempt 2 of 2"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_overrun_restarts_worker_retries_then_fails, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
