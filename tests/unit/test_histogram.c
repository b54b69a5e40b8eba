/*  test_histogram: observations land in the first bucket whose bound is
    not below them (Prometheus' "le"), beyond the last bound in +Inf, and
    the count and sum follow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "histogram.h"

static void test_buckets_are_upper_inclusive(void **state)
{
    (void)state;
    static const int64_t bounds[] = {10, 100, 1000};
    oq_histogram_t h;
    oq_histogram_init(&h, bounds, 3);
    oq_histogram_observe(&h, -5); /* counts as 0 */
    oq_histogram_observe(&h, 10);
    oq_histogram_observe(&h, 11);
    oq_histogram_observe(&h, 1000);
    oq_histogram_observe(&h, 1001);
    assert_int_equal(h.counts[0], 2);
    assert_int_equal(h.counts[1], 1);
    assert_int_equal(h.counts[2], 1);
    assert_int_equal(h.counts[3], 1); /* +Inf */
    assert_int_equal(h.count, 5);
    assert_int_equal(h.sum_us, 0 + 10 + 11 + 1000 + 1001);
}

static void test_standard_bounds_ascend_and_fit(void **state)
{
    (void)state;
    assert_true(oq_histogram_latency_count <= OQ_HISTOGRAM_MAX_BUCKETS);
    assert_true(oq_histogram_fsync_count <= OQ_HISTOGRAM_MAX_BUCKETS);
    for (size_t i = 1; i < oq_histogram_latency_count; i++)
        assert_true(oq_histogram_latency_us[i] > oq_histogram_latency_us[i - 1]);
    for (size_t i = 1; i < oq_histogram_fsync_count; i++)
        assert_true(oq_histogram_fsync_us[i] > oq_histogram_fsync_us[i - 1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_are_upper_inclusive),
        cmocka_unit_test(test_standard_bounds_ascend_and_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
