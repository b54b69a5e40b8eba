/*  histogram.c: fixed-bucket histograms. The bounds are Prometheus' usual
    steps (1, 2.5, 5 per decade), wide enough that the p99 of a healthy and
    of a sick broker fall in different buckets. */
#include "histogram.h"

#include <assert.h>
#include <string.h>

const int64_t oq_histogram_latency_us[] = {
    1000,    5000,    10000,   25000,    50000,    100000,   250000,    500000,
    1000000, 2500000, 5000000, 10000000, 30000000, 60000000, 300000000, 600000000,
};
const size_t oq_histogram_latency_count =
    sizeof oq_histogram_latency_us / sizeof oq_histogram_latency_us[0];

const int64_t oq_histogram_fsync_us[] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 1000000, 2500000,
};
const size_t oq_histogram_fsync_count =
    sizeof oq_histogram_fsync_us / sizeof oq_histogram_fsync_us[0];

void oq_histogram_init(oq_histogram_t *self, const int64_t *bounds_us, size_t bounds)
{
    assert(bounds <= OQ_HISTOGRAM_MAX_BUCKETS);
    memset(self, 0, sizeof *self);
    self->bounds_us = bounds_us;
    self->bounds = bounds;
}

void oq_histogram_observe(oq_histogram_t *self, int64_t value_us)
{
    if (value_us < 0)
        value_us = 0;
    size_t i = 0;
    while (i < self->bounds && value_us > self->bounds_us[i])
        i++;
    self->counts[i]++;
    self->count++;
    self->sum_us += (uint64_t)value_us;
}
