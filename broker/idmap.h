/*  idmap.h: job id -> job lookup for acks. Open addressing with linear
    probing and backward-shift deletion (no tombstones), so a long-running
    broker's table does not degrade as millions of jobs come and go. */
#ifndef ONCEQ_IDMAP_H
#define ONCEQ_IDMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct oq_idmap oq_idmap_t;

/* An empty map. NULL if memory runs out. */
oq_idmap_t *oq_idmap_new(void);

/* Free the map (not the values); set *self_p to NULL. */
void oq_idmap_destroy(oq_idmap_t **self_p);

/* Map id (never 0) to value (never NULL), replacing any previous value.
   0, or -1 if memory runs out. */
int oq_idmap_put(oq_idmap_t *self, uint64_t id, void *value);

/* Map id (never 0) to value (never NULL) unless id is mapped already: 0 if
   added, 1 if id was there (nothing changed), -1 if memory runs out. One
   probe where a lookup and a put would take two. */
int oq_idmap_insert(oq_idmap_t *self, uint64_t id, void *value);

/* The value of id, or NULL. Borrowed. */
void *oq_idmap_get(const oq_idmap_t *self, uint64_t id);

/* Remove id; returns its value, or NULL if it was not there. */
void *oq_idmap_remove(oq_idmap_t *self, uint64_t id);

/* Number of ids in the map. */
size_t oq_idmap_size(const oq_idmap_t *self);

#endif
