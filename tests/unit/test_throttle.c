/*  test_throttle.c: once per key per interval (broker/throttle.h), a flood
    of distinct keys bounded by the slots, and the suppressed count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "throttle.h"

#define S_MINUTE_MS 60000

static void test_once_per_key_per_interval(void **state)
{
    (void)state;
    oq_throttle_t *t = oq_throttle_new(4, S_MINUTE_MS);
    assert_non_null(t);
    assert_true(oq_throttle_allow(t, "alpha", 5, 0));
    assert_false(oq_throttle_allow(t, "alpha", 5, 1));
    assert_false(oq_throttle_allow(t, "alpha", 5, S_MINUTE_MS - 1));
    assert_true(oq_throttle_allow(t, "beta", 4, 2));
    assert_true(oq_throttle_allow(t, "alpha", 5, S_MINUTE_MS));
    assert_int_equal(oq_throttle_take_suppressed(t), 2);
    assert_int_equal(oq_throttle_take_suppressed(t), 0);
    oq_throttle_destroy(&t);
    assert_null(t);
}

static void test_a_flood_of_keys_is_bounded(void **state)
{
    (void)state;
    oq_throttle_t *t = oq_throttle_new(3, S_MINUTE_MS);
    int said = 0;
    for (int i = 0; i < 1000; i++) {
        char key[16];
        int len = snprintf(key, sizeof key, "key-%d", i);
        said += oq_throttle_allow(t, key, (size_t)len, i);
    }
    assert_int_equal(said, 3);
    assert_int_equal(oq_throttle_take_suppressed(t), 997);
    /* After the interval a slot is free again. */
    assert_true(oq_throttle_allow(t, "late", 4, S_MINUTE_MS + 1000));
    oq_throttle_destroy(&t);
}

static void test_long_keys_are_cut(void **state)
{
    (void)state;
    oq_throttle_t *t = oq_throttle_new(2, S_MINUTE_MS);
    char a[64], b[64];
    memset(a, 'k', sizeof a);
    memcpy(b, a, sizeof b);
    b[63] = 'x'; /* differs beyond OQ_THROTTLE_KEY_MAX */
    assert_true(oq_throttle_allow(t, a, sizeof a, 0));
    assert_false(oq_throttle_allow(t, b, sizeof b, 1));
    assert_true(oq_throttle_allow(t, "", 0, 2));
    oq_throttle_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_once_per_key_per_interval),
        cmocka_unit_test(test_a_flood_of_keys_is_bounded),
        cmocka_unit_test(test_long_keys_are_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
