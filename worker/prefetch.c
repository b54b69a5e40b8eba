/*  prefetch.c: the --prefetch auto estimator (see prefetch.h).

    The average moves by half the distance towards a run longer than it,
    and by an eighth towards a shorter one. So one run of 1 s after a
    stream of 50 µs runs lifts the average to 0.5 s and the limit to 1 at
    once; about 50 short runs bring it back down. Erring towards the long
    side is the point: holding too few costs a round trip per job, holding
    too many makes short jobs wait behind a long one (Celery's prefetch).

    The limit is 1 plus the held jobs whose expected work fits the budget:
    1 + budget / average, within 1 ... cap. It falls to that at once and
    rises by at most one per run, so a worker starts (and restarts after a
    long job) one job at a time, and reaches the cap after a few short
    runs, not on the evidence of one. */
#include "prefetch.h"

#include <assert.h>
#include <stdlib.h>

/* How far the average moves towards a run: 1/RISE of the distance when
   the run is longer, 1/FALL when it is shorter. */
#define S_RISE 2
#define S_FALL 8

struct oq_prefetch {
    uint32_t cap;      /* the most the limit may be */
    double budget_us;  /* expected work the held jobs may add up to */
    double average_us; /* the moving average of the runs; < 0 before any */
    uint32_t limit;    /* 1 ... cap */
};

oq_prefetch_t *oq_prefetch_new(uint32_t cap, int64_t budget_us)
{
    assert(cap >= 1);
    assert(budget_us >= 0);
    oq_prefetch_t *self = calloc(1, sizeof *self);
    assert(self);
    self->cap = cap;
    self->budget_us = (double)budget_us;
    self->average_us = -1;
    self->limit = 1;
    return self;
}

void oq_prefetch_raise_cap(oq_prefetch_t *self, uint32_t cap)
{
    assert(self);
    if (cap > self->cap)
        self->cap = cap;
}

void oq_prefetch_destroy(oq_prefetch_t **self_p)
{
    assert(self_p);
    free(*self_p);
    *self_p = NULL;
}

/* What the average allows: 1 + the held jobs whose work fits the budget. */
static uint32_t s_fit(const oq_prefetch_t *self)
{
    if (self->average_us <= 0)
        return self->cap;
    double held = self->budget_us / self->average_us;
    if (held >= (double)(self->cap - 1))
        return self->cap;
    return 1 + (uint32_t)held;
}

uint32_t oq_prefetch_observe(oq_prefetch_t *self, int64_t call_us, uint32_t batch_most)
{
    assert(self);
    assert(batch_most >= 1);
    double run = call_us > 0 ? (double)call_us / batch_most : 0;
    if (self->average_us < 0)
        self->average_us = run;
    else if (run > self->average_us)
        self->average_us += (run - self->average_us) / S_RISE;
    else
        self->average_us += (run - self->average_us) / S_FALL;
    uint32_t fit = s_fit(self);
    if (fit < self->limit)
        self->limit = fit;
    else if (fit > self->limit)
        self->limit++;
    return self->limit;
}

uint32_t oq_prefetch_limit(const oq_prefetch_t *self)
{
    assert(self);
    return self->limit;
}

int64_t oq_prefetch_average_us(const oq_prefetch_t *self)
{
    assert(self);
    return self->average_us < 0 ? 0 : (int64_t)self->average_us;
}
