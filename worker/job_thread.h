/*  job_thread.h: the thread that runs handlers, as an actor. The worker's main
    thread hands it one job at a time over an inproc PAIR socket and polls that
    socket for the report; the job thread owns the registry (and so every
    handler's state) and shares nothing else, so nothing needs a lock. For
    the same reason the resources handlers declared (their database) are
    probed and released on this thread, between jobs, when the main thread
    asks; and released when the thread stops.

    The thread has its own ZeroMQ context. A handler that overruns its timeout
    cannot be cancelled safely, so the worker then exits without joining this
    thread; with a separate context it can still terminate the broker
    socket's context, which is what flushes the final ack. */
#ifndef ONCEQ_WORKER_JOB_THREAD_H
#define ONCEQ_WORKER_JOB_THREAD_H

#include <stdint.h>

#include "onceq/proto.h"
#include "onceq/worker.h"

/* The report on one job, sent back by the job thread. */
typedef struct {
    uint64_t id;
    uint32_t attempt;
    int64_t elapsed_ms; /* time the handler ran */
    oq_report_t report; /* outcome OK, RETRY, FAIL, RETURN or UNAVAILABLE */
} oq_job_done_t;

/* The answer of a probe (oq_job_thread_probe). */
typedef struct {
    int result;         /* 0 the resource answers, -1 it does not, 1 nothing to check */
    int64_t elapsed_ms; /* time the probe took */
    char reason[OQ_MAX_ERROR_LEN + 1]; /* with -1: why */
} oq_probe_done_t;

/* What the job thread tells the main thread. */
typedef enum {
    OQ_JOB_EVENT_DONE,   /* a job finished: done */
    OQ_JOB_EVENT_TOUCH,  /* its handler called oq_job_touch: touch_id */
    OQ_JOB_EVENT_PROBED, /* a probe finished: probed */
} oq_job_event_kind_t;

typedef struct {
    oq_job_event_kind_t kind;
    oq_job_done_t done;
    uint64_t touch_id;
    oq_probe_done_t probed;
} oq_job_event_t;

typedef struct oq_job_thread oq_job_thread_t;

/* Start the job thread. It takes the registry: *registry_p becomes NULL and
   the registry is destroyed with the thread. NULL if the thread cannot start. */
oq_job_thread_t *oq_job_thread_new(oq_registry_t **registry_p);

/* Stop the thread (after its current job: call it only when idle; it
   releases the declared resources first), free, and set *self_p to NULL. */
void oq_job_thread_destroy(oq_job_thread_t **self_p);

/* Main thread's end of the pipe, a libzmq socket to poll for ZMQ_POLLIN. */
void *oq_job_thread_socket(oq_job_thread_t *self);

/* Hand one delivered job to the thread (the payload is copied). 0, or -1 if
   it could not be sent. */
int oq_job_thread_start(oq_job_thread_t *self, const oq_job_msg_t *job);

/* Hand count jobs of one type to the thread as one batch (payloads
   copied): it calls the type's batch function once with those whose payload
   decodes (oq_registry_set_batch; the handler if only one does), and
   answers one OQ_JOB_EVENT_DONE per job. 0, or -1 if they could not be
   sent. */
int oq_job_thread_start_batch(oq_job_thread_t *self, const oq_job_msg_t *const *jobs, size_t count);

/* Probe the resource the handler of type declared (oq_registry_set_resource);
   the answer comes as an OQ_JOB_EVENT_PROBED. Only while no job runs. 0, or
   -1 if it could not be sent. */
int oq_job_thread_probe(oq_job_thread_t *self, const char *type);

/* Release every declared resource (close idle connections). No answer
   comes; a job handed over afterwards runs after it. 0, or -1. */
int oq_job_thread_release(oq_job_thread_t *self);

/* Take the thread's next message without waiting: 0 with *event filled, or
   -1 if there is none yet. */
int oq_job_thread_recv(oq_job_thread_t *self, oq_job_event_t *event);

#endif
