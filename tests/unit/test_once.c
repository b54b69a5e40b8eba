/*  test_once.c: the once-guard of the effects SDK (oq_once in
    onceq/effects.h) against a real server: the first call applies, a second
    in a new transaction does not, a rolled-back transaction leaves no
    guard, a second connection waits on the key held by an uncommitted first
    and then finds it taken (read committed and repeatable read), and bad
    scopes and keys are refused with an error naming them.

    It starts a cluster of its own with deploy/pg.sh in a temp dir on a
    random port (which also runs `onceq db migrate` from the build tree) and
    stops it at the end. Label `pg`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "onceq/clock.h"
#include "onceq/effects.h"
#include "onceq/log.h"
#include "pg_fixture.h"
#include "support.h"

/* How long the second holder may take to show up waiting on the key, or to
   finish once the first has committed: generous, for a loaded machine. */
#define S_WAIT_MS 20000
#define S_POLL_MS 20
/* The second holder's application_name, to find it in pg_stat_activity. */
#define S_SECOND_APP "test_once_second"

/* ---- helpers ------------------------------------------------------------ */

static int64_t s_now_ms(void)
{
    return oq_clock_mono_us() / 1000;
}

static int s_setup(void **state)
{
    oq_pg_fixture_sql("TRUNCATE onceq_once");
    return 0;
}

/* ---- the body: take the guard, and with it do the "effect" -------------- */

typedef struct {
    const char *scope;
    const char *key;
    uint64_t job_id;
    bool fail_after;            /* roll back after taking the guard */
    void (*while_held)(void *); /* called with the guard taken, before COMMIT */
    void *while_held_ctx;
    bool applied; /* what the last run found */
    int runs;
} s_once_t;

static int s_once_body(oq_txn_t *txn, void *arg, oq_pg_error_t *error)
{
    s_once_t *ctx = arg;
    ctx->runs++;
    if (oq_once(txn, ctx->scope, ctx->key, ctx->job_id, &ctx->applied, error) < 0)
        return -1;
    if (ctx->applied && oq_pg_exec(oq_txn_pg(txn), "SELECT 1", 0, NULL, NULL, error) < 0)
        return -1;
    if (ctx->while_held)
        ctx->while_held(ctx->while_held_ctx);
    if (ctx->fail_after) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL, "the effect failed");
        return -1;
    }
    return 0;
}

static int s_once(oq_effects_t *fx, s_once_t *ctx, oq_pg_error_t *error)
{
    ctx->runs = 0;
    return oq_effects_run(fx, s_once_body, ctx, error);
}

/* ---- tests ---------------------------------------------------------------- */

static void test_first_applies_second_does_not(void **state)
{
    oq_effects_t *fx = oq_effects_new(oq_pg_fixture_url(), OQ_TXN_READ_COMMITTED, "test_once");
    oq_effects_begin_job(fx, 30000);
    oq_pg_error_t error;
    s_once_t ctx = {.scope = "hello", .key = "greeting:ada", .job_id = 17};
    assert_int_equal(s_once(fx, &ctx, &error), 0);
    assert_true(ctx.applied);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once WHERE scope = 'hello' AND "
                              "key = 'greeting:ada' AND job_id = 17"),
        1);

    /* A second run (another job id: a redispatch) in a new transaction. */
    ctx.job_id = 18;
    assert_int_equal(s_once(fx, &ctx, &error), 0);
    assert_false(ctx.applied);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once"), 1);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT job_id FROM onceq_once"), 17);

    /* The same key in another scope, and no job id: a guard of its own. */
    s_once_t other = {.scope = "shipment", .key = "greeting:ada", .job_id = 0};
    assert_int_equal(s_once(fx, &other, &error), 0);
    assert_true(other.applied);
    assert_int_equal(
        oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once WHERE scope = 'shipment' AND "
                              "job_id IS NULL"),
        1);
    oq_effects_destroy(&fx);
    assert_null(fx);
}

static void test_rolled_back_leaves_no_guard(void **state)
{
    oq_effects_t *fx = oq_effects_new(oq_pg_fixture_url(), OQ_TXN_READ_COMMITTED, "test_once");
    oq_pg_error_t error;
    s_once_t ctx = {.scope = "hello", .key = "k1", .job_id = 1, .fail_after = true};
    assert_int_equal(s_once(fx, &ctx, &error), -1);
    assert_true(ctx.applied); /* it had taken the guard ... */
    assert_int_equal(error.cls, OQ_PG_ERR_FAIL);
    assert_string_equal(error.message, "the effect failed");
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once"),
                     0); /* ... and gave it back */

    /* The job's next run applies. */
    ctx.fail_after = false;
    assert_int_equal(s_once(fx, &ctx, &error), 0);
    assert_true(ctx.applied);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once"), 1);
    oq_effects_destroy(&fx);
}

/* The second holder, on its own connection and thread. */
typedef struct {
    oq_txn_isolation_t isolation;
    s_once_t ctx;
    int rc;
    oq_pg_error_t error;
    uint32_t attempts;
} s_second_t;

static void *s_second_main(void *arg)
{
    s_second_t *second = arg;
    oq_effects_t *fx = oq_effects_new(oq_pg_fixture_url(), second->isolation, S_SECOND_APP);
    oq_effects_begin_job(fx, S_WAIT_MS);
    second->rc = s_once(fx, &second->ctx, &second->error);
    second->attempts = oq_txn_attempts(oq_effects_txn(fx));
    oq_effects_destroy(&fx);
    return NULL;
}

/* Called by the first holder with the guard taken and not committed: start
   the second holder and wait until the server shows it waiting on a lock
   (the key). */
typedef struct {
    pthread_t thread;
    s_second_t *second;
    bool started;
    bool seen_waiting;
} s_race_t;

static void s_start_second_and_wait(void *arg)
{
    s_race_t *race = arg;
    if (race->started)
        return; /* a re-run of the first transaction: the second is running */
    race->started = true;
    assert_int_equal(pthread_create(&race->thread, NULL, s_second_main, race->second), 0);
    int64_t end = s_now_ms() + S_WAIT_MS;
    while (s_now_ms() < end) {
        if (oq_pg_fixture_sql_int("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                                  "'" S_SECOND_APP "' AND wait_event_type = 'Lock'") == 1) {
            race->seen_waiting = true;
            return;
        }
        oq_support_sleep_ms(S_POLL_MS);
    }
}

static void s_concurrent(oq_txn_isolation_t isolation)
{
    s_second_t second = {.isolation = isolation,
                         .ctx = {.scope = "hello", .key = "race", .job_id = 2}};
    s_race_t race = {.second = &second};
    oq_effects_t *fx = oq_effects_new(oq_pg_fixture_url(), isolation, "test_once_first");
    oq_pg_error_t error;
    s_once_t first = {.scope = "hello",
                      .key = "race",
                      .job_id = 1,
                      .while_held = s_start_second_and_wait,
                      .while_held_ctx = &race};
    assert_int_equal(s_once(fx, &first, &error), 0);
    assert_true(race.started);
    assert_int_equal(pthread_join(race.thread, NULL), 0);
    assert_true(race.seen_waiting); /* the second blocked on the key ... */
    assert_true(first.applied);
    assert_int_equal(second.rc, 0);
    assert_false(second.ctx.applied); /* ... and then found it taken */
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once"), 1);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT job_id FROM onceq_once"), 1);
    /* Under repeatable read the key the snapshot could not see is a
       serialization failure, re-run in place with a fresh snapshot. */
    if (isolation == OQ_TXN_REPEATABLE_READ)
        assert_int_equal(second.attempts, 2);
    else
        assert_int_equal(second.attempts, 1);
    oq_effects_destroy(&fx);
}

static void test_concurrent_holder_waits_then_not_applied(void **state)
{
    s_concurrent(OQ_TXN_READ_COMMITTED);
}

static void test_concurrent_holder_repeatable_read(void **state)
{
    s_concurrent(OQ_TXN_REPEATABLE_READ);
}

static void test_bounds_refused_naming_the_value(void **state)
{
    oq_effects_t *fx = oq_effects_new(oq_pg_fixture_url(), OQ_TXN_READ_COMMITTED, "test_once");
    oq_pg_error_t error;
    char long_scope[OQ_ONCE_MAX_SCOPE_LEN + 2];
    memset(long_scope, 's', sizeof long_scope - 1);
    long_scope[sizeof long_scope - 1] = 0;
    char long_key[OQ_ONCE_MAX_KEY_LEN + 2];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = 0;

    s_once_t ctx = {.scope = "", .key = "k"};
    assert_int_equal(s_once(fx, &ctx, &error), -1);
    assert_int_equal(error.cls, OQ_PG_ERR_FAIL);
    assert_string_equal(error.message, "once-guard scope is empty: it must be 1 to 64 bytes");

    ctx = (s_once_t){.scope = long_scope, .key = "k"};
    assert_int_equal(s_once(fx, &ctx, &error), -1);
    assert_int_equal(error.cls, OQ_PG_ERR_FAIL);
    assert_non_null(strstr(error.message, "once-guard scope \"ssss"));
    assert_non_null(strstr(error.message, "is 65 bytes: it must be 1 to 64 bytes"));

    ctx = (s_once_t){.scope = "hello", .key = long_key};
    assert_int_equal(s_once(fx, &ctx, &error), -1);
    assert_non_null(strstr(error.message, "once-guard key \"kkkk"));
    assert_non_null(strstr(error.message, "is 257 bytes: it must be 1 to 256 bytes"));

    ctx = (s_once_t){.scope = "hello", .key = NULL};
    assert_int_equal(s_once(fx, &ctx, &error), -1);
    assert_non_null(strstr(error.message, "once-guard key is empty"));

    ctx = (s_once_t){.scope = "hello", .key = "k", .job_id = (uint64_t)INT64_MAX + 1};
    assert_int_equal(s_once(fx, &ctx, &error), -1);
    assert_non_null(strstr(error.message, "job id 9223372036854775808 does not fit"));

    /* At the bounds exactly: taken. */
    long_scope[OQ_ONCE_MAX_SCOPE_LEN] = 0;
    long_key[OQ_ONCE_MAX_KEY_LEN] = 0;
    ctx = (s_once_t){.scope = long_scope, .key = long_key};
    assert_int_equal(s_once(fx, &ctx, &error), 0);
    assert_true(ctx.applied);
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once"), 1);
    oq_effects_destroy(&fx);
}

/* Outside a transaction the guard would commit apart from its effect. */
static void test_outside_a_transaction_refused(void **state)
{
    oq_effects_t *fx = oq_effects_new(oq_pg_fixture_url(), OQ_TXN_READ_COMMITTED, "test_once");
    oq_pg_error_t error;
    bool applied = true;
    assert_int_equal(oq_once(oq_effects_txn(fx), "hello", "k", 1, &applied, &error), -1);
    assert_false(applied);
    assert_int_equal(error.cls, OQ_PG_ERR_FAIL);
    assert_non_null(strstr(error.message, "inside a transaction body"));
    assert_int_equal(oq_pg_fixture_sql_int("SELECT count(*) FROM onceq_once"), 0);
    oq_effects_destroy(&fx);
}

#define S_TEST(name) cmocka_unit_test_setup_teardown(name, s_setup, NULL)

int main(void)
{
    oq_log_set_level(OQ_LOG_WARN);
    const struct CMUnitTest tests[] = {
        S_TEST(test_first_applies_second_does_not),
        S_TEST(test_rolled_back_leaves_no_guard),
        S_TEST(test_concurrent_holder_waits_then_not_applied),
        S_TEST(test_concurrent_holder_repeatable_read),
        S_TEST(test_bounds_refused_naming_the_value),
        S_TEST(test_outside_a_transaction_refused),
    };
    return cmocka_run_group_tests(tests, oq_pg_fixture_group_setup, oq_pg_fixture_group_teardown);
}
