/*  test_idmap: put, get, remove under growth and heavy churn, checked
    against a plain array. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "idmap.h"

static void test_put_get_remove(void **state)
{
    (void)state;
    oq_idmap_t *map = oq_idmap_new();
    int a, b;
    assert_int_equal(oq_idmap_put(map, 1, &a), 0);
    assert_int_equal(oq_idmap_put(map, 2, &b), 0);
    assert_ptr_equal(oq_idmap_get(map, 1), &a);
    assert_ptr_equal(oq_idmap_get(map, 2), &b);
    assert_null(oq_idmap_get(map, 3));
    assert_null(oq_idmap_get(map, 0));
    assert_ptr_equal(oq_idmap_remove(map, 1), &a);
    assert_null(oq_idmap_get(map, 1));
    assert_null(oq_idmap_remove(map, 1));
    assert_int_equal(oq_idmap_size(map), 1);
    oq_idmap_destroy(&map);
    assert_null(map);
}

static void test_churn_matches_model(void **state)
{
    (void)state;
    enum { IDS = 50000, OPS = 400000 };
    oq_idmap_t *map = oq_idmap_new();
    char *present = calloc(IDS + 1, 1);
    int token;
    size_t size = 0;
    srand(11);
    for (int op = 0; op < OPS; op++) {
        uint64_t id = 1 + (uint64_t)(rand() % IDS);
        if (rand() % 2) {
            assert_int_equal(oq_idmap_put(map, id, &token), 0);
            size += !present[id];
            present[id] = 1;
        } else {
            void *v = oq_idmap_remove(map, id);
            assert_true((v != NULL) == (present[id] != 0));
            size -= present[id];
            present[id] = 0;
        }
    }
    assert_int_equal(oq_idmap_size(map), size);
    for (uint64_t id = 1; id <= IDS; id++)
        assert_true((oq_idmap_get(map, id) != NULL) == (present[id] != 0));
    free(present);
    oq_idmap_destroy(&map);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_remove),
        cmocka_unit_test(test_churn_matches_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
