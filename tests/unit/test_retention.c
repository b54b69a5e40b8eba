/*  test_retention.c: deleting old guard rows (onceq/retention.h) against a
    real server: only rows older than the window go, in batches that add up
    across a batch boundary; a dry run counts without deleting; a filter
    keeps the rows whose status is not listed; an optional table that is
    not there is skipped, a required one is an error naming it; the first
    time column a table has is used; names that are not plain identifiers
    are refused before any SQL is sent.

    It starts a cluster of its own with deploy/pg.sh in a temp dir on a
    random port (which also runs `onceq db migrate` from the build tree) and
    stops it at the end. Label `pg`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "onceq/effects.h"
#include "onceq/log.h"
#include "pg_fixture.h"
#include "onceq/retention.h"

#define S_TEXT_LEN 1024
#define S_HOUR_S   3600
/* More rows than one batch holds, and not a multiple of it. */
#define S_MANY_ROWS (2 * OQ_PRUNE_BATCH_ROWS + 517)

static int s_setup(void **state)
{
    oq_pg_fixture_sql("TRUNCATE onceq_once");
    oq_pg_fixture_sql("DROP TABLE IF EXISTS shipment_requests");
    return 0;
}

static oq_prune_result_t s_prune_ok(const oq_prune_table_t *t, int64_t older_than_s, bool dry)
{
    oq_prune_result_t r;
    oq_pg_error_t error;
    if (oq_prune(oq_pg_fixture_admin(), t, older_than_s, dry, &r, &error) < 0)
        fail_msg("prune %s: %s", t->table, error.message);
    return r;
}

static void test_only_rows_older_than_the_window_go(void **state)
{
    oq_pg_fixture_sql(
        "INSERT INTO onceq_once (scope, key, created_at) VALUES "
        "('s', 'old-1', now() - interval '2 hours'), ('s', 'old-2', now() - interval '61 "
        "minutes'), ('s', 'young', now() - interval '59 minutes'), ('s', 'new', now())");
    oq_prune_result_t r = s_prune_ok(oq_prune_once_table(), S_HOUR_S, true);
    assert_false(r.skipped);
    assert_string_equal(r.time_column, "created_at");
    assert_int_equal(r.rows, 2);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once"), 4); /* a dry run */
    r = s_prune_ok(oq_prune_once_table(), S_HOUR_S, false);
    assert_int_equal(r.rows, 2);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once WHERE key LIKE 'old%'"),
                     0);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once"), 2);
    r = s_prune_ok(oq_prune_once_table(), S_HOUR_S, false);
    assert_int_equal(r.rows, 0);
}

static void test_batches_add_up_across_the_boundary(void **state)
{
    char sql[S_TEXT_LEN];
    snprintf(sql, sizeof sql,
             "INSERT INTO onceq_once (scope, key, created_at) SELECT 'bulk', 'k' || g, now() - "
             "interval '3 days' FROM generate_series(1, %d) g",
             S_MANY_ROWS);
    oq_pg_fixture_sql(sql);
    oq_pg_fixture_sql("INSERT INTO onceq_once (scope, key) VALUES ('bulk', 'fresh')");
    oq_prune_result_t r = s_prune_ok(oq_prune_once_table(), 2 * 24 * S_HOUR_S, false);
    assert_int_equal(r.rows, S_MANY_ROWS);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once"), 1);
}

static const char *const s_ship_columns[] = {"updated_at", "created_at", NULL};
static const char *const s_finished[] = {"confirmed", "failed", NULL};
static const oq_prune_table_t s_ship = {"shipment_requests", s_ship_columns, "status", s_finished,
                                        true};

static void test_a_filter_keeps_unfinished_rows(void **state)
{
    oq_pg_fixture_sql(
        "CREATE TABLE shipment_requests (order_id bigint PRIMARY KEY, status text NOT NULL, "
        "created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL "
        "DEFAULT now())");
    oq_pg_fixture_sql(
        "INSERT INTO shipment_requests (order_id, status, updated_at) VALUES "
        "(1, 'confirmed', now() - interval '40 days'), (2, 'failed', now() - interval '40 "
        "days'), (3, 'review', now() - interval '40 days'), (4, 'requested', now() - interval "
        "'40 days'), (5, 'confirmed', now() - interval '1 day')");
    oq_prune_result_t r = s_prune_ok(&s_ship, 30 * 24 * S_HOUR_S, false);
    assert_false(r.skipped);
    assert_string_equal(r.time_column, "updated_at");
    assert_int_equal(r.rows, 2);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT count(*) FROM shipment_requests WHERE order_id IN (1, 2)"),
        0);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM shipment_requests"), 3);
}

static void test_the_first_time_column_present_is_used(void **state)
{
    oq_pg_fixture_sql(
        "CREATE TABLE shipment_requests (order_id bigint PRIMARY KEY, status text NOT NULL, "
        "created_at timestamptz NOT NULL DEFAULT now())");
    oq_pg_fixture_sql("INSERT INTO shipment_requests (order_id, status, created_at) VALUES "
                      "(1, 'failed', now() - interval '40 days')");
    oq_prune_result_t r = s_prune_ok(&s_ship, 30 * 24 * S_HOUR_S, false);
    assert_string_equal(r.time_column, "created_at");
    assert_int_equal(r.rows, 1);
}

static void test_missing_tables_and_columns(void **state)
{
    oq_prune_result_t r = s_prune_ok(&s_ship, S_HOUR_S, false);
    assert_true(r.skipped);
    assert_non_null(strstr(r.reason, "no table shipment_requests"));

    static const char *const at[] = {"at", NULL};
    oq_prune_table_t required = {"no_such_table", at, NULL, NULL, false};
    oq_pg_error_t error;
    assert_int_equal(oq_prune(oq_pg_fixture_admin(), &required, S_HOUR_S, false, &r, &error), -1);
    assert_int_equal(error.cls, OQ_PG_ERR_FAIL);
    assert_non_null(strstr(error.message, "no_such_table"));

    oq_pg_fixture_sql("CREATE TABLE shipment_requests (order_id bigint PRIMARY KEY, state text, "
                      "updated_at timestamptz)");
    r = s_prune_ok(&s_ship, S_HOUR_S, false);
    assert_true(r.skipped);
    assert_non_null(strstr(r.reason, "no column status"));
}

static void test_names_and_windows_are_checked_first(void **state)
{
    static const char *const bad_column[] = {"created_at; DROP TABLE onceq_once", NULL};
    oq_prune_table_t bad = {"onceq_once", bad_column, NULL, NULL, false};
    oq_prune_result_t r;
    oq_pg_error_t error;
    assert_int_equal(oq_prune(oq_pg_fixture_admin(), &bad, S_HOUR_S, false, &r, &error), -1);
    assert_non_null(strstr(error.message, "plain"));
    oq_prune_table_t upper = {"Onceq_once", s_ship_columns, NULL, NULL, false};
    assert_int_equal(oq_prune(oq_pg_fixture_admin(), &upper, S_HOUR_S, false, &r, &error), -1);
    assert_int_equal(oq_prune(oq_pg_fixture_admin(), oq_prune_once_table(), 0, false, &r, &error),
                     -1);
    assert_non_null(strstr(error.message, "at least 1 second"));
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT count(*) FROM pg_tables WHERE tablename = 'onceq_once'"), 1);
}

#define S_TEST(t) cmocka_unit_test_setup_teardown(t, s_setup, NULL)

int main(void)
{
    oq_log_set_level(OQ_LOG_WARN);
    const struct CMUnitTest tests[] = {
        S_TEST(test_only_rows_older_than_the_window_go),
        S_TEST(test_batches_add_up_across_the_boundary),
        S_TEST(test_a_filter_keeps_unfinished_rows),
        S_TEST(test_the_first_time_column_present_is_used),
        S_TEST(test_missing_tables_and_columns),
        S_TEST(test_names_and_windows_are_checked_first),
    };
    return cmocka_run_group_tests(tests, oq_pg_fixture_group_setup, oq_pg_fixture_group_teardown);
}
