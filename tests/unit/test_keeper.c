/*  test_keeper: the keeper takes the loop only from a handler that runs
    past its patience, runs turns until the handler returns, and gives the
    loop back, also after it slept through an idle spell; touches queued
    from handler code wait for whoever holds the loop, and one while the
    keeper holds it wakes its turn; a stop (SIGSTOP) in a handler counts as
    time the process did not run, also before the keeper has seen that
    handler run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "keeper.h"
#include "support.h"

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

static void test_keeper_holds_the_loop_only_for_a_long_handler(void **unused)
{
    s_loop_t loop = {0};
    loop.keeper = oq_keeper_new(s_turn, &loop, 10);
    assert_non_null(loop.keeper);

    /* Outside handler code the keeper never takes the loop. */
    oq_support_sleep_ms(100);
    assert_int_equal(atomic_load(&loop.turns), 0);
    assert_int_equal(oq_keeper_takeovers(loop.keeper), 0);

    /* A handler of 300 ms: taken within two patiences, then turns run. */
    oq_keeper_leave(loop.keeper);
    oq_support_sleep_ms(300);
    int during = atomic_load(&loop.turns);
    oq_keeper_enter(loop.keeper);
    assert_int_equal(oq_keeper_takeovers(loop.keeper), 1);
    assert_true(during >= 1);
    /* Given back: no turn runs while the main thread holds the loop. */
    int after = atomic_load(&loop.turns);
    oq_support_sleep_ms(100);
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
    oq_support_sleep_ms(1500);
    oq_keeper_leave(loop.keeper);
    oq_support_sleep_ms(300);
    oq_keeper_enter(loop.keeper);
    assert_int_equal(oq_keeper_takeovers(loop.keeper), 1);
    /* And again after another idle spell. */
    oq_support_sleep_ms(1500);
    oq_keeper_leave(loop.keeper);
    oq_support_sleep_ms(300);
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
        oq_support_sleep_ms(5);
    assert_int_equal(oq_keeper_touch(loop.keeper, 8), 0);
    for (int i = 0; i < 200 && atomic_load(&loop.touched) != 8; i++)
        oq_support_sleep_ms(5);
    assert_int_equal(atomic_load(&loop.touched), 8);
    oq_keeper_enter(loop.keeper);

    oq_keeper_destroy(&loop.keeper);
}

/* The child of the test below: a keeper whose first wake is a long
   patience away, and a handler that begins at once, is stopped by the
   parent, and goes on for a while after SIGCONT. Exit status 0 when the
   keeper counted the stop. */
#define S_LONG_PATIENCE_MS 1000
#define S_THREAD_START_MS  300 /* for the keeper's thread to begin its wait */
#define S_STOP_MS          2000
#define S_AFTER_STOP_MS    500

static void s_stopped_handler(int ready_fd)
{
    s_loop_t loop = {0};
    loop.keeper = oq_keeper_new(s_turn, &loop, S_LONG_PATIENCE_MS);
    if (!loop.keeper)
        _exit(2);
    /* A worker's keeper has long been waiting when a job begins; a new
       thread may not have run yet on a busy machine. */
    oq_support_sleep_ms(S_THREAD_START_MS);
    oq_keeper_leave(loop.keeper);
    char started = 1;
    if (write(ready_fd, &started, 1) != 1)
        _exit(2);
    /* Stopped in here; a relative sleep's clock runs on through a stop. */
    oq_support_sleep_ms(S_STOP_MS + S_AFTER_STOP_MS);
    oq_keeper_enter(loop.keeper);
    int64_t stalled_ms = oq_keeper_take_stall(loop.keeper);
    oq_keeper_destroy(&loop.keeper);
    fprintf(stderr, "keeper counted %lld ms not run\n", (long long)stalled_ms);
    /* The keeper woke about S_STOP_MS + S_THREAD_START_MS -
       S_LONG_PATIENCE_MS late. */
    _exit(stalled_ms >= (S_STOP_MS - S_LONG_PATIENCE_MS) / 2 ? 0 : 1);
}

/* The stop lands before the keeper's first look at the handler (every
   job shorter than the patience is so): the keeper still counts it. */
static void test_keeper_counts_a_stop_before_it_saw_the_handler(void **unused)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(ready[0]);
        s_stopped_handler(ready[1]);
    }
    close(ready[1]);
    char started;
    assert_int_equal(read(ready[0], &started, 1), 1);
    close(ready[0]);
    int status;
    assert_int_equal(kill(child, SIGSTOP), 0);
    assert_int_equal(waitpid(child, &status, WUNTRACED), child);
    assert_true(WIFSTOPPED(status));
    oq_support_sleep_ms(S_STOP_MS);
    assert_int_equal(kill(child, SIGCONT), 0);
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keeper_holds_the_loop_only_for_a_long_handler),
        cmocka_unit_test(test_keeper_wakes_from_idle_for_a_long_handler),
        cmocka_unit_test(test_keeper_queues_touches),
        cmocka_unit_test(test_keeper_counts_a_stop_before_it_saw_the_handler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
