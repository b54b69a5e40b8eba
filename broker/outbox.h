/*  outbox.h: replies waiting for the journal. A reply that tells a producer
    its job is kept ("dispatched", "requeued") may leave only once the record
    behind it is durable under the fsync policy. Each waiting reply carries
    the journal position its record ends at; after a loop turn's write and
    fsync the broker sends every reply up to the durable position, in the
    order they were made.

    It also keeps the replies that meet a full pipe. libzmq holds only so
    many messages for one peer (the front socket's send high-water mark);
    a producer that keeps more requests in flight than that, or reads
    slower than the broker answers, finds the pipe full, and a reply sent
    then would be lost though the peer is alive and waiting for it. Such a
    reply is kept for its peer instead, and so is every later reply to
    that peer (its answers leave in the order they were made); the broker
    sends them again each loop turn until the pipe takes them. Bounded: past
    OQ_MAX_KEPT_BYTES_PER_PEER for one peer, or OQ_MAX_KEPT_BYTES for all,
    a peer (the one holding most) is cut off: its kept replies are dropped
    and the broker is told (oq_outbox_cut_fn), which logs it, counts it and
    shuts the connection down, so the peer sees its connection end. */
#ifndef ONCEQ_OUTBOX_H
#define ONCEQ_OUTBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct oq_outbox oq_outbox_t;

/* Send one reply without blocking: 0, or -1 with errno EAGAIN if the
   peer's pipe is full (the reply is then kept for it), or any other errno
   if the peer cannot be reached (the reply is dropped: nobody is there to
   read it, and the producer resends with its dispatch id). */
typedef int (*oq_outbox_send_fn)(void *ctx, const void *identity, size_t identity_len,
                                 bool delimiter, const void *body, size_t body_len);

/* A peer was cut off at the bound: replies kept for it were dropped. fd
   is the connection's descriptor as its messages named it (-1: unknown). */
typedef void (*oq_outbox_cut_fn)(void *ctx, const void *identity, size_t identity_len, int fd,
                                 size_t replies, size_t bytes);

/* What the outbox keeps for full pipes, now and since it was made. */
typedef struct {
    uint64_t kept;        /* replies kept now */
    uint64_t kept_bytes;  /* their bytes, with a small header each */
    uint64_t kept_peers;  /* peers they are for */
    uint64_t full_pipes;  /* replies that met a full pipe, since start */
    uint64_t peers_cut;   /* peers cut off at the bound, since start */
    uint64_t cut_replies; /* replies dropped with them */
} oq_outbox_stats_t;

/* An empty outbox holding at most max_replies waiting for the journal;
   peers cut off are told to cut (called with ctx). NULL if memory runs
   out. */
oq_outbox_t *oq_outbox_new(size_t max_replies, oq_outbox_cut_fn cut, void *ctx);

/* Free it and every waiting reply; set *self_p to NULL. */
void oq_outbox_destroy(oq_outbox_t **self_p);

/* Keep a reply (bytes copied) to request req from the connection on fd
   (-1: unknown) until the journal is durable up to needs. 0, or -1 if the
   outbox is full or memory runs out. */
int oq_outbox_add(oq_outbox_t *self, uint64_t needs, int64_t req, const void *identity,
                  size_t identity_len, int fd, bool delimiter, const void *body, size_t body_len);

/* Send a reply now through send, behind any reply kept for the same peer;
   one that meets a full pipe is kept (bytes copied). 0 if it went or is
   kept, -1 if the peer is gone, or was cut off at the bound (dropped). */
int oq_outbox_send(oq_outbox_t *self, const void *identity, size_t identity_len, int fd,
                   bool delimiter, const void *body, size_t body_len, oq_outbox_send_fn send,
                   void *ctx);

/* Send the replies kept for each peer, oldest first, until its pipe is
   full again; a peer found gone loses them. Returns how many went. */
size_t oq_outbox_retry(oq_outbox_t *self, oq_outbox_send_fn send, void *ctx);

/* The connection on fd closed: drop what is kept for it. Returns how
   many replies. */
size_t oq_outbox_forget_fd(oq_outbox_t *self, int fd);

/* The numbers above. */
oq_outbox_stats_t oq_outbox_stats(const oq_outbox_t *self);

/* Answer a request whose reply cannot wait any longer. */
typedef void (*oq_outbox_reject_fn)(void *ctx, const void *identity, size_t identity_len,
                                    bool delimiter, int64_t req);

/* The journal cannot write the records the waiting replies need: drop
   every waiting reply, oldest first, calling reject for each so that its
   peer gets an answer now instead of after the disk recovers. Returns how
   many. */
size_t oq_outbox_reject(oq_outbox_t *self, oq_outbox_reject_fn reject, void *ctx);

/* Send, oldest first, every reply whose needs is at most durable, as
   oq_outbox_send does. Returns how many left the journal's queue (sent,
   kept for a full pipe, or dropped because their peer was gone). */
size_t oq_outbox_flush(oq_outbox_t *self, uint64_t durable, oq_outbox_send_fn send, void *ctx);

/* Replies waiting for the journal (not those kept for full pipes). */
size_t oq_outbox_count(const oq_outbox_t *self);

/* The position the newest waiting reply needs (the largest), 0 if none. */
uint64_t oq_outbox_needs(const oq_outbox_t *self);

#endif
