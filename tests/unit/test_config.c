/*  test_config.c: the strict value parsers shared by every binary
    (common/src/config.c). A refused value leaves the output untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "onceq/config.h"
#include "onceq/limits.h"

#define ENV "ONCEQ_TEST_CONFIG_VALUE"

static void test_str_flag_env_fallback(void **state)
{
    unsetenv(ENV);
    assert_string_equal(oq_config_str(NULL, ENV, "fallback"), "fallback");
    assert_null(oq_config_str(NULL, ENV, NULL));
    assert_string_equal(oq_config_str(NULL, NULL, "fallback"), "fallback");

    assert_int_equal(setenv(ENV, "tcp://10.0.0.1:7750", 1), 0);
    assert_string_equal(oq_config_str(NULL, ENV, "fallback"), "tcp://10.0.0.1:7750");
    /* The flag wins over the environment, even an empty flag. */
    assert_string_equal(oq_config_str("from-flag", ENV, "fallback"), "from-flag");
    assert_string_equal(oq_config_str("", ENV, "fallback"), "");

    /* An empty variable counts as unset. */
    assert_int_equal(setenv(ENV, "", 1), 0);
    assert_string_equal(oq_config_str(NULL, ENV, "fallback"), "fallback");
    unsetenv(ENV);
}

static void test_uint_accepts(void **state)
{
    uint64_t v = 99;
    assert_int_equal(oq_config_uint("0", 0, 10, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(oq_config_uint("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(oq_config_uint("007", 0, 100, &v), 0);
    assert_int_equal(v, 7);
    /* The bounds themselves are in range. */
    assert_int_equal(oq_config_uint("1", 1, 1000, &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(oq_config_uint("1000", 1, 1000, &v), 0);
    assert_int_equal(v, 1000);
    assert_int_equal(oq_config_uint("18446744073709551615", 0, UINT64_MAX, &v), 0);
    assert_true(v == UINT64_MAX);
}

static void test_uint_refuses(void **state)
{
    static const char *const bad[] = {
        "",
        "-1",
        "+1",
        "1x",
        "x1",
        " 1",
        "1 ",
        "\t1",
        "1.5",
        "1e3",
        "0x10",
        "1,2",
        "- 1",
        "--1",
        "abc",
        "18446744073709551616", /* 2^64: overflow */
        "99999999999999999999999",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        uint64_t v = 12345;
        if (oq_config_uint(bad[k], 0, UINT64_MAX, &v) != -1)
            fail_msg("\"%s\" accepted as %llu", bad[k], (unsigned long long)v);
        assert_int_equal(v, 12345);
    }
    uint64_t v = 12345;
    assert_int_equal(oq_config_uint(NULL, 0, 10, &v), -1);
    assert_int_equal(oq_config_uint("0", 1, 10, &v), -1);  /* below min */
    assert_int_equal(oq_config_uint("11", 1, 10, &v), -1); /* above max */
    assert_int_equal(oq_config_uint("1001", 1, OQ_MAX_TRIES_LIMIT, &v), -1);
    assert_int_equal(v, 12345);
}

/* Bug: strtoull skips blanks and takes a sign, so " -1" read as 2^64-1. */
static void test_uint_refuses_blank_then_sign(void **state)
{
    uint64_t v = 5;
    assert_int_equal(oq_config_uint(" -1", 0, UINT64_MAX, &v), -1);
    assert_int_equal(oq_config_uint(" -0", 0, 10, &v), -1);
    assert_int_equal(oq_config_uint(" +3", 0, 10, &v), -1);
    assert_int_equal(v, 5);
}

static void test_seconds_accepts(void **state)
{
    static const struct {
        const char *text;
        int64_t ms;
    } good[] = {
        {"0", 0},     {"90", 90000}, {"0.25", 250}, {"1.5", 1500},    {".5", 500},
        {"2.", 2000}, {"0.001", 1},  {"0.0016", 2}, {"1e3", 1000000}, {"86400", OQ_MAX_TIMEOUT_MS},
    };
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
        int64_t ms = -7;
        if (oq_config_seconds(good[k].text, OQ_MAX_DELAY_MS, &ms) != 0)
            fail_msg("\"%s\" refused", good[k].text);
        if (ms != good[k].ms)
            fail_msg("\"%s\" is %lld ms, want %lld", good[k].text, (long long)ms,
                     (long long)good[k].ms);
    }
    int64_t ms = 0;
    assert_int_equal(oq_config_seconds("86400", OQ_MAX_TIMEOUT_MS, &ms), 0); /* max itself */
    assert_int_equal(ms, OQ_MAX_TIMEOUT_MS);
}

static void test_seconds_refuses(void **state)
{
    static const char *const bad[] = {
        "",    "-1",  "-0.5", "+1",  "1x",  "1s",
        "x",   "1 ",  "inf",  "nan", "INF", "1e400", /* overflow: ERANGE */
        "1,5", "..5", ".",    "e3",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int64_t ms = 4242;
        if (oq_config_seconds(bad[k], OQ_MAX_DELAY_MS, &ms) != -1)
            fail_msg("\"%s\" accepted as %lld ms", bad[k], (long long)ms);
        assert_int_equal(ms, 4242);
    }
    int64_t ms = 4242;
    assert_int_equal(oq_config_seconds(NULL, OQ_MAX_TIMEOUT_MS, &ms), -1);
    assert_int_equal(oq_config_seconds("86401", OQ_MAX_TIMEOUT_MS, &ms), -1);
    assert_int_equal(oq_config_seconds("86400.001", OQ_MAX_TIMEOUT_MS, &ms), -1);
    assert_int_equal(oq_config_seconds("0.001", 0, &ms), -1);
    assert_int_equal(ms, 4242);
}

static void test_backoff_accepts(void **state)
{
    int64_t ms[OQ_MAX_BACKOFF_STEPS];
    uint32_t n = 0;
    assert_int_equal(oq_config_backoff("10,60,300", ms, OQ_MAX_BACKOFF_STEPS, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ms[0], 10000);
    assert_int_equal(ms[1], 60000);
    assert_int_equal(ms[2], 300000);

    assert_int_equal(oq_config_backoff("0.25", ms, OQ_MAX_BACKOFF_STEPS, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ms[0], 250);

    assert_int_equal(oq_config_backoff("0,2592000", ms, OQ_MAX_BACKOFF_STEPS, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ms[0], 0);
    assert_int_equal(ms[1], OQ_MAX_BACKOFF_MS); /* 30 days, the largest step */

    /* 16 steps, the limit. */
    assert_int_equal(
        oq_config_backoff("1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", ms, OQ_MAX_BACKOFF_STEPS, &n),
        0);
    assert_int_equal(n, OQ_MAX_BACKOFF_STEPS);
    for (uint32_t k = 0; k < n; k++)
        assert_int_equal(ms[k], (int64_t)(k + 1) * 1000);
}

static void test_backoff_refuses(void **state)
{
    static const char *const bad[] = {
        "",        ",",       "1,,2",
        ",1",      "1,",      ",,",
        "1,x",     "x",       "1,-2",
        "-1",      "1 ,2",    "1;2",
        "2592001",                                                         /* over 30 days */
        "1,inf",   "1,1e400", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", /* 17 steps */
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int64_t ms[OQ_MAX_BACKOFF_STEPS + 1];
        uint32_t n = 77;
        if (oq_config_backoff(bad[k], ms, OQ_MAX_BACKOFF_STEPS, &n) != -1)
            fail_msg("\"%s\" accepted with %u steps", bad[k], n);
        assert_int_equal(n, 77);
    }
    int64_t ms[4];
    uint32_t n = 77;
    assert_int_equal(oq_config_backoff(NULL, ms, 4, &n), -1);
    /* The max given by the caller is the limit, whatever OQ_MAX_BACKOFF_STEPS says. */
    assert_int_equal(oq_config_backoff("1,2,3", ms, 2, &n), -1);
    assert_int_equal(oq_config_backoff("1", ms, 0, &n), -1);
    assert_int_equal(n, 77);

    /* Text too long for the parser's buffer is refused, not cut. */
    char long_text[600];
    memset(long_text, '0', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = 0;
    assert_int_equal(oq_config_backoff(long_text, ms, 4, &n), -1);
    assert_int_equal(n, 77);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_str_flag_env_fallback),
        cmocka_unit_test(test_uint_accepts),
        cmocka_unit_test(test_uint_refuses),
        cmocka_unit_test(test_uint_refuses_blank_then_sign),
        cmocka_unit_test(test_seconds_accepts),
        cmocka_unit_test(test_seconds_refuses),
        cmocka_unit_test(test_backoff_accepts),
        cmocka_unit_test(test_backoff_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
