/*  runner.h: calling handlers. Given the registry and one job, or a batch
    of one type, each already as its handler sees it (oq_runner_job_t, made
    once where the job arrived), it finds the handler (or the type's batch
    function), calls it on the calling thread, times it, and makes its
    report one the broker can use; it probes a declared resource the same
    way. The worker calls it on its main thread, without holding the
    session (keeper.h says who keeps the link meanwhile). */
#ifndef ONCEQ_WORKER_RUNNER_H
#define ONCEQ_WORKER_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "onceq/proto.h"
#include "onceq/worker.h"

/* The report on one job. */
typedef struct {
    uint64_t id;
    uint32_t attempt;
    int64_t elapsed_ms; /* time the handler ran (a batch: the batch function) */
    int64_t call_us;    /* the same in µs: the call the job ran in, its handler's or
                           its batch function's with the rest of the batch (0: not run) */
    oq_report_t report; /* outcome OK, RETRY, FAIL, RETURN or UNAVAILABLE */
} oq_job_done_t;

/* The answer of a probe (oq_runner_probe). */
typedef struct {
    int result;         /* 0 the resource answers, -1 it does not, 1 nothing to check */
    int64_t elapsed_ms; /* time the probe took */
    char reason[OQ_MAX_ERROR_LEN + 1]; /* with -1: why */
} oq_probe_done_t;

/* A delivered job as its handler gets it, made once, as it arrives: the
   handler's view, with its own copies of the type and queue names, and
   its payload borrowed: the decoded map inside the broker's message it
   came in (oq_proto_decode_delivery), which the worker keeps until the
   job has run or been given up. */
typedef struct {
    oq_job_t job; /* runtime_ is set as it runs */
    char type[OQ_MAX_NAME_LEN + 1];
    char queue[OQ_MAX_NAME_LEN + 1];
} oq_runner_job_t;

/* Make *job from a decoded delivery: envelope's fields and names copied
   (the default queue where it names none), payload borrowed (NULL, or
   anything but a map: the job fails as it runs). */
void oq_runner_job_init(oq_runner_job_t *job, const oq_job_msg_t *envelope,
                        const msgpack_object *payload);

/* Run count jobs (1 ... OQ_WORKER_MAX_BATCH) of one type: one alone goes
   to its handler; two or more go to the type's batch function in one call,
   those whose payload is a map (the handler, one by one, if only one is
   or the type has none). done[i] is job i's report. runtime is what
   oq_job_touch gets back (job->runtime_), NULL for none. */
void oq_runner_run(const oq_registry_t *registry, oq_runner_job_t *const *jobs, size_t count,
                   void *runtime, oq_job_done_t *done);

/* Probe the resource the handler of type declared (oq_registry_set_resource)
   and time it; *probed is the answer. */
void oq_runner_probe(const oq_registry_t *registry, const char *type, oq_probe_done_t *probed);

#endif
