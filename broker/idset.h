/*  idset.h: values that each hold their own id, found by that id. Where
    idmap keeps an (id, value) pair in every slot, a set keeps only the
    value's pointer and reads its id through a function the caller gives:
    8 bytes a slot instead of 16, which is what a broker holding a million
    jobs pays per job for being able to find one by id. Open addressing
    with linear probing and backward-shift deletion (no tombstones), as
    idmap. A value's id must not change while it is in the set. */
#ifndef ONCEQ_IDSET_H
#define ONCEQ_IDSET_H

#include <stddef.h>
#include <stdint.h>

typedef struct oq_idset oq_idset_t;

/* The id value is filed under (never 0). */
typedef uint64_t (*oq_idset_id_fn)(const void *value);

/* An empty set whose values' ids id_of reads. NULL if memory runs out. */
oq_idset_t *oq_idset_new(oq_idset_id_fn id_of);

/* Free the set (not the values); set *self_p to NULL. */
void oq_idset_destroy(oq_idset_t **self_p);

/* Add value (never NULL) unless a value with its id is there already: 0 if
   added, 1 if its id was there (nothing changed), -1 if memory runs out. */
int oq_idset_insert(oq_idset_t *self, void *value);

/* The value with this id, or NULL. Borrowed. */
void *oq_idset_get(const oq_idset_t *self, uint64_t id);

/* Remove the value with this id; returns it, or NULL if none was there. */
void *oq_idset_remove(oq_idset_t *self, uint64_t id);

/* Number of values in the set. */
size_t oq_idset_size(const oq_idset_t *self);

/* Bytes the set's table takes now (for accounting and tests). */
size_t oq_idset_table_bytes(const oq_idset_t *self);

#endif
