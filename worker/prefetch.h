/*  prefetch.h: how many jobs a worker with --prefetch auto holds at once.
    It keeps a moving average of the time its handlers ran and turns it
    into a limit: as many jobs as fit a small time budget of expected work
    behind the running one (OQ_WORKER_PREFETCH_BUDGET_US), between 1 and
    the cap. A worker of sub-millisecond jobs reaches the cap; one whose
    jobs run long holds 1 and takes one job at a time, as --prefetch 1.

    One average over every type, not one per type: a held job waits behind
    whatever the broker sent before it, and the broker, not the worker,
    picks the types; so what a held job can expect to wait is the run time
    of the worker's mix. A job of a type with a batch function counts as
    its share of a full batch (oq_prefetch_observe): such a worker holds a
    batch's worth whenever one call of the batch function fits the budget,
    however small the batches it ran so far. Charged by the jobs a call
    happened to take instead, a worker whose jobs are slowed down by the
    machine (many workers on few cores) would hold one or two, get batches
    of one or two, and never learn that a batch costs little more.

    The average rises fast and falls slowly, so one long job in a stream
    of short ones drops the limit at once, and it grows back one job at a
    time as short ones follow. It reads no clock:
    the caller gives it each run time. */
#ifndef ONCEQ_WORKER_PREFETCH_H
#define ONCEQ_WORKER_PREFETCH_H

#include <stdint.h>

typedef struct oq_prefetch oq_prefetch_t;

/* An estimator with no run seen yet: its limit is 1 until one is. cap is
   the most it ever allows (at least 1); budget_us the expected work the
   jobs held behind the running one may add up to. */
oq_prefetch_t *oq_prefetch_new(uint32_t cap, int64_t budget_us);

/* Let the limit grow up to cap (at least the cap it has): for a worker
   whose types take batches, set before any run. */
void oq_prefetch_raise_cap(oq_prefetch_t *self, uint32_t cap);

/* Free the estimator and set *self_p to NULL. */
void oq_prefetch_destroy(oq_prefetch_t **self_p);

/* A job ended in a call that ran call_us (negative is taken as 0): its
   handler's, or its type's batch function's with others of its type.
   batch_most is the most jobs one call of that type takes (1 without a
   batch function). What a held job of that type adds to the wait behind
   it is its share of a full call, call_us / batch_most: held jobs of a
   type with a batch function run together in the next call, so between
   them they wait about one call, not one each. Called once per job of the
   call. Returns the new limit: lower at once when the runs grow long, at
   most one higher than before when they grow short. */
uint32_t oq_prefetch_observe(oq_prefetch_t *self, int64_t call_us, uint32_t batch_most);

/* Jobs the worker may hold now, the running one included: 1 ... cap. */
uint32_t oq_prefetch_limit(const oq_prefetch_t *self);

/* The moving average of what a held job adds to the wait behind it (each
   job's share of its call, as observed), in µs (0 before any run). */
int64_t oq_prefetch_average_us(const oq_prefetch_t *self);

#endif
