/*  database_hangs: the database stops answering, and no job pays for it.

    Every process of the test's own PostgreSQL cluster is stopped
    (SIGSTOP: the postmaster, then its children) while four grant jobs
    with max_tries 1 are in flight. A stopped server accepts connections
    and statements into its sockets and answers nothing, so only the
    client's own bound can end the wait. It must end before the jobs'
    timeout: each job is handed back `unavailable` (no try used), the
    worker processes pause instead of being ended by their watchdog, and
    once the cluster runs again (SIGCONT) every job is done exactly once,
    at its first attempt, with exact balances. On the way back the
    server sees one connection attempt per worker, not a burst of
    abandoned ones.

    The worker's database bound (--db-timeout) is well below the jobs'
    timeout, so the test takes seconds; the cluster is frozen for longer
    than that bound, and continued by the harness whatever happens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"
#include "payloads.h"
#include "support.h"

#define S_JOBS      4 /* in flight at the freeze: one per worker process */
#define S_PROCESSES "4"
/* The workers' bound on the database (--db-timeout, seconds), and the
   jobs' timeout, well above it: the watchdog would end a job that waited
   for the frozen server past it. */
#define S_DB_TIMEOUT_S   "3"
#define S_DB_TIMEOUT_MS  3000
#define S_JOB_TIMEOUT_MS 20000
/* How long the cluster stays frozen: past the bound, with room. */
#define S_FREEZE_MS (S_DB_TIMEOUT_MS * 2)
/* Handed back within the bound, not twice it (a second wait as long, to
   connect again), however loaded the machine. */
#define S_UNAVAILABLE_MAX_MS (S_DB_TIMEOUT_MS * 3 / 2)
#define S_POINTS             10

static int s_setup(void **state)
{
    it_t *it = it_new("database_hangs");
    if (!it)
        return -1;
    if (it_start_pg_with(it, "-c log_connections=on") < 0) {
        it_destroy(&it); /* cmocka runs no teardown after a failed setup */
        return -1;
    }
    *state = it;
    return 0;
}

/* Grant S_POINTS points for order to customer order % S_JOBS + 1. */
static void s_grant(it_t *it, uint64_t order)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_payload_grant(&buf, order, order % S_JOBS + 1, S_POINTS);
    oq_job_msg_t options = {
        .max_tries = 1, .has_max_tries = true, .timeout_ms = S_JOB_TIMEOUT_MS, .has_timeout = true};
    assert_true(it_dispatch(it, "grant_points", &buf, &options) > 0);
    msgpack_sbuffer_destroy(&buf);
}

static bool s_returned(const it_stats_t *s, const void *arg)
{
    return s->returned >= *(const uint64_t *)arg;
}

/* The most "connection received" lines of the server's log, from byte
   offset on, that fall in one second, and the FATAL lines among all of
   them. */
static void s_connections(it_t *it, long offset, int *per_s, int *fatal)
{
    char path[400];
    snprintf(path, sizeof path, "%s/server.log", it->pg_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_int_equal(fseek(f, offset, SEEK_SET), 0);
    char line[1024], second[32] = "";
    int count = 0;
    *per_s = 0;
    *fatal = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "FATAL:"))
            (*fatal)++;
        if (!strstr(line, "connection received"))
            continue;
        /* "2026-01-01 12:00:00.123 UTC [pid] LOG: ...": the second is the
           first 19 characters. */
        if (strncmp(line, second, 19) != 0) {
            snprintf(second, sizeof second, "%.19s", line);
            count = 0;
        }
        if (++count > *per_s)
            *per_s = count;
    }
    fclose(f);
}

static long s_log_size(it_t *it)
{
    char path[400];
    snprintf(path, sizeof path, "%s/server.log", it->pg_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    fclose(f);
    return size;
}

static void test_database_hangs(void **state)
{
    it_t *it = *state;
    char sql[200];
    snprintf(sql, sizeof sql,
             "INSERT INTO point_balances (customer_id, balance) "
             "SELECT g, 0 FROM generate_series(1, %d) g",
             S_JOBS);
    it_sql(it, sql);
    assert_true(it_start_broker(it, NULL) > 0);
    const char *flags[] = {"--processes",  S_PROCESSES,    "--prefetch", "1",
                           "--db-timeout", S_DB_TIMEOUT_S, NULL};
    assert_true(it_start_worker_counted(it, "workers", flags, S_JOBS) > 0);

    /* Warm: the processes have run jobs and hold their connections. */
    uint64_t orders = 0;
    for (int i = 0; i < S_JOBS; i++)
        s_grant(it, ++orders);
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_is, &orders, IT_WAIT_MS, &s) >= 0);
    uint32_t pids[IT_MAX_WORKERS];
    size_t workers = s.workers;
    for (size_t i = 0; i < workers; i++)
        pids[i] = s.worker[i].pid;

    /* Frozen, with S_JOBS grants in flight. */
    assert_true(it_freeze_pg(it) > 0);
    int64_t frozen_ms = it_now_ms();
    for (int i = 0; i < S_JOBS; i++)
        s_grant(it, ++orders);
    /* Each is handed back, unrun, before its timeout. */
    uint64_t returned = S_JOBS;
    int64_t waited_ms = it_wait_stats(it, s_returned, &returned, S_JOB_TIMEOUT_MS, &s);
    int64_t unavailable_ms = it_now_ms() - frozen_ms;
    print_message("frozen: %llu of %d jobs handed back after %lld ms; failed %llu, "
                  "timeouts %zu\n",
                  (unsigned long long)s.returned, S_JOBS, (long long)unavailable_ms,
                  (unsigned long long)s.failed, it_log_count(it, "workers", "outcome=timeout"));
    assert_true(waited_ms >= 0);
    assert_true(unavailable_ms < S_UNAVAILABLE_MAX_MS);
    assert_int_equal(s.failed, 0);
    while (it_now_ms() - frozen_ms < S_FREEZE_MS)
        oq_support_sleep_ms(100);
    long offset = s_log_size(it);
    it_thaw_pg(it);

    /* Back: every job done, at its first attempt, exactly once. */
    assert_true(it_wait_stats(it, it_done_is, &orders, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.retried, 0);
    assert_int_equal(it_log_count(it, "workers", "outcome=timeout"), 0);
    assert_int_equal(it_log_count(it, "workers", "outcome=ok"), orders);
    assert_int_equal(it_log_count(it, "workers", "attempt=1 outcome=ok"), orders);
    /* No worker process was ended and restarted. */
    assert_int_equal(it_log_count(it, "workers", "exited with status"), 0);
    assert_int_equal(s.workers, workers);
    for (size_t i = 0; i < workers; i++) {
        bool found = false;
        for (size_t j = 0; j < s.workers; j++)
            found = found || s.worker[j].pid == pids[i];
        assert_true(found);
    }
    /* Balances exact: one grant row per order, S_POINTS each. */
    assert_int_equal(it_sql_int(it, "SELECT count(DISTINCT order_id) FROM point_grants"), orders);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM point_grants"), orders);
    assert_int_equal(it_sql_int(it, "SELECT sum(balance) FROM point_balances"),
                     (int64_t)orders * S_POINTS);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM point_balances b WHERE balance <> "
                                    "(SELECT coalesce(sum(points), 0) FROM point_grants g "
                                    "WHERE g.customer_id = b.customer_id)"),
                     0);

    int per_s, fatal;
    s_connections(it, offset, &per_s, &fatal);
    print_message("back: at most %d connections in one second, %d FATAL lines\n", per_s, fatal);
    /* One connection attempt per worker, kept while the server was
       stopped; the only sessions the server finds gone are the ones whose
       statements were given up. */
    assert_true(per_s <= S_JOBS);
    assert_true(fatal <= S_JOBS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_database_hangs, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
