/*  onceq/retention.h: deleting guard rows once no duplicate can need them
    (part of libonceq-effects, pkg-config onceq-effects).

    A guard row (a point grant, a once-guard row, a finished shipment
    request) is what makes the second run of a job do nothing. It must live
    as long as a second run can still arrive; after that it only takes
    space. This module deletes the rows of one table whose time column is
    older than a window, in batches of OQ_PRUNE_BATCH_ROWS rows, each batch
    its own short transaction, so a large prune never holds many locks at
    once. Choosing the window (never shorter than the time a duplicate can
    still arrive) is the caller's job: `onceq db prune` asks the broker for
    that floor (docs/operations.md, "Retention").

    Table and column names come from code, never from input: they must be
    plain lower-case SQL identifiers and are refused otherwise. */
#ifndef ONCEQ_RETENTION_H
#define ONCEQ_RETENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "onceq/effects.h"

/* Rows deleted per statement (and per transaction). */
#define OQ_PRUNE_BATCH_ROWS 10000

/* A skip reason, in bytes. */
#define OQ_PRUNE_MAX_REASON_LEN 256

/* Which rows of a table a prune deletes. */
typedef struct {
    const char *table; /* e.g. "point_grants" */
    /* When a row was written: the first of these columns the table has is
       used (NULL-terminated; most tables name one). */
    const char *const *time_columns;
    /* Only rows whose filter column holds one of values (NULL-terminated);
       filter NULL: every row old enough. */
    const char *filter;
    const char *const *values;
    /* A table that does not exist (another app's, not installed here) is
       skipped, not an error. */
    bool optional;
} oq_prune_table_t;

typedef struct {
    bool skipped;                             /* nothing was looked at: see reason */
    char reason[OQ_PRUNE_MAX_REASON_LEN + 1]; /* why it was skipped */
    const char *time_column;                  /* the column used (borrowed from the spec) */
    uint64_t rows;                            /* deleted (or, with dry_run, that would be) */
} oq_prune_result_t;

/* The once-guard's table (onceq_once, by created_at). Static. */
const oq_prune_table_t *oq_prune_once_table(void);

/* Delete the rows of table whose time column is older than now() -
   older_than_s on the database's clock (the cutoff is taken once, at the
   start), or with dry_run only count them. 0 with *result (skipped set for
   an optional table that is not there, or one without the columns named),
   or -1 with error (OQ_PG_ERR_FAIL for a name that is not a plain
   identifier, a required table that is missing, or older_than_s < 1).
   Batches deleted before an error stay deleted: *result counts them. */
int oq_prune(oq_pg_t *pg, const oq_prune_table_t *table, int64_t older_than_s, bool dry_run,
             oq_prune_result_t *result, oq_pg_error_t *error);

#endif
