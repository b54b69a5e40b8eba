/*  test_prefetch: a worker that holds more than the job it runs
    (--prefetch N). The jobs it holds run one after another; on SIGTERM it
    hands them back unrun, using no try, and they run elsewhere; SIGKILLed,
    the broker gives them back at its death and they run elsewhere within
    the heartbeat window; a held job that waited half its timeout behind a
    longer one is handed back for a fresh lease instead of started, and
    those held behind a job that runs a second go back at once for a free
    worker. Every
    job is dispatched with max_tries 1 where a try used by mistake would
    fail it. Jobs held of a type with a batch function (onceq-test-worker's
    tally) run in one call, up to --batch, each acked on its own.

    With --prefetch auto (the default) a worker that has run short jobs
    gives the broker credit for several, up to a full batch of its batch
    type behind the running one, and holds them; a short job that
    lands behind a long one goes back within a few tens of ms for a free
    worker, not after a second. */
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

#define S_HEARTBEAT_MS "200"
#define S_HELD_JOBS    4
/* --prefetch auto: its cap, the short jobs dispatched behind a long one,
   and the bound on their wait: well below the second a fixed prefetch
   holds them (OQ_WORKER_HOLD_MAX_MS), far above the tens of ms auto takes.
   A worker with a type that takes batches may hold a full batch of it
   behind the running job: onceq-test-worker's grant_points takes 256 at
   a time, capped here by --batch 32 (given, so that ONCEQ_BATCH in the
   environment does not change it), so its cap is 33
   (OQ_WORKER_PREFETCH_AUTO_BATCH_CAP), not OQ_WORKER_PREFETCH_AUTO_CAP
   (8). */
#define S_AUTO_BATCH     "32"
#define S_AUTO_CAP       33
#define S_STOPPED_JOBS   40
#define S_SHORT_JOBS     6
#define S_SHORT_BOUND_MS 800

static int s_setup(void **state)
{
    *state = it_new("prefetch");
    return *state ? 0 : -1;
}

static void s_start_broker(it_t *it)
{
    const char *flags[] = {
        "--heartbeat-ms", S_HEARTBEAT_MS, "--retry-after", "60", "--timeout", "10", NULL};
    assert_true(it_start_broker(it, flags) > 0);
}

static pid_t s_worker(it_t *it, const char *log, const char *prefetch, uint64_t expect_workers)
{
    const char *flags[] = {"--prefetch", prefetch, "--heartbeat-ms", S_HEARTBEAT_MS, NULL};
    pid_t pid = it_start_worker_counted(it, log, flags, expect_workers);
    assert_true(pid > 0);
    return pid;
}

static uint64_t s_sleep_job(it_t *it, uint64_t ms, uint32_t max_tries, int64_t timeout_ms)
{
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    it_payload_uint(&payload, "ms", ms);
    oq_job_msg_t options = {.max_tries = max_tries,
                            .has_max_tries = true,
                            .timeout_ms = timeout_ms,
                            .has_timeout = timeout_ms > 0};
    uint64_t id = it_dispatch(it, "sleep", &payload, &options);
    msgpack_sbuffer_destroy(&payload);
    assert_true(id > 0);
    return id;
}

static void test_stop_hands_held_jobs_back_unrun(void **state)
{
    it_t *it = *state;
    s_start_broker(it);
    pid_t holder = s_worker(it, "holder", "4", 1);
    for (int i = 0; i < S_HELD_JOBS; i++)
        s_sleep_job(it, 800, 1, 0);
    /* One runs, three wait in the worker, all leased to it. */
    it_stats_t s;
    uint64_t all = S_HELD_JOBS;
    assert_true(it_wait_stats(it, it_leased_is, &all, IT_WAIT_MS, &s) >= 0);

    it_signal(holder, SIGTERM);
    int status = it_wait_exit(holder, IT_WAIT_MS);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(it_stats(it, &s) == 0);
    assert_int_equal(s.done, 1);
    assert_int_equal(s.ready, S_HELD_JOBS - 1);
    assert_int_equal(s.failed, 0);

    /* Handed back without a try: another worker runs each as its first. */
    s_worker(it, "other", "1", 1);
    assert_true(it_wait_stats(it, it_done_is, &all, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.retried, 0);
    char *log = it_read_log(it, "other");
    assert_null(strstr(log, "attempt=2"));
    free(log);
}

static void test_killed_holder_jobs_run_elsewhere(void **state)
{
    it_t *it = *state;
    s_start_broker(it);
    pid_t holder = s_worker(it, "holder", "4", 1);
    for (int i = 0; i < S_HELD_JOBS; i++)
        s_sleep_job(it, 1000, 3, 0);
    it_stats_t s;
    uint64_t all = S_HELD_JOBS;
    assert_true(it_wait_stats(it, it_leased_is, &all, IT_WAIT_MS, &s) >= 0);
    s_worker(it, "other", "1", 2);

    int64_t killed_at = it_now_ms();
    it_signal(holder, SIGKILL);
    it_wait_exit(holder, IT_WAIT_MS);
    assert_true(it_wait_stats(it, it_done_is, &all, IT_WAIT_MS, &s) >= 0);
    int64_t completed_ms = it_now_ms() - killed_at;
    print_message("holder killed: its %d jobs done elsewhere after %lld ms\n", S_HELD_JOBS,
                  (long long)completed_ms);
    /* Four 1 s jobs one after another, after the death is noticed: far
       below the 60 s retry_after. */
    assert_true(completed_ms < 5000 + S_HELD_JOBS * 1000);
    assert_int_equal(s.failed, 0);
}

static void test_held_job_that_waited_half_its_timeout_is_handed_back(void **state)
{
    it_t *it = *state;
    s_start_broker(it);
    s_worker(it, "holder", "2", 1);
    s_sleep_job(it, 600, 1, 0);
    /* Held behind the 0.6 s job, it waits at least half its 0.8 s timeout
       (and the 0.6 s job is not long enough to hand it back for that). */
    s_sleep_job(it, 10, 1, 800);
    it_stats_t s;
    uint64_t two = 2;
    assert_true(it_wait_stats(it, it_done_is, &two, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    char *log = it_read_log(it, "holder");
    assert_non_null(strstr(log, "handed back unrun for a fresh lease"));
    free(log);
}

static void test_held_jobs_behind_a_long_one_run_on_a_free_worker(void **state)
{
    it_t *it = *state;
    s_start_broker(it);
    s_worker(it, "holder", "3", 1);
    s_sleep_job(it, 4000, 1, 0);
    s_sleep_job(it, 10, 1, 0);
    s_sleep_job(it, 10, 1, 0);
    it_stats_t s;
    uint64_t three = 3;
    assert_true(it_wait_stats(it, it_leased_is, &three, IT_WAIT_MS, &s) >= 0);
    s_worker(it, "free", "1", 2);
    assert_true(it_wait_stats(it, it_done_is, &three, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    char *holder = it_read_log(it, "holder");
    char *free_log = it_read_log(it, "free");
    assert_non_null(strstr(holder, "handing back 2 held job(s) for other workers"));
    /* The free worker ran both, each as its first attempt. */
    const char *at = free_log;
    for (int i = 0; i < 2; i++) {
        at = strstr(at, "type=sleep attempt=1 outcome=ok");
        assert_non_null(at);
        at++;
    }
    free(holder);
    free(free_log);
}

static uint64_t s_tally_job(it_t *it, uint64_t ms, bool fail)
{
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "ms", 2);
    msgpack_pack_uint64(&pk, ms);
    msgpack_pack_str_with_body(&pk, "fail", 4);
    if (fail)
        msgpack_pack_true(&pk);
    else
        msgpack_pack_false(&pk);
    oq_job_msg_t options = {.max_tries = 1, .has_max_tries = true};
    uint64_t id = it_dispatch(it, "tally", &payload, &options);
    msgpack_sbuffer_destroy(&payload);
    assert_true(id > 0);
    return id;
}

static bool s_settled(const it_stats_t *s, const void *arg)
{
    return s->done + s->failed == *(const uint64_t *)arg;
}

/* One tally job of 500 ms runs alone; the n behind it arrive while it runs
   and are held; then they go to the batch function, batch at a time. */
static char *s_run_tallies(it_t *it, const char *batch, int n)
{
    s_start_broker(it);
    it_use_worker(it, "onceq-test-worker");
    const char *flags[] = {"--prefetch", "8", "--batch", batch, NULL};
    assert_true(it_start_worker_counted(it, "batcher", flags, 1) > 0);
    it_stats_t s;
    s_tally_job(it, 500, false);
    for (int i = 0; i < n; i++)
        s_tally_job(it, 0, i == 1);
    uint64_t all = (uint64_t)n + 1;
    assert_true(it_wait_stats(it, s_settled, &all, IT_WAIT_MS, &s) >= 0);
    /* Acked one by one: the one told to fail failed alone. */
    assert_int_equal(s.done, (uint64_t)n);
    assert_int_equal(s.failed, 1);
    return it_read_log(it, "batcher");
}

static void test_held_jobs_of_a_batch_type_run_in_one_call(void **state)
{
    char *log = s_run_tallies(*state, "8", 5);
    assert_non_null(strstr(log, "tally: one call for 5 jobs"));
    free(log);
}

static void test_batch_flag_caps_a_call(void **state)
{
    char *log = s_run_tallies(*state, "2", 4);
    char *first = strstr(log, "tally: one call for 2 jobs");
    assert_non_null(first);
    assert_non_null(strstr(first + 1, "tally: one call for 2 jobs"));
    assert_null(strstr(log, "tally: one call for 3"));
    free(log);
}

static void test_batch_one_runs_each_alone(void **state)
{
    char *log = s_run_tallies(*state, "1", 3);
    assert_null(strstr(log, "tally: one call"));
    free(log);
}

/* ---- --prefetch auto ---------------------------------------------------- */

static uint64_t s_noop_job(it_t *it)
{
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    it_payload_uint(&payload, "n", 1);
    oq_job_msg_t options = {.max_tries = 1, .has_max_tries = true};
    uint64_t id = it_dispatch(it, "noop", &payload, &options);
    msgpack_sbuffer_destroy(&payload);
    assert_true(id > 0);
    return id;
}

/* Every connected worker has exactly *arg credits at the broker. */
static bool s_credits_are(const it_stats_t *s, const void *arg)
{
    uint32_t want = *(const uint32_t *)arg;
    for (size_t i = 0; i < s->workers; i++)
        if (s->worker[i].credit != want)
            return false;
    return s->workers > 0;
}

/* Short jobs, one after another: the workers' limits grow to the cap,
   and each gives the broker that much credit while idle. */
static void s_warm_up(it_t *it, uint64_t jobs)
{
    for (uint64_t i = 0; i < jobs; i++)
        s_noop_job(it);
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_is, &jobs, IT_WAIT_MS, &s) >= 0);
    uint32_t cap = S_AUTO_CAP;
    assert_true(it_wait_stats(it, s_credits_are, &cap, IT_WAIT_MS, &s) >= 0);
}

static void test_auto_worker_of_short_jobs_holds_several(void **state)
{
    it_t *it = *state;
    /* A heartbeat long enough that the stop below is not a death. */
    const char *broker_flags[] = {"--heartbeat-ms", "1000", "--timeout", "10", NULL};
    assert_true(it_start_broker(it, broker_flags) > 0);
    const char *flags[] = {"--prefetch",  "auto",  "--batch", S_AUTO_BATCH,
                           "--log-level", "debug", NULL};
    pid_t worker = it_start_worker_counted(it, "auto", flags, 1);
    assert_true(worker > 0);
    /* Before any job it takes one at a time. */
    it_stats_t s;
    assert_true(it_stats(it, &s) == 0);
    assert_int_equal(s.worker[0].credit, 1);
    s_warm_up(it, 50);

    /* Stopped, it cannot take the jobs that come now: the broker leases it
       as many as its credit, the cap, and keeps the rest; they wait in the
       worker, held, and run one after another once it goes on. */
    it_signal(worker, SIGSTOP);
    for (int i = 0; i < S_STOPPED_JOBS; i++)
        s_noop_job(it);
    uint64_t cap = S_AUTO_CAP;
    assert_true(it_wait_stats(it, it_leased_is, &cap, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.worker[0].leased, S_AUTO_CAP);
    assert_int_equal(s.ready, S_STOPPED_JOBS - S_AUTO_CAP);
    it_signal(worker, SIGCONT);
    uint64_t all = 50 + S_STOPPED_JOBS;
    assert_true(it_wait_stats(it, it_done_is, &all, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.retried, 0);
    /* Its limit grew to the cap from the run times, as its log says. */
    assert_true(it_log_count(it, "auto", "prefetch auto: holding up to 33 job(s)") >= 1);
}

static void test_auto_short_job_does_not_wait_behind_a_long_one(void **state)
{
    it_t *it = *state;
    s_start_broker(it);
    const char *flags[] = {"--prefetch",     "auto",         "--batch", S_AUTO_BATCH,
                           "--heartbeat-ms", S_HEARTBEAT_MS, NULL};
    assert_true(it_start_worker_counted(it, "a", flags, 1) > 0);
    assert_true(it_start_worker_counted(it, "b", flags, 2) > 0);
    s_warm_up(it, 100);

    /* A long job, then short ones: round-robin gives some of them to the
       worker of the long job, with credit for several. With a fixed
       prefetch they would wait there a second (OQ_WORKER_HOLD_MAX_MS)
       before going back; with auto they go back within the keeper's
       patience and the other worker runs them. */
    s_sleep_job(it, 3000, 1, 0);
    int64_t start = it_now_ms();
    for (int i = 0; i < S_SHORT_JOBS; i++)
        s_noop_job(it);
    uint64_t shorts_done = 100 + S_SHORT_JOBS;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_is, &shorts_done, IT_WAIT_MS, &s) >= 0);
    int64_t waited_ms = it_now_ms() - start;
    print_message("%d short jobs done %lld ms after their dispatch began, beside a 3 s job\n",
                  S_SHORT_JOBS, (long long)waited_ms);
    assert_int_equal(s.leased, 1); /* the long one still runs */
    assert_true(waited_ms < S_SHORT_BOUND_MS);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.retried, 0);
    uint64_t all = shorts_done + 1;
    assert_true(it_wait_stats(it, it_done_is, &all, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stop_hands_held_jobs_back_unrun, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_killed_holder_jobs_run_elsewhere, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_held_job_that_waited_half_its_timeout_is_handed_back,
                                        s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_held_jobs_behind_a_long_one_run_on_a_free_worker,
                                        s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_held_jobs_of_a_batch_type_run_in_one_call, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_batch_flag_caps_a_call, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_batch_one_runs_each_alone, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_auto_worker_of_short_jobs_holds_several, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_auto_short_job_does_not_wait_behind_a_long_one,
                                        s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
