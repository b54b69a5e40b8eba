/*  test_routing: who gets which job, and which acks count, with the real
    binaries. Routing by job type (a rolling deploy: jobs of a type no
    connected worker handles wait, using no try, then run once a worker
    that handles them connects) and by queue (--queue high,default drains
    high first); fenced acks (a blind "ack ok" from a peer that never
    registered changes nothing); touch (a long job that touches its lease is
    delivered once); release (a retry after the handler's own delay); and
    return (a job handed back keeps its attempt count). Raw protocol peers
    are DEALER sockets speaking the wire protocol. */
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

#define S_HELLO_JOBS   5
#define S_BLIND_JOBS   60
#define S_BLIND_DELAY  10 /* of the blind-ack jobs, delayed by an hour */
#define S_PRIO_JOBS    6  /* per queue */
#define S_PEER_WAIT_MS 10000

static int s_setup(void **state)
{
    *state = it_new("routing");
    return *state ? 0 : -1;
}

/* ---- a raw worker peer ---------------------------------------------------- */

/* A registered peer with credit and the given lists (NULL: absent). */
static void *s_peer(it_t *it, uint32_t credit, const char *const *types, size_t type_count)
{
    void *sock = it_socket(it, ZMQ_DEALER, it->back);
    assert_non_null(sock);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready_routed(&buf, credit, "peer", 1, types, type_count, NULL, 0);
    it_send(sock, &buf);
    msgpack_sbuffer_destroy(&buf);
    oq_msg_t msg;
    assert_int_equal(it_expect(sock, OQ_CMD_WELCOME, &msg, S_PEER_WAIT_MS), 0);
    oq_proto_msg_release(&msg);
    return sock;
}

static void s_peer_ack(void *sock, const oq_job_msg_t *job, oq_outcome_t outcome)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_ack_msg_t ack = {.id = job->id,
                        .attempt = job->attempt,
                        .outcome = outcome,
                        .error = oq_str("handed back"),
                        .credit = 1,
                        .lease = job->lease,
                        .has_lease = job->has_lease};
    oq_proto_encode_ack(&buf, &ack);
    it_send(sock, &buf);
    msgpack_sbuffer_destroy(&buf);
}

/* ---- stats beyond queue "default" ---------------------------------------------- */

/* A number from the stats reply: broker.KEY, or types[name=TYPE].KEY. */
static uint64_t s_stat(it_t *it, const char *type, const char *key)
{
    oq_msg_t reply;
    assert_int_equal(it_stats_reply(it, &reply, IT_WAIT_MS), 0);
    const msgpack_object *map = oq_proto_map_get(&reply.root, "broker");
    if (type) {
        map = NULL;
        const msgpack_object *types = oq_proto_map_get(&reply.root, "types");
        for (uint32_t i = 0; types && i < types->via.array.size; i++) {
            const msgpack_object *name = oq_proto_map_get(&types->via.array.ptr[i], "name");
            if (name && name->via.str.size == strlen(type) &&
                memcmp(name->via.str.ptr, type, strlen(type)) == 0)
                map = &types->via.array.ptr[i];
        }
    }
    const msgpack_object *o = oq_proto_map_get(map, key);
    uint64_t value = o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
    oq_proto_msg_release(&reply);
    return value;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_blind_acks_change_nothing(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    uint64_t ids[S_BLIND_JOBS];
    oq_job_msg_t later = {.delay_ms = 3600 * 1000, .has_delay = true};
    for (int i = 0; i < S_BLIND_JOBS; i++)
        ids[i] = it_dispatch(it, "noop", NULL, i < S_BLIND_JOBS - S_BLIND_DELAY ? NULL : &later);

    /* A peer that never registered acks every id, with and without a guess. */
    void *rogue = it_socket(it, ZMQ_DEALER, it->back);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    for (int i = 0; i < S_BLIND_JOBS; i++) {
        for (int guess = 0; guess < 2; guess++) {
            oq_ack_msg_t ack = {.id = ids[i],
                                .attempt = 1,
                                .outcome = OQ_OUTCOME_OK,
                                .result = OQ_RESULT_APPLIED,
                                .lease = (uint64_t)ids[i] * 2654435761u,
                                .has_lease = guess == 1};
            oq_proto_encode_ack(&buf, &ack);
            it_send(rogue, &buf);
        }
    }
    msgpack_sbuffer_destroy(&buf);
    int64_t end = it_now_ms() + IT_WAIT_MS;
    while (s_stat(it, NULL, "fenced_acks") < 2 * S_BLIND_JOBS)
        assert_true(it_now_ms() < end);
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.done, 0);
    assert_int_equal(s.ready, S_BLIND_JOBS - S_BLIND_DELAY);
    assert_int_equal(s.delayed, S_BLIND_DELAY);
    assert_int_equal(s_stat(it, "noop", "applied"), 0);

    /* A real worker runs each ready one once. */
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    uint64_t ready = S_BLIND_JOBS - S_BLIND_DELAY;
    assert_true(it_wait_stats(it, it_done_at_least, &ready, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.done, ready);
    assert_int_equal(s.redelivered, 0);
    /* The worker may write its lines after the broker counted the acks. */
    assert_int_equal(it_wait_log(it, "worker", "outcome=ok", ready, IT_WAIT_MS), 0);
    assert_int_equal(it_log_count(it, "worker", "outcome=ok"), ready);
}

static void test_rolling_deploy_waits_then_runs_once(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    assert_true(it_start_worker_counted(it, "worker", NULL, 1) > 0);
    for (int i = 0; i < S_HELLO_JOBS; i++)
        assert_true(it_dispatch(it, "hello", NULL, NULL) > 0);
    uint64_t noop = it_dispatch(it, "noop", NULL, NULL);
    assert_true(noop > 0);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_at_least, &one, IT_WAIT_MS, &s) >= 0);
    /* The built-in worker never got them: waiting, not failed, no try used. */
    assert_int_equal(s_stat(it, "hello", "unhandled"), S_HELLO_JOBS);
    assert_int_equal(s.ready, S_HELLO_JOBS);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.retried, 0);
    assert_int_equal(it_log_count(it, "worker", "type=hello"), 0);

    /* onceq stats says so. */
    const char *argv[] = {it_bin("onceq"), "stats", "--broker", it->front, NULL};
    pid_t cli = it_spawn(it, "cli", argv);
    assert_true(it_wait_exit(cli, IT_WAIT_MS) == 0);
    char line[96];
    snprintf(line, sizeof line, "no worker handles type hello (%d waiting)", S_HELLO_JOBS);
    assert_int_equal(it_log_count(it, "cli", line), 1);

    /* A worker that handles hello arrives: each runs once, on its first try. */
    const char *types[] = {"hello"};
    void *peer = s_peer(it, 1, types, 1);
    for (int i = 0; i < S_HELLO_JOBS; i++) {
        oq_msg_t msg;
        assert_int_equal(it_expect(peer, OQ_CMD_JOB, &msg, S_PEER_WAIT_MS), 0);
        assert_true(oq_str_eq(msg.job.type, "hello"));
        assert_int_equal(msg.job.attempt, 1);
        assert_true(msg.job.has_lease);
        s_peer_ack(peer, &msg.job, OQ_OUTCOME_OK);
        oq_proto_msg_release(&msg);
    }
    uint64_t all = 1 + S_HELLO_JOBS;
    assert_true(it_wait_stats(it, it_done_at_least, &all, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.done, all);
    assert_int_equal(s.redelivered, 0);
    assert_int_equal(s_stat(it, "hello", "unhandled"), 0);
    assert_int_equal(s_stat(it, NULL, "fenced_acks"), 0);
}

/* The queue of each job id, by the order the worker ran them. */
static void test_queue_priority_drains_high_first(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    uint64_t high[S_PRIO_JOBS], dflt[S_PRIO_JOBS];
    oq_job_msg_t to_high = {.queue = oq_str("high")};
    for (int i = 0; i < S_PRIO_JOBS; i++) {
        dflt[i] = it_dispatch(it, "noop", NULL, NULL);
        high[i] = it_dispatch(it, "noop", NULL, &to_high);
        assert_true(dflt[i] > 0 && high[i] > 0);
    }
    const char *flags[] = {"--queue", "high,default", NULL};
    assert_true(it_start_worker(it, "worker", flags) > 0);
    assert_int_equal(it_wait_log(it, "worker", "outcome=ok", 2 * S_PRIO_JOBS, IT_WAIT_MS), 0);

    char *log = it_read_log(it, "worker");
    assert_non_null(log);
    size_t pos_high_last = 0, pos_dflt_first = SIZE_MAX;
    for (int i = 0; i < S_PRIO_JOBS; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "job %llu type=noop", (unsigned long long)high[i]);
        const char *at = strstr(log, needle);
        assert_non_null(at);
        if ((size_t)(at - log) > pos_high_last)
            pos_high_last = (size_t)(at - log);
        snprintf(needle, sizeof needle, "job %llu type=noop", (unsigned long long)dflt[i]);
        at = strstr(log, needle);
        assert_non_null(at);
        if ((size_t)(at - log) < pos_dflt_first)
            pos_dflt_first = (size_t)(at - log);
    }
    free(log);
    assert_true(pos_high_last < pos_dflt_first);
}

static void test_touch_keeps_a_long_job_from_redelivery(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--retry-after", "8", "--timeout", "2", "--timeout-margin", "5", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    assert_true(it_start_worker(it, "worker1", NULL) > 0);
    assert_true(it_start_worker_counted(it, "worker2", NULL, 2) > 0);
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    oq_proto_pack_cstr(&pk, "ms");
    msgpack_pack_uint32(&pk, 12000);
    oq_proto_pack_cstr(&pk, "touch_ms");
    msgpack_pack_uint32(&pk, 1000);
    assert_true(it_dispatch(it, "sleep", &payload, NULL) > 0);
    msgpack_sbuffer_destroy(&payload);

    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_at_least, &one, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.redelivered, 0);
    assert_int_equal(s.retried, 0);
    assert_int_equal(s.failed, 0);
    assert_int_equal(it_log_count(it, "worker1", "type=sleep attempt=1 outcome=ok") +
                         it_log_count(it, "worker2", "type=sleep attempt=1 outcome=ok"),
                     1);
    assert_int_equal(s_stat(it, NULL, "stale_touches"), 0);
}

/* Milliseconds into the day of the first log line containing needle. */
static int64_t s_log_ms(it_t *it, const char *log, const char *needle)
{
    char *text = it_read_log(it, log);
    assert_non_null(text);
    const char *at = strstr(text, needle);
    assert_non_null(at);
    while (at > text && at[-1] != '\n')
        at--;
    int h, m;
    double sec;
    /* 2026-12-02T18:29:10.146Z */
    assert_int_equal(sscanf(at + 11, "%d:%d:%lfZ", &h, &m, &sec), 3);
    free(text);
    return ((int64_t)h * 3600 + m * 60) * 1000 + (int64_t)(sec * 1000 + 0.5);
}

static void test_release_comes_back_after_its_delay(void **state)
{
    enum { RELEASE_MS = 2000, SLACK_MS = 10000, CLOCK_GRAIN_MS = 2 };
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    it_payload_uint(&payload, "release_ms", RELEASE_MS);
    oq_job_msg_t options = {.max_tries = 2, .has_max_tries = true};
    uint64_t id = it_dispatch(it, "fail", &payload, &options);
    msgpack_sbuffer_destroy(&payload);
    assert_true(id > 0);
    char first[64], second[64];
    snprintf(first, sizeof first, "job %llu type=fail attempt=1", (unsigned long long)id);
    snprintf(second, sizeof second, "job %llu type=fail attempt=2", (unsigned long long)id);
    assert_int_equal(it_wait_log(it, "worker", second, 1, IT_WAIT_MS), 0);
    /* The first run's line is written before its ack leaves, the second's
       after it ran again: their distance is at least the delay, less what
       whole milliseconds lose: the broker's clock reads whole milliseconds
       (a delay can end up to 1 ms early) and each log line is rounded to one. */
    int64_t gap = s_log_ms(it, "worker", second) - s_log_ms(it, "worker", first);
    if (gap < RELEASE_MS - CLOCK_GRAIN_MS || gap > RELEASE_MS + SLACK_MS)
        fail_msg("the release came back after %lld ms, asked %d", (long long)gap, RELEASE_MS);
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.retried, 2); /* a release uses a try: the second was the last */
    assert_int_equal(s.failed, 1);
}

static void test_returned_job_keeps_its_attempt(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    /* A peer that names no types (an older worker) gets the job first. */
    void *peer = s_peer(it, 1, NULL, 0);
    uint64_t id = it_dispatch(it, "noop", NULL, NULL);
    oq_msg_t msg;
    assert_int_equal(it_expect(peer, OQ_CMD_JOB, &msg, S_PEER_WAIT_MS), 0);
    assert_int_equal(msg.job.id, id);
    assert_int_equal(msg.job.attempt, 1);
    s_peer_ack(peer, &msg.job, OQ_OUTCOME_RETURN);
    oq_proto_msg_release(&msg);

    /* It is not sent back to the peer; a worker runs it on attempt 1. */
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_at_least, &one, IT_WAIT_MS, &s) >= 0);
    char line[64];
    snprintf(line, sizeof line, "job %llu type=noop attempt=1 outcome=ok", (unsigned long long)id);
    /* The worker may write its line after the broker counted the ack. */
    assert_int_equal(it_wait_log(it, "worker", line, 1, IT_WAIT_MS), 0);
    assert_int_equal(it_log_count(it, "worker", line), 1);
    assert_int_equal(s.retried, 0);
    assert_int_equal(s.redelivered, 0);
    assert_int_equal(it_expect(peer, OQ_CMD_JOB, &msg, 200), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_blind_acks_change_nothing, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_rolling_deploy_waits_then_runs_once, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_queue_priority_drains_high_first, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_touch_keeps_a_long_job_from_redelivery, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_release_comes_back_after_its_delay, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_returned_job_keeps_its_attempt, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
