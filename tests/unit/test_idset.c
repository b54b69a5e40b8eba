/*  test_idset: insert, get, remove under growth and heavy churn, checked
    against a plain array; the table costs a pointer a slot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "idset.h"

typedef struct {
    uint64_t id;
} s_item_t;

static uint64_t s_id_of(const void *value)
{
    return ((const s_item_t *)value)->id;
}

static void test_insert_get_remove(void **state)
{
    (void)state;
    oq_idset_t *set = oq_idset_new(s_id_of);
    s_item_t a = {1}, b = {2}, a2 = {1};
    assert_int_equal(oq_idset_insert(set, &a), 0);
    assert_int_equal(oq_idset_insert(set, &b), 0);
    assert_int_equal(oq_idset_insert(set, &a2), 1); /* id 1 is held: nothing changes */
    assert_ptr_equal(oq_idset_get(set, 1), &a);
    assert_ptr_equal(oq_idset_get(set, 2), &b);
    assert_null(oq_idset_get(set, 3));
    assert_null(oq_idset_get(set, 0));
    assert_ptr_equal(oq_idset_remove(set, 1), &a);
    assert_null(oq_idset_get(set, 1));
    assert_null(oq_idset_remove(set, 1));
    assert_int_equal(oq_idset_size(set), 1);
    oq_idset_destroy(&set);
    assert_null(set);
}

static void test_churn_matches_model(void **state)
{
    (void)state;
    enum { IDS = 50000, OPS = 400000 };
    oq_idset_t *set = oq_idset_new(s_id_of);
    s_item_t *items = calloc(IDS + 1, sizeof *items);
    char *present = calloc(IDS + 1, 1);
    size_t size = 0;
    srand(11);
    for (uint64_t id = 1; id <= IDS; id++)
        items[id].id = id;
    for (int op = 0; op < OPS; op++) {
        uint64_t id = 1 + (uint64_t)(rand() % IDS);
        if (rand() % 2) {
            assert_int_equal(oq_idset_insert(set, &items[id]), present[id] ? 1 : 0);
            size += !present[id];
            present[id] = 1;
        } else {
            void *v = oq_idset_remove(set, id);
            assert_ptr_equal(v, present[id] ? &items[id] : NULL);
            size -= present[id];
            present[id] = 0;
        }
    }
    assert_int_equal(oq_idset_size(set), size);
    for (uint64_t id = 1; id <= IDS; id++)
        assert_ptr_equal(oq_idset_get(set, id), present[id] ? &items[id] : NULL);
    free(present);
    free(items);
    oq_idset_destroy(&set);
}

/* What a held job pays for being found by id: a pointer a slot, the table
   at most 70% full and, growing by half, at least 46% full once it has
   grown, so under 8 / 0.46 bytes per value at any size. */
static void test_a_slot_is_a_pointer(void **state)
{
    (void)state;
    enum { N = 200000, INITIAL_BYTES = 1024 * sizeof(void *) };
    oq_idset_t *set = oq_idset_new(s_id_of);
    s_item_t *items = calloc(N + 1, sizeof *items);
    for (uint64_t id = 1; id <= N; id++) {
        items[id].id = id;
        assert_int_equal(oq_idset_insert(set, &items[id]), 0);
        size_t bytes = oq_idset_table_bytes(set);
        assert_true(bytes * 70 / 100 >= (size_t)id * sizeof(void *));
        if (bytes > INITIAL_BYTES)
            assert_true(bytes * 46 / 100 <= (size_t)id * sizeof(void *));
    }
    for (uint64_t id = 1; id <= N; id++)
        assert_ptr_equal(oq_idset_get(set, id), &items[id]);
    free(items);
    oq_idset_destroy(&set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_insert_get_remove),
        cmocka_unit_test(test_churn_matches_model),
        cmocka_unit_test(test_a_slot_is_a_pointer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
