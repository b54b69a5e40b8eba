/*  handler.c: request_shipment. The order of one run: decode the payload
    (the same bytes on every try), count the call on the record, call the
    carrier with no transaction open, classify the answer, put the outcome
    on the record, report. A crash anywhere in between is safe: the next
    run sends the same request under the same key, and the carrier answers
    an earlier success with the same shipment. */
#include "shipments/handler.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/effects_worker.h"
#include "onceq/log.h"
#include "shipments/carrier.h"
#include "shipments/classify.h"
#include "shipments/request.h"
#include "shipments/shipments_limits.h"
#include "shipments/store.h"

#define S_APPLICATION_NAME "onceq-worker"
#define S_WHY_LEN          256

struct oq_shipments_handler {
    bool from_settings;   /* database from the worker's settings, URL from the flag */
    const char *flag_url; /* --carrier-url as parsed (borrowed from argv or environ) */
    char *carrier_url;    /* from a config (owned) */
    char *database_url;   /* from a config (owned) */
    oq_txn_isolation_t isolation;
    oq_effects_t *effects; /* opened on the first job */
};

/* The flag's parser: a URL libcurl can use, or a usage error at start. */
static int s_parse_url(const char *value, void *dest, char *why, size_t why_len)
{
    if (oq_carrier_check_url(value, why, why_len) < 0)
        return -1;
    *(const char **)dest = value;
    return 0;
}

oq_shipments_handler_t *oq_shipments_handler_new(const oq_shipments_config_t *config)
{
    oq_carrier_global_init();
    oq_shipments_handler_t *self = calloc(1, sizeof *self);
    assert(self);
    if (!config) {
        self->from_settings = true;
        return self;
    }
    self->carrier_url = config->carrier_url ? strdup(config->carrier_url) : NULL;
    self->database_url = strdup(config->database_url ? config->database_url : "");
    self->isolation = config->isolation;
    return self;
}

void oq_shipments_handler_destroy(oq_shipments_handler_t **self_p)
{
    assert(self_p);
    oq_shipments_handler_t *self = *self_p;
    if (!self)
        return;
    oq_effects_destroy(&self->effects);
    free(self->carrier_url);
    free(self->database_url);
    free(self);
    *self_p = NULL;
}

void oq_shipments_call_budget(int64_t timeout_ms, int64_t *connect_ms, int64_t *total_ms)
{
    int64_t reserve = timeout_ms / 4;
    if (reserve > OQ_SHIPMENT_DB_RESERVE_MAX_MS)
        reserve = OQ_SHIPMENT_DB_RESERVE_MAX_MS;
    int64_t total = timeout_ms - reserve;
    if (total < OQ_SHIPMENT_MIN_CALL_MS)
        total = OQ_SHIPMENT_MIN_CALL_MS;
    int64_t connect = total / 2;
    if (connect > OQ_SHIPMENT_CONNECT_MAX_MS)
        connect = OQ_SHIPMENT_CONNECT_MAX_MS;
    *connect_ms = connect;
    *total_ms = total;
}

/* The database of this process, opened on its first job. 0, or -1 after
   reporting fail. */
static int s_begin_job(oq_shipments_handler_t *self, const oq_job_t *job, oq_report_t *report)
{
    if (!self->effects) {
        const char *url = self->database_url;
        oq_txn_isolation_t isolation = self->isolation;
        if (self->from_settings) {
            const oq_worker_settings_t *settings = oq_worker_settings();
            if (!settings || oq_txn_isolation_parse(settings->isolation, &isolation) < 0) {
                oq_report_fail(report,
                               "%s: no database settings in this process (run it under "
                               "oq_worker_main)",
                               job->type);
                return -1;
            }
            url = settings->database_url;
        }
        /* Under a worker, the process's shared handle: grant_points and
           this handler use one connection between them. */
        self->effects = self->from_settings ? oq_effects_shared(url, isolation, S_APPLICATION_NAME)
                                            : oq_effects_new(url, isolation, S_APPLICATION_NAME);
    }
    oq_effects_worker_begin_job(self->effects, job);
    return 0;
}

static void s_report(const oq_job_t *job, const oq_shipment_request_t *request,
                     const oq_shipment_outcome_t *outcome, oq_report_t *report)
{
    switch (outcome->verdict) {
    case OQ_SHIPMENT_CONFIRMED:
        oq_info("job %" PRIu64 ": order %" PRId64 " shipment %s confirmed%s", job->id,
                request->order_id, outcome->reference,
                outcome->replayed ? " (the carrier replayed an earlier try's answer)" : "");
        oq_report_ok(report, outcome->replayed ? OQ_RESULT_ALREADY_APPLIED : OQ_RESULT_APPLIED);
        break;
    case OQ_SHIPMENT_FAILED:
        oq_report_fail(report, "%s: order %" PRId64 ": %s", job->type, request->order_id,
                       outcome->reason);
        break;
    case OQ_SHIPMENT_RETRY:
        oq_report_retry(report, "%s: order %" PRId64 ": %s", job->type, request->order_id,
                        outcome->reason);
        break;
    case OQ_SHIPMENT_REVIEW:
        oq_report_review(report, "%s: order %" PRId64 ": %s", job->type, request->order_id,
                         outcome->reason);
        break;
    }
}

static void s_request_shipment(const oq_job_t *job, void *state, oq_report_t *report)
{
    oq_shipments_handler_t *self = state;
    oq_shipment_request_t request;
    char why[S_WHY_LEN];
    if (oq_shipment_request_decode(job->payload, &request, why, sizeof why) < 0) {
        oq_report_fail(report, "%s: %s", job->type, why);
        return;
    }
    const char *url = self->from_settings ? self->flag_url : self->carrier_url;
    if (!url || !url[0]) {
        /* Not this job's fault: hand it to a worker that knows the carrier. */
        oq_report_return(report, 0,
                         "%s: this worker has no carrier URL (--carrier-url, "
                         "ONCEQ_CARRIER_URL)",
                         job->type);
        goto done;
    }
    if (oq_carrier_check_url(url, why, sizeof why) < 0) {
        oq_report_fail(report, "%s: the carrier URL \"%s\" cannot be used: expected %s", job->type,
                       url, why);
        goto done;
    }
    if (s_begin_job(self, job, report) < 0)
        goto done;
    oq_shipment_record_t record;
    oq_pg_error_t error;
    if (oq_shipment_store_begin(self->effects, &request, &record, &error) < 0) {
        oq_effects_report_error(report, job, &error);
        goto done;
    }
    if (!record.same_request) {
        /* The key names the order's shipment; a different request for it
           is not a retry of the recorded one but a contradiction of it. */
        oq_report_review(report,
                         "%s: order %" PRId64 " was requested before with another body "
                         "(record: %s%s%s); this one is not sent under key %s",
                         job->type, request.order_id, record.status,
                         record.reference[0] ? ", shipment " : "", record.reference, request.key);
        goto done;
    }
    int64_t connect_ms, total_ms;
    oq_shipments_call_budget(job->timeout_ms, &connect_ms, &total_ms);
    oq_carrier_answer_t answer;
    oq_carrier_post(url, request.key, request.body, connect_ms, total_ms, &answer);
    oq_shipment_outcome_t outcome;
    oq_shipment_classify(&answer, request.key, record.reference, job->attempt >= job->max_tries,
                         &outcome);
    oq_debug("job %" PRIu64 ": carrier %s status %ld: %s", job->id,
             oq_carrier_transport_name(answer.transport), answer.status,
             oq_shipment_verdict_name(outcome.verdict));
    if (oq_shipment_store_finish(self->effects, request.order_id, &outcome, &error) < 0) {
        /* Whatever the carrier said, the next try asks again under the
           same key and gets the same answer. */
        oq_effects_report_error(report, job, &error);
        goto done;
    }
    s_report(job, &request, &outcome, report);
done:
    oq_shipment_request_clear(&request);
}

int oq_shipments_handler_register(oq_shipments_handler_t *self, oq_registry_t *registry)
{
    assert(self && registry);
    if (self->from_settings) {
        const oq_flag_t flag = {
            .name = "carrier-url",
            .env = "ONCEQ_CARRIER_URL",
            .kind = OQ_FLAG_CUSTOM,
            .arg = "URL",
            .parse = s_parse_url,
            .expected = "an http:// or https:// URL",
            .def_text = "none: request_shipment jobs are handed back",
            .dest = &self->flag_url,
            .help = "the carrier API's base URL for request_shipment (POST URL/shipments)",
        };
        if (oq_registry_add_flag(registry, &flag) < 0)
            return -1;
    }
    if (oq_registry_add(registry, OQ_SHIPMENTS_JOB_TYPE, s_request_shipment, self) < 0)
        return -1;
    /* Its record is in the database: while that is away the worker pauses
       and probes it, and an idle worker closes the connection. */
    return oq_effects_worker_needs(registry, OQ_SHIPMENTS_JOB_TYPE, &self->effects);
}
