/*  test_chaos_schedule.c: the chaos harness's seeded fault schedule
    (tests/chaos/schedule.h). One seed must give the same schedule on every
    run; the carrier's kinds are in it when asked for; and adding them
    moves none of the other kinds, so a seed keeps placing the points'
    faults where it did before the carrier joined. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "chaos_config.h"
#include "schedule.h"

#define S_JOBS 3000

static oq_chaos_config_t s_config(uint64_t seed, uint32_t carrier_faults)
{
    return (oq_chaos_config_t){
        .seed = seed,
        .jobs = S_JOBS,
        .rate = 100,
        .kills = 12,
        .commit_kills = 5,
        .self_kills = 3,
        .pauses = 3,
        .broker_kills = 1,
        .db_restarts = 1,
        .bursts = 3,
        .carrier_stalls = carrier_faults,
        .carrier_error_bursts = carrier_faults,
        .carrier_delay_bursts = carrier_faults,
    };
}

static bool s_carrier_kind(oq_fault_kind_t kind)
{
    return kind == OQ_FAULT_CARRIER_STALL || kind == OQ_FAULT_CARRIER_ERRORS ||
           kind == OQ_FAULT_CARRIER_DELAY;
}

static void test_same_seed_same_schedule(void **state)
{
    (void)state;
    oq_chaos_config_t config = s_config(20240611, 2);
    oq_schedule_t *a = oq_schedule_new(&config);
    oq_schedule_t *b = oq_schedule_new(&config);
    assert_int_equal(oq_schedule_count(a), oq_schedule_count(b));
    for (size_t i = 0; i < oq_schedule_count(a); i++)
        assert_memory_equal(oq_schedule_get(a, i), oq_schedule_get(b, i), sizeof(oq_fault_t));
    for (uint32_t at = 0; at < S_JOBS; at++)
        assert_int_equal(oq_schedule_hook_at(a, at), oq_schedule_hook_at(b, at));
    oq_schedule_destroy(&a);
    oq_schedule_destroy(&b);
    assert_null(a);
}

static void test_carrier_faults_scheduled(void **state)
{
    (void)state;
    oq_chaos_config_t config = s_config(7, 4);
    oq_schedule_t *s = oq_schedule_new(&config);
    assert_int_equal(oq_schedule_count_of(s, OQ_FAULT_CARRIER_STALL), 4);
    assert_int_equal(oq_schedule_count_of(s, OQ_FAULT_CARRIER_ERRORS), 4);
    assert_int_equal(oq_schedule_count_of(s, OQ_FAULT_CARRIER_DELAY), 4);
    assert_int_equal(oq_schedule_count(s), 12 + 5 + 3 + 3 + 1 + 1 + 3 + 12);
    uint32_t last = 0;
    for (size_t i = 0; i < oq_schedule_count(s); i++) {
        const oq_fault_t *f = oq_schedule_get(s, i);
        assert_true(f->at >= last); /* sorted by position */
        assert_true(f->at >= S_JOBS * 5 / 100 && f->at <= S_JOBS * 90 / 100);
        last = f->at;
    }
    assert_string_equal(oq_schedule_kind_name(OQ_FAULT_CARRIER_STALL),
                        "carrier SIGSTOP, then SIGCONT");
    oq_schedule_destroy(&s);
}

static void test_carrier_faults_move_no_other_fault(void **state)
{
    (void)state;
    oq_chaos_config_t without = s_config(424242, 0), with = s_config(424242, 3);
    oq_schedule_t *a = oq_schedule_new(&without);
    oq_schedule_t *b = oq_schedule_new(&with);
    size_t j = 0;
    for (size_t i = 0; i < oq_schedule_count(b); i++) {
        const oq_fault_t *f = oq_schedule_get(b, i);
        if (s_carrier_kind(f->kind))
            continue;
        assert_true(j < oq_schedule_count(a));
        assert_memory_equal(f, oq_schedule_get(a, j), sizeof *f);
        j++;
    }
    assert_int_equal(j, oq_schedule_count(a));
    for (uint32_t at = 0; at < S_JOBS; at++)
        assert_int_equal(oq_schedule_hook_at(a, at), oq_schedule_hook_at(b, at));
    oq_schedule_destroy(&a);
    oq_schedule_destroy(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_seed_same_schedule),
        cmocka_unit_test(test_carrier_faults_scheduled),
        cmocka_unit_test(test_carrier_faults_move_no_other_fault),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
