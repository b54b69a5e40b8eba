/*  job_thread.h: the thread that runs handlers, as an actor. The worker's main
    thread hands it one job at a time over an inproc PAIR socket and polls that
    socket for the report; the job thread owns the registry (and so every
    handler's state) and shares nothing else, so nothing needs a lock.

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
    oq_report_t report; /* outcome OK, RETRY or FAIL, never anything else */
} oq_job_done_t;

typedef struct oq_job_thread oq_job_thread_t;

/* Start the job thread. It takes the registry: *registry_p becomes NULL and
   the registry is destroyed with the thread. NULL if the thread cannot start. */
oq_job_thread_t *oq_job_thread_new(oq_registry_t **registry_p);

/* Stop the thread (after its current job: call it only when idle), free, and
   set *self_p to NULL. */
void oq_job_thread_destroy(oq_job_thread_t **self_p);

/* Main thread's end of the pipe, a libzmq socket to poll for ZMQ_POLLIN. */
void *oq_job_thread_socket(oq_job_thread_t *self);

/* Hand one delivered job to the thread (the payload is copied). 0, or -1 if
   it could not be sent. */
int oq_job_thread_start(oq_job_thread_t *self, const oq_job_msg_t *job);

/* Take the thread's next message without waiting: 0 with *done filled (a
   finished job's report), 1 with *touch_id set (the handler of that job
   called oq_job_touch), or -1 if there is none yet. */
int oq_job_thread_recv(oq_job_thread_t *self, oq_job_done_t *done, uint64_t *touch_id);

#endif
