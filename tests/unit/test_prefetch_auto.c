/*  test_prefetch_auto: the --prefetch auto estimator (worker/prefetch.h) with
    run times given by hand: short runs grow the limit one job at a time to
    the cap, a long one drops it to 1 at once, a type with a batch function
    is charged its share of a full batch, and the limit stays within
    1 ... cap whatever the runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "prefetch.h"
#include "worker_limits.h"

#define S_CAP       8
#define S_BUDGET_US 4000

static void test_no_run_yet_holds_one(void **unused)
{
    (void)unused;
    oq_prefetch_t *p = oq_prefetch_new(S_CAP, S_BUDGET_US);
    assert_int_equal(oq_prefetch_limit(p), 1);
    assert_int_equal(oq_prefetch_average_us(p), 0);
    oq_prefetch_destroy(&p);
    assert_null(p);
}

static void test_short_runs_grow_the_limit_to_the_cap_one_by_one(void **unused)
{
    (void)unused;
    oq_prefetch_t *p = oq_prefetch_new(S_CAP, S_BUDGET_US);
    for (uint32_t want = 2; want <= S_CAP; want++)
        assert_int_equal(oq_prefetch_observe(p, 50, 1), want);
    for (int i = 0; i < 100; i++)
        assert_int_equal(oq_prefetch_observe(p, 50, 1), S_CAP);
    assert_int_equal(oq_prefetch_average_us(p), 50);
    oq_prefetch_destroy(&p);
}

static void test_a_long_run_drops_the_limit_to_one_at_once(void **unused)
{
    (void)unused;
    oq_prefetch_t *p = oq_prefetch_new(S_CAP, S_BUDGET_US);
    for (int i = 0; i < 20; i++)
        oq_prefetch_observe(p, 50, 1);
    assert_int_equal(oq_prefetch_limit(p), S_CAP);
    /* One job of a second after a stream of 50 µs ones. */
    assert_int_equal(oq_prefetch_observe(p, 1000000, 1), 1);
    assert_true(oq_prefetch_average_us(p) >= 400000);
    /* Short ones bring it back, but not on the evidence of a few. */
    for (int i = 0; i < 10; i++)
        assert_int_equal(oq_prefetch_observe(p, 50, 1), 1);
    int runs = 10;
    while (oq_prefetch_limit(p) < S_CAP && runs < 1000) {
        oq_prefetch_observe(p, 50, 1);
        runs++;
    }
    assert_int_equal(oq_prefetch_limit(p), S_CAP);
    assert_true(runs > 40 && runs < 100);
    oq_prefetch_destroy(&p);
}

static void test_runs_longer_than_the_budget_hold_one(void **unused)
{
    (void)unused;
    oq_prefetch_t *p = oq_prefetch_new(S_CAP, S_BUDGET_US);
    for (int i = 0; i < 50; i++)
        assert_int_equal(oq_prefetch_observe(p, S_BUDGET_US + 1, 1), 1);
    oq_prefetch_destroy(&p);
}

static void test_middling_runs_hold_what_fits_the_budget(void **unused)
{
    (void)unused;
    oq_prefetch_t *p = oq_prefetch_new(S_CAP, S_BUDGET_US);
    /* 1 ms each: the running one and 4 behind it. */
    for (int i = 0; i < 50; i++)
        oq_prefetch_observe(p, 1000, 1);
    assert_int_equal(oq_prefetch_limit(p), 5);
    /* 2 ms each: 1 + 2 (the average falls slowly, so give it time). */
    for (int i = 0; i < 50; i++)
        oq_prefetch_observe(p, 2000, 1);
    assert_int_equal(oq_prefetch_limit(p), 3);
    oq_prefetch_destroy(&p);
}

static void test_bounds(void **unused)
{
    (void)unused;
    /* Runs of no time at all, or negative (a clock step): the cap. */
    oq_prefetch_t *p = oq_prefetch_new(S_CAP, S_BUDGET_US);
    for (int i = 0; i < 20; i++)
        oq_prefetch_observe(p, i % 2 ? 0 : -5, 1);
    assert_int_equal(oq_prefetch_limit(p), S_CAP);
    assert_int_equal(oq_prefetch_average_us(p), 0);
    /* The longest run there is: 1, no overflow. */
    assert_int_equal(oq_prefetch_observe(p, INT64_MAX, 1), 1);
    assert_int_equal(oq_prefetch_observe(p, INT64_MAX, 1), 1);
    oq_prefetch_destroy(&p);

    /* A cap of 1 never grows; the largest cap is reached. */
    p = oq_prefetch_new(1, S_BUDGET_US);
    for (int i = 0; i < 20; i++)
        assert_int_equal(oq_prefetch_observe(p, 0, 1), 1);
    oq_prefetch_destroy(&p);
    p = oq_prefetch_new(OQ_WORKER_PREFETCH_MAX, S_BUDGET_US);
    for (int i = 0; i < 2 * OQ_WORKER_PREFETCH_MAX; i++)
        oq_prefetch_observe(p, 1, 1);
    assert_int_equal(oq_prefetch_limit(p), OQ_WORKER_PREFETCH_MAX);
    oq_prefetch_destroy(&p);

    /* A budget of 0: one at a time, except for runs of no time. */
    p = oq_prefetch_new(S_CAP, 0);
    for (int i = 0; i < 20; i++)
        assert_int_equal(oq_prefetch_observe(p, 1, 1), 1);
    oq_prefetch_destroy(&p);
}

static void test_a_batch_type_is_charged_its_share_of_a_full_batch(void **unused)
{
    (void)unused;
    /* Calls of 3 ms: a type without a batch function holds 1 + 1. */
    oq_prefetch_t *p = oq_prefetch_new(33, S_BUDGET_US);
    for (int i = 0; i < 100; i++)
        oq_prefetch_observe(p, 3000, 1);
    assert_int_equal(oq_prefetch_limit(p), 2);
    assert_int_equal(oq_prefetch_average_us(p), 3000);
    oq_prefetch_destroy(&p);

    /* The same calls for a type whose batch function takes 32: the held
       ones would run together in one call, so the limit grows to a full
       batch behind the running one, however few each call took. */
    p = oq_prefetch_new(33, S_BUDGET_US);
    for (int i = 0; i < 100; i++)
        oq_prefetch_observe(p, 3000, 32);
    assert_int_equal(oq_prefetch_limit(p), 33);
    assert_int_equal(oq_prefetch_average_us(p), 3000 / 32);
    oq_prefetch_destroy(&p);

    /* Calls of 40 ms: 1.25 ms a job of a full batch, so 1 + 3. */
    p = oq_prefetch_new(33, S_BUDGET_US);
    for (int i = 0; i < 100; i++)
        oq_prefetch_observe(p, 40000, 32);
    assert_int_equal(oq_prefetch_limit(p), 4);
    oq_prefetch_destroy(&p);

    /* A batch call longer than the budget for each of its jobs: one at a
       time, as any long job. */
    p = oq_prefetch_new(33, S_BUDGET_US);
    for (int i = 0; i < 100; i++)
        assert_int_equal(oq_prefetch_observe(p, 32 * (S_BUDGET_US + 1), 32), 1);
    oq_prefetch_destroy(&p);
}

static void test_a_raised_cap_lets_the_limit_grow_further(void **unused)
{
    (void)unused;
    oq_prefetch_t *p = oq_prefetch_new(S_CAP, S_BUDGET_US);
    oq_prefetch_raise_cap(p, 2 * S_CAP);
    oq_prefetch_raise_cap(p, 2); /* never lowers it */
    for (int i = 0; i < 100; i++)
        oq_prefetch_observe(p, 50, 1);
    assert_int_equal(oq_prefetch_limit(p), 2 * S_CAP);
    oq_prefetch_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_run_yet_holds_one),
        cmocka_unit_test(test_short_runs_grow_the_limit_to_the_cap_one_by_one),
        cmocka_unit_test(test_a_long_run_drops_the_limit_to_one_at_once),
        cmocka_unit_test(test_runs_longer_than_the_budget_hold_one),
        cmocka_unit_test(test_middling_runs_hold_what_fits_the_budget),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_a_batch_type_is_charged_its_share_of_a_full_batch),
        cmocka_unit_test(test_a_raised_cap_lets_the_limit_grow_further),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
