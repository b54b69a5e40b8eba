/*  outbox.h: replies waiting for the journal. A reply that tells a producer
    its job is kept ("dispatched", "requeued") may leave only once the record
    behind it is durable under the fsync policy. Each waiting reply carries
    the journal position its record ends at; after a loop turn's write and
    fsync the broker sends every reply up to the durable position, in the
    order they were made. */
#ifndef ONCEQ_OUTBOX_H
#define ONCEQ_OUTBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct oq_outbox oq_outbox_t;

/* Send one reply: 0, or -1 if the peer cannot be reached (the reply is
   dropped either way: the producer resends with its dispatch id). */
typedef int (*oq_outbox_send_fn)(void *ctx, const void *identity, size_t identity_len,
                                 bool delimiter, const void *body, size_t body_len);

/* An empty outbox holding at most max_replies. NULL if memory runs out. */
oq_outbox_t *oq_outbox_new(size_t max_replies);

/* Free it and every waiting reply; set *self_p to NULL. */
void oq_outbox_destroy(oq_outbox_t **self_p);

/* Keep a reply (bytes copied) to request req until the journal is durable
   up to needs. 0, or -1 if the outbox is full or memory runs out. */
int oq_outbox_add(oq_outbox_t *self, uint64_t needs, int64_t req, const void *identity,
                  size_t identity_len, bool delimiter, const void *body, size_t body_len);

/* Answer a request whose reply cannot wait any longer. */
typedef void (*oq_outbox_reject_fn)(void *ctx, const void *identity, size_t identity_len,
                                    bool delimiter, int64_t req);

/* The journal cannot write the records the waiting replies need: drop
   every waiting reply, oldest first, calling reject for each so that its
   peer gets an answer now instead of after the disk recovers. Returns how
   many. */
size_t oq_outbox_reject(oq_outbox_t *self, oq_outbox_reject_fn reject, void *ctx);

/* Send, oldest first, every reply whose needs is at most durable. Returns
   how many went (or were dropped because their peer was gone). */
size_t oq_outbox_flush(oq_outbox_t *self, uint64_t durable, oq_outbox_send_fn send, void *ctx);

/* Replies waiting. */
size_t oq_outbox_count(const oq_outbox_t *self);

/* The position the newest waiting reply needs (the largest), 0 if none. */
uint64_t oq_outbox_needs(const oq_outbox_t *self);

#endif
