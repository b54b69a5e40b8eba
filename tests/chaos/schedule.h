/*  schedule.h: the seeded fault schedule of a chaos run. Each fault is
    placed at a dispatch position (fault at 1234: when the 1234th dispatch
    goes out), so a seed gives the same faults against the same orders on
    every machine, whatever its speed. Which process a fault hits is picked
    when it happens, from what is running then (faults.c).

    Two kinds are carried by an order rather than done to a process: the
    order dispatched at a commit-kill position asks its worker to pause
    after COMMIT (the harness then kills it there), and the one at a
    self-kill position asks its worker to SIGKILL itself after COMMIT.

    The carrier's kinds (a stall, a burst of 503s, a burst of replies too
    late) are drawn after every other kind, so a seed places the points'
    faults where it did before they existed. */
#ifndef ONCEQ_CHAOS_SCHEDULE_H
#define ONCEQ_CHAOS_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "chaos_config.h"

typedef enum {
    OQ_FAULT_KILL = 0,       /* SIGKILL a worker that holds a job */
    OQ_FAULT_COMMIT_KILL,    /* SIGKILL a worker between COMMIT and ack (order hook) */
    OQ_FAULT_SELF_KILL,      /* the worker SIGKILLs itself after COMMIT (order hook) */
    OQ_FAULT_PAUSE,          /* SIGSTOP a worker past retry_after, then SIGCONT */
    OQ_FAULT_BROKER_KILL,    /* SIGKILL the broker, start it again on its journal */
    OQ_FAULT_DB_FAST,        /* restart PostgreSQL, fast mode */
    OQ_FAULT_DB_IMMEDIATE,   /* restart PostgreSQL, immediate mode (crash recovery) */
    OQ_FAULT_BURST,          /* malformed frames to both broker sockets */
    OQ_FAULT_CARRIER_STALL,  /* SIGSTOP the carrier past the handler's call, then SIGCONT */
    OQ_FAULT_CARRIER_ERRORS, /* the carrier answers every POST 503 for a while */
    OQ_FAULT_CARRIER_DELAY,  /* every carrier reply comes after the handler gave up */
    OQ_FAULT_KIND_COUNT_
} oq_fault_kind_t;

typedef struct {
    oq_fault_kind_t kind;
    uint32_t at;  /* dispatch position (0-based) at which it is due */
    uint32_t seq; /* its number among the faults of its kind, from 0 */
} oq_fault_t;

typedef struct oq_schedule oq_schedule_t;

/* The schedule of config->seed for config->jobs dispatches. Never NULL. */
oq_schedule_t *oq_schedule_new(const oq_chaos_config_t *config);

/* Free and set *self_p to NULL. */
void oq_schedule_destroy(oq_schedule_t **self_p);

/* The faults, sorted by position. Borrowed. */
size_t oq_schedule_count(const oq_schedule_t *self);
const oq_fault_t *oq_schedule_get(const oq_schedule_t *self, size_t index);

/* The order hook at dispatch position `at`: OQ_FAULT_COMMIT_KILL,
   OQ_FAULT_SELF_KILL, or OQ_FAULT_KIND_COUNT_ for none. */
oq_fault_kind_t oq_schedule_hook_at(const oq_schedule_t *self, uint32_t at);

/* How many faults of a kind are scheduled. */
uint32_t oq_schedule_count_of(const oq_schedule_t *self, oq_fault_kind_t kind);

/* A short name of a kind ("worker kill", ...). Static. */
const char *oq_schedule_kind_name(oq_fault_kind_t kind);

/* Print a summary (counts and the first positions of each kind) to out,
   and every fault to path if path is not NULL. 0, or -1 if path failed. */
int oq_schedule_print(const oq_schedule_t *self, FILE *out, const char *path);

#endif
