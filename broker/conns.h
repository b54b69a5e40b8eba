/*  conns.h: the broker's connections against its open-file limit. Every
    peer holds a descriptor, and libzmq's listener, when accept() fails with
    EMFILE, is left readable and polled again at once: the broker would spin
    at 100% CPU and lock out every new peer without a word.

    So the connections are counted (a socket monitor on each listening
    socket reports every accept and every close) against a cap that leaves
    a reserve of descriptors below the limit. A peer accepted over the cap
    is shut down at once (its descriptor stays libzmq's, which closes it),
    so the listener never meets EMFILE; connected peers are served as usual.
    Hitting the cap is logged once, and so is getting below it again.

    A connection that never finishes its handshake must not hold a
    descriptor long, nor may one source take them all: a peer that opens
    idle TCP connections (no ZMTP greeting, no CURVE HELLO) never reaches
    the ZAP handler, so it is judged here, at the accept. libzmq drops an
    unfinished handshake after handshake_ms (ZMQ_HANDSHAKE_IVL). Until a
    connection sends its first message (oq_conns_spoke), or that time has
    passed, it counts as in its handshake; one source address may have
    max_handshakes_per_addr of those, and a connection beyond is shut down
    at once, so a flood from one address leaves the others their room.
    All sources together may have a share of the cap in their handshake
    (OQ_HANDSHAKE_SHARE_DIVISOR, at most OQ_MAX_HANDSHAKES); past it, and
    at the cap, the oldest of them is dropped to take the new one, so a
    flood from many addresses still lets a new peer in and never touches
    a peer past its handshake. None is dropped in its first
    OQ_HANDSHAKE_GRACE_MS, whose first message may wait unread in this
    turn; when all are that young the new one is refused.

    The per-role limits (peers.h) learn from here when a descriptor opens
    or closes (oq_conns_watch), and refuse a connection through here. */
#ifndef ONCEQ_CONNS_H
#define ONCEQ_CONNS_H

#include <stdbool.h>
#include <stddef.h>

#include "onceq/clock.h"
#include "onceq/zpoll.h"

typedef struct oq_conns oq_conns_t;

typedef struct {
    size_t max_conns;               /* the cap if lower than the open-file limit's; 0: that */
    size_t max_handshakes_per_addr; /* in their handshake from one source; 0: no such cap */
    int handshake_ms;               /* the sockets' ZMQ_HANDSHAKE_IVL */
} oq_conns_config_t;

/* Watch the listening sockets (borrowed; bound already) of ctx. The cap
   is the soft RLIMIT_NOFILE minus the descriptors open now minus
   OQ_FD_RESERVE, or config->max_conns if that is lower and not 0. clock
   is borrowed. NULL if the monitors cannot be set up. */
oq_conns_t *oq_conns_new(void *ctx, void *const sockets[], size_t count,
                         const oq_conns_config_t *config, const oq_clock_t *clock);

/* Stop watching; set *self_p to NULL. Call before the sockets close. */
void oq_conns_destroy(oq_conns_t **self_p);

/* The monitor sockets to wait on for input (onceq/zpoll.h): count in
 *count. Borrowed; oq_conns_poll keeps their state. */
oq_zsock_t *oq_conns_pollers(oq_conns_t *self, size_t *count);

/* Read every waiting monitor event, until each monitor is empty: count
   accepts and closes, shut down peers over the cap. Never blocks. */
void oq_conns_poll(oq_conns_t *self);

/* Connections open now (accepted, not yet closed), over every socket. */
size_t oq_conns_count(const oq_conns_t *self);

/* The cap. */
size_t oq_conns_max(const oq_conns_t *self);

/* True while a new peer may be admitted (count below the cap). */
bool oq_conns_room(const oq_conns_t *self);

/* Peers shut down for want of room, since start. */
unsigned long long oq_conns_refused(const oq_conns_t *self);

/* A message came on connection fd (ZMQ_SRCFD; -1 is ignored): its
   handshake is over. */
void oq_conns_spoke(oq_conns_t *self, int fd);

/* Call fn(ctx, fd, open) for every descriptor accepted (open true) or
   closed (false) from now on, as the events are read: whatever was known
   about a connection on fd is stale. One watcher; NULL stops watching. */
void oq_conns_watch(oq_conns_t *self, void (*fn)(void *ctx, int fd, bool open), void *ctx);

/* True if the connection last seen on fd has closed and none was
   accepted on fd since, once every waiting event is read (a message read
   now from fd came from a peer that is gone). False for a descriptor
   never seen. */
bool oq_conns_closed(oq_conns_t *self, int fd);

/* Shut down the connection on fd (if fd is still a connected socket):
   libzmq sees it end and closes it. For a peer refused after it was
   accepted (a role over its limit). */
void oq_conns_shutdown(oq_conns_t *self, int fd);

#endif
