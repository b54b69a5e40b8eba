/*  idmap.c: power-of-two table, kept at most 70% full. Ids are sequential,
    so they are mixed (a 64-bit finaliser) before they pick a slot. */
#include "idmap.h"

#include <assert.h>
#include <stdlib.h>

#define S_INITIAL_SLOTS 1024
#define S_MAX_LOAD_PCT  70

typedef struct {
    uint64_t id; /* 0 = empty slot */
    void *value;
} s_slot_t;

struct oq_idmap {
    s_slot_t *slots;
    size_t mask; /* slot count - 1 */
    size_t size;
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

oq_idmap_t *oq_idmap_new(void)
{
    oq_idmap_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->slots = calloc(S_INITIAL_SLOTS, sizeof *self->slots);
    if (!self->slots) {
        free(self);
        return NULL;
    }
    self->mask = S_INITIAL_SLOTS - 1;
    return self;
}

void oq_idmap_destroy(oq_idmap_t **self_p)
{
    assert(self_p);
    if (*self_p) {
        free((*self_p)->slots);
        free(*self_p);
        *self_p = NULL;
    }
}

static int s_grow(oq_idmap_t *self)
{
    size_t count = (self->mask + 1) * 2;
    s_slot_t *slots = calloc(count, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i <= self->mask; i++) {
        if (self->slots[i].id == 0)
            continue;
        size_t j = s_hash(self->slots[i].id) & (count - 1);
        while (slots[j].id)
            j = (j + 1) & (count - 1);
        slots[j] = self->slots[i];
    }
    free(self->slots);
    self->slots = slots;
    self->mask = count - 1;
    return 0;
}

int oq_idmap_put(oq_idmap_t *self, uint64_t id, void *value)
{
    assert(id != 0 && value);
    if ((self->size + 1) * 100 > (self->mask + 1) * S_MAX_LOAD_PCT && s_grow(self) < 0)
        return -1;
    size_t i = s_hash(id) & self->mask;
    while (self->slots[i].id && self->slots[i].id != id)
        i = (i + 1) & self->mask;
    if (self->slots[i].id == 0)
        self->size++;
    self->slots[i].id = id;
    self->slots[i].value = value;
    return 0;
}

int oq_idmap_insert(oq_idmap_t *self, uint64_t id, void *value)
{
    assert(id != 0 && value);
    if ((self->size + 1) * 100 > (self->mask + 1) * S_MAX_LOAD_PCT && s_grow(self) < 0)
        return -1;
    size_t i = s_hash(id) & self->mask;
    while (self->slots[i].id && self->slots[i].id != id)
        i = (i + 1) & self->mask;
    if (self->slots[i].id)
        return 1;
    self->size++;
    self->slots[i].id = id;
    self->slots[i].value = value;
    return 0;
}

void *oq_idmap_get(const oq_idmap_t *self, uint64_t id)
{
    if (id == 0)
        return NULL;
    size_t i = s_hash(id) & self->mask;
    while (self->slots[i].id) {
        if (self->slots[i].id == id)
            return self->slots[i].value;
        i = (i + 1) & self->mask;
    }
    return NULL;
}

void *oq_idmap_remove(oq_idmap_t *self, uint64_t id)
{
    if (id == 0)
        return NULL;
    size_t i = s_hash(id) & self->mask;
    while (self->slots[i].id && self->slots[i].id != id)
        i = (i + 1) & self->mask;
    if (self->slots[i].id == 0)
        return NULL;
    void *value = self->slots[i].value;
    self->size--;
    /* Backward-shift: pull later entries of the same probe run into the hole
       so lookups never stop early at it. */
    size_t hole = i;
    size_t j = i;
    for (;;) {
        j = (j + 1) & self->mask;
        if (self->slots[j].id == 0)
            break;
        size_t home = s_hash(self->slots[j].id) & self->mask;
        /* Move j into the hole unless its home lies cyclically in (hole, j]. */
        int home_between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!home_between) {
            self->slots[hole] = self->slots[j];
            hole = j;
        }
    }
    self->slots[hole].id = 0;
    self->slots[hole].value = NULL;
    return value;
}

size_t oq_idmap_size(const oq_idmap_t *self)
{
    return self->size;
}
