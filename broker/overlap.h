/*  overlap.h: overlap keys (WithoutOverlapping), an optimisation that saves
    work, never what keeps the data right (docs/design.md). At most one job
    per key is leased at a time; the others wait, using no try, until the
    holder's lease ends (any ack, the lease's expiry, the worker's death).
    The "lock" is the lease itself, so it cannot outlive it.

    The engine owns the jobs: a waiting job's list node is lent to this
    module (oq_overlap_wait) and handed back as the one to wake when its
    key comes free. Jobs are named by id. */
#ifndef ONCEQ_OVERLAP_H
#define ONCEQ_OVERLAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "list.h"

typedef struct oq_overlap oq_overlap_t;

/* An empty table. NULL if memory runs out. */
oq_overlap_t *oq_overlap_new(void);

/* Free the keys (not the waiting nodes, which are the engine's); set
 *self_p to NULL. */
void oq_overlap_destroy(oq_overlap_t **self_p);

/* Job id has overlap key (len bytes, copied). 0, or -1 if memory runs out
   or the job has a key already. */
int oq_overlap_add(oq_overlap_t *self, uint64_t id, const char *key, size_t len);

/* Job id is gone (it must neither hold its key nor wait). No-op without a key. */
void oq_overlap_remove(oq_overlap_t *self, uint64_t id);

/* The overlap key of job id (borrowed), or NULL. */
const char *oq_overlap_key_of(const oq_overlap_t *self, uint64_t id);

/* True if another job holds (is leased with) the key of job id. */
bool oq_overlap_blocked(const oq_overlap_t *self, uint64_t id);

/* Job id is leased: it holds its key. No-op without a key. */
void oq_overlap_hold(oq_overlap_t *self, uint64_t id);

/* Job id's lease ended: its key is free. Returns the node of the job that
   waited longest for the key (still waiting: the caller makes it ready),
   or NULL. */
oq_link_t *oq_overlap_release(oq_overlap_t *self, uint64_t id);

/* If the key of job id is free, the node of the job that waited longest
   for it (still waiting), else NULL: for a job of the key that leaves the
   ready list without taking the key (cancelled), so that no waiter is left
   behind a free key. */
oq_link_t *oq_overlap_wake(const oq_overlap_t *self, uint64_t id);

/* Job id waits for its key; node is its list link, lent until unwait. */
void oq_overlap_wait(oq_overlap_t *self, uint64_t id, oq_link_t *node);

/* Job id waits no more (node as given to oq_overlap_wait). */
void oq_overlap_unwait(oq_overlap_t *self, uint64_t id, oq_link_t *node);

/* Call fn for every waiting node, longest waiting first within each key.
   fn may free the node's job (the walk has moved past it). */
void oq_overlap_each_waiting(const oq_overlap_t *self, void (*fn)(void *ctx, oq_link_t *node),
                             void *ctx);

/* Jobs with an overlap key. */
size_t oq_overlap_jobs(const oq_overlap_t *self);

/* Keys held by a leased job now. */
size_t oq_overlap_held(const oq_overlap_t *self);

/* Jobs waiting for their key now. */
size_t oq_overlap_waiting(const oq_overlap_t *self);

#endif
