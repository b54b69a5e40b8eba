/*  stats_many_workers: `onceq stats` works with the most workers a broker
    takes connected (OQ_MAX_WORKERS, the default --max-workers: 10,000),
    where a reply that listed every worker passed the 1 MiB frame limit at
    about 7,300 of them. The workers are simulated over raw ZMTP
    (tests/support/fleet.h) and registered as an onceq-worker of the
    built-in handlers registers (a host name, six types, one queue); the
    broker holds each as a worker. Every stats reply
    stays under S_REPLY_BOUND_BYTES, its pages add up to every worker, and
    its summary by name counts them all under their one name.
    The program prints the reply's size and round trip before it asserts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zmq.h>

#include "fleet.h"
#include "harness.h"

#define S_WORKERS           OQ_MAX_WORKERS
#define S_FLEET_MS          60000
#define S_REPLY_BOUND_BYTES (64 * 1024) /* every stats reply of such workers */
#define S_STATS_WAIT_MS     30000

/* What an onceq-worker of the built-in handlers registers with. */
static const char *const s_types[] = {"noop",  "sleep",        "fail",
                                      "crash", "grant_points", "request_shipment"};
static const char *const s_queues[] = {"default"};
#define S_COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int s_setup(void **state)
{
    it_t *it = it_new("stats-many-workers");
    if (!it)
        return -1;
    it_insecure(it); /* the fleet speaks plaintext ZMTP */
    *state = it;
    return 0;
}

/* One stats request (limit 0: the broker's default page) and its reply,
   read undecoded: its size and round trip. *msg holds it (close it). */
static int s_raw_stats(it_t *it, uint64_t after, uint32_t limit, zmq_msg_t *msg, int64_t *ms)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(it);
    if (limit)
        oq_proto_encode_stats(&buf, req, after, limit);
    else
        oq_proto_encode_simple(&buf, OQ_CMD_STATS, req);
    int64_t start = it_now_ms();
    int rc = zmq_send(it->client, buf.data, buf.size, 0) < 0 ? -1 : 0;
    msgpack_sbuffer_destroy(&buf);
    zmq_msg_init(msg);
    if (rc == 0 && zmq_msg_recv(msg, it->client, 0) < 0)
        rc = -1;
    *ms = it_now_ms() - start;
    return rc;
}

static void test_stats_with_the_most_workers(void **state)
{
    it_t *it = *state;
    it_fleet_broker(it);
    msgpack_sbuffer ready;
    msgpack_sbuffer_init(&ready);
    oq_proto_encode_ready_routed(&ready, 0, "worker-host-01", 4242, s_types, S_COUNT(s_types),
                                 s_queues, S_COUNT(s_queues));
    int64_t start = it_now_ms();
    it_fleet_t *fleet = it_fleet_new(it->back, S_WORKERS, ready.data, ready.size, S_FLEET_MS);
    msgpack_sbuffer_destroy(&ready);
    assert_non_null(fleet);
    printf("%d workers registered in %lld ms\n", S_WORKERS, (long long)(it_now_ms() - start));

    int wait_ms = S_STATS_WAIT_MS;
    zmq_setsockopt(it->client, ZMQ_RCVTIMEO, &wait_ms, sizeof wait_ms);
    zmq_msg_t msg;
    int64_t ms;
    assert_int_equal(s_raw_stats(it, 0, 0, &msg, &ms), 0);
    size_t bytes = zmq_msg_size(&msg);
    zmq_msg_close(&msg);
    printf("stats: %zu bytes, %lld ms\n", bytes, (long long)ms);
    assert_true(bytes < S_REPLY_BOUND_BYTES);

    /* The pages, each under the bound, add up to every worker. */
    size_t listed = 0, pages = 0, largest = 0;
    uint64_t after = 0;
    for (;;) {
        assert_int_equal(s_raw_stats(it, after, OQ_MAX_STATS_WORKERS, &msg, &ms), 0);
        if (zmq_msg_size(&msg) > largest)
            largest = zmq_msg_size(&msg);
        oq_msg_t reply;
        oq_err_t code;
        char reason[256];
        assert_int_equal(oq_proto_decode(&reply, zmq_msg_data(&msg), zmq_msg_size(&msg), &code,
                                         reason, sizeof reason),
                         0);
        zmq_msg_close(&msg);
        bool more = it_stats_page(&reply, &listed, &pages, &after, S_WORKERS);
        oq_proto_msg_release(&reply);
        if (!more)
            break;
    }
    printf("%zu workers listed in %zu pages, the largest %zu bytes\n", listed, pages, largest);
    assert_int_equal(listed, S_WORKERS);
    assert_true(largest < OQ_MAX_FRAME_BYTES / 2);

    /* One name, counted once, however many workers gave it. */
    oq_msg_t reply;
    assert_int_equal(it_stats_reply(it, &reply, S_STATS_WAIT_MS), 0);
    const msgpack_object *names = oq_proto_map_get(&reply.root, "worker_names");
    assert_non_null(names);
    assert_int_equal(names->via.array.size, 1);
    const msgpack_object *workers = oq_proto_map_get(&names->via.array.ptr[0], "workers");
    assert_non_null(workers);
    assert_int_equal(workers->via.u64, S_WORKERS);
    oq_proto_msg_release(&reply);

    char *out = it_cli(it, "stats", 0, "stats", NULL);
    assert_non_null(strstr(out, "worker-host-01"));
    it_expect_output(out, "workers: 10000 connected, 100 listed");
    out = it_cli(it, "stats-none", 0, "stats", "--workers", "0", NULL);
    it_expect_output(out, "workers: 10000 connected, 0 listed");
    it_fleet_destroy(&fleet);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stats_with_the_most_workers, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
