/*  test_queue_clear: `onceq queue clear Q` with the real broker, worker
    and onceq tool.

    Queue mail holds one job a worker runs (it sleeps S_SLEEP_JOB_MS), five
    ready jobs and two delayed ones; queue other holds three ready and one
    delayed. Clearing mail cancels its seven waiting jobs and says so, a
    waiter on one of them is answered "cancelled", the leased job still
    completes, other is untouched, and a broker SIGKILLed after all that
    comes back with mail empty and other as it was. A clear of a queue
    with nothing waiting prints 0; a bad queue name is a usage error. On
    the wire, a request's limit bounds the cancels and "more" says exactly
    whether others wait; those cancels survive a restart too. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include <cmocka.h>

#include "harness.h"
#include "onceq/limits.h"
#include "support.h"

#define S_CALL_MS      5000
#define S_POLL_MS      20
#define S_SLEEP_JOB_MS 10000  /* the leased job's run: the clear comes well within it */
#define S_DELAY_MS     600000 /* delayed jobs: never due during the test */
#define S_WAIT_MS      30000  /* the waiter's own timeout: longer than the test needs */

static int s_setup(void **state)
{
    *state = it_new("queue_clear");
    return *state ? 0 : -1;
}

/* Counter key of queue name from the broker's stats (0 if no such queue). */
static uint64_t s_queue(it_t *it, const char *name, const char *key)
{
    oq_msg_t reply;
    assert_int_equal(it_stats_reply(it, &reply, S_CALL_MS), 0);
    uint64_t value = oq_statsr_u64(oq_statsr_entry(&reply.root, "queues", name), key);
    oq_proto_msg_release(&reply);
    return value;
}

static void s_wait_queue(it_t *it, const char *queue, const char *key, uint64_t want)
{
    int64_t end = it_now_ms() + IT_WAIT_MS;
    while (s_queue(it, queue, key) != want) {
        if (it_now_ms() > end)
            fail_msg("queue %s: %s never reached %llu", queue, key, (unsigned long long)want);
        oq_support_sleep_ms(S_POLL_MS);
    }
}

/* Dispatch a job of type to queue, payload {ms: ms} (0: {}), after delay_ms. */
static uint64_t s_dispatch(it_t *it, const char *type, const char *queue, uint64_t ms,
                           int64_t delay_ms)
{
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    if (ms)
        it_payload_uint(&payload, "ms", ms);
    oq_job_msg_t options = {
        .queue = oq_str(queue), .delay_ms = delay_ms, .has_delay = delay_ms > 0};
    uint64_t id = it_dispatch(it, type, ms ? &payload : NULL, &options);
    msgpack_sbuffer_destroy(&payload);
    assert_true(id > 0);
    return id;
}

static void s_restart_broker(it_t *it)
{
    it_signal(it->broker, SIGKILL);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);
    assert_true(it_start_broker(it, NULL) > 0);
}

/* clear on the wire with a limit: the count, and "more". */
static uint64_t s_clear_wire(it_t *it, const char *queue, uint32_t limit, bool *more)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(it);
    oq_proto_encode_clear(&buf, req, queue, limit);
    oq_msg_t reply;
    assert_int_equal(it_call(it, &buf, req, &reply, S_CALL_MS), 0);
    msgpack_sbuffer_destroy(&buf);
    if (reply.cmd != OQ_CMD_CLEARED)
        fail_msg("clear was answered %s: %.*s", oq_proto_cmd_name(reply.cmd),
                 (int)reply.err_text.len, reply.err_text.ptr);
    const msgpack_object *m = oq_proto_map_get(&reply.root, "more");
    assert_non_null(m);
    *more = m->via.boolean;
    uint64_t count = reply.count;
    oq_proto_msg_release(&reply);
    return count;
}

static void test_clear_cancels_waiting_jobs_and_survives_a_kill(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    uint64_t leased = s_dispatch(it, "sleep", "mail", S_SLEEP_JOB_MS, 0);
    const char *mail_one_at_a_time[] = {"--queue", "mail", "--prefetch", "1", NULL};
    assert_true(it_start_worker(it, "worker", mail_one_at_a_time) > 0);
    s_wait_queue(it, "mail", "leased", 1);
    uint64_t first_ready = 0;
    for (int i = 0; i < 5; i++) {
        uint64_t id = s_dispatch(it, "noop", "mail", 0, 0);
        first_ready = first_ready ? first_ready : id;
    }
    for (int i = 0; i < 2; i++)
        s_dispatch(it, "noop", "mail", 0, S_DELAY_MS);
    for (int i = 0; i < 3; i++)
        s_dispatch(it, "noop", "other", 0, 0);
    s_dispatch(it, "noop", "other", 0, S_DELAY_MS);

    /* A producer waits on a job that the clear will cancel. */
    void *waiter = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_wait(&buf, 1, first_ready, S_WAIT_MS);
    it_send(waiter, &buf);
    msgpack_sbuffer_destroy(&buf);

    it_expect_output(it_cli(it, "clear", 0, "queue", "clear", "mail", NULL),
                     "7 job(s) of queue mail cancelled");
    oq_msg_t msg;
    assert_int_equal(it_expect(waiter, OQ_CMD_WAITED, &msg, S_CALL_MS), 0);
    assert_int_equal(msg.id, first_ready);
    assert_int_equal(msg.wait_state, OQ_WAIT_CANCELLED);
    oq_proto_msg_release(&msg);

    assert_int_equal(s_queue(it, "mail", "cancelled"), 7);
    assert_int_equal(s_queue(it, "mail", "ready"), 0);
    assert_int_equal(s_queue(it, "mail", "delayed"), 0);
    assert_int_equal(s_queue(it, "mail", "leased"), 1);
    assert_int_equal(s_queue(it, "other", "ready"), 3);
    assert_int_equal(s_queue(it, "other", "delayed"), 1);
    assert_int_equal(s_queue(it, "other", "cancelled"), 0);
    it_expect_output(it_cli(it, "empty", 0, "queue", "clear", "mail", NULL),
                     "0 job(s) of queue mail cancelled");
    it_expect_output(it_cli(it, "unknown", 0, "queue", "clear", "nowhere", NULL),
                     "0 job(s) of queue nowhere cancelled");
    it_expect_output(it_cli(it, "bad", 2, "queue", "clear", "a b", NULL), "queue name");
    it_expect_output(it_cli(it, "none", 2, "queue", "clear", NULL), "exactly one queue name");

    /* The leased job of the cleared queue runs to its end. */
    s_wait_queue(it, "mail", "done", 1);
    char id[32];
    snprintf(id, sizeof id, "%llu", (unsigned long long)leased);
    it_expect_output(it_cli(it, "wait", 0, "wait", id, NULL), "done");

    s_restart_broker(it);
    assert_int_equal(s_queue(it, "mail", "ready"), 0);
    assert_int_equal(s_queue(it, "mail", "delayed"), 0);
    assert_int_equal(s_queue(it, "mail", "leased"), 0);
    assert_int_equal(s_queue(it, "other", "ready"), 3);
    assert_int_equal(s_queue(it, "other", "delayed"), 1);
}

static void test_clear_on_the_wire_is_bounded_and_durable(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    for (int i = 0; i < 3; i++)
        s_dispatch(it, "noop", "mail", 0, i == 2 ? S_DELAY_MS : 0);
    s_dispatch(it, "noop", "other", 0, 0);
    bool more = false;
    assert_int_equal(s_clear_wire(it, "mail", 2, &more), 2);
    assert_true(more);
    s_restart_broker(it);
    assert_int_equal(s_queue(it, "mail", "ready") + s_queue(it, "mail", "delayed"), 1);
    assert_int_equal(s_clear_wire(it, "mail", 2, &more), 1);
    assert_false(more);
    assert_int_equal(s_clear_wire(it, "mail", 0, &more), 0);
    assert_false(more);
    s_restart_broker(it);
    assert_int_equal(s_queue(it, "mail", "ready") + s_queue(it, "mail", "delayed"), 0);
    assert_int_equal(s_queue(it, "other", "ready"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_clear_cancels_waiting_jobs_and_survives_a_kill,
                                        s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_clear_on_the_wire_is_bounded_and_durable, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
