/*  samples.c: latency samples and nearest-rank percentiles. */
#include "samples.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

struct oq_samples {
    int64_t *values; /* microseconds, in arrival order until sorted */
    size_t count;    /* values recorded */
    size_t capacity; /* room in values */
    bool sorted;     /* values are in ascending order */
};

oq_samples_t *oq_samples_new(size_t capacity)
{
    oq_samples_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->values = calloc(capacity ? capacity : 1, sizeof *self->values);
    if (!self->values) {
        free(self);
        return NULL;
    }
    self->capacity = capacity;
    return self;
}

void oq_samples_destroy(oq_samples_t **self_p)
{
    assert(self_p);
    oq_samples_t *self = *self_p;
    if (!self)
        return;
    free(self->values);
    free(self);
    *self_p = NULL;
}

void oq_samples_add(oq_samples_t *self, int64_t value_us)
{
    if (self->count == self->capacity)
        return;
    self->values[self->count++] = value_us;
    self->sorted = false;
}

size_t oq_samples_count(const oq_samples_t *self)
{
    return self->count;
}

static int s_compare(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t oq_samples_percentile(oq_samples_t *self, double p)
{
    assert(p >= 0.0 && p <= 100.0);
    if (self->count == 0)
        return 0;
    if (!self->sorted) {
        qsort(self->values, self->count, sizeof *self->values, s_compare);
        self->sorted = true;
    }
    /* Nearest rank: the smallest value with at least p% of values <= it. */
    size_t rank = (size_t)ceil(p / 100.0 * (double)self->count);
    return self->values[rank > 0 ? rank - 1 : 0];
}

static int s_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double oq_samples_median(double *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, s_compare_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
