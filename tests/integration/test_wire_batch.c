/*  test_wire_batch: several deliveries and several acks per message
    (docs/protocol.md, "Several jobs or acks per message"). A raw worker
    that says jobs_per_msg gets the jobs one pump leases it as one "jobs"
    message, and one that does not gets a "job" message each; an "acks"
    message with one bad entry among good ones has the good ones applied
    and the bad one refused alone, naming its place; and a real worker
    with --prefetch 8 takes jobs and sends a batch's acks that way, and
    the acks of held jobs it ran back to back too, three or more to a
    message for jobs of a few ms. The broker counts each kind of message
    and what it carried (stats "messages", and its line in `onceq
    stats`). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zmq.h>

#include "harness.h"

#define S_JOBS     4
#define S_MANY     200
#define S_REPLY_MS 5000
/* Jobs of a few ms, as a grant on a busy database takes. */
#define S_SLOW_JOBS   60
#define S_SLOW_JOB_MS 2

static int s_setup(void **state)
{
    *state = it_new("wirebatch");
    return *state ? 0 : -1;
}

static void s_noop_jobs(it_t *it, size_t count)
{
    for (size_t i = 0; i < count; i++)
        assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
    it_stats_t s;
    uint64_t want = count;
    assert_true(it_wait_stats(it, it_ready_is, &want, IT_WAIT_MS, &s) >= 0);
}

/* The "messages" map of stats: deliveries sent and acks received, per
   message (docs/protocol.md §5, stats). */
typedef struct {
    uint64_t job_sent, jobs_sent, jobs_entries, ack_received, acks_received, acks_entries;
} s_messages_t;

static uint64_t s_field(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        fail_msg("stats.messages has no count \"%s\"", key);
    return o->via.u64;
}

static s_messages_t s_messages(it_t *it)
{
    oq_msg_t reply;
    assert_int_equal(it_stats_reply(it, &reply, S_REPLY_MS), 0);
    const msgpack_object *map = oq_proto_map_get(&reply.root, "messages");
    assert_non_null(map);
    s_messages_t m = {
        .job_sent = s_field(map, "job_sent"),
        .jobs_sent = s_field(map, "jobs_sent"),
        .jobs_entries = s_field(map, "jobs_entries"),
        .ack_received = s_field(map, "ack_received"),
        .acks_received = s_field(map, "acks_received"),
        .acks_entries = s_field(map, "acks_entries"),
    };
    oq_proto_msg_release(&reply);
    return m;
}

/* A raw worker on the back socket that registers with ready, saying
   jobs_per_msg (1: leaves the key out), and gets its welcome. */
static void *s_raw_worker(it_t *it, uint32_t credit, uint32_t jobs_per_msg, oq_msg_t *welcome)
{
    void *sock = it_socket(it, ZMQ_DEALER, it->back);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready_multi(&buf, credit, "raw", 4242, NULL, 0, NULL, 0, jobs_per_msg);
    it_send(sock, &buf);
    msgpack_sbuffer_destroy(&buf);
    assert_int_equal(it_expect(sock, OQ_CMD_WELCOME, welcome, S_REPLY_MS), 0);
    return sock;
}

/* The next "job" or "jobs" message: its deliveries into jobs (ids,
   attempts, leases), their count returned. */
static size_t s_next_deliveries(void *sock, oq_ack_msg_t *jobs, bool *several)
{
    for (;;) {
        oq_msg_t msg;
        assert_int_equal(it_recv(sock, &msg, S_REPLY_MS), 0);
        oq_err_t code;
        char why[256];
        size_t n = 0;
        if (msg.cmd == OQ_CMD_JOB || msg.cmd == OQ_CMD_JOBS) {
            *several = msg.cmd == OQ_CMD_JOBS;
            uint32_t count = msg.cmd == OQ_CMD_JOBS ? oq_proto_entry_count(&msg) : 1;
            for (uint32_t i = 0; i < count; i++) {
                oq_msg_t entry;
                const oq_msg_t *job = &msg;
                if (msg.cmd == OQ_CMD_JOBS) {
                    assert_int_equal(oq_proto_decode_entry(&msg, i, &entry, &code, why, sizeof why),
                                     0);
                    job = &entry;
                }
                jobs[n++] = (oq_ack_msg_t){.id = job->job.id,
                                           .attempt = job->job.attempt,
                                           .lease = job->job.lease,
                                           .has_lease = job->job.has_lease,
                                           .outcome = OQ_OUTCOME_OK,
                                           .credit = 1};
                if (msg.cmd == OQ_CMD_JOBS)
                    oq_proto_msg_release(&entry);
            }
        }
        oq_proto_msg_release(&msg);
        if (n)
            return n;
    }
}

/* jobs_per_msg 4 and 4 jobs ready: one "jobs" message of 4. An "acks"
   message whose third entry is bad: the other three are done, the third
   gets its own error, and sent alone again it is done too. */
static void test_jobs_and_acks_with_a_bad_entry(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    s_noop_jobs(it, S_JOBS);
    oq_msg_t welcome;
    void *sock = s_raw_worker(it, S_JOBS, S_JOBS, &welcome);
    assert_int_equal(welcome.acks_per_msg, OQ_MAX_ACKS_PER_MSG);
    oq_proto_msg_release(&welcome);

    oq_ack_msg_t acks[S_JOBS];
    bool several = false;
    assert_int_equal(s_next_deliveries(sock, acks, &several), S_JOBS);
    assert_true(several);

    /* The third: a lease token that is not a number. */
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_ACKS, -1, 1);
    oq_proto_pack_cstr(&pk, "acks");
    msgpack_pack_array(&pk, S_JOBS);
    for (int i = 0; i < S_JOBS; i++) {
        msgpack_pack_map(&pk, 5);
        oq_proto_pack_cstr(&pk, "id");
        msgpack_pack_uint64(&pk, acks[i].id);
        oq_proto_pack_cstr(&pk, "attempt");
        msgpack_pack_uint32(&pk, acks[i].attempt);
        oq_proto_pack_cstr(&pk, "outcome");
        oq_proto_pack_cstr(&pk, "ok");
        oq_proto_pack_cstr(&pk, "credit");
        msgpack_pack_uint32(&pk, 0);
        oq_proto_pack_cstr(&pk, "lease");
        if (i == 2)
            oq_proto_pack_cstr(&pk, "not a token");
        else
            msgpack_pack_uint64(&pk, acks[i].lease);
    }
    it_send(sock, &buf);
    oq_msg_t error;
    assert_int_equal(it_expect(sock, OQ_CMD_ERROR, &error, S_REPLY_MS), 0);
    assert_int_equal(error.err_code, OQ_ERR_BAD_REQUEST);
    char text[OQ_MAX_ERROR_LEN + 1], want[64];
    oq_str_copy(error.err_text, text, sizeof text);
    snprintf(want, sizeof want, "entry 2 of 4 (job %llu", (unsigned long long)acks[2].id);
    if (!strstr(text, want) || !strstr(text, "lease"))
        fail_msg("error does not name the entry and the field: %s", text);
    oq_proto_msg_release(&error);
    it_stats_t s;
    uint64_t three = S_JOBS - 1, all = S_JOBS;
    assert_true(it_wait_stats(it, it_done_is, &three, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.leased, 1);

    oq_proto_encode_ack(&buf, &acks[2]);
    it_send(sock, &buf);
    assert_true(it_wait_stats(it, it_done_is, &all, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    msgpack_sbuffer_destroy(&buf);

    /* One "jobs" of 4 out; one "acks" of 4 (the bad entry counted too)
       and one "ack" in. */
    s_messages_t m = s_messages(it);
    assert_int_equal(m.job_sent, 0);
    assert_int_equal(m.jobs_sent, 1);
    assert_int_equal(m.jobs_entries, S_JOBS);
    assert_int_equal(m.acks_received, 1);
    assert_int_equal(m.acks_entries, S_JOBS);
    assert_int_equal(m.ack_received, 1);
    /* onceq stats prints them in a line. */
    it_expect_output(it_cli(it, "stats", 0, "stats", NULL),
                     "worker messages: sent 0 job, 1 jobs (4 deliveries)  "
                     "received 1 ack, 1 acks (4 acks)\n");
}

/* A worker that did not say jobs_per_msg gets one "job" message a job, as
   before; and an "acks" message that is not a list is refused whole. */
static void test_old_worker_gets_one_job_a_message(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    s_noop_jobs(it, S_JOBS);
    oq_msg_t welcome;
    void *sock = s_raw_worker(it, S_JOBS, 1, &welcome);
    oq_proto_msg_release(&welcome);
    oq_ack_msg_t acks[S_JOBS];
    for (int i = 0; i < S_JOBS; i++) {
        bool several = true;
        assert_int_equal(s_next_deliveries(sock, &acks[i], &several), 1);
        assert_false(several);
    }
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_ACKS, -1, 1);
    oq_proto_pack_cstr(&pk, "acks");
    msgpack_pack_map(&pk, 0);
    it_send(sock, &buf);
    oq_msg_t error;
    assert_int_equal(it_expect(sock, OQ_CMD_ERROR, &error, S_REPLY_MS), 0);
    assert_int_equal(error.err_code, OQ_ERR_BAD_REQUEST);
    oq_proto_msg_release(&error);

    oq_proto_encode_acks(&buf, acks, S_JOBS);
    it_send(sock, &buf);
    it_stats_t s;
    uint64_t all = S_JOBS;
    assert_true(it_wait_stats(it, it_done_is, &all, IT_WAIT_MS, &s) >= 0);
    msgpack_sbuffer_destroy(&buf);

    /* A "job" each out; the "acks" refused whole is not counted. */
    s_messages_t m = s_messages(it);
    assert_int_equal(m.job_sent, S_JOBS);
    assert_int_equal(m.jobs_sent, 0);
    assert_int_equal(m.jobs_entries, 0);
    assert_int_equal(m.acks_received, 1);
    assert_int_equal(m.acks_entries, S_JOBS);
    assert_int_equal(m.ack_received, 0);
    it_expect_output(it_cli(it, "stats", 0, "stats", NULL),
                     "worker messages: sent 4 job, 0 jobs (0 deliveries)  "
                     "received 0 ack, 1 acks (4 acks)\n");
}

/* onceq-worker --prefetch 8 --batch 8 (onceq-test-worker, whose tally
   type has a batch function): jobs queued before it connects come in
   "jobs" messages, and the acks of a batch, made in one turn, go out in
   one "acks" message; all are done. */
static void test_worker_takes_jobs_and_sends_acks_together(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    for (int i = 0; i < S_MANY; i++) {
        msgpack_sbuffer payload;
        msgpack_sbuffer_init(&payload);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 2);
        msgpack_pack_str_with_body(&pk, "ms", 2);
        msgpack_pack_uint64(&pk, 0);
        msgpack_pack_str_with_body(&pk, "fail", 4);
        msgpack_pack_false(&pk);
        oq_job_msg_t options = {.max_tries = 1, .has_max_tries = true};
        assert_true(it_dispatch(it, "tally", &payload, &options) > 0);
        msgpack_sbuffer_destroy(&payload);
    }
    it_use_worker(it, "onceq-test-worker");
    const char *flags[] = {"--prefetch", "8", "--batch", "8", "--log-level", "debug", NULL};
    assert_true(it_start_worker(it, "prefetcher", flags) > 0);
    it_stats_t s;
    uint64_t all = S_MANY;
    assert_true(it_wait_stats(it, it_done_is, &all, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.retried, 0);
    assert_true(it_log_count(it, "prefetcher", "received jobs (") >= 1);
    assert_true(it_log_count(it, "prefetcher", "sent acks") >= 1);

    /* Every delivery and every ack is counted in its message, and a
       "jobs" message carries two jobs or more (one goes as a "job"). */
    s_messages_t m = s_messages(it);
    assert_true(m.jobs_sent >= 1 && m.acks_received >= 1);
    assert_true(m.job_sent + m.jobs_entries >= S_MANY);
    assert_true(m.ack_received + m.acks_entries >= S_MANY);
    assert_true(m.jobs_entries >= 2 * m.jobs_sent);
    assert_true(m.acks_entries >= m.acks_received);
}

/* onceq-worker --prefetch 8 and noop jobs, each run alone: held jobs run
   back to back, and the acks made within OQ_WORKER_ACK_GATHER_US of each
   other (half the prefetch at most) go out as one "acks" message. Over
   S_MANY jobs at least one such pair is met even on a loaded machine. */
static void test_held_jobs_run_back_to_back_ack_together(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    s_noop_jobs(it, S_MANY);
    const char *flags[] = {"--prefetch", "8", "--log-level", "debug", NULL};
    assert_true(it_start_worker(it, "prefetcher", flags) > 0);
    it_stats_t s;
    uint64_t all = S_MANY;
    assert_true(it_wait_stats(it, it_done_is, &all, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.retried, 0);
    assert_true(it_log_count(it, "prefetcher", "sent acks") >= 1);
}

/* Held jobs of 2 ms each: the acks wait for the next held job while less
   than OQ_WORKER_ACK_GATHER_US (20 ms) have passed since the first of
   them, so three or four (half the prefetch) go in one "acks" message,
   where a 1 ms bound let a second job's ack join the first and no more.
   Over S_SLOW_JOBS jobs that is met at least once even on a loaded
   machine. */
static void test_acks_of_jobs_of_a_few_ms_go_more_than_two_to_a_message(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    for (size_t i = 0; i < S_SLOW_JOBS; i++) {
        msgpack_sbuffer payload;
        msgpack_sbuffer_init(&payload);
        it_payload_uint(&payload, "ms", S_SLOW_JOB_MS);
        assert_true(it_dispatch(it, "sleep", &payload, NULL) > 0);
        msgpack_sbuffer_destroy(&payload);
    }
    it_stats_t s;
    uint64_t all = S_SLOW_JOBS;
    assert_true(it_wait_stats(it, it_ready_is, &all, IT_WAIT_MS, &s) >= 0);
    const char *flags[] = {"--prefetch", "8", "--log-level", "debug", NULL};
    assert_true(it_start_worker(it, "prefetcher", flags) > 0);
    assert_true(it_wait_stats(it, it_done_is, &all, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    assert_true(it_log_count(it, "prefetcher", "sent acks (3)") +
                    it_log_count(it, "prefetcher", "sent acks (4)") >=
                1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_jobs_and_acks_with_a_bad_entry, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_old_worker_gets_one_job_a_message, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_worker_takes_jobs_and_sends_acks_together, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_held_jobs_run_back_to_back_ack_together, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_acks_of_jobs_of_a_few_ms_go_more_than_two_to_a_message,
                                        s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
