/*  dedupe.h: the dispatch ids the broker remembers, each mapped to the job
    it created, for a window of time (--dedupe-window). A producer that sends
    a dispatch again because its answer never came (the Lazy Pirate pattern)
    gets the first job's id back instead of a second job.

    Ids are kept as 16-byte keyed digests (siphash.h), in the order they were
    added, which is the order their windows end in. The table is bounded
    twice: by a count (the slot format's limit), and by the bytes its owner
    gives it room for (--max-bytes, shared with the jobs). At either bound
    the oldest id is forgotten early and counted; the owner can also take
    memory back (oq_dedupe_shrink), oldest ids first. */
#ifndef ONCEQ_DEDUPE_H
#define ONCEQ_DEDUPE_H

#include <stddef.h>
#include <stdint.h>

#include "siphash.h"

typedef struct oq_dedupe oq_dedupe_t;

typedef void (*oq_dedupe_fn)(void *ctx, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES],
                             uint64_t job_id, int64_t expires_ms);

/* An empty table holding at most max_entries (a power of two) ids. NULL if
   memory runs out. */
oq_dedupe_t *oq_dedupe_new(size_t max_entries);

/* Free the table; set *self_p to NULL. */
void oq_dedupe_destroy(oq_dedupe_t **self_p);

/* The job id remembered for digest, or 0 if none or if its window ended by
   now_ms (wall clock). */
uint64_t oq_dedupe_find(const oq_dedupe_t *self, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES],
                        int64_t now_ms);

/* Remember digest -> job_id until expires_ms (wall clock); an entry for the
   same digest is updated in place. At the bound the oldest entry is
   forgotten first. 0, or -1 if memory runs out (nothing changed). */
int oq_dedupe_add(oq_dedupe_t *self, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES], uint64_t job_id,
                  int64_t expires_ms);

/* As oq_dedupe_add, but the table grows only if growing takes at most
   room_bytes more (oq_dedupe_grow_bytes); otherwise the oldest entry is
   forgotten to make room, as at the bound. */
int oq_dedupe_add_within(oq_dedupe_t *self, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES],
                         uint64_t job_id, int64_t expires_ms, size_t room_bytes);

/* Bytes the table holds now beyond its smallest size (which it is made
   with and never gives back): its ring and index as allocated, whatever
   their fill. */
size_t oq_dedupe_bytes(const oq_dedupe_t *self);

/* Bytes the next add of a new id would take more (0: it fits as is). */
size_t oq_dedupe_grow_bytes(const oq_dedupe_t *self);

/* Halve the table's memory, forgetting the oldest entries that do not fit
   in the half (counted as evicted). Returns the bytes given back: 0 when
   the table is at its smallest or memory runs out (nothing changed). */
size_t oq_dedupe_shrink(oq_dedupe_t *self);

/* The window's end of the oldest entry, or 0 if the table is empty. */
int64_t oq_dedupe_oldest_expires(const oq_dedupe_t *self);

/* Forget the entries, oldest first, whose window ended by now_ms. Returns
   how many. */
size_t oq_dedupe_expire(oq_dedupe_t *self, int64_t now_ms);

/* Ids held now. */
size_t oq_dedupe_count(const oq_dedupe_t *self);

/* Ids forgotten before their window ended because the table was full. */
uint64_t oq_dedupe_evicted(const oq_dedupe_t *self);

/* Call fn for every entry, oldest first (fn must not change the table). */
void oq_dedupe_each(const oq_dedupe_t *self, oq_dedupe_fn fn, void *ctx);

#endif
