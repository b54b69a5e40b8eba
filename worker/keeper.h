/*  keeper.h: who keeps the worker's link while a handler runs. Handlers,
    batch functions, probes and releases run on the worker's main thread, so
    a short job costs no hand-over to another thread. The link (the session
    and the broker socket) belongs to whoever holds the loop: the main
    thread holds it except while it is inside handler code. A second
    thread, the keeper, wakes every patience ms; when it finds the same
    handler still running that it saw on its last wake, it takes the loop
    and runs the worker's loop turns (heartbeats, touches, held jobs handed
    back, signals, the watchdog) until the handler returns, which wakes it
    through an fd its turns poll. ZeroMQ lets a socket move between threads
    behind a full memory barrier; the loop's mutex is that barrier.

    A touch from handler code (oq_job_touch) is queued here for whoever
    holds the loop next; so is the time the process did not run while a
    handler ran that the keeper noticed (SIGSTOP), which only the holder of
    the loop may tell the session. */
#ifndef ONCEQ_WORKER_KEEPER_H
#define ONCEQ_WORKER_KEEPER_H

#include <stdint.h>

/* One turn of the worker's loop, on the keeper's thread: poll wake_fd
   beside the loop's own fds (and read it when ready). 0 to go on, -1 once
   the loop has finished. */
typedef int (*oq_keeper_turn_fn)(void *arg, int wake_fd);

typedef struct oq_keeper oq_keeper_t;

/* Start the keeper; the calling thread holds the loop from here on. NULL
   if the thread or its fd cannot be had. */
oq_keeper_t *oq_keeper_new(oq_keeper_turn_fn turn, void *arg, int64_t patience_ms);

/* Stop the keeper (called by the thread that holds the loop, outside
   handler code), free, and set *self_p to NULL. */
void oq_keeper_destroy(oq_keeper_t **self_p);

/* How long a handler may run before the keeper takes the loop, from its
   next wake (so a handler is covered within twice this); at least 1. */
void oq_keeper_set_patience(oq_keeper_t *self, int64_t patience_ms);

/* The main thread enters handler code: it gives up the loop. */
void oq_keeper_leave(oq_keeper_t *self);

/* The main thread is back from handler code: it holds the loop again
   (waking the keeper and waiting for it if it had taken the loop). */
void oq_keeper_enter(oq_keeper_t *self);

/* From handler code: queue a touch of job id for whoever holds the loop,
   waking the keeper if it holds it (at most once per
   OQ_WORKER_TOUCH_MIN_MS). 0. */
int oq_keeper_touch(oq_keeper_t *self, uint64_t id);

/* For the holder of the loop: the touch queued since the last call (0:
   none), and the ms the process did not run while a handler ran that the
   keeper noticed since the last call. Each call empties what it returns. */
uint64_t oq_keeper_take_touch(oq_keeper_t *self);
int64_t oq_keeper_take_stall(oq_keeper_t *self);

/* How often the keeper has taken the loop (for tests and logs). */
uint64_t oq_keeper_takeovers(const oq_keeper_t *self);

#endif
