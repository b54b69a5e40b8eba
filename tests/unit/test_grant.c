/*  test_grant.c: the order-points use case (points/grant.h) over the
    in-memory ledger (points/ledger_mem.h) and the transaction runner
    (onceq/effects.h), and the grant_points handler (points/handler.h) on
    top, with the test build's hooks (tests/support/points_hooks.h): once
    and only once, exact balances, rollback of a grant without its balance,
    in-place re-runs after serialization failures and deadlocks, and how each
    failure becomes a job outcome. Faults are injected through the ledger's
    seam, the way the real database raises them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "onceq/log.h"
#include "onceq/worker.h"
#include "onceq/effects.h"
#include "onceq/effects_worker.h"
#include "points/grant.h"
#include "points/handler.h"
#include "points/ledger_mem.h"
#include "points/points_limits.h"
#include "ledger_fixture.h"
#include "points_hooks.h"

/* ---- fixture ------------------------------------------------------------ */

static bool s_has_grant(oq_ledger_fx_t *fx, int64_t order_id)
{
    oq_ledger_grant_t grant = {.order_id = order_id, .reason = OQ_GRANT_REASON_ORDER};
    bool found;
    oq_pg_error_t error;
    assert_int_equal(oq_ledger_find_grant(fx->ledger, &grant, &found, &error), 0);
    return found;
}

static oq_grant_status_t s_grant(oq_ledger_fx_t *fx, int64_t order_id, int64_t customer_id,
                                 int64_t points, oq_grant_result_t *result)
{
    int rc =
        oq_grant_order_points(fx->ledger, fx->txn, order_id, customer_id, points, NULL, result);
    bool ok = result->status == OQ_GRANT_GRANTED || result->status == OQ_GRANT_ALREADY_GRANTED;
    assert_int_equal(rc, ok ? 0 : -1);
    assert_false(oq_ledger_mem_in_txn(fx->mem));
    return result->status;
}

/* ---- the use case ------------------------------------------------------- */

static void test_granted_once(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 7, 42, 100, &r), OQ_GRANT_GRANTED);
    assert_int_equal(r.error.cls, OQ_PG_ERR_NONE);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 100);
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 1);
    assert_int_equal(oq_txn_attempts(fx->txn), 1);
}

static void test_second_call_already_granted(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 7, 42, 100, &r), OQ_GRANT_GRANTED);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(s_grant(fx, 7, 42, 100, &r), OQ_GRANT_ALREADY_GRANTED);
        assert_int_equal(r.existing_customer_id, 42);
        assert_int_equal(r.existing_points, 100);
    }
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 100);
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 1);
}

static void test_balances_exact(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_grant_result_t r;
    /* Orders 1..20 alternate between the two customers, each dispatched
       three times. */
    int64_t expected42 = 0, expected43 = 1000;
    for (int round = 0; round < 3; round++) {
        for (int64_t order = 1; order <= 20; order++) {
            int64_t customer = order % 2 ? 42 : 43;
            oq_grant_status_t status = s_grant(fx, order, customer, order * 10, &r);
            assert_int_equal(status, round == 0 ? OQ_GRANT_GRANTED : OQ_GRANT_ALREADY_GRANTED);
            if (round == 0 && customer == 42)
                expected42 += order * 10;
            else if (round == 0)
                expected43 += order * 10;
        }
    }
    assert_int_equal(oq_ledger_fx_balance(fx, 42), expected42);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), expected43);
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 20);
}

/* The foreign key refuses the grant row: nothing is written. */
static void test_unknown_customer(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 8, 99, 10, &r), OQ_GRANT_UNKNOWN_CUSTOMER);
    assert_int_equal(r.error.cls, OQ_PG_ERR_FAIL);
    assert_string_equal(r.error.message,
                        "customer 99 has no balance row (add it with: onceq customer add 99)");
    assert_false(s_has_grant(fx, 8));
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 0);
}

/* Without the foreign key the grant row does go in; the use case's own
   check (the balance update finds no row) must roll it back. */
static void test_unknown_customer_rolls_back_grant(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_set_foreign_key(fx->mem, false);
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 8, 99, 10, &r), OQ_GRANT_UNKNOWN_CUSTOMER);
    assert_int_equal(oq_ledger_mem_calls(fx->mem, OQ_LEDGER_MEM_AT_INSERT_GRANT), 1);
    assert_int_equal(oq_ledger_mem_calls(fx->mem, OQ_LEDGER_MEM_AT_ADD_TO_BALANCE), 1);
    assert_false(s_has_grant(fx, 8));
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 0);
    /* And once the customer exists, the same order is granted normally. */
    oq_ledger_fx_add_customer(fx, 99, 0);
    assert_int_equal(s_grant(fx, 8, 99, 10, &r), OQ_GRANT_GRANTED);
    assert_int_equal(oq_ledger_fx_balance(fx, 99), 10);
}

static void test_conflict(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 9, 42, 100, &r), OQ_GRANT_GRANTED);
    assert_int_equal(s_grant(fx, 9, 42, 150, &r), OQ_GRANT_CONFLICT);
    assert_int_equal(r.error.cls, OQ_PG_ERR_FAIL);
    assert_int_equal(r.existing_points, 100);
    assert_non_null(strstr(r.error.message, "order 9 was already granted 100 points"));
    assert_int_equal(s_grant(fx, 9, 43, 100, &r), OQ_GRANT_CONFLICT);
    assert_int_equal(r.existing_customer_id, 42);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 100);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1000);
}

static void test_invalid_arguments(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_grant_result_t r;
    const int64_t bad[][3] = {
        {0, 42, 10},
        {-1, 42, 10},
        {1, 0, 10},
        {1, -5, 10},
        {1, 42, 0},
        {1, 42, -10},
        {1, 42, OQ_MAX_POINTS + 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(s_grant(fx, bad[i][0], bad[i][1], bad[i][2], &r), OQ_GRANT_INVALID);
        assert_int_equal(r.error.cls, OQ_PG_ERR_FAIL);
    }
    assert_non_null(strstr(r.error.message, "points must be from 1 to"));
    /* Nothing was even begun. */
    assert_int_equal(oq_ledger_mem_calls(fx->mem, OQ_LEDGER_MEM_AT_BEGIN), 0);
    assert_int_equal(s_grant(fx, 1, 42, OQ_MAX_POINTS, &r), OQ_GRANT_GRANTED);
}

/* ---- the runner: in-place re-runs ------------------------------------- */

static void test_serialization_failure_retried_in_place(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_INSERT_GRANT, "40001", 2);
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 10, 42, 5, &r), OQ_GRANT_GRANTED);
    assert_int_equal(oq_txn_attempts(fx->txn), 3);
    assert_int_equal(fx->sleeps, 2);
    /* Jittered pauses from the upper half of a doubling interval. */
    assert_in_range(fx->slept_ms[0], OQ_TXN_BACKOFF_BASE_MS / 2, OQ_TXN_BACKOFF_BASE_MS);
    assert_in_range(fx->slept_ms[1], OQ_TXN_BACKOFF_BASE_MS, 2 * OQ_TXN_BACKOFF_BASE_MS);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 5);
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 1);
}

/* A failure after the grant row went in: the rollback must take the row
   away, or the re-run would find it and never add the points. */
static void test_deadlock_after_insert_rolls_back_then_grants(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_ADD_TO_BALANCE, "40P01", 1);
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 11, 42, 5, &r), OQ_GRANT_GRANTED);
    assert_int_equal(oq_txn_attempts(fx->txn), 2);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 5);
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 1);
}

/* SERIALIZABLE reports most conflicts at COMMIT. */
static void test_serialization_failure_at_commit(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_COMMIT, "40001", 1);
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 12, 42, 5, &r), OQ_GRANT_GRANTED);
    assert_int_equal(oq_txn_attempts(fx->txn), 2);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 5);
}

static void test_retries_exhausted_is_retry(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_ADD_TO_BALANCE, "40001", OQ_TXN_MAX_RETRIES + 1);
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 13, 42, 5, &r), OQ_GRANT_ERROR);
    assert_int_equal(r.error.cls, OQ_PG_ERR_TRANSIENT);
    assert_int_equal(oq_effects_outcome(r.error.cls), OQ_OUTCOME_RETRY);
    assert_string_equal(r.error.sqlstate, "40001");
    assert_non_null(strstr(r.error.message, "still failing after"));
    assert_int_equal(oq_txn_attempts(fx->txn), OQ_TXN_MAX_RETRIES + 1);
    assert_int_equal(fx->sleeps, OQ_TXN_MAX_RETRIES);
    for (uint32_t i = 0; i < OQ_TXN_MAX_RETRIES; i++)
        assert_true(fx->slept_ms[i] <= OQ_TXN_BACKOFF_MAX_MS);
    assert_false(s_has_grant(fx, 13));
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 0);
    /* The job's retry, later, succeeds. */
    assert_int_equal(s_grant(fx, 13, 42, 5, &r), OQ_GRANT_GRANTED);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 5);
}

/* ---- the runner: errors that end the run ------------------------------ */

static void test_connection_lost_before_commit(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_ADD_TO_BALANCE, NULL, 1);
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 14, 42, 5, &r), OQ_GRANT_ERROR);
    assert_int_equal(r.error.cls, OQ_PG_ERR_CONNECTION);
    /* The database's failure, not the job's: handed back without a try. */
    assert_int_equal(oq_effects_outcome(r.error.cls), OQ_OUTCOME_UNAVAILABLE);
    assert_int_equal(oq_txn_attempts(fx->txn), 1); /* not re-run in place */
    assert_false(s_has_grant(fx, 14));
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 0);
}

/* The dangerous one: COMMIT went through and its answer was lost. The job
   is handed back (no try used) and runs again; that run finds the grant
   and adds nothing. */
static void test_connection_lost_during_commit_is_unknown_then_already(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_COMMIT, NULL, 1);
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 15, 42, 5, &r), OQ_GRANT_ERROR);
    assert_int_equal(r.error.cls, OQ_PG_ERR_UNKNOWN);
    assert_int_equal(oq_effects_outcome(r.error.cls), OQ_OUTCOME_UNAVAILABLE);
    assert_true(s_has_grant(fx, 15));
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 5);
    assert_int_equal(s_grant(fx, 15, 42, 5, &r), OQ_GRANT_ALREADY_GRANTED);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 5);
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 1);
}

static void test_data_error_fails(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_ADD_TO_BALANCE, "22003", 1);
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 16, 42, 5, &r), OQ_GRANT_ERROR);
    assert_int_equal(r.error.cls, OQ_PG_ERR_FAIL);
    assert_int_equal(oq_effects_outcome(r.error.cls), OQ_OUTCOME_FAIL);
    assert_false(s_has_grant(fx, 16));
}

static void test_begin_fails(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_BEGIN, "57P03", 1);
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 17, 42, 5, &r), OQ_GRANT_ERROR);
    assert_int_equal(r.error.cls, OQ_PG_ERR_CONNECTION);
    assert_int_equal(oq_ledger_mem_calls(fx->mem, OQ_LEDGER_MEM_AT_INSERT_GRANT), 0);
}

/* A balance that would overflow is the database's CHECK/range error. */
static void test_balance_overflow_fails_whole_grant(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_fx_add_customer(fx, 77, INT64_MAX - 1);
    oq_grant_result_t r;
    assert_int_equal(s_grant(fx, 18, 77, 5, &r), OQ_GRANT_ERROR);
    assert_int_equal(r.error.cls, OQ_PG_ERR_FAIL);
    assert_string_equal(r.error.sqlstate, "22003");
    assert_false(s_has_grant(fx, 18));
}

static void test_isolation_names(void **state)
{
    oq_txn_isolation_t level;
    assert_int_equal(oq_txn_isolation_parse("read-committed", &level), 0);
    assert_int_equal(level, OQ_TXN_READ_COMMITTED);
    assert_int_equal(oq_txn_isolation_parse("repeatable-read", &level), 0);
    assert_int_equal(level, OQ_TXN_REPEATABLE_READ);
    assert_int_equal(oq_txn_isolation_parse("serializable", &level), 0);
    assert_int_equal(level, OQ_TXN_SERIALIZABLE);
    assert_int_equal(oq_txn_isolation_parse("READ COMMITTED", &level), -1);
    assert_int_equal(oq_txn_isolation_parse("", &level), -1);
    assert_int_equal(oq_txn_isolation_parse(NULL, &level), -1);
    assert_string_equal(oq_txn_isolation_name(OQ_TXN_SERIALIZABLE), "serializable");
}

/* ---- the handler -------------------------------------------------------- */

typedef struct {
    msgpack_sbuffer buf;
    msgpack_packer pk;
    msgpack_unpacked unpacked;
    oq_job_t job;
} s_payload_t;

/* A job with a payload of n (key, uint) pairs; a NULL key packs a string
   value under the next key instead (for type errors). */
static const oq_job_t *s_job(s_payload_t *p, const char *type, uint32_t attempt, uint32_t n, ...)
{
    memset(p, 0, sizeof *p);
    msgpack_sbuffer_init(&p->buf);
    msgpack_packer_init(&p->pk, &p->buf, msgpack_sbuffer_write);
    msgpack_pack_map(&p->pk, n);
    va_list args;
    va_start(args, n);
    for (uint32_t i = 0; i < n; i++) {
        const char *key = va_arg(args, const char *);
        if (!key) {
            key = va_arg(args, const char *);
            oq_proto_pack_cstr(&p->pk, key);
            oq_proto_pack_cstr(&p->pk, va_arg(args, const char *));
            continue;
        }
        oq_proto_pack_cstr(&p->pk, key);
        int64_t value = va_arg(args, int64_t);
        if (value < 0)
            msgpack_pack_int64(&p->pk, value);
        else
            msgpack_pack_uint64(&p->pk, (uint64_t)value);
    }
    va_end(args);
    msgpack_unpacked_init(&p->unpacked);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&p->unpacked, p->buf.data, p->buf.size, &off),
                     MSGPACK_UNPACK_SUCCESS);
    p->job.id = 1;
    p->job.type = type;
    p->job.queue = "default";
    p->job.attempt = attempt;
    p->job.max_tries = 3;
    p->job.timeout_ms = 60000;
    p->job.payload = &p->unpacked.data;
    return &p->job;
}

static void s_job_free(s_payload_t *p)
{
    msgpack_unpacked_destroy(&p->unpacked);
    msgpack_sbuffer_destroy(&p->buf);
}

#define S_I(v) ((int64_t)(v))

/* Run the handler registered for type on job; fills report. */
static void s_run(oq_registry_t *registry, const oq_job_t *job, oq_report_t *report)
{
    oq_handler_fn fn;
    void *state;
    assert_int_equal(oq_registry_find(registry, job->type, &fn, &state), 0);
    memset(report, 0, sizeof *report);
    fn(job, state, report);
}

typedef struct {
    oq_ledger_fx_t *fx;
    oq_points_handler_t *handler;
    oq_registry_t *registry;
} s_hx_t;

static void s_handler_open(s_hx_t *hx, oq_ledger_fx_t *fx, bool test_hooks)
{
    hx->fx = fx;
    hx->handler = oq_points_handler_new_on(fx->ledger, fx->txn);
    hx->registry = oq_registry_new();
    /* With hooks: what a test worker registers; without: the production
       handler. */
    if (test_hooks)
        assert_int_equal(oq_points_test_register(hx->registry, hx->handler), 0);
    else
        assert_int_equal(oq_points_handler_register(hx->handler, hx->registry), 0);
}

static void s_handler_close(s_hx_t *hx)
{
    oq_registry_destroy(&hx->registry);
    oq_points_handler_destroy(&hx->handler);
}

static void test_handler_applied_then_already_applied(void **state)
{
    s_hx_t hx;
    s_handler_open(&hx, *state, false);
    s_payload_t p;
    oq_report_t report;
    const oq_job_t *job = s_job(&p, "grant_points", 1, 3, "order_id", S_I(7), "customer_id",
                                S_I(42), "points", S_I(100));
    s_run(hx.registry, job, &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(report.result, OQ_RESULT_APPLIED);
    s_run(hx.registry, job, &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(report.result, OQ_RESULT_ALREADY_APPLIED);
    assert_int_equal(oq_ledger_fx_balance(hx.fx, 42), 100);
    s_job_free(&p);
    s_handler_close(&hx);
}

static void test_handler_bad_payloads_fail_naming_the_field(void **state)
{
    s_hx_t hx;
    s_handler_open(&hx, *state, false);
    s_payload_t p;
    oq_report_t report;
    s_run(hx.registry, s_job(&p, "grant_points", 1, 2, "customer_id", S_I(42), "points", S_I(1)),
          &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_string_equal(report.error, "grant_points: payload field \"order_id\" is missing");
    s_job_free(&p);

    s_run(hx.registry,
          s_job(&p, "grant_points", 1, 3, "order_id", S_I(7), "customer_id", S_I(-4), "points",
                S_I(1)),
          &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_non_null(strstr(report.error, "\"customer_id\" must be an integer from 1 to"));
    s_job_free(&p);

    s_run(hx.registry,
          s_job(&p, "grant_points", 1, 3, "order_id", S_I(7), "customer_id", S_I(42), NULL,
                "points", "100"),
          &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_non_null(strstr(report.error, "\"points\" must be an integer from 1 to 1000000"));
    s_job_free(&p);

    s_run(hx.registry,
          s_job(&p, "grant_points", 1, 3, "order_id", S_I(0), "customer_id", S_I(42), "points",
                S_I(1)),
          &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_non_null(strstr(report.error, "\"order_id\""));
    s_job_free(&p);

    s_run(hx.registry,
          s_job(&p, "grant_points", 1, 3, "order_id", S_I(7), "customer_id", S_I(42), "points",
                S_I(OQ_MAX_POINTS + 1)),
          &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    s_job_free(&p);

    assert_int_equal(oq_ledger_mem_calls(hx.fx->mem, OQ_LEDGER_MEM_AT_BEGIN), 0);
    s_handler_close(&hx);
}

static void test_handler_unknown_customer_fails(void **state)
{
    s_hx_t hx;
    s_handler_open(&hx, *state, false);
    s_payload_t p;
    oq_report_t report;
    s_run(hx.registry,
          s_job(&p, "grant_points", 1, 3, "order_id", S_I(7), "customer_id", S_I(5), "points",
                S_I(1)),
          &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_string_equal(report.error, "grant_points: customer 5 has no balance row (add it with: "
                                      "onceq customer add 5)");
    s_job_free(&p);
    s_handler_close(&hx);
}

static void test_handler_database_errors_by_class(void **state)
{
    s_hx_t hx;
    s_handler_open(&hx, *state, false);
    s_payload_t p;
    oq_report_t report;
    const oq_job_t *job = s_job(&p, "grant_points", 1, 3, "order_id", S_I(7), "customer_id",
                                S_I(42), "points", S_I(3));

    oq_ledger_mem_inject(hx.fx->mem, OQ_LEDGER_MEM_AT_INSERT_GRANT, NULL, 1);
    s_run(hx.registry, job, &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_UNAVAILABLE);
    assert_non_null(strstr(report.error, "grant_points: database unavailable (connection"));

    oq_ledger_mem_inject(hx.fx->mem, OQ_LEDGER_MEM_AT_INSERT_GRANT, "53300", 1);
    s_run(hx.registry, job, &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_UNAVAILABLE);
    assert_non_null(strstr(report.error, "SQLSTATE 53300"));

    oq_ledger_mem_inject(hx.fx->mem, OQ_LEDGER_MEM_AT_INSERT_GRANT, "42P01", 1);
    s_run(hx.registry, job, &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_non_null(strstr(report.error, "SQLSTATE 42P01"));
    assert_non_null(strstr(report.error, "onceq db migrate"));

    oq_ledger_mem_inject(hx.fx->mem, OQ_LEDGER_MEM_AT_INSERT_GRANT, "57014", 1);
    s_run(hx.registry, job, &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_RETRY);

    oq_ledger_mem_inject(hx.fx->mem, OQ_LEDGER_MEM_AT_COMMIT, NULL, 1);
    s_run(hx.registry, job, &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_UNAVAILABLE);
    assert_non_null(strstr(report.error, "outcome unknown"));
    s_run(hx.registry, job, &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(report.result, OQ_RESULT_ALREADY_APPLIED);
    assert_int_equal(oq_ledger_fx_balance(hx.fx, 42), 3);
    s_job_free(&p);
    s_handler_close(&hx);
}

/* Without ONCEQ_TEST_HOOKS the test_* keys are ignored and the unguarded
   type does not exist. */
static void test_handler_hooks_off(void **state)
{
    s_hx_t hx;
    s_handler_open(&hx, *state, false);
    s_payload_t p;
    oq_report_t report;
    s_run(hx.registry,
          s_job(&p, "grant_points", 1, 4, "order_id", S_I(7), "customer_id", S_I(42), "points",
                S_I(3), "test_fail_after_commit_attempt", S_I(1)),
          &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(report.result, OQ_RESULT_APPLIED);
    s_job_free(&p);
    oq_handler_fn fn;
    assert_int_equal(oq_registry_find(hx.registry, "grant_points_unguarded", &fn, NULL), -1);
    s_handler_close(&hx);
}

static void test_handler_fail_after_commit_hook(void **state)
{
    s_hx_t hx;
    s_handler_open(&hx, *state, true);
    s_payload_t p;
    oq_report_t report;
    s_run(hx.registry,
          s_job(&p, "grant_points", 1, 4, "order_id", S_I(7), "customer_id", S_I(42), "points",
                S_I(3), "test_fail_after_commit_attempt", S_I(1)),
          &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_RETRY);
    assert_string_equal(report.error, "test hook: failing after commit");
    assert_int_equal(oq_ledger_fx_balance(hx.fx, 42), 3); /* committed all the same */
    s_job_free(&p);
    s_run(hx.registry,
          s_job(&p, "grant_points", 2, 4, "order_id", S_I(7), "customer_id", S_I(42), "points",
                S_I(3), "test_fail_after_commit_attempt", S_I(1)),
          &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(report.result, OQ_RESULT_ALREADY_APPLIED);
    assert_int_equal(oq_ledger_fx_balance(hx.fx, 42), 3);
    s_job_free(&p);
    s_handler_close(&hx);
}

static void test_handler_kill_after_commit_hook(void **state)
{
    oq_ledger_fx_t *fx = *state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        s_hx_t hx;
        s_handler_open(&hx, fx, true);
        s_payload_t p;
        oq_report_t report;
        s_run(hx.registry,
              s_job(&p, "grant_points", 2, 4, "order_id", S_I(7), "customer_id", S_I(42), "points",
                    S_I(3), "test_kill_after_commit_attempt", S_I(2)),
              &report);
        _exit(0); /* not reached */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
}

/* ---- the pause after COMMIT ------------------------------------------- */

#define S_COMMIT_MARK     "ledger: committed\n"
#define S_PAUSE_LINE      "test hook: pausing after commit"
#define S_LONG_PAUSE_MS   30000 /* longer than any wait below: only SIGKILL ends it */
#define S_SHORT_PAUSE_MS  100
#define S_HOOK_WAIT_MS    10000
#define S_CHILD_LOG_BYTES 8192

static int64_t s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The in-memory commit, then a mark on stderr: the log then shows whether
   the hook's line came after the COMMIT. */
static int s_marking_commit(void *db, oq_pg_error_t *error)
{
    int rc = oq_ledger_mem_txn_ops()->commit(db, error);
    if (rc == 0) {
        ssize_t written = write(STDERR_FILENO, S_COMMIT_MARK, strlen(S_COMMIT_MARK));
        (void)written; /* a lost mark fails the test's own check */
    }
    return rc;
}

static int s_marking_begin(void *db, oq_txn_isolation_t isolation, oq_pg_error_t *error)
{
    return oq_ledger_mem_txn_ops()->begin(db, isolation, error);
}

static void s_marking_rollback(void *db)
{
    oq_ledger_mem_txn_ops()->rollback(db);
}

static const oq_txn_ops_t s_marking_ops = {
    .begin = s_marking_begin,
    .commit = s_marking_commit,
    .rollback = s_marking_rollback,
};

/* The window onceq-chaos kills in: the process sits after a COMMIT that
   went through and before it reports (so before any ack), says so with its
   job, order and pid, and dies there by SIGKILL from outside. */
static void test_handler_pause_after_commit_hook(void **state)
{
    oq_ledger_fx_t *fx = *state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        oq_log_set_level(OQ_LOG_INFO);
        oq_txn_t *txn = oq_txn_new(&s_marking_ops, fx->mem, OQ_TXN_READ_COMMITTED);
        oq_points_handler_t *handler = oq_points_handler_new_on(fx->ledger, txn);
        oq_registry_t *registry = oq_registry_new();
        oq_points_test_register(registry, handler);
        s_payload_t p;
        oq_report_t report;
        s_run(registry,
              s_job(&p, "grant_points", 1, 4, "order_id", S_I(7), "customer_id", S_I(42), "points",
                    S_I(3), "test_pause_after_commit_ms", S_I(S_LONG_PAUSE_MS)),
              &report);
        fprintf(stderr, "reported\n"); /* must never be reached */
        _exit(0);
    }
    close(fds[1]);
    char log[S_CHILD_LOG_BYTES] = {0};
    size_t used = 0;
    int64_t end = s_now_ms() + S_HOOK_WAIT_MS;
    while (!strstr(log, S_PAUSE_LINE) && used < sizeof log - 1 && s_now_ms() < end) {
        struct pollfd item = {fds[0], POLLIN, 0};
        if (poll(&item, 1, (int)(end - s_now_ms())) <= 0)
            continue;
        ssize_t got = read(fds[0], log + used, sizeof log - 1 - used);
        if (got <= 0)
            break;
        used += (size_t)got;
    }
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(fds[0]);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    const char *committed = strstr(log, S_COMMIT_MARK);
    const char *paused = strstr(log, S_PAUSE_LINE);
    assert_non_null(committed);
    assert_non_null(paused);
    assert_true(committed < paused);
    char expect[128];
    snprintf(expect, sizeof expect, "(job 1, order 7, pid %d)", (int)pid);
    assert_non_null(strstr(paused, expect));
    assert_null(strstr(log, "reported"));
}

/* The pause happens on its attempt only, and not at all without test hooks:
   a pause of S_LONG_PAUSE_MS that did happen would blow the bound. */
static void test_handler_pause_after_commit_only_on_its_attempt(void **state)
{
    s_hx_t hx;
    s_handler_open(&hx, *state, true);
    s_payload_t p;
    oq_report_t report;
    int64_t start = s_now_ms();
    s_run(hx.registry,
          s_job(&p, "grant_points", 1, 5, "order_id", S_I(7), "customer_id", S_I(42), "points",
                S_I(3), "test_pause_after_commit_ms", S_I(S_LONG_PAUSE_MS),
                "test_pause_after_commit_attempt", S_I(2)),
          &report);
    assert_true(s_now_ms() - start < S_LONG_PAUSE_MS / 2);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(report.result, OQ_RESULT_APPLIED);
    s_job_free(&p);

    start = s_now_ms();
    s_run(hx.registry,
          s_job(&p, "grant_points", 2, 5, "order_id", S_I(7), "customer_id", S_I(42), "points",
                S_I(3), "test_pause_after_commit_ms", S_I(S_SHORT_PAUSE_MS),
                "test_pause_after_commit_attempt", S_I(2)),
          &report);
    assert_true(s_now_ms() - start >= S_SHORT_PAUSE_MS);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(report.result, OQ_RESULT_ALREADY_APPLIED);
    assert_int_equal(oq_ledger_fx_balance(hx.fx, 42), 3);
    s_job_free(&p);
    s_handler_close(&hx);

    s_handler_open(&hx, *state, false);
    start = s_now_ms();
    s_run(hx.registry,
          s_job(&p, "grant_points", 1, 4, "order_id", S_I(8), "customer_id", S_I(42), "points",
                S_I(3), "test_pause_after_commit_ms", S_I(S_LONG_PAUSE_MS)),
          &report);
    assert_true(s_now_ms() - start < S_LONG_PAUSE_MS / 2);
    assert_int_equal(report.result, OQ_RESULT_APPLIED);
    s_job_free(&p);
    s_handler_close(&hx);
}

static void test_handler_unguarded_grants_twice(void **state)
{
    s_hx_t hx;
    s_handler_open(&hx, *state, true);
    s_payload_t p;
    oq_report_t report;
    const oq_job_t *job = s_job(&p, "grant_points_unguarded", 1, 3, "order_id", S_I(7),
                                "customer_id", S_I(42), "points", S_I(3));
    s_run(hx.registry, job, &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    s_run(hx.registry, job, &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(report.result, OQ_RESULT_APPLIED);
    assert_int_equal(oq_ledger_fx_balance(hx.fx, 42), 6); /* the double grant it exists to show */
    assert_int_equal(oq_ledger_mem_grant_count(hx.fx->mem), 1);
    s_job_free(&p);
    s_handler_close(&hx);
}

static void test_handler_bad_hook_value_fails(void **state)
{
    s_hx_t hx;
    s_handler_open(&hx, *state, true);
    s_payload_t p;
    oq_report_t report;
    s_run(hx.registry,
          s_job(&p, "grant_points", 1, 4, "order_id", S_I(7), "customer_id", S_I(42), "points",
                S_I(3), NULL, "test_pause_in_txn_ms", "soon"),
          &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_non_null(strstr(report.error, "test_pause_in_txn_ms"));
    s_job_free(&p);
    s_handler_close(&hx);
}

#define S_TEST(name)                                                                               \
    cmocka_unit_test_setup_teardown(name, oq_ledger_fx_setup, oq_ledger_fx_teardown)

int main(void)
{
    /* The handler logs every outcome; the tests read reports instead. */
    oq_log_set_level(OQ_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        S_TEST(test_granted_once),
        S_TEST(test_second_call_already_granted),
        S_TEST(test_balances_exact),
        S_TEST(test_unknown_customer),
        S_TEST(test_unknown_customer_rolls_back_grant),
        S_TEST(test_conflict),
        S_TEST(test_invalid_arguments),
        S_TEST(test_serialization_failure_retried_in_place),
        S_TEST(test_deadlock_after_insert_rolls_back_then_grants),
        S_TEST(test_serialization_failure_at_commit),
        S_TEST(test_retries_exhausted_is_retry),
        S_TEST(test_connection_lost_before_commit),
        S_TEST(test_connection_lost_during_commit_is_unknown_then_already),
        S_TEST(test_data_error_fails),
        S_TEST(test_begin_fails),
        S_TEST(test_balance_overflow_fails_whole_grant),
        S_TEST(test_isolation_names),
        S_TEST(test_handler_applied_then_already_applied),
        S_TEST(test_handler_bad_payloads_fail_naming_the_field),
        S_TEST(test_handler_unknown_customer_fails),
        S_TEST(test_handler_database_errors_by_class),
        S_TEST(test_handler_hooks_off),
        S_TEST(test_handler_fail_after_commit_hook),
        S_TEST(test_handler_kill_after_commit_hook),
        S_TEST(test_handler_pause_after_commit_hook),
        S_TEST(test_handler_pause_after_commit_only_on_its_attempt),
        S_TEST(test_handler_unguarded_grants_twice),
        S_TEST(test_handler_bad_hook_value_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
