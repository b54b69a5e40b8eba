/*  fenced_ack_credit: a worker that never echoes its lease token is sent
    no more jobs than the credit it gave. A raw worker offers credit 1,
    takes a job and acks it ok without "lease", with credit 1: the ack is
    fenced, and its credit does not come back, where every fenced ack
    brought the worker another job it could never complete. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "harness.h"

#define S_PEER_WAIT_MS 10000
#define S_JOBS         3
/* How long the worker watches for a job its fenced ack must not bring:
   the broker sends it in the same loop turn as it reads the ack. */
#define S_NO_JOB_MS 1000

static int s_setup(void **state)
{
    *state = it_new("fenced_credit");
    return *state ? 0 : -1;
}

static void test_fenced_ack_credit(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    for (int i = 0; i < S_JOBS; i++)
        it_dispatch(it, "noop", NULL, NULL);
    void *w = it_worker_socket(it, IT_ROLE_WORKER, 1, "no-lease");
    oq_msg_t job;
    assert_int_equal(it_expect(w, OQ_CMD_JOB, &job, S_PEER_WAIT_MS), 0);

    /* An ack as a client that ignores "lease" sends it. */
    oq_ack_msg_t ack = {.id = job.job.id,
                        .attempt = job.job.attempt,
                        .outcome = OQ_OUTCOME_OK,
                        .result = OQ_RESULT_APPLIED,
                        .credit = 1};
    oq_proto_msg_release(&job);
    it_send_ack(w, &ack);
    int64_t end = it_now_ms() + IT_WAIT_MS;
    while (it_broker_stat(it, "fenced_acks") < 1) {
        assert_true(it_now_ms() < end);
        usleep(20 * 1000);
    }
    if (it_expect(w, OQ_CMD_JOB, &job, S_NO_JOB_MS) == 0) {
        oq_proto_msg_release(&job);
        fail_msg("the fenced ack gave its credit back: the worker got another job");
    }
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.leased, 1);
    assert_int_equal(s.ready, S_JOBS - 1);
    assert_int_equal(s.done, 0);
    assert_int_equal(s.workers, 1);
    assert_int_equal(s.worker[0].credit, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fenced_ack_credit, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
