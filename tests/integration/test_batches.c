/*  test_batches: batches on the real broker and workers.
    (o)   A batch with one bad job is refused whole, naming the job, and
          queues nothing; so is one over the jobs' limit.
    (i)   `onceq batch dispatch` with a then and a finally: once every job is
          done, each callback ran as one job, and `onceq batch show` and
          `list` name them.
    (ii)  `onceq batch cancel` withdraws the jobs that wait: finally runs,
          then does not.
    (iii) The broker SIGKILLed again and again while batches and chains
          complete, so that kills land between a batch's last ack and its
          callback's dispatch, and between a link's ack and the next
          link's: after the last restart every batch's then and every
          chain's second link ran as exactly one job (distinct ids of
          their type in the workers' "ok" lines), never none and never two.
    (iv)  A chain of points then shipment (here noop, then sleep): the
          second link follows the first's ok, `onceq job show` names its
          place, and a final failure runs chain_catch instead of the next
          link. */
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

#include "harness.h"
#include "support.h"

#define S_KILL_ROUNDS       4 /* broker kills in (iii) */
#define S_BATCHES_PER_ROUND 3
#define S_JOBS_PER_BATCH    "150"
#define S_MAX_IDS           64 /* distinct then-job ids counted at most */

static int s_setup(void **state)
{
    *state = it_new("batches");
    return *state ? 0 : -1;
}

/* The batch id in "batch B: jobs F to L". */
static uint64_t s_batch_id(const char *out)
{
    const char *p = strstr(out, "batch ");
    assert_non_null(p);
    return strtoull(p + 6, NULL, 10);
}

/* Fails the test, showing the output, unless needle is in it. */
static void s_expect(const char *out, const char *needle)
{
    if (!strstr(out, needle))
        fail_msg("expected \"%s\" in: %s", needle, out);
}

static bool s_drained(const it_stats_t *s, const void *arg)
{
    const uint64_t *want = arg;
    return s->ready + s->delayed + s->leased == 0 && s->done >= *want;
}

static void test_then_and_finally_run_once_each(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    assert_true(it_start_worker(it, "workers", NULL) > 0);
    char *out =
        it_cli(it, "dispatch", 0, "batch", "dispatch", "--type", "noop", "--count", "20", "--then",
               "sleep", "--then-payload", "{\"ms\": 1}", "--finally", "noop", NULL);
    uint64_t id = s_batch_id(out);
    free(out);
    uint64_t want = 22;
    it_stats_t s;
    assert_true(it_wait_stats(it, s_drained, &want, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.done, 22);
    char arg[32];
    snprintf(arg, sizeof arg, "%llu", (unsigned long long)id);
    out = it_cli(it, "show", 0, "batch", "show", arg, NULL);
    s_expect(out, "settled, total 20, pending 0, done 20, failed 0");
    s_expect(out, "then    job ");
    s_expect(out, "finally job ");
    free(out);
    out = it_cli(it, "list", 0, "batch", "list", NULL);
    char line[64];
    snprintf(line, sizeof line, "batch %llu: settled", (unsigned long long)id);
    s_expect(out, line);
    free(out);
    /* Unknown, and a bad id: clear errors. */
    out = it_cli(it, "unknown", 1, "batch", "show", "999999", NULL);
    s_expect(out, "not known");
    free(out);
}

/* A raw dispatch_batch of n noop jobs, job bad_at (if < n) with an
   invalid type. */
static void s_raw_batch(msgpack_sbuffer *buf, int64_t req, uint32_t n, uint32_t bad_at)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_DISPATCH_BATCH, req, 2);
    oq_proto_pack_cstr(&pk, "then");
    msgpack_pack_map(&pk, 1);
    oq_proto_pack_cstr(&pk, "type");
    oq_proto_pack_cstr(&pk, "noop");
    oq_proto_pack_cstr(&pk, "jobs");
    msgpack_pack_array(&pk, n);
    for (uint32_t i = 0; i < n; i++) {
        msgpack_pack_map(&pk, 1);
        oq_proto_pack_cstr(&pk, "type");
        oq_proto_pack_cstr(&pk, i == bad_at ? "no spaces allowed" : "noop");
    }
}

static void test_bad_batch_is_refused_whole(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_msg_t reply;
    int64_t req = it_req(it);
    s_raw_batch(&buf, req, 10, 7);
    assert_int_equal(it_call(it, &buf, req, &reply, IT_WAIT_MS), 0);
    assert_int_equal(reply.cmd, OQ_CMD_ERROR);
    assert_int_equal(reply.err_code, OQ_ERR_BAD_REQUEST);
    char text[256];
    oq_str_copy(reply.err_text, text, sizeof text);
    if (!strstr(text, "job 7 of the batch"))
        fail_msg("the error does not name the job: %s", text);
    oq_proto_msg_release(&reply);
    msgpack_sbuffer_clear(&buf);
    req = it_req(it);
    s_raw_batch(&buf, req, OQ_MAX_BATCH_JOBS + 1, UINT32_MAX);
    assert_int_equal(it_call(it, &buf, req, &reply, IT_WAIT_MS), 0);
    assert_int_equal(reply.cmd, OQ_CMD_ERROR);
    assert_int_equal(reply.err_code, OQ_ERR_TOO_LARGE);
    oq_proto_msg_release(&reply);
    msgpack_sbuffer_destroy(&buf);
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.ready + s.dispatched, 0);
    /* The broker is still there, and a good batch goes through. */
    char *out = it_cli(it, "good", 0, "batch", "dispatch", "--type", "noop", "--count", "3", NULL);
    s_expect(out, ": jobs ");
    free(out);
}

static void test_cancel_withdraws_waiting_jobs(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    char *out = it_cli(it, "dispatch", 0, "batch", "dispatch", "--type", "noop", "--count", "5",
                       "--then", "noop", "--finally", "noop", NULL);
    uint64_t id = s_batch_id(out);
    free(out);
    char arg[32];
    snprintf(arg, sizeof arg, "%llu", (unsigned long long)id);
    out = it_cli(it, "cancel", 0, "batch", "cancel", arg, NULL);
    s_expect(out, "withdrawn 5 waiting job(s)");
    s_expect(out, "cancelled, total 5, pending 0");
    s_expect(out, "then    not dispatched");
    s_expect(out, "finally job ");
    free(out);
    out = it_cli(it, "again", 1, "batch", "cancel", arg, NULL);
    free(out);
}

/* Distinct ids of type=sleep jobs in the workers' ok lines. */
static size_t s_distinct_then_jobs(const char *log)
{
    uint64_t ids[S_MAX_IDS];
    size_t n = 0;
    for (const char *p = strstr(log, "job "); p; p = strstr(p + 1, "job ")) {
        const char *eol = strchr(p, '\n');
        const char *t = strstr(p, "type=sleep ");
        const char *ok = strstr(p, "outcome=ok");
        if (!t || !ok || (eol && (t > eol || ok > eol)))
            continue;
        uint64_t id = strtoull(p + 4, NULL, 10);
        bool seen = false;
        for (size_t i = 0; i < n; i++)
            seen = seen || ids[i] == id;
        if (!seen && n < S_MAX_IDS)
            ids[n++] = id;
    }
    return n;
}

static void test_kills_between_ack_and_callback_dispatch_it_once(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--heartbeat-ms", "200", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    const char *worker_flags[] = {"--processes", "2", NULL};
    pid_t workers = it_start_worker(it, "workers", worker_flags);
    assert_true(workers > 0);
    size_t batches = 0;
    for (int round = 0; round < S_KILL_ROUNDS; round++) {
        for (int b = 0; b < S_BATCHES_PER_ROUND; b++, batches++) {
            char *out =
                it_cli(it, "dispatch", 0, "batch", "dispatch", "--type", "noop", "--count",
                       S_JOBS_PER_BATCH, "--then", "sleep", "--then-payload", "{\"ms\": 0}", NULL);
            free(out);
            out = it_cli(it, "chain", 0, "dispatch", "noop", "--chain", "sleep", "--chain-payload",
                         "{\"ms\": 0}", NULL);
            free(out);
        }
        /* The workers are through the batches in tens of ms: a kill a
           little later lands among the last acks and the callbacks. */
        oq_support_sleep_ms(20 + 15 * round);
        it_signal(it->broker, SIGKILL);
        assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);
        assert_true(it_start_broker(it, flags) > 0);
    }
    /* done counts since the last start only: drained is all that can be asked. */
    it_stats_t s;
    uint64_t zero = 0;
    assert_true(it_wait_stats(it, s_drained, &zero, IT_WAIT_MS, &s) >= 0);
    it_signal(workers, SIGTERM);
    assert_true(it_wait_exit(workers, IT_WAIT_MS) >= 0);
    char *log = it_read_log(it, "workers");
    size_t thens = s_distinct_then_jobs(log);
    free(log);
    print_message("%zu batches and as many chains, %zu then-jobs and second links ran\n", batches,
                  thens);
    assert_int_equal(thens, 2 * batches);
}

static void test_chain_of_points_then_shipment(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    assert_true(it_start_worker(it, "workers", NULL) > 0);
    char *out = it_cli(it, "dispatch", 0, "dispatch", "noop", "--chain", "sleep", "--chain-payload",
                       "{\"ms\": 1500}", "--chain", "noop", "--chain-catch", "noop", NULL);
    uint64_t first = strtoull(out, NULL, 10);
    free(out);
    assert_true(first > 0);
    /* The second link runs for 1.5 s: its place can be read meanwhile. */
    char arg[32];
    snprintf(arg, sizeof arg, "%llu", (unsigned long long)(first + 1));
    char want[96];
    snprintf(want, sizeof want, "link 2 of 3 in the chain of job %llu", (unsigned long long)first);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_leased_is, &one, IT_WAIT_MS, &s) >= 0);
    out = it_cli(it, "show", 0, "job", "show", arg, NULL);
    s_expect(out, want);
    s_expect(out, "next:        noop");
    free(out);
    uint64_t want_done = 3;
    assert_true(it_wait_stats(it, s_drained, &want_done, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.done, 3); /* the catch never ran */
    /* A final failure: chain_catch instead of the next link. */
    out = it_cli(it, "fail", 0, "dispatch", "fail", "--max-tries", "1", "--chain", "sleep",
                 "--chain-catch", "noop", NULL);
    free(out);
    want_done = 4;
    assert_true(it_wait_stats(it, s_drained, &want_done, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.done, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_batch_is_refused_whole, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_then_and_finally_run_once_each, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_withdraws_waiting_jobs, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_chain_of_points_then_shipment, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_kills_between_ack_and_callback_dispatch_it_once,
                                        s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
