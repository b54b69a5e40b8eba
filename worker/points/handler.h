/*  handler.h: the grant_points job handler and its per-process state (the
    effects handle: one database connection and a transaction runner, and
    the ledger over it). The handler is thin: it decodes {order_id,
    customer_id, points}, calls oq_grant_order_points and turns the result
    into the job's outcome:

      granted            ok, applied
      already granted    ok, already_applied
      unknown customer,  fail, with the reason
      conflict, bad payload
      database error     retry or fail, by its class (onceq/effects.h)

    Its batch function applies several grant_points jobs in one
    transaction and reports each as above (oq_points_grant_batch).

    It is written against the public SDK only (onceq/worker.h,
    onceq/effects.h, onceq/effects_worker.h), as a user's handler would be.
    Create the state in the process that runs the jobs (after fork): it
    connects on the first job, on the thread that runs handlers (the worker's
    main thread), and only that thread uses
    it. The decode and report steps are public so that a test build can
    wrap the same handler (tests/support/points_hooks.h). */
#ifndef ONCEQ_POINTS_HANDLER_H
#define ONCEQ_POINTS_HANDLER_H

#include <stdint.h>

#include "onceq/effects.h"
#include "onceq/worker.h"
#include "points/grant.h"
#include "points/ledger.h"

/* The job type of the handler. */
#define OQ_POINTS_JOB_TYPE "grant_points"

typedef struct {
    const char *database_url;     /* libpq conninfo or URI; NULL or "" = libpq's defaults */
    oq_txn_isolation_t isolation; /* of the grant transactions */
} oq_points_config_t;

/* A grant_points payload, checked. */
typedef struct {
    int64_t order_id;
    int64_t customer_id;
    int64_t points;
} oq_points_args_t;

typedef struct oq_points_handler oq_points_handler_t;

/* State over PostgreSQL (config->database_url is copied). Does not connect.
   With config NULL the database is the worker's (--database, --isolation:
   oq_worker_settings), read on the first job in the process that runs it,
   so the state may be made before oq_worker_main forks its workers. */
oq_points_handler_t *oq_points_handler_new(const oq_points_config_t *config);

/* State over a ledger and runner the caller keeps (unit tests: the
   in-memory ledger). Both are borrowed. */
oq_points_handler_t *oq_points_handler_new_on(oq_ledger_t *ledger, oq_txn_t *txn);

/* Close the connection if open, free, and set *self_p to NULL. Call it
   after the worker loop has returned. */
void oq_points_handler_destroy(oq_points_handler_t **self_p);

/* Register grant_points with self as its state; self must outlive the
   registry's use. 0 or -1. */
int oq_points_handler_register(oq_points_handler_t *self, oq_registry_t *registry);

/* The batch function of grant_points (oq_batch_fn; state is an
   oq_points_handler_t): up to OQ_WORKER_MAX_BATCH jobs in one transaction
   (oq_grant_order_points_batch), each reported exactly as the handler
   would report it alone. oq_points_handler_register declares it
   (oq_registry_set_batch). */
void oq_points_grant_batch(const oq_job_t *const *jobs, size_t count, void *state,
                           oq_report_t *reports);

/* Declare that the handler registered under type runs on this state's
   database (oq_effects_worker_needs): the worker pauses while it is
   unavailable and releases its connection when idle. oq_points_handler_register
   does it for grant_points. 0, or -1 if type has no handler. */
int oq_points_handler_needs_database(oq_points_handler_t *self, oq_registry_t *registry,
                                     const char *type);

/* The handler's ledger and runner (borrowed). */
oq_ledger_t *oq_points_handler_ledger(oq_points_handler_t *self);
oq_txn_t *oq_points_handler_txn(oq_points_handler_t *self);

/* Open the database state if it is still to come from the worker's
   settings, and bound the database work of the job about to run by its
   timeout. 0, or -1 after reporting fail. */
int oq_points_handler_begin_job(oq_points_handler_t *self, const oq_job_t *job,
                                oq_report_t *report);

/* Decode and check a grant_points payload. 0, or -1 after reporting fail
   with a reason that names the field. */
int oq_points_decode(const oq_job_t *job, oq_points_args_t *args, oq_report_t *report);

/* Report the outcome of a grant (see the table above). */
void oq_points_report(const oq_job_t *job, const oq_points_args_t *args,
                      const oq_grant_result_t *result, oq_report_t *report);

#endif
