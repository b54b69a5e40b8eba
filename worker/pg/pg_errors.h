/*  pg_errors.h: what a failed database statement means for the job that ran
    it. PostgreSQL names every error with a SQLSTATE; this module maps it (and
    whether the connection survived, and whether the statement was COMMIT)
    to one of a few classes, and each class to what the caller does: run the
    transaction again now, retry the job later, or fail it. The table and the
    reasoning behind it are in docs/points.md. */
#ifndef ONCEQ_PG_ERRORS_H
#define ONCEQ_PG_ERRORS_H

#include <stdbool.h>

#include "onceq/proto.h"
#include "worker_limits.h"

typedef enum {
    OQ_PG_ERR_NONE = 0,
    /* Serialization failure (40001) or deadlock (40P01): the server rolled
       the transaction back and running it again is expected to succeed. The
       transaction runner does that in place. */
    OQ_PG_ERR_RETRY_TXN,
    /* The connection is gone (or never came up) and nothing was committed:
       retry the job; the next statement reconnects. */
    OQ_PG_ERR_CONNECTION,
    /* The connection was lost during COMMIT: the transaction may or may not
       have committed. Retry the job: the UNIQUE constraint makes the second
       run find the first one's row if there is one. */
    OQ_PG_ERR_UNKNOWN,
    /* The server refused for now (statement timeout, out of resources,
       shutting down), or in-place retries ran out: retry the job later. */
    OQ_PG_ERR_TRANSIENT,
    /* The statement or its data is wrong (bad value, constraint, missing
       table, a domain rule such as an unknown customer): running it again
       gives the same answer. Fail the job. */
    OQ_PG_ERR_FAIL,
} oq_pg_class_t;

/* A classified error, filled by whoever saw it. */
typedef struct {
    oq_pg_class_t cls;
    char sqlstate[6];                      /* "" when there is none (libpq's own errors) */
    char message[OQ_PG_MAX_ERROR_LEN + 1]; /* one line */
} oq_pg_error_t;

/* The class of an error. sqlstate may be NULL or "" (libpq reports a lost
   connection without one); connection_ok says the connection was still up
   after the error; in_commit says the statement was COMMIT. */
oq_pg_class_t oq_pg_errors_classify(const char *sqlstate, bool connection_ok, bool in_commit);

/* Fill error with a class, a SQLSTATE (NULL for none) and a message; the
   message is cut at OQ_PG_MAX_ERROR_LEN and its line breaks become spaces. */
void oq_pg_errors_set(oq_pg_error_t *error, oq_pg_class_t cls, const char *sqlstate,
                      const char *format, ...) __attribute__((format(printf, 4, 5)));

/* Reset error to "no error". */
void oq_pg_errors_clear(oq_pg_error_t *error);

/* The job outcome for a class: OQ_OUTCOME_FAIL for OQ_PG_ERR_FAIL,
   OQ_OUTCOME_RETRY for every other error class, OQ_OUTCOME_OK for none. */
oq_outcome_t oq_pg_errors_outcome(oq_pg_class_t cls);

/* Advice for an operator that the error itself does not give (a missing
   table: run the migrations), or NULL. Static text. */
const char *oq_pg_errors_hint(const oq_pg_error_t *error);

/* "none", "retry_txn", "connection", "unknown", "transient" or "fail". */
const char *oq_pg_errors_class_name(oq_pg_class_t cls);

#endif
