/*  test_outbox: replies leave in order, only once the journal is durable
    up to the position each one needs, and the outbox refuses beyond its
    bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "outbox.h"

typedef struct {
    char got[16][32];
    size_t count;
} s_sent_t;

static int s_send(void *ctx, const void *identity, size_t identity_len, bool delimiter,
                  const void *body, size_t body_len)
{
    s_sent_t *sent = ctx;
    snprintf(sent->got[sent->count++], 32, "%.*s%s%.*s", (int)identity_len, (const char *)identity,
             delimiter ? "|" : ":", (int)body_len, (const char *)body);
    return 0;
}

static void test_replies_wait_for_their_position(void **state)
{
    oq_outbox_t *o = oq_outbox_new(8);
    s_sent_t sent = {.count = 0};
    assert_int_equal(oq_outbox_add(o, 10, 10, "a", 1, false, "one", 3), 0);
    assert_int_equal(oq_outbox_add(o, 20, 20, "bb", 2, true, "two", 3), 0);
    assert_int_equal(oq_outbox_add(o, 30, 30, "c", 1, false, "three", 5), 0);
    assert_int_equal(oq_outbox_needs(o), 30);
    assert_int_equal(oq_outbox_flush(o, 9, s_send, &sent), 0);
    assert_int_equal(oq_outbox_flush(o, 20, s_send, &sent), 2);
    assert_string_equal(sent.got[0], "a:one");
    assert_string_equal(sent.got[1], "bb|two");
    assert_int_equal(oq_outbox_count(o), 1);
    assert_int_equal(oq_outbox_add(o, 40, 40, "d", 1, false, "four", 4), 0);
    assert_int_equal(oq_outbox_flush(o, UINT64_MAX, s_send, &sent), 2);
    assert_string_equal(sent.got[2], "c:three");
    assert_string_equal(sent.got[3], "d:four");
    assert_int_equal(oq_outbox_count(o), 0);
    assert_int_equal(oq_outbox_needs(o), 0);
    oq_outbox_destroy(&o);
    assert_null(o);
}

typedef struct {
    int count;
    char got[8][32];
} s_rejected_t;

static void s_reject(void *ctx, const void *identity, size_t identity_len, bool delimiter,
                     int64_t req)
{
    s_rejected_t *r = ctx;
    snprintf(r->got[r->count++], sizeof r->got[0], "%.*s%s%lld", (int)identity_len,
             (const char *)identity, delimiter ? "|" : ":", (long long)req);
}

static void test_reject_answers_every_waiting_request_at_once(void **state)
{
    oq_outbox_t *o = oq_outbox_new(8);
    s_sent_t sent = {.count = 0};
    s_rejected_t rejected = {.count = 0};
    assert_int_equal(oq_outbox_add(o, 10, 7, "a", 1, false, "one", 3), 0);
    assert_int_equal(oq_outbox_add(o, 20, 8, "bb", 2, true, "two", 3), 0);
    assert_int_equal(oq_outbox_add(o, 30, -1, "c", 1, false, "three", 5), 0);
    assert_int_equal(oq_outbox_flush(o, 10, s_send, &sent), 1); /* "a" was durable */
    assert_int_equal(oq_outbox_reject(o, s_reject, &rejected), 2);
    assert_int_equal(rejected.count, 2);
    assert_string_equal(rejected.got[0], "bb|8");
    assert_string_equal(rejected.got[1], "c:-1");
    assert_int_equal(oq_outbox_count(o), 0);
    assert_int_equal(oq_outbox_needs(o), 0);
    /* Nothing rejected leaves later. */
    assert_int_equal(oq_outbox_flush(o, UINT64_MAX, s_send, &sent), 0);
    assert_int_equal(oq_outbox_add(o, 40, 9, "d", 1, false, "four", 4), 0);
    assert_int_equal(oq_outbox_flush(o, UINT64_MAX, s_send, &sent), 1);
    assert_string_equal(sent.got[1], "d:four");
    oq_outbox_destroy(&o);
}

static void test_bounded(void **state)
{
    oq_outbox_t *o = oq_outbox_new(2);
    assert_int_equal(oq_outbox_add(o, 1, 1, "a", 1, false, "x", 1), 0);
    assert_int_equal(oq_outbox_add(o, 1, 1, "a", 1, false, "x", 1), 0);
    assert_int_equal(oq_outbox_add(o, 1, 1, "a", 1, false, "x", 1), -1);
    oq_outbox_destroy(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replies_wait_for_their_position),
        cmocka_unit_test(test_reject_answers_every_waiting_request_at_once),
        cmocka_unit_test(test_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
