/*  stats_types_after_return: a worker that named no types (it takes every
    one) hands a job back with "return"; the broker sends it no more jobs
    of that type, and stats says so: the type counts no worker for it, its
    ready job is unhandled, and `onceq stats` prints "no worker handles
    type". Before, the type still counted the worker (workers 1,
    unhandled 0) while the job sat ready with nobody to take it. */
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

#define S_PEER_WAIT_MS 10000

static int s_setup(void **state)
{
    *state = it_new("stats-types-after-return");
    return *state ? 0 : -1;
}

/* types[name].key from a stats reply; fails the test if the type is not
   listed. */
static uint64_t s_type_stat(it_t *it, const char *name, const char *key)
{
    oq_msg_t reply;
    assert_int_equal(it_stats_reply(it, &reply, IT_WAIT_MS), 0);
    const msgpack_object *types = oq_proto_map_get(&reply.root, "types");
    const msgpack_object *value = NULL;
    for (uint32_t i = 0; types && i < types->via.array.size; i++) {
        const msgpack_object *t = &types->via.array.ptr[i];
        const msgpack_object *n = oq_proto_map_get(t, "name");
        if (n && n->type == MSGPACK_OBJECT_STR &&
            oq_str_eq((oq_str_t){n->via.str.ptr, n->via.str.size}, name))
            value = oq_proto_map_get(t, key);
    }
    assert_non_null(value);
    uint64_t v = value->via.u64;
    oq_proto_msg_release(&reply);
    return v;
}

static void test_a_returned_type_counts_the_worker_no_more(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    void *peer = it_socket(it, ZMQ_DEALER, it->back);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready(&buf, 1, "every-type", 1); /* no types: every type */
    it_send(peer, &buf);
    oq_msg_t msg;
    assert_int_equal(it_expect(peer, OQ_CMD_WELCOME, &msg, S_PEER_WAIT_MS), 0);
    oq_proto_msg_release(&msg);

    uint64_t id = it_dispatch(it, "hello", NULL, NULL);
    assert_true(id > 0);
    assert_int_equal(it_expect(peer, OQ_CMD_JOB, &msg, S_PEER_WAIT_MS), 0);
    assert_int_equal(msg.job.id, id);
    assert_int_equal(s_type_stat(it, "hello", "workers"), 1);
    oq_ack_msg_t ack = {.id = id,
                        .attempt = msg.job.attempt,
                        .outcome = OQ_OUTCOME_RETURN,
                        .error = oq_str("no handler for hello"),
                        .credit = 1,
                        .lease = msg.job.lease,
                        .has_lease = msg.job.has_lease};
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
    it_send_ack(peer, &ack);

    /* The job is ready again, and nobody connected takes it. */
    it_stats_t s;
    uint64_t one = 1;
    assert_true(it_wait_stats(it, it_ready_is, &one, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s_type_stat(it, "hello", "workers"), 0);
    assert_int_equal(s_type_stat(it, "hello", "unhandled"), 1);
    assert_int_equal(s_type_stat(it, "hello", "ready"), 1);
    char *out = it_cli(it, "stats", 0, "stats", NULL);
    it_expect_output(out, "no worker handles type hello (1 waiting)");

    /* A worker that takes it connects: it is counted, and the job runs. */
    void *taker = it_socket(it, ZMQ_DEALER, it->back);
    const char *hello[] = {"hello"};
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready_routed(&buf, 1, "hello-taker", 2, hello, 1, NULL, 0);
    it_send(taker, &buf);
    msgpack_sbuffer_destroy(&buf);
    assert_int_equal(it_expect(taker, OQ_CMD_JOB, &msg, S_PEER_WAIT_MS), 0);
    assert_int_equal(msg.job.id, id);
    oq_proto_msg_release(&msg);
    assert_int_equal(s_type_stat(it, "hello", "workers"), 1);
    assert_int_equal(s_type_stat(it, "hello", "unhandled"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_returned_type_counts_the_worker_no_more, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
