/*  test_peers.c: connections bound to their role at the first message and
    counted against its limit (broker/peers.h): a second message changes
    nothing, a close frees the slot, a reused descriptor or a key whose
    role changed is bound afresh, and the view lists what is bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "peers.h"

static const size_t s_max[OQ_ROLE_COUNT_] = {0, 2, 3, 1};

static void s_key(uint8_t key[OQ_KEY_BYTES], uint8_t fill)
{
    memset(key, fill, OQ_KEY_BYTES);
}

static void test_limits_per_role(void **state)
{
    (void)state;
    oq_peers_t *p = oq_peers_new(s_max);
    assert_non_null(p);
    uint8_t k1[OQ_KEY_BYTES], k2[OQ_KEY_BYTES];
    s_key(k1, 1);
    s_key(k2, 2);
    assert_int_equal(oq_peers_bind(p, 10, OQ_SIDE_FRONT, OQ_ROLE_PRODUCER, k1, "a", 1), 0);
    /* The same connection again: no second count. */
    assert_int_equal(oq_peers_bind(p, 10, OQ_SIDE_FRONT, OQ_ROLE_PRODUCER, k1, "a", 1), 0);
    assert_int_equal(oq_peers_count(p, OQ_ROLE_PRODUCER), 1);
    assert_true(oq_peers_room(p, OQ_ROLE_PRODUCER));
    /* Two connections of one key count twice. */
    assert_int_equal(oq_peers_bind(p, 11, OQ_SIDE_FRONT, OQ_ROLE_PRODUCER, k1, "b", 1), 0);
    assert_false(oq_peers_room(p, OQ_ROLE_PRODUCER));
    assert_int_equal(oq_peers_bind(p, 12, OQ_SIDE_FRONT, OQ_ROLE_PRODUCER, k2, "c", 1), -1);
    assert_int_equal(oq_peers_count(p, OQ_ROLE_PRODUCER), 2);
    /* Other roles have their own room. */
    assert_int_equal(oq_peers_bind(p, 12, OQ_SIDE_FRONT, OQ_ROLE_ADMIN, k2, "c", 1), 0);
    assert_false(oq_peers_room(p, OQ_ROLE_ADMIN));
    assert_true(oq_peers_room(p, OQ_ROLE_WORKER));
    oq_peers_refusing(p, OQ_ROLE_PRODUCER);
    oq_peers_refusing(p, OQ_ROLE_PRODUCER);
    assert_int_equal(oq_peers_refused(p, OQ_ROLE_PRODUCER), 2);
    /* A close frees the slot. */
    oq_peers_forget(p, 10);
    oq_peers_forget(p, 10);
    oq_peers_forget(p, 999); /* never seen */
    assert_int_equal(oq_peers_count(p, OQ_ROLE_PRODUCER), 1);
    assert_int_equal(oq_peers_bind(p, 13, OQ_SIDE_FRONT, OQ_ROLE_PRODUCER, k2, "d", 1), 0);
    assert_int_equal(oq_peers_max(p, OQ_ROLE_WORKER), 3);
    oq_peers_destroy(&p);
    assert_null(p);
}

static void test_rebinding(void **state)
{
    (void)state;
    oq_peers_t *p = oq_peers_new(s_max);
    uint8_t k1[OQ_KEY_BYTES], k2[OQ_KEY_BYTES];
    s_key(k1, 1);
    s_key(k2, 2);
    assert_int_equal(oq_peers_bind(p, 5, OQ_SIDE_BACK, OQ_ROLE_WORKER, k1, "w", 1), 0);
    /* A reused descriptor (its close not read yet) with another key. */
    assert_int_equal(oq_peers_bind(p, 5, OQ_SIDE_FRONT, OQ_ROLE_PRODUCER, k2, "p", 1), 0);
    assert_int_equal(oq_peers_count(p, OQ_ROLE_WORKER), 0);
    assert_int_equal(oq_peers_count(p, OQ_ROLE_PRODUCER), 1);
    /* A key whose role a reload changed moves to its new role. */
    assert_int_equal(oq_peers_bind(p, 5, OQ_SIDE_FRONT, OQ_ROLE_ADMIN, k2, "p", 1), 0);
    assert_int_equal(oq_peers_count(p, OQ_ROLE_PRODUCER), 0);
    assert_int_equal(oq_peers_count(p, OQ_ROLE_ADMIN), 1);
    /* Descriptors far apart; out of range ones are not tracked. */
    assert_int_equal(oq_peers_bind(p, 4000, OQ_SIDE_BACK, OQ_ROLE_WORKER, k1, "far", 3), 0);
    assert_int_equal(oq_peers_bind(p, -1, OQ_SIDE_BACK, OQ_ROLE_WORKER, k1, "x", 1), 0);
    assert_int_equal(oq_peers_count(p, OQ_ROLE_WORKER), 1);
    oq_peers_destroy(&p);
}

typedef struct {
    size_t seen;
    int fd;
    size_t identity_len;
    oq_role_t role;
} s_each_t;

static void s_each(void *ctx, const oq_peer_view_t *peer)
{
    s_each_t *e = ctx;
    e->seen++;
    e->fd = peer->fd;
    e->identity_len = peer->identity_len;
    e->role = peer->role;
    assert_int_equal(peer->key[0], 7);
}

static void test_each(void **state)
{
    (void)state;
    oq_peers_t *p = oq_peers_new(s_max);
    uint8_t k[OQ_KEY_BYTES];
    s_key(k, 7);
    assert_int_equal(oq_peers_bind(p, 33, OQ_SIDE_BACK, OQ_ROLE_WORKER, k, "ident", 5), 0);
    s_each_t e = {0};
    oq_peers_each(p, s_each, &e);
    assert_int_equal(e.seen, 1);
    assert_int_equal(e.fd, 33);
    assert_int_equal(e.identity_len, 5);
    assert_int_equal(e.role, OQ_ROLE_WORKER);
    oq_peers_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_per_role),
        cmocka_unit_test(test_rebinding),
        cmocka_unit_test(test_each),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
