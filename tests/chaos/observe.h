/*  observe.h: what the broker says, read through its front socket with the
    onceq client: ping, the stats of the run's queues (the grants' and the
    shipments'), job types and workers, the failed store and the review
    store. The broker's counters start from zero whenever it
    starts, so this module also keeps their sums over every broker lifetime
    it has seen (a restart shows as a smaller uptime). A lifetime's counts
    after its last reading are lost with it: those sums are lower bounds. */
#ifndef ONCEQ_CHAOS_OBSERVE_H
#define ONCEQ_CHAOS_OBSERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chaos_limits.h"
#include "curve.h"
#include "stats_reader.h"

/* One stats reply, reduced to what the harness uses. */
typedef struct {
    /* the run's queue (zero until the queue exists) */
    uint64_t ready, delayed, leased, failed, dispatched, done, retried, redelivered, late_acks,
        ignored_acks, duplicates;
    double retry_after_s, timeout_s;
    uint64_t leased_all; /* over every queue */
    /* the run's job type */
    uint64_t type_done, type_applied, type_duplicates, type_failed;
    /* the shipments' queue and job type (zero without shipments) */
    uint64_t ship_ready, ship_delayed, ship_leased, ship_failed, ship_review, ship_done;
    uint64_t ship_applied, ship_duplicates;
    uint64_t uptime_ms;
    bool journal; /* the broker reports a journal and it is enabled */
    size_t workers;
    oq_statsr_worker_t worker[OQ_CHAOS_MAX_WORKERS];
} oq_observe_stats_t;

/* Counters summed over the broker's lifetimes (lower bounds, see above). */
typedef struct {
    uint64_t dispatched, done, retried, redelivered, late_acks, ignored_acks, duplicates;
    uint64_t type_applied, type_duplicates, type_failed;
    uint64_t ship_applied, ship_duplicates; /* request_shipment's ok outcomes */
    uint32_t lifetimes;                     /* broker lifetimes seen */
} oq_observe_totals_t;

/* One job of the failed store: its order (0 if the payload has none). */
typedef void (*oq_observe_failed_fn)(void *ctx, uint64_t job_id, int64_t order_id, const char *type,
                                     const char *error);

typedef struct oq_observe oq_observe_t;

/* One job of the review store: its order (0 if the payload has none) and
   the handler's reason. */
typedef void (*oq_observe_review_fn)(void *ctx, uint64_t job_id, int64_t order_id,
                                     const char *reason);

/* A client of the broker at front, with curve's front key, reading queue
   and job_type, and ship_queue and ship_type (NULL: no shipments); all
   copied. */
oq_observe_t *oq_observe_new(const char *front, const oq_curve_t *curve, const char *queue,
                             const char *job_type, const char *ship_queue, const char *ship_type);

/* Close and set *self_p to NULL. */
void oq_observe_destroy(oq_observe_t **self_p);

/* 0 if the broker answered a ping within timeout_ms, else -1. */
int oq_observe_ping(oq_observe_t *self, int timeout_ms);

/* Read the stats into *stats and fold them into the totals. 0 or -1. */
int oq_observe_stats(oq_observe_t *self, oq_observe_stats_t *stats);

/* The totals so far. */
void oq_observe_totals(const oq_observe_t *self, oq_observe_totals_t *totals);

/* Call fn for each failed job of queue (at most the broker's listing
   limit, oldest first). *total gets how many there are, *listed how many
   were seen. 0 or -1. */
int oq_observe_failed(oq_observe_t *self, const char *queue, oq_observe_failed_fn fn, void *ctx,
                      uint64_t *total, uint64_t *listed);

/* Call fn for every job of queue waiting in the review store, page by
   page. *total gets how many the broker counts, *listed how many were
   seen. 0 or -1. */
int oq_observe_review(oq_observe_t *self, const char *queue, oq_observe_review_fn fn, void *ctx,
                      uint64_t *total, uint64_t *listed);

/* The last failure's text. Borrowed. */
const char *oq_observe_error(const oq_observe_t *self);

#endif
