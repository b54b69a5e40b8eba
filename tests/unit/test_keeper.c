/*  test_keeper: the keeper takes the loop only from a handler that runs
    past its patience, runs turns until the handler returns, and gives the
    loop back, also after it slept through an idle spell; touches queued
    from handler code wait for whoever holds the loop, and one while the
    keeper holds it wakes its turn. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <poll.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "keeper.h"

/* What the keeper's turns saw. */
typedef struct {
    _Atomic int turns;
    _Atomic uint64_t touched; /* the last touch a turn took */
    oq_keeper_t *keeper;
} s_loop_t;

/* A turn: wait for the wake fd up to 50 ms, read it, take a touch. */
static int s_turn(void *arg, int wake_fd)
{
    s_loop_t *loop = arg;
    atomic_fetch_add(&loop->turns, 1);
    struct pollfd item = {.fd = wake_fd, .events = POLLIN};
    if (poll(&item, 1, 50) == 1) {
        uint64_t tokens;
        assert_int_equal(read(wake_fd, &tokens, sizeof tokens), sizeof tokens);
    }
    uint64_t id = oq_keeper_take_touch(loop->keeper);
    if (id)
        atomic_store(&loop->touched, id);
    return 0;
}

static void s_sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&t, &t) < 0)
        ;
}

static void test_keeper_holds_the_loop_only_for_a_long_handler(void **unused)
{
    s_loop_t loop = {0};
    loop.keeper = oq_keeper_new(s_turn, &loop, 10);
    assert_non_null(loop.keeper);

    /* Outside handler code the keeper never takes the loop. */
    s_sleep_ms(100);
    assert_int_equal(atomic_load(&loop.turns), 0);
    assert_int_equal(oq_keeper_takeovers(loop.keeper), 0);

    /* A handler of 300 ms: taken within two patiences, then turns run. */
    oq_keeper_leave(loop.keeper);
    s_sleep_ms(300);
    int during = atomic_load(&loop.turns);
    oq_keeper_enter(loop.keeper);
    assert_int_equal(oq_keeper_takeovers(loop.keeper), 1);
    assert_true(during >= 1);
    /* Given back: no turn runs while the main thread holds the loop. */
    int after = atomic_load(&loop.turns);
    s_sleep_ms(100);
    assert_int_equal(atomic_load(&loop.turns), after);

    oq_keeper_destroy(&loop.keeper);
    assert_null(loop.keeper);
}

/* After a second and more without a handler the keeper sleeps until one
   starts: the first handler after that still has the keeper take over. */
static void test_keeper_wakes_from_idle_for_a_long_handler(void **unused)
{
    s_loop_t loop = {0};
    loop.keeper = oq_keeper_new(s_turn, &loop, 10);
    assert_non_null(loop.keeper);
    s_sleep_ms(1500);
    oq_keeper_leave(loop.keeper);
    s_sleep_ms(300);
    oq_keeper_enter(loop.keeper);
    assert_int_equal(oq_keeper_takeovers(loop.keeper), 1);
    /* And again after another idle spell. */
    s_sleep_ms(1500);
    oq_keeper_leave(loop.keeper);
    s_sleep_ms(300);
    oq_keeper_enter(loop.keeper);
    assert_int_equal(oq_keeper_takeovers(loop.keeper), 2);
    oq_keeper_destroy(&loop.keeper);
}

static void test_keeper_queues_touches(void **unused)
{
    s_loop_t loop = {0};
    loop.keeper = oq_keeper_new(s_turn, &loop, 10);
    assert_non_null(loop.keeper);

    /* Nobody holds the loop for the keeper yet: the touch waits. */
    oq_keeper_leave(loop.keeper);
    assert_int_equal(oq_keeper_touch(loop.keeper, 7), 0);
    oq_keeper_enter(loop.keeper);
    assert_int_equal(oq_keeper_take_touch(loop.keeper), 7);
    assert_int_equal(oq_keeper_take_touch(loop.keeper), 0);

    /* The keeper holds the loop: a touch reaches its next turn. */
    oq_keeper_leave(loop.keeper);
    while (oq_keeper_takeovers(loop.keeper) == 0)
        s_sleep_ms(5);
    assert_int_equal(oq_keeper_touch(loop.keeper, 8), 0);
    for (int i = 0; i < 200 && atomic_load(&loop.touched) != 8; i++)
        s_sleep_ms(5);
    assert_int_equal(atomic_load(&loop.touched), 8);
    oq_keeper_enter(loop.keeper);

    oq_keeper_destroy(&loop.keeper);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keeper_holds_the_loop_only_for_a_long_handler),
        cmocka_unit_test(test_keeper_wakes_from_idle_for_a_long_handler),
        cmocka_unit_test(test_keeper_queues_touches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
