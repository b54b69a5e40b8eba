/*  onceq/effects_worker.h: from an effects result to a job's report. The
    effects library knows nothing of jobs and the worker runtime nothing of
    PostgreSQL; a handler that uses both needs these few lines in every
    job, so they live here, header-only, where both are included and
    neither depends on the other. Compile with the flags of both
    pkg-config packages: onceq-worker and onceq-effects. */
#ifndef ONCEQ_EFFECTS_WORKER_H
#define ONCEQ_EFFECTS_WORKER_H

#include <stdbool.h>
#include <stdio.h>

#include "onceq/effects.h"
#include "onceq/worker.h"

/* The job outcome for an error class: OQ_OUTCOME_OK for none,
   OQ_OUTCOME_FAIL for OQ_PG_ERR_FAIL, OQ_OUTCOME_UNAVAILABLE for the
   infrastructure classes (oq_pg_errors_infrastructure: the database is
   down or the connection was lost, an unknown COMMIT too: the job runs
   again, without using a try, once the database answers, and finds the
   guard's row if it committed), OQ_OUTCOME_RETRY for every other class. */
static inline oq_outcome_t oq_effects_outcome(oq_pg_class_t cls)
{
    if (oq_pg_errors_infrastructure(cls))
        return OQ_OUTCOME_UNAVAILABLE;
    switch (oq_pg_errors_verdict(cls)) {
    case OQ_EFFECTS_OK:
        return OQ_OUTCOME_OK;
    case OQ_EFFECTS_FAIL:
        return OQ_OUTCOME_FAIL;
    case OQ_EFFECTS_RETRY:
    case OQ_EFFECTS_UNKNOWN:
    case OQ_EFFECTS_UNAVAILABLE:
        break;
    }
    return OQ_OUTCOME_RETRY;
}

/* Bound the job's database work (oq_effects_begin_job) by its timeout,
   or by the worker's --db-timeout where that is shorter
   (oq_worker_settings; outside oq_worker_main there is none). Call it at
   the start of every job, or of a batch with the job of the shortest
   timeout. */
static inline void oq_effects_worker_begin_job(oq_effects_t *fx, const oq_job_t *job)
{
    const oq_worker_settings_t *settings = oq_worker_settings();
    int64_t timeout_ms = job->timeout_ms;
    if (settings && settings->db_timeout_ms > 0 &&
        (timeout_ms <= 0 || settings->db_timeout_ms < timeout_ms))
        timeout_ms = settings->db_timeout_ms;
    oq_effects_begin_job(fx, timeout_ms);
}

/* A committed transaction: ok, with applied if this run did the effect
   (the guard's row went in), already_applied if a run before it had. */
static inline void oq_effects_report_ok(oq_report_t *report, bool applied)
{
    oq_report_ok(report, applied ? OQ_RESULT_APPLIED : OQ_RESULT_ALREADY_APPLIED);
}

/* A failed transaction: unavailable, retry or fail by the error's class
   (oq_effects_outcome), with a reason that starts with the job type and
   says the class, the SQLSTATE, the server's message and, where there is
   one, what to do about it:

     "TYPE: database unavailable (CLASS, SQLSTATE S): MESSAGE"
     "TYPE: connection lost during COMMIT, outcome unknown (the job runs
      again once the database answers; a second run finds the guard's row
      if it was committed): MESSAGE"
     "TYPE: database error (CLASS, SQLSTATE S): MESSAGE[; HINT]"

   Unavailable hands the job back without using a try, and the worker
   pauses until the database answers (see oq_effects_worker_needs). */
static inline void oq_effects_report_error(oq_report_t *report, const oq_job_t *job,
                                           const oq_pg_error_t *error)
{
    char text[OQ_MAX_ERROR_LEN + 1];
    if (error->cls == OQ_PG_ERR_UNKNOWN) {
        snprintf(text, sizeof text,
                 "%s: connection lost during COMMIT, outcome unknown (the job runs again once "
                 "the database answers; a second run finds the guard's row if it was "
                 "committed): %s",
                 job->type, error->message);
    } else if (oq_pg_errors_infrastructure(error->cls)) {
        snprintf(text, sizeof text, "%s: database unavailable (%s, SQLSTATE %s): %s", job->type,
                 oq_pg_errors_class_name(error->cls), error->sqlstate[0] ? error->sqlstate : "-",
                 error->message);
    } else {
        const char *hint = oq_pg_errors_hint(error);
        snprintf(text, sizeof text, "%s: database error (%s, SQLSTATE %s): %s%s%s", job->type,
                 oq_pg_errors_class_name(error->cls), error->sqlstate[0] ? error->sqlstate : "-",
                 error->message, hint ? "; " : "", hint ? hint : "");
    }
    switch (oq_effects_outcome(error->cls)) {
    case OQ_OUTCOME_FAIL:
        oq_report_fail(report, "%s", text);
        break;
    case OQ_OUTCOME_UNAVAILABLE:
        oq_report_unavailable(report, "%s", text);
        break;
    default:
        oq_report_retry(report, "%s", text);
        break;
    }
}

/* One item of a batch (oq_effects_run_batch), as its job's report: ok,
   applied or already_applied, if its effect is committed; otherwise as
   oq_effects_report_error says for its error. For a batch function
   (oq_registry_set_batch) whose jobs are its items, in order. */
static inline void oq_effects_report_item(oq_report_t *report, const oq_job_t *job,
                                          const oq_batch_item_t *item)
{
    if (item->error.cls == OQ_PG_ERR_NONE)
        oq_effects_report_ok(report, item->applied);
    else
        oq_effects_report_error(report, job, &item->error);
}

/* The probe and release oq_effects_worker_needs declares: ctx is the
   address of the handler's oq_effects_t pointer (NULL until its first
   job opens it: nothing to check, nothing to release). */
static inline int oq_effects_worker_probe_(void *ctx, char *reason, size_t reason_len)
{
    oq_effects_t *fx = *(oq_effects_t **)ctx;
    oq_pg_error_t error;
    if (!fx || oq_effects_probe(fx, &error) == 0)
        return 0;
    if (error.sqlstate[0])
        snprintf(reason, reason_len, "%s (SQLSTATE %s)", error.message, error.sqlstate);
    else
        snprintf(reason, reason_len, "%s", error.message);
    return -1;
}

static inline void oq_effects_worker_release_(void *ctx)
{
    oq_effects_t *fx = *(oq_effects_t **)ctx;
    if (fx)
        oq_effects_release(fx);
}

/* Declare that the handler of type needs the database behind *fx_p, the
   handler's own oq_effects_t pointer (which may still be NULL: handlers
   open it on their first job). Then, after the handler reported the
   database unavailable, the worker takes no job until oq_effects_probe
   answers on that handle (whose connection the next job then uses), and
   when the worker has been idle for --idle-release, or stops, the
   connection is closed (oq_effects_release). Types that share a handle
   share the probe and are released once. 0, or -1 if type has no
   handler in registry. */
static inline int oq_effects_worker_needs(oq_registry_t *registry, const char *type,
                                          oq_effects_t **fx_p)
{
    return oq_registry_set_resource(registry, type, oq_effects_worker_probe_,
                                    oq_effects_worker_release_, fx_p);
}

#endif
