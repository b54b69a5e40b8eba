/*  worker.h: one worker process. The main thread owns a DEALER connection to
    the broker's back socket, the heartbeats and the watchdog; handlers run on
    the job thread (job_thread.h); every protocol decision is the session's
    (session.h). This module is the I/O around them: it polls until the
    session's next deadline and carries out what the session decides. */
#ifndef ONCEQ_WORKER_WORKER_H
#define ONCEQ_WORKER_WORKER_H

#include <stdint.h>

#include "onceq/worker.h"

typedef struct {
    const char *endpoint;  /* the broker's back socket, e.g. tcp://127.0.0.1:7751 */
    const char *name;      /* sent in ready (borrowed), or NULL for none */
    uint32_t heartbeat_ms; /* used until the broker's welcome gives its own */
} oq_worker_config_t;

/* Run one worker until SIGTERM or SIGINT stops it. Takes the registry
   (*registry_p becomes NULL). Returns the exit status: 0 after a graceful
   stop, OQ_EXIT_BROKEN if the worker could not start. After a handler ran
   past its job's timeout it does not return: it reports the timeout and
   exits the process with OQ_EXIT_TIMEOUT.

   Blocks SIGTERM and SIGINT and reads them from a signalfd, so call it from
   the main thread before any other thread exists (the mask is inherited). */
int oq_worker_run(const oq_worker_config_t *config, oq_registry_t **registry_p);

#endif
