/*  metrics.h: the broker's numbers in the Prometheus text exposition format
    (version 0.0.4), rendered from the same engine, journal, auth, message
    and wait counters the "stats" reply carries, plus the latency histograms. The
    broker's loop renders; metrics_http.c only serves what it was given
    (docs/operations.md, "Metrics", lists every metric). */
#ifndef ONCEQ_METRICS_H
#define ONCEQ_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "histogram.h"
#include "stats.h"

/* Everything one rendering reads. Borrowed for the call. */
typedef struct {
    oq_engine_t *engine;
    const oq_stats_journal_t *journal;
    const oq_stats_auth_t *auth;
    const oq_stats_messages_t *messages;
    const oq_stats_waits_t *waits;
    const oq_stats_replies_t *replies;
    const oq_histogram_t *fsync_latency; /* NULL with --no-journal */
    int64_t uptime_ms;
} oq_metrics_source_t;

/* The text of every metric, NUL-terminated, with its length in *len.
   Caller frees. NULL if memory runs out. */
char *oq_metrics_render(const oq_metrics_source_t *source, size_t *len);

#endif
