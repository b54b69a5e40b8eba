/*  stats_amplification: workers that registered with the largest lists the
    protocol allows (256 types, 32 queues, names of 64 bytes) cannot make
    "stats" large or slow. 2,000 such registrations over the wire; then
    every stats reply stays under S_REPLY_BOUND_BYTES, the pages of
    workers add up to all of them, `onceq stats` prints, and a noop cycle
    beside S_LOOPERS producers that loop on stats still completes its
    jobs.

    The program measures before it asserts, and prints what it measured:
    the reply's size and round trip with the fat registrations, and the
    cycle's rate without and with the stats loops beside it. Only generous
    bounds are asserted (the cycle ends within its deadline), so a loaded
    machine does not fail it. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zmq.h>

#include "fleet.h"
#include "harness.h"

#define S_FAT_WORKERS       2000
#define S_FAT_TYPES         OQ_MAX_WORKER_TYPES
#define S_FAT_QUEUES        OQ_MAX_WORKER_QUEUES
#define S_FLEET_MS          60000
#define S_REPLY_BOUND_BYTES (256 * 1024) /* every stats reply, far below the 1 MiB frame */
#define S_STATS_WAIT_MS     30000        /* one stats round trip, however slow */
#define S_CYCLE_JOBS        1000         /* jobs of each noop cycle */
#define S_CYCLE_DEADLINE_MS 30000        /* for the cycle beside the stats loop */
#define S_JOB_WAIT_MS       10000
#define S_LOOPERS           4 /* producers looping on stats beside the cycle */

static int s_setup(void **state)
{
    it_t *it = it_new("stats-amplification");
    if (!it)
        return -1;
    it_insecure(it); /* the fleet speaks plaintext ZMTP */
    *state = it;
    return 0;
}

/* A name of exactly OQ_MAX_NAME_LEN bytes: prefix, number, then 'x'. */
static void s_long_name(char *out, const char *prefix, int n)
{
    int len = snprintf(out, OQ_MAX_NAME_LEN + 1, "%s-%04d-", prefix, n);
    memset(out + len, 'x', (size_t)(OQ_MAX_NAME_LEN - len));
    out[OQ_MAX_NAME_LEN] = 0;
}

/* ---- one stats round trip, raw ----------------------------------------------- */

typedef struct {
    size_t bytes; /* the reply's size */
    int64_t ms;   /* request to reply */
} s_call_t;

/* Send a stats request on sock and read the reply undecoded (a reply over
   the frame limit is still measured). 0, or -1 if none came. */
static int s_raw_stats(void *sock, uint64_t req, s_call_t *call)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_simple(&buf, OQ_CMD_STATS, (int64_t)req);
    int64_t start = it_now_ms();
    int rc = zmq_send(sock, buf.data, buf.size, 0) < 0 ? -1 : 0;
    msgpack_sbuffer_destroy(&buf);
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (rc == 0 && zmq_msg_recv(&msg, sock, 0) < 0)
        rc = -1;
    call->bytes = zmq_msg_size(&msg);
    call->ms = it_now_ms() - start;
    zmq_msg_close(&msg);
    return rc;
}

/* ---- a producer that loops on stats ------------------------------------------ */

typedef struct {
    const char *front;
    atomic_bool stop;
    size_t calls, max_bytes, failures;
    int64_t total_ms;
} s_looper_t;

static void *s_loop_stats(void *arg)
{
    s_looper_t *l = arg;
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0, wait_ms = S_STATS_WAIT_MS;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_RCVTIMEO, &wait_ms, sizeof wait_ms);
    zmq_connect(sock, l->front);
    for (uint64_t req = 1; !atomic_load(&l->stop); req++) {
        s_call_t call;
        if (s_raw_stats(sock, req, &call) < 0) {
            l->failures++;
            break;
        }
        l->calls++;
        l->total_ms += call.ms;
        if (call.bytes > l->max_bytes)
            l->max_bytes = call.bytes;
    }
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return NULL;
}

/* ---- the noop cycle ---------------------------------------------------------- */

/* Dispatch a noop job, take it on the raw worker and ack it, count times,
   or until deadline_ms. Returns the jobs completed. */
static size_t s_cycle(it_t *it, void *worker, size_t count, int64_t deadline_ms)
{
    size_t done = 0;
    while (done < count && it_now_ms() < deadline_ms) {
        assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
        oq_msg_t job;
        assert_int_equal(it_expect(worker, OQ_CMD_JOB, &job, S_JOB_WAIT_MS), 0);
        oq_ack_msg_t ack = {.id = job.job.id,
                            .attempt = job.job.attempt,
                            .outcome = OQ_OUTCOME_OK,
                            .result = OQ_RESULT_APPLIED,
                            .credit = 1,
                            .lease = job.job.lease,
                            .has_lease = job.job.has_lease};
        it_send_ack(worker, &ack);
        oq_proto_msg_release(&job);
        done++;
    }
    return done;
}

/* ---- the test ------------------------------------------------------------------ */

static void test_fat_registrations_keep_stats_small(void **state)
{
    it_t *it = *state;
    it_fleet_broker(it);

    static char type_names[S_FAT_TYPES][OQ_MAX_NAME_LEN + 1];
    static char queue_names[S_FAT_QUEUES][OQ_MAX_NAME_LEN + 1];
    const char *types[S_FAT_TYPES], *queues[S_FAT_QUEUES];
    for (int i = 0; i < S_FAT_TYPES; i++)
        s_long_name(type_names[i], "type", i), types[i] = type_names[i];
    for (int i = 0; i < S_FAT_QUEUES; i++)
        s_long_name(queue_names[i], "queue", i), queues[i] = queue_names[i];
    char name[OQ_MAX_NAME_LEN + 1];
    s_long_name(name, "fat", 0);
    msgpack_sbuffer ready;
    msgpack_sbuffer_init(&ready);
    oq_proto_encode_ready_routed(&ready, 0, name, 1, types, S_FAT_TYPES, queues, S_FAT_QUEUES);
    int64_t start = it_now_ms();
    it_fleet_t *fleet = it_fleet_new(it->back, S_FAT_WORKERS, ready.data, ready.size, S_FLEET_MS);
    assert_non_null(fleet);
    printf("%d fat workers (%zu-byte ready each) registered in %lld ms\n", S_FAT_WORKERS,
           ready.size, (long long)(it_now_ms() - start));
    msgpack_sbuffer_destroy(&ready);

    /* Measure first: one stats call, the cycle alone, the cycle beside a
       stats loop. */
    void *admin = it->client;
    int wait_ms = S_STATS_WAIT_MS;
    zmq_setsockopt(admin, ZMQ_RCVTIMEO, &wait_ms, sizeof wait_ms);
    s_call_t one;
    assert_int_equal(s_raw_stats(admin, 999999, &one), 0);
    printf("stats: %zu bytes, %lld ms\n", one.bytes, (long long)one.ms);

    void *worker = it_socket(it, ZMQ_DEALER, it->back);
    const char *noop[] = {"noop"};
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready_routed(&buf, 1, "cycle", 2, noop, 1, NULL, 0);
    it_send(worker, &buf);
    msgpack_sbuffer_destroy(&buf);
    oq_msg_t welcome;
    assert_int_equal(it_expect(worker, OQ_CMD_WELCOME, &welcome, S_JOB_WAIT_MS), 0);
    oq_proto_msg_release(&welcome);

    start = it_now_ms();
    size_t alone = s_cycle(it, worker, S_CYCLE_JOBS, start + S_CYCLE_DEADLINE_MS);
    int64_t alone_ms = it_now_ms() - start;
    s_looper_t loopers[S_LOOPERS];
    pthread_t threads[S_LOOPERS];
    for (int i = 0; i < S_LOOPERS; i++) {
        loopers[i] = (s_looper_t){.front = it->front};
        assert_int_equal(pthread_create(&threads[i], NULL, s_loop_stats, &loopers[i]), 0);
    }
    start = it_now_ms();
    size_t beside = s_cycle(it, worker, S_CYCLE_JOBS, start + S_CYCLE_DEADLINE_MS);
    int64_t beside_ms = it_now_ms() - start;
    s_looper_t looper = {0};
    for (int i = 0; i < S_LOOPERS; i++) {
        atomic_store(&loopers[i].stop, true);
        pthread_join(threads[i], NULL);
        looper.calls += loopers[i].calls;
        looper.total_ms += loopers[i].total_ms;
        looper.failures += loopers[i].failures;
        if (loopers[i].max_bytes > looper.max_bytes)
            looper.max_bytes = loopers[i].max_bytes;
    }
    printf("noop cycle alone: %zu jobs in %lld ms (%.0f jobs/s)\n", alone, (long long)alone_ms,
           alone * 1000.0 / (double)(alone_ms ? alone_ms : 1));
    printf("noop cycle beside %d producers looping on stats: %zu jobs in %lld ms (%.0f jobs/s); "
           "the loops made %zu calls, %.2f ms each, the largest reply %zu bytes\n",
           S_LOOPERS, beside, (long long)beside_ms,
           beside * 1000.0 / (double)(beside_ms ? beside_ms : 1), looper.calls,
           looper.calls ? (double)looper.total_ms / (double)looper.calls : 0.0, looper.max_bytes);

    /* Then hold the bounds. */
    assert_true(one.bytes < S_REPLY_BOUND_BYTES);
    assert_int_equal(alone, S_CYCLE_JOBS);
    assert_int_equal(beside, S_CYCLE_JOBS);
    assert_int_equal(looper.failures, 0);
    assert_true(looper.max_bytes < S_REPLY_BOUND_BYTES);

    /* The pages, each under the bound, add up to every worker. */
    size_t listed = 0, pages = 0;
    uint64_t after = 0;
    for (;;) {
        msgpack_sbuffer req;
        msgpack_sbuffer_init(&req);
        int64_t id = it_req(it);
        oq_proto_encode_stats(&req, id, after, OQ_MAX_STATS_WORKERS);
        oq_msg_t reply;
        assert_int_equal(it_call(it, &req, id, &reply, S_STATS_WAIT_MS), 0);
        msgpack_sbuffer_destroy(&req);
        bool more = it_stats_page(&reply, &listed, &pages, &after, S_FAT_WORKERS + 1);
        oq_proto_msg_release(&reply);
        if (!more)
            break;
    }
    printf("%zu workers listed in %zu pages\n", listed, pages);
    assert_int_equal(listed, S_FAT_WORKERS + 1); /* and the cycle's worker */

    char *out = it_cli(it, "stats", 0, "stats", NULL);
    it_expect_output(out, "workers: 2001 connected");
    out = it_cli(it, "stats-more", 0, "stats", NULL);
    it_expect_output(out, "more workers: onceq stats --after ");
    it_fleet_destroy(&fleet);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fat_registrations_keep_stats_small, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
