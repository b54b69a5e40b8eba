/*  test_redelivery: the two ways a delivery outlives its worker.
    (ii) A worker SIGKILLed mid-job: the broker finds it dead by heartbeats
    and the job runs to completion on another worker within the heartbeat
    window, long before retry_after.
    (iii) A worker SIGSTOPped past retry_after: its lease runs out, the job is
    redelivered and completed elsewhere; when the first worker resumes, its
    late ack is taken without an error and the job is not counted twice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <signal.h>

#include "harness.h"

#define S_HEARTBEAT_MS  200
#define S_LIVENESS      3
#define S_RETRY_AFTER_S 60
#define S_JOB_MS        1500

static int s_setup(void **state)
{
    *state = it_new("redelivery");
    return *state ? 0 : -1;
}

static bool s_redelivered(const it_stats_t *s, const void *arg)
{
    (void)arg;
    return s->redelivered == 1 && s->leased == 1;
}

static bool s_ignored_acks(const it_stats_t *s, const void *arg)
{
    return s->ignored_acks >= *(const uint64_t *)arg;
}

static uint32_t s_leasing_pid(const it_stats_t *s)
{
    for (size_t i = 0; i < s->workers; i++)
        if (s->worker[i].leased)
            return s->worker[i].pid;
    return 0;
}

/* Two single workers; returns after both registered. */
static void s_two_workers(it_t *it, pid_t pids[2])
{
    pids[0] = it_start_worker(it, "worker1", NULL);
    assert_true(pids[0] > 0);
    pids[1] = it_start_worker_counted(it, "worker2", NULL, 2);
    assert_true(pids[1] > 0);
}

static uint64_t s_sleep_job(it_t *it, uint64_t ms)
{
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    it_payload_uint(&payload, "ms", ms);
    uint64_t id = it_dispatch(it, "sleep", &payload, NULL);
    msgpack_sbuffer_destroy(&payload);
    assert_true(id > 0);
    return id;
}

static void test_killed_worker_job_completes_within_heartbeat_window(void **state)
{
    it_t *it = *state;
    char hb[16], live[16], ra[16];
    snprintf(hb, sizeof hb, "%d", S_HEARTBEAT_MS);
    snprintf(live, sizeof live, "%d", S_LIVENESS);
    snprintf(ra, sizeof ra, "%d", S_RETRY_AFTER_S);
    const char *flags[] = {"--heartbeat-ms", hb,   "--liveness", live, "--retry-after", ra,
                           "--timeout",      "10", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    pid_t pids[2];
    s_two_workers(it, pids);

    s_sleep_job(it, S_JOB_MS);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_leased_is, &one, IT_WAIT_MS, &s) >= 0);
    uint32_t victim = s_leasing_pid(&s);
    assert_true(victim == (uint32_t)pids[0] || victim == (uint32_t)pids[1]);

    int64_t killed_at = it_now_ms();
    it_signal((pid_t)victim, SIGKILL);
    assert_true(it_wait_stats(it, s_redelivered, NULL, IT_WAIT_MS, &s) >= 0);
    int64_t redelivered_ms = it_now_ms() - killed_at;
    assert_int_not_equal(s_leasing_pid(&s), victim);
    assert_true(it_wait_stats(it, it_done_is, &one, IT_WAIT_MS, &s) >= 0);
    int64_t completed_ms = it_now_ms() - killed_at;
    print_message("worker killed: job redelivered after %lld ms, completed after %lld ms "
                  "(heartbeat window %d ms, retry_after %d s)\n",
                  (long long)redelivered_ms, (long long)completed_ms, S_HEARTBEAT_MS * S_LIVENESS,
                  S_RETRY_AFTER_S);
    /* Generous bound, yet an order of magnitude under retry_after. */
    assert_true(redelivered_ms < 5000);
    assert_true(completed_ms < 5000 + S_JOB_MS);
    assert_int_equal(s.done, 1);
    assert_int_equal(s.failed, 0);
}

static void test_paused_worker_late_ack_is_not_counted_twice(void **state)
{
    it_t *it = *state;
    /* Heartbeats that tolerate a long pause, so the lease (2 s) is what
       runs out, not the worker's liveness. */
    const char *flags[] = {"--heartbeat-ms",   "500", "--liveness", "40",
                           "--retry-after",    "2",   "--timeout",  "1.2",
                           "--timeout-margin", "0.5", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    pid_t pids[2];
    s_two_workers(it, pids);

    uint64_t id = s_sleep_job(it, 1000);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_leased_is, &one, IT_WAIT_MS, &s) >= 0);
    uint32_t paused = s_leasing_pid(&s);
    assert_true(paused > 0);
    it_signal((pid_t)paused, SIGSTOP);

    assert_true(it_wait_stats(it, s_redelivered, NULL, IT_WAIT_MS, &s) >= 0);
    assert_int_not_equal(s_leasing_pid(&s), paused);
    it_signal((pid_t)paused, SIGCONT);

    /* Both deliveries finish; whichever acks second finds the job done. */
    assert_true(it_wait_stats(it, s_ignored_acks, &one, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.done, 1);
    assert_int_equal(s.dispatched, 1);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.ignored_acks, 1);
    assert_int_equal(s.unknown_acks, 0);
    assert_true(s.late_acks <= 1);
    assert_int_equal(s.workers, 2); /* the paused worker is still in service */

    /* Both workers ran the job and said ok; neither got an error back. */
    char line[64];
    snprintf(line, sizeof line, "job %llu ", (unsigned long long)id);
    for (int w = 0; w < 2; w++) {
        char *log = it_read_log(it, w == 0 ? "worker1" : "worker2");
        const char *at = strstr(log, line);
        assert_non_null(at);
        assert_non_null(strstr(at, "outcome=ok"));
        assert_null(strstr(log, "broker error"));
        free(log);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_killed_worker_job_completes_within_heartbeat_window,
                                        s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_paused_worker_late_ack_is_not_counted_twice, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
