/*  faults.h: the injectors. Each fault of the schedule falls due when the
    dispatcher reaches its position and is then carried out as soon as it
    can be: a worker kill or pause waits (bounded) for a worker that holds a
    job, so that it interrupts one; a broker kill, a burst or a database
    restart waits for the one before it to be over. What happens in the
    background (a stopped worker's SIGCONT, the restart of a killed broker,
    a database restart running) is driven by oq_faults_tick too.

    Faults the run cannot do are skipped with the reason: process faults
    in attach mode (not our processes), database restarts on a database we
    did not start, broker kills against a broker without a journal (a
    restart would lose its jobs by design, and the verdict must still hold
    without them). Order-hook kills (COMMIT window, self-kill) are done when
    the worker log shows the order's worker at that point; one that never
    comes is counted as missed.

    The carrier's faults: a stall (SIGSTOP, then SIGCONT: connections wait
    in its backlog, calls time out after the request went out) and bursts
    of 503s or of replies later than the job's timeout, switched on and off
    through its PUT /faults so that it keeps its shipments. One carrier
    fault at a time, each for config->carrier_fault_ms. */
#ifndef ONCEQ_CHAOS_FAULTS_H
#define ONCEQ_CHAOS_FAULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "carrier_client.h"
#include "chaos_config.h"
#include "load.h"
#include "observe.h"
#include "procs.h"
#include "schedule.h"
#include "verdict.h"
#include "worklog.h"

/* One process killed while (we hope) running a job. */
typedef struct {
    oq_fault_kind_t kind; /* KILL, COMMIT_KILL or SELF_KILL */
    pid_t pid;
    int64_t t_ms;    /* Unix ms (oq_worklog_now_ms clock) */
    uint64_t job_id; /* known for the hook kinds; 0: find it in the log */
} oq_kill_t;

typedef struct {
    uint32_t injected[OQ_FAULT_KIND_COUNT_];
    uint32_t skipped[OQ_FAULT_KIND_COUNT_]; /* could not be done; see the notes */
    uint32_t missed[OQ_FAULT_KIND_COUNT_];  /* hook orders whose moment never came */
    uint32_t burst_frames;                  /* malformed messages sent in all */
    uint32_t burst_answers;                 /* ... and answered by the broker */
    uint32_t strangers;                     /* with CURVE: pings from peers without a key */
    uint32_t stranger_answers;              /* ... answered (a violation) */
} oq_faults_counts_t;

typedef struct oq_faults oq_faults_t;

/* Injectors for schedule. procs is NULL in attach mode, carrier NULL in a
   run without shipments. Violations seen
   while injecting (the broker stopped answering after a burst, exited on
   its own, did not come back) and notes on skipped faults go to verdict.
   Everything is borrowed and must outlive this. */
oq_faults_t *oq_faults_new(const oq_chaos_config_t *config, const oq_schedule_t *schedule,
                           oq_procs_t *procs, oq_observe_t *observe, const oq_load_t *load,
                           oq_verdict_t *verdict, const char *front, const char *back,
                           const oq_curve_t *curve, oq_carrier_client_t *carrier);

/* Free and set *self_p to NULL (resuming no process: oq_faults_close). */
void oq_faults_destroy(oq_faults_t **self_p);

/* Start what is due now that `sent` dispatches have gone out, and move the
   background along. now_ms is monotonic. -1 if the run cannot go on (the
   broker did not come back), else 0. */
int oq_faults_tick(oq_faults_t *self, int64_t now_ms, uint32_t sent);

/* The worker log's event callback (oq_worklog_fn): kill a commit-window
   order's process, record a self-kill. ctx is the oq_faults_t. */
void oq_faults_on_log(void *ctx, const oq_worklog_event_t *event);

/* True while a scheduled fault is not yet done or something it started is
   still going on (a stopped worker, a broker coming back, a restarting
   database). Hook orders do not count: they may fire until the end. */
bool oq_faults_busy(const oq_faults_t *self);

/* True unless we killed the broker and it is not answering again yet. */
bool oq_faults_broker_up(const oq_faults_t *self);

/* The end of the run: resume stopped workers, skip what is still waiting
   and count hook orders that never fired as missed. 0, or -1 if the broker
   or the database is not back (tick until oq_faults_busy is false first). */
int oq_faults_close(oq_faults_t *self);

/* The counts, and the kills (borrowed; valid until destroy). */
void oq_faults_counts(const oq_faults_t *self, oq_faults_counts_t *counts);
size_t oq_faults_kills(const oq_faults_t *self, const oq_kill_t **kills);

#endif
