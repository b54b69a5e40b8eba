/*  supervisor.h: `onceq-worker --processes N`. A parent process that forks N
    workers, restarts any that dies (a handler that overran exits on purpose,
    a crash kills one), and on SIGTERM or SIGINT stops them all gracefully.
    The parent itself never touches ZeroMQ: a context does not survive fork,
    so every child creates its own after it is forked. */
#ifndef ONCEQ_WORKER_SUPERVISOR_H
#define ONCEQ_WORKER_SUPERVISOR_H

#include <stdint.h>

typedef struct {
    uint32_t processes;      /* 1 .. OQ_SUPERVISOR_MAX_PROCESSES */
    int64_t stop_timeout_ms; /* after SIGTERM, how long children get before SIGKILL */
} oq_supervisor_config_t;

/* What each child runs; its return value is the child's exit status. */
typedef int (*oq_supervisor_child_fn)(void *arg);

/* Supervise until SIGTERM or SIGINT, then forward SIGTERM to every child,
   wait for them (SIGKILL after stop_timeout_ms) and return 0. Returns -1 if
   the configuration is invalid. Call it before creating any ZeroMQ context
   or thread. */
int oq_supervisor_run(const oq_supervisor_config_t *config, oq_supervisor_child_fn child,
                      void *arg);

/* The delay before restarting a child that died after living lived_ms, when
   the delay before its last start was last_delay_ms (0 for none yet): the
   first delay again for a child that ran stably, double for one that died
   quickly, at most OQ_SUPERVISOR_RESTART_MAX_MS. */
int64_t oq_supervisor_restart_delay(int64_t last_delay_ms, int64_t lived_ms);

#endif
