/*  test_zpoll: one poll(2) over ZeroMQ sockets and plain descriptors. A
    socket's message is found whether its descriptor signalled it or a send
    on the socket took the signal in (the edge-triggered trap of ZMQ_FD); a
    socket found empty is waited on through its descriptor alone; plain
    descriptors are ready when readable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "onceq/zpoll.h"

/* Generous: a wait that should end at once must not look like a timeout
   on a loaded machine, and one that runs out means a stranded message. */
#define S_WAIT_MS  5000
#define S_SHORT_MS 20

typedef struct {
    void *ctx;
    void *ours;   /* the socket watched */
    void *theirs; /* its peer */
    oq_zsock_t wait;
} s_pair_t;

static void s_pair_open(s_pair_t *p, const char *endpoint)
{
    p->ctx = zmq_ctx_new();
    assert_non_null(p->ctx);
    p->ours = zmq_socket(p->ctx, ZMQ_PAIR);
    p->theirs = zmq_socket(p->ctx, ZMQ_PAIR);
    assert_int_equal(zmq_bind(p->ours, endpoint), 0);
    assert_int_equal(zmq_connect(p->theirs, endpoint), 0);
    assert_int_equal(oq_zsock_init(&p->wait, p->ours), 0);
    assert_true(p->wait.unsure);
}

static void s_pair_close(s_pair_t *p)
{
    int zero = 0;
    zmq_setsockopt(p->ours, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(p->theirs, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(p->ours);
    zmq_close(p->theirs);
    zmq_ctx_term(p->ctx);
}

/* Receive on ours without waiting, telling the watch what came of it: 1
   with the text in buf, 0 if empty. */
static int s_recv(s_pair_t *p, char *buf, size_t len)
{
    int n = zmq_recv(p->ours, buf, len - 1, ZMQ_DONTWAIT);
    if (n < 0) {
        assert_int_equal(errno, EAGAIN);
        oq_zsock_recv_failed(&p->wait, errno);
        return 0;
    }
    buf[n] = 0;
    return 1;
}

/* Read ours until it is empty, as the loops do; the last message in buf. */
static int s_drain(s_pair_t *p, char *buf, size_t len)
{
    int got = 0;
    while (s_recv(p, buf, len))
        got++;
    return got;
}

static int s_wait(s_pair_t *p, long timeout_ms)
{
    oq_zpoll_item_t item = {.sock = &p->wait};
    int n = oq_zpoll(&item, 1, timeout_ms);
    assert_int_equal(item.ready, n == 1);
    return n;
}

static void test_zpoll_wakes_for_a_message(void **unused)
{
    (void)unused;
    s_pair_t p;
    s_pair_open(&p, "inproc://zpoll-wake");
    char buf[32];
    /* Unsure at first: asked, found empty, then sure, and the wait times out. */
    assert_int_equal(s_wait(&p, S_SHORT_MS), 0);
    assert_false(p.wait.unsure);

    assert_int_equal(zmq_send(p.theirs, "one", 3, 0), 3);
    assert_int_equal(s_wait(&p, S_WAIT_MS), 1);
    assert_int_equal(s_drain(&p, buf, sizeof buf), 1);
    assert_string_equal(buf, "one");
    assert_false(p.wait.unsure);

    /* Empty and sure: nothing wakes the wait. */
    assert_int_equal(s_wait(&p, S_SHORT_MS), 0);
    assert_int_equal(zmq_send(p.theirs, "two", 3, 0), 3);
    assert_int_equal(s_wait(&p, S_WAIT_MS), 1);
    assert_int_equal(s_drain(&p, buf, sizeof buf), 1);
    assert_string_equal(buf, "two");
    s_pair_close(&p);
}

/* The trap: a message arrives while the loop is busy, and a send on the
   socket before the loop waits takes in the signal of its arrival. The
   descriptor then stays quiet; a loop that waited on it alone would
   strand the message until something else came. */
static void test_zpoll_finds_a_message_a_send_took_in(void **unused)
{
    (void)unused;
    s_pair_t p;
    s_pair_open(&p, "inproc://zpoll-trap");
    char buf[32];
    assert_int_equal(zmq_send(p.theirs, "first", 5, 0), 5);
    assert_int_equal(s_wait(&p, S_WAIT_MS), 1);
    assert_int_equal(s_drain(&p, buf, sizeof buf), 1);
    assert_false(p.wait.unsure);

    /* Busy: the next message arrives, and its signal with it. */
    assert_int_equal(zmq_send(p.theirs, "second", 6, 0), 6);
    struct pollfd fd = {.fd = p.wait.fd, .events = POLLIN};
    assert_int_equal(poll(&fd, 1, S_WAIT_MS), 1);

    /* The loop answers something before it waits: the socket's first send
       takes in its commands, the arrival among them. */
    assert_int_equal(zmq_send(p.ours, "ack", 3, 0), 3);
    oq_zsock_used(&p.wait);
    fd.revents = 0;
    assert_int_equal(poll(&fd, 1, 0), 0); /* what a wait on the descriptor alone would see */

    /* oq_zpoll asks the used socket and does not wait. */
    assert_int_equal(s_wait(&p, S_WAIT_MS), 1);
    assert_int_equal(s_drain(&p, buf, sizeof buf), 1);
    assert_string_equal(buf, "second");
    s_pair_close(&p);
}

/* A socket stays unsure after a receive that stopped before it was empty,
   and the wait finds what was left without a signal. */
static void test_zpoll_finds_what_a_batch_left(void **unused)
{
    (void)unused;
    s_pair_t p;
    s_pair_open(&p, "inproc://zpoll-batch");
    char buf[32];
    assert_int_equal(s_wait(&p, S_SHORT_MS), 0);
    assert_int_equal(zmq_send(p.theirs, "a", 1, 0), 1);
    assert_int_equal(zmq_send(p.theirs, "b", 1, 0), 1);
    /* Both are in the pipe once inproc's sends return. Read one: the
       batch is full, and the signal of their arrival is taken in. */
    assert_int_equal(s_wait(&p, S_WAIT_MS), 1);
    assert_int_equal(s_recv(&p, buf, sizeof buf), 1);
    assert_string_equal(buf, "a");
    struct pollfd fd = {.fd = p.wait.fd, .events = POLLIN};
    assert_int_equal(poll(&fd, 1, 0), 0);
    oq_zsock_used(&p.wait);
    assert_int_equal(s_wait(&p, S_WAIT_MS), 1);
    assert_int_equal(s_drain(&p, buf, sizeof buf), 1);
    assert_string_equal(buf, "b");
    s_pair_close(&p);
}

/* Plain descriptors beside a socket: ready when readable, and a socket
   with input makes the wait only a look at them. */
static void test_zpoll_plain_descriptors(void **unused)
{
    (void)unused;
    s_pair_t p;
    s_pair_open(&p, "inproc://zpoll-fds");
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    assert_true(efd >= 0);
    oq_zpoll_item_t items[2] = {{.fd = efd}, {.sock = &p.wait}};
    assert_int_equal(oq_zpoll(items, 2, S_SHORT_MS), 0);
    assert_false(items[0].ready || items[1].ready);

    uint64_t one = 1;
    assert_int_equal(write(efd, &one, sizeof one), sizeof one);
    assert_int_equal(oq_zpoll(items, 2, S_WAIT_MS), 1);
    assert_true(items[0].ready);
    assert_false(items[1].ready);
    uint64_t tokens;
    assert_int_equal(read(efd, &tokens, sizeof tokens), sizeof tokens);

    assert_int_equal(zmq_send(p.theirs, "x", 1, 0), 1);
    assert_int_equal(zmq_send(p.ours, "y", 1, 0), 1); /* may take the signal in */
    oq_zsock_used(&p.wait);
    assert_int_equal(oq_zpoll(items, 2, S_WAIT_MS), 1);
    assert_false(items[0].ready);
    assert_true(items[1].ready);
    close(efd);
    s_pair_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zpoll_wakes_for_a_message),
        cmocka_unit_test(test_zpoll_finds_a_message_a_send_took_in),
        cmocka_unit_test(test_zpoll_finds_what_a_batch_left),
        cmocka_unit_test(test_zpoll_plain_descriptors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
