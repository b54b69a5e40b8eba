/*  test_long_handler: handlers run on the worker's main thread, and a long
    one has the keeper thread hold the link meanwhile. A handler that
    blocks for many heartbeat intervals leaves its worker alive to the
    broker (its job is not given to another worker, and is acked on its
    first attempt), and the jobs held behind it are handed back within
    about OQ_WORKER_HOLD_MAX_MS for a free worker; touches from a handler
    that sleeps far past its timeout and past the lease reach the broker,
    which keeps the lease, and the worker, whose watchdog waits. Each test
    would fail with a worker whose link stops while its handler runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define S_HEARTBEAT_MS "100"

static int s_setup(void **state)
{
    *state = it_new("long_handler");
    return *state ? 0 : -1;
}

static pid_t s_worker(it_t *it, const char *log, const char *prefetch, uint64_t expect_workers)
{
    const char *flags[] = {"--prefetch", prefetch, "--heartbeat-ms", S_HEARTBEAT_MS, NULL};
    pid_t pid = it_start_worker_counted(it, log, flags, expect_workers);
    assert_true(pid > 0);
    return pid;
}

static uint64_t s_sleep_job(it_t *it, uint64_t ms, uint64_t touch_ms, uint32_t max_tries)
{
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, touch_ms ? 2 : 1);
    oq_proto_pack_cstr(&pk, "ms");
    msgpack_pack_uint64(&pk, ms);
    if (touch_ms) {
        oq_proto_pack_cstr(&pk, "touch_ms");
        msgpack_pack_uint64(&pk, touch_ms);
    }
    oq_job_msg_t options = {.max_tries = max_tries, .has_max_tries = true};
    uint64_t id = it_dispatch(it, "sleep", &payload, &options);
    msgpack_sbuffer_destroy(&payload);
    assert_true(id > 0);
    return id;
}

/* 30 heartbeats of 100 ms in one handler call: the broker would call the
   worker dead after 3 missed. */
static void test_blocking_handler_keeps_worker_alive_and_hands_held_back(void **state)
{
    it_t *it = *state;
    const char *flags[] = {
        "--heartbeat-ms", S_HEARTBEAT_MS, "--retry-after", "60", "--timeout", "10", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    s_worker(it, "holder", "3", 1);
    s_sleep_job(it, 3000, 0, 1);
    s_sleep_job(it, 10, 0, 1);
    s_sleep_job(it, 10, 0, 1);
    it_stats_t s;
    uint64_t three = 3, two = 2;
    assert_true(it_wait_stats(it, it_leased_is, &three, IT_WAIT_MS, &s) >= 0);
    int64_t held_ms = it_now_ms();
    s_worker(it, "free", "1", 2);
    /* The held jobs went back at about a second of the long one and ran on
       the free worker while the long one still runs. */
    assert_true(it_wait_stats(it, it_done_is, &two, IT_WAIT_MS, &s) >= 0);
    int64_t handed_ms = it_now_ms() - held_ms;
    print_message("held jobs done elsewhere %lld ms after the long job started\n",
                  (long long)handed_ms);
    assert_true(handed_ms < 2500);
    assert_int_equal(s.workers, 2);
    assert_true(it_wait_stats(it, it_done_is, &three, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.redelivered, 0);
    assert_int_equal(it_log_count(it, "holder", "handing back 2 held job(s) for other workers"), 1);
    assert_int_equal(it_log_count(it, "holder", "type=sleep attempt=1 outcome=ok ms=3"), 1);
    assert_int_equal(it_log_count(it, "free", "type=sleep attempt=1 outcome=ok"), 2);
    assert_int_equal(it_log_count(it, "holder", "the broker has been silent"), 0);
    assert_int_equal(it_log_count(it, "holder", "asked us to register again"), 0);
}

/* A 4.5 s handler with a 1 s timeout and a 3 s lease, touching every
   200 ms: each touch restarts both. */
static void test_touches_from_a_long_handler_reach_the_broker(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--retry-after", "3", "--timeout", "1", "--timeout-margin", "2", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    s_worker(it, "worker", "1", 1);
    uint64_t id = s_sleep_job(it, 4500, 200, 3);
    it_stats_t s;
    uint64_t one = 1;
    assert_true(it_wait_stats(it, it_leased_is, &one, IT_WAIT_MS, &s) >= 0);
    /* A second worker would get the job again (it has tries left) if the
       lease ran out, or if the first fell silent. */
    s_worker(it, "other", "1", 2);
    assert_true(it_wait_stats(it, it_done_is, &one, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.redelivered, 0);
    assert_int_equal(s.retried, 0);
    assert_int_equal(s.failed, 0);
    char needle[64];
    snprintf(needle, sizeof needle, "job %llu type=sleep attempt=1 outcome=ok",
             (unsigned long long)id);
    /* The worker may write its line after the broker counted the ack. */
    assert_int_equal(it_wait_log(it, "worker", needle, 1, IT_WAIT_MS), 0);
    assert_int_equal(it_log_count(it, "worker", needle), 1);
    assert_int_equal(it_log_count(it, "other", "type=sleep"), 0);
    assert_int_equal(it_log_count(it, "worker", "ran past its timeout"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_blocking_handler_keeps_worker_alive_and_hands_held_back, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_touches_from_a_long_handler_reach_the_broker, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
