/*  test_crc32c: the standard check value, chaining, and the fast path
    against a plain bit-at-a-time reference on every length and alignment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "crc32c.h"

#define S_CHECK_VALUE 0xE3069283u /* CRC-32C of "123456789" */
#define S_SAMPLE      1024

/* The definition, one bit at a time. */
static uint32_t s_reference(const uint8_t *p, size_t len)
{
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < len; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

static void test_check_value(void **state)
{
    assert_int_equal(oq_crc32c(0, "123456789", 9), S_CHECK_VALUE);
    assert_int_equal(oq_crc32c(0, "", 0), 0);
}

static void test_chaining_equals_one_pass(void **state)
{
    const char *text = "123456789";
    for (size_t cut = 0; cut <= 9; cut++)
        assert_int_equal(oq_crc32c(oq_crc32c(0, text, cut), text + cut, 9 - cut), S_CHECK_VALUE);
}

static void test_matches_reference_on_all_lengths_and_alignments(void **state)
{
    uint8_t data[S_SAMPLE + 8];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof data; i++) {
        x = x * 1103515245u + 12345u;
        data[i] = (uint8_t)(x >> 16);
    }
    for (size_t offset = 0; offset < 8; offset++)
        for (size_t len = 0; len <= 100; len++)
            assert_int_equal(oq_crc32c(0, data + offset, len), s_reference(data + offset, len));
    assert_int_equal(oq_crc32c(0, data, S_SAMPLE), s_reference(data, S_SAMPLE));
}

static void test_one_flipped_bit_changes_it(void **state)
{
    uint8_t data[64] = {0};
    uint32_t clean = oq_crc32c(0, data, sizeof data);
    for (size_t bit = 0; bit < 8 * sizeof data; bit++) {
        data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_int_not_equal(oq_crc32c(0, data, sizeof data), clean);
        data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_value),
        cmocka_unit_test(test_chaining_equals_one_pass),
        cmocka_unit_test(test_matches_reference_on_all_lengths_and_alignments),
        cmocka_unit_test(test_one_flipped_bit_changes_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
