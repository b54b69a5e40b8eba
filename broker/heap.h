/*  heap.h: the broker's deadline heap. Every timed event of a job (a delayed
    job becoming ready, a lease running out, a retry's backoff ending) is one
    node embedded in the job, keyed by its deadline in monotonic ms, which
    the heap keeps in its own array (a node holds only its slot). The event
    loop sleeps until the top's deadline, so it never wakes on a fixed tick.
    Nodes know their slot, so cancelling a deadline (an ack before the lease
    ends) is O(log n) with no search and no tombstones. */
#ifndef ONCEQ_HEAP_H
#define ONCEQ_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t slot; /* position in the heap + 1; 0 when not in the heap */
} oq_heap_node_t;

typedef struct oq_heap oq_heap_t;

/* An empty heap. NULL only if memory runs out. */
oq_heap_t *oq_heap_new(void);

/* Free the heap (not the nodes, which belong to their owners); NULL *self_p. */
void oq_heap_destroy(oq_heap_t **self_p);

/* Insert node with the given deadline. The node must not be in the heap.
   Returns 0, or -1 if memory runs out or the heap holds UINT32_MAX - 1
   nodes (the node is then not in the heap). */
int oq_heap_push(oq_heap_t *self, oq_heap_node_t *node, int64_t deadline_ms);

/* Remove node if it is in the heap; no-op otherwise. */
void oq_heap_remove(oq_heap_t *self, oq_heap_node_t *node);

/* The node with the earliest deadline, or NULL if empty. Borrowed. */
oq_heap_node_t *oq_heap_peek(const oq_heap_t *self);

/* The deadline node was pushed with; node must be in this heap. */
int64_t oq_heap_deadline(const oq_heap_t *self, const oq_heap_node_t *node);

/* Remove and return the earliest node if its deadline is <= now_ms, else NULL. */
oq_heap_node_t *oq_heap_pop_due(oq_heap_t *self, int64_t now_ms);

/* Number of nodes in the heap. */
size_t oq_heap_size(const oq_heap_t *self);

/* The node in position i (0 <= i < oq_heap_size), in no particular order:
   for walks over every node, with no change to the heap in between. */
oq_heap_node_t *oq_heap_at(const oq_heap_t *self, size_t i);

/* True if node is in a heap. */
static inline bool oq_heap_contains(const oq_heap_node_t *node)
{
    return node->slot != 0;
}

#endif
