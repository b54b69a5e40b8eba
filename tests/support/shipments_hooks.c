/*  shipments_hooks.c: the unkeyed twin uses the production request's
    decode and body and the production carrier call; only the key differs,
    so that the one thing its runs can show is what a key from the job id
    does. */
#include "shipments_hooks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "shipments/carrier.h"
#include "shipments/handler.h"
#include "shipments/request.h"

#define S_URL_ENV  "ONCEQ_CARRIER_URL"
#define S_WHY_LEN  256
#define S_HTTP_OK  200
#define S_HTTP_END 300

static void s_unkeyed(const oq_job_t *job, void *state, oq_report_t *report)
{
    (void)state;
    oq_shipment_request_t request;
    char why[S_WHY_LEN];
    if (oq_shipment_request_decode(job->payload, &request, why, sizeof why) < 0) {
        oq_report_fail(report, "%s: %s", job->type, why);
        return;
    }
    const char *url = getenv(S_URL_ENV);
    if (!url || !url[0]) {
        oq_report_fail(report, "%s: no carrier URL in %s", job->type, S_URL_ENV);
        oq_shipment_request_clear(&request);
        return;
    }
    /* The mistake: a key from the job, not from the business operation. */
    char key[OQ_SHIPMENT_MAX_KEY_LEN];
    snprintf(key, sizeof key, "job-%" PRIu64, job->id);
    int64_t connect_ms, total_ms;
    oq_shipments_call_budget(job->timeout_ms, &connect_ms, &total_ms);
    oq_carrier_answer_t answer;
    oq_carrier_post(url, key, request.body, connect_ms, total_ms, &answer);
    if (answer.transport == OQ_CARRIER_ANSWERED && answer.status >= S_HTTP_OK &&
        answer.status < S_HTTP_END)
        oq_report_ok(report, answer.replayed ? OQ_RESULT_ALREADY_APPLIED : OQ_RESULT_APPLIED);
    else
        oq_report_retry(report, "%s: order %" PRId64 ": carrier %s, status %ld", job->type,
                        request.order_id, oq_carrier_transport_name(answer.transport),
                        answer.status);
    oq_shipment_request_clear(&request);
}

int oq_shipments_test_register(oq_registry_t *registry)
{
    return oq_registry_add(registry, OQ_SHIPMENTS_UNKEYED_JOB_TYPE, s_unkeyed, NULL);
}
