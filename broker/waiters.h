/*  waiters.h: producers waiting for a job to end (the "wait" command,
    docs/protocol.md). A waiter is a request held until its job reaches an
    end state (done, failed, review, cancelled) or its timeout passes; the
    broker then answers it once and the waiter is gone. Nothing here talks
    to sockets or to the engine: the broker tells the module which job
    ended, and gets back the waiters to answer.

    Bounded: at most max_total waiters, at most max_per_peer from one
    connection (its ROUTER identity), and at most max_per_key from all the
    connections of one CURVE key, so that no key can take every slot and
    lock out the others (an admin's wait among them); past any of them the
    add is refused with a reason naming the limit. A peer's waiters go with
    its connection: the broker tells the module when a descriptor closes
    (oq_waiters_drop_fd), and they are forgotten unanswered, since nobody
    is there to read an answer. Every waiter also has a deadline. The
    deadlines sit in a heap; the broker's loop sleeps until the nearest.

    It also remembers how the last OQ_WAIT_ENDS_REMEMBERED jobs that left
    the broker without completing ended (cancelled, or deleted from the
    failed store), so that a wait on one of them is not answered "done". */
#ifndef ONCEQ_WAITERS_H
#define ONCEQ_WAITERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onceq/clock.h"
#include "onceq/proto.h"

typedef struct oq_waiters oq_waiters_t;

/* One waiter, as handed to the caller to answer. Borrowed for the call. */
typedef struct {
    uint64_t job_id;
    int64_t req; /* the wait's request id (-1: none) */
    const void *identity;
    size_t identity_len;
    int fd;         /* its connection's descriptor, -1 if unknown */
    bool delimiter; /* a REQ peer: answer behind an empty frame */
    bool confirms;  /* a dispatch's wait: its answer also confirms the dispatch */
} oq_waiter_view_t;

/* Who asks to wait. Borrowed for the call. */
typedef struct {
    const void *identity; /* its ROUTER identity */
    size_t identity_len;
    int fd;             /* its connection's descriptor (ZMQ_SRCFD), -1 if unknown */
    const uint8_t *key; /* the CURVE key it speaks with (OQ_KEY_BYTES), NULL without keys */
    bool delimiter;     /* a REQ peer: answer behind an empty frame */
} oq_waiter_owner_t;

typedef void (*oq_waiter_fn)(void *ctx, const oq_waiter_view_t *waiter);

/* An empty set of waiters timed by clock (borrowed). NULL if memory runs
   out. */
oq_waiters_t *oq_waiters_new(size_t max_total, size_t max_per_peer, size_t max_per_key,
                             const oq_clock_t *clock);

/* Free every waiter (unanswered); set *self_p to NULL. */
void oq_waiters_destroy(oq_waiters_t **self_p);

/* Hold a wait for job_id from owner (copied) until the job ends, its
   connection closes or timeout_ms from now; confirms marks the wait of a
   dispatch (docs/protocol.md, "Dispatch and wait in one request"), which
   the view hands back. 0, or -1 with reason (the total, the connection's
   or the key's limit is reached, or memory runs out): nothing is held. */
int oq_waiters_add(oq_waiters_t *self, uint64_t job_id, int64_t timeout_ms,
                   const oq_waiter_owner_t *owner, bool confirms, int64_t req, char *reason,
                   size_t reason_len);

/* The connection on fd closed: forget its waiters, unanswered. Returns
   how many. */
size_t oq_waiters_drop_fd(oq_waiters_t *self, int fd);

/* Waiters forgotten because their connection closed, since start. */
uint64_t oq_waiters_closed(const oq_waiters_t *self);

/* Job job_id ended: call fn for each of its waiters, oldest first, and
   forget them. Returns how many. */
size_t oq_waiters_end(oq_waiters_t *self, uint64_t job_id, oq_waiter_fn fn, void *ctx);

/* Call fn for each waiter whose deadline has come, and forget it.
   Returns how many. */
size_t oq_waiters_expire(oq_waiters_t *self, oq_waiter_fn fn, void *ctx);

/* The nearest deadline (monotonic ms), or -1 if no waiter is held. */
int64_t oq_waiters_next_deadline(const oq_waiters_t *self);

/* Waiters held now, in all, from one peer, and from one key. */
size_t oq_waiters_count(const oq_waiters_t *self);
size_t oq_waiters_of_peer(const oq_waiters_t *self, const void *identity, size_t identity_len);
size_t oq_waiters_of_key(const oq_waiters_t *self, const uint8_t *key);

/* The limits given to oq_waiters_new: in all, from one peer, from one key. */
size_t oq_waiters_max(const oq_waiters_t *self);
size_t oq_waiters_max_per_peer(const oq_waiters_t *self);
size_t oq_waiters_max_per_key(const oq_waiters_t *self);

/* Job job_id left the broker without completing, as state (cancelled, or
   failed for a job deleted from the failed store): remember it, forgetting
   the oldest past OQ_WAIT_ENDS_REMEMBERED. */
void oq_waiters_remember_end(oq_waiters_t *self, uint64_t job_id, oq_wait_state_t state);

/* How job job_id ended, if it is remembered: 0 with *state, or -1. */
int oq_waiters_recall_end(const oq_waiters_t *self, uint64_t job_id, oq_wait_state_t *state);

#endif
