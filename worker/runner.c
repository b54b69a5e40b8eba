/*  runner.c: calling handlers. A job comes as its handler sees it, made
    once where it arrived (oq_runner_job_init: the envelope's names copied,
    the payload the decoded map in the broker's message); one job goes to
    its handler, a batch to its type's batch function (or, failing that, to
    the handler one job at a time), and every report is checked so that a
    handler that forgot to report is reported as such. */
#include "runner.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/clock.h"
#include "registry.h"

/* Make a handler's report one the broker can use: a handler that set no
   outcome, or failed without saying why, is reported as such. */
static void s_check_report(oq_report_t *report, const char *type)
{
    switch (report->outcome) {
    case OQ_OUTCOME_OK:
        report->error[0] = 0;
        break;
    case OQ_OUTCOME_RETRY:
    case OQ_OUTCOME_FAIL:
    case OQ_OUTCOME_RETURN:
    case OQ_OUTCOME_REVIEW:
    case OQ_OUTCOME_UNAVAILABLE:
        report->result = OQ_RESULT_NONE;
        if (report->error[0] == 0)
            oq_report_fail(report, "the %s handler reported %s without a message", type,
                           oq_proto_outcome_name(report->outcome));
        break;
    default:
        oq_report_fail(report, "the %s handler returned without reporting an outcome", type);
        break;
    }
}

void oq_runner_job_init(oq_runner_job_t *job, const oq_job_msg_t *envelope,
                        const msgpack_object *payload)
{
    assert(job && envelope);
    oq_str_copy(envelope->type, job->type, sizeof job->type);
    oq_str_copy(envelope->queue.ptr ? envelope->queue : oq_str(OQ_DEFAULT_QUEUE), job->queue,
                sizeof job->queue);
    job->job = (oq_job_t){
        .id = envelope->id,
        .type = job->type,
        .queue = job->queue,
        .attempt = envelope->attempt,
        .max_tries = envelope->has_max_tries ? envelope->max_tries : OQ_DEFAULT_MAX_TRIES,
        .timeout_ms = envelope->has_timeout ? envelope->timeout_ms : OQ_DEFAULT_TIMEOUT_MS,
        .payload = payload,
    };
}

void oq_runner_run(const oq_registry_t *registry, oq_runner_job_t *const *jobs, size_t count,
                   void *runtime, oq_job_done_t *done)
{
    assert(registry && jobs && done);
    assert(count >= 1 && count <= OQ_WORKER_MAX_BATCH);
    /* The jobs whose payload is a map, in order, and where each came from.
       The codec gives every delivery one; a job made by hand may lack it. */
    const oq_job_t *calls[OQ_WORKER_MAX_BATCH];
    size_t index[OQ_WORKER_MAX_BATCH];
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        memset(&done[i], 0, sizeof done[i]);
        done[i].id = jobs[i]->job.id;
        done[i].attempt = jobs[i]->job.attempt;
        const msgpack_object *payload = jobs[i]->job.payload;
        if (!payload || payload->type != MSGPACK_OBJECT_MAP) {
            oq_report_fail(&done[i].report, "the job's payload is not a msgpack map");
            continue;
        }
        jobs[i]->job.runtime_ = runtime;
        calls[n] = &jobs[i]->job;
        index[n++] = i;
    }
    const char *type = jobs[0]->type;
    oq_batch_fn batch;
    oq_handler_fn fn;
    void *state;
    size_t most;
    if (n >= 2 && oq_registry_find_batch(registry, type, &batch, &state, &most) == 0) {
        oq_report_t *reports = calloc(n, sizeof *reports);
        assert(reports);
        int64_t started_us = oq_clock_mono_us();
        batch(calls, n, state, reports);
        int64_t elapsed_us = oq_clock_mono_us() - started_us;
        for (size_t k = 0; k < n; k++) {
            oq_job_done_t *d = &done[index[k]];
            d->report = reports[k];
            d->elapsed_ms = elapsed_us / 1000;
            d->call_us = elapsed_us;
            if (d->report.outcome == 0)
                oq_report_retry(&d->report, "the batch left no report for this job");
            s_check_report(&d->report, type);
        }
        free(reports);
    } else if (n > 0 && oq_registry_find(registry, type, &fn, &state) == 0) {
        for (size_t k = 0; k < n; k++) {
            oq_job_done_t *d = &done[index[k]];
            int64_t started_us = oq_clock_mono_us();
            fn(calls[k], state, &d->report);
            d->call_us = oq_clock_mono_us() - started_us;
            d->elapsed_ms = d->call_us / 1000;
            s_check_report(&d->report, type);
        }
    } else {
        /* Sent a type it never announced (an older broker, a bug): hand it
           back without using a try, for a worker that handles it. */
        for (size_t k = 0; k < n; k++)
            oq_report_return(&done[index[k]].report, 0, "no handler for job type %s", type);
    }
}

void oq_runner_probe(const oq_registry_t *registry, const char *type, oq_probe_done_t *probed)
{
    assert(registry && type && probed);
    memset(probed, 0, sizeof *probed);
    int64_t started_us = oq_clock_mono_us();
    probed->result = oq_registry_probe(registry, type, probed->reason, sizeof probed->reason);
    probed->elapsed_ms = (oq_clock_mono_us() - started_us) / 1000;
}
