/*  review_log.c: a ring of resolutions with an index by job id. Each entry
    is one allocation: the struct and its four strings behind it. A job
    resolved twice (sent to review again after a retry) has two entries; the
    index points at the newer, and forgetting the older leaves it alone. */
#include "review_log.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "idmap.h"
#include "onceq/limits.h"

struct oq_review_log {
    oq_resolution_t **ring; /* max slots; NULL: empty */
    size_t max;
    size_t next;  /* the slot the next entry takes (the oldest when full) */
    size_t count; /* entries held */
    oq_idmap_t *by_id;
};

oq_review_log_t *oq_review_log_new(size_t max)
{
    assert(max >= 1);
    oq_review_log_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->max = max;
    self->ring = calloc(max, sizeof *self->ring);
    self->by_id = oq_idmap_new();
    if (!self->ring || !self->by_id) {
        oq_review_log_destroy(&self);
        return NULL;
    }
    return self;
}

void oq_review_log_destroy(oq_review_log_t **self_p)
{
    assert(self_p);
    oq_review_log_t *self = *self_p;
    if (!self)
        return;
    if (self->ring)
        for (size_t i = 0; i < self->max; i++)
            free(self->ring[i]);
    free(self->ring);
    oq_idmap_destroy(&self->by_id);
    free(self);
    *self_p = NULL;
}

static size_t s_len(const char *text, size_t max)
{
    size_t n = text ? strlen(text) : 0;
    return n > max ? max : n;
}

/* Copy n bytes of text behind *at as a C string; returns it. */
static const char *s_put(char **at, const char *text, size_t n)
{
    char *out = *at;
    if (n)
        memcpy(out, text, n);
    out[n] = 0;
    *at += n + 1;
    return out;
}

const oq_resolution_t *oq_review_log_add(oq_review_log_t *self, const oq_resolution_t *r)
{
    assert(self && r && r->id);
    size_t type = s_len(r->type, OQ_MAX_NAME_LEN), queue = s_len(r->queue, OQ_MAX_NAME_LEN);
    size_t reason = s_len(r->reason, OQ_MAX_ERROR_LEN);
    size_t note = s_len(r->note, OQ_MAX_REVIEW_NOTE_LEN);
    oq_resolution_t *e = malloc(sizeof *e + type + queue + reason + note + 4);
    if (!e)
        return NULL;
    if (oq_idmap_put(self->by_id, r->id, e) < 0) {
        free(e);
        return NULL;
    }
    *e = *r;
    char *at = (char *)(e + 1);
    e->type = s_put(&at, r->type, type);
    e->queue = s_put(&at, r->queue, queue);
    e->reason = s_put(&at, r->reason, reason);
    e->note = s_put(&at, r->note, note);
    oq_resolution_t *old = self->ring[self->next];
    if (old) {
        if (oq_idmap_get(self->by_id, old->id) == old)
            oq_idmap_remove(self->by_id, old->id);
        free(old);
    } else {
        self->count++;
    }
    self->ring[self->next] = e;
    self->next = (self->next + 1) % self->max;
    return e;
}

const oq_resolution_t *oq_review_log_find(const oq_review_log_t *self, uint64_t id)
{
    return id ? oq_idmap_get(self->by_id, id) : NULL;
}

size_t oq_review_log_count(const oq_review_log_t *self)
{
    return self->count;
}

void oq_review_log_each(const oq_review_log_t *self,
                        void (*fn)(void *ctx, const oq_resolution_t *r), void *ctx)
{
    /* Oldest first: from next when full, from 0 otherwise. */
    size_t start = self->count == self->max ? self->next : 0;
    for (size_t i = 0; i < self->count; i++)
        fn(ctx, self->ring[(start + i) % self->max]);
}
