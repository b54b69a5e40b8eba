/*  registry.c: job type -> handler. A flat array searched in order: a worker
    registers a handful of handlers, and one lookup per job costs nothing next
    to the job itself. The registry is filled before the worker loop starts and
    only read after that, so it needs no lock. */
#include "registry.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/log.h"
#include "onceq/worker.h"
#include "worker_limits.h"

typedef struct {
    char type[OQ_MAX_NAME_LEN + 1]; /* the job type, NUL-terminated */
    oq_handler_fn fn;
    void *state; /* handed to fn; used only on the main thread */
    /* What the handler needs that can be down (oq_registry_set_resource). */
    oq_probe_fn probe;
    oq_release_fn release;
    void *resource_ctx;
    /* Its batch function (oq_registry_set_batch), or NULL. */
    oq_batch_fn batch;
    size_t batch_max;
} s_entry_t;

struct oq_registry {
    s_entry_t *entries; /* in registration order */
    size_t count;
    size_t capacity;
    oq_flag_t flags[OQ_WORKER_MAX_HANDLER_FLAGS]; /* the handlers' own, in order */
    size_t flag_count;
};

oq_registry_t *oq_registry_new(void)
{
    oq_registry_t *self = calloc(1, sizeof *self);
    assert(self);
    return self;
}

void oq_registry_destroy(oq_registry_t **self_p)
{
    assert(self_p);
    oq_registry_t *self = *self_p;
    if (!self)
        return;
    free(self->entries);
    free(self);
    *self_p = NULL;
}

static s_entry_t *s_lookup(const oq_registry_t *self, const char *type)
{
    for (size_t i = 0; i < self->count; i++)
        if (strcmp(self->entries[i].type, type) == 0)
            return &self->entries[i];
    return NULL;
}

int oq_registry_add(oq_registry_t *self, const char *type, oq_handler_fn fn, void *state)
{
    assert(self);
    assert(fn);
    if (!type || !oq_proto_name_valid(type, strlen(type))) {
        oq_error("cannot register handler \"%s\": a job type is 1 to %d characters of "
                 "A-Z a-z 0-9 _ . : -",
                 type ? type : "(null)", OQ_MAX_NAME_LEN);
        return -1;
    }
    if (s_lookup(self, type)) {
        oq_error("cannot register handler \"%s\": the type has a handler already", type);
        return -1;
    }
    if (self->count == OQ_WORKER_MAX_HANDLERS) {
        oq_error("cannot register handler \"%s\": a registry holds at most %d", type,
                 OQ_WORKER_MAX_HANDLERS);
        return -1;
    }
    if (self->count == self->capacity) {
        size_t capacity = self->capacity ? self->capacity * 2 : 8;
        s_entry_t *entries = realloc(self->entries, capacity * sizeof *entries);
        assert(entries);
        self->entries = entries;
        self->capacity = capacity;
    }
    s_entry_t *entry = &self->entries[self->count++];
    strcpy(entry->type, type); /* fits: checked by oq_proto_name_valid */
    entry->fn = fn;
    entry->state = state;
    entry->probe = NULL;
    entry->release = NULL;
    entry->resource_ctx = NULL;
    entry->batch = NULL;
    entry->batch_max = 0;
    return 0;
}

int oq_registry_set_batch(oq_registry_t *self, const char *type, oq_batch_fn fn, size_t max_jobs)
{
    assert(self);
    s_entry_t *entry = type ? s_lookup(self, type) : NULL;
    if (!entry) {
        oq_error("cannot declare a batch function for \"%s\": no handler is registered for it",
                 type ? type : "(null)");
        return -1;
    }
    if (!fn || max_jobs < 2) {
        oq_error("cannot declare a batch function for \"%s\": it needs a function and a "
                 "batch of at least 2 jobs",
                 type);
        return -1;
    }
    entry->batch = fn;
    entry->batch_max = max_jobs < OQ_WORKER_MAX_BATCH ? max_jobs : OQ_WORKER_MAX_BATCH;
    return 0;
}

int oq_registry_find_batch(const oq_registry_t *self, const char *type, oq_batch_fn *fn,
                           void **state, size_t *max_jobs)
{
    assert(self && fn && max_jobs);
    const s_entry_t *entry = type ? s_lookup(self, type) : NULL;
    if (!entry || !entry->batch)
        return -1;
    *fn = entry->batch;
    *max_jobs = entry->batch_max;
    if (state)
        *state = entry->state;
    return 0;
}

int oq_registry_set_resource(oq_registry_t *self, const char *type, oq_probe_fn probe,
                             oq_release_fn release, void *ctx)
{
    assert(self);
    s_entry_t *entry = type ? s_lookup(self, type) : NULL;
    if (!entry) {
        oq_error("cannot declare a resource for \"%s\": no handler is registered for it",
                 type ? type : "(null)");
        return -1;
    }
    entry->probe = probe;
    entry->release = release;
    entry->resource_ctx = ctx;
    return 0;
}

int oq_registry_probe(const oq_registry_t *self, const char *type, char *reason, size_t reason_len)
{
    assert(self && reason && reason_len > 0);
    reason[0] = 0;
    const s_entry_t *entry = type ? s_lookup(self, type) : NULL;
    if (!entry || !entry->probe)
        return 1;
    if (entry->probe(entry->resource_ctx, reason, reason_len) == 0)
        return 0;
    if (!reason[0])
        snprintf(reason, reason_len, "the %s handler's probe failed without a reason", type);
    return -1;
}

size_t oq_registry_release_all(const oq_registry_t *self)
{
    assert(self);
    size_t calls = 0;
    for (size_t i = 0; i < self->count; i++) {
        const s_entry_t *entry = &self->entries[i];
        if (!entry->release)
            continue;
        /* Types that share one connection release it once. */
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = self->entries[j].release == entry->release &&
                   self->entries[j].resource_ctx == entry->resource_ctx;
        if (seen)
            continue;
        entry->release(entry->resource_ctx);
        calls++;
    }
    return calls;
}

int oq_registry_find(const oq_registry_t *self, const char *type, oq_handler_fn *fn, void **state)
{
    assert(self);
    const s_entry_t *entry = type ? s_lookup(self, type) : NULL;
    if (!entry)
        return -1;
    *fn = entry->fn;
    if (state)
        *state = entry->state;
    return 0;
}

size_t oq_registry_count(const oq_registry_t *self)
{
    assert(self);
    return self->count;
}

const char *oq_registry_type(const oq_registry_t *self, size_t i)
{
    assert(self);
    return i < self->count ? self->entries[i].type : NULL;
}

int oq_registry_add_flag(oq_registry_t *self, const oq_flag_t *flag)
{
    assert(self && flag);
    if (!flag->name || !flag->name[0] || flag->kind == OQ_FLAG_SECTION) {
        oq_error("cannot add a handler flag without a name");
        return -1;
    }
    /* What the flag table would assert on, refused here with a reason. */
    if (!flag->dest || (flag->kind == OQ_FLAG_CUSTOM && (!flag->parse || !flag->expected)) ||
        (flag->kind == OQ_FLAG_ENUM && !flag->words) || flag->stop ||
        (flag->repeat && flag->kind != OQ_FLAG_CUSTOM)) {
        oq_error("cannot add the handler flag --%s: it needs a destination (and a custom "
                 "flag its parser and expected text, an enum its words; no stop flags)",
                 flag->name);
        return -1;
    }
    for (size_t i = 0; i < self->flag_count; i++) {
        if (strcmp(self->flags[i].name, flag->name) == 0) {
            oq_error("cannot add the handler flag --%s: another handler added it", flag->name);
            return -1;
        }
    }
    if (self->flag_count == OQ_WORKER_MAX_HANDLER_FLAGS) {
        oq_error("cannot add the handler flag --%s: a registry holds at most %d", flag->name,
                 OQ_WORKER_MAX_HANDLER_FLAGS);
        return -1;
    }
    self->flags[self->flag_count++] = *flag;
    return 0;
}

const oq_flag_t *oq_registry_flags(const oq_registry_t *self, size_t *count)
{
    assert(self && count);
    *count = self->flag_count;
    return self->flags;
}
