/*  session.h: the worker's side of the protocol (docs/protocol.md §6) as a
    state machine that reads no clock and touches no socket. The worker loop
    feeds it events (a broker message, a finished job, a signal, the time) with
    the current time and carries out the actions it queues: connect, send,
    start the job, close, exit. So every decision (when to heartbeat, when the
    broker is dead, what credit to offer, which ack to send again, when the
    watchdog fires) is tested with a clock moved by hand.

    Three states: the link to the broker (oq_link_state_t), the handler
    slot (idle, running a job, or probing), and whether the worker is available
    or paused because a handler reported what it needs (its database) as
    unavailable. The rules they keep:
    - at most `limit` jobs are the worker's at once (running, or held in
      delivery order for when no handler runs), counting the credit the
      broker still holds for it: ready offers what is free of them (none
      while stopping or paused, none for an ack owed that will give it
      back), and the ack of each job run gives its credit back while the
      worker holds fewer than the limit (and has not paused or begun to
      stop meanwhile); with a limit of 1 that is one credit out, offered
      only when idle. With a fixed prefetch the limit is it; with auto it
      follows the handlers' run times (prefetch.h), from 1 up to the
      prefetch: a limit that grows gives the new credit with a ready after
      an ack, one that shrinks keeps the credit of the acks until the jobs
      the worker holds and the credit out have run down to it, and
      deliveries the broker sent on older credit are still taken;
    - a held job is the worker's from its delivery (its lease runs from
      then): it is started, with a touch that restarts its lease if it
      waited OQ_WORKER_TOUCH_MIN_MS or more, unless it waited half its
      timeout or more, the job before it has run OQ_WORKER_HOLD_MAX_MS
      (OQ_WORKER_PREFETCH_AUTO_HOLD_MS with auto; then its credit waits
      for that job's end), or the worker stops or
      pauses: then it is handed back unrun (return, held), using no try;
      on a lost link or a broker
      that forgot the worker it is dropped, as the broker gives its lease
      back itself;
    - the jobs are the worker's, decoded once as they arrived (runner.h):
      the session keeps each one it takes, running or held, in its own
      ring without reading it, and gives each back in exactly one action,
      START_JOB to run it or DROP_HELD to let it go;
    - when no handler runs, the oldest held jobs of a type with a
      batch function go together in one call (as many as follow each other
      in the ring, up to the type's most and --batch); each is acked on
      its own, and the watchdog runs at the smallest of their timeouts;
    - a paused worker takes no job: it tells the broker (status), probes
      what its handler declared after a pause that doubles from
      OQ_WORKER_PROBE_MIN_MS to OQ_WORKER_PROBE_MAX_MS with jitter, and when
      a probe answers says ready and gives its credit again;
    - after idle_release_ms without a job the handlers release what they
      hold (their database connections);
    - an ack is owed until the broker has been heard from after it was sent;
      one still owed when the link goes down is sent again on the next link
      (acks are idempotent);
    - time the process did not run is neither broker silence nor handler
      time (oq_session_on_stall). */
#ifndef ONCEQ_WORKER_SESSION_H
#define ONCEQ_WORKER_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner.h"
#include "onceq/proto.h"

typedef enum {
    OQ_LINK_DOWN,        /* no socket; a new one is opened at the reconnect time */
    OQ_LINK_REGISTERING, /* ready sent, welcome not yet received */
    OQ_LINK_UP,          /* registered: heartbeats flow both ways */
} oq_link_state_t;

typedef enum {
    OQ_ACTION_CONNECT,   /* open a fresh socket (a new identity) to the broker */
    OQ_ACTION_CLOSE,     /* close the socket, dropping what it still holds */
    OQ_ACTION_SEND,      /* send one message: cmd, with credit (ready) or ack (ack, touch) */
    OQ_ACTION_START_JOB, /* run jobs: the job just received, or (held) the
                            count oldest held ones, as one batch if more */
    OQ_ACTION_DROP_HELD, /* the oldest held job is handed back or given up:
                            job is the worker's again, to free */
    OQ_ACTION_PROBE,     /* probe the resource of type */
    OQ_ACTION_RELEASE,   /* release every resource */
    OQ_ACTION_EXIT,      /* flush and close the socket, then exit with status */
} oq_action_kind_t;

typedef struct {
    oq_action_kind_t kind;
    oq_cmd_t cmd;     /* SEND: ready, heartbeat, ack, touch, status, drain or disconnect */
    uint32_t credit;  /* SEND ready */
    oq_ack_msg_t ack; /* SEND ack (ack.error borrowed until the next event); touch:
                         id, attempt and lease */
    /* SEND status: the state, how long the worker has been in it, and the
       error that paused it (borrowed until the next event; "" when ready). */
    oq_worker_status_t state;
    int64_t state_ms;
    const char *error;
    bool held;      /* START_JOB: the oldest held jobs, not the one received */
    uint32_t count; /* START_JOB: how many (a batch of one type if more than 1) */
    /* START_JOB: the count jobs, in order (the array is borrowed until the
       next event; the jobs are the worker's, to free once reported). */
    oq_runner_job_t *const *jobs;
    oq_runner_job_t *job;           /* DROP_HELD: the job let go */
    char type[OQ_MAX_NAME_LEN + 1]; /* PROBE: whose resource */
    int status;                     /* EXIT: the process exit status */
} oq_action_t;

typedef struct {
    uint32_t heartbeat_ms;   /* until the broker's welcome says otherwise */
    uint32_t liveness;       /* heartbeats of silence that make the broker dead */
    int64_t idle_release_ms; /* release resources after this long without a job; 0: never */
    uint64_t seed;           /* for the probes' jitter; 0 is taken as 1 */
    uint32_t prefetch;       /* jobs the worker may hold at once, running one included
                                (1 ... OQ_WORKER_PREFETCH_MAX); 0 is taken as 1;
                                with prefetch_auto the most the limit may grow to */
    bool prefetch_auto;      /* the limit follows the handlers' run times (prefetch.h) */
    uint32_t batch;          /* --batch: the most jobs of a batch, whatever the type's
                                own most; 0 or 1: no batches */
} oq_session_config_t;

typedef struct oq_session oq_session_t;

/* A session with no link; its first action (on the first tick) is to
   connect. */
oq_session_t *oq_session_new(const oq_session_config_t *config, int64_t now_ms);

/* Free the session and set *self_p to NULL. */
void oq_session_destroy(oq_session_t **self_p);

/* Type has a batch function for up to max_jobs jobs a call (capped by the
   config's batch): when no handler runs and the oldest held jobs
   are two or more of that type, they start together. With --prefetch
   auto the limit may then grow to one batch of it behind the running job
   (up to OQ_WORKER_PREFETCH_AUTO_BATCH_CAP in all). Before the first
   connection. */
void oq_session_set_batch(oq_session_t *self, const char *type, size_t max_jobs);

/* A decoded message from the broker other than a delivery (those go to
   oq_session_on_job). */
void oq_session_on_message(oq_session_t *self, const oq_msg_t *msg, int64_t now_ms);

/* One delivery from the broker (a "job" message, or an entry of "jobs"):
   envelope is its decoded fields (read now, not kept), job what the
   worker made of it to run. true: the session took job, started (an
   action START_JOB) or held, and gives it back in an action; false: it
   did not (refused with its ack queued, or the link is down), and job is
   still the caller's. */
bool oq_session_on_job(oq_session_t *self, const oq_job_msg_t *envelope, oq_runner_job_t *job,
                       int64_t now_ms);

/* A frame from the broker that did not decode: still a sign of life. */
void oq_session_on_garbage(oq_session_t *self, int64_t now_ms);

/* A job the worker could not decode but whose id and attempt it read: it
   counts as done with outcome fail and reason as the error. */
void oq_session_on_bad_job(oq_session_t *self, uint64_t id, uint32_t attempt, const char *reason,
                           int64_t now_ms);

/* The same, echoing the delivery's lease token (has_lease: the broker sent one). */
void oq_session_on_bad_job_leased(oq_session_t *self, uint64_t id, uint32_t attempt, bool has_lease,
                                  uint64_t lease, const char *reason, int64_t now_ms);

/* The report on a running job (each job of a batch has its
   own; the next jobs start after the last). */
void oq_session_on_done(oq_session_t *self, const oq_job_done_t *done, int64_t now_ms);

/* The answer to a probe: the worker takes jobs again if it
   answers (or there was nothing to check), or probes again later. */
void oq_session_on_probed(oq_session_t *self, const oq_probe_done_t *probed, int64_t now_ms);

/* The running job's handler is making progress (oq_job_touch): send touch
   so the broker restarts the lease at now + retry_after, and restart the
   watchdog at now + the job's timeout, which is shorter than retry_after
   by the margin, so the lease still outlasts the handler's time limit.
   Only with a link up (the touch must be able to reach the broker) and at
   most once per OQ_WORKER_TOUCH_MIN_MS; otherwise nothing changes. Returns
   true if a touch was queued. */
bool oq_session_on_touch(oq_session_t *self, uint64_t id, int64_t now_ms);

/* SIGTERM or SIGINT: take nothing new, finish the job, ack, exit 0. */
void oq_session_on_signal(oq_session_t *self, int64_t now_ms);

/* A message could not be queued on the socket: the link is treated as lost. */
void oq_session_on_send_error(oq_session_t *self, int64_t now_ms);

/* The process may not have run for up to stalled_ms before now_ms (the
   loop found that much time it cannot account for). The broker's silence
   and the handler's time limit are counted from later by as much, but never
   from later than now. */
void oq_session_on_stall(oq_session_t *self, int64_t stalled_ms, int64_t now_ms);

/* Time has passed: heartbeat, declare the broker dead, reconnect, or fire
   the watchdog, as due. */
void oq_session_on_tick(oq_session_t *self, int64_t now_ms);

/* The oldest held job, taken out of the session without a word (NULL when
   it holds none): for a worker whose loop ended without the session's
   exit (which hands them all back), to free what it still holds before
   it destroys the session. */
oq_runner_job_t *oq_session_take_held(oq_session_t *self);

/* Take the next queued action: 0 with *action filled, -1 if none is queued.
   The worker carries out every action before the next event. */
int oq_session_next(oq_session_t *self, oq_action_t *action);

/* The time of the next tick that has something to do (INT64_MAX if none). */
int64_t oq_session_deadline(const oq_session_t *self);

/* State, for the worker's logs and for tests. */
oq_link_state_t oq_session_link(const oq_session_t *self);
bool oq_session_busy(const oq_session_t *self);
size_t oq_session_held(const oq_session_t *self);
/* Jobs the worker may hold now, the running one included (the prefetch,
   or with auto what the run times allow). */
uint32_t oq_session_limit(const oq_session_t *self);
/* The most the limit may be: the prefetch, raised with auto for a type
   that takes batches (oq_session_set_batch). */
uint32_t oq_session_prefetch(const oq_session_t *self);
bool oq_session_unavailable(const oq_session_t *self);
bool oq_session_exiting(const oq_session_t *self);
uint32_t oq_session_heartbeat_ms(const oq_session_t *self);

#endif
