/*  test_outbox: replies leave in order, only once the journal is durable
    up to the position each one needs, and the outbox refuses beyond its
    bound. A reply that meets a full pipe is kept and sent later, behind
    nothing newer to the same peer; a peer that never reads is cut off at
    the bound, and one that is gone loses what was kept for it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>

#include "onceq/limits.h"
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

/* A pipe to each peer: "full" takes nothing (EAGAIN), "gone" is not
   there (EHOSTUNREACH); any other takes everything. */
typedef struct {
    s_sent_t sent;
    bool full, gone;
    size_t cut, cut_replies;
    int cut_fd;
} s_pipe_t;

static int s_pipe_send(void *ctx, const void *identity, size_t identity_len, bool delimiter,
                       const void *body, size_t body_len)
{
    s_pipe_t *pipe = ctx;
    bool to_b = identity_len == 1 && *(const char *)identity == 'b';
    if (to_b && pipe->gone) {
        errno = EHOSTUNREACH;
        return -1;
    }
    if (to_b && pipe->full) {
        errno = EAGAIN;
        return -1;
    }
    if (pipe->sent.count == 16)
        return 0; /* the bulk of test_a_peer_that_never_reads_is_cut_off */
    return s_send(&pipe->sent, identity, identity_len, delimiter, body, body_len);
}

static void s_cut(void *ctx, const void *identity, size_t identity_len, int fd, size_t replies,
                  size_t bytes)
{
    (void)identity, (void)identity_len, (void)bytes;
    s_pipe_t *pipe = ctx;
    pipe->cut++;
    pipe->cut_replies = replies;
    pipe->cut_fd = fd;
}

static void test_a_full_pipe_keeps_replies_in_order(void **state)
{
    (void)state;
    s_pipe_t pipe = {.full = true};
    oq_outbox_t *o = oq_outbox_new(8, s_cut, &pipe);
    assert_int_equal(oq_outbox_send(o, "b", 1, 7, false, "one", 3, s_pipe_send, &pipe), 0);
    assert_int_equal(oq_outbox_add(o, 10, 2, "b", 1, 7, false, "two", 3), 0);
    assert_int_equal(oq_outbox_add(o, 10, 3, "a", 1, 8, false, "A", 1), 0);
    assert_int_equal(oq_outbox_flush(o, 10, s_pipe_send, &pipe), 2);
    assert_int_equal(pipe.sent.count, 1); /* a's went, b's are kept */
    assert_string_equal(pipe.sent.got[0], "a:A");
    oq_outbox_stats_t st = oq_outbox_stats(o);
    assert_int_equal(st.kept, 2);
    assert_int_equal(st.kept_peers, 1);
    assert_int_equal(st.full_pipes, 2);
    /* The pipe has room again, but a new reply still goes behind the kept. */
    pipe.full = false;
    assert_int_equal(oq_outbox_send(o, "b", 1, 7, true, "three", 5, s_pipe_send, &pipe), 0);
    assert_int_equal(pipe.sent.count, 1);
    assert_int_equal(oq_outbox_retry(o, s_pipe_send, &pipe), 3);
    assert_int_equal(pipe.sent.count, 4);
    assert_string_equal(pipe.sent.got[1], "b:one");
    assert_string_equal(pipe.sent.got[2], "b:two");
    assert_string_equal(pipe.sent.got[3], "b|three");
    st = oq_outbox_stats(o);
    assert_int_equal(st.kept, 0);
    assert_int_equal(st.kept_bytes, 0);
    assert_int_equal(st.kept_peers, 0);
    assert_int_equal(pipe.cut, 0);
    oq_outbox_destroy(&o);
}

static void test_a_peer_gone_or_closed_loses_what_was_kept(void **state)
{
    (void)state;
    s_pipe_t pipe = {.full = true};
    oq_outbox_t *o = oq_outbox_new(8, s_cut, &pipe);
    assert_int_equal(oq_outbox_send(o, "b", 1, 7, false, "one", 3, s_pipe_send, &pipe), 0);
    pipe.gone = true;
    assert_int_equal(oq_outbox_retry(o, s_pipe_send, &pipe), 0);
    assert_int_equal(oq_outbox_stats(o).kept, 0);
    assert_int_equal(oq_outbox_send(o, "b", 1, 7, false, "two", 3, s_pipe_send, &pipe), -1);
    pipe.gone = false;
    assert_int_equal(oq_outbox_send(o, "b", 1, 7, false, "three", 5, s_pipe_send, &pipe), 0);
    assert_int_equal(oq_outbox_stats(o).kept, 1);
    assert_int_equal(oq_outbox_forget_fd(o, 6), 0);
    assert_int_equal(oq_outbox_forget_fd(o, 7), 1);
    assert_int_equal(oq_outbox_stats(o).kept_peers, 0);
    assert_int_equal(pipe.cut, 0);
    assert_int_equal(pipe.sent.count, 0);
    oq_outbox_destroy(&o);
}

static void test_a_peer_that_never_reads_is_cut_off(void **state)
{
    (void)state;
    s_pipe_t pipe = {.full = true};
    oq_outbox_t *o = oq_outbox_new(8, s_cut, &pipe);
    char body[1024];
    memset(body, 'x', sizeof body);
    size_t kept = 0;
    while (pipe.cut == 0) {
        int rc = oq_outbox_send(o, "b", 1, 7, false, body, sizeof body, s_pipe_send, &pipe);
        kept += rc == 0;
        assert_true(kept <= OQ_MAX_KEPT_BYTES_PER_PEER / sizeof body);
    }
    assert_int_equal(pipe.cut_replies, kept);
    assert_int_equal(pipe.cut_fd, 7);
    oq_outbox_stats_t st = oq_outbox_stats(o);
    assert_int_equal(st.kept, 0);
    assert_int_equal(st.peers_cut, 1);
    assert_int_equal(st.cut_replies, kept);
    /* Other peers are served as before. */
    assert_int_equal(oq_outbox_send(o, "a", 1, 8, false, "A", 1, s_pipe_send, &pipe), 0);
    assert_int_equal(pipe.sent.count, 1);
    oq_outbox_destroy(&o);
}

static void test_replies_wait_for_their_position(void **state)
{
    oq_outbox_t *o = oq_outbox_new(8, NULL, NULL);
    s_sent_t sent = {.count = 0};
    assert_int_equal(oq_outbox_add(o, 10, 10, "a", 1, -1, false, "one", 3), 0);
    assert_int_equal(oq_outbox_add(o, 20, 20, "bb", 2, -1, true, "two", 3), 0);
    assert_int_equal(oq_outbox_add(o, 30, 30, "c", 1, -1, false, "three", 5), 0);
    assert_int_equal(oq_outbox_needs(o), 30);
    assert_int_equal(oq_outbox_flush(o, 9, s_send, &sent), 0);
    assert_int_equal(oq_outbox_flush(o, 20, s_send, &sent), 2);
    assert_string_equal(sent.got[0], "a:one");
    assert_string_equal(sent.got[1], "bb|two");
    assert_int_equal(oq_outbox_count(o), 1);
    assert_int_equal(oq_outbox_add(o, 40, 40, "d", 1, -1, false, "four", 4), 0);
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
    oq_outbox_t *o = oq_outbox_new(8, NULL, NULL);
    s_sent_t sent = {.count = 0};
    s_rejected_t rejected = {.count = 0};
    assert_int_equal(oq_outbox_add(o, 10, 7, "a", 1, -1, false, "one", 3), 0);
    assert_int_equal(oq_outbox_add(o, 20, 8, "bb", 2, -1, true, "two", 3), 0);
    assert_int_equal(oq_outbox_add(o, 30, -1, "c", 1, -1, false, "three", 5), 0);
    assert_int_equal(oq_outbox_flush(o, 10, s_send, &sent), 1); /* "a" was durable */
    assert_int_equal(oq_outbox_reject(o, s_reject, &rejected), 2);
    assert_int_equal(rejected.count, 2);
    assert_string_equal(rejected.got[0], "bb|8");
    assert_string_equal(rejected.got[1], "c:-1");
    assert_int_equal(oq_outbox_count(o), 0);
    assert_int_equal(oq_outbox_needs(o), 0);
    /* Nothing rejected leaves later. */
    assert_int_equal(oq_outbox_flush(o, UINT64_MAX, s_send, &sent), 0);
    assert_int_equal(oq_outbox_add(o, 40, 9, "d", 1, -1, false, "four", 4), 0);
    assert_int_equal(oq_outbox_flush(o, UINT64_MAX, s_send, &sent), 1);
    assert_string_equal(sent.got[1], "d:four");
    oq_outbox_destroy(&o);
}

static void test_bounded(void **state)
{
    oq_outbox_t *o = oq_outbox_new(2, NULL, NULL);
    assert_int_equal(oq_outbox_add(o, 1, 1, "a", 1, -1, false, "x", 1), 0);
    assert_int_equal(oq_outbox_add(o, 1, 1, "a", 1, -1, false, "x", 1), 0);
    assert_int_equal(oq_outbox_add(o, 1, 1, "a", 1, -1, false, "x", 1), -1);
    oq_outbox_destroy(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replies_wait_for_their_position),
        cmocka_unit_test(test_reject_answers_every_waiting_request_at_once),
        cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_a_full_pipe_keeps_replies_in_order),
        cmocka_unit_test(test_a_peer_gone_or_closed_loses_what_was_kept),
        cmocka_unit_test(test_a_peer_that_never_reads_is_cut_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
