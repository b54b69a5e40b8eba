/*  waits_outlive_connection: a peer's waits go when its connection goes,
    and one key cannot take every wait the broker holds.

    257 connections of one producer key each sent 256 waits (timeout one
    hour) and closed: the broker kept all 65,536 until their timeouts, so
    for an hour an admin's wait was refused "full" and a dispatch with a
    wait fell back to a plain "dispatched".

    (i)   257 connections of the producer key send 256 waits each on a
          live job: the broker holds at most OQ_MAX_WAITERS_PER_KEY of
          them and refuses the rest "full", naming the key's limit; an
          admin's wait is still held (answered "pending" at its timeout).
    (ii)  The producer's connections close: every wait they held is given
          back within a bounded time.
    (iii) Connections that send their waits and close at once, before the
          broker has read them, leave nothing held either. */
#include <setjmp.h>
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

#define S_CONNS         257     /* producer connections, as the hostile peer opened */
#define S_WAITS         256     /* waits each sends: the limit per connection */
#define S_WAIT_MS       3600000 /* the waits' timeout: an hour, longer than any test */
#define S_ADMIN_WAIT_MS 500     /* the admin's wait, answered "pending" */
#define S_QUICK_ROUNDS  4       /* rounds of (iii) */
#define S_QUICK_CONNS   64      /* connections of one round of (iii) */
#define S_POLL_MS       50
#define S_LINGER_MS     5000 /* (iii): a closed socket still sends its queue */

static void *s_conns[S_CONNS];

static int s_setup(void **state)
{
    *state = it_new("waits_outlive_connection");
    return *state ? 0 : -1;
}

static void s_close_all(void)
{
    for (size_t i = 0; i < S_CONNS; i++) {
        if (s_conns[i])
            zmq_close(s_conns[i]);
        s_conns[i] = NULL;
    }
}

/* Our sockets first: the fixture's context waits for every socket. */
static int s_teardown(void **state)
{
    s_close_all();
    return it_teardown(state);
}

/* A DEALER of the producer key, more than the fixture's own list holds;
   closed, it still sends what it queued for up to linger_ms. */
static void *s_producer(it_t *it, int linger_ms)
{
    void *sock = zmq_socket(it->zctx, ZMQ_DEALER);
    assert_non_null(sock);
    zmq_setsockopt(sock, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    const oq_keypair_t *mine = &it->pairs[IT_ROLE_PRODUCER];
    assert_int_equal(
        zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, it->broker_pair.public_z85, OQ_KEY_Z85_LEN), 0);
    assert_int_equal(zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, mine->public_z85, OQ_KEY_Z85_LEN),
                     0);
    assert_int_equal(zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, mine->secret_z85, OQ_KEY_Z85_LEN),
                     0);
    assert_int_equal(zmq_connect(sock, it->front), 0);
    return sock;
}

static void s_send_waits(void *sock, uint64_t id, int n, int64_t timeout_ms)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    for (int i = 0; i < n; i++) {
        oq_proto_encode_wait(&buf, i + 1, id, timeout_ms);
        it_send(sock, &buf);
    }
    msgpack_sbuffer_destroy(&buf);
}

/* The waits the broker holds now, from the fixture's (admin) socket. */
static uint64_t s_held(it_t *it)
{
    oq_msg_t reply;
    assert_int_equal(it_stats_reply(it, &reply, IT_WAIT_MS), 0);
    const msgpack_object *waits = oq_proto_map_get(&reply.root, "waits");
    const msgpack_object *held = oq_proto_map_get(waits, "held");
    assert_non_null(held);
    uint64_t n = held->via.u64;
    oq_proto_msg_release(&reply);
    return n;
}

/* Read every answer waiting on the producer sockets: how many were
   "full" refusals (each checked to name a limit). */
static uint64_t s_read_refusals(void)
{
    uint64_t refused = 0;
    for (size_t i = 0; i < S_CONNS; i++) {
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        while (s_conns[i] && zmq_msg_recv(&frame, s_conns[i], ZMQ_DONTWAIT) >= 0) {
            oq_msg_t msg;
            oq_err_t code;
            char why[256];
            if (oq_proto_decode(&msg, zmq_msg_data(&frame), zmq_msg_size(&frame), &code, why,
                                sizeof why) == 0 &&
                msg.cmd == OQ_CMD_ERROR && msg.err_code == OQ_ERR_FULL) {
                assert_non_null(msg.err_text.ptr);
                refused++;
            }
            oq_proto_msg_release(&msg);
        }
        zmq_msg_close(&frame);
    }
    return refused;
}

/* Wait until held is at most want: the waits held then. */
static uint64_t s_wait_held_at_most(it_t *it, uint64_t want)
{
    int64_t deadline = it_now_ms() + IT_WAIT_MS;
    uint64_t held = s_held(it);
    while (held > want && it_now_ms() < deadline) {
        zmq_poll(NULL, 0, S_POLL_MS);
        held = s_held(it);
    }
    return held;
}

static void test_waits_go_with_their_connection_and_a_key_has_a_limit(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    uint64_t id = it_dispatch(it, "noop", NULL, NULL); /* no worker: it stays live */

    /* (i) Every connection's waits sent and read by the broker. */
    for (size_t i = 0; i < S_CONNS; i++) {
        s_conns[i] = s_producer(it, 0);
        s_send_waits(s_conns[i], id, S_WAITS, S_WAIT_MS);
    }
    uint64_t sent = (uint64_t)S_CONNS * S_WAITS, refused = 0, held = 0;
    int64_t deadline = it_now_ms() + IT_WAIT_MS;
    do {
        zmq_poll(NULL, 0, S_POLL_MS);
        refused += s_read_refusals();
        held = s_held(it);
    } while (held + refused < sent && it_now_ms() < deadline);
    printf("%llu waits sent over %d connections of one key: %llu held, %llu refused full\n",
           (unsigned long long)sent, S_CONNS, (unsigned long long)held,
           (unsigned long long)refused);

    /* An admin's wait is held, and answered "pending" at its timeout. */
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(it);
    oq_proto_encode_wait(&buf, req, id, S_ADMIN_WAIT_MS);
    oq_msg_t reply;
    int rc = it_call(it, &buf, req, &reply, IT_WAIT_MS);
    msgpack_sbuffer_destroy(&buf);
    assert_int_equal(rc, 0);
    bool admin_held = reply.cmd == OQ_CMD_WAITED && reply.wait_state == OQ_WAIT_PENDING;
    printf("an admin's wait: %s\n",
           admin_held ? "held, answered pending at its timeout" : oq_proto_cmd_name(reply.cmd));
    oq_proto_msg_release(&reply);

    /* (ii) The producer's connections close. */
    int64_t closed_at = it_now_ms();
    s_close_all();
    uint64_t left = s_wait_held_at_most(it, 0);
    printf("after the connections closed: %llu waits held, %lld ms later\n",
           (unsigned long long)left, (long long)(it_now_ms() - closed_at));

    assert_true(held <= OQ_MAX_WAITERS_PER_KEY);
    assert_int_equal(held + refused, sent);
    assert_true(admin_held);
    assert_int_equal(left, 0);

    /* (iii) Waits sent, then the connection closed before they were read. */
    for (int round = 0; round < S_QUICK_ROUNDS; round++) {
        for (size_t i = 0; i < S_QUICK_CONNS; i++) {
            s_conns[i] = s_producer(it, S_LINGER_MS);
            s_send_waits(s_conns[i], id, S_WAITS, S_WAIT_MS);
        }
        /* Closed at once: libzmq still sends what was queued, then ends
           the connection, and the broker may read the waits after it
           has seen the close. */
        s_close_all();
    }
    left = s_wait_held_at_most(it, 0);
    printf("after %d rounds of %d connections that closed at once: %llu waits held\n",
           S_QUICK_ROUNDS, S_QUICK_CONNS, (unsigned long long)left);
    assert_int_equal(left, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_waits_go_with_their_connection_and_a_key_has_a_limit),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
