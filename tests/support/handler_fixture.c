/*  handler_fixture.c: see handler_fixture.h. */
#include "handler_fixture.h"

#include <stdio.h>

int oq_hfix_calls;

void oq_hfix_counting_handler(const oq_job_t *job, void *state, oq_report_t *report)
{
    oq_hfix_calls++;
    int *seen = state;
    if (seen)
        *seen = (int)job->attempt;
    oq_report_ok(report, OQ_RESULT_APPLIED);
}

void oq_hfix_silent_handler(const oq_job_t *job, void *state, oq_report_t *report)
{
    (void)job;
    (void)state;
    (void)report;
}

oq_registry_t *oq_hfix_builtins(void)
{
    oq_registry_t *registry = oq_registry_new();
    oq_builtin_register(registry);
    return registry;
}

int oq_hfix_probe(void *ctx, char *reason, size_t reason_len)
{
    oq_hfix_resource_t *r = ctx;
    r->probes++;
    if (r->up)
        return 0;
    snprintf(reason, reason_len, "cannot connect to the database: connection refused");
    return -1;
}

void oq_hfix_release(void *ctx)
{
    ((oq_hfix_resource_t *)ctx)->releases++;
}
