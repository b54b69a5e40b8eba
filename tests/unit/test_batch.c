/*  test_batch.c: batched effects over the in-memory ledger
    (points/ledger_mem.h): the effects SDK's batch runner
    (oq_txn_run_batch in onceq/effects.h), the batched grant use case
    (oq_grant_order_points_batch) and the grant_points batch function
    (oq_points_grant_batch) with its per-job reports, and the test build's
    hooked batch function. A batch commits its
    jobs together; on any error it falls back to one transaction per job,
    so that only a bad job fails; a database that is away ends the
    fallback early. Faults are injected through the ledger's seam, the way
    the real database raises them; tests/unit/test_batch_pg.c runs the
    same against PostgreSQL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "onceq/effects.h"
#include "onceq/effects_worker.h"
#include "onceq/log.h"
#include "onceq/worker.h"
#include "points/grant.h"
#include "points/handler.h"
#include "points/ledger_mem.h"
#include "ledger_fixture.h"
#include "points_hooks.h"

#define S_COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define S_I(v)     ((int64_t)(v))

/* ---- fixture ------------------------------------------------------------ */

static uint32_t s_begins(oq_ledger_fx_t *fx)
{
    return oq_ledger_mem_calls(fx->mem, OQ_LEDGER_MEM_AT_BEGIN);
}

/* Run the batched use case; checks its return value against the results
   and that no transaction is left open. */
static void s_batch(oq_ledger_fx_t *fx, const oq_grant_request_t *requests, size_t count,
                    oq_grant_result_t *results, oq_pg_error_t *batch_error)
{
    int rc =
        oq_grant_order_points_batch(fx->ledger, fx->txn, count, requests, results, batch_error);
    bool ok = true;
    for (size_t i = 0; i < count; i++)
        ok = ok && (results[i].status == OQ_GRANT_GRANTED ||
                    results[i].status == OQ_GRANT_ALREADY_GRANTED);
    assert_int_equal(rc, ok ? 0 : -1);
    assert_false(oq_ledger_mem_in_txn(fx->mem));
}

/* ---- the batched grant -------------------------------------------------- */

static void test_batch_grants_each_once_in_one_transaction(void **state)
{
    oq_ledger_fx_t *fx = *state;
    const oq_grant_request_t requests[] = {
        {5, 43, 10}, {1, 42, 1}, {4, 42, 2}, {2, 43, 20}, {3, 42, 3},
    };
    oq_grant_result_t results[S_COUNT(requests)];
    oq_pg_error_t batch_error;
    s_batch(fx, requests, S_COUNT(requests), results, &batch_error);
    for (size_t i = 0; i < S_COUNT(requests); i++) {
        assert_int_equal(results[i].status, OQ_GRANT_GRANTED);
        assert_int_equal(results[i].error.cls, OQ_PG_ERR_NONE);
    }
    assert_int_equal(batch_error.cls, OQ_PG_ERR_NONE);
    assert_int_equal(s_begins(fx), 1);
    /* One balance update per customer, with the sum. */
    assert_int_equal(oq_ledger_mem_calls(fx->mem, OQ_LEDGER_MEM_AT_ADD_TO_BALANCE), 2);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 6);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1030);
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 5);

    /* The same batch again: every grant is found, nothing is added. */
    s_batch(fx, requests, S_COUNT(requests), results, &batch_error);
    for (size_t i = 0; i < S_COUNT(requests); i++) {
        assert_int_equal(results[i].status, OQ_GRANT_ALREADY_GRANTED);
        assert_int_equal(results[i].existing_customer_id, requests[i].customer_id);
        assert_int_equal(results[i].existing_points, requests[i].points);
    }
    assert_int_equal(s_begins(fx), 2);
    assert_int_equal(oq_ledger_mem_calls(fx->mem, OQ_LEDGER_MEM_AT_ADD_TO_BALANCE), 2);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 6);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1030);
}

/* A duplicate dispatch of one order in one batch: the first is granted,
   the second finds it; a contradicting second request is a conflict of
   its own. Neither makes the batch fall back. */
static void test_batch_duplicates_inside_one_batch(void **state)
{
    oq_ledger_fx_t *fx = *state;
    const oq_grant_request_t requests[] = {
        {7, 42, 5},
        {8, 43, 1},
        {7, 42, 5},
        {8, 42, 9},
    };
    oq_grant_result_t results[S_COUNT(requests)];
    oq_pg_error_t batch_error;
    s_batch(fx, requests, S_COUNT(requests), results, &batch_error);
    assert_int_equal(results[0].status, OQ_GRANT_GRANTED);
    assert_int_equal(results[1].status, OQ_GRANT_GRANTED);
    assert_int_equal(results[2].status, OQ_GRANT_ALREADY_GRANTED);
    assert_int_equal(results[3].status, OQ_GRANT_CONFLICT);
    assert_int_equal(results[3].error.cls, OQ_PG_ERR_FAIL);
    assert_string_equal(results[3].error.message,
                        "order 8 was already granted 1 points for customer 43; not granting 9 "
                        "points to customer 42");
    assert_int_equal(results[3].existing_customer_id, 43);
    assert_int_equal(batch_error.cls, OQ_PG_ERR_NONE);
    assert_int_equal(s_begins(fx), 1);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 5);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1001);
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 2);
}

static void test_batch_duplicates_across_batches(void **state)
{
    oq_ledger_fx_t *fx = *state;
    const oq_grant_request_t first[] = {{1, 42, 1}, {2, 42, 2}, {3, 43, 3}};
    const oq_grant_request_t second[] = {{3, 43, 3}, {4, 42, 4}, {2, 42, 2}, {5, 43, 5}};
    oq_grant_result_t results[4];
    s_batch(fx, first, S_COUNT(first), results, NULL);
    s_batch(fx, second, S_COUNT(second), results, NULL);
    assert_int_equal(results[0].status, OQ_GRANT_ALREADY_GRANTED);
    assert_int_equal(results[1].status, OQ_GRANT_GRANTED);
    assert_int_equal(results[2].status, OQ_GRANT_ALREADY_GRANTED);
    assert_int_equal(results[3].status, OQ_GRANT_GRANTED);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 7);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1008);
    assert_int_equal(s_begins(fx), 2);
}

/* A customer the foreign key does not know refuses the whole INSERT: the
   batch falls back, and only that request fails, as it would alone. */
static void test_batch_bad_request_falls_back_and_fails_alone(void **state)
{
    oq_ledger_fx_t *fx = *state;
    const oq_grant_request_t requests[] = {{20, 42, 1}, {21, 99, 1}, {22, 43, 2}};
    oq_grant_result_t results[S_COUNT(requests)];
    oq_pg_error_t batch_error;
    s_batch(fx, requests, S_COUNT(requests), results, &batch_error);
    assert_int_equal(batch_error.cls, OQ_PG_ERR_FAIL);
    assert_string_equal(batch_error.sqlstate, "23503");
    assert_int_equal(results[0].status, OQ_GRANT_GRANTED);
    assert_int_equal(results[1].status, OQ_GRANT_UNKNOWN_CUSTOMER);
    assert_string_equal(results[1].error.message,
                        "customer 99 has no balance row (add it with: onceq customer add 99)");
    assert_int_equal(results[2].status, OQ_GRANT_GRANTED);
    /* The batch, then one transaction per request. */
    assert_int_equal(s_begins(fx), 1 + 3);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 1);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1002);
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 2);
}

/* An argument out of range never reaches the database; the others do, in
   one batch. */
static void test_batch_invalid_request_left_out(void **state)
{
    oq_ledger_fx_t *fx = *state;
    const oq_grant_request_t requests[] = {{30, 42, 1}, {31, 42, 0}, {32, 42, 2}};
    oq_grant_result_t results[S_COUNT(requests)];
    oq_pg_error_t batch_error;
    s_batch(fx, requests, S_COUNT(requests), results, &batch_error);
    assert_int_equal(results[0].status, OQ_GRANT_GRANTED);
    assert_int_equal(results[1].status, OQ_GRANT_INVALID);
    assert_int_equal(results[2].status, OQ_GRANT_GRANTED);
    assert_int_equal(batch_error.cls, OQ_PG_ERR_NONE);
    assert_int_equal(s_begins(fx), 1);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 3);
}

/* A serialization failure is not a reason to fall back: the batch runs
   again in place, as a single transaction would. */
static void test_batch_serialization_failure_rerun_in_place(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_ADD_TO_BALANCE, "40001", 1);
    const oq_grant_request_t requests[] = {{1, 42, 1}, {2, 43, 2}};
    oq_grant_result_t results[S_COUNT(requests)];
    oq_pg_error_t batch_error;
    s_batch(fx, requests, S_COUNT(requests), results, &batch_error);
    assert_int_equal(batch_error.cls, OQ_PG_ERR_NONE);
    assert_int_equal(results[0].status, OQ_GRANT_GRANTED);
    assert_int_equal(results[1].status, OQ_GRANT_GRANTED);
    assert_int_equal(s_begins(fx), 2);
    assert_int_equal(fx->sleeps, 1);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 1);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1002);
}

/* In-place re-runs that run out: then one transaction per request. */
static void test_batch_reruns_exhausted_fall_back(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_INSERT_GRANT, "40P01", OQ_TXN_MAX_RETRIES + 1);
    const oq_grant_request_t requests[] = {{1, 42, 1}, {2, 43, 2}};
    oq_grant_result_t results[S_COUNT(requests)];
    oq_pg_error_t batch_error;
    s_batch(fx, requests, S_COUNT(requests), results, &batch_error);
    assert_int_equal(batch_error.cls, OQ_PG_ERR_TRANSIENT);
    assert_int_equal(results[0].status, OQ_GRANT_GRANTED);
    assert_int_equal(results[1].status, OQ_GRANT_GRANTED);
    assert_int_equal(s_begins(fx), OQ_TXN_MAX_RETRIES + 1 + 2);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 1);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1002);
}

/* A data error of the batch's own statements (an overflowing sum, say)
   falls back; alone, each request gets its own answer. */
static void test_batch_data_error_falls_back(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_ADD_TO_BALANCE, "22003", 1);
    const oq_grant_request_t requests[] = {{1, 42, 1}, {2, 42, 2}, {3, 43, 3}};
    oq_grant_result_t results[S_COUNT(requests)];
    oq_pg_error_t batch_error;
    s_batch(fx, requests, S_COUNT(requests), results, &batch_error);
    assert_int_equal(batch_error.cls, OQ_PG_ERR_FAIL);
    assert_string_equal(batch_error.sqlstate, "22003");
    for (size_t i = 0; i < S_COUNT(requests); i++)
        assert_int_equal(results[i].status, OQ_GRANT_GRANTED);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 3);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1003);
    assert_int_equal(s_begins(fx), 1 + 3);
}

/* The connection lost in the middle of the batch: nothing committed; the
   fallback's first transaction connects again and every grant goes in. */
static void test_batch_connection_lost_mid_batch(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_ADD_TO_BALANCE, NULL, 1);
    const oq_grant_request_t requests[] = {{1, 42, 1}, {2, 43, 2}, {3, 42, 3}};
    oq_grant_result_t results[S_COUNT(requests)];
    oq_pg_error_t batch_error;
    s_batch(fx, requests, S_COUNT(requests), results, &batch_error);
    assert_int_equal(batch_error.cls, OQ_PG_ERR_CONNECTION);
    for (size_t i = 0; i < S_COUNT(requests); i++)
        assert_int_equal(results[i].status, OQ_GRANT_GRANTED);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 4);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1002);
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 3);
}

/* COMMIT went through and its answer was lost: each request, run alone,
   finds its grant. Nothing is added twice. */
static void test_batch_commit_unknown_then_found(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_COMMIT, NULL, 1);
    const oq_grant_request_t requests[] = {{1, 42, 1}, {2, 43, 2}};
    oq_grant_result_t results[S_COUNT(requests)];
    oq_pg_error_t batch_error;
    s_batch(fx, requests, S_COUNT(requests), results, &batch_error);
    assert_int_equal(batch_error.cls, OQ_PG_ERR_UNKNOWN);
    assert_int_equal(results[0].status, OQ_GRANT_ALREADY_GRANTED);
    assert_int_equal(results[1].status, OQ_GRANT_ALREADY_GRANTED);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 1);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1002);
}

/* The database away: the batch fails, the first request alone fails the
   same way, and the others are not tried (each would wait for a
   connection in turn); all are handed back, none fails. */
static void test_batch_database_away_ends_fallback(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_BEGIN, NULL, 100);
    const oq_grant_request_t requests[] = {{1, 42, 1}, {2, 43, 2}, {3, 42, 3}, {4, 43, 4}};
    oq_grant_result_t results[S_COUNT(requests)];
    oq_pg_error_t batch_error;
    s_batch(fx, requests, S_COUNT(requests), results, &batch_error);
    assert_int_equal(batch_error.cls, OQ_PG_ERR_CONNECTION);
    for (size_t i = 0; i < S_COUNT(requests); i++) {
        assert_int_equal(results[i].status, OQ_GRANT_ERROR);
        assert_int_equal(results[i].error.cls, OQ_PG_ERR_CONNECTION);
        assert_int_equal(oq_effects_outcome(results[i].error.cls), OQ_OUTCOME_UNAVAILABLE);
    }
    assert_int_equal(s_begins(fx), 2);
    assert_int_equal(oq_ledger_mem_grant_count(fx->mem), 0);
}

/* ---- the runner on its own ---------------------------------------------- */

typedef struct {
    uint32_t batch_runs, one_runs;
    bool item_seen_dirty; /* a re-run found what the rolled-back one set */
    oq_ledger_mem_t *mem;
} s_count_t;

static int s_count_batch(oq_txn_t *txn, void *arg, size_t count, oq_batch_item_t *items,
                         oq_pg_error_t *error)
{
    (void)txn;
    s_count_t *c = arg;
    c->batch_runs++;
    for (size_t i = 0; i < count; i++) {
        if (items[i].applied || items[i].error.cls != OQ_PG_ERR_NONE)
            c->item_seen_dirty = true;
        items[i].applied = true;
    }
    if (c->batch_runs == 1) {
        oq_pg_errors_set(error, OQ_PG_ERR_RETRY_TXN, "40001", "could not serialize");
        return -1;
    }
    return 0;
}

static int s_count_one(oq_txn_t *txn, void *arg, size_t index, bool *applied, oq_pg_error_t *error)
{
    (void)txn, (void)index, (void)error;
    ((s_count_t *)arg)->one_runs++;
    *applied = true;
    return 0;
}

/* A re-run of the batch starts from cleared items; a batch of one runs
   the single body. */
static void test_runner_reruns_start_clean_and_one_runs_alone(void **state)
{
    oq_ledger_fx_t *fx = *state;
    s_count_t c = {0};
    oq_batch_item_t items[3];
    assert_int_equal(oq_txn_run_batch(fx->txn, 3, s_count_batch, s_count_one, &c, items, NULL), 0);
    assert_int_equal(c.batch_runs, 2);
    assert_false(c.item_seen_dirty);
    assert_int_equal(c.one_runs, 0);
    for (size_t i = 0; i < 3; i++)
        assert_true(items[i].applied);

    c = (s_count_t){0};
    assert_int_equal(oq_txn_run_batch(fx->txn, 1, s_count_batch, s_count_one, &c, items, NULL), 0);
    assert_int_equal(c.batch_runs, 0);
    assert_int_equal(c.one_runs, 1);
    assert_true(items[0].applied);
}

static void test_report_item(void **state)
{
    (void)state;
    oq_job_t job = {.id = 1, .type = "grant_points"};
    oq_batch_item_t item = {.applied = true};
    oq_report_t report = {0};
    oq_effects_report_item(&report, &job, &item);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(report.result, OQ_RESULT_APPLIED);
    item.applied = false;
    memset(&report, 0, sizeof report);
    oq_effects_report_item(&report, &job, &item);
    assert_int_equal(report.result, OQ_RESULT_ALREADY_APPLIED);
    oq_pg_errors_set(&item.error, OQ_PG_ERR_FAIL, "23514", "violates check constraint");
    memset(&report, 0, sizeof report);
    oq_effects_report_item(&report, &job, &item);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_non_null(strstr(report.error, "SQLSTATE 23514"));
    oq_pg_errors_set(&item.error, OQ_PG_ERR_CONNECTION, NULL, "server closed the connection");
    memset(&report, 0, sizeof report);
    oq_effects_report_item(&report, &job, &item);
    assert_int_equal(report.outcome, OQ_OUTCOME_UNAVAILABLE);
}

/* ---- the batch function: reports per job -------------------------------- */

typedef struct {
    msgpack_sbuffer buf;
    msgpack_unpacked unpacked;
    oq_job_t job;
} s_payload_t;

/* A grant_points job with a test hook (hook NULL: none), attempt 1;
   points < 0 leaves the field out. */
static const oq_job_t *s_job_hook(s_payload_t *p, uint64_t id, int64_t order, int64_t customer,
                                  int64_t points, const char *hook, int64_t hook_value)
{
    memset(p, 0, sizeof *p);
    msgpack_sbuffer_init(&p->buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &p->buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, (points < 0 ? 2 : 3) + (hook ? 1 : 0));
    if (hook) {
        oq_proto_pack_cstr(&pk, hook);
        msgpack_pack_int64(&pk, hook_value);
    }
    oq_proto_pack_cstr(&pk, "order_id");
    msgpack_pack_int64(&pk, order);
    oq_proto_pack_cstr(&pk, "customer_id");
    msgpack_pack_int64(&pk, customer);
    if (points >= 0) {
        oq_proto_pack_cstr(&pk, "points");
        msgpack_pack_int64(&pk, points);
    }
    msgpack_unpacked_init(&p->unpacked);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&p->unpacked, p->buf.data, p->buf.size, &off),
                     MSGPACK_UNPACK_SUCCESS);
    p->job = (oq_job_t){.id = id,
                        .type = "grant_points",
                        .queue = "default",
                        .attempt = 1,
                        .max_tries = 3,
                        .timeout_ms = 60000,
                        .payload = &p->unpacked.data};
    return &p->job;
}

/* A grant_points job; points < 0 leaves the field out. */
static const oq_job_t *s_job(s_payload_t *p, uint64_t id, int64_t order, int64_t customer,
                             int64_t points)
{
    return s_job_hook(p, id, order, customer, points, NULL, 0);
}

static void s_job_free(s_payload_t *p)
{
    msgpack_unpacked_destroy(&p->unpacked);
    msgpack_sbuffer_destroy(&p->buf);
}

/* Every job gets the report the handler would give it alone: a payload
   refused, a duplicate, an unknown customer; the good ones applied. */
static void test_batch_function_reports_each_job(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_points_handler_t *handler = oq_points_handler_new_on(fx->ledger, fx->txn);
    oq_registry_t *registry = oq_registry_new();
    assert_int_equal(oq_points_handler_register(handler, registry), 0);

    s_payload_t p[5];
    const oq_job_t *jobs[] = {
        s_job(&p[0], 1, 30, 42, 5), s_job(&p[1], 2, 31, 42, -1), s_job(&p[2], 3, 30, 42, 5),
        s_job(&p[3], 4, 32, 99, 1), s_job(&p[4], 5, 33, 43, 2),
    };
    oq_report_t reports[S_COUNT(jobs)];
    memset(reports, 0, sizeof reports);
    oq_points_grant_batch(jobs, S_COUNT(jobs), handler, reports);

    assert_int_equal(reports[0].outcome, OQ_OUTCOME_OK);
    assert_int_equal(reports[0].result, OQ_RESULT_APPLIED);
    assert_int_equal(reports[1].outcome, OQ_OUTCOME_FAIL);
    assert_string_equal(reports[1].error, "grant_points: payload field \"points\" is missing");
    assert_int_equal(reports[2].outcome, OQ_OUTCOME_OK);
    assert_int_equal(reports[2].result, OQ_RESULT_ALREADY_APPLIED);
    assert_int_equal(reports[3].outcome, OQ_OUTCOME_FAIL);
    assert_string_equal(reports[3].error, "grant_points: customer 99 has no balance row (add it "
                                          "with: onceq customer add 99)");
    assert_int_equal(reports[4].outcome, OQ_OUTCOME_OK);
    assert_int_equal(reports[4].result, OQ_RESULT_APPLIED);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 5);
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1002);

    /* The database away: every job that reached it is handed back. */
    oq_ledger_mem_inject(fx->mem, OQ_LEDGER_MEM_AT_BEGIN, NULL, 100);
    const oq_job_t *again[] = {jobs[4], jobs[1], jobs[0]};
    memset(reports, 0, sizeof reports);
    oq_points_grant_batch(again, S_COUNT(again), handler, reports);
    assert_int_equal(reports[0].outcome, OQ_OUTCOME_UNAVAILABLE);
    assert_int_equal(reports[1].outcome, OQ_OUTCOME_FAIL);
    assert_int_equal(reports[2].outcome, OQ_OUTCOME_UNAVAILABLE);

    for (size_t i = 0; i < S_COUNT(p); i++)
        s_job_free(&p[i]);
    oq_registry_destroy(&registry);
    oq_points_handler_destroy(&handler);
}

/* ---- the test build's hooked batch function ----------------------------- */

/* The after-COMMIT hook acts on its own job after the batch's COMMIT; a
   job that pauses inside its transaction runs alone, hooks and all. */
static void test_hooked_batch(void **state)
{
    oq_ledger_fx_t *fx = *state;
    oq_points_handler_t *handler = oq_points_handler_new_on(fx->ledger, fx->txn);
    s_payload_t p[3];
    const oq_job_t *jobs[] = {
        s_job(&p[0], 1, 40, 42, 1),
        s_job_hook(&p[1], 2, 41, 42, 2, "test_fail_after_commit_attempt", 1),
        s_job_hook(&p[2], 3, 42, 43, 3, "test_pause_in_txn_ms", 1),
    };
    oq_report_t reports[S_COUNT(jobs)];
    memset(reports, 0, sizeof reports);
    oq_points_test_grant_batch(jobs, S_COUNT(jobs), handler, reports);
    assert_int_equal(reports[0].outcome, OQ_OUTCOME_OK);
    assert_int_equal(reports[0].result, OQ_RESULT_APPLIED);
    assert_int_equal(reports[1].outcome, OQ_OUTCOME_RETRY);
    assert_string_equal(reports[1].error, "test hook: failing after commit");
    assert_int_equal(reports[2].outcome, OQ_OUTCOME_OK);
    /* The paused job alone, then the other two in one batch. */
    assert_int_equal(s_begins(fx), 2);
    assert_int_equal(oq_ledger_fx_balance(fx, 42), 3); /* committed all the same */
    assert_int_equal(oq_ledger_fx_balance(fx, 43), 1003);
    for (size_t i = 0; i < S_COUNT(p); i++)
        s_job_free(&p[i]);
    oq_points_handler_destroy(&handler);
}

/* The kill hook of one job ends the process after the batch's COMMIT:
   every job of the batch is committed and none acked. */
static void test_hooked_batch_kill_after_commit(void **state)
{
    oq_ledger_fx_t *fx = *state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        oq_points_handler_t *handler = oq_points_handler_new_on(fx->ledger, fx->txn);
        s_payload_t p[2];
        const oq_job_t *jobs[] = {
            s_job(&p[0], 1, 50, 42, 1),
            s_job_hook(&p[1], 2, 51, 42, 2, "test_kill_after_commit_attempt", 1),
        };
        oq_report_t reports[S_COUNT(jobs)];
        oq_points_test_grant_batch(jobs, S_COUNT(jobs), handler, reports);
        _exit(0); /* not reached */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
}

#define S_TEST(name)                                                                               \
    cmocka_unit_test_setup_teardown(name, oq_ledger_fx_setup, oq_ledger_fx_teardown)

int main(void)
{
    oq_log_set_level(OQ_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        S_TEST(test_batch_grants_each_once_in_one_transaction),
        S_TEST(test_batch_duplicates_inside_one_batch),
        S_TEST(test_batch_duplicates_across_batches),
        S_TEST(test_batch_bad_request_falls_back_and_fails_alone),
        S_TEST(test_batch_invalid_request_left_out),
        S_TEST(test_batch_serialization_failure_rerun_in_place),
        S_TEST(test_batch_reruns_exhausted_fall_back),
        S_TEST(test_batch_data_error_falls_back),
        S_TEST(test_batch_connection_lost_mid_batch),
        S_TEST(test_batch_commit_unknown_then_found),
        S_TEST(test_batch_database_away_ends_fallback),
        S_TEST(test_runner_reruns_start_clean_and_one_runs_alone),
        S_TEST(test_report_item),
        S_TEST(test_batch_function_reports_each_job),
        S_TEST(test_hooked_batch),
        S_TEST(test_hooked_batch_kill_after_commit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
