/*  prefetch.h: how many jobs a worker with --prefetch auto holds at once.
    It keeps a moving average of the time its handlers ran and turns it
    into a limit: as many jobs as fit a small time budget of expected work
    behind the running one (OQ_WORKER_PREFETCH_BUDGET_US), between 1 and
    the cap. A worker of sub-millisecond jobs reaches the cap; one whose
    jobs run long holds 1 and takes one job at a time, as --prefetch 1.

    One average over every type, not one per type: a held job waits behind
    whatever the broker sent before it, and the broker, not the worker,
    picks the types; so what a held job can expect to wait is the run time
    of the worker's mix. The average rises fast and falls slowly, so one
    long job in a stream of short ones drops the limit at once, and it
    grows back one job at a time as short ones follow. It reads no clock:
    the caller gives it each run time. */
#ifndef ONCEQ_WORKER_PREFETCH_H
#define ONCEQ_WORKER_PREFETCH_H

#include <stdint.h>

typedef struct oq_prefetch oq_prefetch_t;

/* An estimator with no run seen yet: its limit is 1 until one is. cap is
   the most it ever allows (at least 1); budget_us the expected work the
   jobs held behind the running one may add up to. */
oq_prefetch_t *oq_prefetch_new(uint32_t cap, int64_t budget_us);

/* Free the estimator and set *self_p to NULL. */
void oq_prefetch_destroy(oq_prefetch_t **self_p);

/* A handler ran run_us (negative is taken as 0). Returns the new limit:
   lower at once when the runs grow long, at most one higher than before
   when they grow short. */
uint32_t oq_prefetch_observe(oq_prefetch_t *self, int64_t run_us);

/* Jobs the worker may hold now, the running one included: 1 ... cap. */
uint32_t oq_prefetch_limit(const oq_prefetch_t *self);

/* The moving average of the run times, in µs (0 before any run). */
int64_t oq_prefetch_average_us(const oq_prefetch_t *self);

#endif
