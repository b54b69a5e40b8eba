/*  waiters.c: producers waiting for a job to end.

    Three views of the same waiters: by job (an id map to a list per job,
    so the end of a job finds its waiters in one lookup and a job nobody
    waits for costs one probe), by deadline (a heap, so expiry takes the
    due ones and nothing else), and by peer (a count per ROUTER identity,
    for the per-connection limit). A waiter is one allocation, linked into
    the first two; the third is only a number. */
#include "waiters.h"

#include <assert.h>
#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "idmap.h"
#include "list.h"
#include "onceq/limits.h"

#define S_MAX_IDENTITY 255

typedef struct {
    oq_heap_node_t node; /* its deadline */
    oq_link_t link;      /* in its job's list, oldest first */
    uint64_t job_id;
    int64_t req;
    bool delimiter;
    bool confirms; /* the wait of a dispatch */
    size_t identity_len;
    uint8_t identity[]; /* the peer's ROUTER identity */
} s_waiter_t;

/* The waiters of one job. */
typedef struct {
    oq_link_t waiters;
} s_job_t;

/* A job that left without completing. */
typedef struct {
    uint64_t id; /* 0: empty slot */
    oq_wait_state_t state;
} s_end_t;

struct oq_waiters {
    const oq_clock_t *clock;
    size_t max_total, max_per_peer;
    oq_heap_t *deadlines; /* s_waiter_t.node */
    oq_idmap_t *jobs;     /* job id -> s_job_t */
    zhashx_t *peers;      /* identity in hex -> its count of waiters (as a pointer) */
    size_t count;
    s_end_t *ends; /* ring of OQ_WAIT_ENDS_REMEMBERED */
    size_t ends_next;
};

oq_waiters_t *oq_waiters_new(size_t max_total, size_t max_per_peer, const oq_clock_t *clock)
{
    oq_waiters_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->clock = clock;
    self->max_total = max_total;
    self->max_per_peer = max_per_peer;
    self->deadlines = oq_heap_new();
    self->jobs = oq_idmap_new();
    self->peers = zhashx_new();
    self->ends = calloc(OQ_WAIT_ENDS_REMEMBERED, sizeof *self->ends);
    if (!self->deadlines || !self->jobs || !self->peers || !self->ends) {
        oq_waiters_destroy(&self);
        return NULL;
    }
    return self;
}

static s_waiter_t *s_of_node(oq_heap_node_t *node)
{
    return oq_container_of(node, s_waiter_t, node);
}

void oq_waiters_destroy(oq_waiters_t **self_p)
{
    assert(self_p);
    oq_waiters_t *self = *self_p;
    if (!self)
        return;
    if (self->deadlines) {
        /* Every waiter is in the heap (which writes to its nodes as they
           leave it); free each as it leaves, and its job's list with it. */
        oq_heap_node_t *top;
        while ((top = oq_heap_peek(self->deadlines))) {
            oq_heap_remove(self->deadlines, top);
            s_waiter_t *w = s_of_node(top);
            free(self->jobs ? oq_idmap_remove(self->jobs, w->job_id) : NULL);
            free(w);
        }
        oq_heap_destroy(&self->deadlines);
    }
    oq_idmap_destroy(&self->jobs);
    zhashx_destroy(&self->peers);
    free(self->ends);
    free(self);
    *self_p = NULL;
}

/* The peer's key in the peers table: its identity in hex. */
static void s_peer_key(const void *identity, size_t len, char out[2 * S_MAX_IDENTITY + 1])
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *b = identity;
    if (len > S_MAX_IDENTITY)
        len = S_MAX_IDENTITY;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * len] = 0;
}

static size_t s_peer_count(const oq_waiters_t *self, const char *key)
{
    return (size_t)(uintptr_t)zhashx_lookup(self->peers, key);
}

/* Set the peer's count; 0 removes it. 0, or -1 if memory runs out. */
static int s_peer_set(oq_waiters_t *self, const char *key, size_t count)
{
    if (count == 0) {
        zhashx_delete(self->peers, key);
        return 0;
    }
    if (zhashx_lookup(self->peers, key)) {
        zhashx_update(self->peers, key, (void *)(uintptr_t)count);
        return 0;
    }
    return zhashx_insert(self->peers, key, (void *)(uintptr_t)count);
}

int oq_waiters_add(oq_waiters_t *self, uint64_t job_id, int64_t timeout_ms, const void *identity,
                   size_t identity_len, bool delimiter, bool confirms, int64_t req, char *reason,
                   size_t reason_len)
{
    assert(self && job_id && identity_len <= S_MAX_IDENTITY);
    if (self->count >= self->max_total) {
        snprintf(reason, reason_len,
                 "the broker holds %zu waits already, its limit; wait again later or poll",
                 self->count);
        return -1;
    }
    char key[2 * S_MAX_IDENTITY + 1];
    s_peer_key(identity, identity_len, key);
    size_t mine = s_peer_count(self, key);
    if (mine >= self->max_per_peer) {
        snprintf(reason, reason_len,
                 "this connection holds %zu waits already, the limit per connection; wait for "
                 "an answer first",
                 mine);
        return -1;
    }
    s_waiter_t *w = calloc(1, sizeof *w + identity_len);
    s_job_t *job = oq_idmap_get(self->jobs, job_id);
    bool new_job = job == NULL;
    if (new_job) {
        job = calloc(1, sizeof *job);
        if (job)
            oq_list_init(&job->waiters);
    }
    if (!w || !job || (new_job && oq_idmap_put(self->jobs, job_id, job) < 0))
        goto oom;
    if (oq_heap_push(self->deadlines, &w->node, oq_clock_now_ms(self->clock) + timeout_ms) < 0) {
        if (new_job)
            oq_idmap_remove(self->jobs, job_id);
        goto oom;
    }
    if (s_peer_set(self, key, mine + 1) < 0) {
        oq_heap_remove(self->deadlines, &w->node);
        if (new_job)
            oq_idmap_remove(self->jobs, job_id);
        goto oom;
    }
    w->job_id = job_id;
    w->req = req;
    w->delimiter = delimiter;
    w->confirms = confirms;
    w->identity_len = identity_len;
    memcpy(w->identity, identity, identity_len);
    oq_list_push_back(&job->waiters, &w->link);
    self->count++;
    return 0;
oom:
    if (new_job)
        free(job);
    free(w);
    snprintf(reason, reason_len, "out of memory holding the wait; try again later");
    return -1;
}

/* Answer w through fn and free it: out of its job's list (and the job's
   entry with its last waiter), the heap and its peer's count. */
static void s_answer(oq_waiters_t *self, s_waiter_t *w, oq_waiter_fn fn, void *ctx)
{
    oq_waiter_view_t view = {w->job_id,       w->req,       w->identity,
                             w->identity_len, w->delimiter, w->confirms};
    fn(ctx, &view);
    oq_link_t *next = w->link.next;
    oq_list_remove(&w->link);
    if (next->next == next) {
        /* next was the job's list head, now empty */
        s_job_t *job = oq_idmap_remove(self->jobs, w->job_id);
        assert(job && &job->waiters == next);
        free(job);
    }
    oq_heap_remove(self->deadlines, &w->node);
    char key[2 * S_MAX_IDENTITY + 1];
    s_peer_key(w->identity, w->identity_len, key);
    size_t mine = s_peer_count(self, key);
    s_peer_set(self, key, mine ? mine - 1 : 0); /* lowering never allocates */
    self->count--;
    free(w);
}

size_t oq_waiters_end(oq_waiters_t *self, uint64_t job_id, oq_waiter_fn fn, void *ctx)
{
    if (self->count == 0)
        return 0;
    s_job_t *job = oq_idmap_get(self->jobs, job_id);
    size_t n = 0;
    while (job && !oq_list_empty(&job->waiters)) {
        bool last = job->waiters.next->next == &job->waiters;
        s_answer(self, oq_container_of(job->waiters.next, s_waiter_t, link), fn, ctx);
        n++;
        if (last)
            break; /* the job's entry is freed with its last waiter */
    }
    return n;
}

size_t oq_waiters_expire(oq_waiters_t *self, oq_waiter_fn fn, void *ctx)
{
    int64_t now = oq_clock_now_ms(self->clock);
    size_t n = 0;
    oq_heap_node_t *top;
    while ((top = oq_heap_peek(self->deadlines)) && oq_heap_deadline(self->deadlines, top) <= now) {
        s_answer(self, s_of_node(top), fn, ctx);
        n++;
    }
    return n;
}

int64_t oq_waiters_next_deadline(const oq_waiters_t *self)
{
    oq_heap_node_t *top = oq_heap_peek(self->deadlines);
    return top ? oq_heap_deadline(self->deadlines, top) : -1;
}

size_t oq_waiters_count(const oq_waiters_t *self)
{
    return self->count;
}

size_t oq_waiters_max(const oq_waiters_t *self)
{
    return self->max_total;
}

size_t oq_waiters_max_per_peer(const oq_waiters_t *self)
{
    return self->max_per_peer;
}

size_t oq_waiters_of_peer(const oq_waiters_t *self, const void *identity, size_t identity_len)
{
    char key[2 * S_MAX_IDENTITY + 1];
    s_peer_key(identity, identity_len, key);
    return s_peer_count(self, key);
}

void oq_waiters_remember_end(oq_waiters_t *self, uint64_t job_id, oq_wait_state_t state)
{
    self->ends[self->ends_next] = (s_end_t){job_id, state};
    self->ends_next = (self->ends_next + 1) % OQ_WAIT_ENDS_REMEMBERED;
}

/* A linear scan: it runs only for a wait on a job the broker no longer
   holds, and the ring is small. */
int oq_waiters_recall_end(const oq_waiters_t *self, uint64_t job_id, oq_wait_state_t *state)
{
    for (size_t i = 0; i < OQ_WAIT_ENDS_REMEMBERED; i++) {
        if (self->ends[i].id == job_id) {
            *state = self->ends[i].state;
            return 0;
        }
    }
    return -1;
}
