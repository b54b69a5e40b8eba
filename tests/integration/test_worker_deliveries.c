/*  test_worker_deliveries: a real onceq-worker against a broker the test
    plays itself (a ROUTER socket on loopback), which sends deliveries the
    real broker never would: the jobs of one "jobs" message each run with
    the payload it carried (the built-in fail handler reports the payload's
    message as its error), an entry among them that does not decode is
    failed alone, by its id, attempt and lease, and a lone "job" message
    that does not decode is failed the same way while the next one runs
    (docs/protocol.md §6, "Several jobs or acks per message"). */
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

#define S_PREFETCH "4" /* the worker holds what one message brings */
/* The test sends no heartbeats: the worker must take a minute of its
   silence, longer than any wait of the test (IT_WAIT_MS), so that it never
   reconnects and acks nothing twice. */
#define S_HEARTBEAT   10000 /* ms */
#define S_LIVENESS    6
#define S_MAX_ACKS    8
#define S_IDENTITY    256 /* bytes of a ROUTER identity, at most */
#define S_STOP_MS     10000
#define S_BAD_PAYLOAD 7 /* not a map */

static int s_setup(void **state)
{
    it_t *it = it_new("deliveries");
    if (!it)
        return -1;
    it_insecure(it);
    *state = it;
    return 0;
}

typedef struct {
    uint8_t identity[S_IDENTITY];
    size_t identity_len;
    void *router;
} s_broker_t;

/* The next message from the worker within IT_WAIT_MS, decoded: 0, or -1. */
static int s_recv(s_broker_t *b, oq_msg_t *msg)
{
    zmq_pollitem_t item = {.socket = b->router, .events = ZMQ_POLLIN};
    if (zmq_poll(&item, 1, IT_WAIT_MS) <= 0)
        return -1;
    int n = zmq_recv(b->router, b->identity, sizeof b->identity, 0);
    assert_true(n > 0 && (size_t)n <= sizeof b->identity);
    b->identity_len = (size_t)n;
    zmq_msg_t body;
    zmq_msg_init(&body);
    assert_true(zmq_msg_recv(&body, b->router, 0) >= 0);
    oq_err_t code;
    char why[256];
    int rc = oq_proto_decode(msg, zmq_msg_data(&body), zmq_msg_size(&body), &code, why, sizeof why);
    zmq_msg_close(&body);
    if (rc < 0)
        fail_msg("the worker sent a message that does not decode: %s", why);
    return 0;
}

static void s_send(s_broker_t *b, msgpack_sbuffer *buf)
{
    assert_int_equal(zmq_send(b->router, b->identity, b->identity_len, ZMQ_SNDMORE),
                     (int)b->identity_len);
    assert_int_equal(zmq_send(b->router, buf->data, buf->size, 0), (int)buf->size);
    msgpack_sbuffer_clear(buf);
}

/* One delivery's map for the built-in fail handler: {message, permanent}
   as its payload, so that its ack's error is the payload's message; with
   bad, a payload that is not a map; with no_budget, no max_tries and no
   timeout, which a delivery must carry. */
static void s_pack_delivery(msgpack_packer *pk, uint64_t id, const char *message, bool bad,
                            bool no_budget)
{
    msgpack_pack_map(pk, no_budget ? 6 : 8);
    oq_proto_pack_cstr(pk, "id");
    msgpack_pack_uint64(pk, id);
    oq_proto_pack_cstr(pk, "attempt");
    msgpack_pack_uint32(pk, 1);
    oq_proto_pack_cstr(pk, "lease");
    msgpack_pack_uint64(pk, 1000 + id);
    oq_proto_pack_cstr(pk, "type");
    oq_proto_pack_cstr(pk, "fail");
    oq_proto_pack_cstr(pk, "queue");
    oq_proto_pack_cstr(pk, "default");
    if (!no_budget) {
        oq_proto_pack_cstr(pk, "max_tries");
        msgpack_pack_uint32(pk, 3);
        oq_proto_pack_cstr(pk, "timeout");
        msgpack_pack_uint32(pk, 10);
    }
    oq_proto_pack_cstr(pk, "payload");
    if (bad) {
        msgpack_pack_uint32(pk, S_BAD_PAYLOAD);
        return;
    }
    msgpack_pack_map(pk, 2);
    oq_proto_pack_cstr(pk, "message");
    oq_proto_pack_cstr(pk, message);
    oq_proto_pack_cstr(pk, "permanent");
    msgpack_pack_true(pk);
}

/* The acks of count jobs: outcome and error by id (ids below S_MAX_ACKS). */
typedef struct {
    bool seen;
    oq_outcome_t outcome;
    uint64_t lease;
    char error[OQ_MAX_ERROR_LEN + 1];
} s_ack_t;

static void s_collect_acks(s_broker_t *b, s_ack_t *acks, size_t count)
{
    size_t got = 0;
    while (got < count) {
        oq_msg_t msg;
        if (s_recv(b, &msg) < 0)
            fail_msg("%zu of %zu acks came within %d ms", got, count, IT_WAIT_MS);
        if (msg.cmd == OQ_CMD_ACK) {
            assert_true(msg.ack.id < S_MAX_ACKS);
            s_ack_t *ack = &acks[msg.ack.id];
            assert_false(ack->seen);
            ack->seen = true;
            ack->outcome = msg.ack.outcome;
            ack->lease = msg.ack.lease;
            oq_str_copy(msg.ack.error, ack->error, sizeof ack->error);
            got++;
        } else {
            /* heartbeats, a ready topping the credit up */
            assert_true(msg.cmd == OQ_CMD_HEARTBEAT || msg.cmd == OQ_CMD_READY);
        }
        oq_proto_msg_release(&msg);
    }
}

static void s_expect_failed(const s_ack_t *ack, uint64_t id, const char *error)
{
    assert_true(ack->seen);
    assert_int_equal(ack->outcome, OQ_OUTCOME_FAIL);
    assert_true(ack->lease == 1000 + id);
    assert_string_equal(ack->error, error);
}

static void test_jobs_run_with_their_payloads_around_bad_ones(void **state)
{
    it_t *it = *state;
    s_broker_t b = {.router = zmq_socket(it->zctx, ZMQ_ROUTER)};
    assert_non_null(b.router);
    it->sockets[it->socket_count++] = b.router; /* closed by it_destroy */
    int linger_ms = 0;
    zmq_setsockopt(b.router, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    assert_int_equal(zmq_bind(b.router, it->back), 0);

    const char *argv[] = {
        it_bin("onceq-worker"), "--broker", it->back, "--prefetch", S_PREFETCH, "--batch", "1",
        "--log-level",          "info",     NULL};
    pid_t worker = it_spawn(it, "worker", argv);
    assert_true(worker > 0);
    oq_msg_t msg;
    assert_int_equal(s_recv(&b, &msg), 0);
    assert_int_equal(msg.cmd, OQ_CMD_READY);
    assert_true(msg.credit >= 3);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_welcome(&buf, S_HEARTBEAT, S_LIVENESS);
    s_send(&b, &buf);

    /* Three deliveries in one message, the middle one not decodable. */
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_JOBS, -1, 1);
    oq_proto_pack_cstr(&pk, "jobs");
    msgpack_pack_array(&pk, 3);
    s_pack_delivery(&pk, 1, "the first job's own words", false, false);
    s_pack_delivery(&pk, 2, NULL, true, false);
    s_pack_delivery(&pk, 3, "the third job's own words", false, false);
    s_send(&b, &buf);
    s_ack_t acks[S_MAX_ACKS] = {0};
    s_collect_acks(&b, acks, 3);
    s_expect_failed(&acks[1], 1, "the first job's own words");
    s_expect_failed(&acks[2], 2,
                    "the worker could not decode the job: field \"payload\" must be a map");
    s_expect_failed(&acks[3], 3, "the third job's own words");

    /* A lone job that does not decode, then one that does. */
    memset(acks, 0, sizeof acks);
    oq_proto_begin(&pk, OQ_CMD_JOB, -1, 1);
    oq_proto_pack_cstr(&pk, "job");
    s_pack_delivery(&pk, 4, "never run", false, true);
    s_send(&b, &buf);
    oq_proto_begin(&pk, OQ_CMD_JOB, -1, 1);
    oq_proto_pack_cstr(&pk, "job");
    s_pack_delivery(&pk, 5, "the fifth job's own words", false, false);
    s_send(&b, &buf);
    s_collect_acks(&b, acks, 2);
    s_expect_failed(&acks[4], 4,
                    "the worker could not decode the job: a delivered job must carry "
                    "\"max_tries\" and \"timeout\"");
    s_expect_failed(&acks[5], 5, "the fifth job's own words");
    msgpack_sbuffer_destroy(&buf);

    /* Nothing was lost on the way: the worker stops cleanly. */
    it_signal(worker, SIGTERM);
    assert_int_equal(it_wait_exit(worker, S_STOP_MS), 0);
    assert_int_equal(it_log_count(it, "worker", "job 1 type=fail attempt=1 outcome=fail"), 1);
    assert_int_equal(it_log_count(it, "worker", "job 5 type=fail attempt=1 outcome=fail"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_jobs_run_with_their_payloads_around_bad_ones, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
