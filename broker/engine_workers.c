/*  engine_workers.c: the workers the engine knows: their identity, credit,
    routes (the types and queues they named), drain, status and reaping.
    A worker removed gives its leases back at once. */
#include "engine_workers.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_jobs.h"
#include "engine_queues.h"
#include "onceq/log.h"

static void s_hex(const void *data, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *b = data;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * len] = 0;
}

oq_worker_t *oq_engine_worker_find(oq_engine_t *self, const void *identity, size_t len)
{
    if (len == 0 || len > 255)
        return NULL;
    char key[513];
    s_hex(identity, len, key);
    return zhashx_lookup(self->workers, key);
}

oq_worker_t *oq_engine_worker_add(oq_engine_t *self, const void *identity, size_t len,
                                  oq_str_t name, uint32_t pid, const uint8_t *key)
{
    if (len == 0 || len > 255 || zhashx_size(self->workers) >= OQ_MAX_WORKERS)
        return NULL;
    oq_worker_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    oq_str_copy(name, w->name, sizeof w->name);
    w->named = zhashx_lookup(self->names, w->name);
    if (!w->named) {
        w->named = calloc(1, sizeof *w->named);
        if (!w->named) {
            free(w);
            return NULL;
        }
        memcpy(w->named->name, w->name, sizeof w->name);
        zhashx_insert(self->names, w->name, w->named);
        oq_list_push_back(&self->names_all, &w->named->all);
    }
    w->named->workers++;
    memcpy(w->identity, identity, len);
    w->identity_len = len;
    s_hex(identity, len, w->key);
    if (key) {
        memcpy(w->curve_key, key, OQ_KEY_BYTES);
        w->has_key = true;
    }
    w->pid = pid;
    w->seq = ++self->worker_seq;
    w->last_seen_ms = oq_eng_now(self);
    w->status = OQ_STATUS_READY; /* until it says otherwise (a worker may never) */
    w->status_since_ms = w->last_seen_ms;
    oq_list_init(&w->leases);
    oq_link_clear(&w->waiting);
    oq_link_clear(&w->sending);
    w->jobs_per_msg = 1;
    oq_list_push_back(&self->workers_all, &w->all);
    zhashx_insert(self->workers, w->key, w);
    self->any_type_workers++; /* until its route names types */
    return w;
}

int oq_engine_worker_route(oq_engine_t *self, oq_worker_t *w, const msgpack_object *types,
                           const msgpack_object *queues, char *reason, size_t reason_len)
{
    if (w->routed)
        return 0; /* the first ready's lists hold for the connection's life */
    uint32_t ntypes = oq_proto_list_size(types), nqueues = oq_proto_list_size(queues);
    oq_eng_type_t **tv = ntypes ? calloc(ntypes, sizeof *tv) : NULL;
    uint64_t *bits = ntypes ? calloc(OQ_ENG_TYPE_WORDS, sizeof *bits) : NULL;
    oq_eng_queue_t **qv = nqueues ? calloc(nqueues, sizeof *qv) : NULL;
    if ((ntypes && (!tv || !bits)) || (nqueues && !qv))
        goto oom;
    uint32_t nt = 0;
    for (uint32_t i = 0; i < ntypes; i++) {
        oq_eng_type_t *t = oq_eng_type_get(self, oq_proto_list_at(types, i));
        if (!t) {
            snprintf(reason, reason_len, "the broker knows its maximum of %d job types",
                     OQ_MAX_TYPES);
            goto refuse;
        }
        if (bits[t->index / 64] & (1ULL << (t->index % 64)))
            continue; /* named twice */
        bits[t->index / 64] |= 1ULL << (t->index % 64);
        tv[nt++] = t;
    }
    uint32_t nq = 0;
    for (uint32_t i = 0; i < nqueues; i++) {
        char name[OQ_MAX_NAME_LEN + 1];
        oq_str_copy(oq_proto_list_at(queues, i), name, sizeof name);
        oq_eng_queue_t *q = oq_eng_queue_get(self, name, true);
        if (!q) {
            snprintf(reason, reason_len,
                     "cannot create queue \"%s\": the broker holds its maximum of %d queues", name,
                     OQ_MAX_QUEUES);
            goto refuse;
        }
        bool seen = false;
        for (uint32_t k = 0; k < nq; k++)
            seen |= qv[k] == q;
        if (!seen)
            qv[nq++] = q;
    }
    w->routed = true;
    if (ntypes) {
        w->types = tv;
        w->type_count = nt;
        w->type_bits = bits;
        for (uint32_t i = 0; i < nt; i++)
            tv[i]->workers++;
        self->any_type_workers--;
    }
    w->queues = qv;
    w->queue_count = nq;
    return 0;
oom:
    snprintf(reason, reason_len, "out of memory");
refuse:
    free(tv);
    free(bits);
    free(qv);
    return -1;
}

void oq_engine_worker_seen(oq_engine_t *self, oq_worker_t *worker)
{
    worker->last_seen_ms = oq_eng_now(self);
}

void oq_engine_worker_credit(oq_engine_t *self, oq_worker_t *worker, uint32_t credit)
{
    if (worker->draining || credit == 0)
        return;
    uint64_t total = (uint64_t)worker->credit + credit;
    worker->credit = total > OQ_MAX_CREDIT ? OQ_MAX_CREDIT : (uint32_t)total;
    if (!oq_list_linked(&worker->waiting))
        oq_list_push_back(&self->waiting, &worker->waiting);
}

void oq_engine_worker_jobs_per_msg(oq_engine_t *self, oq_worker_t *worker, uint32_t jobs)
{
    (void)self;
    worker->jobs_per_msg = jobs < 1 ? 1 : jobs > OQ_MAX_JOBS_PER_MSG ? OQ_MAX_JOBS_PER_MSG : jobs;
}

void oq_engine_worker_resume(oq_engine_t *self, oq_worker_t *worker)
{
    (void)self;
    worker->draining = false;
}

void oq_engine_worker_status(oq_engine_t *self, oq_worker_t *worker, oq_worker_status_t status,
                             int64_t since_ms, oq_str_t error)
{
    int64_t now = oq_eng_now(self);
    if (status != worker->status)
        oq_info("worker %s (pid %u) is %s%s%.*s", worker->key, worker->pid,
                oq_proto_status_name(status), error.len ? ": " : "", (int)error.len,
                error.ptr ? error.ptr : "");
    worker->named->unavailable +=
        (status == OQ_STATUS_UNAVAILABLE) - (worker->status == OQ_STATUS_UNAVAILABLE);
    worker->status = status;
    worker->status_since_ms = now - (since_ms > 0 ? since_ms : 0);
    free(worker->status_error);
    worker->status_error = NULL;
    if (status == OQ_STATUS_UNAVAILABLE) {
        worker->status_error = malloc(error.len + 1);
        if (worker->status_error)
            oq_str_copy(error, worker->status_error, error.len + 1);
        /* A paused worker takes nothing until its next ready gives credit,
           whatever credit it had: its jobs would only come back. */
        worker->credit = 0;
        if (oq_list_linked(&worker->waiting))
            oq_list_remove(&worker->waiting);
    }
}

size_t oq_engine_workers_unavailable(const oq_engine_t *self)
{
    size_t n = 0;
    for (oq_link_t *node = self->workers_all.next; node != &self->workers_all; node = node->next)
        n += oq_container_of(node, oq_worker_t, all)->status == OQ_STATUS_UNAVAILABLE;
    return n;
}

void oq_engine_worker_drain(oq_engine_t *self, oq_worker_t *worker)
{
    worker->draining = true;
    worker->credit = 0;
    if (oq_list_linked(&worker->waiting))
        oq_list_remove(&worker->waiting);
}

void oq_engine_worker_remove(oq_engine_t *self, oq_worker_t **worker_p, const char *reason)
{
    oq_worker_t *w = *worker_p;
    if (!w)
        return;
    if (w->leased)
        oq_info("worker %s (pid %u) gone (%s): giving back %u leased job(s)", w->key, w->pid,
                reason, w->leased);
    else
        oq_debug("worker %s (pid %u) gone (%s)", w->key, w->pid, reason);
    char why[160];
    snprintf(why, sizeof why, "worker died (%s)", reason);
    while (!oq_list_empty(&w->leases)) {
        oq_eng_job_t *job = oq_container_of(w->leases.next, oq_eng_job_t, link);
        oq_eng_lease_end(self, job, why);
    }
    if (oq_list_linked(&w->waiting))
        oq_list_remove(&w->waiting);
    if (oq_list_linked(&w->sending))
        oq_list_remove(&w->sending);
    oq_list_remove(&w->all);
    zhashx_delete(self->workers, w->key);
    if (w->types) {
        for (uint32_t i = 0; i < w->type_count; i++)
            w->types[i]->workers--;
    } else {
        self->any_type_workers--;
        for (uint32_t i = 0; i < w->refused_count; i++)
            w->refused[i]->refusing--;
    }
    w->named->unavailable -= w->status == OQ_STATUS_UNAVAILABLE;
    if (--w->named->workers == 0) {
        oq_list_remove(&w->named->all);
        zhashx_delete(self->names, w->name); /* frees it */
    }
    free(w->types);
    free(w->type_bits);
    free(w->queues);
    free(w->status_error);
    free(w);
    *worker_p = NULL;
}

size_t oq_engine_reap_workers(oq_engine_t *self, int64_t silence_ms)
{
    int64_t now = oq_eng_now(self);
    size_t removed = 0;
    oq_link_t *node = self->workers_all.next;
    while (node != &self->workers_all) {
        oq_worker_t *w = oq_container_of(node, oq_worker_t, all);
        node = node->next;
        if (now - w->last_seen_ms > silence_ms) {
            char why[64];
            snprintf(why, sizeof why, "silent for %lld ms", (long long)(now - w->last_seen_ms));
            oq_engine_worker_remove(self, &w, why);
            removed++;
            self->workers_dead++;
        }
    }
    return removed;
}

void oq_eng_worker_view(const oq_engine_t *self, const oq_worker_t *w, oq_worker_view_t *v)
{
    v->identity = w->identity;
    v->identity_len = w->identity_len;
    v->name = w->name;
    v->pid = w->pid;
    v->seq = w->seq;
    v->credit = w->credit;
    v->leased = w->leased;
    v->idle_ms = oq_eng_now(self) - w->last_seen_ms;
    v->type_count = w->types ? w->type_count : 0;
    v->queue_count = w->queues ? w->queue_count : 0;
    v->status = w->status;
    v->status_ms = oq_eng_now(self) - w->status_since_ms;
    v->status_error = w->status_error ? w->status_error : "";
    v->jobs_per_msg = w->jobs_per_msg;
    v->worker_ = w;
}

const char *oq_engine_worker_type(const oq_worker_view_t *view, uint32_t i)
{
    const oq_worker_t *w = view->worker_;
    assert(i < w->type_count);
    return w->types[i]->name;
}

const char *oq_engine_worker_queue(const oq_worker_view_t *view, uint32_t i)
{
    const oq_worker_t *w = view->worker_;
    assert(i < w->queue_count);
    return w->queues[i]->name;
}

void oq_engine_worker_each(oq_engine_t *self, void (*fn)(void *ctx, const oq_worker_view_t *w),
                           void *ctx)
{
    for (oq_link_t *n = self->workers_all.next; n != &self->workers_all; n = n->next) {
        oq_worker_view_t view;
        oq_eng_worker_view(self, oq_container_of(n, oq_worker_t, all), &view);
        fn(ctx, &view);
    }
}

void oq_engine_worker_page(oq_engine_t *self, uint64_t after,
                           bool (*fn)(void *ctx, const oq_worker_view_t *w), void *ctx)
{
    /* Registration order is list order, so the walk to the cursor is a
       pointer chase (some 10 us past 10,000 workers) and a worker that
       left since the last page moves no other worker. */
    for (oq_link_t *n = self->workers_all.next; n != &self->workers_all; n = n->next) {
        const oq_worker_t *w = oq_container_of(n, oq_worker_t, all);
        if (w->seq <= after)
            continue;
        oq_worker_view_t view;
        oq_eng_worker_view(self, w, &view);
        if (!fn(ctx, &view))
            return;
    }
}

void oq_engine_worker_names(const oq_engine_t *self,
                            bool (*fn)(void *ctx, const char *name, uint32_t workers,
                                       uint32_t unavailable),
                            void *ctx)
{
    for (const oq_link_t *n = self->names_all.next; n != &self->names_all; n = n->next) {
        const oq_eng_name_t *named = oq_container_of(n, oq_eng_name_t, all);
        if (!fn(ctx, named->name, named->workers, named->unavailable))
            return;
    }
}

size_t oq_engine_worker_names_count(const oq_engine_t *self)
{
    return zhashx_size(self->names);
}

size_t oq_engine_worker_count(const oq_engine_t *self)
{
    return zhashx_size(self->workers);
}

bool oq_eng_worker_handles(const oq_worker_t *w, const oq_eng_type_t *t)
{
    if (w->types)
        return (w->type_bits[t->index / 64] >> (t->index % 64)) & 1;
    for (uint32_t i = 0; i < w->refused_count; i++)
        if (w->refused[i] == t)
            return false;
    return true;
}

/* A worker handed a job back because it does not handle its type: send it
   no more of that type. */
void oq_eng_worker_refuse_type(oq_engine_t *self, oq_worker_t *w, oq_eng_type_t *t)
{
    if (w->types) {
        for (uint32_t i = 0; i < w->type_count; i++) {
            if (w->types[i] == t) {
                w->types[i] = w->types[--w->type_count];
                w->type_bits[t->index / 64] &= ~(1ULL << (t->index % 64));
                t->workers--;
                break;
            }
        }
    } else if (oq_eng_worker_handles(w, t) && w->refused_count < OQ_MAX_REFUSED_TYPES) {
        w->refused[w->refused_count++] = t;
        t->refusing++; /* it no longer counts among the type's workers */
    }
    oq_info("worker %s (pid %u) handed back a job of type %s: it is sent no more of them", w->key,
            w->pid, t->name);
    (void)self;
}
