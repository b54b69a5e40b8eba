/*  handler.c: the grant_points job handler.

    The handler decides nothing about the effect itself: the use case
    (grant.c) and the database do. What it owns is the translation at both
    ends: a payload into checked arguments, and a result into an outcome,
    with an error text that names the field, the customer or the database
    class involved. It uses the public SDK only, like any handler. */
#include "points/handler.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>

#include "onceq/effects_worker.h"
#include "onceq/log.h"
#include "points/ledger_pg.h"
#include "points/points_limits.h"

#define S_APPLICATION_NAME "onceq-worker"

struct oq_points_handler {
    bool from_settings;    /* open effects from the worker's settings on the first job */
    oq_effects_t *effects; /* owned; NULL when the ledger is borrowed or not open yet */
    oq_ledger_t *ledger;   /* owned when effects is set */
    oq_txn_t *txn;         /* the effects handle's, or borrowed */
};

/* ---- lifecycle -------------------------------------------------------- */

/* The handle of a config is this state's own; the worker's settings' is the
   process's shared one (oq_effects_shared): every handler of the process
   on that database, request_shipment's too, uses the same connection. */
static void s_open(oq_points_handler_t *self, const char *database_url,
                   oq_txn_isolation_t isolation, bool shared)
{
    self->effects = shared ? oq_effects_shared(database_url, isolation, S_APPLICATION_NAME)
                           : oq_effects_new(database_url, isolation, S_APPLICATION_NAME);
    self->ledger = oq_ledger_pg_new(oq_effects_pg(self->effects));
    self->txn = oq_effects_txn(self->effects);
}

oq_points_handler_t *oq_points_handler_new(const oq_points_config_t *config)
{
    oq_points_handler_t *self = calloc(1, sizeof *self);
    assert(self);
    if (config)
        s_open(self, config->database_url, config->isolation, false);
    else
        self->from_settings = true;
    return self;
}

oq_points_handler_t *oq_points_handler_new_on(oq_ledger_t *ledger, oq_txn_t *txn)
{
    assert(ledger && txn);
    oq_points_handler_t *self = calloc(1, sizeof *self);
    assert(self);
    self->ledger = ledger;
    self->txn = txn;
    return self;
}

void oq_points_handler_destroy(oq_points_handler_t **self_p)
{
    assert(self_p);
    oq_points_handler_t *self = *self_p;
    if (!self)
        return;
    if (self->effects) {
        oq_ledger_destroy(&self->ledger);
        oq_effects_destroy(&self->effects);
    }
    free(self);
    *self_p = NULL;
}

oq_ledger_t *oq_points_handler_ledger(oq_points_handler_t *self)
{
    assert(self);
    return self->ledger;
}

oq_txn_t *oq_points_handler_txn(oq_points_handler_t *self)
{
    assert(self);
    return self->txn;
}

int oq_points_handler_begin_job(oq_points_handler_t *self, const oq_job_t *job, oq_report_t *report)
{
    assert(self && job && report);
    if (self->from_settings && !self->effects) {
        /* The first job of this worker process: oq_worker_main has parsed
           --database and --isolation (and checked the isolation's name). */
        const oq_worker_settings_t *settings = oq_worker_settings();
        oq_txn_isolation_t isolation;
        if (!settings || oq_txn_isolation_parse(settings->isolation, &isolation) < 0) {
            oq_report_fail(report,
                           "%s: no database settings in this process (run it under "
                           "oq_worker_main)",
                           job->type);
            return -1;
        }
        s_open(self, settings->database_url, isolation, true);
    }
    if (self->effects)
        oq_effects_worker_begin_job(self->effects, job);
    return 0;
}

/* ---- payload ---------------------------------------------------------- */

/* A required integer field in [1, max]. 0, or -1 after reporting fail. */
static int s_required(const oq_job_t *job, const char *key, int64_t max, int64_t *out,
                      oq_report_t *report)
{
    uint64_t value;
    if (!oq_payload_get(job, key)) {
        oq_report_fail(report, "%s: payload field \"%s\" is missing", job->type, key);
        return -1;
    }
    if (oq_payload_uint(job, key, &value) < 0 || value < 1 || value > (uint64_t)max) {
        oq_report_fail(report, "%s: payload field \"%s\" must be an integer from 1 to %" PRId64,
                       job->type, key, max);
        return -1;
    }
    *out = (int64_t)value;
    return 0;
}

int oq_points_decode(const oq_job_t *job, oq_points_args_t *args, oq_report_t *report)
{
    assert(job && args && report);
    if (s_required(job, "order_id", INT64_MAX, &args->order_id, report) < 0 ||
        s_required(job, "customer_id", INT64_MAX, &args->customer_id, report) < 0 ||
        s_required(job, "points", OQ_MAX_POINTS, &args->points, report) < 0)
        return -1;
    return 0;
}

/* ---- outcome ---------------------------------------------------------- */

void oq_points_report(const oq_job_t *job, const oq_points_args_t *args,
                      const oq_grant_result_t *result, oq_report_t *report)
{
    assert(job && args && result && report);
    switch (result->status) {
    case OQ_GRANT_GRANTED:
        oq_debug("job %" PRIu64 ": granted %" PRId64 " points to customer %" PRId64
                 " for order %" PRId64,
                 job->id, args->points, args->customer_id, args->order_id);
        oq_effects_report_ok(report, true);
        break;
    case OQ_GRANT_ALREADY_GRANTED:
        oq_info("job %" PRIu64 ": order %" PRId64 " was already granted; nothing changed", job->id,
                args->order_id);
        oq_effects_report_ok(report, false);
        break;
    case OQ_GRANT_UNKNOWN_CUSTOMER:
    case OQ_GRANT_CONFLICT:
    case OQ_GRANT_INVALID:
        oq_report_fail(report, "%s: %s", job->type, result->error.message);
        break;
    case OQ_GRANT_ERROR:
        if (result->error.cls == OQ_PG_ERR_UNKNOWN)
            oq_warn("job %" PRIu64 ": the database connection was lost during COMMIT; handing "
                    "the job back (a second run finds the grant if it was committed)",
                    job->id);
        oq_effects_report_error(report, job, &result->error);
        break;
    }
}

/* ---- the handler ------------------------------------------------------ */

static void s_grant_points(const oq_job_t *job, void *state, oq_report_t *report)
{
    oq_points_handler_t *self = state;
    oq_points_args_t args;
    if (oq_points_decode(job, &args, report) < 0)
        return;
    if (oq_points_handler_begin_job(self, job, report) < 0)
        return;
    oq_grant_result_t result;
    oq_grant_order_points(self->ledger, self->txn, args.order_id, args.customer_id, args.points,
                          NULL, &result);
    oq_points_report(job, &args, &result, report);
}

/* ---- the batch function ----------------------------------------------- */

_Static_assert(OQ_WORKER_MAX_BATCH <= OQ_BATCH_MAX_ITEMS,
               "a batch the worker hands over must fit one effects batch");

/* A payload it refuses fails that job alone before the batch starts, and
   the batch's fallback gives every other job the single grant's result. */
void oq_points_grant_batch(const oq_job_t *const *jobs, size_t count, void *state,
                           oq_report_t *reports)
{
    oq_points_handler_t *self = state;
    oq_points_args_t *args = calloc(count, sizeof *args);
    oq_grant_request_t *requests = calloc(count, sizeof *requests);
    oq_grant_result_t *results = calloc(count, sizeof *results);
    size_t *which = calloc(count, sizeof *which); /* job of each request */
    assert(args && requests && results && which);
    size_t n = 0;
    const oq_job_t *soonest = NULL; /* the job with the shortest timeout */
    for (size_t i = 0; i < count; i++) {
        if (oq_points_decode(jobs[i], &args[n], &reports[i]) < 0)
            continue;
        requests[n] = (oq_grant_request_t){args[n].order_id, args[n].customer_id, args[n].points};
        which[n++] = i;
        if (!soonest || (jobs[i]->timeout_ms > 0 &&
                         (soonest->timeout_ms <= 0 || jobs[i]->timeout_ms < soonest->timeout_ms)))
            soonest = jobs[i];
    }
    /* The statements of the batch are bounded by the shortest timeout
       among its jobs: none of them may overrun its own. */
    if (n > 0 && oq_points_handler_begin_job(self, soonest, &reports[which[0]]) < 0) {
        for (size_t k = 1; k < n; k++)
            reports[which[k]] = reports[which[0]];
        n = 0;
    }
    if (n > 0) {
        oq_grant_order_points_batch(self->ledger, self->txn, n, requests, results, NULL);
        for (size_t k = 0; k < n; k++)
            oq_points_report(jobs[which[k]], &args[k], &results[k], &reports[which[k]]);
    }
    free(which);
    free(results);
    free(requests);
    free(args);
}

int oq_points_handler_needs_database(oq_points_handler_t *self, oq_registry_t *registry,
                                     const char *type)
{
    assert(self && registry && type);
    return oq_effects_worker_needs(registry, type, &self->effects);
}

int oq_points_handler_register(oq_points_handler_t *self, oq_registry_t *registry)
{
    assert(self && registry);
    if (oq_registry_add(registry, OQ_POINTS_JOB_TYPE, s_grant_points, self) < 0 ||
        oq_registry_set_batch(registry, OQ_POINTS_JOB_TYPE, oq_points_grant_batch,
                              OQ_WORKER_MAX_BATCH) < 0)
        return -1;
    return oq_points_handler_needs_database(self, registry, OQ_POINTS_JOB_TYPE);
}
