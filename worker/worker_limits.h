/*  worker_limits.h: the timers and limits only onceq-worker uses, in one
    place and with their units in the names. The ones the protocol or other
    parts share (reconnect backoff, exit statuses, the first restart delay)
    live in onceq/limits.h; the database's are libonceq-effects' own. */
#ifndef ONCEQ_WORKER_LIMITS_H
#define ONCEQ_WORKER_LIMITS_H

/* Handlers one registry holds. A worker registers a handful; the bound only
   keeps a runaway registration loop from eating memory. */
#define OQ_WORKER_MAX_HANDLERS 1024

/* How long a stopping worker keeps trying to deliver its last messages (the
   final ack, disconnect) before it exits anyway. */
#define OQ_WORKER_LINGER_MS 1000

/* Between two turns of the worker loop, this much time beyond what it asked
   poll to wait means the process did not run (SIGSTOP, a suspended VM, a
   starved machine). That time is neither silence from the broker nor time
   the handler spent running, so deadlines move on by it. */
#define OQ_WORKER_STALL_MS 50

/* A handler's touches (oq_job_touch) are sent at most this often; one in
   between changes nothing, so a handler may call it in a tight loop. */
#define OQ_WORKER_TOUCH_MIN_MS 250

/* Handlers run on the worker's main thread; a handler that has run this
   long (found within twice this) has the keeper thread take over the link
   until it returns: heartbeats, touches, held jobs handed back, signals,
   the watchdog. Well below the heartbeat and OQ_WORKER_HOLD_MAX_MS; with a
   short heartbeat, a quarter of it instead. */
#define OQ_WORKER_KEEPER_MS            20
#define OQ_WORKER_KEEPER_PER_HEARTBEAT 4
/* After this long without a handler starting, the keeper stops waking and
   sleeps until one starts (an idle worker then wakes once a heartbeat). */
#define OQ_WORKER_KEEPER_IDLE_MS 1000

/* Acks of held jobs that ran back to back: while the next held job is
   waiting, the acks made since the first of them may wait up to this long
   (and up to half the prefetch in number) to go as one message; anything
   else the loop does sends them at once, and a long next job has the
   keeper send them within OQ_WORKER_KEEPER_MS or two. The keeper's
   patience, as long as one long job can already hold acks back: every
   message saved is a wake-up of both sides' ZeroMQ I/O threads and a turn
   of the broker's loop, and jobs that wait a few ms on a busy database
   (or on a CPU) still go several to a message. */
#define OQ_WORKER_ACK_GATHER_US (OQ_WORKER_KEEPER_MS * 1000)

/* --prefetch: the most jobs one worker may hold at once, the running one
   included. Each held job waits behind the ones before it, so a handful
   is all a fleet of workers can use without starving its neighbours. */
#define OQ_WORKER_PREFETCH_MAX 64

/* --prefetch auto (the default): the worker holds as many jobs as fit
   this much expected work behind the running one, from the moving
   average of its handlers' run times (prefetch.h), and at most the cap:
   sub-millisecond jobs hold the cap, jobs of more than 4 ms one at a time.
   The budget is what a held job may expect to wait; a round trip to the
   broker, which holding saves, is a few hundred µs. */
#define OQ_WORKER_PREFETCH_AUTO_CAP  8
#define OQ_WORKER_PREFETCH_BUDGET_US 4000
/* With auto, a worker with a type that takes batches (--batch above 1)
   may hold one full batch of it behind the running job, up to this in
   all: held jobs of such a type wait about one call between them, and are
   charged so (prefetch.h). */
#define OQ_WORKER_PREFETCH_AUTO_BATCH_CAP 33
/* With auto, a job that has run this long was not what the average
   promised: the jobs held behind it go back at once (found within the
   keeper's patience, OQ_WORKER_KEEPER_MS, or twice it), instead of after
   OQ_WORKER_HOLD_MAX_MS. */
#define OQ_WORKER_PREFETCH_AUTO_HOLD_MS 20

/* A held job waits at most this long behind a job that runs (with a fixed
   --prefetch N): past it the worker hands its held jobs back (unrun, no
   try used) for the workers that are free, and takes no more until the
   running job ends. */
#define OQ_WORKER_HOLD_MAX_MS 1000

/* Broker messages read per loop turn, so a flood cannot starve the job
   thread's report or a signal. */
#define OQ_WORKER_BATCH_MSGS 64

/* A worker paused because its handler reported unavailable (its database
   is down) probes after a pause that starts here and doubles per failed
   probe up to the maximum; each pause is drawn from its upper half, so
   that a fleet that paused together does not probe in step. */
#define OQ_WORKER_PROBE_MIN_MS 100
#define OQ_WORKER_PROBE_MAX_MS 5000

/* --idle-release: after this long without a job, handlers let go of their
   connections (oq_registry_set_resource), so an idle fleet holds none. */
#define OQ_WORKER_IDLE_RELEASE_MS 30000

/* Supervisor: a worker that lived at least this long before it died gets the
   first restart delay again; one that died sooner doubles it ... */
#define OQ_SUPERVISOR_STABLE_MS 1000
/* ... up to this. */
#define OQ_SUPERVISOR_RESTART_MAX_MS 5000

/* Supervisor: how long workers get to finish their jobs after SIGTERM before
   they are killed. A worker's own watchdog ends a job at its timeout (60 s by
   default), so this is that plus room to ack, and below systemd's default
   stop timeout of 90 s. */
#define OQ_SUPERVISOR_STOP_MS 75000

#endif
