/*  max_bytes_counts_keys: --max-bytes bounds what a broker holds for its
    jobs' keys and dispatch ids, not only the jobs themselves.

    A broker with a small limit is filled until it answers "full", in five
    shapes: plain jobs; jobs with a 128-byte unique_key; with a 128-byte
    overlap_key; with both and a dispatch_id; and rounds of jobs with a
    unique window and a dispatch_id that a worker completes, so that only
    windows and ids stay behind. In each the broker's RSS stays within the
    limit plus S_RSS_CONSTANT_KIB, what is held is within the limit
    (broker.held_bytes), every refusal is "full", and after the rounds a
    dispatch is still taken: what done jobs left behind yields to new work. */
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

#define S_MAX_BYTES     (16 * 1024 * 1024)
#define S_MAX_BYTES_ARG "16777216"
/* What the limit does not count: the binary and its libraries, libzmq's
   and the journal's buffers (an idle broker holds about 2 MiB), the fixed
   tables (the ring of OQ_RECENT_DONE_JOBS done jobs and its index, about
   6 MiB once full), and the allocator's free lists. Measured: at most
   about 13.5 MiB over the limit in any shape, over six rounds. */
#define S_RSS_CONSTANT_KIB (16 * 1024)
#define S_PIPELINE         256    /* dispatches in flight */
#define S_MAX_SENT         400000 /* the limit answers "full" long before */
#define S_FILL_MS          60000  /* a fill ends by then, whatever the load */
#define S_ROUNDS           3      /* fill, drain, and again */
#define S_KEY_LEN          OQ_MAX_JOB_KEY_LEN
#define S_WINDOW_MS        (3600LL * 1000)
/* Under AddressSanitizer the RSS holds redzones and a quarantine, not the
   broker's own memory: the bound is checked in the plain build only. */
#ifdef ONCEQ_SANITIZED
#define S_RSS_BOUNDED false
#else
#define S_RSS_BOUNDED true
#endif

enum { S_UNIQUE = 1, S_OVERLAP = 2, S_DISPATCH_ID = 4, S_WINDOW = 8 };

static int s_setup(void **state)
{
    *state = it_new("max_bytes_keys");
    return *state ? 0 : -1;
}

/* A key of exactly S_KEY_LEN characters naming what and n. */
static void s_key(char out[S_KEY_LEN + 1], const char *what, int round, uint64_t n)
{
    int len = snprintf(out, S_KEY_LEN + 1, "%s-%d-%llu-", what, round, (unsigned long long)n);
    memset(out + len, 'x', S_KEY_LEN - (size_t)len);
    out[S_KEY_LEN] = 0;
}

static void s_send(it_t *it, int shape, int round, uint64_t n)
{
    char unique[S_KEY_LEN + 1], overlap[S_KEY_LEN + 1], did[40];
    s_key(unique, "u", round, n);
    s_key(overlap, "o", round, n);
    snprintf(did, sizeof did, "d-%d-%llu", round, (unsigned long long)n);
    msgpack_sbuffer payload, buf;
    msgpack_sbuffer_init(&payload);
    msgpack_sbuffer_init(&buf);
    it_payload_uint(&payload, "n", n);
    oq_job_msg_t job = {.type = oq_str("noop"),
                        .payload = (const uint8_t *)payload.data,
                        .payload_len = payload.size};
    if (shape & S_UNIQUE)
        job.unique_key = oq_str(unique);
    if (shape & S_WINDOW)
        job.unique_for_ms = S_WINDOW_MS;
    if (shape & S_OVERLAP)
        job.overlap_key = oq_str(overlap);
    if (shape & S_DISPATCH_ID)
        job.dispatch_id = oq_str(did);
    oq_proto_encode_dispatch(&buf, it_req(it), &job);
    assert_true(zmq_send(it->client, buf.data, buf.size, 0) >= 0);
    msgpack_sbuffer_destroy(&payload);
    msgpack_sbuffer_destroy(&buf);
}

/* One reply: true if "dispatched", false if "full"; anything else fails. */
static bool s_reply(it_t *it)
{
    oq_msg_t msg;
    assert_int_equal(it_recv(it->client, &msg, IT_WAIT_MS), 0);
    bool ok = msg.cmd == OQ_CMD_DISPATCHED;
    if (!ok) {
        assert_int_equal(msg.cmd, OQ_CMD_ERROR);
        if (msg.err_code != OQ_ERR_FULL)
            fail_msg("not full: %.*s", (int)msg.err_text.len, msg.err_text.ptr);
        assert_non_null(memmem(msg.err_text.ptr, msg.err_text.len, "--max-bytes", 11));
    }
    oq_proto_msg_release(&msg);
    return ok;
}

/* Dispatch in shape until the broker answers "full"; returns how many it
   took. */
static uint64_t s_fill(it_t *it, int shape, int round)
{
    uint64_t sent = 0, answered = 0, accepted = 0;
    bool full = false;
    int64_t end = it_now_ms() + S_FILL_MS;
    while (!full || answered < sent) {
        while (!full && sent - answered < S_PIPELINE && sent < S_MAX_SENT)
            s_send(it, shape, round, sent++);
        if (s_reply(it))
            accepted++;
        else
            full = true;
        answered++;
        assert_true(it_now_ms() < end);
    }
    assert_true(full);
    return accepted;
}

static void s_check_bounded(it_t *it, const char *shape, uint64_t accepted)
{
    long rss = it_rss_kib(it->broker);
    print_message("%s: %llu jobs taken, RSS %ld KiB (limit %d KiB + %d KiB)\n", shape,
                  (unsigned long long)accepted, rss, S_MAX_BYTES / 1024, S_RSS_CONSTANT_KIB);
    if (S_RSS_BOUNDED)
        assert_true(rss <= S_MAX_BYTES / 1024 + S_RSS_CONSTANT_KIB);
    assert_true(it_broker_stat(it, "held_bytes") <= S_MAX_BYTES);
}

static void s_fresh_broker(it_t *it)
{
    if (it->broker > 0) {
        it_signal(it->broker, SIGTERM);
        assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);
    }
    it_fresh_data_dir(it);
    const char *flags[] = {"--max-bytes", S_MAX_BYTES_ARG, "--fsync", "off", NULL};
    assert_true(it_start_broker(it, flags) > 0);
}

static void test_queued_jobs_with_keys_stay_within_the_limit(void **state)
{
    it_t *it = *state;
    static const struct {
        const char *name;
        int shape;
    } shapes[] = {
        {"plain jobs", 0},
        {"unique_key", S_UNIQUE},
        {"overlap_key", S_OVERLAP},
        {"both and a dispatch_id", S_UNIQUE | S_OVERLAP | S_DISPATCH_ID},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        s_fresh_broker(it);
        uint64_t accepted = s_fill(it, shapes[i].shape, 0);
        assert_true(accepted > 0);
        s_check_bounded(it, shapes[i].name, accepted);
    }
}

static void test_what_done_jobs_leave_behind_stays_within_the_limit(void **state)
{
    it_t *it = *state;
    s_fresh_broker(it);
    assert_true(it_start_worker_counted(it, "worker", NULL, 1) > 0);
    uint64_t done = 0;
    for (int round = 0; round < S_ROUNDS; round++) {
        /* The worker drains while the fill goes on: full comes when what
           the done jobs left behind and the queued jobs reach the limit. */
        done += s_fill(it, S_UNIQUE | S_WINDOW | S_DISPATCH_ID, round);
        it_stats_t s;
        assert_true(it_wait_stats(it, it_done_at_least, &done, IT_WAIT_MS, &s) >= 0);
        char name[64];
        snprintf(name, sizeof name, "after every job was done, round %d", round + 1);
        s_check_bounded(it, name, done);
    }
    /* What the done jobs left yields: the next dispatch is taken. */
    s_send(it, S_UNIQUE | S_WINDOW | S_DISPATCH_ID, S_ROUNDS, 0);
    assert_true(s_reply(it));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_queued_jobs_with_keys_stay_within_the_limit, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_what_done_jobs_leave_behind_stays_within_the_limit,
                                        s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
