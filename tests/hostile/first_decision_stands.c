/*  first_decision_stands: a delivery's first outcome is its decision. A
    raw worker takes a job and reports fail; the job is in the failed
    store. The same delivery then reports ok with the same token: that ok
    is counted as ignored and the job stays failed, where it was taken out
    of the failed store as done. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include <cmocka.h>

#include "harness.h"

#define S_PEER_WAIT_MS 10000

static int s_setup(void **state)
{
    *state = it_new("first_decision");
    return *state ? 0 : -1;
}

static void s_ack(void *sock, const oq_msg_t *job, oq_outcome_t outcome)
{
    oq_ack_msg_t ack = {.id = job->job.id,
                        .attempt = job->job.attempt,
                        .outcome = outcome,
                        .result = outcome == OQ_OUTCOME_OK ? OQ_RESULT_APPLIED : OQ_RESULT_NONE,
                        .error = oq_str(outcome == OQ_OUTCOME_OK ? "" : "bad payload"),
                        .credit = 1,
                        .lease = job->job.lease,
                        .has_lease = true};
    it_send_ack(sock, &ack);
}

static bool s_failed_is(const it_stats_t *s, const void *arg)
{
    return s->failed == *(const uint64_t *)arg;
}

/* The ok was handled one way or the other. */
static bool s_ok_seen(const it_stats_t *s, const void *arg)
{
    (void)arg;
    return s->ignored_acks > 0 || s->done > 0;
}

static void test_first_decision_stands(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    uint64_t id = it_dispatch(it, "noop", NULL, NULL);
    void *w = it_worker_socket(it, IT_ROLE_WORKER, 1, "decider");
    oq_msg_t job;
    assert_int_equal(it_expect(w, OQ_CMD_JOB, &job, S_PEER_WAIT_MS), 0);
    assert_int_equal(job.job.id, id);

    s_ack(w, &job, OQ_OUTCOME_FAIL);
    it_stats_t s;
    uint64_t one = 1;
    assert_true(it_wait_stats(it, s_failed_is, &one, IT_WAIT_MS, &s) >= 0);
    s_ack(w, &job, OQ_OUTCOME_OK);
    assert_true(it_wait_stats(it, s_ok_seen, NULL, IT_WAIT_MS, &s) >= 0);
    if (s.done != 0 || s.failed != 1)
        fail_msg("the ok after the delivery's own fail moved the job: done %llu, failed %llu",
                 (unsigned long long)s.done, (unsigned long long)s.failed);
    assert_int_equal(s.ignored_acks, 1);
    assert_int_equal(s.late_acks, 0);
    oq_proto_msg_release(&job);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_first_decision_stands, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
