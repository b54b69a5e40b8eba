/*  onceq/zpoll.h: one poll(2) over ZeroMQ sockets and plain descriptors,
    for the broker's and the worker's loops.

    zmq_poll() polls every item once before it waits, and asks every socket
    for ZMQ_EVENTS before and after it waits; in libzmq each of those asks
    is a getpid(2) and a poll(2) of the socket's mailbox. Over the broker's
    four sockets that is some twenty system calls per loop turn, whatever
    woke it. Here a socket is waited on through its ZMQ_FD, and asked for
    ZMQ_EVENTS only when nothing else can say whether input waits.

    The contract of ZMQ_FD (zmq_getsockopt(3)): the descriptor becomes
    readable when the socket's state may have changed, edge-triggered, and a
    zmq_send or zmq_recv on the socket may take in the arrival of a message
    without the descriptor staying readable. So a socket is "unsure" from
    any send or receive until a receive finds it empty (EAGAIN) or
    ZMQ_EVENTS says it holds no input, and only a sure socket may be waited
    on through its descriptor: oq_zpoll asks each unsure socket for
    ZMQ_EVENTS first and does not wait if one has input.

    Callers keep to three rules: after every send on a socket, and after a
    receive that got a message when they stop reading before the socket is
    empty, oq_zsock_used; after a receive that failed, oq_zsock_recv_failed;
    a socket that oq_zpoll reports ready is read (until EAGAIN, or else
    oq_zsock_used). A socket belongs to one thread at a time, and so does its
    oq_zsock_t. */
#ifndef ONCEQ_ZPOLL_H
#define ONCEQ_ZPOLL_H

#include <stdbool.h>
#include <stddef.h>

/* The most items one oq_zpoll takes. */
#define OQ_ZPOLL_MAX_ITEMS 8

/* A ZeroMQ socket watched through its ZMQ_FD. */
typedef struct {
    void *socket; /* borrowed */
    int fd;       /* its ZMQ_FD, owned by libzmq */
    bool unsure;  /* used since it was last found empty: input may wait unsignalled */
} oq_zsock_t;

/* One item of a wait: a socket, or (sock NULL) a plain descriptor. */
typedef struct {
    oq_zsock_t *sock; /* borrowed; NULL for fd */
    int fd;           /* a descriptor to wait on for POLLIN, when sock is NULL */
    bool ready;       /* set by oq_zpoll: input may be read now */
} oq_zpoll_item_t;

/* Watch socket. 0, or -1 (errno) if its ZMQ_FD cannot be had. It starts
   unsure: nobody has looked at it yet. */
int oq_zsock_init(oq_zsock_t *self, void *socket);

/* Something was sent on the socket, or a receive got a message and the
   caller stops reading before one finds it empty: it may hold input that its
   descriptor will not signal. */
void oq_zsock_used(oq_zsock_t *self);

/* A receive on the socket failed with err (errno): EAGAIN means it is
   empty, and its descriptor signals what comes next; anything else leaves
   it unsure. */
void oq_zsock_recv_failed(oq_zsock_t *self, int err);

/* Wait up to timeout_ms (-1: without a limit) for input on any of the
   count items (at most OQ_ZPOLL_MAX_ITEMS), and mark each item's ready. An
   unsure socket is asked for ZMQ_EVENTS first: ready with input (and then
   nothing waits), sure without. A socket is also ready when its descriptor
   fired, which may be for nothing: its receive then fails with EAGAIN. The
   number of items ready, 0 if none in time, -1 on error (errno, EINTR
   included; no item is then ready). */
int oq_zpoll(oq_zpoll_item_t *items, size_t count, long timeout_ms);

#endif
