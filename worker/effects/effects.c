/*  effects.c: the per-process handle, a connection and a runner over it.
    It adds no behaviour of its own; it is the one thing a handler keeps, so
    that "one connection per process, its transactions at the configured
    isolation level" is one line to write and hard to get wrong. Handlers of
    one process that use the same database share one handle
    (oq_effects_shared), and so one connection: a worker process never holds
    more connections than it can use at once, which is one. */
#include "onceq/effects.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/log.h"

struct oq_effects {
    oq_pg_t *pg;   /* owned; connects on first use */
    oq_txn_t *txn; /* owned; over pg */
    /* Shared handles only (oq_effects_shared): */
    char *conninfo;               /* as given, to find it again */
    oq_txn_isolation_t isolation; /* likewise */
    uint32_t users;               /* oq_effects_shared calls not yet destroyed */
    oq_effects_t *next;           /* in s_shared */
};

/* The shared handles of this process. */
static oq_effects_t *s_shared;

oq_effects_t *oq_effects_new(const char *conninfo, oq_txn_isolation_t isolation,
                             const char *application_name)
{
    oq_effects_t *self = calloc(1, sizeof *self);
    assert(self);
    self->pg = oq_pg_new(conninfo, application_name);
    self->txn = oq_txn_new(oq_txn_pg_ops(), self->pg, isolation);
    return self;
}

oq_effects_t *oq_effects_shared(const char *conninfo, oq_txn_isolation_t isolation,
                                const char *application_name)
{
    const char *key = conninfo ? conninfo : "";
    for (oq_effects_t *fx = s_shared; fx; fx = fx->next) {
        if (fx->isolation == isolation && strcmp(fx->conninfo, key) == 0) {
            fx->users++;
            return fx;
        }
    }
    oq_effects_t *self = oq_effects_new(conninfo, isolation, application_name);
    self->conninfo = strdup(key);
    assert(self->conninfo);
    self->isolation = isolation;
    self->users = 1;
    self->next = s_shared;
    s_shared = self;
    return self;
}

void oq_effects_destroy(oq_effects_t **self_p)
{
    assert(self_p);
    oq_effects_t *self = *self_p;
    if (!self)
        return;
    *self_p = NULL;
    if (self->users > 0) {
        if (--self->users > 0)
            return; /* another user still has it */
        for (oq_effects_t **at = &s_shared; *at; at = &(*at)->next) {
            if (*at == self) {
                *at = self->next;
                break;
            }
        }
        free(self->conninfo);
    }
    oq_txn_destroy(&self->txn);
    oq_pg_destroy(&self->pg);
    free(self);
    *self_p = NULL;
}

void oq_effects_begin_job(oq_effects_t *self, int64_t timeout_ms)
{
    assert(self);
    oq_pg_set_job_timeout(self->pg, timeout_ms);
}

int oq_effects_run(oq_effects_t *self, oq_txn_body_fn body, void *ctx, oq_pg_error_t *error)
{
    assert(self);
    return oq_txn_run(self->txn, body, ctx, error);
}

int oq_effects_run_batch(oq_effects_t *self, size_t count, oq_batch_body_fn batch,
                         oq_batch_one_fn one, void *ctx, oq_batch_item_t *items,
                         oq_pg_error_t *batch_error)
{
    assert(self);
    return oq_txn_run_batch(self->txn, count, batch, one, ctx, items, batch_error);
}

int oq_effects_probe(oq_effects_t *self, oq_pg_error_t *error)
{
    assert(self && error);
    assert(!oq_txn_active(self->txn));
    /* The probe's own bound, not the last job's: the job that set it is
       over, and the next one sets its own (oq_effects_begin_job). */
    oq_pg_set_timeout(self->pg, OQ_EFFECTS_PROBE_TIMEOUT_MS);
    return oq_pg_exec(self->pg, "SELECT 1", 0, NULL, NULL, error);
}

void oq_effects_release(oq_effects_t *self)
{
    assert(self);
    assert(!oq_txn_active(self->txn));
    if (oq_pg_disconnect(self->pg))
        oq_debug("released the database connection of an idle worker");
}

oq_pg_t *oq_effects_pg(oq_effects_t *self)
{
    assert(self);
    return self->pg;
}

oq_txn_t *oq_effects_txn(oq_effects_t *self)
{
    assert(self);
    return self->txn;
}
