/*  unique.c: the table of unique keys. A key maps to one entry; a live
    entry is also found by its job's id (the engine speaks in ids), and an
    entry held only by its window sits in a heap by the window's end, so
    expiry and eviction cost O(log n) and nothing scans the table. */
#include "unique.h"

#include <assert.h>
#include <czmq.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "idmap.h"
#include "list.h"
#include "onceq/limits.h"

typedef struct {
    char key[OQ_MAX_JOB_KEY_LEN + 1];
    uint64_t id;          /* the job holding it */
    int64_t expires_ms;   /* its window's end (wall clock); 0: none */
    int64_t window_ms;    /* its unique_for when taken; remembered: what was left of it */
    bool live;            /* the job is live: held whatever the window */
    oq_heap_node_t timer; /* not live: in by_expiry until the window ends */
} s_entry_t;

/* What a key costs against --max-bytes: its entry, its hash item and
   bucket (czmq: 48 and 8), its id-map slot (16 bytes at most 70% full, and
   as little as 35% right after growing) and its heap slot, with room for
   the allocator's rounding. */
#define S_HASH_ITEM_BYTES 64
#define S_ID_SLOT_BYTES   48
#define S_HEAP_SLOT_BYTES 32
_Static_assert(sizeof(s_entry_t) + S_HASH_ITEM_BYTES + S_ID_SLOT_BYTES + S_HEAP_SLOT_BYTES + 16 <=
                   OQ_JOB_KEY_COST_BYTES,
               "a unique key costs more than --max-bytes counts");

struct oq_unique {
    size_t max_keys;
    zhashx_t *by_key;     /* key -> s_entry_t (owned) */
    oq_idmap_t *by_id;    /* job id -> s_entry_t, live entries only */
    oq_heap_t *by_expiry; /* entries held by their window only */
    uint64_t evicted;
};

static void s_entry_free(void **item)
{
    free(*item);
    *item = NULL;
}

oq_unique_t *oq_unique_new(size_t max_keys)
{
    oq_unique_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->max_keys = max_keys;
    self->by_key = zhashx_new();
    self->by_id = oq_idmap_new();
    self->by_expiry = oq_heap_new();
    if (!self->by_key || !self->by_id || !self->by_expiry) {
        oq_unique_destroy(&self);
        return NULL;
    }
    zhashx_set_destructor(self->by_key, s_entry_free);
    /* The key lives in its entry: a copy per key would cost every key
       another allocation the size of the longest key. */
    zhashx_set_key_duplicator(self->by_key, NULL);
    zhashx_set_key_destructor(self->by_key, NULL);
    return self;
}

void oq_unique_destroy(oq_unique_t **self_p)
{
    assert(self_p);
    oq_unique_t *self = *self_p;
    if (!self)
        return;
    /* The heap first: it clears its nodes, which live in the entries. */
    oq_heap_destroy(&self->by_expiry);
    zhashx_destroy(&self->by_key);
    oq_idmap_destroy(&self->by_id);
    free(self);
    *self_p = NULL;
}

static s_entry_t *s_lookup(const oq_unique_t *self, const char *key, size_t len)
{
    char name[OQ_MAX_JOB_KEY_LEN + 1];
    if (len > OQ_MAX_JOB_KEY_LEN)
        return NULL;
    memcpy(name, key, len);
    name[len] = 0;
    return zhashx_lookup(self->by_key, name);
}

static void s_delete(oq_unique_t *self, s_entry_t *e)
{
    if (e->live)
        oq_idmap_remove(self->by_id, e->id);
    oq_heap_remove(self->by_expiry, &e->timer);
    zhashx_delete(self->by_key, e->key); /* frees e */
}

/* Held at now: by a live job, or by a window still open. */
static bool s_held(const s_entry_t *e, int64_t now_ms)
{
    return e->live || e->expires_ms > now_ms;
}

uint64_t oq_unique_find(oq_unique_t *self, const char *key, size_t len, int64_t now_ms)
{
    s_entry_t *e = s_lookup(self, key, len);
    if (!e)
        return 0;
    if (s_held(e, now_ms))
        return e->id;
    s_delete(self, e);
    return 0;
}

int oq_unique_evict(oq_unique_t *self)
{
    oq_heap_node_t *top = oq_heap_peek(self->by_expiry);
    if (!top)
        return -1;
    s_delete(self, oq_container_of(top, s_entry_t, timer));
    self->evicted++;
    return 0;
}

/* Room for one more key: forget the window that ends first if full. */
static int s_room(oq_unique_t *self)
{
    if (zhashx_size(self->by_key) < self->max_keys)
        return 0;
    return oq_unique_evict(self);
}

static s_entry_t *s_insert(oq_unique_t *self, const char *key, size_t len, uint64_t id,
                           int64_t expires_ms, int64_t now_ms)
{
    if (len == 0 || len > OQ_MAX_JOB_KEY_LEN || s_room(self) < 0)
        return NULL;
    s_entry_t *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    memcpy(e->key, key, len);
    e->id = id;
    e->expires_ms = expires_ms;
    e->window_ms = expires_ms > now_ms ? expires_ms - now_ms : 0;
    if (zhashx_insert(self->by_key, e->key, e) != 0) {
        free(e);
        return NULL;
    }
    return e;
}

int oq_unique_take(oq_unique_t *self, const char *key, size_t len, uint64_t id, int64_t expires_ms,
                   int64_t now_ms)
{
    s_entry_t *e = s_lookup(self, key, len);
    if (e && s_held(e, now_ms) && e->id != id)
        return -1;
    if (e)
        s_delete(self, e);
    if (oq_idmap_get(self->by_id, id))
        return -1; /* one key per job */
    e = s_insert(self, key, len, id, expires_ms, now_ms);
    if (!e)
        return -1;
    if (oq_idmap_put(self->by_id, id, e) < 0) {
        zhashx_delete(self->by_key, e->key);
        return -1;
    }
    e->live = true;
    return 0;
}

int oq_unique_remember(oq_unique_t *self, const char *key, size_t len, uint64_t id,
                       int64_t expires_ms, int64_t now_ms)
{
    if (expires_ms <= now_ms)
        return 0;
    s_entry_t *e = s_lookup(self, key, len);
    if (e && s_held(e, now_ms))
        return 0;
    if (e)
        s_delete(self, e);
    e = s_insert(self, key, len, id, expires_ms, now_ms);
    if (!e)
        return -1;
    if (oq_heap_push(self->by_expiry, &e->timer, expires_ms) < 0) {
        zhashx_delete(self->by_key, e->key);
        return -1;
    }
    return 0;
}

void oq_unique_release(oq_unique_t *self, uint64_t id, int64_t now_ms)
{
    s_entry_t *e = oq_idmap_remove(self->by_id, id);
    if (!e)
        return;
    e->live = false;
    if (e->expires_ms <= now_ms || oq_heap_push(self->by_expiry, &e->timer, e->expires_ms) < 0)
        zhashx_delete(self->by_key, e->key);
}

void oq_unique_forget(oq_unique_t *self, uint64_t id)
{
    if (!oq_idmap_size(self->by_id)) /* no key held: the common case, at no lookup */
        return;
    s_entry_t *e = oq_idmap_remove(self->by_id, id);
    if (e)
        zhashx_delete(self->by_key, e->key);
}

const char *oq_unique_key_of(const oq_unique_t *self, uint64_t id, int64_t *expires_ms)
{
    const s_entry_t *e = oq_idmap_get(self->by_id, id);
    if (!e)
        return NULL;
    *expires_ms = e->expires_ms;
    return e->key;
}

size_t oq_unique_expire(oq_unique_t *self, int64_t now_ms)
{
    size_t n = 0;
    oq_heap_node_t *node;
    while ((node = oq_heap_pop_due(self->by_expiry, now_ms)) != NULL) {
        s_entry_t *e = oq_container_of(node, s_entry_t, timer);
        zhashx_delete(self->by_key, e->key);
        n++;
    }
    return n;
}

void oq_unique_each_window(const oq_unique_t *self,
                           void (*fn)(void *ctx, const char *key, uint64_t id, int64_t expires_ms),
                           void *ctx)
{
    for (size_t i = 0; i < oq_heap_size(self->by_expiry); i++) {
        const s_entry_t *e = oq_container_of(oq_heap_at(self->by_expiry, i), s_entry_t, timer);
        fn(ctx, e->key, e->id, e->expires_ms);
    }
}

int64_t oq_unique_longest_window_ms(const oq_unique_t *self, int64_t now_ms)
{
    int64_t longest = 0;
    for (const s_entry_t *e = zhashx_first(self->by_key); e; e = zhashx_next(self->by_key))
        if ((e->live || e->expires_ms > now_ms) && e->window_ms > longest)
            longest = e->window_ms;
    return longest;
}

size_t oq_unique_count(const oq_unique_t *self)
{
    return zhashx_size(self->by_key);
}

size_t oq_unique_live_count(const oq_unique_t *self)
{
    return oq_idmap_size(self->by_id);
}

uint64_t oq_unique_evicted(const oq_unique_t *self)
{
    return self->evicted;
}
