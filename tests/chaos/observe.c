/*  observe.c: stats and failed replies are msgpack maps whose layout
    docs/protocol.md gives; fields are looked up by name and a missing one
    reads as zero, so a broker that adds fields (or lacks the journal map)
    is read all the same. */
#include "observe.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/client.h"
#include "onceq/proto.h"

#define S_ERROR_LEN (OQ_MAX_ERROR_LEN + 1)

struct oq_observe {
    oq_client_t *client;      /* to the broker's front socket */
    char *queue;              /* the run's queue, owned */
    char *job_type;           /* the run's job type, owned */
    char *ship_queue;         /* the shipments' queue, owned; NULL: none */
    char *ship_type;          /* the shipments' job type, owned; NULL: none */
    uint64_t last_uptime_ms;  /* of the last reading: a smaller one is a restart */
    oq_observe_totals_t base; /* sums of the lifetimes before the current one */
    oq_observe_totals_t last; /* the current lifetime's last reading */
    bool seen;                /* a reading was taken */
    char error[S_ERROR_LEN];  /* the last failure, for oq_observe_error */
};

oq_observe_t *oq_observe_new(const char *front, const oq_curve_t *curve, const char *queue,
                             const char *job_type, const char *ship_queue, const char *ship_type)
{
    assert(front && curve && queue && job_type);
    oq_observe_t *self = calloc(1, sizeof *self);
    assert(self);
    self->client = oq_client_new(front);
    self->queue = strdup(queue);
    self->job_type = strdup(job_type);
    self->ship_queue = ship_queue ? strdup(ship_queue) : NULL;
    self->ship_type = ship_type ? strdup(ship_type) : NULL;
    if (!self->client || !self->queue || !self->job_type ||
        oq_curve_client(curve, self->client) < 0) {
        oq_observe_destroy(&self);
        return NULL;
    }
    return self;
}

void oq_observe_destroy(oq_observe_t **self_p)
{
    assert(self_p);
    oq_observe_t *self = *self_p;
    if (!self)
        return;
    oq_client_destroy(&self->client);
    free(self->queue);
    free(self->job_type);
    free(self->ship_queue);
    free(self->ship_type);
    free(self);
    *self_p = NULL;
}

const char *oq_observe_error(const oq_observe_t *self)
{
    return self->error;
}

int oq_observe_ping(oq_observe_t *self, int timeout_ms)
{
    return oq_client_ping(self->client, timeout_ms);
}

/* The run's queue and the shipments' queue. */
static void s_read_queues(const oq_observe_t *self, const msgpack_object *root,
                          oq_observe_stats_t *s)
{
    s->leased_all = oq_statsr_sum(root, "queues", "leased");
    const msgpack_object *ship = oq_statsr_entry(root, "queues", self->ship_queue);
    s->ship_ready = oq_statsr_u64(ship, "ready");
    s->ship_delayed = oq_statsr_u64(ship, "delayed");
    s->ship_leased = oq_statsr_u64(ship, "leased");
    s->ship_failed = oq_statsr_u64(ship, "failed");
    s->ship_review = oq_statsr_u64(ship, "review");
    s->ship_done = oq_statsr_u64(ship, "done");
    const msgpack_object *q = oq_statsr_entry(root, "queues", self->queue);
    s->ready = oq_statsr_u64(q, "ready");
    s->delayed = oq_statsr_u64(q, "delayed");
    s->leased = oq_statsr_u64(q, "leased");
    s->failed = oq_statsr_u64(q, "failed");
    s->dispatched = oq_statsr_u64(q, "dispatched");
    s->done = oq_statsr_u64(q, "done");
    s->retried = oq_statsr_u64(q, "retried");
    s->redelivered = oq_statsr_u64(q, "redelivered");
    s->late_acks = oq_statsr_u64(q, "late_acks");
    s->ignored_acks = oq_statsr_u64(q, "ignored_acks");
    s->duplicates = oq_statsr_u64(q, "duplicates");
    s->retry_after_s = oq_statsr_double(q, "retry_after");
    s->timeout_s = oq_statsr_double(q, "timeout");
}

static void s_read_rest(const oq_observe_t *self, const msgpack_object *root, oq_observe_stats_t *s)
{
    const msgpack_object *ship = oq_statsr_entry(root, "types", self->ship_type);
    s->ship_applied = oq_statsr_u64(ship, "applied");
    s->ship_duplicates = oq_statsr_u64(ship, "duplicates");
    const msgpack_object *t = oq_statsr_entry(root, "types", self->job_type);
    s->type_done = oq_statsr_u64(t, "done");
    s->type_applied = oq_statsr_u64(t, "applied");
    s->type_duplicates = oq_statsr_u64(t, "duplicates");
    s->type_failed = oq_statsr_u64(t, "failed");
    oq_statsr_workers(root, s->worker, &s->workers, OQ_CHAOS_MAX_WORKERS);
    s->uptime_ms = oq_statsr_u64(oq_proto_map_get(root, "broker"), "uptime_ms");
    const msgpack_object *enabled = oq_proto_map_get(oq_proto_map_get(root, "journal"), "enabled");
    s->journal = enabled && enabled->type == MSGPACK_OBJECT_BOOLEAN && enabled->via.boolean;
}

static void s_add(oq_observe_totals_t *into, const oq_observe_totals_t *from)
{
    into->dispatched += from->dispatched;
    into->done += from->done;
    into->retried += from->retried;
    into->redelivered += from->redelivered;
    into->late_acks += from->late_acks;
    into->ignored_acks += from->ignored_acks;
    into->duplicates += from->duplicates;
    into->type_applied += from->type_applied;
    into->type_duplicates += from->type_duplicates;
    into->type_failed += from->type_failed;
    into->ship_applied += from->ship_applied;
    into->ship_duplicates += from->ship_duplicates;
}

/* A smaller uptime than the last reading's is a new broker lifetime: the
   last reading of the old one goes into the base. */
static void s_fold(oq_observe_t *self, const oq_observe_stats_t *s)
{
    if (!self->seen) {
        self->seen = true;
        self->base.lifetimes = 1;
    } else if (s->uptime_ms < self->last_uptime_ms) {
        s_add(&self->base, &self->last);
        self->base.lifetimes++;
    }
    self->last_uptime_ms = s->uptime_ms;
    self->last = (oq_observe_totals_t){
        .dispatched = s->dispatched,
        .done = s->done,
        .retried = s->retried,
        .redelivered = s->redelivered,
        .late_acks = s->late_acks,
        .ignored_acks = s->ignored_acks,
        .duplicates = s->duplicates,
        .type_applied = s->type_applied,
        .type_duplicates = s->type_duplicates,
        .type_failed = s->type_failed,
        .ship_applied = s->ship_applied,
        .ship_duplicates = s->ship_duplicates,
    };
}

int oq_observe_stats(oq_observe_t *self, oq_observe_stats_t *stats)
{
    assert(stats);
    memset(stats, 0, sizeof *stats);
    oq_msg_t reply;
    if (oq_client_stats_page(self->client, 0, OQ_MAX_STATS_WORKERS, OQ_CHAOS_CALL_MS, &reply) < 0) {
        snprintf(self->error, sizeof self->error, "%s", oq_client_error(self->client));
        return -1;
    }
    s_read_queues(self, &reply.root, stats);
    s_read_rest(self, &reply.root, stats);
    /* The workers past the first page, up to what the run reads. */
    uint64_t next; /* a cursor is a worker's place in registration order: never 0 */
    while (stats->workers < OQ_CHAOS_MAX_WORKERS &&
           (next = oq_statsr_u64(&reply.root, "workers_next")) > 0) {
        oq_proto_msg_release(&reply);
        if (oq_client_stats_page(self->client, next, OQ_MAX_STATS_WORKERS, OQ_CHAOS_CALL_MS,
                                 &reply) < 0) {
            snprintf(self->error, sizeof self->error, "%s", oq_client_error(self->client));
            return -1;
        }
        oq_statsr_workers(&reply.root, stats->worker, &stats->workers, OQ_CHAOS_MAX_WORKERS);
    }
    oq_proto_msg_release(&reply);
    s_fold(self, stats);
    return 0;
}

void oq_observe_totals(const oq_observe_t *self, oq_observe_totals_t *totals)
{
    *totals = self->base;
    s_add(totals, &self->last);
}

static void s_copy_str(const msgpack_object *map, const char *key, char *out, size_t out_len)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    if (o && o->type == MSGPACK_OBJECT_STR)
        oq_str_copy((oq_str_t){o->via.str.ptr, o->via.str.size}, out, out_len);
    else
        out[0] = 0;
}

static int64_t s_order_of(const msgpack_object *job)
{
    const msgpack_object *order = oq_proto_map_get(oq_proto_map_get(job, "payload"), "order_id");
    return order && order->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (int64_t)order->via.u64 : 0;
}

int oq_observe_failed(oq_observe_t *self, const char *queue, oq_observe_failed_fn fn, void *ctx,
                      uint64_t *total, uint64_t *listed)
{
    oq_msg_t reply;
    if (oq_client_failed(self->client, queue, OQ_MAX_FAILED_LIST, OQ_CHAOS_CALL_MS, &reply) < 0) {
        snprintf(self->error, sizeof self->error, "%s", oq_client_error(self->client));
        return -1;
    }
    *total = oq_statsr_u64(&reply.root, "total");
    *listed = 0;
    const msgpack_object *jobs = oq_statsr_array(&reply.root, "jobs");
    for (uint32_t i = 0; jobs && i < jobs->via.array.size; i++) {
        const msgpack_object *job = &jobs->via.array.ptr[i];
        char type[OQ_MAX_NAME_LEN + 1], error[S_ERROR_LEN];
        s_copy_str(job, "type", type, sizeof type);
        s_copy_str(job, "error", error, sizeof error);
        fn(ctx, oq_statsr_u64(job, "id"), s_order_of(job), type, error);
        (*listed)++;
    }
    oq_proto_msg_release(&reply);
    return 0;
}

int oq_observe_review(oq_observe_t *self, const char *queue, oq_observe_review_fn fn, void *ctx,
                      uint64_t *total, uint64_t *listed)
{
    *total = 0;
    *listed = 0;
    int64_t after_at = 0;
    uint64_t after = 0;
    /* Page by page along the cursor, at most as many pages as the first
       reply's total needs, so that a store that grows meanwhile ends it. */
    uint64_t pages = 1;
    for (uint64_t page = 0; page < pages; page++) {
        oq_msg_t reply;
        if (oq_client_review_page(self->client, queue, after_at, after, OQ_MAX_FAILED_LIST,
                                  OQ_CHAOS_CALL_MS, &reply) < 0) {
            snprintf(self->error, sizeof self->error, "%s", oq_client_error(self->client));
            return -1;
        }
        if (page == 0) {
            *total = oq_statsr_u64(&reply.root, "total");
            pages = *total / OQ_MAX_FAILED_LIST + 1;
        }
        const msgpack_object *jobs = oq_statsr_array(&reply.root, "jobs");
        for (uint32_t i = 0; jobs && i < jobs->via.array.size; i++) {
            const msgpack_object *job = &jobs->via.array.ptr[i];
            char reason[S_ERROR_LEN];
            s_copy_str(job, "reason", reason, sizeof reason);
            fn(ctx, oq_statsr_u64(job, "id"), s_order_of(job), reason);
            (*listed)++;
        }
        bool more = oq_proto_map_get(&reply.root, "next") != NULL;
        after = oq_statsr_u64(&reply.root, "next");
        after_at = (int64_t)oq_statsr_u64(&reply.root, "next_at");
        oq_proto_msg_release(&reply);
        if (!more)
            break;
    }
    return 0;
}
