/*  histogram.h: a fixed-bucket latency histogram, embedded in the structure
    whose events it times (a queue's dispatch-to-done, the journal's fsync).
    Observing is a short scan over at most OQ_HISTOGRAM_MAX_BUCKETS bounds and
    never allocates, so it is cheap enough for the broker's loop; the buckets
    are rendered for Prometheus by metrics.c. */
#ifndef ONCEQ_HISTOGRAM_H
#define ONCEQ_HISTOGRAM_H

#include <stddef.h>
#include <stdint.h>

#define OQ_HISTOGRAM_MAX_BUCKETS 16

typedef struct {
    const int64_t *bounds_us; /* upper bounds, ascending, in microseconds (static) */
    size_t bounds;            /* how many; +Inf is implied */
    uint64_t counts[OQ_HISTOGRAM_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last: +Inf */
    uint64_t count;                                /* observations */
    uint64_t sum_us;                               /* their sum */
} oq_histogram_t;

/* Bounds of dispatch-to-done latencies (1 ms to 10 min) and of fsyncs
   (50 us to 2.5 s). */
extern const int64_t oq_histogram_latency_us[];
extern const size_t oq_histogram_latency_count;
extern const int64_t oq_histogram_fsync_us[];
extern const size_t oq_histogram_fsync_count;

/* An empty histogram over bounds_us (borrowed, static, at most
   OQ_HISTOGRAM_MAX_BUCKETS of them). */
void oq_histogram_init(oq_histogram_t *self, const int64_t *bounds_us, size_t bounds);

/* Count one observation of value_us (negative counts as 0). */
void oq_histogram_observe(oq_histogram_t *self, int64_t value_us);

#endif
