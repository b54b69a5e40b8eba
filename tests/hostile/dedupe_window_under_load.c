/*  dedupe_window_under_load: the dispatch-id table is bounded by
    --max-bytes, and when that bound makes it forget ids before their
    window ends, the shrunken window is reported, never silent.

    One job holds a unique key; many dispatches name that key, each with its
    own dispatch_id, so that every one is answered with the holder and only
    its id is remembered: ids pile up with no job behind them, as under a
    load of resent dispatches. Then the oldest and the newest ids are sent
    again without the key. The newest are always recognised. Each oldest
    that queues a new job must have been reported: stats
    (journal.dedupe_evicted, journal.dedupe_window_held_ms below
    --dedupe-window), the metric onceq_dedupe_window_held_seconds, and one
    warning in the log. The broker's RSS grows by no more than the limit
    plus S_RSS_CONSTANT_KIB. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>
#include <zmq.h>

#include <cmocka.h>

#include "harness.h"
#include "scrape.h"
#include "onceq/limits.h"

#define S_MAX_BYTES     (4 * 1024 * 1024)
#define S_MAX_BYTES_ARG "4194304"
#define S_WINDOW_S      3600
#define S_WINDOW_ARG    "3600"
/* What the limit does not count, beyond what the broker held at start:
   libzmq's buffers of the pipelined dispatches, and the allocator keeping
   a smaller table the dispatch-id table outgrew. */
#define S_RSS_CONSTANT_KIB (4 * 1024)
#define S_IDS              200000 /* dispatch ids sent: several times what the limit holds */
#define S_RESENT           200    /* oldest and newest ids sent again */
#define S_PIPELINE         256
#define S_FLOOD_MS         60000
#define S_HTTP_TIMEOUT_S   10
#define S_KEY              "held-by-one-job"
#ifdef ONCEQ_SANITIZED
#define S_RSS_BOUNDED false
#else
#define S_RSS_BOUNDED true
#endif

static int s_setup(void **state)
{
    *state = it_new("dedupe_window");
    return *state ? 0 : -1;
}

static void s_send(it_t *it, uint64_t n, bool with_key)
{
    char did[40];
    snprintf(did, sizeof did, "resend-%llu", (unsigned long long)n);
    msgpack_sbuffer payload, buf;
    msgpack_sbuffer_init(&payload);
    msgpack_sbuffer_init(&buf);
    it_payload_uint(&payload, "n", n);
    oq_job_msg_t job = {.type = oq_str("noop"),
                        .payload = (const uint8_t *)payload.data,
                        .payload_len = payload.size,
                        .dispatch_id = oq_str(did)};
    if (with_key)
        job.unique_key = oq_str(S_KEY);
    oq_proto_encode_dispatch(&buf, it_req(it), &job);
    assert_true(zmq_send(it->client, buf.data, buf.size, 0) >= 0);
    msgpack_sbuffer_destroy(&payload);
    msgpack_sbuffer_destroy(&buf);
}

/* The job id of one "dispatched" reply; anything else fails. */
static uint64_t s_reply(it_t *it)
{
    oq_msg_t msg;
    assert_int_equal(it_recv(it->client, &msg, IT_WAIT_MS), 0);
    if (msg.cmd != OQ_CMD_DISPATCHED)
        fail_msg("not dispatched: %.*s", (int)msg.err_text.len, msg.err_text.ptr);
    uint64_t id = msg.id;
    oq_proto_msg_release(&msg);
    return id;
}

/* Send ids from..to-1 pipelined; returns how many answers were not holder. */
static uint64_t s_flood(it_t *it, uint64_t from, uint64_t to, bool with_key, uint64_t holder)
{
    uint64_t sent = from, answered = from, other = 0;
    int64_t end = it_now_ms() + S_FLOOD_MS;
    while (answered < to) {
        while (sent < to && sent - answered < S_PIPELINE)
            s_send(it, sent++, with_key);
        if (s_reply(it) != holder)
            other++;
        answered++;
        assert_true(it_now_ms() < end);
    }
    return other;
}

/* The value of a metric without labels, scraped from the broker. */
static double s_metric(it_t *it, const char *name)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metrics", it_metrics_port(it));
    long status = 0;
    const char *error = NULL;
    char *text = oq_scrape_get(url, S_HTTP_TIMEOUT_S, &status, &error);
    if (!text)
        fail_msg("GET %s: %s", url, error);
    double value = oq_scrape_value(text, name);
    free(text);
    if (value < 0)
        fail_msg("the metrics have no %s", name);
    return value;
}

static void test_a_shrunken_dedupe_window_is_reported(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--max-bytes", S_MAX_BYTES_ARG, "--dedupe-window",
                           S_WINDOW_ARG,  "--fsync",       "off",
                           "--metrics",   "127.0.0.1:0",   NULL};
    assert_true(it_start_broker(it, flags) > 0);
    s_send(it, S_IDS, true); /* the holder of the key, with an id of its own */
    uint64_t holder = s_reply(it);
    long rss_start = it_rss_kib(it->broker);

    assert_int_equal(s_flood(it, 0, S_IDS, true, holder), 0);
    long rss = it_rss_kib(it->broker);
    print_message("%d ids sent: RSS %ld KiB, %ld KiB more than at start (limit %d KiB + %d KiB)\n",
                  S_IDS, rss, rss - rss_start, S_MAX_BYTES / 1024, S_RSS_CONSTANT_KIB);
    if (S_RSS_BOUNDED)
        assert_true(rss - rss_start <= S_MAX_BYTES / 1024 + S_RSS_CONSTANT_KIB);

    /* The newest ids are held whatever the bound. */
    assert_int_equal(s_flood(it, S_IDS - S_RESENT, S_IDS, false, holder), 0);
    /* The oldest: each one not recognised queued a job, and must be told. */
    uint64_t requeued = s_flood(it, 0, S_RESENT, false, holder);
    uint64_t evicted = it_stat(it, "journal", "dedupe_evicted");
    uint64_t held_ms = it_stat(it, "journal", "dedupe_window_held_ms");
    double held_s = s_metric(it, "onceq_dedupe_window_held_seconds");
    size_t warned = it_log_count(it, "broker", "dispatch ids: ");
    print_message("%llu of the %d oldest ids queued again; %llu evicted, window held %llu ms "
                  "(metric %.3f s) of %d s, %zu warning(s)\n",
                  (unsigned long long)requeued, S_RESENT, (unsigned long long)evicted,
                  (unsigned long long)held_ms, held_s, S_WINDOW_S, warned);
    if (requeued == 0) {
        assert_int_equal(held_ms, (uint64_t)S_WINDOW_S * 1000);
        return;
    }
    assert_true(evicted >= requeued);
    assert_true(held_ms < (uint64_t)S_WINDOW_S * 1000);
    assert_true(held_s < S_WINDOW_S);
    /* Said, and only once per interval, however many ids were forgotten. */
    assert_true(warned >= 1);
    assert_true(warned <= 1 + (size_t)(IT_WAIT_MS / OQ_MEMORY_LOG_INTERVAL_MS));
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_shrunken_dedupe_window_is_reported, s_setup,
                                        it_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
