/*  idset.c: a table of value pointers, kept at most 70% full (linear
    probing degrades fast above that). It grows by half, not by doubling:
    right after a growth it is 47% full rather than 35%, so a value costs
    11.4 to 17.1 bytes of table instead of 11.4 to 22.9 (16.8 at a million
    values with doubling, 12.1 now). The slot count is then no power of
    two, so a hash picks its slot by remainder. Ids are sequential, so they
    are mixed (a 64-bit finaliser) first. A probe reads the id of the value
    in the slot, which touches that value: the price of half the table. */
#include "idset.h"

#include <assert.h>
#include <stdlib.h>

#define S_INITIAL_SLOTS 1024
#define S_MAX_LOAD_PCT  70

struct oq_idset {
    void **slots; /* NULL = empty slot */
    size_t count; /* slots */
    size_t size;
    oq_idset_id_fn id_of;
};

static size_t s_hash(uint64_t id)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    id ^= id >> 33;
    id *= 0xc4ceb9fe1a85ec53ULL;
    id ^= id >> 33;
    return (size_t)id;
}

oq_idset_t *oq_idset_new(oq_idset_id_fn id_of)
{
    assert(id_of);
    oq_idset_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->slots = calloc(S_INITIAL_SLOTS, sizeof *self->slots);
    if (!self->slots) {
        free(self);
        return NULL;
    }
    self->count = S_INITIAL_SLOTS;
    self->id_of = id_of;
    return self;
}

void oq_idset_destroy(oq_idset_t **self_p)
{
    assert(self_p);
    if (*self_p) {
        free((*self_p)->slots);
        free(*self_p);
        *self_p = NULL;
    }
}

static size_t s_home(const oq_idset_t *self, const void *value, size_t count)
{
    return s_hash(self->id_of(value)) % count;
}

static size_t s_next(size_t i, size_t count)
{
    return i + 1 < count ? i + 1 : 0;
}

static int s_grow(oq_idset_t *self)
{
    size_t count = self->count + self->count / 2;
    void **slots = calloc(count, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < self->count; i++) {
        if (!self->slots[i])
            continue;
        size_t j = s_home(self, self->slots[i], count);
        while (slots[j])
            j = s_next(j, count);
        slots[j] = self->slots[i];
    }
    free(self->slots);
    self->slots = slots;
    self->count = count;
    return 0;
}

/* The slot holding id, or the empty slot that ends its probe run. */
static size_t s_find(const oq_idset_t *self, uint64_t id)
{
    size_t i = s_hash(id) % self->count;
    while (self->slots[i] && self->id_of(self->slots[i]) != id)
        i = s_next(i, self->count);
    return i;
}

int oq_idset_insert(oq_idset_t *self, void *value)
{
    assert(value && self->id_of(value) != 0);
    if ((self->size + 1) * 100 > self->count * S_MAX_LOAD_PCT && s_grow(self) < 0)
        return -1;
    size_t i = s_find(self, self->id_of(value));
    if (self->slots[i])
        return 1;
    self->size++;
    self->slots[i] = value;
    return 0;
}

void *oq_idset_get(const oq_idset_t *self, uint64_t id)
{
    return id ? self->slots[s_find(self, id)] : NULL;
}

void *oq_idset_remove(oq_idset_t *self, uint64_t id)
{
    if (id == 0)
        return NULL;
    size_t i = s_find(self, id);
    void *value = self->slots[i];
    if (!value)
        return NULL;
    self->size--;
    /* Backward-shift: pull later values of the same probe run into the
       hole so lookups never stop early at it. */
    size_t hole = i;
    size_t j = i;
    for (;;) {
        j = s_next(j, self->count);
        if (!self->slots[j])
            break;
        size_t home = s_home(self, self->slots[j], self->count);
        /* Move j into the hole unless its home lies cyclically in (hole, j]. */
        int home_between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!home_between) {
            self->slots[hole] = self->slots[j];
            hole = j;
        }
    }
    self->slots[hole] = NULL;
    return value;
}

size_t oq_idset_size(const oq_idset_t *self)
{
    return self->size;
}

size_t oq_idset_table_bytes(const oq_idset_t *self)
{
    return self->count * sizeof *self->slots;
}
