/*  overlap.c: the table of overlap keys. A key lives while jobs name it
    (refs); it knows its holder and its waiters in the order they started
    waiting, so waking one is O(1) and nothing scans the ready lists. */
#include "overlap.h"

#include <assert.h>
#include <czmq.h>
#include <stdlib.h>
#include <string.h>

#include "idmap.h"
#include "onceq/limits.h"

typedef struct {
    char name[OQ_MAX_JOB_KEY_LEN + 1];
    uint64_t holder;   /* the leased job holding it, 0: free */
    oq_link_t waiters; /* the engine's job links, longest waiting first */
    size_t waiting;
    size_t refs; /* jobs naming it */
} s_key_t;

/* What a job's key costs against --max-bytes, if it is the key's only job:
   the key, its hash item and bucket (czmq: 48 and 8) and the job's id-map
   slot (16 bytes at most 70% full, as little as 35% right after growing),
   with room for the allocator's rounding. */
_Static_assert(sizeof(s_key_t) + 64 + 48 + 16 <= OQ_JOB_KEY_COST_BYTES,
               "an overlap key costs more than --max-bytes counts");

struct oq_overlap {
    zhashx_t *keys;   /* name -> s_key_t (owned) */
    oq_idmap_t *jobs; /* job id -> s_key_t */
    size_t held, waiting;
};

static void s_key_free(void **item)
{
    free(*item);
    *item = NULL;
}

oq_overlap_t *oq_overlap_new(void)
{
    oq_overlap_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->keys = zhashx_new();
    self->jobs = oq_idmap_new();
    if (!self->keys || !self->jobs) {
        oq_overlap_destroy(&self);
        return NULL;
    }
    zhashx_set_destructor(self->keys, s_key_free);
    /* The name lives in its key: no copy of it per key. */
    zhashx_set_key_duplicator(self->keys, NULL);
    zhashx_set_key_destructor(self->keys, NULL);
    return self;
}

void oq_overlap_destroy(oq_overlap_t **self_p)
{
    assert(self_p);
    oq_overlap_t *self = *self_p;
    if (!self)
        return;
    zhashx_destroy(&self->keys);
    oq_idmap_destroy(&self->jobs);
    free(self);
    *self_p = NULL;
}

int oq_overlap_add(oq_overlap_t *self, uint64_t id, const char *key, size_t len)
{
    if (len == 0 || len > OQ_MAX_JOB_KEY_LEN || oq_idmap_get(self->jobs, id))
        return -1;
    char name[OQ_MAX_JOB_KEY_LEN + 1];
    memcpy(name, key, len);
    name[len] = 0;
    s_key_t *k = zhashx_lookup(self->keys, name);
    bool fresh = !k;
    if (fresh) {
        k = calloc(1, sizeof *k);
        if (!k)
            return -1;
        memcpy(k->name, name, len + 1);
        oq_list_init(&k->waiters);
        if (zhashx_insert(self->keys, k->name, k) != 0) {
            free(k);
            return -1;
        }
    }
    if (oq_idmap_put(self->jobs, id, k) < 0) {
        if (fresh)
            zhashx_delete(self->keys, k->name);
        return -1;
    }
    k->refs++;
    return 0;
}

void oq_overlap_remove(oq_overlap_t *self, uint64_t id)
{
    if (!oq_idmap_size(self->jobs)) /* no job has a key: the common case, at no lookup */
        return;
    s_key_t *k = oq_idmap_remove(self->jobs, id);
    if (!k)
        return;
    assert(k->holder != id);
    if (--k->refs == 0) {
        assert(k->waiting == 0);
        zhashx_delete(self->keys, k->name);
    }
}

const char *oq_overlap_key_of(const oq_overlap_t *self, uint64_t id)
{
    const s_key_t *k = oq_idmap_get(self->jobs, id);
    return k ? k->name : NULL;
}

bool oq_overlap_blocked(const oq_overlap_t *self, uint64_t id)
{
    const s_key_t *k = oq_idmap_get(self->jobs, id);
    return k && k->holder != 0 && k->holder != id;
}

void oq_overlap_hold(oq_overlap_t *self, uint64_t id)
{
    if (!oq_idmap_size(self->jobs))
        return;
    s_key_t *k = oq_idmap_get(self->jobs, id);
    if (!k)
        return;
    assert(k->holder == 0 || k->holder == id);
    if (k->holder == 0)
        self->held++;
    k->holder = id;
}

static oq_link_t *s_first(const s_key_t *k)
{
    return k->waiting ? k->waiters.next : NULL;
}

oq_link_t *oq_overlap_release(oq_overlap_t *self, uint64_t id)
{
    s_key_t *k = oq_idmap_get(self->jobs, id);
    if (!k || k->holder != id)
        return NULL;
    k->holder = 0;
    self->held--;
    return s_first(k);
}

oq_link_t *oq_overlap_wake(const oq_overlap_t *self, uint64_t id)
{
    const s_key_t *k = oq_idmap_get(self->jobs, id);
    return k && k->holder == 0 ? s_first(k) : NULL;
}

void oq_overlap_wait(oq_overlap_t *self, uint64_t id, oq_link_t *node)
{
    s_key_t *k = oq_idmap_get(self->jobs, id);
    assert(k);
    oq_list_push_back(&k->waiters, node);
    k->waiting++;
    self->waiting++;
}

void oq_overlap_unwait(oq_overlap_t *self, uint64_t id, oq_link_t *node)
{
    s_key_t *k = oq_idmap_get(self->jobs, id);
    assert(k && k->waiting > 0);
    oq_list_remove(node);
    k->waiting--;
    self->waiting--;
}

void oq_overlap_each_waiting(const oq_overlap_t *self, void (*fn)(void *ctx, oq_link_t *node),
                             void *ctx)
{
    for (s_key_t *k = zhashx_first(self->keys); k; k = zhashx_next(self->keys)) {
        oq_link_t *n = k->waiters.next;
        while (n != &k->waiters) {
            oq_link_t *next = n->next;
            fn(ctx, n);
            n = next;
        }
    }
}

size_t oq_overlap_jobs(const oq_overlap_t *self)
{
    return oq_idmap_size(self->jobs);
}

size_t oq_overlap_held(const oq_overlap_t *self)
{
    return self->held;
}

size_t oq_overlap_waiting(const oq_overlap_t *self)
{
    return self->waiting;
}
