/*  worker_limits.h: the timers and limits only onceq-worker uses (and, for
    the database part, the onceq tool, which links the same onceq_points
    code), in one place and with their units in the names. The ones the
    protocol or other parts share (reconnect backoff, exit statuses, the first
    restart delay) live in onceq/limits.h. */
#ifndef ONCEQ_WORKER_LIMITS_H
#define ONCEQ_WORKER_LIMITS_H

/* Handlers one registry holds. A worker registers a handful; the bound only
   keeps a runaway registration loop from eating memory. */
#define OQ_WORKER_MAX_HANDLERS 1024

/* How long a stopping worker keeps trying to deliver its last messages (the
   final ack, disconnect) before it exits anyway. */
#define OQ_WORKER_LINGER_MS 1000

/* Between two turns of the worker loop, this much time beyond what it asked
   poll to wait means the process did not run (SIGSTOP, a suspended VM, a
   starved machine). That time is neither silence from the broker nor time
   the handler spent running, so deadlines move on by it. */
#define OQ_WORKER_STALL_MS 50

/* Broker messages read per loop turn, so a flood cannot starve the job
   thread's report or a signal. */
#define OQ_WORKER_BATCH_MSGS 64

/* Supervisor: a worker that lived at least this long before it died gets the
   first restart delay again; one that died sooner doubles it ... */
#define OQ_SUPERVISOR_STABLE_MS 1000
/* ... up to this. */
#define OQ_SUPERVISOR_RESTART_MAX_MS 5000

/* Supervisor: how long workers get to finish their jobs after SIGTERM before
   they are killed. A worker's own watchdog ends a job at its timeout (60 s by
   default), so this is that plus room to ack, and below systemd's default
   stop timeout of 90 s. */
#define OQ_SUPERVISOR_STOP_MS 75000

/* ---- PostgreSQL and the points domain (worker/pg, worker/points; the onceq
   tool uses them too, through onceq_points) ---- */

/* Longest wait for a connection to come up when no job deadline is nearer. */
#define OQ_PG_CONNECT_TIMEOUT_MS 10000

/* A statement must end before its job's timeout, so that the handler
   reports retry itself instead of the watchdog ending the process. The
   server's statement_timeout is the job's timeout less a margin of
   timeout / OQ_PG_MARGIN_DIVISOR, capped at OQ_PG_MARGIN_MAX_MS; the client
   waits for an answer half a margin longer than that (see pg.c). */
#define OQ_PG_MARGIN_DIVISOR 10
#define OQ_PG_MARGIN_MAX_MS  1000

/* Error text kept from a failed statement. */
#define OQ_PG_MAX_ERROR_LEN 512

/* A transaction that hits a serialization failure or a deadlock is run again
   in place up to this many times, after a jittered pause that starts at
   OQ_TXN_BACKOFF_BASE_MS and doubles up to OQ_TXN_BACKOFF_MAX_MS. */
#define OQ_TXN_MAX_RETRIES     4
#define OQ_TXN_BACKOFF_BASE_MS 10
#define OQ_TXN_BACKOFF_MAX_MS  200

/* Migrations: files in one directory, and the size of one file. */
#define OQ_MIGRATE_MAX_FILES      1000
#define OQ_MIGRATE_MAX_FILE_BYTES (1024 * 1024)
#define OQ_MIGRATE_MAX_VERSION    9999 /* four digits: NNNN_name.sql */

/* Points granted by one order: a payload beyond this is a producer bug. */
#define OQ_MAX_POINTS 1000000

/* How long the onceq tool's grant, customer and balance commands wait for
   the database. */
#define OQ_CLI_DB_TIMEOUT_MS 30000

#endif
