/*  runner.c: calling handlers. Each job's envelope fields become the
    NUL-terminated strings a handler sees and its payload is decoded once;
    then one job goes to its handler, a batch to its type's batch function
    (or, failing that, to the handler one job at a time), and every report
    is checked so that a handler that forgot to report is reported as such. */
#include "runner.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/clock.h"
#include "registry.h"

/* One job as the handler sees it, and the memory behind it. */
typedef struct {
    char type[OQ_MAX_NAME_LEN + 1];
    char queue[OQ_MAX_NAME_LEN + 1];
    msgpack_unpacked unpacked; /* the payload, decoded */
    oq_job_t job;
} s_entry_t;

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

/* Fill entry from the envelope msg: 0, or -1 if its payload is not a map. */
static int s_prepare(s_entry_t *entry, const oq_job_msg_t *msg, void *runtime)
{
    oq_str_copy(msg->type, entry->type, sizeof entry->type);
    oq_str_copy(msg->queue.ptr ? msg->queue : oq_str(OQ_DEFAULT_QUEUE), entry->queue,
                sizeof entry->queue);
    /* The codec always gives at least an empty map; a job built by hand
       without a payload means the same. */
    static const uint8_t empty_map = 0x80;
    const char *payload = msg->payload_len ? (const char *)msg->payload : (const char *)&empty_map;
    size_t payload_len = msg->payload_len ? msg->payload_len : sizeof empty_map;
    msgpack_unpacked_init(&entry->unpacked);
    size_t offset = 0;
    if (msgpack_unpack_next(&entry->unpacked, payload, payload_len, &offset) !=
            MSGPACK_UNPACK_SUCCESS ||
        entry->unpacked.data.type != MSGPACK_OBJECT_MAP)
        return -1;
    entry->job = (oq_job_t){
        .id = msg->id,
        .type = entry->type,
        .queue = entry->queue,
        .attempt = msg->attempt,
        .max_tries = msg->has_max_tries ? msg->max_tries : OQ_DEFAULT_MAX_TRIES,
        .timeout_ms = msg->has_timeout ? msg->timeout_ms : OQ_DEFAULT_TIMEOUT_MS,
        .payload = &entry->unpacked.data,
        .runtime_ = runtime,
    };
    return 0;
}

void oq_runner_run(const oq_registry_t *registry, const oq_job_msg_t *const *jobs, size_t count,
                   void *runtime, oq_job_done_t *done)
{
    assert(registry && jobs && done);
    assert(count >= 1 && count <= OQ_WORKER_MAX_BATCH);
    s_entry_t one;
    s_entry_t *entries = count == 1 ? &one : calloc(count, sizeof *entries);
    assert(entries);
    /* The jobs whose payload decodes, in order, and where each came from. */
    const oq_job_t *calls[OQ_WORKER_MAX_BATCH];
    size_t index[OQ_WORKER_MAX_BATCH];
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        memset(&done[i], 0, sizeof done[i]);
        done[i].id = jobs[i]->id;
        done[i].attempt = jobs[i]->attempt;
        if (s_prepare(&entries[i], jobs[i], runtime) < 0) {
            oq_report_fail(&done[i].report, "the job's payload is not a msgpack map");
            continue;
        }
        calls[n] = &entries[i].job;
        index[n++] = i;
    }
    const char *type = entries[0].type;
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
    for (size_t i = 0; i < count; i++)
        msgpack_unpacked_destroy(&entries[i].unpacked);
    if (entries != &one)
        free(entries);
}

void oq_runner_probe(const oq_registry_t *registry, const char *type, oq_probe_done_t *probed)
{
    assert(registry && type && probed);
    memset(probed, 0, sizeof *probed);
    int64_t started_us = oq_clock_mono_us();
    probed->result = oq_registry_probe(registry, type, probed->reason, sizeof probed->reason);
    probed->elapsed_ms = (oq_clock_mono_us() - started_us) / 1000;
}
