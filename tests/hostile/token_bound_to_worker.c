/*  token_bound_to_worker: under CURVE a lease token proves a delivery only
    from the worker key it was delivered to. Two raw workers with two
    allowed worker keys: A takes the job; B replays A's token in an ok,
    which is fenced and changes nothing, and the job is still A's to ack.
    Then the broker restarts and A, on a fresh socket with its own key,
    acks with the same token: taken, the job is done. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "harness.h"
#include "onceq/keys.h"

#define S_PEER_WAIT_MS 10000

static int s_setup(void **state)
{
    *state = it_new("token_bound");
    return *state ? 0 : -1;
}

/* Allow the stranger's pair as a second worker key: its public file goes
   into DIR/keys/workers before the broker reads the keys. */
static void s_allow_second_worker(it_t *it)
{
    char dir[512], from[600], to[600], reason[512];
    snprintf(dir, sizeof dir, "%s/second-key", it->dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(
        oq_keys_save(&it->pairs[IT_ROLE_STRANGER], dir, "second", false, reason, sizeof reason), 0);
    snprintf(from, sizeof from, "%s/second.key", dir);
    snprintf(to, sizeof to, "%s/workers/second.key", it->keys_dir);
    assert_int_equal(rename(from, to), 0);
}

static void s_ack_ok(void *sock, uint64_t id, uint64_t lease)
{
    oq_ack_msg_t ack = {.id = id,
                        .attempt = 1,
                        .outcome = OQ_OUTCOME_OK,
                        .result = OQ_RESULT_APPLIED,
                        .credit = 1,
                        .lease = lease,
                        .has_lease = true};
    it_send_ack(sock, &ack);
}

static bool s_fenced_or_done(it_t *it)
{
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    return s.done > 0 || it_broker_stat(it, "fenced_acks") > 0;
}

static void test_token_bound_to_worker(void **state)
{
    it_t *it = *state;
    s_allow_second_worker(it);
    assert_true(it_start_broker(it, NULL) > 0);
    uint64_t id = it_dispatch(it, "noop", NULL, NULL);
    void *a = it_worker_socket(it, IT_ROLE_WORKER, 1, "a");
    oq_msg_t job;
    assert_int_equal(it_expect(a, OQ_CMD_JOB, &job, S_PEER_WAIT_MS), 0);
    assert_int_equal(job.job.id, id);
    uint64_t lease = job.job.lease;
    oq_proto_msg_release(&job);

    /* B, a worker of another key, replays A's token. */
    void *b = it_worker_socket(it, IT_ROLE_STRANGER, 0, "b");
    s_ack_ok(b, id, lease);
    int64_t end = it_now_ms() + IT_WAIT_MS;
    while (!s_fenced_or_done(it)) {
        assert_true(it_now_ms() < end);
        usleep(20 * 1000);
    }
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    if (s.done != 0)
        fail_msg("worker B's replay of worker A's token completed the job");
    assert_int_equal(it_broker_stat(it, "fenced_acks"), 1);
    assert_int_equal(s.leased, 1);

    /* A restart: A comes back on a fresh socket with its own key; its
       token is still taken. */
    it_signal(it->broker, SIGKILL);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);
    it_close_socket(it, a);
    it_close_socket(it, b);
    assert_true(it_start_broker(it, NULL) > 0);
    void *again = it_socket_as(it, IT_ROLE_WORKER, ZMQ_DEALER, it->back);
    s_ack_ok(again, id, lease);
    uint64_t one = 1;
    assert_true(it_wait_stats(it, it_done_is, &one, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(it_broker_stat(it, "fenced_acks"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_token_bound_to_worker, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
