/*  test_worker_main: oq_worker_main as a user's program gets it, through
    onceq-test-worker (a worker built on the public SDK): --help lists the
    registered job types, a worker without handlers and a bad flag are
    refused with the value named, every worker process of a supervisor
    reads the --database and --isolation settings, and SIGTERM stops the
    supervisor and its workers with status 0. --io-cpus confines the I/O
    thread of a worker and of the broker to the CPU given, and a CPU the
    process may not use is refused with the value named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#include "harness.h"
#include "support.h"

#define S_WORKER    "onceq-test-worker"
#define S_PROCESSES 2
#define S_JOBS      6
#define S_DB_URL    "host=/nonexistent dbname=sdk_test"

static int s_setup(void **state)
{
    *state = it_new("worker-main");
    return *state ? 0 : -1;
}

/* Run the test worker with args to its end; its exit status, output in log. */
static int s_run(it_t *it, const char *log, const char *const args[])
{
    const char *argv[16] = {it_bin(S_WORKER)};
    size_t n = 1;
    for (size_t i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = it_spawn(it, log, argv);
    assert_true(pid > 0);
    int status = it_wait_exit(pid, IT_WAIT_MS);
    assert_true(status >= 0 && WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_help_lists_registered_types(void **state)
{
    it_t *it = *state;
    const char *args[] = {"--help", NULL};
    assert_int_equal(s_run(it, "help", args), 0);
    char *text = it_read_log(it, "help");
    assert_non_null(text);
    assert_non_null(strstr(text, "usage: " S_WORKER " [options]"));
    assert_non_null(strstr(text, "Job types this worker handles (10):"));
    assert_non_null(
        strstr(text, "noop, sleep, fail, crash, settings, review, gate, grant_points,"));
    assert_non_null(strstr(text, "request_shipment, tally"));
    assert_non_null(strstr(text, "[ONCEQ_PREFETCH]"));
    assert_non_null(strstr(text, "[ONCEQ_BATCH]"));
    /* A handler's own flag, under its heading. */
    assert_non_null(strstr(text, "options of the handlers:\n  --carrier-url URL"));
    assert_non_null(strstr(text, "[ONCEQ_CARRIER_URL]"));
    assert_non_null(strstr(text, "--isolation LEVEL"));
    assert_non_null(strstr(text, "[ONCEQ_WORKER_BROKER]"));
    free(text);
}

static void test_no_handlers_is_refused(void **state)
{
    it_t *it = *state;
    setenv("ONCEQ_TEST_WORKER_EMPTY", "1", 1);
    const char *args[] = {NULL};
    int status = s_run(it, "empty", args);
    unsetenv("ONCEQ_TEST_WORKER_EMPTY");
    assert_int_equal(status, 2);
    assert_int_equal(it_log_count(it, "empty", "no job handlers registered"), 1);
}

static void test_bad_isolation_is_named(void **state)
{
    it_t *it = *state;
    const char *args[] = {"--isolation", "snapshot", NULL};
    assert_int_equal(s_run(it, "bad", args), 2);
    assert_int_equal(it_log_count(it, "bad",
                                  "invalid --isolation \"snapshot\": expected read-committed, "
                                  "repeatable-read or serializable"),
                     1);
    setenv("ONCEQ_DB_ISOLATION", "chaotic", 1);
    const char *none[] = {NULL};
    int status = s_run(it, "bad_env", none);
    unsetenv("ONCEQ_DB_ISOLATION");
    assert_int_equal(status, 2);
    assert_int_equal(it_log_count(it, "bad_env", "invalid ONCEQ_DB_ISOLATION \"chaotic\""), 1);
}

static void test_settings_reach_every_worker_process(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    it_use_worker(it, S_WORKER);
    const char *flags[] = {"--processes",  "2", "--database", S_DB_URL, "--isolation",
                           "serializable", NULL};
    pid_t supervisor = it_start_worker_counted(it, "workers", flags, S_PROCESSES);
    assert_true(supervisor > 0);
    it_stats_t s;

    for (int i = 0; i < S_JOBS; i++)
        assert_true(it_dispatch(it, "settings", NULL, NULL) > 0);
    assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
    uint64_t done = S_JOBS + 1;
    assert_true(it_wait_stats(it, it_done_at_least, &done, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    assert_int_equal(
        it_log_count(it, "workers", "settings: database_url=" S_DB_URL " isolation=serializable"),
        S_JOBS);

    it_signal(supervisor, SIGTERM);
    int status = it_wait_exit(supervisor, IT_WAIT_MS);
    assert_true(status >= 0 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_io_cpus_pin_the_io_threads(void **state)
{
    it_t *it = *state;
    cpu_set_t set;
    CPU_ZERO(&set);
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    int cpu = -1;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set))
            cpu = i;
    char text[16], seen[64];
    snprintf(text, sizeof text, "%d", cpu);
    const char *flags[] = {"--io-cpus", text, NULL};
    pid_t broker = it_start_broker(it, flags);
    assert_true(broker > 0);
    pid_t worker = it_start_worker_counted(it, "pinned", flags, 1);
    assert_true(worker > 0);
    assert_int_equal(oq_support_thread_cpus(broker, "ZMQbg/IO/", seen, sizeof seen), 0);
    assert_string_equal(seen, text);
    assert_int_equal(oq_support_thread_cpus(worker, "ZMQbg/IO/", seen, sizeof seen), 0);
    assert_string_equal(seen, text);
    assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
    uint64_t done = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_at_least, &done, IT_WAIT_MS, &s) >= 0);

    const char *bad[] = {"--io-cpus", "4096", NULL};
    assert_int_equal(s_run(it, "bad_cpu", bad), 2);
    assert_int_equal(it_log_count(it, "bad_cpu",
                                  "invalid --io-cpus \"4096\": expected CPUs this "
                                  "process may run on"),
                     1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_help_lists_registered_types, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_no_handlers_is_refused, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_bad_isolation_is_named, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_io_cpus_pin_the_io_threads, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_settings_reach_every_worker_process, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
