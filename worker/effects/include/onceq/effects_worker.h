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
   OQ_OUTCOME_FAIL for OQ_PG_ERR_FAIL, OQ_OUTCOME_RETRY for every other
   class (an unknown COMMIT too: the retry finds the guard's row if it
   committed). */
static inline oq_outcome_t oq_effects_outcome(oq_pg_class_t cls)
{
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

/* A committed transaction: ok, with applied if this run did the effect
   (the guard's row went in), already_applied if a run before it had. */
static inline void oq_effects_report_ok(oq_report_t *report, bool applied)
{
    oq_report_ok(report, applied ? OQ_RESULT_APPLIED : OQ_RESULT_ALREADY_APPLIED);
}

/* A failed transaction: retry or fail by the error's class, with a reason
   that starts with the job type and says the class, the SQLSTATE, the
   server's message and, where there is one, what to do about it:

     "TYPE: database error (CLASS, SQLSTATE S): MESSAGE[; HINT]"
     "TYPE: connection lost during COMMIT, outcome unknown (safe to retry: a
      second run finds the guard's row if it was committed): MESSAGE" */
static inline void oq_effects_report_error(oq_report_t *report, const oq_job_t *job,
                                           const oq_pg_error_t *error)
{
    char text[OQ_MAX_ERROR_LEN + 1];
    if (error->cls == OQ_PG_ERR_UNKNOWN) {
        snprintf(text, sizeof text,
                 "%s: connection lost during COMMIT, outcome unknown (safe to retry: a second "
                 "run finds the guard's row if it was committed): %s",
                 job->type, error->message);
    } else {
        const char *hint = oq_pg_errors_hint(error);
        snprintf(text, sizeof text, "%s: database error (%s, SQLSTATE %s): %s%s%s", job->type,
                 oq_pg_errors_class_name(error->cls), error->sqlstate[0] ? error->sqlstate : "-",
                 error->message, hint ? "; " : "", hint ? hint : "");
    }
    if (oq_effects_outcome(error->cls) == OQ_OUTCOME_FAIL)
        oq_report_fail(report, "%s", text);
    else
        oq_report_retry(report, "%s", text);
}

#endif
