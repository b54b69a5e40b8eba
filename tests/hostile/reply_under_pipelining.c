/*  reply_under_pipelining: a producer that keeps many dispatches in flight
    gets every answer, and a peer that never reads cannot grow the broker
    without bound.

    The front socket's pipe to one peer holds about a thousand messages; a
    reply that met it full was taken for a peer that had gone and dropped,
    so a producer with 512, 900 or 5,000 dispatches in flight lost some of
    its "dispatched" answers with nothing said.

    (i)  A producer keeps 512, then 900, then 5,000 dispatches in flight
         over 20,000 each, then sends 50,000 and reads none until the
         broker has queued them all: it gets one "dispatched" per request,
         in the order it sent them (a connection's "dispatched" answers
         leave in the order of its dispatches). The last part meets the full pipe whatever the
   timing; the windows may or may not, as the producer keeps up or not. (ii) A peer that asks for
   stats over and over and never reads is cut off once the replies kept for it reach the bound: the
   broker logs it, counts it in stats, and still answers everyone else. */
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

#define S_JOBS         20000  /* dispatches at each window */
#define S_BURST        50000  /* dispatches sent before reading one answer */
#define S_RCVBUF_BYTES 4096   /* the producer's kernel receive buffer */
#define S_QUIET_MS     3000   /* no reply for this long: the rest are not coming */
#define S_SEND_MS      10000  /* a send that blocks this long means the broker stopped reading */
#define S_MAX_STATS    100000 /* stats requests the never-reading peer sends at most */
#define S_CUT_LOG      "treated as gone"

static const uint64_t s_windows[] = {512, 900, 5000};

static int s_setup(void **state)
{
    *state = it_new("reply_under_pipelining");
    return *state ? 0 : -1;
}

/* A producer with small receive buffers: the broker's pipe, not the
   kernel's, holds what it has not read yet. */
static void *s_producer(it_t *it)
{
    void *producer = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    int send_ms = S_SEND_MS, hwm = 1, rcvbuf = S_RCVBUF_BYTES;
    zmq_setsockopt(producer, ZMQ_SNDTIMEO, &send_ms, sizeof send_ms);
    zmq_setsockopt(producer, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(producer, ZMQ_RCVBUF, &rcvbuf, sizeof rcvbuf);
    return producer;
}

static void s_send_dispatch(void *sock, int64_t req)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_job_msg_t job = {.type = oq_str("noop")};
    oq_proto_encode_dispatch(&buf, req, &job);
    assert_true(zmq_send(sock, buf.data, buf.size, 0) == (int)buf.size);
    msgpack_sbuffer_destroy(&buf);
}

/* Read one message from sock if one comes within timeout_ms: 1 if it was
   a "dispatched" (its request id in *req), 0 if something else, -1 if
   nothing came (a message that does not decode fails the test). */
static int s_read_one(void *sock, int timeout_ms, uint64_t *req)
{
    oq_msg_t msg;
    if (it_recv(sock, &msg, timeout_ms) < 0)
        return -1;
    int got = msg.cmd == OQ_CMD_DISPATCHED;
    if (got)
        *req = msg.req;
    oq_proto_msg_release(&msg);
    return got;
}

/* Dispatch total jobs on sock, first request id first_req, with window of
   them unanswered; when sent reaches total, read what is left until every
   answer came or none came for S_QUIET_MS. Returns how many "dispatched"
   came; fails if one came out of the order of its request. */
static uint64_t s_pipeline(void *sock, uint64_t total, uint64_t window, int64_t first_req)
{
    uint64_t sent = 0, answered = 0, other = 0, last_req = 0;
    while (answered + other < total) {
        while (sent < total && sent - answered - other < window)
            s_send_dispatch(sock, first_req + (int64_t)sent++);
        uint64_t req = 0;
        int rc = s_read_one(sock, S_QUIET_MS, &req);
        if (rc < 0)
            break; /* lost answers keep the window full: nothing more comes */
        if (rc == 0) {
            other++;
            continue;
        }
        if (req <= last_req)
            fail_msg("the answer to request %llu came after the one to %llu",
                     (unsigned long long)req, (unsigned long long)last_req);
        last_req = req;
        answered++;
    }
    printf("%llu dispatches, %llu in flight: %llu answered, %llu other, %llu missing\n",
           (unsigned long long)total, (unsigned long long)window, (unsigned long long)answered,
           (unsigned long long)other, (unsigned long long)(total - answered - other));
    return answered;
}

static void test_every_dispatch_is_answered(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--fsync", "off", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    int64_t req = 1;
    uint64_t answered[sizeof s_windows / sizeof *s_windows];
    for (size_t i = 0; i < sizeof s_windows / sizeof *s_windows; i++) {
        void *producer = s_producer(it);
        answered[i] = s_pipeline(producer, S_JOBS, s_windows[i], req);
        req += S_JOBS;
        it_close_socket(it, producer);
    }
    /* S_BURST in flight, every one carried out before the producer reads
       an answer: the broker meets the full pipe whatever the timing. */
    void *producer = s_producer(it);
    for (uint64_t i = 0; i < S_BURST; i++)
        s_send_dispatch(producer, req + (int64_t)i);
    uint64_t held = 3 * S_JOBS + S_BURST;
    it_stats_t stats;
    assert_true(it_wait_stats(it, it_ready_is, &held, IT_WAIT_MS, &stats) >= 0);
    uint64_t burst = s_pipeline(producer, S_BURST, S_BURST, req);
    for (size_t i = 0; i < sizeof s_windows / sizeof *s_windows; i++)
        assert_int_equal(answered[i], S_JOBS);
    assert_int_equal(burst, S_BURST);
}

static void test_a_peer_that_never_reads_is_cut_off(void **state)
{
    it_t *it = *state;
    void *silent = it_socket_as(it, IT_ROLE_ADMIN, ZMQ_DEALER, it->front);
    int one = 1, send_ms = S_SEND_MS;
    zmq_setsockopt(silent, ZMQ_RCVHWM, &one, sizeof one);
    zmq_setsockopt(silent, ZMQ_SNDTIMEO, &send_ms, sizeof send_ms);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    bool cut = false;
    int64_t deadline = it_now_ms() + IT_WAIT_MS;
    for (int i = 0; i < S_MAX_STATS && !cut && it_now_ms() < deadline; i++) {
        oq_proto_encode_simple(&buf, OQ_CMD_STATS, i + 1);
        if (zmq_send(silent, buf.data, buf.size, 0) < 0)
            break; /* the connection is gone: its pipe stays full */
        msgpack_sbuffer_clear(&buf);
        if (i % 1000 == 999)
            cut = it_log_count(it, "broker", S_CUT_LOG) > 0;
    }
    msgpack_sbuffer_destroy(&buf);
    assert_int_equal(it_wait_log(it, "broker", S_CUT_LOG, 1, IT_WAIT_MS), 0);
    /* Everyone else is served, and stats say what happened. */
    oq_msg_t reply;
    assert_int_equal(it_stats_reply(it, &reply, IT_WAIT_MS), 0);
    oq_proto_msg_release(&reply);
    char *out = it_cli(it, "stats", 0, "stats", "--json", NULL);
    it_expect_output(out, "\"peers_cut\":1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_dispatch_is_answered),
        cmocka_unit_test(test_a_peer_that_never_reads_is_cut_off),
    };
    return cmocka_run_group_tests(tests, s_setup, it_teardown);
}
