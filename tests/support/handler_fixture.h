/*  handler_fixture.h: handlers and a resource a worker-side unit test
    controls, for the tests of the registry and of the runner: a handler
    that counts its calls, one that forgets to report, a registry with the
    built-ins, and a resource whose probe answers as the test says. */
#ifndef ONCEQ_TEST_HANDLER_FIXTURE_H
#define ONCEQ_TEST_HANDLER_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>

#include "onceq/worker.h"
#include "registry.h"

/* Calls of oq_hfix_counting_handler so far; a test sets it to 0. */
extern int oq_hfix_calls;

/* Acks ok (applied), counts the call, and stores the job's attempt in
 *(int *)state when state is not NULL. */
void oq_hfix_counting_handler(const oq_job_t *job, void *state, oq_report_t *report);

/* Reports nothing, as a broken handler would. */
void oq_hfix_silent_handler(const oq_job_t *job, void *state, oq_report_t *report);

/* A new registry with the built-in handlers; the caller destroys it. */
oq_registry_t *oq_hfix_builtins(void);

/* A resource: whether it answers, and what was asked of it. */
typedef struct {
    bool up;
    int probes;
    int releases;
} oq_hfix_resource_t;

/* The probe and release of an oq_hfix_resource_t (ctx): the probe answers
   0 while up, else -1 with "cannot connect to the database: connection
   refused". */
int oq_hfix_probe(void *ctx, char *reason, size_t reason_len);
void oq_hfix_release(void *ctx);

#endif
