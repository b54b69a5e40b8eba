/*  test_waiters: the broker's waits for a job's end. A job's end answers
    its waiters once, oldest first, and no other job's; a deadline on a
    hand-moved clock answers a waiter as pending, and only when due; the
    limits in total and per connection refuse clearly and free their room
    again; a job that left without completing is remembered, the oldest
    forgotten past the ring. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "onceq/limits.h"
#include "onceq/keys.h"
#include "waiters.h"

static int64_t s_now_ms;

static int64_t s_clock_now(void *ctx)
{
    (void)ctx;
    return s_now_ms;
}

static const oq_clock_t s_clock = {s_clock_now, s_clock_now, NULL};

/* What the callbacks saw, in order. */
typedef struct {
    uint64_t job[16];
    int64_t req[16];
    char peer[16];
    bool confirms[16];
    size_t count;
} s_seen_t;

static void s_record(void *ctx, const oq_waiter_view_t *w)
{
    s_seen_t *seen = ctx;
    assert_true(seen->count < 16);
    seen->job[seen->count] = w->job_id;
    seen->req[seen->count] = w->req;
    seen->peer[seen->count] = ((const char *)w->identity)[0];
    seen->confirms[seen->count] = w->confirms;
    seen->count++;
}

/* A waiter from peer, on no known descriptor and with no key. */
static int s_add(oq_waiters_t *w, uint64_t job, int64_t timeout_ms, const char *peer, int64_t req)
{
    char reason[256];
    oq_waiter_owner_t owner = {peer, strlen(peer), -1, NULL, false};
    return oq_waiters_add(w, job, timeout_ms, &owner, false, req, reason, sizeof reason);
}

static void test_end_answers_the_jobs_waiters_once_oldest_first(void **state)
{
    (void)state;
    s_now_ms = 1000;
    oq_waiters_t *w = oq_waiters_new(100, 10, 100, &s_clock);
    assert_non_null(w);
    assert_int_equal(s_add(w, 7, 5000, "a", 1), 0);
    assert_int_equal(s_add(w, 8, 5000, "b", 2), 0);
    assert_int_equal(s_add(w, 7, 5000, "c", 3), 0);
    assert_int_equal(oq_waiters_count(w), 3);

    s_seen_t seen = {0};
    assert_int_equal(oq_waiters_end(w, 7, s_record, &seen), 2);
    assert_int_equal(seen.count, 2);
    assert_int_equal(seen.req[0], 1);
    assert_int_equal(seen.req[1], 3);
    assert_int_equal(seen.job[0], 7);
    assert_int_equal(oq_waiters_count(w), 1);
    /* Answered once: a second end of the job finds nobody. */
    assert_int_equal(oq_waiters_end(w, 7, s_record, &seen), 0);
    assert_int_equal(oq_waiters_end(w, 9, s_record, &seen), 0);
    assert_int_equal(seen.count, 2);
    /* The other job's waiter is still there, and its deadline too. */
    assert_int_equal(oq_waiters_next_deadline(w), 6000);
    assert_int_equal(oq_waiters_end(w, 8, s_record, &seen), 1);
    assert_int_equal(seen.req[2], 2);
    assert_int_equal(oq_waiters_count(w), 0);
    assert_int_equal(oq_waiters_next_deadline(w), -1);
    oq_waiters_destroy(&w);
    assert_null(w);
}

static void test_timeout_answers_only_when_due(void **state)
{
    (void)state;
    s_now_ms = 50000;
    oq_waiters_t *w = oq_waiters_new(100, 10, 100, &s_clock);
    assert_int_equal(s_add(w, 1, 300, "a", 1), 0);
    assert_int_equal(s_add(w, 2, 100, "a", 2), 0);
    assert_int_equal(s_add(w, 1, 0, "b", 3), 0);
    assert_int_equal(oq_waiters_next_deadline(w), 50000);

    s_seen_t seen = {0};
    /* A timeout of 0 is due at once. */
    assert_int_equal(oq_waiters_expire(w, s_record, &seen), 1);
    assert_int_equal(seen.req[0], 3);
    assert_int_equal(oq_waiters_next_deadline(w), 50100);
    s_now_ms = 50099;
    assert_int_equal(oq_waiters_expire(w, s_record, &seen), 0);
    s_now_ms = 50100;
    assert_int_equal(oq_waiters_expire(w, s_record, &seen), 1);
    assert_int_equal(seen.req[1], 2);
    /* An expired waiter is gone: its job's end does not answer it again. */
    assert_int_equal(oq_waiters_end(w, 2, s_record, &seen), 0);
    s_now_ms = 60000;
    assert_int_equal(oq_waiters_expire(w, s_record, &seen), 1);
    assert_int_equal(seen.job[2], 1);
    assert_int_equal(oq_waiters_count(w), 0);
    assert_int_equal(oq_waiters_end(w, 1, s_record, &seen), 0);
    assert_int_equal(seen.count, 3);
    oq_waiters_destroy(&w);
}

static void test_limits_refuse_and_free_their_room(void **state)
{
    (void)state;
    s_now_ms = 0;
    oq_waiters_t *w = oq_waiters_new(4, 2, 4, &s_clock);
    assert_int_equal(oq_waiters_max(w), 4); /* as stats shows them */
    assert_int_equal(oq_waiters_max_per_peer(w), 2);
    char reason[256];
    assert_int_equal(s_add(w, 1, 1000, "a", 1), 0);
    assert_int_equal(s_add(w, 2, 1000, "a", 2), 0);
    /* The connection's limit, named. */
    assert_int_equal(oq_waiters_add(w, 3, 1000, &(oq_waiter_owner_t){"a", 1, -1, NULL, false},
                                    false, 3, reason, sizeof reason),
                     -1);
    assert_non_null(strstr(reason, "per connection"));
    assert_int_equal(oq_waiters_of_peer(w, "a", 1), 2);
    /* Another connection still has room, until the total is reached. */
    assert_int_equal(s_add(w, 3, 1000, "b", 4), 0);
    assert_int_equal(s_add(w, 3, 1000, "c", 5), 0);
    assert_int_equal(oq_waiters_add(w, 4, 1000, &(oq_waiter_owner_t){"d", 1, -1, NULL, false},
                                    false, 6, reason, sizeof reason),
                     -1);
    assert_non_null(strstr(reason, "its limit"));
    assert_int_equal(oq_waiters_count(w), 4);
    /* Answered waiters give their room back, to their connection too. */
    s_seen_t seen = {0};
    assert_int_equal(oq_waiters_end(w, 1, s_record, &seen), 1);
    assert_int_equal(oq_waiters_of_peer(w, "a", 1), 1);
    assert_int_equal(s_add(w, 5, 1000, "a", 7), 0);
    s_now_ms = 1000;
    assert_int_equal(oq_waiters_expire(w, s_record, &seen), 4);
    assert_int_equal(oq_waiters_of_peer(w, "a", 1), 0);
    assert_int_equal(oq_waiters_count(w), 0);
    oq_waiters_destroy(&w);
}

/* A dispatch's wait is handed back as one, at its end and at its timeout. */
static void test_dispatch_waits_are_marked(void **state)
{
    (void)state;
    s_now_ms = 1000;
    oq_waiters_t *w = oq_waiters_new(100, 10, 100, &s_clock);
    assert_non_null(w);
    char reason[256];
    assert_int_equal(oq_waiters_add(w, 7, 5000, &(oq_waiter_owner_t){"a", 1, -1, NULL, false}, true,
                                    1, reason, sizeof reason),
                     0);
    assert_int_equal(oq_waiters_add(w, 7, 5000, &(oq_waiter_owner_t){"b", 1, -1, NULL, false},
                                    false, 2, reason, sizeof reason),
                     0);
    assert_int_equal(oq_waiters_add(w, 8, 500, &(oq_waiter_owner_t){"c", 1, -1, NULL, false}, true,
                                    3, reason, sizeof reason),
                     0);
    s_seen_t seen = {0};
    assert_int_equal(oq_waiters_end(w, 7, s_record, &seen), 2);
    assert_true(seen.confirms[0]);
    assert_false(seen.confirms[1]);
    s_now_ms += 500;
    assert_int_equal(oq_waiters_expire(w, s_record, &seen), 1);
    assert_int_equal(seen.req[2], 3);
    assert_true(seen.confirms[2]);
    oq_waiters_destroy(&w);
}

static void test_destroy_frees_unanswered_waiters(void **state)
{
    (void)state;
    s_now_ms = 0;
    oq_waiters_t *w = oq_waiters_new(100, 100, 100, &s_clock);
    for (uint64_t i = 0; i < 50; i++)
        assert_int_equal(s_add(w, 1 + i % 7, 1000 + (int64_t)i, "peer", (int64_t)i), 0);
    /* Leak-checked by the sanitizer build. */
    oq_waiters_destroy(&w);
    assert_null(w);
}

static void test_ends_remembered_oldest_forgotten(void **state)
{
    (void)state;
    oq_waiters_t *w = oq_waiters_new(1, 1, 1, &s_clock);
    oq_wait_state_t st;
    assert_int_equal(oq_waiters_recall_end(w, 5, &st), -1);
    oq_waiters_remember_end(w, 5, OQ_WAIT_CANCELLED);
    oq_waiters_remember_end(w, 6, OQ_WAIT_FAILED);
    assert_int_equal(oq_waiters_recall_end(w, 5, &st), 0);
    assert_int_equal(st, OQ_WAIT_CANCELLED);
    assert_int_equal(oq_waiters_recall_end(w, 6, &st), 0);
    assert_int_equal(st, OQ_WAIT_FAILED);
    for (uint64_t i = 0; i < OQ_WAIT_ENDS_REMEMBERED - 1; i++)
        oq_waiters_remember_end(w, 1000 + i, OQ_WAIT_CANCELLED);
    /* 5 was the oldest: gone; 6 is still within the ring. */
    assert_int_equal(oq_waiters_recall_end(w, 5, &st), -1);
    assert_int_equal(oq_waiters_recall_end(w, 6, &st), 0);
    oq_waiters_destroy(&w);
}

static void test_a_closed_connection_and_a_key_limit(void **state)
{
    (void)state;
    s_now_ms = 0;
    oq_waiters_t *w = oq_waiters_new(100, 10, 3, &s_clock);
    assert_int_equal(oq_waiters_max_per_key(w), 3);
    char reason[256];
    uint8_t key_a[OQ_KEY_BYTES] = {1}, key_b[OQ_KEY_BYTES] = {2};
    /* One key over two connections (descriptors 5 and 6), up to its limit. */
    oq_waiter_owner_t on5 = {"p", 1, 5, key_a, false}, on6 = {"q", 1, 6, key_a, false};
    oq_waiter_owner_t other = {"r", 1, 7, key_b, false}, unknown = {"s", 1, -1, NULL, false};
    assert_int_equal(oq_waiters_add(w, 1, 1000, &on5, false, 1, reason, sizeof reason), 0);
    assert_int_equal(oq_waiters_add(w, 2, 1000, &on5, false, 2, reason, sizeof reason), 0);
    assert_int_equal(oq_waiters_add(w, 1, 1000, &on6, false, 3, reason, sizeof reason), 0);
    assert_int_equal(oq_waiters_add(w, 3, 1000, &on6, false, 4, reason, sizeof reason), -1);
    assert_non_null(strstr(reason, "per key"));
    assert_int_equal(oq_waiters_of_key(w, key_a), 3);
    /* Another key, and a peer without one, still have room. */
    assert_int_equal(oq_waiters_add(w, 1, 1000, &other, false, 5, reason, sizeof reason), 0);
    assert_int_equal(oq_waiters_add(w, 1, 1000, &unknown, false, 6, reason, sizeof reason), 0);
    /* Descriptor 5 closes: its two waiters go unanswered, the others stay. */
    assert_int_equal(oq_waiters_drop_fd(w, 5), 2);
    assert_int_equal(oq_waiters_drop_fd(w, 5), 0);
    assert_int_equal(oq_waiters_drop_fd(w, -1), 0);
    assert_int_equal(oq_waiters_closed(w), 2);
    assert_int_equal(oq_waiters_count(w), 3);
    assert_int_equal(oq_waiters_of_key(w, key_a), 1);
    assert_int_equal(oq_waiters_of_peer(w, "p", 1), 0);
    /* The key has room again; job 1's list lost only the dropped one. */
    assert_int_equal(oq_waiters_add(w, 3, 1000, &on6, false, 7, reason, sizeof reason), 0);
    s_seen_t seen = {0};
    assert_int_equal(oq_waiters_end(w, 1, s_record, &seen), 3);
    assert_int_equal(seen.req[0], 3);
    assert_int_equal(seen.req[1], 5);
    assert_int_equal(seen.req[2], 6);
    assert_int_equal(oq_waiters_drop_fd(w, 6), 1); /* job 3's */
    assert_int_equal(oq_waiters_count(w), 0);
    assert_int_equal(oq_waiters_next_deadline(w), -1);
    /* Destroyed with waiters on a descriptor: nothing leaks (ASan). */
    assert_int_equal(oq_waiters_add(w, 4, 1000, &on5, false, 8, reason, sizeof reason), 0);
    oq_waiters_destroy(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_closed_connection_and_a_key_limit),
        cmocka_unit_test(test_end_answers_the_jobs_waiters_once_oldest_first),
        cmocka_unit_test(test_timeout_answers_only_when_due),
        cmocka_unit_test(test_limits_refuse_and_free_their_room),
        cmocka_unit_test(test_dispatch_waits_are_marked),
        cmocka_unit_test(test_destroy_frees_unanswered_waiters),
        cmocka_unit_test(test_ends_remembered_oldest_forgotten),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
