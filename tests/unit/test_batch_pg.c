/*  test_batch_pg.c: batched effects against a real server: the grant_points
    batch function (oq_points_grant_batch) and the batched use case
    (oq_grant_order_points_batch) on PostgreSQL. Each grant of a batch is
    applied once; duplicates inside a batch and across batches are found;
    a job whose value the table refuses makes the batch fall back and fails
    alone; two batches running at once over the same customers and orders,
    listed in opposite orders, never deadlock; a connection lost in the
    middle of a batch loses nothing and adds nothing twice.

    It starts a cluster of its own with deploy/pg.sh in a temp dir on a
    random port (which also runs `onceq db migrate` from the build tree) and
    stops it at the end. Label `pg`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "onceq/effects.h"
#include "onceq/log.h"
#include "payloads.h"
#include "pg_fixture.h"
#include "onceq/worker.h"
#include "points/grant.h"
#include "points/handler.h"
#include "points/ledger_pg.h"

#define S_CUSTOMERS 8
/* pg_terminate_backend waits this long for the session to be gone. */
#define S_TERMINATE_WAIT_MS 5000
/* Two batches at once: rounds, and grants per batch. */
#define S_RACE_ROUNDS 30
#define S_RACE_GRANTS 64
/* The job timeout the handler's statements are bounded by. */
#define S_JOB_TIMEOUT_MS 60000

#define S_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers ------------------------------------------------------------ */

static int64_t s_balance(int64_t customer)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT balance FROM point_balances WHERE customer_id = %" PRId64,
             customer);
    return oq_pg_fixture_sql_int(sql);
}

/* Balances must be the sum of the grants on record, customer by customer:
   nothing added twice, nothing added without its grant. */
static void s_assert_balances_match_grants(void)
{
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT count(*) FROM point_balances b WHERE b.balance <> "
                              "(SELECT coalesce(sum(points), 0) FROM point_grants g "
                              "WHERE g.customer_id = b.customer_id)"),
        0);
}

static void s_terminate(const oq_pg_t *pg)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d, %d)", oq_pg_backend_pid(pg),
             S_TERMINATE_WAIT_MS);
    oq_pg_fixture_sql(sql);
}

/* Each test: empty point tables, customers 1 .. S_CUSTOMERS at 0. */
static int s_setup(void **state)
{
    (void)state;
    oq_pg_fixture_sql("ALTER TABLE point_grants DROP CONSTRAINT IF EXISTS test_refuses_666");
    oq_pg_fixture_sql("TRUNCATE point_grants, point_balances");
    char sql[128];
    snprintf(sql, sizeof sql,
             "INSERT INTO point_balances (customer_id, balance) "
             "SELECT g, 0 FROM generate_series(1, %d) g",
             S_CUSTOMERS);
    oq_pg_fixture_sql(sql);
    return 0;
}

/* ---- jobs --------------------------------------------------------------- */

typedef struct {
    msgpack_sbuffer buf;
    msgpack_unpacked unpacked;
    oq_job_t job;
} s_payload_t;

static const oq_job_t *s_job(s_payload_t *p, uint64_t id, int64_t order, int64_t customer,
                             int64_t points)
{
    memset(p, 0, sizeof *p);
    msgpack_sbuffer_init(&p->buf);
    /* Every row is positive, so the unsigned encoding is the same bytes. */
    assert_true(order > 0 && customer > 0 && points > 0);
    oq_payload_grant(&p->buf, (uint64_t)order, (uint64_t)customer, (uint64_t)points);
    msgpack_unpacked_init(&p->unpacked);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&p->unpacked, p->buf.data, p->buf.size, &off),
                     MSGPACK_UNPACK_SUCCESS);
    p->job = (oq_job_t){.id = id,
                        .type = "grant_points",
                        .queue = "default",
                        .attempt = 1,
                        .max_tries = 3,
                        .timeout_ms = S_JOB_TIMEOUT_MS,
                        .payload = &p->unpacked.data};
    return &p->job;
}

static void s_job_free(s_payload_t *p)
{
    msgpack_unpacked_destroy(&p->unpacked);
    msgpack_sbuffer_destroy(&p->buf);
}

static oq_points_handler_t *s_handler(void)
{
    oq_points_config_t config = {.database_url = oq_pg_fixture_url(),
                                 .isolation = OQ_TXN_READ_COMMITTED};
    return oq_points_handler_new(&config);
}

/* Run the batch function on jobs made of (order, customer, points) rows. */
static void s_run_batch(oq_points_handler_t *handler, const int64_t (*rows)[3], size_t count,
                        oq_report_t *reports)
{
    s_payload_t *p = calloc(count, sizeof *p);
    const oq_job_t **jobs = calloc(count, sizeof *jobs);
    assert_non_null(p);
    assert_non_null(jobs);
    for (size_t i = 0; i < count; i++)
        jobs[i] = s_job(&p[i], i + 1, rows[i][0], rows[i][1], rows[i][2]);
    memset(reports, 0, count * sizeof *reports);
    oq_points_grant_batch(jobs, count, handler, reports);
    for (size_t i = 0; i < count; i++)
        s_job_free(&p[i]);
    free(jobs);
    free(p);
}

static void s_assert_ok(const oq_report_t *report, oq_result_t result)
{
    if (report->outcome != OQ_OUTCOME_OK)
        fail_msg("expected ok, got outcome %d: %s", (int)report->outcome, report->error);
    assert_int_equal(report->result, result);
}

/* ---- tests -------------------------------------------------------------- */

static void test_batch_applies_each_grant_once(void **state)
{
    (void)state;
    oq_points_handler_t *handler = s_handler();
    int64_t rows[40][3];
    int64_t expected[S_CUSTOMERS + 1] = {0};
    for (size_t i = 0; i < S_COUNT(rows); i++) {
        /* Customers and orders listed out of order on purpose. */
        rows[i][0] = 1000 - (int64_t)i * 7;
        rows[i][1] = 1 + (int64_t)((i * 5) % S_CUSTOMERS);
        rows[i][2] = 1 + (int64_t)i;
        expected[rows[i][1]] += rows[i][2];
    }
    oq_report_t reports[S_COUNT(rows)];
    s_run_batch(handler, rows, S_COUNT(rows), reports);
    for (size_t i = 0; i < S_COUNT(rows); i++)
        s_assert_ok(&reports[i], OQ_RESULT_APPLIED);
    for (int64_t c = 1; c <= S_CUSTOMERS; c++)
        assert_int_equal(s_balance(c), expected[c]);

    /* A redelivery of the whole batch: every grant is on record. */
    s_run_batch(handler, rows, S_COUNT(rows), reports);
    for (size_t i = 0; i < S_COUNT(rows); i++)
        s_assert_ok(&reports[i], OQ_RESULT_ALREADY_APPLIED);
    for (int64_t c = 1; c <= S_CUSTOMERS; c++)
        assert_int_equal(s_balance(c), expected[c]);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM point_grants"),
                     (int64_t)S_COUNT(rows));
    s_assert_balances_match_grants();
    oq_points_handler_destroy(&handler);
}

static void test_batch_duplicates_inside_and_across(void **state)
{
    (void)state;
    oq_points_handler_t *handler = s_handler();
    /* A duplicate dispatch of order 7 inside one batch, and a request for
       order 9 that contradicts the first. */
    const int64_t first[][3] = {{7, 1, 5}, {9, 2, 4}, {7, 1, 5}, {9, 3, 4}};
    oq_report_t reports[4];
    s_run_batch(handler, first, S_COUNT(first), reports);
    s_assert_ok(&reports[0], OQ_RESULT_APPLIED);
    s_assert_ok(&reports[1], OQ_RESULT_APPLIED);
    s_assert_ok(&reports[2], OQ_RESULT_ALREADY_APPLIED);
    assert_int_equal(reports[3].outcome, OQ_OUTCOME_FAIL);
    assert_string_equal(reports[3].error, "grant_points: order 9 was already granted 4 points for "
                                          "customer 2; not granting 4 points to customer 3");
    /* Across batches: the second finds the first's grants. */
    const int64_t second[][3] = {{8, 3, 6}, {7, 1, 5}, {9, 2, 4}};
    s_run_batch(handler, second, S_COUNT(second), reports);
    s_assert_ok(&reports[0], OQ_RESULT_APPLIED);
    s_assert_ok(&reports[1], OQ_RESULT_ALREADY_APPLIED);
    s_assert_ok(&reports[2], OQ_RESULT_ALREADY_APPLIED);
    assert_int_equal(s_balance(1), 5);
    assert_int_equal(s_balance(2), 4);
    assert_int_equal(s_balance(3), 6);
    s_assert_balances_match_grants();
    oq_points_handler_destroy(&handler);
}

/* The table refuses one job's value (a CHECK the test adds): the batch's
   INSERT fails as a whole, the batch falls back, and only that job fails,
   with the database's reason; its neighbours are applied. A customer
   without a balance row (the foreign key) is the same. */
static void test_batch_bad_job_fails_alone(void **state)
{
    (void)state;
    oq_pg_fixture_sql(
        "ALTER TABLE point_grants ADD CONSTRAINT test_refuses_666 CHECK (points <> 666)");
    oq_points_handler_t *handler = s_handler();
    const int64_t rows[][3] = {{1, 1, 5}, {2, 2, 666}, {3, 1, 7}, {4, 99, 1}, {5, 3, 2}};
    oq_report_t reports[S_COUNT(rows)];
    s_run_batch(handler, rows, S_COUNT(rows), reports);
    s_assert_ok(&reports[0], OQ_RESULT_APPLIED);
    assert_int_equal(reports[1].outcome, OQ_OUTCOME_FAIL);
    assert_non_null(strstr(reports[1].error, "SQLSTATE 23514"));
    assert_non_null(strstr(reports[1].error, "test_refuses_666"));
    s_assert_ok(&reports[2], OQ_RESULT_APPLIED);
    assert_int_equal(reports[3].outcome, OQ_OUTCOME_FAIL);
    assert_string_equal(reports[3].error, "grant_points: customer 99 has no balance row (add it "
                                          "with: onceq customer add 99)");
    s_assert_ok(&reports[4], OQ_RESULT_APPLIED);
    assert_int_equal(s_balance(1), 12);
    assert_int_equal(s_balance(2), 0);
    assert_int_equal(s_balance(3), 2);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM point_grants"), 3);
    s_assert_balances_match_grants();
    oq_points_handler_destroy(&handler);
    oq_pg_fixture_sql("ALTER TABLE point_grants DROP CONSTRAINT test_refuses_666");
}

/* ---- two batches at once ------------------------------------------------ */

typedef struct {
    pthread_barrier_t *start;
    oq_grant_request_t requests[S_RACE_ROUNDS][S_RACE_GRANTS];
    uint32_t reruns;    /* in-place re-runs (a deadlock or serialization failure) */
    uint32_t fallbacks; /* batches that fell back */
    uint32_t not_done;  /* grants neither granted nor already granted */
} s_racer_t;

static void s_count_rerun(void *ctx, uint32_t ms)
{
    (void)ms;
    ((s_racer_t *)ctx)->reruns++;
}

static void *s_racer_main(void *arg)
{
    s_racer_t *racer = arg;
    oq_pg_t *pg = oq_pg_new(oq_pg_fixture_url(), "test_batch_pg_racer");
    oq_ledger_t *ledger = oq_ledger_pg_new(pg);
    oq_txn_t *txn = oq_txn_new(oq_txn_pg_ops(), pg, OQ_TXN_READ_COMMITTED);
    oq_txn_set_sleep(txn, s_count_rerun, racer);
    oq_pg_set_timeout(pg, S_JOB_TIMEOUT_MS);
    oq_pg_error_t error;
    if (oq_pg_connect(pg, &error) < 0)
        racer->not_done = UINT32_MAX;
    oq_grant_result_t results[S_RACE_GRANTS];
    for (int r = 0; r < S_RACE_ROUNDS; r++) {
        pthread_barrier_wait(racer->start);
        oq_grant_order_points_batch(ledger, txn, S_RACE_GRANTS, racer->requests[r], results,
                                    &error);
        if (error.cls != OQ_PG_ERR_NONE)
            racer->fallbacks++;
        for (int i = 0; i < S_RACE_GRANTS; i++)
            if (results[i].status != OQ_GRANT_GRANTED &&
                results[i].status != OQ_GRANT_ALREADY_GRANTED)
                racer->not_done++;
    }
    oq_txn_destroy(&txn);
    oq_ledger_destroy(&ledger);
    oq_pg_destroy(&pg);
    return NULL;
}

/* Two batches start together, over the same customers and, every other
   round, half the same orders (else none), each listing them in the
   opposite order to the other. Taken in the order listed, A's keys and
   balances would be locked upwards and B's downwards, and they would
   deadlock (the server would roll one back, and the runner would re-run
   it). Taken in order_id and customer order, they wait for each other at
   most. With shared orders the second batch waits at its INSERT for the
   first one's keys; without, both reach their balance updates at once. */
static void test_concurrent_batches_do_not_deadlock(void **state)
{
    (void)state;
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
    s_racer_t *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    a->start = b->start = &start;
    const int half = S_RACE_GRANTS / 2;
    int64_t expected = 0;
    for (int r = 0; r < S_RACE_ROUNDS; r++) {
        int64_t base = 1 + (int64_t)r * S_RACE_GRANTS * 3;
        int shared = r % 2 == 0 ? half : 0;
        expected += 2 * S_RACE_GRANTS - shared;
        for (int i = 0; i < S_RACE_GRANTS; i++) {
            /* A: orders base .. base+63 upwards, customers 1..8 upwards.
               B: orders base+32 .. base+95 downwards (32 shared with A),
               or base+64 .. base+127 (none shared), customers 8..1
               downwards. The shared orders carry the same customer and
               points in both, so that they are duplicates. */
            int64_t a_order = base + i;
            int64_t b_order = base + (S_RACE_GRANTS - shared) + (S_RACE_GRANTS - 1 - i);
            a->requests[r][i] =
                (oq_grant_request_t){a_order, 1 + (a_order % S_CUSTOMERS), 1 + (a_order % 5)};
            b->requests[r][i] =
                (oq_grant_request_t){b_order, 1 + (b_order % S_CUSTOMERS), 1 + (b_order % 5)};
        }
        /* A lists its customers upwards, B downwards: sort each batch so. */
        for (int i = 0; i < S_RACE_GRANTS; i++)
            for (int j = i + 1; j < S_RACE_GRANTS; j++) {
                oq_grant_request_t *x = a->requests[r], *y = b->requests[r];
                if (x[j].customer_id < x[i].customer_id) {
                    oq_grant_request_t t = x[i];
                    x[i] = x[j];
                    x[j] = t;
                }
                if (y[j].customer_id > y[i].customer_id) {
                    oq_grant_request_t t = y[i];
                    y[i] = y[j];
                    y[j] = t;
                }
            }
    }
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, s_racer_main, a), 0);
    assert_int_equal(pthread_create(&tb, NULL, s_racer_main, b), 0);
    assert_int_equal(pthread_join(ta, NULL), 0);
    assert_int_equal(pthread_join(tb, NULL), 0);
    pthread_barrier_destroy(&start);

    assert_int_equal(a->not_done + b->not_done, 0);
    assert_int_equal(a->reruns + b->reruns, 0);
    assert_int_equal(a->fallbacks + b->fallbacks, 0);
    /* Every order once: A's 64 and B's 64, less the shared ones. */
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM point_grants"), expected);
    s_assert_balances_match_grants();
    free(a);
    free(b);
}

/* ---- a lost connection in the middle ------------------------------------ */

/* A ledger over the PostgreSQL one that ends its own server session just
   before the first balance update: the batch has inserted its grants and
   has not committed. */
typedef struct {
    oq_pg_t *pg;
    oq_ledger_t *inner;
    bool cut;
} s_cut_t;

static int s_cut_insert_grant(void *impl, const oq_ledger_grant_t *grant,
                              oq_ledger_insert_t *outcome, oq_pg_error_t *error)
{
    return oq_ledger_insert_grant(((s_cut_t *)impl)->inner, grant, outcome, error);
}

static int s_cut_insert_grants(void *impl, const oq_ledger_grant_t *grants, size_t count,
                               bool *inserted, oq_pg_error_t *error)
{
    return oq_ledger_insert_grants(((s_cut_t *)impl)->inner, grants, count, inserted, error);
}

static int s_cut_add_to_balance(void *impl, int64_t customer_id, int64_t points, bool *found,
                                oq_pg_error_t *error)
{
    s_cut_t *cut = impl;
    if (!cut->cut) {
        cut->cut = true;
        s_terminate(cut->pg);
    }
    return oq_ledger_add_to_balance(cut->inner, customer_id, points, found, error);
}

static int s_cut_find_grant(void *impl, oq_ledger_grant_t *grant, bool *found, oq_pg_error_t *error)
{
    return oq_ledger_find_grant(((s_cut_t *)impl)->inner, grant, found, error);
}

static int s_cut_get_balance(void *impl, int64_t customer_id, int64_t *balance, bool *found,
                             oq_pg_error_t *error)
{
    return oq_ledger_get_balance(((s_cut_t *)impl)->inner, customer_id, balance, found, error);
}

static int s_cut_add_customer(void *impl, int64_t customer_id, int64_t balance, bool *created,
                              oq_pg_error_t *error)
{
    return oq_ledger_add_customer(((s_cut_t *)impl)->inner, customer_id, balance, created, error);
}

static void test_connection_lost_mid_batch(void **state)
{
    (void)state;
    static const oq_ledger_ops_t ops = {
        .insert_grant = s_cut_insert_grant,
        .insert_grants = s_cut_insert_grants,
        .add_to_balance = s_cut_add_to_balance,
        .find_grant = s_cut_find_grant,
        .get_balance = s_cut_get_balance,
        .add_customer = s_cut_add_customer,
    };
    s_cut_t cut = {.pg = oq_pg_new(oq_pg_fixture_url(), "test_batch_pg_cut")};
    cut.inner = oq_ledger_pg_new(cut.pg);
    oq_ledger_t *ledger = oq_ledger_new(&ops, &cut);
    oq_txn_t *txn = oq_txn_new(oq_txn_pg_ops(), cut.pg, OQ_TXN_READ_COMMITTED);
    oq_pg_set_timeout(cut.pg, S_JOB_TIMEOUT_MS);

    const oq_grant_request_t requests[] = {{1, 1, 5}, {2, 2, 6}, {3, 1, 7}};
    oq_grant_result_t results[S_COUNT(requests)];
    oq_pg_error_t batch_error;
    assert_int_equal(oq_grant_order_points_batch(ledger, txn, S_COUNT(requests), requests, results,
                                                 &batch_error),
                     0);
    assert_true(cut.cut);
    assert_int_equal(batch_error.cls, OQ_PG_ERR_CONNECTION);
    for (size_t i = 0; i < S_COUNT(requests); i++)
        assert_int_equal(results[i].status, OQ_GRANT_GRANTED);
    assert_int_equal(s_balance(1), 12);
    assert_int_equal(s_balance(2), 6);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM point_grants"), 3);
    s_assert_balances_match_grants();

    oq_txn_destroy(&txn);
    oq_ledger_destroy(&ledger);
    oq_ledger_destroy(&cut.inner);
    oq_pg_destroy(&cut.pg);
}

#define S_TEST(name) cmocka_unit_test_setup_teardown(name, s_setup, NULL)

int main(void)
{
    oq_log_set_level(OQ_LOG_WARN);
    const struct CMUnitTest tests[] = {
        S_TEST(test_batch_applies_each_grant_once), S_TEST(test_batch_duplicates_inside_and_across),
        S_TEST(test_batch_bad_job_fails_alone),     S_TEST(test_concurrent_batches_do_not_deadlock),
        S_TEST(test_connection_lost_mid_batch),
    };
    return cmocka_run_group_tests(tests, oq_pg_fixture_group_setup, oq_pg_fixture_group_teardown);
}
