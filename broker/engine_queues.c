/*  engine_queues.c: queues, job types, and the ready lists with their
    routing lanes.

    Routing lanes. A ready job sits on the list of its (queue, type) lane
    only, in its queue's order (priority high to low, FIFO within), and
    each queue keeps the list of its lanes that hold ready jobs; u.r.seq
    records a job's place in its queue's order, so that the heads of two
    lanes can be compared (engine_pump.c) and the queue's order is the
    merge of its lanes (oq_eng_ready_each). One link per ready job, not a
    second one for a queue-wide list, is 16 bytes less in every job. */
#include "engine_queues.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/log.h"

int oq_eng_check_rule(const oq_engine_t *self, const char *queue, int64_t timeout_ms,
                      int64_t retry_after_ms, char *reason, size_t reason_len)
{
    if (retry_after_ms - timeout_ms < self->config.margin_ms &&
        retry_after_ms <= self->config.margin_ms) {
        /* No timeout above 0 fits: only a longer lease can help. */
        snprintf(reason, reason_len,
                 "timeout %.3g s is not shorter than queue \"%s\" retry_after %.3g s by the "
                 "margin of %.3g s, and no timeout is: raise retry_after to at least %.3g s "
                 "(the timeout plus the margin)",
                 timeout_ms / 1000.0, queue, retry_after_ms / 1000.0,
                 self->config.margin_ms / 1000.0, (timeout_ms + self->config.margin_ms) / 1000.0);
        return -1;
    }
    if (retry_after_ms - timeout_ms < self->config.margin_ms) {
        snprintf(reason, reason_len,
                 "timeout %.3g s is not shorter than queue \"%s\" retry_after %.3g s by the "
                 "margin of %.3g s: a handler still running when its lease ends would overlap "
                 "its own redelivery (use a timeout of at most %.3g s)",
                 timeout_ms / 1000.0, queue, retry_after_ms / 1000.0,
                 self->config.margin_ms / 1000.0,
                 (retry_after_ms - self->config.margin_ms) / 1000.0);
        return -1;
    }
    return 0;
}

int oq_engine_check_defaults(const oq_engine_t *self, char *reason, size_t reason_len)
{
    return oq_eng_check_rule(self, "*", self->config.timeout_ms, self->config.retry_after_ms,
                             reason, reason_len);
}

oq_eng_queue_t *oq_eng_queue_get(oq_engine_t *self, const char *name, bool create)
{
    oq_eng_queue_t *q = zhashx_lookup(self->queues_by_name, name);
    if (q || !create || self->queue_count >= OQ_MAX_QUEUES)
        return q;
    q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->name = strdup(name);
    if (!q->name) {
        free(q);
        return NULL;
    }
    oq_histogram_init(&q->latency, oq_histogram_latency_us, oq_histogram_latency_count);
    q->retry_after_ms = self->config.retry_after_ms;
    q->timeout_ms = self->config.timeout_ms;
    q->index = (uint32_t)self->queue_count;
    oq_list_init(&q->lanes);
    oq_list_init(&q->failed);
    oq_list_init(&q->review);
    oq_link_clear(&q->active);
    zhashx_insert(self->queues_by_name, name, q);
    self->queues[self->queue_count++] = q;
    return q;
}

int oq_engine_queue_config(oq_engine_t *self, const char *name, int64_t retry_after_ms,
                           int64_t timeout_ms, char *reason, size_t reason_len)
{
    if (!oq_proto_name_valid(name, strlen(name))) {
        snprintf(reason, reason_len, "invalid queue name \"%s\"", name);
        return -1;
    }
    if (timeout_ms <= 0)
        timeout_ms = self->config.timeout_ms;
    if (oq_eng_check_rule(self, name, timeout_ms, retry_after_ms, reason, reason_len) < 0)
        return -1;
    oq_eng_queue_t *q = oq_eng_queue_get(self, name, true);
    if (!q) {
        snprintf(reason, reason_len, "cannot create queue \"%s\"", name);
        return -1;
    }
    q->retry_after_ms = retry_after_ms;
    q->timeout_ms = timeout_ms;
    return 0;
}

/* Insert into the ready list: behind every job of the same or higher
   priority (FIFO), or, for a job given back after its lease ended, in front
   of its priority band. Scans from the end the list is normally touched at,
   so equal priorities cost O(1). */
static int32_t s_priority_at(const oq_link_t *at, size_t offset)
{
    return ((const oq_eng_job_t *)((const char *)at - offset))->priority;
}

static void s_band_insert(oq_link_t *list, oq_link_t *node, size_t offset, int32_t priority,
                          bool in_front)
{
    if (in_front) {
        oq_link_t *at = list;
        while (at->next != list && s_priority_at(at->next, offset) > priority)
            at = at->next;
        oq_list_insert_after(at, node);
    } else {
        oq_link_t *at = list->prev;
        while (at != list && s_priority_at(at, offset) < priority)
            at = at->prev;
        oq_list_insert_after(at, node);
    }
}

static uint64_t s_lane_key(const oq_eng_queue_t *q, const oq_eng_type_t *t)
{
    return ((uint64_t)(q->index + 1) << 32) | t->index;
}

int oq_eng_lane_make(oq_engine_t *self, oq_eng_queue_t *q, oq_eng_type_t *t)
{
    if (oq_idmap_get(self->lanes, s_lane_key(q, t)))
        return 0;
    oq_eng_lane_t *lane = calloc(1, sizeof *lane);
    if (!lane)
        return -1;
    lane->queue = q;
    lane->type = t;
    oq_list_init(&lane->ready);
    oq_link_clear(&lane->active);
    if (oq_idmap_put(self->lanes, s_lane_key(q, t), lane) < 0) {
        free(lane);
        return -1;
    }
    oq_list_push_back(&self->lanes_all, &lane->all);
    return 0;
}

static oq_eng_lane_t *s_lane_of(const oq_engine_t *self, const oq_eng_job_t *job)
{
    oq_eng_lane_t *lane = oq_idmap_get(
        self->lanes, s_lane_key(oq_eng_job_queue(self, job), oq_eng_job_type(self, job)));
    assert(lane && "a job's lane is made with the job");
    return lane;
}

void oq_eng_ready_insert(oq_engine_t *self, oq_eng_queue_t *q, oq_eng_job_t *job, bool in_front)
{
    oq_eng_lane_t *lane = s_lane_of(self, job);
    assert(lane->queue == q);
    if (oq_list_empty(&lane->ready))
        oq_list_push_back(&q->lanes, &lane->active);
    s_band_insert(&lane->ready, &job->link, offsetof(oq_eng_job_t, link), job->priority, in_front);
    job->u.r.seq = in_front ? --self->seq_front : ++self->seq_back;
    oq_eng_job_type(self, job)->ready++;
    self->ready_epoch++;
}

void oq_eng_ready_remove(oq_engine_t *self, oq_eng_job_t *job)
{
    oq_eng_lane_t *lane = s_lane_of(self, job);
    oq_list_remove(&job->link);
    oq_eng_job_type(self, job)->ready--;
    if (oq_list_empty(&lane->ready))
        oq_list_remove(&lane->active);
}

/* The queue's order is a k-way merge of its lanes, each already in that
   order: a cursor per lane, in a binary min-heap by the job each points
   at. O(n log k) for n ready jobs in k lanes. */
typedef struct {
    oq_link_t *at;        /* the lane's next job */
    const oq_link_t *end; /* the lane's list head */
} s_cursor_t;

static bool s_cursor_before(const s_cursor_t *a, const s_cursor_t *b)
{
    return oq_eng_ready_before(oq_container_of(a->at, oq_eng_job_t, link),
                               oq_container_of(b->at, oq_eng_job_t, link));
}

static void s_sift_down(s_cursor_t *heap, size_t n, size_t i)
{
    for (;;) {
        size_t best = i, left = 2 * i + 1, right = 2 * i + 2;
        if (left < n && s_cursor_before(&heap[left], &heap[best]))
            best = left;
        if (right < n && s_cursor_before(&heap[right], &heap[best]))
            best = right;
        if (best == i)
            return;
        s_cursor_t swap = heap[i];
        heap[i] = heap[best];
        heap[best] = swap;
        i = best;
    }
}

void oq_eng_ready_each(const oq_engine_t *self, const oq_eng_queue_t *q,
                       void (*fn)(void *ctx, oq_eng_job_t *job), void *ctx)
{
    (void)self;
    size_t n = 0;
    for (const oq_link_t *l = q->lanes.next; l != &q->lanes; l = l->next)
        n++;
    s_cursor_t *heap = n > 1 ? malloc(n * sizeof *heap) : NULL;
    if (!heap) {
        if (n > 1)
            oq_warn("queue %s: no memory to merge its %zu lanes: its ready jobs are walked one "
                    "type after the other",
                    q->name, n);
        for (const oq_link_t *l = q->lanes.next; l != &q->lanes; l = l->next) {
            oq_eng_lane_t *lane = oq_container_of(l, oq_eng_lane_t, active);
            for (oq_link_t *j = lane->ready.next; j != &lane->ready; j = j->next)
                fn(ctx, oq_container_of(j, oq_eng_job_t, link));
        }
        return;
    }
    size_t i = 0;
    for (const oq_link_t *l = q->lanes.next; l != &q->lanes; l = l->next) {
        oq_eng_lane_t *lane = oq_container_of(l, oq_eng_lane_t, active);
        heap[i++] = (s_cursor_t){lane->ready.next, &lane->ready};
    }
    for (size_t j = n / 2; j-- > 0;)
        s_sift_down(heap, n, j);
    while (n > 0) {
        oq_link_t *at = heap[0].at;
        heap[0].at = at->next;
        if (heap[0].at == heap[0].end)
            heap[0] = heap[--n];
        s_sift_down(heap, n, 0);
        fn(ctx, oq_container_of(at, oq_eng_job_t, link));
    }
    free(heap);
}

oq_eng_type_t *oq_eng_type_get(oq_engine_t *self, oq_str_t name_str)
{
    char name[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(name_str, name, sizeof name);
    oq_eng_type_t *type = zhashx_lookup(self->types, name);
    if (type || self->type_count >= OQ_MAX_TYPES)
        return type;
    type = calloc(1, sizeof *type);
    if (!type)
        return NULL;
    type->name = strdup(name);
    if (!type->name) {
        free(type);
        return NULL;
    }
    zhashx_insert(self->types, name, type);
    type->index = (uint32_t)self->type_count;
    self->type_list[self->type_count++] = type;
    return type;
}
