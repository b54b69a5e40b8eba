/*  test_pg.c: the effects SDK and the points ledger against a real server:
    migrations (idempotent, concurrent, one transaction per file), the PG
    ledger under the grant use case, real serialization failures re-run in
    place, a lost connection and the reconnect, the job's statement_timeout,
    and the onceq tool's database commands.

    It starts a cluster of its own with deploy/pg.sh in a temp dir on a
    random port (which also runs `onceq db migrate` from the build tree) and
    stops it at the end. Label `pg`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "onceq/clock.h"
#include "onceq/log.h"
#include "pg_fixture.h"
#include "onceq/effects.h"
#include "points/grant.h"
#include "points/ledger_pg.h"

#ifndef ONCEQ_SOURCE_DIR
#error "ONCEQ_SOURCE_DIR must name the source tree"
#endif
#ifndef ONCEQ_CLI
#error "ONCEQ_CLI must name the onceq binary"
#endif

#define S_TEXT_LEN 1024
/* The files in deploy/sql (0001_points, 0002_once, 0003_shipments), numbered from 1. */
#define S_MIGRATIONS 3
/* pg_terminate_backend waits this long for the session to be gone. */
#define S_TERMINATE_WAIT_MS 5000

/* ---- helpers ------------------------------------------------------------ */

/* Run the onceq tool with args; its stdout in out, its exit status back. */
static int s_onceq(const char *args, char *out, size_t len)
{
    char cmd[S_TEXT_LEN];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", ONCEQ_CLI, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = 0;
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Each test: no session of an earlier test left (one that failed an
   assertion may have left a transaction holding row locks, which the
   TRUNCATE would wait on for good), empty point tables, customers 1 and
   2 at 0. */
static int s_setup(void **state)
{
    oq_pg_fixture_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = current_database() AND pid <> pg_backend_pid()");
    oq_pg_fixture_sql("TRUNCATE point_grants, point_balances");
    oq_pg_fixture_sql("INSERT INTO point_balances (customer_id, balance) VALUES (1, 0), (2, 0)");
    return 0;
}

/* A worker's view: its connection, ledger and runner. */
typedef struct {
    oq_pg_t *pg;
    oq_ledger_t *ledger;
    oq_txn_t *txn;
} s_worker_t;

static void s_worker_open(s_worker_t *w, oq_txn_isolation_t isolation)
{
    w->pg = oq_pg_new(oq_pg_fixture_url(), "test_pg_worker");
    w->ledger = oq_ledger_pg_new(w->pg);
    w->txn = oq_txn_new(oq_txn_pg_ops(), w->pg, isolation);
}

static void s_worker_close(s_worker_t *w)
{
    oq_txn_destroy(&w->txn);
    oq_ledger_destroy(&w->ledger);
    oq_pg_destroy(&w->pg);
}

static oq_grant_status_t s_grant(s_worker_t *w, int64_t order, int64_t customer, int64_t points,
                                 oq_grant_result_t *r)
{
    oq_grant_order_points(w->ledger, w->txn, order, customer, points, NULL, r);
    return r->status;
}

/* ---- migrations --------------------------------------------------------- */

static void test_migrate_is_idempotent(void **state)
{
    /* pg.sh start has applied the migrations with the onceq tool. */
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_migrations"), S_MIGRATIONS);
    uint32_t applied, latest;
    oq_pg_error_t error;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(oq_migrate_run(oq_pg_fixture_admin(), ONCEQ_SOURCE_DIR "/deploy/sql", NULL,
                                        NULL, &applied, &latest, &error),
                         0);
        assert_int_equal(applied, 0);
        assert_int_equal(latest, S_MIGRATIONS);
    }
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_migrations"), S_MIGRATIONS);
    char out[S_TEXT_LEN];
    char args[S_TEXT_LEN];
    snprintf(args, sizeof args, "db migrate --database '%s'", oq_pg_fixture_url());
    assert_int_equal(s_onceq(args, out, sizeof out), 0);
    assert_non_null(strstr(out, "up to date"));
}

/* Two migrators at once on a fresh database: one applies, the other waits
   for the lock and finds it done. */
static void test_migrate_concurrent(void **state)
{
    oq_pg_fixture_sql("DROP DATABASE IF EXISTS onceq_race");
    oq_pg_fixture_sql("CREATE DATABASE onceq_race");
    char url[512], cmd[S_TEXT_LEN];
    oq_pg_fixture_url_as("onceq_race", "onceq", url, sizeof url);
    snprintf(cmd, sizeof cmd, "'%s' db migrate --database '%s' 2>&1", ONCEQ_CLI, url);
    FILE *a = popen(cmd, "r"), *b = popen(cmd, "r");
    assert_non_null(a);
    assert_non_null(b);
    char out_a[S_TEXT_LEN] = {0}, out_b[S_TEXT_LEN] = {0};
    size_t na = fread(out_a, 1, sizeof out_a - 1, a), nb = fread(out_b, 1, sizeof out_b - 1, b);
    out_a[na] = 0;
    out_b[nb] = 0;
    assert_int_equal(pclose(a), 0);
    assert_int_equal(pclose(b), 0);
    int applied = (strstr(out_a, "applied 0001_points") != NULL) +
                  (strstr(out_b, "applied 0001_points") != NULL);
    int up_to_date = (strstr(out_a, "up to date") != NULL) + (strstr(out_b, "up to date") != NULL);
    if (applied != 1 || up_to_date != 1)
        fail_msg("first: %s\nsecond: %s", out_a, out_b);
}

static void s_write(const char *dir, const char *file, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Each file is one transaction with its record: a broken file leaves
   neither half of itself nor a record, and the ones before it stay. */
static void test_migrate_broken_file_rolls_back(void **state)
{
    oq_pg_fixture_sql("DROP DATABASE IF EXISTS onceq_broken");
    oq_pg_fixture_sql("CREATE DATABASE onceq_broken");
    char dir[] = "/tmp/onceq-test-sql-XXXXXX";
    assert_non_null(mkdtemp(dir));
    s_write(dir, "0001_ok.sql", "CREATE TABLE t_ok (x int);\n");
    s_write(dir, "0002_broken.sql", "CREATE TABLE t_half (x int);\nSELEC 1;\n");
    s_write(dir, "README", "not a migration\n");
    char url[512];
    oq_pg_fixture_url_as("onceq_broken", "onceq", url, sizeof url);
    oq_pg_t *pg = oq_pg_new(url, "test_pg");
    uint32_t applied, latest;
    oq_pg_error_t error;
    assert_int_equal(oq_migrate_run(pg, dir, NULL, NULL, &applied, &latest, &error), -1);
    assert_int_equal(applied, 1);
    assert_int_equal(error.cls, OQ_PG_ERR_FAIL);
    assert_string_equal(error.sqlstate, "42601");
    assert_non_null(strstr(error.message, "0002_broken.sql"));
    PGresult *res;
    assert_int_equal(oq_pg_exec(pg,
                                "SELECT (SELECT count(*) FROM onceq_migrations), "
                                "to_regclass('t_ok') IS NOT NULL, to_regclass('t_half') IS NULL",
                                0, NULL, &res, &error),
                     0);
    assert_string_equal(PQgetvalue(res, 0, 0), "1");
    assert_string_equal(PQgetvalue(res, 0, 1), "t");
    assert_string_equal(PQgetvalue(res, 0, 2), "t");
    PQclear(res);

    /* A .sql file with a bad name stops the run before anything. */
    s_write(dir, "2_typo.sql", "SELECT 1;\n");
    assert_int_equal(oq_migrate_run(pg, dir, NULL, NULL, &applied, &latest, &error), -1);
    assert_int_equal(applied, 0);
    assert_non_null(strstr(error.message, "2_typo.sql"));
    oq_pg_destroy(&pg);
    char cmd[S_TEXT_LEN];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- the PG ledger under the use case ----------------------------------- */

static void test_grant_once_on_postgres(void **state)
{
    s_worker_t w;
    s_worker_open(&w, OQ_TXN_READ_COMMITTED);
    oq_grant_result_t r;
    assert_int_equal(s_grant(&w, 100, 1, 40, &r), OQ_GRANT_GRANTED);
    assert_int_equal(s_grant(&w, 100, 1, 40, &r), OQ_GRANT_ALREADY_GRANTED);
    assert_int_equal(r.existing_customer_id, 1);
    assert_int_equal(r.existing_points, 40);
    assert_int_equal(s_grant(&w, 101, 1, 2, &r), OQ_GRANT_GRANTED);
    assert_int_equal(s_grant(&w, 100, 2, 40, &r), OQ_GRANT_CONFLICT);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT balance FROM point_balances WHERE customer_id = 1"), 42);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT balance FROM point_balances WHERE customer_id = 2"), 0);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM point_grants"), 2);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT count(*) FROM point_grants WHERE reason = 'order_points'"),
        2);

    /* Unknown customer: refused by the foreign key, nothing recorded. */
    assert_int_equal(s_grant(&w, 102, 999, 5, &r), OQ_GRANT_UNKNOWN_CUSTOMER);
    assert_non_null(strstr(r.error.message, "onceq customer add 999"));
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT count(*) FROM point_grants WHERE order_id = 102"), 0);
    /* The connection is fine after the aborted transaction. */
    assert_int_equal(s_grant(&w, 103, 2, 5, &r), OQ_GRANT_GRANTED);
    s_worker_close(&w);
}

/* Values travel as parameters: text that would break spliced SQL is data. */
static void test_parameters_are_bound(void **state)
{
    const char *hostile = "x'); DROP TABLE point_grants; --";
    const char *params[] = {hostile};
    PGresult *res;
    oq_pg_error_t error;
    assert_int_equal(oq_pg_exec(oq_pg_fixture_admin(), "SELECT $1::text", 1, params, &res, &error),
                     0);
    assert_string_equal(PQgetvalue(res, 0, 0), hostile);
    PQclear(res);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM point_grants"), 0);
}

/* REPEATABLE READ: another session changes the balance after this one's
   snapshot; the UPDATE fails with 40001 and the runner re-runs the whole
   transaction, which then passes. */
typedef struct {
    s_worker_t *w;
    int runs;
} s_rr_t;

static int s_rr_body(oq_txn_t *txn, void *arg, oq_pg_error_t *error)
{
    s_rr_t *ctx = arg;
    ctx->runs++;
    PGresult *res;
    if (oq_pg_exec(ctx->w->pg, "SELECT balance FROM point_balances WHERE customer_id = 1", 0, NULL,
                   &res, error) < 0)
        return -1;
    PQclear(res);
    if (ctx->runs == 1)
        oq_pg_fixture_sql("UPDATE point_balances SET balance = balance + 1 WHERE customer_id = 1");
    bool found;
    return oq_ledger_add_to_balance(ctx->w->ledger, 1, 10, &found, error);
}

static void test_serialization_failure_rerun_on_postgres(void **state)
{
    s_worker_t w;
    s_worker_open(&w, OQ_TXN_REPEATABLE_READ);
    s_rr_t ctx = {&w, 0};
    oq_pg_error_t error;
    assert_int_equal(oq_txn_run(w.txn, s_rr_body, &ctx, &error), 0);
    assert_int_equal(ctx.runs, 2);
    assert_int_equal(oq_txn_attempts(w.txn), 2);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT balance FROM point_balances WHERE customer_id = 1"), 11);
    s_worker_close(&w);
}

/* ---- connection loss ---------------------------------------------------- */

static void s_terminate(const oq_pg_t *pg)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d, %d)", oq_pg_backend_pid(pg),
             S_TERMINATE_WAIT_MS);
    oq_pg_fixture_sql(sql);
}

static void test_connection_lost_then_reconnect(void **state)
{
    s_worker_t w;
    s_worker_open(&w, OQ_TXN_READ_COMMITTED);
    oq_pg_error_t error;
    assert_int_equal(oq_pg_connect(w.pg, &error), 0);
    s_terminate(w.pg);
    /* A plain statement on the dead connection: classified, dropped. */
    assert_int_equal(oq_pg_exec(w.pg, "SELECT 1", 0, NULL, NULL, &error), -1);
    assert_int_equal(error.cls, OQ_PG_ERR_CONNECTION);
    assert_false(oq_pg_connected(w.pg));
    /* The next statement connects again. */
    assert_int_equal(oq_pg_exec(w.pg, "SELECT 1", 0, NULL, NULL, &error), 0);

    /* A connection that died while idle is replaced at BEGIN: the grant
       goes through without a retry. */
    s_terminate(w.pg);
    oq_grant_result_t r;
    assert_int_equal(s_grant(&w, 200, 1, 7, &r), OQ_GRANT_GRANTED);
    s_worker_close(&w);
}

/* Lost in the middle of the transaction: retry the job, nothing written. */
typedef struct {
    s_worker_t *w;
} s_mid_t;

static int s_mid_body(oq_txn_t *txn, void *arg, oq_pg_error_t *error)
{
    s_mid_t *ctx = arg;
    oq_ledger_grant_t grant = {300, OQ_GRANT_REASON_ORDER, 1, 9};
    oq_ledger_insert_t inserted;
    if (oq_ledger_insert_grant(ctx->w->ledger, &grant, &inserted, error) < 0)
        return -1;
    s_terminate(ctx->w->pg);
    bool found;
    return oq_ledger_add_to_balance(ctx->w->ledger, 1, 9, &found, error);
}

static void test_connection_lost_inside_transaction(void **state)
{
    s_worker_t w;
    s_worker_open(&w, OQ_TXN_READ_COMMITTED);
    s_mid_t ctx = {&w};
    oq_pg_error_t error;
    assert_int_equal(oq_txn_run(w.txn, s_mid_body, &ctx, &error), -1);
    assert_int_equal(error.cls, OQ_PG_ERR_CONNECTION);
    assert_int_equal(oq_pg_errors_verdict(error.cls), OQ_EFFECTS_UNAVAILABLE);
    assert_true(oq_pg_errors_infrastructure(error.cls));
    assert_int_equal(oq_txn_attempts(w.txn), 1);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT count(*) FROM point_grants WHERE order_id = 300"), 0);
    /* The job's retry. */
    oq_grant_result_t r;
    assert_int_equal(s_grant(&w, 300, 1, 9, &r), OQ_GRANT_GRANTED);
    s_worker_close(&w);
}

/* ---- the database unavailable ------------------------------------------- */

/* A connection the server refuses: no slot left (here the role's
   CONNECTION LIMIT, which answers 53300 like max_connections does). The
   error carries the server's SQLSTATE and reads as one line, and it is
   infrastructure: a worker hands the job back without using a try. */
static void test_refused_connection_is_infrastructure(void **state)
{
    oq_pg_fixture_sql("DROP ROLE IF EXISTS onceq_limited");
    oq_pg_fixture_sql("CREATE ROLE onceq_limited LOGIN CONNECTION LIMIT 1");
    char url[600];
    oq_pg_fixture_url_as("onceq", "onceq_limited", url, sizeof url);
    oq_pg_t *first = oq_pg_new(url, "test_pg_first");
    oq_pg_t *second = oq_pg_new(url, "test_pg_second");
    oq_pg_error_t error;
    assert_int_equal(oq_pg_connect(first, &error), 0);
    assert_int_equal(oq_pg_connect(second, &error), -1);
    assert_string_equal(error.sqlstate, "53300");
    assert_int_equal(error.cls, OQ_PG_ERR_CONNECTION);
    assert_true(oq_pg_errors_infrastructure(error.cls));
    assert_non_null(strstr(error.message, "cannot connect to the database"));
    assert_non_null(strstr(error.message, "too many connections"));
    assert_null(strstr(error.message, "53300"));
    assert_null(strstr(error.message, "LOCATION"));
    assert_false(oq_pg_connected(second));

    /* A statement's errors still read plainly on a connection that came up
       with the verbose setting that reads the refusal's code. */
    assert_int_equal(oq_pg_exec(first, "SELECT 1/0", 0, NULL, NULL, &error), -1);
    assert_string_equal(error.sqlstate, "22012");
    assert_string_equal(error.message, "division by zero");

    /* Once the slot is free the same handle connects (the server frees it
       when the first session's process has gone, a moment after the
       close). */
    assert_true(oq_pg_disconnect(first));
    assert_false(oq_pg_connected(first));
    int rc = -1;
    for (int i = 0; i < 250 && (rc = oq_pg_connect(second, &error)) < 0; i++)
        usleep(20 * 1000);
    assert_int_equal(rc, 0);
    oq_pg_destroy(&first);
    oq_pg_destroy(&second);
    oq_pg_fixture_sql("DROP ROLE onceq_limited");
}

/* Nothing listens: cannot connect, infrastructure, without a SQLSTATE. */
static void test_cannot_connect_is_infrastructure(void **state)
{
    oq_pg_t *pg = oq_pg_new("host=127.0.0.1 port=1 dbname=x connect_timeout=2", "test_pg");
    oq_pg_error_t error;
    assert_int_equal(oq_pg_exec(pg, "SELECT 1", 0, NULL, NULL, &error), -1);
    assert_int_equal(error.cls, OQ_PG_ERR_CONNECTION);
    assert_string_equal(error.sqlstate, "");
    assert_true(oq_pg_errors_infrastructure(error.cls));
    oq_pg_destroy(&pg);
}

/* The probe connects and keeps the connection for the next job (no second
   connection); release lets it go, and the next statement connects again. */
static void test_probe_and_release(void **state)
{
    oq_effects_t *fx = oq_effects_new(oq_pg_fixture_url(), OQ_TXN_READ_COMMITTED, "test_pg_probe");
    oq_pg_error_t error;
    assert_false(oq_pg_connected(oq_effects_pg(fx)));
    assert_int_equal(oq_effects_probe(fx, &error), 0);
    assert_true(oq_pg_connected(oq_effects_pg(fx)));
    int pid = oq_pg_backend_pid(oq_effects_pg(fx));
    assert_int_equal(oq_effects_probe(fx, &error), 0);
    assert_int_equal(oq_pg_backend_pid(oq_effects_pg(fx)), pid);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM pg_stat_activity "
                                           "WHERE application_name = 'test_pg_probe'"),
                     1);

    oq_effects_release(fx);
    assert_false(oq_pg_connected(oq_effects_pg(fx)));
    oq_effects_release(fx); /* nothing to release: no harm */
    /* The server sees the session end (a clean close, not a lost one). */
    for (int i = 0;
         i < 100 && oq_pg_fixture_sql_int("SELECT count(*) FROM pg_stat_activity "
                                          "WHERE application_name = 'test_pg_probe'") != 0;
         i++)
        usleep(20 * 1000);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM pg_stat_activity "
                                           "WHERE application_name = 'test_pg_probe'"),
                     0);
    oq_effects_begin_job(fx, 5000);
    assert_int_equal(oq_pg_exec(oq_effects_pg(fx), "SELECT 1", 0, NULL, NULL, &error), 0);
    assert_true(oq_pg_connected(oq_effects_pg(fx)));
    oq_effects_destroy(&fx);

    /* A probe of a database that is not there fails, classified. */
    fx = oq_effects_new("host=127.0.0.1 port=1 dbname=x", OQ_TXN_READ_COMMITTED, "test_pg");
    assert_int_equal(oq_effects_probe(fx, &error), -1);
    assert_int_equal(error.cls, OQ_PG_ERR_CONNECTION);
    oq_effects_destroy(&fx);
}

/* Handlers of one process on one database share one handle, and so one
   connection; another isolation level is another handle. Each user lets
   go of it, and the last one closes it. */
static void test_shared_handle_is_one_connection(void **state)
{
    oq_effects_t *points =
        oq_effects_shared(oq_pg_fixture_url(), OQ_TXN_READ_COMMITTED, "test_pg_shared");
    oq_effects_t *shipments =
        oq_effects_shared(oq_pg_fixture_url(), OQ_TXN_READ_COMMITTED, "test_pg_shared");
    oq_effects_t *other =
        oq_effects_shared(oq_pg_fixture_url(), OQ_TXN_SERIALIZABLE, "test_pg_shared");
    assert_ptr_equal(points, shipments);
    assert_ptr_not_equal(points, other);
    oq_pg_error_t error;
    assert_int_equal(oq_effects_probe(points, &error), 0);
    assert_int_equal(oq_effects_probe(shipments, &error), 0);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM pg_stat_activity "
                                           "WHERE application_name = 'test_pg_shared'"),
                     1);
    oq_effects_destroy(&points);
    assert_null(points);
    /* Still open for the other user. */
    assert_true(oq_pg_connected(oq_effects_pg(shipments)));
    assert_int_equal(oq_pg_exec(oq_effects_pg(shipments), "SELECT 1", 0, NULL, NULL, &error), 0);
    oq_effects_destroy(&shipments);
    oq_effects_destroy(&other);
    /* The last user closed it; a new call makes a new one. */
    oq_effects_t *again =
        oq_effects_shared(oq_pg_fixture_url(), OQ_TXN_READ_COMMITTED, "test_pg_shared");
    assert_false(oq_pg_connected(oq_effects_pg(again)));
    oq_effects_destroy(&again);
}

/* ---- the job's timeout ---------------------------------------------------- */

/* Another session holds the same order's grant row uncommitted (a second
   delivery of the job, running late): this one waits on the unique key,
   and statement_timeout ends the wait before the job's timeout. */
static void test_statement_timeout_from_job_timeout(void **state)
{
    s_worker_t w;
    s_worker_open(&w, OQ_TXN_READ_COMMITTED);
    oq_pg_t *other = oq_pg_new(oq_pg_fixture_url(), "test_pg_other");
    oq_pg_error_t error;
    assert_int_equal(oq_pg_begin(other, "BEGIN", &error), 0);
    assert_int_equal(oq_pg_exec(other,
                                "INSERT INTO point_grants (order_id, reason, customer_id, points) "
                                "VALUES (400, 'order_points', 1, 5)",
                                0, NULL, NULL, &error),
                     0);

    const int64_t job_timeout_ms = 1000;
    oq_pg_set_timeout(w.pg, job_timeout_ms);
    int64_t start_ms = oq_clock_now_ms(oq_clock_system());
    oq_grant_result_t r;
    assert_int_equal(s_grant(&w, 400, 1, 5, &r), OQ_GRANT_ERROR);
    int64_t took_ms = oq_clock_now_ms(oq_clock_system()) - start_ms;
    assert_string_equal(r.error.sqlstate, "57014");
    assert_int_equal(r.error.cls, OQ_PG_ERR_TRANSIENT);
    assert_int_equal(oq_pg_errors_verdict(r.error.cls), OQ_EFFECTS_RETRY);
    /* 57014 is the server's statement_timeout, which ends the wait before
       the job's timeout would: the client's own bound would have reported
       the connection. The time is checked from below only, since a loaded
       machine may add any delay above. */
    assert_true(took_ms >= job_timeout_ms / 2);

    /* The other run gives up; this job's retry then grants. */
    oq_pg_rollback(other);
    assert_int_equal(s_grant(&w, 400, 1, 5, &r), OQ_GRANT_GRANTED);
    oq_pg_destroy(&other);
    s_worker_close(&w);
}

/* The time of one statement on the session of pg: 0 if it answered,
   else its error's SQLSTATE in sqlstate. */
static int s_sleep(oq_pg_t *pg, const char *seconds, char sqlstate[6])
{
    oq_pg_error_t error;
    const char *params[] = {seconds};
    int rc = oq_pg_exec(pg, "SELECT pg_sleep($1)", 1, params, NULL, &error);
    snprintf(sqlstate, 6, "%s", rc < 0 ? error.sqlstate : "");
    if (rc < 0)
        assert_int_equal(error.cls, OQ_PG_ERR_TRANSIENT);
    return rc;
}

/* A job's statements share its timeout: the second of two that each wait
   most of it gets what the first left and ends with 57014 before the
   job's timeout (a grant's INSERT behind another run of its order, then
   its UPDATE behind a stopped worker's balance row, reached the watchdog
   so). A transaction after it in the same job (a batch's fallback) gets
   no more; the next job gets the whole bound again. A tool's
   oq_pg_set_timeout keeps it per statement. */
static void test_job_statements_share_the_job_timeout(void **state)
{
    oq_pg_t *pg = oq_pg_new(oq_pg_fixture_url(), "test_pg_job_timeout");
    oq_pg_error_t error;
    char sqlstate[6];
    const int64_t job_timeout_ms = 3000; /* statement_timeout 2.7 s */
    oq_pg_set_job_timeout(pg, job_timeout_ms);
    assert_int_equal(oq_pg_connect(pg, &error), 0);
    int64_t start_ms = oq_clock_now_ms(oq_clock_system());
    assert_int_equal(oq_pg_begin(pg, "BEGIN", &error), 0);
    assert_int_equal(s_sleep(pg, "1.8", sqlstate), 0);
    assert_int_equal(s_sleep(pg, "1.8", sqlstate), -1);
    int64_t took_ms = oq_clock_now_ms(oq_clock_system()) - start_ms;
    /* The second sleep would have ended in 1.8 s with a bound of its own:
       its 57014 is the share of the job's bound the first one left. */
    assert_string_equal(sqlstate, "57014");
    assert_true(took_ms >= 1800);
    oq_pg_rollback(pg);
    assert_int_equal(oq_pg_begin(pg, "BEGIN", &error), 0);
    assert_int_equal(s_sleep(pg, "0.3", sqlstate), -1);
    assert_string_equal(sqlstate, "57014");
    oq_pg_rollback(pg);

    oq_pg_set_job_timeout(pg, job_timeout_ms);
    assert_int_equal(s_sleep(pg, "0.3", sqlstate), 0);

    oq_pg_set_timeout(pg, 1000); /* statement_timeout 0.9 s each */
    assert_int_equal(oq_pg_begin(pg, "BEGIN", &error), 0);
    assert_int_equal(s_sleep(pg, "0.6", sqlstate), 0);
    assert_int_equal(s_sleep(pg, "0.6", sqlstate), 0);
    assert_int_equal(oq_pg_commit(pg, &error), 0);
    oq_pg_destroy(&pg);
}

/* ---- BEGIN in one pipeline with the first statement ---------------------- */

/* 1 if the session of pg is inside a transaction, as the server sees it. */
static int64_t s_in_transaction(const oq_pg_t *pg)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND state LIKE "
             "'idle in transaction%%'",
             oq_pg_backend_pid(pg));
    return oq_pg_fixture_sql_int(sql);
}

/* BEGIN waits for the transaction's first statement and goes with it (one
   round trip for both): after oq_pg_begin the session is not in a
   transaction yet, after the first statement it is, and the statement ran
   inside it. A transaction without a statement sends nothing at all. */
static void test_begin_goes_with_first_statement(void **state)
{
    oq_pg_t *pg = oq_pg_new(oq_pg_fixture_url(), "test_pg_pipeline");
    oq_pg_error_t error;
    const char *begin = "BEGIN ISOLATION LEVEL READ COMMITTED";
    const char *add = "UPDATE point_balances SET balance = balance + $2 WHERE customer_id = $1";
    const char *params[] = {"1", "5"};
    assert_int_equal(oq_pg_begin(pg, begin, &error), 0);
    assert_true(oq_pg_connected(pg));
    assert_int_equal(s_in_transaction(pg), 0);
    PGresult *res;
    assert_int_equal(oq_pg_exec(pg, add, 2, params, &res, &error), 0);
    assert_string_equal(PQcmdTuples(res), "1");
    PQclear(res);
    assert_int_equal(s_in_transaction(pg), 1);
    /* Inside it: a rollback undoes the statement. */
    oq_pg_rollback(pg);
    assert_int_equal(s_in_transaction(pg), 0);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT balance FROM point_balances WHERE customer_id = 1"), 0);

    assert_int_equal(oq_pg_begin(pg, begin, &error), 0);
    assert_int_equal(oq_pg_exec(pg, add, 2, params, NULL, &error), 0);
    assert_int_equal(oq_pg_exec(pg, add, 2, params, NULL, &error), 0);
    assert_int_equal(oq_pg_commit(pg, &error), 0);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT balance FROM point_balances WHERE customer_id = 1"), 10);

    /* Nothing ran: COMMIT succeeds without a word to the server. */
    assert_int_equal(oq_pg_begin(pg, begin, &error), 0);
    assert_int_equal(oq_pg_commit(pg, &error), 0);
    assert_int_equal(s_in_transaction(pg), 0);
    oq_pg_destroy(&pg);
}

/* When what was sent as the transaction's BEGIN fails (here a statement
   that fails when it runs, not when it is parsed), that is the error
   reported, the statement sent with it does not run, and the connection
   is fine for the next transaction. */
static void test_failed_begin_skips_its_statement(void **state)
{
    oq_pg_t *pg = oq_pg_new(oq_pg_fixture_url(), "test_pg_pipeline");
    oq_pg_error_t error;
    const char *add = "UPDATE point_balances SET balance = balance + $2 WHERE customer_id = $1";
    const char *params[] = {"1", "5"};
    assert_int_equal(oq_pg_begin(pg, "SELECT 1 / 0", &error), 0);
    assert_int_equal(oq_pg_exec(pg, add, 2, params, NULL, &error), -1);
    assert_string_equal(error.sqlstate, "22012");
    assert_true(oq_pg_connected(pg));
    /* A body that went on regardless: nothing runs outside the
       transaction, and nothing commits. */
    assert_int_equal(oq_pg_exec(pg, add, 2, params, NULL, &error), -1);
    assert_non_null(strstr(error.message, "BEGIN failed"));
    assert_int_equal(oq_pg_commit(pg, &error), -1);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT balance FROM point_balances WHERE customer_id = 1"), 0);
    assert_int_equal(oq_pg_begin(pg, "SELECT 1 / 0", &error), 0);
    assert_int_equal(oq_pg_exec(pg, add, 2, params, NULL, &error), -1);
    oq_pg_rollback(pg);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT balance FROM point_balances WHERE customer_id = 1"), 0);

    assert_int_equal(oq_pg_begin(pg, "BEGIN", &error), 0);
    assert_int_equal(oq_pg_exec(pg, add, 2, params, NULL, &error), 0);
    assert_int_equal(oq_pg_commit(pg, &error), 0);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT balance FROM point_balances WHERE customer_id = 1"), 5);
    oq_pg_destroy(&pg);
}

/* The first statement's pipeline finds the connection dead (it died
   while idle): BEGIN and the statement go again on a new connection,
   once. A later statement of a transaction whose connection was lost
   never connects again (it would run outside the transaction). */
static void test_first_statement_reconnects_once(void **state)
{
    oq_pg_t *pg = oq_pg_new(oq_pg_fixture_url(), "test_pg_pipeline");
    oq_pg_error_t error;
    const char *add = "UPDATE point_balances SET balance = balance + $2 WHERE customer_id = $1";
    const char *params[] = {"1", "5"};
    assert_int_equal(oq_pg_begin(pg, "BEGIN", &error), 0);
    assert_int_equal(oq_pg_commit(pg, &error), 0);
    int pid = oq_pg_backend_pid(pg);
    s_terminate(pg);
    assert_int_equal(oq_pg_begin(pg, "BEGIN", &error), 0);
    assert_int_equal(oq_pg_exec(pg, add, 2, params, NULL, &error), 0);
    assert_int_not_equal(oq_pg_backend_pid(pg), pid);
    assert_int_equal(s_in_transaction(pg), 1);
    s_terminate(pg);
    assert_int_equal(oq_pg_exec(pg, add, 2, params, NULL, &error), -1);
    assert_int_equal(error.cls, OQ_PG_ERR_CONNECTION);
    assert_int_equal(oq_pg_exec(pg, add, 2, params, NULL, &error), -1);
    assert_non_null(strstr(error.message, "lost inside a transaction"));
    oq_pg_rollback(pg);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT balance FROM point_balances WHERE customer_id = 1"), 0);
    oq_pg_destroy(&pg);
}

/* ---- the onceq tool ----------------------------------------------------- */

static void test_cli_commands(void **state)
{
    char out[S_TEXT_LEN], args[S_TEXT_LEN];
    const char *db = oq_pg_fixture_url();
    snprintf(args, sizeof args, "customer add 5 --database '%s'", db);
    assert_int_equal(s_onceq(args, out, sizeof out), 0);
    assert_string_equal(out, "added customer 5 with balance 0\n");
    assert_int_equal(s_onceq(args, out, sizeof out), 0);
    assert_string_equal(out, "customer 5 exists already, balance 0 (unchanged)\n");

    snprintf(args, sizeof args, "--database '%s' grant --order 500 --customer 5 --points 30", db);
    assert_int_equal(s_onceq(args, out, sizeof out), 0);
    assert_string_equal(out, "granted 30 points to customer 5 for order 500\n");
    assert_int_equal(s_onceq(args, out, sizeof out), 0);
    assert_string_equal(out, "already granted for order 500\n");

    snprintf(args, sizeof args, "balance 5 --database '%s'", db);
    assert_int_equal(s_onceq(args, out, sizeof out), 0);
    assert_string_equal(out, "30\n");

    snprintf(args, sizeof args, "grant --order 501 --customer 6 --points 1 --database '%s'", db);
    assert_int_equal(s_onceq(args, out, sizeof out), 1);
    assert_non_null(
        strstr(out, "customer 6 has no balance row (add it with: onceq customer add 6)"));
    snprintf(args, sizeof args, "balance 6 --database '%s'", db);
    assert_int_equal(s_onceq(args, out, sizeof out), 1);

    assert_int_equal(s_onceq("grant --order 1 --customer 1 --points 0", out, sizeof out), 2);
    assert_int_equal(s_onceq("customer add x", out, sizeof out), 2);
    assert_int_equal(
        s_onceq("balance 1 --database 'host=/nonexistent port=1 dbname=x'", out, sizeof out), 3);
}

#define S_TEST(name) cmocka_unit_test_setup_teardown(name, s_setup, NULL)

int main(void)
{
    oq_log_set_level(OQ_LOG_WARN);
    const struct CMUnitTest tests[] = {
        S_TEST(test_migrate_is_idempotent),
        S_TEST(test_migrate_concurrent),
        S_TEST(test_migrate_broken_file_rolls_back),
        S_TEST(test_grant_once_on_postgres),
        S_TEST(test_parameters_are_bound),
        S_TEST(test_serialization_failure_rerun_on_postgres),
        S_TEST(test_connection_lost_then_reconnect),
        S_TEST(test_connection_lost_inside_transaction),
        S_TEST(test_refused_connection_is_infrastructure),
        S_TEST(test_cannot_connect_is_infrastructure),
        S_TEST(test_probe_and_release),
        S_TEST(test_shared_handle_is_one_connection),
        S_TEST(test_statement_timeout_from_job_timeout),
        S_TEST(test_job_statements_share_the_job_timeout),
        S_TEST(test_begin_goes_with_first_statement),
        S_TEST(test_failed_begin_skips_its_statement),
        S_TEST(test_first_statement_reconnects_once),
        S_TEST(test_cli_commands),
    };
    return cmocka_run_group_tests(tests, oq_pg_fixture_group_setup, oq_pg_fixture_group_teardown);
}
