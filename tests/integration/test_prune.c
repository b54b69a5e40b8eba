/*  test_prune: `onceq db prune` on a real PostgreSQL with a real broker.

    (i)  Rows older than the window go, and only those: point grants, once-
         guard rows, and shipment requests in status confirmed or failed
         (never review or requested); the counts are printed per table, a
         dry run deletes nothing, and a missing shipment_requests table is
         skipped. A window under the broker's floor is refused, with the
         floor printed, and deletes nothing.
    (ii) The floor follows the broker: its dispatch-id window, its queues'
         retry_after and a held job's own budget and backoff. Without an
         answer from the broker nothing is deleted, unless
         --floor-from-defaults is given.

    The cluster is the project-local one (deploy/pg.sh), started once for
    this program in its temp dir and stopped at the end. Label `pg`. */
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

static int s_group_setup(void **state)
{
    it_t *it = it_new_pg("prune");
    if (!it)
        return -1;
    it_sql(it, "SET client_min_messages TO warning"); /* no notice for DROP IF EXISTS */
    *state = it;
    return 0;
}

static int s_setup(void **state)
{
    it_t *it = *state;
    it_kill_all(it);
    it_fresh_data_dir(it);
    it_sql(it, "TRUNCATE point_grants, point_balances, onceq_once");
    it_sql(it, "DROP TABLE IF EXISTS shipment_requests");
    return 0;
}

/* Run `onceq db prune ARGS...` (NULL-terminated) with a short request
   timeout, as it_cli does. */
#define s_prune(it, log, want_exit, ...)                                                           \
    it_cli(it, log, want_exit, "--timeout-ms", "2000", "db", "prune", __VA_ARGS__)

static void s_has(const char *out, const char *needle)
{
    if (!strstr(out, needle))
        fail_msg("expected \"%s\" in: %s", needle, out);
}

/* Rows at several ages in every table pruned. */
static void s_fill(it_t *it)
{
    it_sql(it, "INSERT INTO point_balances (customer_id, balance) VALUES (1, 0)");
    it_sql(it, "INSERT INTO point_grants (order_id, reason, customer_id, points, granted_at) "
               "VALUES (1, 'order', 1, 5, now() - interval '3 hours'), "
               "(2, 'order', 1, 5, now() - interval '100 minutes'), "
               "(3, 'order', 1, 5, now() - interval '80 minutes'), "
               "(4, 'order', 1, 5, now())");
    it_sql(it, "INSERT INTO onceq_once (scope, key, created_at) VALUES "
               "('s', 'old', now() - interval '3 hours'), ('s', 'mid', now() - interval '80 "
               "minutes'), ('s', 'new', now())");
    it_sql(it, "CREATE TABLE shipment_requests (order_id bigint PRIMARY KEY, status text NOT "
               "NULL, created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT "
               "NULL DEFAULT now())");
    it_sql(it, "INSERT INTO shipment_requests (order_id, status, updated_at) VALUES "
               "(1, 'confirmed', now() - interval '3 hours'), (2, 'failed', now() - interval '3 "
               "hours'), (3, 'review', now() - interval '3 hours'), (4, 'requested', now() - "
               "interval '3 hours'), (5, 'confirmed', now() - interval '10 minutes')");
}

static int64_t s_rows(it_t *it)
{
    return it_sql_int(it, "SELECT (SELECT count(*) FROM point_grants) + (SELECT count(*) FROM "
                          "onceq_once) + (SELECT count(*) FROM shipment_requests)");
}

static void test_only_rows_older_than_the_window_go(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    s_fill(it);
    int64_t rows = s_rows(it);

    /* Under the floor (the default dispatch-id window, 1 h): refused. */
    char *out = s_prune(it, "under", 1, "--older-than", "30m", NULL);
    s_has(out, "retention floor: 1h ");
    s_has(out, "refused: --older-than 30m is shorter than the retention floor of 1h");
    free(out);
    out = s_prune(it, "under2", 1, "--older-than", "59m", NULL);
    s_has(out, "retention floor: 1h ");
    free(out);
    assert_int_equal(s_rows(it), rows);

    out = s_prune(it, "dry", 0, "--older-than", "90m", "--dry-run", NULL);
    s_has(out, "point_grants: 2 row(s) would be deleted");
    free(out);
    /* The same with a global option before the action, one that takes a
       value (--key): still db prune, not db migrate. */
    const char *key = getenv("ONCEQ_KEY");
    assert_non_null(key);
    out = it_cli(it, "dry-key", 0, "--timeout-ms", "2000", "db", "--key", key, "prune",
                 "--older-than", "90m", "--dry-run", NULL);
    s_has(out, "point_grants: 2 row(s) would be deleted");
    free(out);
    /* An option without its value, last: a usage error. */
    out = it_cli(it, "no-value", 2, "db", "--sql-dir", NULL);
    s_has(out, "option '--sql-dir' needs a value");
    free(out);
    assert_int_equal(s_rows(it), rows);

    out = s_prune(it, "prune", 0, "--older-than", "90m", NULL);
    s_has(out, "point_grants: 2 row(s) deleted (granted_at older than 1h30m)");
    s_has(out, "onceq_once: 1 row(s) deleted (created_at older than 1h30m)");
    s_has(out, "shipment_requests: 2 row(s) deleted (updated_at older than 1h30m)");
    free(out);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM point_grants WHERE order_id IN (3, 4)"),
                     2);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM point_grants"), 2);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM onceq_once WHERE key = 'old'"), 0);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM onceq_once"), 2);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM shipment_requests WHERE status IN "
                                    "('review', 'requested')"),
                     2);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM shipment_requests"), 3);

    /* The floor itself is a valid window; a table not installed is skipped. */
    it_sql(it, "DROP TABLE shipment_requests");
    out = s_prune(it, "again", 0, "--older-than", "1h", NULL);
    s_has(out, "point_grants: 1 row(s) deleted");
    s_has(out, "shipment_requests: skipped: no table shipment_requests");
    free(out);

    out = s_prune(it, "bad", 2, "--older-than", "3w", NULL);
    s_has(out, "'3w' is not a duration");
    free(out);
    out = s_prune(it, "long", 2, "--older-than", "4000d", NULL);
    s_has(out, "longer than the limit of 3650d");
    free(out);
}

static void test_floor_follows_the_broker_and_is_required(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--dedupe-window", "60", "--retry-after", "1200", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    s_fill(it);
    int64_t rows = s_rows(it);
    /* 3 tries x (1200 s + 10 s backoff) = 3630 s, over the 60 s window. */
    char *out = s_prune(it, "queues", 1, "--older-than", "1h", NULL);
    s_has(out, "retention floor: 1h30s ");
    s_has(out, "3 tries x (20m retry_after + 10s backoff)");
    free(out);

    /* A held job with a budget of its own raises it: 10 x (1200 + 600). */
    oq_job_msg_t job = {.delay_ms = 3600000,
                        .has_delay = true,
                        .max_tries = 10,
                        .has_max_tries = true,
                        .backoff_ms = {60000, 600000},
                        .backoff_len = 2};
    assert_true(it_dispatch(it, "noop", NULL, &job) > 0);
    out = s_prune(it, "held", 1, "--older-than", "4h", NULL);
    s_has(out, "retention floor: 5h ");
    s_has(out, "10 tries x (20m retry_after + 10m backoff)");
    free(out);
    assert_int_equal(s_rows(it), rows);

    /* A unique key held with a window longer than that raises it too. */
    oq_job_msg_t unique = {.delay_ms = 3600000,
                           .has_delay = true,
                           .unique_key = oq_str("report:2024-06"),
                           .unique_for_ms = 6 * 3600000LL};
    assert_true(it_dispatch(it, "noop", NULL, &unique) > 0);
    out = s_prune(it, "unique", 1, "--older-than", "5h", NULL);
    s_has(out, "retention floor: 6h ");
    s_has(out, "unique window 6h");
    free(out);
    assert_int_equal(s_rows(it), rows);

    /* No broker: no floor to trust, nothing deleted. */
    it_signal(it->broker, SIGKILL);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);
    out = s_prune(it, "nobroker", 3, "--older-than", "90m", NULL);
    s_has(out, "cannot learn the retention floor from the broker");
    s_has(out, "--floor-from-defaults");
    free(out);
    assert_int_equal(s_rows(it), rows);
    out = s_prune(it, "defaults", 0, "--older-than", "90m", "--floor-from-defaults", NULL);
    s_has(out, "retention floor: 1h (from the built-in defaults");
    s_has(out, "point_grants: 2 row(s) deleted");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_only_rows_older_than_the_window_go, s_setup,
                                        it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_floor_follows_the_broker_and_is_required, s_setup,
                                        it_kill_teardown),
    };
    return cmocka_run_group_tests(tests, s_group_setup, it_teardown);
}
