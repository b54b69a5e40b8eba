/*  txn.h: the transaction runner. It runs a body between BEGIN (at a chosen
    isolation level) and COMMIT, rolls back when the body or COMMIT fails,
    and runs the whole transaction again, in place, when the server asked for
    that (serialization failure, deadlock), up to OQ_TXN_MAX_RETRIES times
    with a jittered pause. Other errors end the run and are returned for the
    caller to turn into a job outcome.

    The database is reached through a small table of functions (begin,
    commit, rollback) so that unit tests run the same runner over an
    in-memory ledger; oq_txn_pg_ops() is the PostgreSQL one. */
#ifndef ONCEQ_TXN_H
#define ONCEQ_TXN_H

#include <stdint.h>

#include "pg/pg_errors.h"

typedef enum {
    OQ_TXN_READ_COMMITTED,
    OQ_TXN_REPEATABLE_READ,
    OQ_TXN_SERIALIZABLE,
} oq_txn_isolation_t;

/* The seam: how to open, commit and roll back a transaction on db. begin
   and commit return 0 or -1 with a classified error; rollback never fails
   (afterwards db is out of the transaction, or its connection is gone). */
typedef struct {
    int (*begin)(void *db, oq_txn_isolation_t isolation, oq_pg_error_t *error);
    int (*commit)(void *db, oq_pg_error_t *error);
    void (*rollback)(void *db);
} oq_txn_ops_t;

/* The work inside the transaction. Returns 0 to commit, or -1 with error
   filled to roll back (error->cls OQ_PG_ERR_RETRY_TXN asks for a re-run).
   It may run more than once per oq_txn_run, so it must start from its
   inputs every time, not from what an earlier run left in ctx. */
typedef int (*oq_txn_body_fn)(void *ctx, oq_pg_error_t *error);

/* Sleep ms milliseconds between re-runs; replaceable for tests. */
typedef void (*oq_txn_sleep_fn)(void *ctx, uint32_t ms);

typedef struct oq_txn oq_txn_t;

/* A runner over db (borrowed) through ops (borrowed, static). */
oq_txn_t *oq_txn_new(const oq_txn_ops_t *ops, void *db, oq_txn_isolation_t isolation);

/* Free the runner and set *self_p to NULL. */
void oq_txn_destroy(oq_txn_t **self_p);

/* The PostgreSQL ops: db is an oq_pg_t. */
const oq_txn_ops_t *oq_txn_pg_ops(void);

/* Replace the sleep between re-runs (tests record it instead of waiting). */
void oq_txn_set_sleep(oq_txn_t *self, oq_txn_sleep_fn fn, void *ctx);

/* Run body in a transaction. 0 if it committed; -1 with error otherwise. A
   serialization failure or deadlock that persists through every re-run is
   returned as OQ_PG_ERR_TRANSIENT: retry the job later. */
int oq_txn_run(oq_txn_t *self, oq_txn_body_fn body, void *ctx, oq_pg_error_t *error);

/* How many times the last oq_txn_run began the transaction (1: no re-run). */
uint32_t oq_txn_attempts(const oq_txn_t *self);

/* Parse "read-committed", "repeatable-read" or "serializable". 0 or -1. */
int oq_txn_isolation_parse(const char *text, oq_txn_isolation_t *out);

/* The name oq_txn_isolation_parse takes. */
const char *oq_txn_isolation_name(oq_txn_isolation_t isolation);

#endif
