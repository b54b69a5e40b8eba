/*  dedupe.c: a ring of fixed-size entries in insertion order, plus an
    open-addressing index of ring positions. The ring makes expiry a walk
    from its oldest end with no heap and no per-entry allocation; the index
    (4 bytes a slot, at most half full) makes lookups O(1). An entry is 32
    bytes and its index share 8: 40 bytes per remembered id, small next to a
    job. Digests are uniformly random already, so their first 8 bytes pick
    the index slot as they are. Deletion shifts later probes back into the
    hole, as in idmap.c, so the index never fills with tombstones.

    A slot holds the ring position + 1 in its low bits and a tag, more bits
    of the digest, in the rest: a probe passing a slot of another digest
    almost always tells from the tag alone, without the cache miss of
    reading that entry from the ring (which made replaying a million ids
    noticeably slower). */
#include "dedupe.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define S_INITIAL_ENTRIES 1024
#define S_INDEX_PER_ENTRY 2 /* index slots per ring entry: at most half full */

typedef struct {
    uint8_t digest[OQ_SIPHASH_DIGEST_BYTES];
    uint64_t job_id;
    int64_t expires_ms;
} s_entry_t;

struct oq_dedupe {
    s_entry_t *ring; /* capacity entries, a power of two */
    size_t capacity;
    size_t head; /* oldest entry */
    size_t count;
    size_t max;        /* capacity never grows past this */
    uint32_t *index;   /* tag << pos_bits | ring position + 1; 0 = empty */
    size_t index_mask; /* index slots - 1 */
    int pos_bits;      /* bits for a ring position + 1, up to max */
    uint64_t evicted;
};

#define S_SLOT_BITS    32
#define S_MIN_TAG_BITS 8

_Static_assert(sizeof(s_entry_t) == 32, "an entry is 32 bytes");

/* The smallest table is allocated with the table and never given back. */
static size_t s_smallest(const oq_dedupe_t *self)
{
    return self->max < S_INITIAL_ENTRIES ? self->max : S_INITIAL_ENTRIES;
}

/* A ring of capacity entries with its index. */
static size_t s_bytes(size_t capacity)
{
    return capacity * (sizeof(s_entry_t) + S_INDEX_PER_ENTRY * sizeof(uint32_t));
}

static bool s_power_of_two(size_t n)
{
    return n && (n & (n - 1)) == 0;
}

static size_t s_home(const oq_dedupe_t *self, const uint8_t *digest)
{
    uint64_t h;
    memcpy(&h, digest, sizeof h);
    return (size_t)h & self->index_mask;
}

/* Digest bits not used for the home slot, in the slot's high bits. */
static uint32_t s_tag(const oq_dedupe_t *self, const uint8_t *digest)
{
    uint32_t t;
    memcpy(&t, digest + sizeof(uint64_t), sizeof t);
    return (t >> self->pos_bits) << self->pos_bits;
}

static uint32_t s_slot(const oq_dedupe_t *self, const uint8_t *digest, size_t pos)
{
    return s_tag(self, digest) | (uint32_t)(pos + 1);
}

static size_t s_pos(const oq_dedupe_t *self, uint32_t slot)
{
    return (slot & ((1u << self->pos_bits) - 1)) - 1;
}

/* Build the index over the ring as it is. */
static int s_reindex(oq_dedupe_t *self, size_t capacity)
{
    size_t slots = capacity * S_INDEX_PER_ENTRY;
    uint32_t *index = calloc(slots, sizeof *index);
    if (!index)
        return -1;
    free(self->index);
    self->index = index;
    self->index_mask = slots - 1;
    for (size_t n = 0; n < self->count; n++) {
        size_t pos = (self->head + n) & (self->capacity - 1);
        size_t i = s_home(self, self->ring[pos].digest);
        while (self->index[i])
            i = (i + 1) & self->index_mask;
        self->index[i] = s_slot(self, self->ring[pos].digest, pos);
    }
    return 0;
}

oq_dedupe_t *oq_dedupe_new(size_t max_entries)
{
    assert(s_power_of_two(max_entries) && max_entries <= UINT32_MAX / S_INDEX_PER_ENTRY);
    oq_dedupe_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->max = max_entries;
    while (((size_t)1 << self->pos_bits) <= max_entries)
        self->pos_bits++;
    assert(S_SLOT_BITS - self->pos_bits >= S_MIN_TAG_BITS);
    self->capacity = s_smallest(self);
    self->ring = calloc(self->capacity, sizeof *self->ring);
    if (!self->ring || s_reindex(self, self->capacity) < 0) {
        oq_dedupe_destroy(&self);
        return NULL;
    }
    return self;
}

void oq_dedupe_destroy(oq_dedupe_t **self_p)
{
    assert(self_p);
    oq_dedupe_t *self = *self_p;
    if (!self)
        return;
    free(self->ring);
    free(self->index);
    free(self);
    *self_p = NULL;
}

/* The index slot holding digest, or the empty slot where its probe ends. */
static size_t s_probe(const oq_dedupe_t *self, const uint8_t *digest)
{
    size_t i = s_home(self, digest);
    uint32_t tag = s_tag(self, digest), tag_mask = ~((1u << self->pos_bits) - 1);
    for (; self->index[i]; i = (i + 1) & self->index_mask) {
        uint32_t slot = self->index[i];
        if ((slot & tag_mask) == tag &&
            memcmp(self->ring[s_pos(self, slot)].digest, digest, OQ_SIPHASH_DIGEST_BYTES) == 0)
            break;
    }
    return i;
}

uint64_t oq_dedupe_find(const oq_dedupe_t *self, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES],
                        int64_t now_ms)
{
    size_t i = s_probe(self, digest);
    if (!self->index[i])
        return 0;
    const s_entry_t *e = &self->ring[s_pos(self, self->index[i])];
    return e->expires_ms > now_ms ? e->job_id : 0;
}

/* Remove the index slot i and pull the rest of its probe run back. */
static void s_unindex(oq_dedupe_t *self, size_t i)
{
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & self->index_mask;
        if (!self->index[j])
            break;
        size_t home = s_home(self, self->ring[s_pos(self, self->index[j])].digest);
        bool home_between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!home_between) {
            self->index[hole] = self->index[j];
            hole = j;
        }
    }
    self->index[hole] = 0;
}

static void s_drop_oldest(oq_dedupe_t *self)
{
    assert(self->count > 0);
    s_unindex(self, s_probe(self, self->ring[self->head].digest));
    self->head = (self->head + 1) & (self->capacity - 1);
    self->count--;
}

static int s_grow(oq_dedupe_t *self)
{
    size_t capacity = self->capacity * 2;
    s_entry_t *ring = malloc(capacity * sizeof *ring);
    if (!ring)
        return -1;
    for (size_t n = 0; n < self->count; n++)
        ring[n] = self->ring[(self->head + n) & (self->capacity - 1)];
    s_entry_t *old_ring = self->ring;
    size_t old_capacity = self->capacity, old_head = self->head;
    self->ring = ring;
    self->capacity = capacity;
    self->head = 0;
    if (s_reindex(self, capacity) < 0) {
        self->ring = old_ring;
        self->capacity = old_capacity;
        self->head = old_head;
        free(ring);
        return -1;
    }
    free(old_ring);
    return 0;
}

int oq_dedupe_add(oq_dedupe_t *self, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES], uint64_t job_id,
                  int64_t expires_ms)
{
    return oq_dedupe_add_within(self, digest, job_id, expires_ms, SIZE_MAX);
}

int oq_dedupe_add_within(oq_dedupe_t *self, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES],
                         uint64_t job_id, int64_t expires_ms, size_t room_bytes)
{
    size_t i = s_probe(self, digest);
    if (self->index[i]) {
        s_entry_t *e = &self->ring[s_pos(self, self->index[i])];
        e->job_id = job_id;
        e->expires_ms = expires_ms;
        return 0;
    }
    if (self->count == self->capacity) {
        if (self->capacity < self->max && oq_dedupe_grow_bytes(self) <= room_bytes) {
            if (s_grow(self) < 0)
                return -1;
        } else {
            s_drop_oldest(self);
            self->evicted++;
        }
        i = s_probe(self, digest);
    }
    size_t pos = (self->head + self->count) & (self->capacity - 1);
    s_entry_t *e = &self->ring[pos];
    memcpy(e->digest, digest, OQ_SIPHASH_DIGEST_BYTES);
    e->job_id = job_id;
    e->expires_ms = expires_ms;
    self->index[i] = s_slot(self, digest, pos);
    self->count++;
    return 0;
}

size_t oq_dedupe_expire(oq_dedupe_t *self, int64_t now_ms)
{
    size_t n = 0;
    while (self->count && self->ring[self->head].expires_ms <= now_ms) {
        s_drop_oldest(self);
        n++;
    }
    return n;
}

size_t oq_dedupe_bytes(const oq_dedupe_t *self)
{
    return s_bytes(self->capacity) - s_bytes(s_smallest(self));
}

size_t oq_dedupe_grow_bytes(const oq_dedupe_t *self)
{
    if (self->count < self->capacity || self->capacity >= self->max)
        return 0;
    return s_bytes(self->capacity * 2) - s_bytes(self->capacity);
}

/* The ring is copied into one half its size, newest entries kept; the
   index is built again for it. The smallest ring is never shrunk: what it
   holds is a constant, and a table that gave everything back could not
   take the next id. */
size_t oq_dedupe_shrink(oq_dedupe_t *self)
{
    size_t capacity = self->capacity / 2;
    if (capacity < s_smallest(self))
        return 0;
    s_entry_t *ring = malloc(capacity * sizeof *ring);
    if (!ring)
        return 0;
    size_t keep = self->count < capacity ? self->count : capacity;
    size_t skip = self->count - keep;
    for (size_t n = 0; n < keep; n++)
        ring[n] = self->ring[(self->head + skip + n) & (self->capacity - 1)];
    s_entry_t *old_ring = self->ring;
    size_t old_capacity = self->capacity, old_head = self->head, old_count = self->count;
    self->ring = ring;
    self->capacity = capacity;
    self->head = 0;
    self->count = keep;
    if (s_reindex(self, capacity) < 0) {
        self->ring = old_ring;
        self->capacity = old_capacity;
        self->head = old_head;
        self->count = old_count;
        free(ring);
        return 0;
    }
    free(old_ring);
    self->evicted += skip;
    return s_bytes(old_capacity) - s_bytes(capacity);
}

int64_t oq_dedupe_oldest_expires(const oq_dedupe_t *self)
{
    return self->count ? self->ring[self->head].expires_ms : 0;
}

size_t oq_dedupe_count(const oq_dedupe_t *self)
{
    return self->count;
}

uint64_t oq_dedupe_evicted(const oq_dedupe_t *self)
{
    return self->evicted;
}

void oq_dedupe_each(const oq_dedupe_t *self, oq_dedupe_fn fn, void *ctx)
{
    for (size_t n = 0; n < self->count; n++) {
        const s_entry_t *e = &self->ring[(self->head + n) & (self->capacity - 1)];
        fn(ctx, e->digest, e->job_id, e->expires_ms);
    }
}
