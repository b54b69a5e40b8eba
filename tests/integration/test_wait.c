/*  test_wait: a producer waits for a job to end, with the real broker and
    the onceq tool; the worker is a raw socket, so that each outcome comes
    exactly when the test sends it.

    (i)   A wait sent while the job is leased is not answered until the ok
          comes, then answered done; one on a job that fails for good is
          answered failed with the error; one on a job sent to review is
          answered review with the reason; one on a waiting job an admin
          cancels is answered cancelled. A producer key may wait.
    (ii)  A wait whose timeout passes is answered pending, not before it;
          a wait of 0 is answered at once.
    (iii) A wait on a job that ended already is answered at once, as it
          ended; an id never issued is not_found; a wait without an id,
          with id 0 or with a timeout over the limit is a bad_request.
    (iv)  One connection holding OQ_MAX_WAITERS_PER_PEER waits is refused
          the next, "full", naming the limit; once they time out it may
          wait again.
    (v)   After a SIGKILL and a restart the broker answers the same: done,
          failed, not_found past its ids; a live job is waited for again,
          by two connections (one a REQ socket), each answered;
          `onceq wait` and `onceq dispatch --wait` exit as documented.
    (vi)  stats counts the waits held now, with the limits: up while held,
          down when answered by the job's end or by their timeout; so do
          `onceq stats` and its waits line.
    (vii) A dispatch carrying a wait is answered once, with "waited" naming
          the job: not before the ok, done after it; "pending" at its
          timeout, not before, and at once with 0; a resend of its
          dispatch_id waits for the first job. A unique key's holder is
          answered "dispatched" at once, and `onceq dispatch --wait` then
          waits for it apart; a bad wait is a bad_request. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <zmq.h>

#include <cmocka.h>

#include "harness.h"
#include "onceq/limits.h"
#include "support.h"

#define S_CALL_MS     5000
#define S_QUIET_MS    300 /* a wait must stay unanswered at least this long */
#define S_TIMEOUT_MS  400 /* the timeout of the waits that must end pending */
#define S_LONG_MS     30000
#define S_CAP_WAIT_MS 1500 /* the waits that fill a connection's limit */
#define S_HELD_MS     2000 /* a wait that stats must see held, then expire */

static int s_setup(void **state)
{
    *state = it_new("wait");
    return *state ? 0 : -1;
}

static void s_send_wait(void *sock, int64_t req, uint64_t id, int64_t timeout_ms)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_wait(&buf, req, id, timeout_ms);
    it_send(sock, &buf);
    msgpack_sbuffer_destroy(&buf);
}

/* The next "waited" on sock: for job id, in state want, with error
   containing needle (NULL: no error). */
static void s_expect_waited(void *sock, uint64_t id, oq_wait_state_t want, const char *needle,
                            int timeout_ms)
{
    oq_msg_t msg;
    if (it_expect(sock, OQ_CMD_WAITED, &msg, timeout_ms) < 0)
        fail_msg("no answer to a wait for job %llu", (unsigned long long)id);
    assert_int_equal(msg.id, id);
    if (msg.wait_state != want)
        fail_msg("job %llu: %s, wanted %s", (unsigned long long)id,
                 oq_proto_wait_state_name(msg.wait_state), oq_proto_wait_state_name(want));
    char error[OQ_MAX_ERROR_LEN + 1];
    oq_str_copy(msg.err_text, error, sizeof error);
    if (needle && !strstr(error, needle))
        fail_msg("job %llu: error \"%s\", wanted \"%s\" in it", (unsigned long long)id, error,
                 needle);
    if (!needle)
        assert_string_equal(error, "");
    oq_proto_msg_release(&msg);
}

/* Nothing arrives on sock for S_QUIET_MS. */
static void s_expect_quiet(void *sock)
{
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    assert_int_equal(zmq_poll(&item, 1, S_QUIET_MS), 0);
}

/* A wait answered by an error with code, the message containing needle. */
static void s_expect_refused(void *sock, int64_t req, uint64_t id, int64_t timeout_ms,
                             oq_err_t code, const char *needle)
{
    s_send_wait(sock, req, id, timeout_ms);
    oq_msg_t msg;
    assert_int_equal(it_expect(sock, OQ_CMD_ERROR, &msg, S_CALL_MS), 0);
    assert_int_equal(msg.err_code, code);
    char text[OQ_MAX_ERROR_LEN + 1];
    oq_str_copy(msg.err_text, text, sizeof text);
    if (!strstr(text, needle))
        fail_msg("expected \"%s\" in: %s", needle, text);
    oq_proto_msg_release(&msg);
}

/* The raw worker takes its next job (it must be job id) and reports
   outcome with error text, giving its credit back. */
static void s_take(void *w, uint64_t id, oq_msg_t *job)
{
    assert_int_equal(it_expect(w, OQ_CMD_JOB, job, S_CALL_MS), 0);
    assert_int_equal(job->job.id, id);
}

static void s_report(void *w, const oq_msg_t *job, oq_outcome_t outcome, const char *error)
{
    oq_ack_msg_t ack = {
        .id = job->job.id,
        .attempt = job->job.attempt,
        .outcome = outcome,
        .error = oq_str(error ? error : ""),
        .credit = 1,
        .lease = job->job.lease,
        .has_lease = true,
    };
    it_send_ack(w, &ack);
}

/* Dispatch a job of type noop on queue "default" with max_tries 1 (and a
   delay, if delay_ms > 0). */
static uint64_t s_dispatch(it_t *it, int64_t delay_ms)
{
    oq_job_msg_t options = {.max_tries = 1, .has_max_tries = true};
    if (delay_ms > 0) {
        options.delay_ms = delay_ms;
        options.has_delay = true;
    }
    uint64_t id = it_dispatch(it, "noop", NULL, &options);
    assert_true(id > 0);
    return id;
}

/* The ends a raw worker gives a job, each with the error it reports and
   what a wait for the job answers. */
enum { S_DONE, S_FAILED, S_REVIEW, S_ENDS };
static const struct {
    oq_outcome_t outcome;
    const char *error; /* the worker's, and the one the wait answers with */
    oq_wait_state_t state;
} s_ends[S_ENDS] = {
    [S_DONE] = {OQ_OUTCOME_OK, NULL, OQ_WAIT_DONE},
    [S_FAILED] = {OQ_OUTCOME_FAIL, "the order does not exist", OQ_WAIT_FAILED},
    [S_REVIEW] = {OQ_OUTCOME_REVIEW, "carrier timed out", OQ_WAIT_REVIEW},
};

static void test_wait_for_each_end_timeouts_limits_and_restart(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    void *w = it_worker_socket(it, IT_ROLE_WORKER, 1, "raw");
    void *producer = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    oq_msg_t job;

    /* (i) done, failed for good with its error, to review with the
       handler's reason: each wait is held while the job is leased. */
    uint64_t ended[S_ENDS];
    for (int e = 0; e < S_ENDS; e++) {
        ended[e] = s_dispatch(it, 0);
        s_take(w, ended[e], &job);
        s_send_wait(producer, 1 + e, ended[e], S_LONG_MS);
        s_expect_quiet(producer);
        s_report(w, &job, s_ends[e].outcome, s_ends[e].error);
        s_expect_waited(producer, ended[e], s_ends[e].state, s_ends[e].error, S_CALL_MS);
        oq_proto_msg_release(&job);
    }
    const uint64_t done_id = ended[S_DONE], failed_id = ended[S_FAILED];

    /* cancelled by an admin while it waits for its delay */
    uint64_t cancelled_id = s_dispatch(it, 600000);
    s_send_wait(producer, 4, cancelled_id, S_LONG_MS);
    s_expect_quiet(producer);
    it_cancel(it, cancelled_id);
    s_expect_waited(producer, cancelled_id, OQ_WAIT_CANCELLED, NULL, S_CALL_MS);

    /* (ii) a timeout: pending, and not before it */
    uint64_t live_id = s_dispatch(it, 600000);
    int64_t sent = it_now_ms();
    s_send_wait(producer, 5, live_id, S_TIMEOUT_MS);
    s_expect_waited(producer, live_id, OQ_WAIT_PENDING, NULL, IT_WAIT_MS);
    int64_t took = it_now_ms() - sent;
    if (took < S_TIMEOUT_MS - 5)
        fail_msg("a wait of %d ms answered pending after %lld ms", S_TIMEOUT_MS, (long long)took);
    s_send_wait(producer, 6, live_id, 0);
    s_expect_waited(producer, live_id, OQ_WAIT_PENDING, NULL, S_CALL_MS);

    /* (iii) ended already: answered at once, as it ended */
    for (int e = 0; e < S_ENDS; e++) {
        s_send_wait(producer, 7 + e, ended[e], S_LONG_MS);
        s_expect_waited(producer, ended[e], s_ends[e].state, s_ends[e].error, S_CALL_MS);
    }
    s_send_wait(producer, 10, cancelled_id, S_LONG_MS);
    s_expect_waited(producer, cancelled_id, OQ_WAIT_CANCELLED, NULL, S_CALL_MS);
    s_expect_refused(producer, 11, live_id + 1, S_LONG_MS, OQ_ERR_NOT_FOUND, "never issued");
    /* bad input, refused with the field named; the broker goes on */
    const struct {
        bool has_id;
        uint64_t id;
        bool has_timeout;
        int64_t timeout_s;
    } bad[] = {
        {false, 0, false, 0}, {true, 0, false, 0}, {true, 1, true, 3601}, {true, 1, true, -1}};
    msgpack_sbuffer buf;
    oq_msg_t reply;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        msgpack_sbuffer_init(&buf);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
        oq_proto_begin(&pk, OQ_CMD_WAIT, 12, bad[i].has_id + bad[i].has_timeout);
        if (bad[i].has_id) {
            oq_proto_pack_cstr(&pk, "id");
            msgpack_pack_uint64(&pk, bad[i].id);
        }
        if (bad[i].has_timeout) {
            oq_proto_pack_cstr(&pk, "timeout");
            msgpack_pack_int64(&pk, bad[i].timeout_s);
        }
        it_send(producer, &buf);
        msgpack_sbuffer_destroy(&buf);
        assert_int_equal(it_expect(producer, OQ_CMD_ERROR, &reply, S_CALL_MS), 0);
        assert_int_equal(reply.err_code, OQ_ERR_BAD_REQUEST);
        oq_proto_msg_release(&reply);
    }

    /* (iv) one connection's limit */
    void *greedy = it_socket(it, ZMQ_DEALER, it->front);
    for (int i = 0; i < OQ_MAX_WAITERS_PER_PEER; i++)
        s_send_wait(greedy, 100 + i, live_id, S_CAP_WAIT_MS);
    s_expect_refused(greedy, 99, live_id, S_CAP_WAIT_MS, OQ_ERR_FULL, "per connection");
    /* another connection is not held up by it */
    s_send_wait(producer, 16, live_id, 0);
    s_expect_waited(producer, live_id, OQ_WAIT_PENDING, NULL, S_CALL_MS);
    for (int i = 0; i < OQ_MAX_WAITERS_PER_PEER; i++)
        s_expect_waited(greedy, live_id, OQ_WAIT_PENDING, NULL, IT_WAIT_MS);
    s_send_wait(greedy, 98, live_id, 0);
    s_expect_waited(greedy, live_id, OQ_WAIT_PENDING, NULL, S_CALL_MS);

    /* (v) a restart: the journal keeps the ids and the ends */
    uint64_t after_id = s_dispatch(it, 0);
    s_take(w, after_id, &job);
    oq_proto_msg_release(&job);
    it_signal(it->broker, SIGKILL);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);
    assert_true(it_start_broker(it, NULL) > 0);
    for (int e = S_DONE; e <= S_FAILED; e++) {
        s_send_wait(producer, 20 + e, ended[e], S_LONG_MS);
        s_expect_waited(producer, ended[e], s_ends[e].state, s_ends[e].error, IT_WAIT_MS);
    }
    s_expect_refused(producer, 22, after_id + 1, S_LONG_MS, OQ_ERR_NOT_FOUND, "never issued");
    /* the job leased before the restart is ready again: waited for, and done by a worker */
    s_send_wait(producer, 23, after_id, S_LONG_MS);
    void *req_sock = it_socket(it, ZMQ_REQ, it->front); /* answered behind REQ's delimiter */
    s_send_wait(req_sock, 24, after_id, S_LONG_MS);
    s_expect_quiet(producer);
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    s_expect_waited(producer, after_id, OQ_WAIT_DONE, NULL, IT_WAIT_MS);
    s_expect_waited(req_sock, after_id, OQ_WAIT_DONE, NULL, S_CALL_MS);

    /* the tool: exit codes by how the job ended */
    char id_text[32];
    snprintf(id_text, sizeof id_text, "%llu", (unsigned long long)done_id);
    it_expect_output(it_cli(it, "wait-done", 0, "wait", id_text, NULL), "done");
    snprintf(id_text, sizeof id_text, "%llu", (unsigned long long)failed_id);
    it_expect_output(it_cli(it, "wait-failed", 4, "wait", id_text, NULL),
                     "failed: the order does not exist");
    snprintf(id_text, sizeof id_text, "%llu", (unsigned long long)live_id);
    it_expect_output(it_cli(it, "wait-pending", 7, "wait", id_text, "--timeout", "0.2", NULL),
                     "pending");
    it_expect_output(it_cli(it, "wait-unknown", 1, "wait", "999999", NULL), "never issued");
    it_expect_output(it_cli(it, "dispatch-wait", 0, "dispatch", "noop", "--wait", NULL), "done");
    it_expect_output(it_cli(it, "dispatch-wait-fail", 4, "dispatch", "fail", "--payload",
                            "{\"permanent\": true}", "--wait", "--wait-timeout", "30", NULL),
                     "failed");
}

/* The "waits" map of a stats reply asked on sock, after what sock sent
   before it (a connection's messages are read in order): held, and the
   limits checked. */
static uint64_t s_waits_held(void *sock, int64_t req)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_simple(&buf, OQ_CMD_STATS, req);
    it_send(sock, &buf);
    msgpack_sbuffer_destroy(&buf);
    oq_msg_t reply;
    assert_int_equal(it_expect(sock, OQ_CMD_STATS, &reply, S_CALL_MS), 0);
    const msgpack_object *waits = oq_proto_map_get(&reply.root, "waits");
    const msgpack_object *held = oq_proto_map_get(waits, "held");
    const msgpack_object *max = oq_proto_map_get(waits, "max");
    const msgpack_object *per_peer = oq_proto_map_get(waits, "max_per_peer");
    if (!held || held->type != MSGPACK_OBJECT_POSITIVE_INTEGER || !max ||
        max->type != MSGPACK_OBJECT_POSITIVE_INTEGER || !per_peer ||
        per_peer->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        fail_msg("stats has no waits map of held, max and max_per_peer");
    assert_int_equal(max->via.u64, OQ_MAX_WAITERS);
    assert_int_equal(per_peer->via.u64, OQ_MAX_WAITERS_PER_PEER);
    uint64_t n = held->via.u64;
    oq_proto_msg_release(&reply);
    return n;
}

static void test_stats_count_the_waits_held(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    void *w = it_worker_socket(it, IT_ROLE_WORKER, 1, "raw");
    void *producer = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    assert_int_equal(s_waits_held(producer, 1), 0);

    /* Held: two waits on a leased job. */
    uint64_t id = s_dispatch(it, 0);
    oq_msg_t job;
    s_take(w, id, &job);
    s_send_wait(producer, 2, id, S_LONG_MS);
    s_send_wait(producer, 3, id, S_LONG_MS);
    assert_int_equal(s_waits_held(producer, 4), 2);
    char want[128];
    snprintf(want, sizeof want,
             "waits: 2 held (at most %d, %d from one connection, %d from one key)\n",
             OQ_MAX_WAITERS, OQ_MAX_WAITERS_PER_PEER, OQ_MAX_WAITERS_PER_KEY);
    it_expect_output(it_cli(it, "stats-held", 0, "stats", NULL), want);

    /* Answered: the job ends, both are answered, none is held. */
    s_report(w, &job, OQ_OUTCOME_OK, NULL);
    oq_proto_msg_release(&job);
    s_expect_waited(producer, id, OQ_WAIT_DONE, NULL, S_CALL_MS);
    s_expect_waited(producer, id, OQ_WAIT_DONE, NULL, S_CALL_MS);
    assert_int_equal(s_waits_held(producer, 5), 0);

    /* Expired: a wait on a delayed job is held until its timeout, then
       answered pending and gone. */
    uint64_t delayed = s_dispatch(it, 600000);
    s_send_wait(producer, 6, delayed, S_HELD_MS);
    assert_int_equal(s_waits_held(producer, 7), 1);
    s_expect_waited(producer, delayed, OQ_WAIT_PENDING, NULL, IT_WAIT_MS);
    assert_int_equal(s_waits_held(producer, 8), 0);
    snprintf(want, sizeof want, "waits: 0 held (at most %d, ", OQ_MAX_WAITERS);
    it_expect_output(it_cli(it, "stats-none", 0, "stats", NULL), want);
}

/* The next message on sock, whatever its command, within timeout_ms. */
static void s_next(void *sock, oq_msg_t *msg, int timeout_ms)
{
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    assert_int_equal(zmq_poll(&item, 1, timeout_ms), 1);
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    assert_true(zmq_msg_recv(&frame, sock, 0) >= 0);
    oq_err_t code;
    char reason[256];
    assert_int_equal(oq_proto_decode(msg, zmq_msg_data(&frame), zmq_msg_size(&frame), &code, reason,
                                     sizeof reason),
                     0);
    zmq_msg_close(&frame);
}

/* Send a dispatch of a noop job (with a delay if delay_ms > 0, with
   unique_key if not NULL) that waits wait_ms. */
static void s_dispatch_wait(void *sock, int64_t req, const char *dispatch_id, int64_t delay_ms,
                            const char *unique_key, int64_t wait_ms)
{
    oq_job_msg_t job = {.type = oq_str("noop"),
                        .queue = oq_str(OQ_DEFAULT_QUEUE),
                        .max_tries = 1,
                        .has_max_tries = true,
                        .delay_ms = delay_ms,
                        .has_delay = delay_ms > 0,
                        .dispatch_id = oq_str(dispatch_id),
                        .unique_key = oq_str(unique_key ? unique_key : "")};
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_dispatch_wait(&buf, req, &job, wait_ms);
    it_send(sock, &buf);
    msgpack_sbuffer_destroy(&buf);
}

/* The next message on sock is a "waited" to req for job id (id 0: any, its
   id returned) in state want. */
static uint64_t s_expect_waited_req(void *sock, int64_t req, uint64_t id, oq_wait_state_t want,
                                    int timeout_ms)
{
    oq_msg_t msg;
    s_next(sock, &msg, timeout_ms);
    if (msg.cmd != OQ_CMD_WAITED)
        fail_msg("got \"%s\", wanted \"waited\"", oq_proto_cmd_name(msg.cmd));
    assert_int_equal(msg.req, req);
    if (id)
        assert_int_equal(msg.id, id);
    assert_int_equal(msg.wait_state, want);
    uint64_t got = msg.id;
    oq_proto_msg_release(&msg);
    return got;
}

static void test_dispatch_with_wait_answers_once(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    void *w = it_worker_socket(it, IT_ROLE_WORKER, 1, "raw");
    void *producer = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    oq_msg_t job, msg;

    /* (vi) answered once, when the job is done */
    s_dispatch_wait(producer, 1, "dw-1", 0, NULL, S_LONG_MS);
    assert_int_equal(it_expect(w, OQ_CMD_JOB, &job, S_CALL_MS), 0);
    s_expect_quiet(producer);
    s_report(w, &job, OQ_OUTCOME_OK, NULL);
    uint64_t done_id = s_expect_waited_req(producer, 1, job.job.id, OQ_WAIT_DONE, S_CALL_MS);
    oq_proto_msg_release(&job);
    /* a resend of its dispatch_id: the same job, done */
    s_dispatch_wait(producer, 2, "dw-1", 0, NULL, S_LONG_MS);
    s_expect_waited_req(producer, 2, done_id, OQ_WAIT_DONE, S_CALL_MS);

    /* pending at its timeout, not before; at once with 0 */
    int64_t sent = it_now_ms();
    s_dispatch_wait(producer, 3, "dw-3", 600000, NULL, S_TIMEOUT_MS);
    uint64_t delayed_id = s_expect_waited_req(producer, 3, 0, OQ_WAIT_PENDING, IT_WAIT_MS);
    int64_t took = it_now_ms() - sent;
    if (took < S_TIMEOUT_MS - 5)
        fail_msg("a wait of %d ms answered pending after %lld ms", S_TIMEOUT_MS, (long long)took);
    assert_true(delayed_id > done_id);
    s_dispatch_wait(producer, 4, "dw-4", 600000, "dw-key", 0);
    uint64_t holder_id = s_expect_waited_req(producer, 4, 0, OQ_WAIT_PENDING, S_CALL_MS);
    assert_true(holder_id > delayed_id);

    /* a unique key's holder: "dispatched" at once, unique */
    s_dispatch_wait(producer, 5, "dw-5", 0, "dw-key", S_LONG_MS);
    s_next(producer, &msg, S_CALL_MS);
    assert_int_equal(msg.cmd, OQ_CMD_DISPATCHED);
    assert_int_equal(msg.req, 5);
    assert_int_equal(msg.id, holder_id);
    assert_true(msg.unique);
    oq_proto_msg_release(&msg);
    /* the tool waits for the holder apart */
    it_expect_output(it_cli(it, "dispatch-wait-unique", 7, "dispatch", "noop", "--unique-key",
                            "dw-key", "--wait", "--wait-timeout", "0.2", NULL),
                     "pending");

    /* a bad wait: refused, nothing queued, the broker goes on */
    const double bad[] = {3601, -1};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        msgpack_sbuffer buf;
        msgpack_sbuffer_init(&buf);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
        oq_proto_begin(&pk, OQ_CMD_DISPATCH, 6, 2);
        oq_proto_pack_cstr(&pk, "wait");
        msgpack_pack_double(&pk, bad[i]);
        oq_proto_pack_cstr(&pk, "job");
        msgpack_pack_map(&pk, 1);
        oq_proto_pack_cstr(&pk, "type");
        oq_proto_pack_cstr(&pk, "noop");
        it_send(producer, &buf);
        msgpack_sbuffer_destroy(&buf);
        s_next(producer, &msg, S_CALL_MS);
        assert_int_equal(msg.cmd, OQ_CMD_ERROR);
        assert_int_equal(msg.err_code, OQ_ERR_BAD_REQUEST);
        char text[OQ_MAX_ERROR_LEN + 1];
        oq_str_copy(msg.err_text, text, sizeof text);
        if (!strstr(text, "wait"))
            fail_msg("expected the field named in: %s", text);
        oq_proto_msg_release(&msg);
    }
    s_dispatch_wait(producer, 7, "dw-7", 600000, NULL, 0);
    assert_true(s_expect_waited_req(producer, 7, 0, OQ_WAIT_PENDING, S_CALL_MS) == holder_id + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wait_for_each_end_timeouts_limits_and_restart, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_stats_count_the_waits_held, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_dispatch_with_wait_answers_once, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
