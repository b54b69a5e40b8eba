/*  pg.h: one PostgreSQL connection, the way a worker process uses it: opened
    on first use, dropped when lost and opened again on the next use, and
    bounded in time by the current job's timeout (the server's
    statement_timeout ends a statement before the job's watchdog would; the
    client's own wait ends soon after, should the server not answer at
    all). Statements go with bound parameters only; the single exception,
    oq_pg_exec_script, runs migration files from disk.

    Every failure comes back as an oq_pg_error_t classified by pg_errors.h.
    Not thread-safe: one connection belongs to one thread (a worker's job
    thread, or the onceq tool). */
#ifndef ONCEQ_PG_H
#define ONCEQ_PG_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "pg/pg_errors.h"

typedef struct oq_pg oq_pg_t;

/* A connection to be, for conninfo: a libpq keyword string or URI (copied;
   NULL or "" means libpq's defaults, PGHOST and friends). application_name
   is what pg_stat_activity shows unless conninfo names one (copied). Does
   not connect. */
oq_pg_t *oq_pg_new(const char *conninfo, const char *application_name);

/* Close the connection if open, free, and set *self_p to NULL. */
void oq_pg_destroy(oq_pg_t **self_p);

/* Bound the statements that follow by a job timeout of timeout_ms: the
   server's statement_timeout becomes timeout_ms less a margin (set on the
   session when it changes, outside transactions), and the client waits for
   any one answer at most half a margin longer than that, then drops the
   connection. timeout_ms 0 removes both bounds (statement_timeout 0). */
void oq_pg_set_timeout(oq_pg_t *self, int64_t timeout_ms);

/* Connect now if not connected. 0, or -1 with error (OQ_PG_ERR_CONNECTION). */
int oq_pg_connect(oq_pg_t *self, oq_pg_error_t *error);

/* Run one statement; params are text values ($1 .. $nparams; NULL is SQL
   NULL). With result non-NULL, 0 gives the result (caller PQclear()s it);
   -1 leaves *result NULL and fills error. Connects first if needed. */
int oq_pg_exec(oq_pg_t *self, const char *sql, int nparams, const char *const *params,
               PGresult **result, oq_pg_error_t *error);

/* Run a script of several statements without parameters (simple query
   protocol). Only for trusted SQL from files the operator installed
   (migrations), never for anything built from data. 0 or -1 with error. */
int oq_pg_exec_script(oq_pg_t *self, const char *sql, oq_pg_error_t *error);

/* BEGIN with the given statement ("BEGIN ISOLATION LEVEL ..."), COMMIT,
   ROLLBACK. oq_pg_commit fails unless the server answers COMMIT (an aborted
   transaction answers ROLLBACK), and classifies a connection lost meanwhile
   as OQ_PG_ERR_UNKNOWN. oq_pg_rollback ignores errors: after it the session
   is out of the transaction or the connection is gone. */
int oq_pg_begin(oq_pg_t *self, const char *begin_sql, oq_pg_error_t *error);
int oq_pg_commit(oq_pg_t *self, oq_pg_error_t *error);
void oq_pg_rollback(oq_pg_t *self);

/* True if a connection is open (it may still turn out to be dead). */
bool oq_pg_connected(const oq_pg_t *self);

/* The server process of the open connection (for tests that end it), or 0. */
int oq_pg_backend_pid(const oq_pg_t *self);

#endif
