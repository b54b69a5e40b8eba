/*  handler.h: the grant_points job handler and its per-process state (one
    database connection, the ledger over it, a transaction runner). The
    handler is thin: it decodes {order_id, customer_id, points}, calls
    oq_grant_order_points and turns the result into the job's outcome:

      granted            ok, applied
      already granted    ok, already_applied
      unknown customer,  fail, with the reason
      conflict, bad payload
      database error     retry or fail, by its class (pg/pg_errors.h)

    Create the state in the process that runs the jobs (after fork): it
    connects on the first job, on the job thread, and only that thread uses
    it. With test hooks on (ONCEQ_TEST_HOOKS=1) the handler also honours the
    test_* payload keys and registers grant_points_unguarded; see
    worker/README.md. */
#ifndef ONCEQ_POINTS_HANDLER_H
#define ONCEQ_POINTS_HANDLER_H

#include <stdbool.h>

#include "onceq/worker.h"
#include "pg/txn.h"
#include "points/ledger.h"

/* The job type of the guarded handler, and of the deliberately unguarded one
   that exists only with test hooks on. */
#define OQ_POINTS_JOB_TYPE           "grant_points"
#define OQ_POINTS_UNGUARDED_JOB_TYPE "grant_points_unguarded"

typedef struct {
    const char *database_url;     /* libpq conninfo or URI; NULL or "" = libpq's defaults */
    oq_txn_isolation_t isolation; /* of the grant transactions */
    bool test_hooks;              /* honour test_* payload keys; register the unguarded type */
} oq_points_config_t;

typedef struct oq_points_handler oq_points_handler_t;

/* State over PostgreSQL (config->database_url is copied). Does not connect. */
oq_points_handler_t *oq_points_handler_new(const oq_points_config_t *config);

/* State over a ledger and runner the caller keeps (unit tests: the
   in-memory ledger). Both are borrowed. */
oq_points_handler_t *oq_points_handler_new_on(oq_ledger_t *ledger, oq_txn_t *txn, bool test_hooks);

/* Close the connection if open, free, and set *self_p to NULL. Call it
   after the job thread has stopped. */
void oq_points_handler_destroy(oq_points_handler_t **self_p);

/* Register grant_points (and with test hooks grant_points_unguarded) with
   self as their state; self must outlive the registry's use. 0 or -1. */
int oq_points_handler_register(oq_points_handler_t *self, oq_registry_t *registry);

#endif
