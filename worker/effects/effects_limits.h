/*  effects_limits.h: the timers and limits of libonceq-effects that its
    users do not see (the ones they do are in onceq/effects.h), in one place
    and with their units in the names. */
#ifndef ONCEQ_EFFECTS_LIMITS_H
#define ONCEQ_EFFECTS_LIMITS_H

/* Longest wait for a connection to come up when no job deadline is nearer. */
#define OQ_PG_CONNECT_TIMEOUT_MS 10000

/* A statement must end before its job's timeout, so that the handler
   reports retry itself instead of the watchdog ending the process. The
   server's statement_timeout is the job's timeout less a margin of
   timeout / OQ_PG_MARGIN_DIVISOR, capped at OQ_PG_MARGIN_MAX_MS; the client
   waits for an answer half a margin longer than that (see pg.c). */
#define OQ_PG_MARGIN_DIVISOR 10
#define OQ_PG_MARGIN_MAX_MS  1000

/* A poll() that returns this much later than it asked to means the process
   did not run meanwhile (SIGSTOP, a suspended VM, a starved machine): that
   time is not time the server failed to answer. The worker runtime uses the
   same bound for its own deadlines. */
#define OQ_PG_STALL_MS 50

/* Migrations: files in one directory, and the size of one file. */
#define OQ_MIGRATE_MAX_FILES      1000
#define OQ_MIGRATE_MAX_FILE_BYTES (1024 * 1024)
#define OQ_MIGRATE_MAX_VERSION    9999 /* four digits: NNNN_name.sql */

#endif
