/*  test_dedupe: dispatch ids map to their job inside the window and not
    after it; the table grows, evicts its oldest at the bound and counts it;
    it grows only within the room it is given, and gives back half of
    itself, oldest ids first; lookups stay right while entries come and go
    around the ring. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dedupe.h"

#define S_WINDOW_MS 1000

static void s_digest(uint64_t n, uint8_t out[OQ_SIPHASH_DIGEST_BYTES])
{
    static const uint8_t key[OQ_SIPHASH_KEY_BYTES] = {7};
    oq_siphash128(key, &n, sizeof n, out);
}

static void test_find_within_window_only(void **state)
{
    oq_dedupe_t *d = oq_dedupe_new(16);
    uint8_t a[OQ_SIPHASH_DIGEST_BYTES], b[OQ_SIPHASH_DIGEST_BYTES];
    s_digest(1, a);
    s_digest(2, b);
    assert_int_equal(oq_dedupe_find(d, a, 0), 0);
    assert_int_equal(oq_dedupe_add(d, a, 42, S_WINDOW_MS), 0);
    assert_int_equal(oq_dedupe_find(d, a, 0), 42);
    assert_int_equal(oq_dedupe_find(d, a, S_WINDOW_MS - 1), 42);
    assert_int_equal(oq_dedupe_find(d, a, S_WINDOW_MS), 0); /* the window is over */
    assert_int_equal(oq_dedupe_find(d, b, 0), 0);
    assert_int_equal(oq_dedupe_add(d, a, 43, 2 * S_WINDOW_MS), 0); /* update in place */
    assert_int_equal(oq_dedupe_count(d), 1);
    assert_int_equal(oq_dedupe_find(d, a, S_WINDOW_MS), 43);
    assert_int_equal(oq_dedupe_expire(d, 2 * S_WINDOW_MS), 1);
    assert_int_equal(oq_dedupe_count(d), 0);
    oq_dedupe_destroy(&d);
    assert_null(d);
}

static void test_grows_then_evicts_the_oldest(void **state)
{
    const size_t max = 4096; /* more than the first allocation */
    oq_dedupe_t *d = oq_dedupe_new(max);
    uint8_t g[OQ_SIPHASH_DIGEST_BYTES];
    for (uint64_t n = 1; n <= max + 10; n++) {
        s_digest(n, g);
        assert_int_equal(oq_dedupe_add(d, g, n, S_WINDOW_MS + (int64_t)n), 0);
    }
    assert_int_equal(oq_dedupe_count(d), max);
    assert_int_equal(oq_dedupe_evicted(d), 10);
    for (uint64_t n = 1; n <= max + 10; n++) {
        s_digest(n, g);
        assert_int_equal(oq_dedupe_find(d, g, 0), n <= 10 ? 0 : n);
    }
    oq_dedupe_destroy(&d);
}

static void test_churn_keeps_lookups_right(void **state)
{
    /* Entries added and expired many times round a small ring: every index
       deletion must leave the remaining probes findable. */
    oq_dedupe_t *d = oq_dedupe_new(64);
    uint8_t g[OQ_SIPHASH_DIGEST_BYTES];
    for (uint64_t n = 1; n <= 10000; n++) {
        s_digest(n, g);
        assert_int_equal(oq_dedupe_add(d, g, n, (int64_t)n + 40), 0);
        oq_dedupe_expire(d, (int64_t)n);
        for (uint64_t k = n > 39 ? n - 39 : 1; k <= n; k++) {
            s_digest(k, g);
            assert_int_equal(oq_dedupe_find(d, g, (int64_t)n), k);
        }
    }
    assert_int_equal(oq_dedupe_evicted(d), 0);
    oq_dedupe_destroy(&d);
}

typedef struct {
    uint64_t ids[8];
    size_t count;
} s_seen_t;

static void s_collect(void *ctx, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES], uint64_t job_id,
                      int64_t expires_ms)
{
    s_seen_t *seen = ctx;
    (void)digest;
    assert_int_equal(expires_ms, (int64_t)job_id * 10);
    seen->ids[seen->count++] = job_id;
}

static void test_each_goes_oldest_first(void **state)
{
    oq_dedupe_t *d = oq_dedupe_new(4);
    uint8_t g[OQ_SIPHASH_DIGEST_BYTES];
    for (uint64_t n = 1; n <= 6; n++) {
        s_digest(n, g);
        oq_dedupe_add(d, g, n, (int64_t)n * 10);
    }
    s_seen_t seen = {{0}, 0};
    oq_dedupe_each(d, s_collect, &seen);
    assert_int_equal(seen.count, 4);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(seen.ids[i], i + 3);
    oq_dedupe_destroy(&d);
}

#define S_SMALLEST 1024 /* the table's first allocation (dedupe.c) */

static void test_grows_only_within_its_room_and_shrinks_oldest_first(void **state)
{
    oq_dedupe_t *d = oq_dedupe_new(1 << 16);
    uint8_t g[OQ_SIPHASH_DIGEST_BYTES];
    assert_int_equal(oq_dedupe_bytes(d), 0); /* the smallest table is not counted */
    assert_int_equal(oq_dedupe_shrink(d), 0);
    uint64_t n = 1;
    for (; n <= S_SMALLEST; n++) {
        s_digest(n, g);
        assert_int_equal(oq_dedupe_add_within(d, g, n, S_WINDOW_MS + (int64_t)n, 0), 0);
    }
    size_t grow = oq_dedupe_grow_bytes(d);
    assert_true(grow > 0);
    /* No room for growing: the oldest makes way. */
    s_digest(n, g);
    assert_int_equal(oq_dedupe_add_within(d, g, n, S_WINDOW_MS + (int64_t)n, grow - 1), 0);
    assert_int_equal(oq_dedupe_count(d), S_SMALLEST);
    assert_int_equal(oq_dedupe_evicted(d), 1);
    assert_int_equal(oq_dedupe_bytes(d), 0);
    /* Room for it: the table grows and counts what it took. */
    for (n++; n <= 3 * S_SMALLEST; n++) {
        s_digest(n, g);
        assert_int_equal(oq_dedupe_add_within(d, g, n, S_WINDOW_MS + (int64_t)n, SIZE_MAX), 0);
    }
    assert_int_equal(oq_dedupe_count(d), 3 * S_SMALLEST - 1);
    size_t bytes = oq_dedupe_bytes(d);
    assert_true(bytes > grow);
    /* Half given back: the newest half of the ring's room kept. */
    size_t freed = oq_dedupe_shrink(d);
    assert_int_equal(oq_dedupe_bytes(d), bytes - freed);
    assert_int_equal(oq_dedupe_count(d), 2 * S_SMALLEST);
    assert_int_equal(oq_dedupe_evicted(d), 1 + (S_SMALLEST - 1));
    assert_int_equal(oq_dedupe_oldest_expires(d), S_WINDOW_MS + (int64_t)(S_SMALLEST + 1));
    for (uint64_t k = 2; k <= 3 * S_SMALLEST; k++) {
        s_digest(k, g);
        assert_int_equal(oq_dedupe_find(d, g, 0), k <= S_SMALLEST ? 0 : k);
    }
    while (oq_dedupe_shrink(d) > 0)
        ;
    assert_int_equal(oq_dedupe_bytes(d), 0);
    assert_int_equal(oq_dedupe_count(d), S_SMALLEST);
    oq_dedupe_destroy(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_within_window_only),
        cmocka_unit_test(test_grows_then_evicts_the_oldest),
        cmocka_unit_test(test_churn_keeps_lookups_right),
        cmocka_unit_test(test_each_goes_oldest_first),
        cmocka_unit_test(test_grows_only_within_its_room_and_shrinks_oldest_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
