/*  test_points: exactly-once effects on a real PostgreSQL, one test for each
    way the article says a job runs twice, plus many workers at once. Every
    test ends by checking the data itself: the exact balance and exactly one
    grant row per order. The cluster is the project-local one (deploy/pg.sh),
    started once for this program in its temp dir and stopped at the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <signal.h>

#include "harness.h"
#include "payloads.h"

#define S_CUSTOMERS 50

static int s_group_setup(void **state)
{
    it_t *it = it_new_pg("points");
    if (!it)
        return -1;
    it->stats_type = "grant_points";
    setenv("ONCEQ_TEST_HOOKS", "1", 1);
    it_use_worker(it, "onceq-test-worker");
    *state = it;
    return 0;
}

/* Each test: no processes, empty tables, customers 1..S_CUSTOMERS at 0. */
static int s_setup(void **state)
{
    it_t *it = *state;
    it_kill_all(it);
    /* Each test's broker starts from an empty journal. Sharing one let a
       job of the previous test whose done record was not yet written when
       that test's broker was killed (its stats reply leaves before the turn
       writes the journal) run again here, on truncated tables: counted
       applied once more than there were orders. */
    it_fresh_data_dir(it);
    it_sql(it, "TRUNCATE point_grants, point_balances");
    char sql[128];
    snprintf(sql, sizeof sql,
             "INSERT INTO point_balances (customer_id, balance) "
             "SELECT g, 0 FROM generate_series(1, %d) g",
             S_CUSTOMERS);
    it_sql(it, sql);
    return 0;
}

static int64_t s_balance(it_t *it, int customer)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT balance FROM point_balances WHERE customer_id = %d",
             customer);
    return it_sql_int(it, sql);
}

static int64_t s_grant_rows(it_t *it, uint64_t order)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM point_grants WHERE order_id = %llu",
             (unsigned long long)order);
    return it_sql_int(it, sql);
}

/* A grant_points payload, with an optional test hook (key, value). */
static void s_grant_payload(msgpack_sbuffer *buf, uint64_t order, uint64_t customer,
                            uint64_t points, const char *hook, uint64_t hook_value,
                            const char *hook2, uint64_t hook2_value)
{
    msgpack_packer pk;
    msgpack_sbuffer_clear(buf);
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3 + (hook ? 1 : 0) + (hook2 ? 1 : 0));
    oq_payload_pack_grant(&pk, order, customer, points);
    if (hook) {
        oq_proto_pack_cstr(&pk, hook);
        msgpack_pack_uint64(&pk, hook_value);
    }
    if (hook2) {
        oq_proto_pack_cstr(&pk, hook2);
        msgpack_pack_uint64(&pk, hook2_value);
    }
}

static uint64_t s_grant(it_t *it, uint64_t order, uint64_t customer, uint64_t points,
                        const char *hook, uint64_t hook_value, const char *hook2,
                        uint64_t hook2_value)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    s_grant_payload(&buf, order, customer, points, hook, hook_value, hook2, hook2_value);
    oq_job_msg_t options = {.backoff_ms = {200}, .backoff_len = 1};
    uint64_t id = it_dispatch(it, "grant_points", &buf, &options);
    msgpack_sbuffer_destroy(&buf);
    assert_true(id > 0);
    return id;
}

static bool s_settled(const it_stats_t *s, const void *arg)
{
    /* done, and the slower delivery's ack has come in too */
    return s->done >= 1 && s->ignored_acks >= *(const uint64_t *)arg;
}

static bool s_redelivered(const it_stats_t *s, const void *arg)
{
    (void)arg;
    return s->redelivered == 1 && s->leased == 1;
}

static uint32_t s_leasing_pid(const it_stats_t *s)
{
    for (size_t i = 0; i < s->workers; i++)
        if (s->worker[i].leased)
            return s->worker[i].pid;
    return 0;
}

/* (a) The handler fails after its effect committed; the retry finds the
   grant and does nothing. */
static void test_failure_after_commit_is_retried_without_double_grant(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--heartbeat-ms", "200", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    assert_true(it_start_worker_counted(it, "worker", NULL, 1) > 0);

    s_grant(it, 1001, 7, 50, "test_fail_after_commit_attempt", 1, NULL, 0);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_at_least, &one, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.retried, 1);
    assert_int_equal(s.type_applied, 0); /* the run that wrote it reported retry */
    assert_int_equal(s.type_duplicates, 1);
    assert_int_equal(s_balance(it, 7), 50);
    assert_int_equal(s_grant_rows(it, 1001), 1);
}

/* (b) Two deliveries overlap: the first worker is paused inside its
   transaction past retry_after, the job is redelivered, the second worker
   blocks on the first one's uncommitted unique key; the first resumes and
   commits; the second finds the grant. The second's statement may wait on
   the lock for its whole timeout less a margin: while the test notices the
   wait and resumes the first worker, which on a loaded machine took more
   than the 1.6 s a 2 s retry_after left, and the second then reported
   retry instead of already_applied. So retry_after is 6 s. */
static void s_overlap(it_t *it, const char *isolation)
{
    const char *flags[] = {"--heartbeat-ms",   "500", "--liveness", "40",
                           "--retry-after",    "6",   "--timeout",  "5.8",
                           "--timeout-margin", "0.2", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    const char *worker_flags[] = {"--isolation", isolation, NULL};
    assert_true(it_start_worker(it, "worker1", worker_flags) > 0);
    assert_true(it_start_worker_counted(it, "worker2", worker_flags, 2) > 0);

    /* The logs live on across the tests of this program: count from now. */
    const char *pause_line = "pausing inside transaction";
    size_t paused_before =
        it_log_count(it, "worker1", pause_line) + it_log_count(it, "worker2", pause_line);
    s_grant(it, 2002, 9, 30, "test_pause_in_txn_ms", 600, "test_pause_attempt", 1);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_leased_is, &one, IT_WAIT_MS, &s) >= 0);
    uint32_t first = s_leasing_pid(&s);
    assert_true(first > 0);
    /* Stop it while it holds the uncommitted grant row. */
    int64_t end = it_now_ms() + IT_WAIT_MS;
    while (it_log_count(it, "worker1", pause_line) + it_log_count(it, "worker2", pause_line) ==
           paused_before) {
        assert_true(it_now_ms() < end);
    }
    it_signal((pid_t)first, SIGSTOP);

    assert_true(it_wait_stats(it, s_redelivered, NULL, IT_WAIT_MS, &s) >= 0);
    assert_int_not_equal(s_leasing_pid(&s), first);
    /* Resume the first only once the second is blocked on its unique key:
       then the two transactions really overlap in the database. */
    end = it_now_ms() + IT_WAIT_MS;
    while (it_sql_int(it, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") <
           1)
        assert_true(it_now_ms() < end);
    it_signal((pid_t)first, SIGCONT);

    assert_true(it_wait_stats(it, s_settled, &one, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.done, 1);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.type_applied, 1);
    assert_int_equal(s.type_duplicates, 1);
    assert_int_equal(s_balance(it, 9), 30);
    assert_int_equal(s_grant_rows(it, 2002), 1);
}

static void test_overlap_read_committed(void **state)
{
    s_overlap(*state, "read-committed");
}

static void test_overlap_repeatable_read(void **state)
{
    it_t *it = *state;
    s_overlap(it, "repeatable-read");
    /* Under REPEATABLE READ the second run meets a serialization failure,
       retries the transaction in place, and then finds the grant. */
    size_t serialization =
        it_log_count(it, "worker1", "40001") + it_log_count(it, "worker2", "40001");
    assert_true(serialization >= 1);
}

/* (c) A worker SIGKILLed after COMMIT and before its ack. */
static void test_kill_after_commit_before_ack(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--heartbeat-ms", "200", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    assert_true(it_start_worker(it, "worker1", NULL) > 0);
    assert_true(it_start_worker_counted(it, "worker2", NULL, 2) > 0);

    s_grant(it, 3003, 11, 70, "test_kill_after_commit_attempt", 1, NULL, 0);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_at_least, &one, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.redelivered, 1);
    assert_int_equal(s.type_duplicates, 1);
    assert_int_equal(it_log_count(it, "worker1", "SIGKILL after commit") +
                         it_log_count(it, "worker2", "SIGKILL after commit"),
                     1);
    assert_int_equal(s_balance(it, 11), 70);
    assert_int_equal(s_grant_rows(it, 3003), 1);
}

/* (d) The same business operation dispatched twice: two job ids, one grant. */
static void test_same_order_dispatched_twice(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    assert_true(it_start_worker_counted(it, "worker", NULL, 1) > 0);

    uint64_t a = s_grant(it, 4004, 13, 25, NULL, 0, NULL, 0);
    uint64_t b = s_grant(it, 4004, 13, 25, NULL, 0, NULL, 0);
    assert_int_not_equal(a, b);
    uint64_t two = 2;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_at_least, &two, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.type_applied, 1);
    assert_int_equal(s.type_duplicates, 1);
    assert_int_equal(s_balance(it, 13), 25);
    assert_int_equal(s_grant_rows(it, 4004), 1);
}

/* 8 worker processes, 5,000 grant jobs, 30% of them re-dispatches of
   earlier orders: every balance ends as the sum of its distinct orders. */
static void test_many_workers_many_redispatches(void **state)
{
    enum { JOBS = 5000, REDISPATCH_PCT = 30, MAX_ORDERS = JOBS };
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    const char *worker_flags[] = {"--processes", "8", NULL};
    assert_true(it_start_worker_counted(it, "workers", worker_flags, 8) > 0);

    static uint32_t order_customer[MAX_ORDERS + 1], order_points[MAX_ORDERS + 1];
    int64_t expected[S_CUSTOMERS + 1] = {0};
    uint32_t orders = 0, redispatches = 0;
    srand(20261202);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    for (int i = 0; i < JOBS; i++) {
        uint32_t order;
        if (orders > 0 && rand() % 100 < REDISPATCH_PCT) {
            order = 1 + (uint32_t)rand() % orders;
            redispatches++;
        } else {
            order = ++orders;
            order_customer[order] = 1 + (uint32_t)rand() % S_CUSTOMERS;
            order_points[order] = 1 + (uint32_t)rand() % 100;
            expected[order_customer[order]] += order_points[order];
        }
        s_grant_payload(&buf, 500000 + order, order_customer[order], order_points[order], NULL, 0,
                        NULL, 0);
        assert_true(it_dispatch(it, "grant_points", &buf, NULL) > 0);
    }
    msgpack_sbuffer_destroy(&buf);

    uint64_t all = JOBS;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_at_least, &all, 120000, &s) >= 0);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.type_applied, orders);
    assert_int_equal(s.type_duplicates, redispatches);
    for (int c = 1; c <= S_CUSTOMERS; c++) {
        if (s_balance(it, c) != expected[c])
            fail_msg("customer %d: balance %lld, expected %lld", c, (long long)s_balance(it, c),
                     (long long)expected[c]);
    }
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM point_grants"), orders);
    assert_int_equal(it_sql_int(it, "SELECT count(DISTINCT order_id) FROM point_grants"), orders);
    print_message("%d jobs: %u distinct orders, %u re-dispatches absorbed\n", JOBS, orders,
                  redispatches);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_failure_after_commit_is_retried_without_double_grant,
                                        s_setup, it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_overlap_read_committed, s_setup, it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_overlap_repeatable_read, s_setup, it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_kill_after_commit_before_ack, s_setup,
                                        it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_same_order_dispatched_twice, s_setup,
                                        it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_many_workers_many_redispatches, s_setup,
                                        it_kill_teardown),
    };
    return cmocka_run_group_tests(tests, s_group_setup, it_teardown);
}
