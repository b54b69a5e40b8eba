/*  worker.h: one worker process. The main thread owns a DEALER connection to
    the broker's back socket, the heartbeats and the watchdog, and runs the
    handlers between its loop turns (runner.h), the keeper thread holding the
    link while one runs long (keeper.h); every protocol decision is the
    session's (session.h). This module is the I/O around them: it polls until the
    session's next deadline and carries out what the session decides. */
#ifndef ONCEQ_WORKER_WORKER_H
#define ONCEQ_WORKER_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "onceq/iocpus.h"
#include "onceq/keys.h"
#include "onceq/limits.h"
#include "onceq/worker.h"

typedef struct {
    const char *endpoint;  /* the broker's back socket, e.g. tcp://127.0.0.1:7751 */
    const char *name;      /* sent in ready (borrowed), or NULL for none */
    uint32_t heartbeat_ms; /* used until the broker's welcome gives its own */
    /* Handlers release their connections after this long without a job
       (oq_registry_set_resource); 0: never. */
    int64_t idle_release_ms;
    /* Jobs it may hold at once, the running one included (--prefetch;
       1 ... OQ_WORKER_PREFETCH_MAX; 0 is taken as 1); with prefetch_auto
       the most, the limit following the handlers' run times. */
    uint32_t prefetch;
    bool prefetch_auto;
    /* The most jobs of one type handed to its batch function at once
       (--batch; 0 or 1: none), within the type's own most. */
    uint32_t batch;
    /* The queues it serves, highest priority first; none: every queue. */
    char queues[OQ_MAX_WORKER_QUEUES][OQ_MAX_NAME_LEN + 1];
    size_t queue_count;
    /* CURVE: with curve set, every socket to the broker uses the pair and
       the broker's public key (docs/protocol.md §1); otherwise plaintext. */
    bool curve;
    oq_keypair_t pair;
    char broker_key[OQ_KEY_Z85_LEN + 1];
    oq_io_cpus_t io_cpus; /* libzmq's I/O thread runs only on these (none: anywhere) */
} oq_worker_config_t;

/* Parse a comma-separated queue list ("high,default") into config->queues.
   0, or -1 with reason naming the bad value (an empty name, an invalid or
   too long one, more than OQ_MAX_WORKER_QUEUES). */
int oq_worker_parse_queues(oq_worker_config_t *config, const char *text, char *reason,
                           size_t reason_len);

/* Run one worker until SIGTERM or SIGINT stops it. Takes the registry
   (*registry_p becomes NULL). Returns the exit status: 0 after a graceful
   stop, OQ_EXIT_BROKEN if the worker could not start. After a handler ran
   past its job's timeout it does not return: it reports the timeout and
   exits the process with OQ_EXIT_TIMEOUT.

   Blocks SIGTERM and SIGINT and reads them from a signalfd, so call it from
   the main thread before any other thread exists (the mask is inherited). */
int oq_worker_run(const oq_worker_config_t *config, oq_registry_t **registry_p);

#endif
