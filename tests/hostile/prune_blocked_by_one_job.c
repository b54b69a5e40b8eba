/*  prune_blocked_by_one_job: one held job with 1,000 tries and a 30-day
    backoff raises the retention floor to about 30,000 days, and `onceq db
    prune` refuses every window. The refusal must name that job (its id,
    type, queue, tries and backoff) and say what an operator can do; once
    the job is cancelled the floor falls back and the prune goes through,
    deleting only rows older than the window.

    Before the fix the refusal named only the floor and its queue, never the
    job. A real broker and onceq, and a PostgreSQL cluster of this test's
    own (deploy/pg.sh) in its temp dir, stopped at the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

/* The held job's budget: the protocol's largest (OQ_MAX_TRIES_LIMIT,
   OQ_MAX_BACKOFF_MS), and a delay that keeps it held for the whole test. */
#define S_TRIES      1000
#define S_BACKOFF_MS (30LL * 24 * 3600 * 1000)
#define S_DELAY_MS   (3600LL * 1000)

static void s_has(const char *out, const char *needle)
{
    if (!strstr(out, needle))
        fail_msg("expected \"%s\" in: %s", needle, out);
}

static void test_the_refusal_names_the_job_and_cancelling_it_unblocks(void **state)
{
    (void)state;
    it_t *it = it_new("prune-one-job");
    assert_non_null(it);
    assert_int_equal(it_start_pg(it), 0);
    assert_true(it_start_broker(it, NULL) > 0);
    it_sql(it, "INSERT INTO point_balances (customer_id, balance) VALUES (1, 0)");
    it_sql(it, "INSERT INTO point_grants (order_id, reason, customer_id, points, granted_at) "
               "VALUES (1, 'order', 1, 5, now() - interval '40 days'), "
               "(2, 'order', 1, 5, now() - interval '1 day')");

    oq_job_msg_t job = {.delay_ms = S_DELAY_MS,
                        .has_delay = true,
                        .max_tries = S_TRIES,
                        .has_max_tries = true,
                        .backoff_ms = {S_BACKOFF_MS},
                        .backoff_len = 1};
    uint64_t id = it_dispatch(it, "grant_points", NULL, &job);
    assert_true(id > 0);
    char named[128];
    snprintf(named, sizeof named, "held back by job %llu (type grant_points, queue default)",
             (unsigned long long)id);

    char *out = it_cli(it, "refused", 1, "--timeout-ms", "5000", "db", "prune", "--older-than",
                       "30d", NULL);
    s_has(out, "refused: --older-than 30d is shorter than the retention floor of 30001d");
    s_has(out, named);
    s_has(out, "1000 tries (attempt 0 so far) x (1m30s retry_after + 30d backoff) = 30001d");
    s_has(out, "onceq job cancel ID");
    s_has(out, "retry_after has passed");
    s_has(out, "set by job");
    free(out);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM point_grants"), 2);

    /* The way through that keeps every guard row a run can need: the job
       is never delivered again, so its budget holds nothing back. It was
       never delivered at all, so no run of it can still be going and the
       prune need not wait out the queue's retry_after. */
    it_cancel(it, id);
    out =
        it_cli(it, "pruned", 0, "--timeout-ms", "5000", "db", "prune", "--older-than", "30d", NULL);
    s_has(out, "point_grants: 1 row(s) deleted");
    free(out);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM point_grants WHERE order_id = 2"), 1);
    it_destroy(&it);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_refusal_names_the_job_and_cancelling_it_unblocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
