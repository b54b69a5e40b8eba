/*  waiters.c: producers waiting for a job to end.

    Five views of the same waiters: by job (an id map to a list per job,
    so the end of a job finds its waiters in one lookup and a job nobody
    waits for costs one probe), by deadline (a heap, so expiry takes the
    due ones and nothing else), by connection (a list per descriptor, so a
    close drops its waiters and nothing else), by peer (a count per ROUTER
    identity, for the per-connection limit) and by key (a count per CURVE
    key, for the per-key limit). A waiter is one allocation, linked into
    the first three; the last two are only numbers. */
#include "waiters.h"

#include <assert.h>
#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "idmap.h"
#include "list.h"
#include "onceq/keys.h"
#include "onceq/limits.h"

#define S_MAX_IDENTITY 255
#define S_KEY_HEX      (2 * OQ_KEY_BYTES + 1)

typedef struct {
    oq_heap_node_t node; /* its deadline */
    oq_link_t link;      /* in its job's list, oldest first */
    oq_link_t by_fd;     /* in its connection's list; cleared if its fd is unknown */
    uint64_t job_id;
    int64_t req;
    int fd;
    bool delimiter;
    bool confirms; /* the wait of a dispatch */
    bool has_key;
    uint8_t key[OQ_KEY_BYTES]; /* the CURVE key it spoke with */
    size_t identity_len;
    uint8_t identity[]; /* the peer's ROUTER identity */
} s_waiter_t;

/* The waiters of one job, or of one connection. */
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
    size_t max_total, max_per_peer, max_per_key;
    oq_heap_t *deadlines; /* s_waiter_t.node */
    oq_idmap_t *jobs;     /* job id -> s_job_t */
    oq_idmap_t *conns;    /* descriptor + 1 -> s_job_t of s_waiter_t.by_fd */
    zhashx_t *peers;      /* identity in hex -> its count of waiters (as a pointer) */
    zhashx_t *keys;       /* CURVE key in hex -> its count of waiters (as a pointer) */
    size_t count;
    uint64_t closed; /* forgotten as their connection closed */
    s_end_t *ends;   /* ring of OQ_WAIT_ENDS_REMEMBERED */
    size_t ends_next;
};

oq_waiters_t *oq_waiters_new(size_t max_total, size_t max_per_peer, size_t max_per_key,
                             const oq_clock_t *clock)
{
    oq_waiters_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->clock = clock;
    self->max_total = max_total;
    self->max_per_peer = max_per_peer;
    self->max_per_key = max_per_key;
    self->deadlines = oq_heap_new();
    self->jobs = oq_idmap_new();
    self->conns = oq_idmap_new();
    self->peers = zhashx_new();
    self->keys = zhashx_new();
    self->ends = calloc(OQ_WAIT_ENDS_REMEMBERED, sizeof *self->ends);
    if (!self->deadlines || !self->jobs || !self->conns || !self->peers || !self->keys ||
        !self->ends) {
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
            if (self->conns && oq_list_linked(&w->by_fd))
                free(oq_idmap_remove(self->conns, (uint64_t)w->fd + 1));
            free(w);
        }
        oq_heap_destroy(&self->deadlines);
    }
    oq_idmap_destroy(&self->jobs);
    oq_idmap_destroy(&self->conns);
    zhashx_destroy(&self->peers);
    zhashx_destroy(&self->keys);
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

static size_t s_count_of(zhashx_t *table, const char *key)
{
    return (size_t)(uintptr_t)zhashx_lookup(table, key);
}

/* Set a count of the peers or the keys table; 0 removes it. 0, or -1 if
   memory runs out. */
static int s_count_set(zhashx_t *table, const char *key, size_t count)
{
    if (count == 0) {
        zhashx_delete(table, key);
        return 0;
    }
    if (zhashx_lookup(table, key)) {
        zhashx_update(table, key, (void *)(uintptr_t)count);
        return 0;
    }
    return zhashx_insert(table, key, (void *)(uintptr_t)count);
}

static size_t s_peer_count(const oq_waiters_t *self, const char *key)
{
    return s_count_of(self->peers, key);
}

static int s_peer_set(oq_waiters_t *self, const char *key, size_t count)
{
    return s_count_set(self->peers, key, count);
}

static void s_key_hex(const uint8_t *key, char out[S_KEY_HEX])
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < OQ_KEY_BYTES; i++) {
        out[2 * i] = digits[key[i] >> 4];
        out[2 * i + 1] = digits[key[i] & 15];
    }
    out[2 * OQ_KEY_BYTES] = 0;
}

/* Link w into the list of its connection's descriptor. 0, or -1 if
   memory runs out. */
static int s_conn_link(oq_waiters_t *self, s_waiter_t *w)
{
    s_job_t *conn = oq_idmap_get(self->conns, (uint64_t)w->fd + 1);
    if (!conn) {
        conn = calloc(1, sizeof *conn);
        if (!conn)
            return -1;
        oq_list_init(&conn->waiters);
        if (oq_idmap_put(self->conns, (uint64_t)w->fd + 1, conn) < 0) {
            free(conn);
            return -1;
        }
    }
    oq_list_push_back(&conn->waiters, &w->by_fd);
    return 0;
}

/* Unlink w from its connection's list, and free the list with its last. */
static void s_conn_unlink(oq_waiters_t *self, s_waiter_t *w)
{
    if (!oq_list_linked(&w->by_fd))
        return;
    oq_link_t *next = w->by_fd.next;
    oq_list_remove(&w->by_fd);
    oq_link_clear(&w->by_fd);
    if (next->next == next)
        free(oq_idmap_remove(self->conns, (uint64_t)w->fd + 1));
}

int oq_waiters_add(oq_waiters_t *self, uint64_t job_id, int64_t timeout_ms,
                   const oq_waiter_owner_t *owner, bool confirms, int64_t req, char *reason,
                   size_t reason_len)
{
    const void *identity = owner->identity;
    size_t identity_len = owner->identity_len;
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
    char key_hex[S_KEY_HEX] = "";
    size_t of_key = 0;
    if (owner->key) {
        s_key_hex(owner->key, key_hex);
        of_key = s_count_of(self->keys, key_hex);
        if (of_key >= self->max_per_key) {
            snprintf(reason, reason_len,
                     "this key holds %zu waits already over its connections, the limit per "
                     "key; wait for an answer first",
                     of_key);
            return -1;
        }
    }
    s_waiter_t *w = calloc(1, sizeof *w + identity_len);
    if (w)
        oq_link_clear(&w->by_fd);
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
    w->fd = owner->fd;
    if (s_peer_set(self, key, mine + 1) < 0 ||
        (owner->key && s_count_set(self->keys, key_hex, of_key + 1) < 0) ||
        (owner->fd >= 0 && s_conn_link(self, w) < 0)) {
        s_peer_set(self, key, mine); /* lowering never allocates */
        if (owner->key)
            s_count_set(self->keys, key_hex, of_key);
        oq_heap_remove(self->deadlines, &w->node);
        if (new_job)
            oq_idmap_remove(self->jobs, job_id);
        goto oom;
    }
    if (owner->key) {
        w->has_key = true;
        memcpy(w->key, owner->key, OQ_KEY_BYTES);
    }
    w->job_id = job_id;
    w->req = req;
    w->delimiter = owner->delimiter;
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

/* Answer w through fn (NULL: forget it unanswered) and free it: out of
   its job's list (and the job's entry with its last waiter), its
   connection's list, the heap, and its peer's and key's counts. */
static void s_answer(oq_waiters_t *self, s_waiter_t *w, oq_waiter_fn fn, void *ctx)
{
    oq_waiter_view_t view = {w->job_id, w->req,       w->identity, w->identity_len,
                             w->fd,     w->delimiter, w->confirms};
    if (fn)
        fn(ctx, &view);
    s_conn_unlink(self, w);
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
    if (w->has_key) {
        char key_hex[S_KEY_HEX];
        s_key_hex(w->key, key_hex);
        size_t of_key = s_count_of(self->keys, key_hex);
        s_count_set(self->keys, key_hex, of_key ? of_key - 1 : 0);
    }
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

size_t oq_waiters_drop_fd(oq_waiters_t *self, int fd)
{
    s_job_t *conn = fd >= 0 && self->count ? oq_idmap_get(self->conns, (uint64_t)fd + 1) : NULL;
    size_t n = 0;
    while (conn) {
        bool last = conn->waiters.next->next == &conn->waiters;
        s_answer(self, oq_container_of(conn->waiters.next, s_waiter_t, by_fd), NULL, NULL);
        n++;
        if (last)
            break; /* the connection's entry is freed with its last waiter */
    }
    self->closed += n;
    return n;
}

uint64_t oq_waiters_closed(const oq_waiters_t *self)
{
    return self->closed;
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

size_t oq_waiters_max_per_key(const oq_waiters_t *self)
{
    return self->max_per_key;
}

size_t oq_waiters_of_key(const oq_waiters_t *self, const uint8_t *key)
{
    char key_hex[S_KEY_HEX];
    s_key_hex(key, key_hex);
    return s_count_of(self->keys, key_hex);
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
