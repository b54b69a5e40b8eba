/*  token_after_requeue_compaction: the lease token of a delivery before a
    requeue stays dead after a compaction and a restart.

    A raw worker takes a job and fails it, noting its lease token. The job
    is requeued (`onceq failed retry`), the journal is then compacted (a
    snapshot written after the requeue: filler jobs are dispatched and
    cancelled until the file passes --compact-min-bytes), and the broker is
    restarted on the same data dir. A second raw worker takes the job
    again: its new token must differ from the old one, and an ok carrying
    the old token must be fenced, leaving the job leased; the new token's
    ok then completes it. The snapshot used to drop the requeue
    generation, so the new delivery carried the old token again and the
    old delivery's ok completed the requeued job. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <signal.h>
#include <zmq.h>

#include "harness.h"
#include "payloads.h"

#define S_COMPACT_MIN_BYTES "65536"
#define S_FILLER_BYTES      8000 /* payload of a filler job: the file passes the minimum in ~9 */
#define S_MAX_FILLERS       200
#define S_POLL_MS           20
#define S_ID_TEXT_LEN       24

static int s_setup(void **state)
{
    *state = it_new("token_after_requeue_compaction");
    return *state ? 0 : -1;
}

/* The next delivery on sock: its attempt and lease token. */
static void s_take(void *sock, uint64_t id, uint32_t *attempt, uint64_t *lease)
{
    oq_msg_t msg;
    assert_int_equal(it_expect(sock, OQ_CMD_JOB, &msg, IT_WAIT_MS), 0);
    assert_int_equal(msg.job.id, id);
    *attempt = msg.job.attempt;
    *lease = msg.job.lease;
    oq_proto_msg_release(&msg);
}

/* An ack of delivery attempt of job id with the token lease; credit 0, so
   that nothing more is sent to this worker. */
static void s_ack(void *sock, uint64_t id, uint32_t attempt, uint64_t lease, oq_outcome_t outcome)
{
    oq_ack_msg_t ack = {.id = id,
                        .attempt = attempt,
                        .outcome = outcome,
                        .error = oq_str("it broke"),
                        .credit = 0,
                        .lease = lease,
                        .has_lease = true};
    it_send_ack(sock, &ack);
}

static bool s_failed_one(const it_stats_t *s, const void *arg)
{
    (void)arg;
    return s->failed == 1;
}

static uint64_t s_fenced_acks(it_t *it)
{
    oq_msg_t reply;
    assert_int_equal(it_stats_reply(it, &reply, IT_WAIT_MS), 0);
    const msgpack_object *o =
        oq_proto_map_get(oq_proto_map_get(&reply.root, "broker"), "fenced_acks");
    uint64_t n = o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
    oq_proto_msg_release(&reply);
    return n;
}

/* Dispatch and cancel padded jobs until a compaction has started and
   finished after this call began. */
static void s_compact(it_t *it)
{
    size_t started = it_log_count(it, "broker", "compacting the journal");
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    oq_payload_pad(&payload, S_FILLER_BYTES);
    oq_job_msg_t filler = {.type = oq_str("noop"),
                           .queue = oq_str("filler"),
                           .payload = (const uint8_t *)payload.data,
                           .payload_len = payload.size};
    int fillers = 0;
    while (it_log_count(it, "broker", "compacting the journal") == started) {
        assert_true(fillers++ < S_MAX_FILLERS);
        it_cancel(it, it_dispatch(it, "noop", NULL, &filler));
    }
    msgpack_sbuffer_destroy(&payload);
    assert_int_equal(it_wait_log(it, "broker", "compacted the journal", started + 1, IT_WAIT_MS),
                     0);
    print_message("compacted after %d filler jobs\n", fillers);
}

static void test_an_old_token_is_fenced_after_requeue_compaction_and_restart(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--compact-min-bytes", S_COMPACT_MIN_BYTES, NULL};
    assert_true(it_start_broker(it, flags) > 0);

    /* Delivered, noted, failed. */
    void *first = it_worker_socket(it, IT_ROLE_WORKER, 1, "hostile");
    oq_job_msg_t once = {.max_tries = 1, .has_max_tries = true};
    uint64_t id = it_dispatch(it, "noop", NULL, &once);
    uint32_t attempt;
    uint64_t old_lease;
    s_take(first, id, &attempt, &old_lease);
    assert_int_equal(attempt, 1);
    s_ack(first, id, attempt, old_lease, OQ_OUTCOME_FAIL);
    it_stats_t s;
    assert_true(it_wait_stats(it, s_failed_one, NULL, IT_WAIT_MS, &s) >= 0);
    it_close_socket(it, first);

    /* Requeued, then compacted: the snapshot is taken after the requeue. */
    char id_text[S_ID_TEXT_LEN];
    snprintf(id_text, sizeof id_text, "%llu", (unsigned long long)id);
    free(it_cli(it, "retry", 0, "failed", "retry", id_text, NULL));
    s_compact(it);

    it_signal(it->broker, SIGTERM);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) == 0);
    assert_true(it_start_broker(it, flags) > 0);
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.ready, 1);

    /* Taken anew: a token of its own, and the old one's ok changes nothing. */
    void *second = it_worker_socket(it, IT_ROLE_WORKER, 1, "hostile");
    uint64_t new_lease;
    s_take(second, id, &attempt, &new_lease);
    assert_int_equal(attempt, 1);
    print_message("lease token before the requeue %016llx, after the restart %016llx\n",
                  (unsigned long long)old_lease, (unsigned long long)new_lease);
    uint64_t fenced = s_fenced_acks(it);
    s_ack(second, id, 1, old_lease, OQ_OUTCOME_OK);
    int64_t deadline = it_now_ms() + IT_WAIT_MS;
    while (s_fenced_acks(it) == fenced && it_stats(it, &s) == 0 && s.done == 0)
        assert_true(it_now_ms() < deadline);
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.done, 0);
    assert_int_equal(s.leased, 1);
    assert_int_equal(s_fenced_acks(it), fenced + 1);
    assert_true(new_lease != old_lease);

    /* The new delivery's ok completes it. */
    s_ack(second, id, 1, new_lease, OQ_OUTCOME_OK);
    uint64_t one = 1;
    assert_true(it_wait_stats(it, it_done_is, &one, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.leased, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_an_old_token_is_fenced_after_requeue_compaction_and_restart, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
