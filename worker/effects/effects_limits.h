/*  effects_limits.h: the timers and limits of libonceq-effects that its
    users do not see (the ones they do are in onceq/effects.h), in one place
    and with their units in the names. */
#ifndef ONCEQ_EFFECTS_LIMITS_H
#define ONCEQ_EFFECTS_LIMITS_H

/* Longest wait for a connection to come up when no job deadline is nearer. */
#define OQ_PG_CONNECT_TIMEOUT_MS 10000

/* A connection attempt that got no answer in time is kept and waited on
   again by the next connect (pg.c, s_connect) up to this long after it
   began; then a new one replaces it (the server may have moved). */
#define OQ_PG_CONNECT_KEEP_MS 60000

/* The TCP defaults of every connection (a conninfo may set its own): a
   keepalive after 10 s idle, then every 5 s, 3 unanswered end it; data
   sent and not acknowledged for 10 s ends it too. So a host that is gone
   or cut off is found out in seconds, an idle connection included. None
   of this helps against a server that is stopped or hung while its
   kernel still answers for it: the client's wait for each answer does
   (pg.c). */
#define OQ_PG_KEEPALIVE_IDLE_S     10
#define OQ_PG_KEEPALIVE_INTERVAL_S 5
#define OQ_PG_KEEPALIVE_COUNT      3
#define OQ_PG_TCP_USER_TIMEOUT_MS  10000

/* A statement must end before its job's timeout, so that the handler
   reports retry itself instead of the watchdog ending the process. The
   server's statement_timeout is the job's timeout less a margin of
   timeout / OQ_PG_MARGIN_DIVISOR, capped at OQ_PG_MARGIN_MAX_MS; the client
   waits for an answer half a margin longer than that (see pg.c). */
#define OQ_PG_MARGIN_DIVISOR 10
#define OQ_PG_MARGIN_MAX_MS  1000

/* Migrations: files in one directory, and the size of one file. */
#define OQ_MIGRATE_MAX_FILES      1000
#define OQ_MIGRATE_MAX_FILE_BYTES (1024 * 1024)
#define OQ_MIGRATE_MAX_VERSION    9999 /* four digits: NNNN_name.sql */

#endif
