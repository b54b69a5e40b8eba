/*  engine_chains.c: chains of jobs, one link after another.

    A chain lives beside the job that is its current link: an entry in
    engine->chains, keyed by that job's id, holding the links still to
    come (copies) and chain_catch. oq_eng_transition tells it
    (oq_eng_chain_note) when the job ends: done makes the next link due,
    the failed store makes chain_catch due and stops the chain, cancelled
    or forgotten stops it with nothing due. Replay goes through the same
    calls and only marks what is due; oq_engine_chains_settle dispatches it
    once the journal's observer is attached.

    Exactly once. The next link is dispatched through oq_engine_dispatch
    with the dispatch_id "chain:<first job>:<place>" (catch:
    "chain:<first job>:catch"), so its DISPATCHED record is written before
    it exists; then the rest of the chain is attached to it (CHAIN record)
    and the old entry is let go (CHAIN_FIRED). A crash before the
    DISPATCHED leaves the old entry due: it is dispatched after the
    restart. A crash after it finds the dispatch id in the dedupe table,
    which answers with the job already made, and the rest of the chain is
    attached to that job if its CHAIN record was lost too. A link the
    broker cannot take now stays due and is tried again on every loop turn
    (oq_engine_batches_retry). */
#include "engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_batches.h"
#include "engine_jobs.h"
#include "engine_memory.h"
#include "engine_queues.h"
#include "onceq/log.h"

typedef struct oq_eng_chain {
    oq_chain_view_t v;                            /* rest and catch_ point to the copies */
    oq_job_msg_t *copies[OQ_MAX_CHAIN_LINKS + 1]; /* rest, then catch_ (NULL: none) */
    uint64_t cost;                                /* against max_bytes (engine->batch_bytes) */
    bool retrying;                                /* a refused dispatch was said once */
    oq_link_t all;                                /* in engine->chains_all */
} oq_eng_chain_t;

static void s_free(oq_eng_chain_t *c)
{
    for (int i = 0; i <= OQ_MAX_CHAIN_LINKS; i++)
        free(c->copies[i]);
    free(c);
}

/* A chain entry for job_id with these links (copied), not yet held. */
static oq_eng_chain_t *s_make(uint64_t job_id, uint64_t root, uint32_t place,
                              const oq_job_msg_t *const *rest, uint32_t rest_count,
                              const oq_job_msg_t *catch_)
{
    oq_eng_chain_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cost = OQ_CHAIN_OVERHEAD_BYTES;
    c->v.job_id = job_id;
    c->v.root = root;
    c->v.place = place;
    c->v.rest_count = rest_count;
    c->v.total = place + rest_count;
    for (uint32_t i = 0; i <= rest_count; i++) {
        const oq_job_msg_t *m = i < rest_count ? rest[i] : catch_;
        if (!m)
            continue;
        size_t bytes = 0;
        if (!(c->copies[i == rest_count ? OQ_MAX_CHAIN_LINKS : i] = oq_eng_msg_copy(m, &bytes))) {
            s_free(c);
            return NULL;
        }
        c->cost += bytes;
    }
    for (uint32_t i = 0; i < rest_count; i++)
        c->v.rest[i] = c->copies[i];
    c->v.catch_ = c->copies[OQ_MAX_CHAIN_LINKS];
    return c;
}

static int s_hold(oq_engine_t *self, oq_eng_chain_t *c)
{
    if (oq_idmap_put(self->chains, c->v.job_id, c) < 0)
        return -1;
    oq_list_push_back(&self->chains_all, &c->all);
    self->batch_bytes += c->cost;
    return 0;
}

static void s_drop(oq_engine_t *self, oq_eng_chain_t *c)
{
    oq_idmap_remove(self->chains, c->v.job_id);
    oq_list_remove(&c->all);
    self->batch_bytes -= c->cost;
    s_free(c);
}

static void s_report(oq_engine_t *self, oq_chain_event_t event, const oq_eng_chain_t *c)
{
    /* Both after the fact: a record the journal cannot keep is its to note,
       and a replay without it is answered by the dispatch ids. */
    if (self->hooks.chain)
        (void)self->hooks.chain(self->hooks.ctx, event, &c->v);
}

/* Attach the rest of c's chain (after its next link) to job next_id,
   unless that job has one already or is not held. */
static int s_attach_rest(oq_engine_t *self, const oq_eng_chain_t *c, uint64_t next_id)
{
    if ((c->v.rest_count == 1 && !c->v.catch_) || oq_idmap_get(self->chains, next_id) ||
        !oq_engine_job_state(self, next_id))
        return 0; /* the last link and nothing to catch: nothing to hold */
    oq_eng_chain_t *n =
        s_make(next_id, c->v.root, c->v.place + 1, c->v.rest + 1, c->v.rest_count - 1, c->v.catch_);
    if (!n || s_hold(self, n) < 0) {
        if (n)
            s_free(n);
        return -1;
    }
    s_report(self, OQ_CHAIN_CREATED, n);
    return 0;
}

/* Dispatch what c has due: 1 if it went out (c is freed), 0 if nothing
   was due, -1 if refused (c stays due). */
static int s_fire(oq_engine_t *self, oq_eng_chain_t *c)
{
    if (c->v.due == OQ_CHAIN_LIVE || self->batches_held)
        return 0;
    const oq_job_msg_t *next =
        c->v.due == OQ_CHAIN_NEXT ? (c->v.rest_count ? c->v.rest[0] : NULL) : c->v.catch_;
    uint64_t id = 0;
    if (next) {
        char dispatch_id[64];
        if (c->v.due == OQ_CHAIN_NEXT)
            snprintf(dispatch_id, sizeof dispatch_id, "chain:%" PRIu64 ":%u", c->v.root,
                     c->v.place + 1);
        else
            snprintf(dispatch_id, sizeof dispatch_id, "chain:%" PRIu64 ":catch", c->v.root);
        oq_job_msg_t msg = *next;
        msg.dispatch_id = oq_str(dispatch_id);
        oq_err_t code;
        char reason[OQ_MAX_ERROR_LEN + 1];
        if (oq_engine_dispatch(self, &msg, &id, &code, reason, sizeof reason) < 0 ||
            (c->v.due == OQ_CHAIN_NEXT && s_attach_rest(self, c, id) < 0)) {
            if (!c->retrying)
                oq_warn("chain of job %" PRIu64 ": its %s is due but was not dispatched (%s): "
                        "tried again on every loop turn until it is",
                        c->v.root, c->v.due == OQ_CHAIN_NEXT ? "next link" : "chain_catch", reason);
            c->retrying = true;
            self->batches_due = true;
            return -1;
        }
        oq_info("chain of job %" PRIu64 ": %s dispatched as job %" PRIu64, c->v.root,
                c->v.due == OQ_CHAIN_NEXT ? "next link" : "chain_catch", id);
    }
    s_report(self, OQ_CHAIN_FIRED, c);
    s_drop(self, c);
    return next ? 1 : 0;
}

void oq_eng_chain_note(oq_engine_t *self, uint64_t id, oq_eng_state_t from, oq_eng_state_t to,
                       oq_job_event_t event)
{
    oq_eng_chain_t *c = oq_idmap_get(self->chains, id);
    if (!c || c->v.due != OQ_CHAIN_LIVE)
        return;
    oq_job_event_t as = event == OQ_EVENT_RESTORED && to == OQ_ENG_DONE ? self->restore_as : event;
    if (to == OQ_ENG_FAILED) {
        c->v.due = OQ_CHAIN_CATCH;
    } else if (to == OQ_ENG_DONE && (as == OQ_EVENT_CANCELLED || as == OQ_EVENT_FORGOTTEN)) {
        /* Stopped by an operator: nothing follows, and replay, seeing the
           same record, stops it the same way (no record of its own). */
        s_drop(self, c);
        return;
    } else if (to == OQ_ENG_DONE && from != OQ_ENG_FAILED) {
        c->v.due = OQ_CHAIN_NEXT;
    } else {
        return;
    }
    if (event != OQ_EVENT_RESTORED)
        s_fire(self, c);
}

/* The timeout rule of one link against its queue as it is. */
static int s_check_rule(oq_engine_t *self, const oq_job_msg_t *j, char *reason, size_t reason_len)
{
    char qname[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(j->queue, qname, sizeof qname);
    oq_eng_queue_t *q = oq_eng_queue_get(self, qname, false);
    int64_t retry_after_ms = q ? q->retry_after_ms : self->config.retry_after_ms;
    int64_t timeout_ms =
        j->has_timeout ? j->timeout_ms : (q ? q->timeout_ms : self->config.timeout_ms);
    return oq_eng_check_rule(self, qname, timeout_ms, retry_after_ms, reason, reason_len);
}

int oq_engine_dispatch_chain(oq_engine_t *self, const oq_job_msg_t *first,
                             const oq_job_msg_t *links, size_t count, const oq_job_msg_t *catch_,
                             uint64_t *id, oq_err_t *code, char *reason, size_t reason_len)
{
#define S_REFUSE(c, ...)                                                                           \
    do {                                                                                           \
        *code = (c);                                                                               \
        snprintf(reason, reason_len, __VA_ARGS__);                                                 \
        return -1;                                                                                 \
    } while (0)

    if (count > OQ_MAX_CHAIN_LINKS)
        S_REFUSE(OQ_ERR_TOO_LARGE, "a chain holds at most %d links after its first job, not %zu",
                 OQ_MAX_CHAIN_LINKS, count);
    if (first->unique_key.len)
        S_REFUSE(OQ_ERR_BAD_REQUEST, "a chained job may not carry a unique_key");
    size_t payload = catch_ ? catch_->payload_len : 0;
    const oq_job_msg_t *rest[OQ_MAX_CHAIN_LINKS];
    for (size_t i = 0; i <= count; i++) {
        const oq_job_msg_t *l = i < count ? &links[i] : catch_;
        if (!l)
            continue;
        if (i < count)
            rest[i] = l;
        if (l->unique_key.len || l->dispatch_id.len)
            S_REFUSE(OQ_ERR_BAD_REQUEST,
                     "%s may carry neither a unique_key nor a dispatch_id (it is dispatched once, "
                     "as chain:<first job>:<place>)",
                     i < count ? "a chain's link" : "chain_catch");
        if (s_check_rule(self, l, reason, reason_len) < 0) {
            *code = OQ_ERR_TIMEOUT_RULE;
            return -1;
        }
        payload += i < count ? l->payload_len : 0;
    }
    if (payload > OQ_MAX_CHAIN_PAYLOAD_BYTES)
        S_REFUSE(OQ_ERR_TOO_LARGE,
                 "the chain's links' payloads are %zu bytes together, the limit "
                 "is %d",
                 payload, OQ_MAX_CHAIN_PAYLOAD_BYTES);
    if (oq_engine_dispatch(self, first, id, code, reason, reason_len) < 0)
        return -1;
    if (count == 0 && !catch_)
        return 0;
    /* A resend of the first job's dispatch id: its chain is held already,
       unless a crash lost its record (then it is attached now). */
    if (oq_idmap_get(self->chains, *id) || !oq_engine_job_state(self, *id))
        return 0;
    oq_eng_chain_t *c = s_make(*id, *id, 1, rest, (uint32_t)count, catch_);
    if (!c || s_hold(self, c) < 0) {
        if (c)
            s_free(c);
        /* The job is queued; a resend of its dispatch id attaches the chain. */
        S_REFUSE(OQ_ERR_INTERNAL,
                 "job %" PRIu64 " is queued, but memory ran out holding its chain: send the "
                 "dispatch again with its dispatch_id",
                 *id);
    }
    s_report(self, OQ_CHAIN_CREATED, c);
    return 0;
#undef S_REFUSE
}

int oq_engine_chain_view(const oq_engine_t *self, uint64_t job_id, oq_chain_view_t *view)
{
    const oq_eng_chain_t *c = oq_idmap_get(self->chains, job_id);
    if (!c)
        return -1;
    *view = c->v;
    return 0;
}

void oq_engine_chain_each(const oq_engine_t *self, void (*fn)(void *ctx, const oq_chain_view_t *c),
                          void *ctx)
{
    for (const oq_link_t *l = self->chains_all.next; l != &self->chains_all; l = l->next)
        fn(ctx, &oq_container_of(l, oq_eng_chain_t, all)->v);
}

size_t oq_engine_chains_settle(oq_engine_t *self)
{
    size_t fired = 0;
    oq_link_t *l = self->chains_all.next;
    while (l != &self->chains_all) {
        oq_link_t *next = l->next; /* s_fire may free this one, and add at the back */
        int rc = s_fire(self, oq_container_of(l, oq_eng_chain_t, all));
        fired += rc > 0;
        l = next;
    }
    return fired;
}

int oq_engine_restore_chain(oq_engine_t *self, const oq_chain_view_t *v, char *reason,
                            size_t reason_len)
{
    if (oq_idmap_get(self->chains, v->job_id))
        return 0;
    if (v->rest_count > OQ_MAX_CHAIN_LINKS) {
        snprintf(reason, reason_len, "chain of job %" PRIu64 ": %u links", v->job_id,
                 v->rest_count);
        return -1;
    }
    oq_eng_chain_t *c = s_make(v->job_id, v->root, v->place, v->rest, v->rest_count, v->catch_);
    if (!c || s_hold(self, c) < 0) {
        if (c)
            s_free(c);
        snprintf(reason, reason_len, "out of memory restoring the chain of job %" PRIu64,
                 v->job_id);
        return -1;
    }
    c->v.due = v->due;
    return 0;
}

int oq_engine_restore_chain_fired(oq_engine_t *self, uint64_t job_id)
{
    oq_eng_chain_t *c = oq_idmap_get(self->chains, job_id);
    if (!c)
        return -1;
    s_drop(self, c);
    return 0;
}

void oq_eng_chains_destroy(oq_engine_t *self)
{
    if (!self->chains)
        return;
    oq_link_t *l = self->chains_all.next;
    while (l && l != &self->chains_all) {
        oq_link_t *next = l->next;
        s_free(oq_container_of(l, oq_eng_chain_t, all));
        l = next;
    }
    oq_idmap_destroy(&self->chains);
}
