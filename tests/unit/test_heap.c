/*  test_heap: the deadline heap orders by deadline, removes from anywhere,
    and pops only what is due. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "heap.h"

static void test_pops_in_deadline_order(void **state)
{
    (void)state;
    oq_heap_t *heap = oq_heap_new();
    enum { N = 5000 };
    oq_heap_node_t *nodes = calloc(N, sizeof *nodes);
    srand(7);
    for (int i = 0; i < N; i++)
        assert_int_equal(oq_heap_push(heap, &nodes[i], rand() % 100000), 0);
    assert_int_equal(oq_heap_size(heap), N);
    int64_t last = -1;
    for (int i = 0; i < N; i++) {
        int64_t deadline = oq_heap_deadline(heap, oq_heap_peek(heap));
        oq_heap_node_t *top = oq_heap_pop_due(heap, INT64_MAX);
        assert_non_null(top);
        assert_true(deadline >= last);
        assert_false(oq_heap_contains(top));
        last = deadline;
    }
    assert_null(oq_heap_peek(heap));
    free(nodes);
    oq_heap_destroy(&heap);
    assert_null(heap);
}

static void test_pop_due_respects_now(void **state)
{
    (void)state;
    oq_heap_t *heap = oq_heap_new();
    oq_heap_node_t a = {0}, b = {0};
    oq_heap_push(heap, &a, 100);
    oq_heap_push(heap, &b, 200);
    assert_null(oq_heap_pop_due(heap, 99));
    assert_ptr_equal(oq_heap_pop_due(heap, 100), &a);
    assert_null(oq_heap_pop_due(heap, 150));
    assert_ptr_equal(oq_heap_peek(heap), &b);
    assert_ptr_equal(oq_heap_pop_due(heap, 1000), &b);
    oq_heap_destroy(&heap);
}

static void test_remove_from_middle_keeps_order(void **state)
{
    (void)state;
    oq_heap_t *heap = oq_heap_new();
    enum { N = 2000 };
    oq_heap_node_t *nodes = calloc(N, sizeof *nodes);
    for (int i = 0; i < N; i++)
        oq_heap_push(heap, &nodes[i], (i * 7919) % N);
    /* Remove every third node, then everything left must come out sorted. */
    for (int i = 0; i < N; i += 3) {
        oq_heap_remove(heap, &nodes[i]);
        assert_false(oq_heap_contains(&nodes[i]));
    }
    oq_heap_remove(heap, &nodes[0]); /* removing twice is a no-op */
    assert_int_equal(oq_heap_size(heap), N - (N + 2) / 3);
    int64_t last = -1;
    oq_heap_node_t *top;
    size_t count = 0;
    while ((top = oq_heap_peek(heap)) != NULL) {
        int64_t deadline = oq_heap_deadline(heap, top);
        assert_ptr_equal(oq_heap_pop_due(heap, INT64_MAX), top);
        assert_true(deadline >= last);
        assert_true((top - nodes) % 3 != 0);
        last = deadline;
        count++;
    }
    assert_int_equal(count, N - (N + 2) / 3);
    free(nodes);
    oq_heap_destroy(&heap);
}

static void test_reinsert_after_pop(void **state)
{
    (void)state;
    oq_heap_t *heap = oq_heap_new();
    oq_heap_node_t a = {0};
    oq_heap_push(heap, &a, 10);
    assert_ptr_equal(oq_heap_pop_due(heap, 10), &a);
    assert_int_equal(oq_heap_push(heap, &a, 5), 0);
    assert_int_equal(oq_heap_deadline(heap, oq_heap_peek(heap)), 5);
    oq_heap_destroy(&heap);
    assert_false(oq_heap_contains(&a)); /* destroy detaches nodes */
}

/* The deadline lives in the heap's array, so a node is its slot only:
   4 bytes in every job that embeds one. */
static void test_a_node_is_its_slot_only(void **state)
{
    (void)state;
    assert_int_equal(sizeof(oq_heap_node_t), sizeof(uint32_t));
    oq_heap_t *heap = oq_heap_new();
    oq_heap_node_t a = {0}, b = {0}, c = {0};
    oq_heap_push(heap, &a, 30);
    oq_heap_push(heap, &b, 10);
    oq_heap_push(heap, &c, 20);
    /* Every node keeps its own deadline as the others move around it. */
    assert_int_equal(oq_heap_deadline(heap, &a), 30);
    assert_int_equal(oq_heap_deadline(heap, &b), 10);
    assert_int_equal(oq_heap_deadline(heap, &c), 20);
    oq_heap_remove(heap, &b);
    assert_int_equal(oq_heap_deadline(heap, &a), 30);
    assert_int_equal(oq_heap_deadline(heap, &c), 20);
    assert_ptr_equal(oq_heap_peek(heap), &c);
    oq_heap_destroy(&heap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pops_in_deadline_order),
        cmocka_unit_test(test_pop_due_respects_now),
        cmocka_unit_test(test_remove_from_middle_keeps_order),
        cmocka_unit_test(test_reinsert_after_pop),
        cmocka_unit_test(test_a_node_is_its_slot_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
