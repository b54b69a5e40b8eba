/*  samples.h: latency samples of one benchmark run, and their percentiles.
    Shared by onceq-bench and beanstalk-bench so both systems are summarised
    by exactly the same arithmetic. */
#ifndef ONCEQ_BENCH_SAMPLES_H
#define ONCEQ_BENCH_SAMPLES_H

#include <stddef.h>
#include <stdint.h>

typedef struct oq_samples oq_samples_t;

/* Room for at most capacity samples, or NULL if out of memory. */
oq_samples_t *oq_samples_new(size_t capacity);

/* Free and set *self_p to NULL. */
void oq_samples_destroy(oq_samples_t **self_p);

/* Record one value (microseconds); ignored once the samples are full. */
void oq_samples_add(oq_samples_t *self, int64_t value_us);

/* Number of values recorded. */
size_t oq_samples_count(const oq_samples_t *self);

/* The nearest-rank percentile (p in 0..100) of the values, 0 if none.
   Sorts the values in place the first time after an add. */
int64_t oq_samples_percentile(oq_samples_t *self, double p);

/* The median of n figures of several runs (the mean of the middle two for
   an even n), 0 if n is 0; sorts v in place. */
double oq_samples_median(double *v, size_t n);

#endif
