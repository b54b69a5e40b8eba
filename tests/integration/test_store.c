/*  test_store: the failed store's operations and cancelling, with the real
    broker, worker and onceq tool.

    (i)   `failed forget`, `failed flush --queue` and `failed retry --all
          --queue` change what they say, refuse what they must (naming the
          job), and a broker SIGKILLed right after their replies comes back
          without the forgotten and flushed jobs and with the requeued ones
          ready; so does a later `failed flush` of every queue.
    (ii)  `failed list` shows the oldest failures first across queues, not
          in id or queue order: `--limit 2` gives the oldest two, the cursor
          printed under a page gives the rest, and the order is the same
          after a SIGKILL and restart.
    (iii) `job cancel` withdraws a ready and a delayed job (counted as
          cancelled, gone after a SIGKILL and restart) and refuses a leased
          one, saying its effect may be under way, and an unknown one. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "harness.h"
#include "onceq/limits.h"
#include "support.h"

#define S_CALL_MS   5000
#define S_POLL_MS   20
#define S_SLEEP_JOB 60000 /* ms the leased job sleeps: longer than the test */

static int s_setup(void **state)
{
    *state = it_new("store");
    return *state ? 0 : -1;
}

/* Counter key of queue name from the broker's stats (0 if no such queue). */
static uint64_t s_queue(it_t *it, const char *name, const char *key)
{
    oq_msg_t reply;
    assert_int_equal(it_stats_reply(it, &reply, S_CALL_MS), 0);
    uint64_t value = oq_statsr_u64(oq_statsr_entry(&reply.root, "queues", name), key);
    oq_proto_msg_release(&reply);
    return value;
}

/* Jobs in the failed store, over every queue. */
static uint64_t s_failed_total(it_t *it)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(it);
    oq_proto_encode_failed_request(&buf, req, NULL, 1);
    oq_msg_t reply;
    assert_int_equal(it_call(it, &buf, req, &reply, S_CALL_MS), 0);
    msgpack_sbuffer_destroy(&buf);
    uint64_t total = oq_statsr_u64(&reply.root, "total");
    oq_proto_msg_release(&reply);
    return total;
}

static void s_wait_failed(it_t *it, uint64_t want)
{
    int64_t end = it_now_ms() + IT_WAIT_MS;
    uint64_t got;
    while ((got = s_failed_total(it)) != want) {
        if (it_now_ms() > end)
            fail_msg("%llu failed jobs, waited for %llu", (unsigned long long)got,
                     (unsigned long long)want);
        oq_support_sleep_ms(S_POLL_MS);
    }
}

static void s_wait_queue(it_t *it, const char *queue, const char *key, uint64_t want)
{
    int64_t end = it_now_ms() + IT_WAIT_MS;
    while (s_queue(it, queue, key) != want) {
        if (it_now_ms() > end)
            fail_msg("queue %s: %s never reached %llu", queue, key, (unsigned long long)want);
        oq_support_sleep_ms(S_POLL_MS);
    }
}

/* Dispatch a job of type to queue with payload {key: value} (key NULL:
   {}), after delay_ms. */
static uint64_t s_dispatch(it_t *it, const char *type, const char *queue, const char *key,
                           uint64_t value, int64_t delay_ms)
{
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    if (key && strcmp(key, "permanent") == 0) {
        msgpack_packer pk;
        msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 1);
        oq_proto_pack_cstr(&pk, "permanent");
        msgpack_pack_true(&pk);
    } else if (key) {
        it_payload_uint(&payload, key, value);
    }
    oq_job_msg_t options = {.queue = oq_str(queue),
                            .delay_ms = delay_ms,
                            .has_delay = delay_ms > 0,
                            .max_tries = 1,
                            .has_max_tries = true};
    uint64_t id = it_dispatch(it, type, key ? &payload : NULL, &options);
    msgpack_sbuffer_destroy(&payload);
    assert_true(id > 0);
    return id;
}

static void s_kill(pid_t pid)
{
    it_signal(pid, SIGKILL);
    assert_true(it_wait_exit(pid, IT_WAIT_MS) >= 0);
}

/* SIGKILL the broker right after the last reply, and start it again on
   the same journal. */
static void s_restart_broker(it_t *it)
{
    s_kill(it->broker);
    assert_true(it_start_broker(it, NULL) > 0);
}

static void test_forget_flush_and_retry_all_survive_a_kill(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    uint64_t a[3], b[3];
    for (int i = 0; i < 3; i++) {
        a[i] = s_dispatch(it, "fail", "alpha", "permanent", 0, 0);
        b[i] = s_dispatch(it, "fail", "beta", "permanent", 0, 0);
    }
    pid_t worker = it_start_worker(it, "worker", NULL);
    assert_true(worker > 0);
    s_wait_failed(it, 6);
    s_kill(worker);

    char id[32], name[48];
    snprintf(id, sizeof id, "%llu", (unsigned long long)a[0]);
    snprintf(name, sizeof name, "job %llu ", (unsigned long long)a[0]);
    it_expect_output(it_cli(it, "forget", 0, "failed", "forget", id, NULL), "deleted");
    char *out = it_cli(it, "forget2", 1, "failed", "forget", id, NULL);
    assert_non_null(strstr(out, name));
    it_expect_output(out, "not_found");
    it_expect_output(it_cli(it, "forget3", 1, "failed", "forget", "999999", NULL),
                     "job 999999 is unknown");
    it_expect_output(it_cli(it, "flush", 0, "failed", "flush", "--queue", "alpha", NULL),
                     "2 failed job(s) of queue alpha deleted");
    it_expect_output(it_cli(it, "retry", 0, "failed", "retry", "--all", "--queue", "beta", NULL),
                     "3 failed job(s) of queue beta ready again");
    it_expect_output(it_cli(it, "usage", 2, "failed", "retry", "--all", id, NULL), "not both");

    s_restart_broker(it);
    assert_int_equal(s_failed_total(it), 0);
    assert_int_equal(s_queue(it, "alpha", "ready"), 0);
    assert_int_equal(s_queue(it, "beta", "ready"), 3);
    assert_int_equal(s_queue(it, "beta", "failed"), 0);
    snprintf(id, sizeof id, "%llu", (unsigned long long)b[0]);
    it_expect_output(it_cli(it, "forget4", 1, "failed", "forget", id, NULL), "is ready");

    /* The requeued jobs fail again; a flush of every queue, then a kill. */
    worker = it_start_worker(it, "worker2", NULL);
    assert_true(worker > 0);
    s_wait_failed(it, 3);
    s_kill(worker);
    it_expect_output(it_cli(it, "flush2", 0, "failed", "flush", NULL), "3 failed job(s) deleted");
    s_restart_broker(it);
    assert_int_equal(s_failed_total(it), 0);
    assert_int_equal(s_queue(it, "beta", "ready"), 0);
}

/* Where "\"id\":N," first occurs in text, or NULL. */
static const char *s_at(const char *text, uint64_t id)
{
    char key[48];
    snprintf(key, sizeof key, "\"id\":%llu,", (unsigned long long)id);
    return strstr(text, key);
}

static void s_expect_order(const char *text, const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!s_at(text, ids[i]))
            fail_msg("job %llu is not listed: %s", (unsigned long long)ids[i], text);
        if (i > 0 && s_at(text, ids[i - 1]) > s_at(text, ids[i]))
            fail_msg("job %llu is listed before job %llu: %s", (unsigned long long)ids[i],
                     (unsigned long long)ids[i - 1], text);
    }
}

static void test_list_is_oldest_failure_first_across_queues(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    /* alpha's jobs have the lower ids and the older queue; beta's fail first. */
    uint64_t a1 = s_dispatch(it, "fail", "alpha", "permanent", 0, 0);
    uint64_t a2 = s_dispatch(it, "fail", "alpha", "permanent", 0, 0);
    uint64_t b1 = s_dispatch(it, "fail", "beta", "permanent", 0, 0);
    uint64_t b2 = s_dispatch(it, "fail", "beta", "permanent", 0, 0);
    const char *beta_only[] = {"--queue", "beta", NULL};
    pid_t worker = it_start_worker(it, "worker-beta", beta_only);
    s_wait_failed(it, 2);
    s_kill(worker);
    const char *alpha_only[] = {"--queue", "alpha", NULL};
    worker = it_start_worker(it, "worker-alpha", alpha_only);
    s_wait_failed(it, 4);
    s_kill(worker);

    char *page = it_cli(it, "page1", 0, "failed", "list", "--limit", "2", "--json", NULL);
    const uint64_t first[] = {b1, b2};
    s_expect_order(page, first, 2);
    assert_null(s_at(page, a1));
    char key[48];
    snprintf(key, sizeof key, "\"next\":%llu", (unsigned long long)b2);
    assert_non_null(strstr(page, key));
    const char *at = strstr(page, "\"next_at\":");
    assert_non_null(at);
    char cursor[64];
    snprintf(cursor, sizeof cursor, "%llu@%llu", (unsigned long long)b2,
             strtoull(at + strlen("\"next_at\":"), NULL, 10));
    free(page);

    page =
        it_cli(it, "page2", 0, "failed", "list", "--limit", "2", "--after", cursor, "--json", NULL);
    const uint64_t second[] = {a1, a2};
    s_expect_order(page, second, 2);
    assert_null(s_at(page, b1));
    assert_null(strstr(page, "\"next\""));
    free(page);

    /* The table prints the cursor it pages by. */
    page = it_cli(it, "table", 0, "failed", "list", "--limit", "3", NULL);
    snprintf(key, sizeof key, "--after %llu@", (unsigned long long)a1);
    assert_non_null(strstr(page, key));
    free(page);

    s_restart_broker(it);
    page = it_cli(it, "after-restart", 0, "failed", "list", "--json", NULL);
    const uint64_t all[] = {b1, b2, a1, a2};
    s_expect_order(page, all, 4);
    free(page);
}

static void test_cancel_waiting_jobs_but_not_a_leased_one(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    uint64_t leased = s_dispatch(it, "sleep", "busy", "ms", S_SLEEP_JOB, 0);
    uint64_t ready = s_dispatch(it, "noop", "default", NULL, 0, 0);
    uint64_t delayed = s_dispatch(it, "noop", "default", NULL, 0, 600000);
    const char *busy_only[] = {"--queue", "busy", NULL};
    assert_true(it_start_worker(it, "worker", busy_only) > 0);
    s_wait_queue(it, "busy", "leased", 1);

    char id[32];
    snprintf(id, sizeof id, "%llu", (unsigned long long)ready);
    it_expect_output(it_cli(it, "ready", 0, "job", "cancel", id, NULL), "cancelled");
    snprintf(id, sizeof id, "%llu", (unsigned long long)delayed);
    it_expect_output(it_cli(it, "delayed", 0, "job", "cancel", id, NULL), "cancelled");
    snprintf(id, sizeof id, "%llu", (unsigned long long)leased);
    char *out = it_cli(it, "leased", 1, "job", "cancel", id, NULL);
    assert_non_null(strstr(out, "wrong_state"));
    assert_non_null(strstr(out, "is leased"));
    it_expect_output(out, "effect may be under way");
    it_expect_output(it_cli(it, "unknown", 1, "job", "cancel", "424242", NULL),
                     "job 424242 is unknown");
    snprintf(id, sizeof id, "%llu", (unsigned long long)ready);
    it_expect_output(it_cli(it, "again", 1, "job", "cancel", id, NULL), "not_found");

    assert_int_equal(s_queue(it, "default", "cancelled"), 2);
    assert_int_equal(s_queue(it, "default", "ready"), 0);
    assert_int_equal(s_queue(it, "default", "delayed"), 0);
    assert_int_equal(s_queue(it, "busy", "leased"), 1);

    s_restart_broker(it);
    assert_int_equal(s_queue(it, "default", "ready"), 0);
    assert_int_equal(s_queue(it, "default", "delayed"), 0);
    assert_int_equal(s_queue(it, "busy", "ready") + s_queue(it, "busy", "leased"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forget_flush_and_retry_all_survive_a_kill, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_list_is_oldest_failure_first_across_queues, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_waiting_jobs_but_not_a_leased_one, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
