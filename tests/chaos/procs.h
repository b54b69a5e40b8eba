/*  procs.h: the processes of a chaos run that the harness starts itself, on
    loopback, in the run directory: a PostgreSQL cluster (deploy/pg.sh, on a
    free port), the broker (journal in RUN/broker-data, --fsync always), the
    mock carrier (onceq-carrier, on a port of its choosing) and a worker
    supervisor with N processes (ONCEQ_TEST_HOOKS=1, --carrier-url ours,
    then every --worker-arg; the rest of the environment is inherited). It signals only
    processes it started or their supervisor's children, checked by parent
    pid before each signal, and stops everything it started when destroyed,
    stopped workers included. A guardian process stops the cluster should
    the harness die without cleaning up (a SIGKILL, a test timeout).

    Where things are found: the binaries next to onceq-chaos (or --bin-dir);
    pg.sh from --pg-script, else $ONCEQ_PG_SCRIPT, else share/onceq/pg.sh
    next to the binaries (installed, or the build tree's link to the
    checkout's deploy/pg.sh; onceq/paths.h). */
#ifndef ONCEQ_CHAOS_PROCS_H
#define ONCEQ_CHAOS_PROCS_H

#include <stdbool.h>
#include <sys/types.h>

#include "chaos_config.h"
#include "curve.h"

typedef struct oq_procs oq_procs_t;

/* Paths, two free loopback ports for the broker, and nothing started yet.
   The broker and the workers get the keys of curve (borrowed; plaintext
   and --insecure when it is off). NULL (with the reason on stderr) if a
   binary or pg.sh is missing. */
oq_procs_t *oq_procs_new(const oq_chaos_config_t *config, const oq_curve_t *curve,
                         const char *run_dir);

/* Stop whatever is still running (workers, broker, cluster), reap it, and
   set *self_p to NULL. */
void oq_procs_destroy(oq_procs_t **self_p);

/* The broker's endpoints. Borrowed. */
const char *oq_procs_front(const oq_procs_t *self);
const char *oq_procs_back(const oq_procs_t *self);

/* The worker log every worker process appends to. Borrowed. */
const char *oq_procs_worker_log(const oq_procs_t *self);

/* True if this onceq-broker can keep its jobs across a restart (its --help
   lists --data-dir). Without that a broker kill would lose jobs by design. */
bool oq_procs_broker_durable(const oq_procs_t *self);

/* Create, start and migrate the cluster (blocks until pg.sh is done). 0,
   or -1 with the reason on stderr. The conninfo is then
   oq_procs_database_url. */
int oq_procs_start_pg(oq_procs_t *self);

/* The conninfo of our cluster; NULL before oq_procs_start_pg. Borrowed. */
const char *oq_procs_database_url(const oq_procs_t *self);

/* Begin `pg.sh restart DIR fast|immediate` in the background. 0, or -1 if
   one is already running or it cannot start. */
int oq_procs_restart_pg(oq_procs_t *self, bool immediate);

/* True while a restart begun above is running. *status (if not NULL) gets
   the exit status of one that has just ended (-1 if it did not end well). */
bool oq_procs_pg_restarting(oq_procs_t *self, int *status);

/* Start the broker (returns at once; ping it to know it is up). 0 or -1. */
int oq_procs_start_broker(oq_procs_t *self);

/* SIGKILL the broker and reap it. 0, or -1 if it was not running. */
int oq_procs_kill_broker(oq_procs_t *self);

/* True if the broker we started has exited without being killed by us;
 *status gets its wait status. It is reaped and counts as not running. */
bool oq_procs_broker_died(oq_procs_t *self, int *status);

/* Start the carrier with the run's seed and its faults all through the
   run, and wait (bounded) for the port it prints. 0, or -1 with the reason
   on stderr. */
int oq_procs_start_carrier(oq_procs_t *self);

/* The carrier's base URL ("http://127.0.0.1:PORT"); NULL before it
   started. Borrowed. */
const char *oq_procs_carrier_url(const oq_procs_t *self);

/* SIGSTOP or SIGCONT the carrier (a stopped one is resumed by destroy).
   0, or -1 if it is not running. */
int oq_procs_signal_carrier(oq_procs_t *self, int sig);

/* True if the carrier has exited without being stopped by us; it is
   reaped. */
bool oq_procs_carrier_died(oq_procs_t *self);

/* Start the worker supervisor (with --carrier-url once the carrier runs).
   0 or -1. */
int oq_procs_start_workers(oq_procs_t *self);

/* True if the supervisor has exited (it should not, until we stop it). */
bool oq_procs_workers_died(oq_procs_t *self);

/* Stop the pool gracefully (SIGCONT to stopped workers, SIGTERM to the
   supervisor; SIGKILL after OQ_CHAOS_STOP_MS). 0, or -1 if it had to be
   killed. */
int oq_procs_stop_workers(oq_procs_t *self);

/* True if pid is a worker process of our supervisor, now. */
bool oq_procs_owns_worker(const oq_procs_t *self, pid_t pid);

/* Send sig to one of our worker processes, after checking that it is ours.
   SIGSTOP and SIGCONT are remembered so that destroy never leaves a process
   stopped. 0, or -1 if pid is not ours or kill failed. */
int oq_procs_signal_worker(oq_procs_t *self, pid_t pid, int sig);

#endif
