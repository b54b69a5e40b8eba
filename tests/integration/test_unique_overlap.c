/*  test_unique_overlap: unique dispatch and overlap keys with the real broker and
    workers.
    (i)   A unique key answers a second dispatch with the first job's id and
          says so, through `onceq dispatch` too; it holds across a broker
          SIGKILL and restart, and across compactions; a window holds the
          key after the job is done.
    (ii)  Overlap keys: the job waiting for the key is leased when the
          holder's lease runs out (its worker stopped), and when the
          holder's worker is SIGKILLed; never two jobs of the key at once,
          and the waiting used no try. A unique key stays held through both
          (its job is live all along) and is free once the job is done. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <signal.h>
#include <sys/wait.h>
#include <zmq.h>

#include "harness.h"

static int s_setup(void **state)
{
    *state = it_new("unique-overlap");
    return *state ? 0 : -1;
}

/* Dispatch type with a unique key (unique_for_ms 0: until done) and an
   overlap key (NULL: none) on the front socket; *unique: the reply said the
   key was held. Returns the id. */
static uint64_t s_dispatch(it_t *it, const char *type, const msgpack_sbuffer *payload,
                           const char *unique_key, int64_t unique_for_ms, const char *overlap_key,
                           bool *unique)
{
    oq_job_msg_t job = {.type = oq_str(type),
                        .queue = oq_str("default"),
                        .payload = payload ? (const uint8_t *)payload->data : NULL,
                        .payload_len = payload ? payload->size : 0,
                        .unique_key = oq_str(unique_key),
                        .unique_for_ms = unique_for_ms,
                        .overlap_key = oq_str(overlap_key)};
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(it);
    oq_proto_encode_dispatch(&buf, req, &job);
    oq_msg_t reply;
    assert_int_equal(it_call(it, &buf, req, &reply, IT_WAIT_MS), 0);
    msgpack_sbuffer_destroy(&buf);
    if (reply.cmd != OQ_CMD_DISPATCHED)
        fail_msg("dispatch refused: %.*s", (int)reply.err_text.len, reply.err_text.ptr);
    uint64_t id = reply.id;
    *unique = reply.unique;
    oq_proto_msg_release(&reply);
    return id;
}

/* Run `onceq dispatch noop --unique-key KEY`; returns its log. */
static char *s_cli_dispatch(it_t *it, const char *log, const char *key)
{
    const char *argv[] = {it_bin("onceq"), "--broker", it->front,      "dispatch", "noop",
                          "--unique-key",  key,        "--unique-for", "done",     NULL};
    pid_t pid = it_spawn(it, log, argv);
    int status = it_wait_exit(pid, IT_WAIT_MS);
    assert_true(status >= 0 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    return it_read_log(it, log);
}

static void s_restart(it_t *it, const char *const *flags)
{
    it_signal(it->broker, SIGKILL);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);
    assert_true(it_start_broker(it, flags) > 0);
}

static void test_unique_key_holds_across_sigkill_and_compaction(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--compact-min-bytes", "4096", "--compact-ratio", "2", NULL};
    assert_true(it_start_broker(it, flags) > 0);

    /* No worker yet: the first job stays queued and holds its key. */
    bool unique;
    uint64_t queued = s_dispatch(it, "noop", NULL, "order-1:ship", 0, NULL, &unique);
    assert_false(unique);
    assert_int_equal(s_dispatch(it, "noop", NULL, "order-1:ship", 0, NULL, &unique), queued);
    assert_true(unique);
    /* The command line says so and prints the same id. */
    char *out = s_cli_dispatch(it, "cli1", "order-1:ship");
    char want[96];
    snprintf(want, sizeof want, "job %llu holds unique key order-1:ship",
             (unsigned long long)queued);
    if (!strstr(out, want))
        fail_msg("onceq dispatch printed: %s", out);
    free(out);
    /* A resend of a dispatch answered with the holder: the same id. */
    oq_job_msg_t resend = {.unique_key = oq_str("order-1:ship"), .dispatch_id = oq_str("d-77")};
    assert_int_equal(it_dispatch(it, "noop", NULL, &resend), queued);
    resend.unique_key = oq_str(NULL);
    assert_int_equal(it_dispatch(it, "noop", NULL, &resend), queued);
    /* A windowed key whose job will be done. */
    uint64_t windowed = s_dispatch(it, "noop", NULL, "report:today", 3600 * 1000, NULL, &unique);
    assert_false(unique);
    uint64_t other = s_dispatch(it, "noop", NULL, "order-2:ship", 0, NULL, &unique);
    assert_false(unique);

    /* onceq stats says how many keys are held and how often one answered. */
    const char *stats_argv[] = {it_bin("onceq"), "--broker", it->front, "stats", NULL};
    pid_t pid = it_spawn(it, "stats", stats_argv);
    int status = it_wait_exit(pid, IT_WAIT_MS);
    assert_true(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    out = it_read_log(it, "stats");
    if (!strstr(out, "keys: unique 3 held, 3 dispatches answered by a holder"))
        fail_msg("onceq stats printed: %s", out);
    free(out);

    /* The broker dies; the keys come back from the journal. */
    s_restart(it, flags);
    assert_int_equal(s_dispatch(it, "noop", NULL, "order-1:ship", 0, NULL, &unique), queued);
    assert_true(unique);

    /* A worker runs them all, and plenty of churn for compactions. */
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    uint64_t want_done = 3;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_at_least, &want_done, IT_WAIT_MS, &s) >= 0);
    for (int i = 0; i < 300; i++)
        it_dispatch(it, "noop", NULL, NULL);
    want_done += 300;
    assert_true(it_wait_stats(it, it_done_at_least, &want_done, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(it_wait_log(it, "broker", "compacted the journal", 1, IT_WAIT_MS), 0);

    /* Done with "until done": the key is free again. Done with a window:
       still held, also after a SIGKILL that replays the compacted file. */
    uint64_t again = s_dispatch(it, "noop", NULL, "order-2:ship", 0, NULL, &unique);
    assert_false(unique);
    assert_true(again > other);
    assert_int_equal(s_dispatch(it, "noop", NULL, "report:today", 0, NULL, &unique), windowed);
    assert_true(unique);
    s_restart(it, flags);
    assert_int_equal(s_dispatch(it, "noop", NULL, "report:today", 0, NULL, &unique), windowed);
    assert_true(unique);

    /* Out of range: an error naming the limit, and nothing queued. */
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_job_msg_t bad = {.type = oq_str("noop"),
                        .unique_key = oq_str("k"),
                        .unique_for_ms = 31LL * 24 * 3600 * 1000};
    int64_t req = it_req(it);
    oq_proto_encode_dispatch(&buf, req, &bad);
    oq_msg_t reply;
    assert_int_equal(it_call(it, &buf, req, &reply, IT_WAIT_MS), 0);
    assert_int_equal(reply.cmd, OQ_CMD_ERROR);
    char text[256];
    oq_str_copy(reply.err_text, text, sizeof text);
    if (!strstr(text, "2592000"))
        fail_msg("error does not name the limit: %s", text);
    oq_proto_msg_release(&reply);
    /* A key of the wrong type or over its limit: an error naming the field;
       the broker serves on and nothing was queued. */
    uint64_t jobs_before = 0;
    it_stats_t before;
    assert_int_equal(it_stats(it, &before), 0);
    jobs_before = before.ready + before.delayed + before.leased;
    const char *fields[] = {"overlap_key", "unique_key"};
    for (int f = 0; f < 2; f++) {
        for (int big = 0; big < 2; big++) {
            msgpack_sbuffer_clear(&buf);
            msgpack_packer pk;
            msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
            req = it_req(it);
            oq_proto_begin(&pk, OQ_CMD_DISPATCH, req, 1);
            oq_proto_pack_cstr(&pk, "job");
            msgpack_pack_map(&pk, 2);
            oq_proto_pack_cstr(&pk, "type");
            oq_proto_pack_cstr(&pk, "noop");
            oq_proto_pack_cstr(&pk, fields[f]);
            char key[OQ_MAX_JOB_KEY_LEN + 2];
            memset(key, 'k', sizeof key - 1);
            key[sizeof key - 1] = 0;
            if (big)
                oq_proto_pack_cstr(&pk, key);
            else
                msgpack_pack_int(&pk, 7);
            it_send(it->client, &buf);
            assert_int_equal(it_expect(it->client, OQ_CMD_ERROR, &reply, IT_WAIT_MS), 0);
            assert_int_equal(reply.err_code, big ? OQ_ERR_TOO_LARGE : OQ_ERR_BAD_REQUEST);
            oq_str_copy(reply.err_text, text, sizeof text);
            if (!strstr(text, fields[f]))
                fail_msg("error does not name %s: %s", fields[f], text);
            oq_proto_msg_release(&reply);
        }
    }
    it_stats_t after;
    assert_int_equal(it_stats(it, &after), 0);
    assert_int_equal(after.ready + after.delayed + after.leased, jobs_before);
    msgpack_sbuffer_destroy(&buf);
}

/* ---- overlap keys ---- */

/* Polled on every stats reading: the most jobs of the key (every job of
   these tests has it) leased at once. */
typedef struct {
    uint64_t max_leased;
    uint64_t want_leased, want_waiting, want_done, want_redelivered;
    uint32_t not_pid; /* if set: the leased job must be on another worker than this one */
} s_watch_t;

static uint32_t s_leasing_pid(const it_stats_t *s);

static bool s_watch(const it_stats_t *s, const void *arg)
{
    s_watch_t *w = (s_watch_t *)arg;
    if (s->leased > w->max_leased)
        w->max_leased = s->leased;
    return s->leased == w->want_leased && s->waiting == w->want_waiting &&
           s->done >= w->want_done && s->redelivered >= w->want_redelivered &&
           (!w->not_pid || s_leasing_pid(s) != w->not_pid);
}

static uint32_t s_leasing_pid(const it_stats_t *s)
{
    for (size_t i = 0; i < s->workers; i++)
        if (s->worker[i].leased)
            return s->worker[i].pid;
    return 0;
}

/* n workers on a broker that has none; returns once it counts them all. */
static void s_workers(it_t *it, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char log[32];
        snprintf(log, sizeof log, "worker%zu", i + 1);
        if (i + 1 < n)
            assert_true(it_start_worker(it, log, NULL) > 0);
        else
            assert_true(it_start_worker_counted(it, log, NULL, n) > 0);
    }
}

static uint64_t s_sleep_job_unique(it_t *it, uint64_t ms, const char *overlap_key,
                                   const char *unique_key, bool *unique)
{
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    it_payload_uint(&payload, "ms", ms);
    uint64_t id = s_dispatch(it, "sleep", &payload, unique_key, 0, overlap_key, unique);
    msgpack_sbuffer_destroy(&payload);
    return id;
}

static uint64_t s_sleep_job(it_t *it, uint64_t ms, const char *overlap_key)
{
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    it_payload_uint(&payload, "ms", ms);
    bool unique;
    uint64_t id = s_dispatch(it, "sleep", &payload, NULL, 0, overlap_key, &unique);
    msgpack_sbuffer_destroy(&payload);
    return id;
}

static void test_overlap_waiter_leased_when_the_lease_runs_out(void **state)
{
    it_t *it = *state;
    /* Heartbeats that tolerate a long pause: the lease (2 s) is what ends. */
    const char *flags[] = {"--heartbeat-ms",   "500", "--liveness", "40",
                           "--retry-after",    "2",   "--timeout",  "1.2",
                           "--timeout-margin", "0.5", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    s_workers(it, 3);
    bool unique;
    uint64_t first = s_sleep_job_unique(it, 600, "customer-7", "ship:7", &unique);
    s_sleep_job(it, 600, "customer-7");
    s_watch_t w = {.want_leased = 1, .want_waiting = 1};
    it_stats_t s;
    assert_true(it_wait_stats(it, s_watch, &w, IT_WAIT_MS, &s) >= 0);
    uint32_t holder = s_leasing_pid(&s);
    assert_true(holder > 0);
    /* The holder stops mid-job: its lease runs out after 2 s, not before. */
    it_signal((pid_t)holder, SIGSTOP);
    int64_t stopped_at = it_now_ms();
    /* Once it has: one job of the key leased on another worker, the other
       (the holder's, given back) waiting in turn. */
    w.not_pid = holder;
    assert_true(it_wait_stats(it, s_watch, &w, IT_WAIT_MS, &s) >= 0);
    int64_t next_ms = it_now_ms() - stopped_at;
    /* Through the lease's expiry the first job stays live, and keeps its key. */
    assert_int_equal(s_sleep_job_unique(it, 600, "customer-7", "ship:7", &unique), first);
    assert_true(unique);
    it_signal((pid_t)holder, SIGCONT);
    w.not_pid = 0;
    w.want_leased = 0;
    w.want_waiting = 0;
    w.want_done = 2;
    assert_true(it_wait_stats(it, s_watch, &w, IT_WAIT_MS, &s) >= 0);
    print_message("holder stopped: the waiting job was leased %lld ms later (retry_after "
                  "2000 ms); at most %llu of the key leased at once\n",
                  (long long)next_ms, (unsigned long long)w.max_leased);
    /* Not before the lease could have ended (it began shortly before the
       stop), and not long after. */
    assert_true(next_ms >= 1000 && next_ms < 10000);
    assert_int_equal(w.max_leased, 1);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.done, 2);
    /* Only the holder's lease ran out: its job is redelivered once, or, if
       the resumed holder's ok comes first, completed by that late ok while
       it waits (or both); the job that waited is never a redelivery. */
    assert_true(s.redelivered <= 1 && s.late_acks <= 1 && s.redelivered + s.late_acks >= 1);
}

static void test_overlap_waiter_leased_when_the_holder_dies(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--heartbeat-ms", "200", "--liveness", "3", "--retry-after", "60",
                           "--timeout",      "10",  NULL};
    assert_true(it_start_broker(it, flags) > 0);
    s_workers(it, 3);
    /* The first also holds a unique key, through its worker's death. */
    bool unique;
    uint64_t first = s_sleep_job_unique(it, 1500, "customer-9", "ship:9", &unique);
    assert_false(unique);
    s_sleep_job(it, 1500, "customer-9");
    s_sleep_job(it, 1500, "customer-9");
    uint64_t free_job = s_sleep_job(it, 200, NULL); /* not held up by the waiters */
    (void)free_job;
    s_watch_t w = {.want_leased = 1, .want_waiting = 2, .want_done = 1};
    it_stats_t s;
    assert_true(it_wait_stats(it, s_watch, &w, IT_WAIT_MS, &s) >= 0);
    w.max_leased = 0; /* from here on every leased job has the key */
    uint32_t holder = s_leasing_pid(&s);
    assert_true(holder > 0);
    int64_t killed_at = it_now_ms();
    it_signal((pid_t)holder, SIGKILL);
    /* Dead to the broker within its heartbeat window: one of the key is
       leased again at once, long before retry_after. */
    w.want_waiting = 2;
    w.want_redelivered = 0;
    uint32_t next = 0;
    while (it_now_ms() - killed_at < IT_WAIT_MS) {
        assert_true(it_wait_stats(it, s_watch, &w, IT_WAIT_MS, &s) >= 0);
        next = s_leasing_pid(&s);
        if (next && next != holder)
            break;
    }
    int64_t next_ms = it_now_ms() - killed_at;
    assert_int_not_equal(next, holder);
    /* Still live (ready, waiting or leased again): the key answers with it. */
    assert_int_equal(s_sleep_job_unique(it, 1500, "customer-9", "ship:9", &unique), first);
    assert_true(unique);
    w.want_leased = 0;
    w.want_waiting = 0;
    w.want_done = 4;
    assert_true(it_wait_stats(it, s_watch, &w, IT_WAIT_MS, &s) >= 0);
    print_message("holder killed: a job of the key leased again after %lld ms (heartbeat "
                  "window 600 ms, retry_after 60 s); at most %llu leased at once\n",
                  (long long)next_ms, (unsigned long long)w.max_leased);
    assert_true(next_ms < 10000);
    assert_int_equal(w.max_leased, 1);
    assert_int_equal(s.done, 4);
    assert_int_equal(s.failed, 0);
    /* Done ("until done"): the key is free. */
    assert_true(s_sleep_job_unique(it, 10, NULL, "ship:9", &unique) > first);
    assert_false(unique);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unique_key_holds_across_sigkill_and_compaction,
                                        s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_overlap_waiter_leased_when_the_lease_runs_out, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_overlap_waiter_leased_when_the_holder_dies, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
