/*  worker.c: the worker's loop and the handlers' calls. One loop turn: poll
    the signalfd and the broker socket until the session's next deadline;
    read everything that came from the broker, then signals; then let the
    session act on the time. Reading before acting on the time matters after
    the process was stopped (SIGSTOP): what the broker sent meanwhile is
    proof of life and must be seen before the broker is declared dead; and
    the time the process was stopped is not held against the broker or the
    handler (oq_session_on_stall).

    What the session asks to run (a job, a batch, a probe, a release) is
    queued as work and run by the main thread between turns, outside the
    loop: the keeper (keeper.h) runs the turns meanwhile if it takes long,
    so a short job is one turn and one call, on one thread.

    A message that carries jobs ("job", or several in "jobs") is decoded
    once, as it arrives: each job becomes what its handler gets
    (oq_runner_job_t), its names copied and its payload the map in the
    decoded message, which stays alive while any of its jobs does. The
    session keeps the jobs it takes, held or running, and gives each back
    in the action that runs it or lets it go; nothing here keeps a second
    list of them. */
#include "worker.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <zmq.h>

#include "keeper.h"
#include "onceq/clock.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "onceq/zpoll.h"
#include "registry.h"
#include "runner.h"
#include "session.h"
#include "worker_limits.h"

/* A message from the broker that carried jobs, decoded once: each of its
   jobs points into it (the payload), so it lives as long as any of them. */
typedef struct {
    oq_msg_t msg;
    uint32_t refs; /* its jobs alive (held, queued or running), and its reader */
} s_delivery_t;

/* One job of it: what the runner gets (first: it is the session's handle
   of the job too), and the message it points into. */
typedef struct {
    oq_runner_job_t run;
    s_delivery_t *from;
} s_job_t;

/* What the session asked to run, waiting for the main thread to leave the
   loop: the session starts at most one job or batch, probe or release at a
   time, and a release may be followed by a job while it runs. */
typedef enum {
    S_WORK_JOBS,    /* jobs: one job, or a batch of one type */
    S_WORK_PROBE,   /* type: probe its resource */
    S_WORK_RELEASE, /* release every resource */
} s_work_kind_t;

typedef struct {
    s_work_kind_t kind;
    oq_runner_job_t *jobs[OQ_WORKER_PREFETCH_MAX]; /* JOBS: the session's START_JOB */
    size_t count;                                  /* JOBS: how many */
    char type[OQ_MAX_NAME_LEN + 1];
} s_work_t;

#define S_WORK_MAX 4

typedef struct {
    const oq_worker_config_t *config;
    const oq_clock_t *clock;
    void *ctx;               /* the broker socket's context */
    void *socket;            /* DEALER to the broker; NULL while the link is down */
    oq_zsock_t link;         /* the socket as the loop waits on it, while there is one */
    oq_registry_t *registry; /* the handlers; used by the main thread only */
    oq_keeper_t *keeper;     /* holds the loop while a handler runs long */
    oq_session_t *session;   /* decides; this module only carries out */
    int signal_fd;           /* SIGTERM and SIGINT */
    /* Announced in ready: the registry's types, the configured queues. */
    const char *types[OQ_MAX_WORKER_TYPES];
    size_t type_count;
    const char *queues[OQ_MAX_WORKER_QUEUES];
    /* The work queued, oldest first. */
    s_work_t work[S_WORK_MAX];
    size_t work_head, work_count;
    /* The loop's clock: the last tick, and how much of the time since it
       poll was asked to wait. After handler code (resume) it starts again
       from the next turn, whichever thread runs it. */
    int64_t last_tick, waited_ms;
    bool resume;
    bool finished; /* the loop ends; status is the exit status */
    int status;
    /* Acks in one message: the most the broker's welcome allowed on this
       link (0: one "ack" message each), and the acks made since the last
       send, which go out together before anything else is sent and before
       the loop waits (s_flush_acks), with their errors copied. */
    uint32_t acks_per_msg;
    oq_ack_msg_t acks[OQ_MAX_ACKS_PER_MSG];
    char ack_errors[OQ_MAX_ACKS_PER_MSG][OQ_MAX_ERROR_LEN + 1];
    size_t ack_count;
    int64_t first_ack_us; /* when the oldest of them was made */
} s_worker_t;

static void s_act(s_worker_t *self);
static void s_flush_acks(s_worker_t *self);

static int64_t s_now(const s_worker_t *self)
{
    return oq_clock_now_ms(self->clock);
}

/* With CURVE: the broker's key and our pair on a socket not yet connected. */
static int s_curve(const s_worker_t *self)
{
    const oq_worker_config_t *c = self->config;
    if (!c->curve)
        return 0;
    return zmq_setsockopt(self->socket, ZMQ_CURVE_SERVERKEY, c->broker_key, OQ_KEY_Z85_LEN) ||
                   zmq_setsockopt(self->socket, ZMQ_CURVE_PUBLICKEY, c->pair.public_z85,
                                  OQ_KEY_Z85_LEN) ||
                   zmq_setsockopt(self->socket, ZMQ_CURVE_SECRETKEY, c->pair.secret_z85,
                                  OQ_KEY_Z85_LEN)
               ? -1
               : 0;
}

static void s_open(s_worker_t *self)
{
    assert(!self->socket);
    int linger_ms = 0; /* a socket closed on a lost link drops what it held */
    self->socket = zmq_socket(self->ctx, ZMQ_DEALER);
    if (!self->socket || zmq_setsockopt(self->socket, ZMQ_LINGER, &linger_ms, sizeof linger_ms) ||
        s_curve(self) < 0 || zmq_connect(self->socket, self->config->endpoint) < 0 ||
        oq_zsock_init(&self->link, self->socket) < 0) {
        oq_error("cannot connect to %s: %s", self->config->endpoint, zmq_strerror(errno));
        if (self->socket)
            zmq_close(self->socket);
        self->socket = NULL;
        self->finished = true;
        self->status = OQ_EXIT_BROKEN;
        return;
    }
    oq_info("connecting to %s%s", self->config->endpoint,
            self->config->curve ? " (CURVE)" : " (plaintext)");
}

static void s_close(s_worker_t *self)
{
    s_flush_acks(self);
    self->acks_per_msg = 0; /* until the next link's welcome */
    if (self->socket)
        zmq_close(self->socket);
    self->socket = NULL;
}

/* Queue buf's message on the socket; a failure is a lost link. */
static void s_send_buf(s_worker_t *self, const msgpack_sbuffer *buf, const char *what)
{
    int rc = zmq_send(self->socket, buf->data, buf->size, ZMQ_DONTWAIT);
    oq_zsock_used(&self->link);
    if (rc < 0) {
        oq_warn("cannot send %s to the broker: %s", what, zmq_strerror(errno));
        oq_session_on_send_error(self->session, s_now(self));
    } else {
        oq_debug("sent %s", what);
    }
}

/* Send the acks gathered since the last send: one "ack" alone, several as
   one "acks" message (docs/protocol.md, "Several jobs or acks per message"). */
static void s_flush_acks(s_worker_t *self)
{
    if (self->ack_count == 0)
        return;
    size_t count = self->ack_count;
    self->ack_count = 0;
    if (!self->socket)
        return;
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    if (count == 1)
        oq_proto_encode_ack(&buf, &self->acks[0]);
    else
        oq_proto_encode_acks(&buf, self->acks, count);
    /* The debug log says how many, as "received jobs (N)" does. */
    const char *what = count == 1 ? "ack" : "acks";
    char several[sizeof "acks (18446744073709551615)"];
    if (count > 1 && oq_log_enabled(OQ_LOG_DEBUG)) {
        snprintf(several, sizeof several, "acks (%zu)", count);
        what = several;
    }
    s_send_buf(self, &buf, what);
    msgpack_sbuffer_destroy(&buf);
}

/* Keep an ack for s_flush_acks, which goes at once if the message is full. */
static void s_gather_ack(s_worker_t *self, const oq_ack_msg_t *ack)
{
    size_t i = self->ack_count++;
    if (i == 0)
        self->first_ack_us = oq_clock_mono_us();
    self->acks[i] = *ack;
    oq_str_copy(ack->error, self->ack_errors[i], sizeof self->ack_errors[i]);
    self->acks[i].error = oq_str(self->ack_errors[i]);
    if (self->ack_count >= self->acks_per_msg || self->ack_count >= OQ_MAX_ACKS_PER_MSG)
        s_flush_acks(self);
}

static void s_send(s_worker_t *self, const oq_action_t *action)
{
    assert(self->socket);
    if (action->cmd == OQ_CMD_ACK && self->acks_per_msg > 1) {
        s_gather_ack(self, &action->ack);
        return;
    }
    /* Whatever was sent before this goes before it. */
    s_flush_acks(self);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    switch (action->cmd) {
    case OQ_CMD_READY:
        oq_proto_encode_ready_multi(&buf, action->credit, self->config->name, (uint32_t)getpid(),
                                    self->types, self->type_count, self->queues,
                                    self->config->queue_count, oq_session_prefetch(self->session));
        break;
    case OQ_CMD_ACK:
        oq_proto_encode_ack(&buf, &action->ack);
        break;
    case OQ_CMD_TOUCH:
        oq_proto_encode_touch(&buf, &action->ack);
        break;
    case OQ_CMD_STATUS:
        oq_proto_encode_status(&buf, action->state, action->state_ms, action->error);
        break;
    default:
        oq_proto_encode_simple(&buf, action->cmd, -1);
        break;
    }
    s_send_buf(self, &buf, oq_proto_cmd_name(action->cmd));
    msgpack_sbuffer_destroy(&buf);
}

/* Queue work for the main thread; the session never asks for more at once. */
static s_work_t *s_push_work(s_worker_t *self, s_work_kind_t kind)
{
    assert(self->work_count < S_WORK_MAX);
    s_work_t *work = &self->work[(self->work_head + self->work_count) % S_WORK_MAX];
    work->kind = kind;
    work->count = 0;
    work->type[0] = 0;
    self->work_count++;
    return work;
}

/* One of the message's jobs, or its reader, is done with it: the last
   frees it. */
static void s_delivery_unref(s_delivery_t *delivery)
{
    assert(delivery->refs > 0);
    if (--delivery->refs == 0) {
        oq_proto_msg_release(&delivery->msg);
        free(delivery);
    }
}

/* Let a job go (run and reported, handed back, dropped or refused), and
   with the last of its message's jobs the message. */
static void s_job_free(oq_runner_job_t *run)
{
    s_job_t *job = (s_job_t *)run; /* run is its first member */
    s_delivery_t *from = job->from;
    free(job);
    s_delivery_unref(from);
}

/* Run the jobs the session started: the one just received, or held ones. */
static void s_start_jobs(s_worker_t *self, const oq_action_t *action)
{
    assert(action->count >= 1 && action->count <= OQ_WORKER_PREFETCH_MAX);
    s_work_t *work = s_push_work(self, S_WORK_JOBS);
    memcpy(work->jobs, action->jobs, action->count * sizeof *work->jobs);
    work->count = action->count;
}

/* Stop talking to the broker: give the last messages up to the linger time
   to leave (terminating the context waits for exactly that), then exit or
   end the loop. */
static void s_exit(s_worker_t *self, int status)
{
    s_flush_acks(self);
    if (self->socket) {
        int linger_ms = OQ_WORKER_LINGER_MS;
        zmq_setsockopt(self->socket, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
        s_close(self);
    }
    while (zmq_ctx_term(self->ctx) < 0 && errno == EINTR)
        ;
    self->ctx = NULL;
    oq_info("exiting with status %d", status);
    if (status == OQ_EXIT_TIMEOUT) {
        /* The main thread is still inside the handler and cannot be
           waited for; nothing else needs cleaning up in a process that
           ends now. */
        _exit(status);
    }
    self->finished = true;
    self->status = status;
}

static void s_act(s_worker_t *self)
{
    oq_action_t action;
    while (!self->finished && oq_session_next(self->session, &action) == 0) {
        switch (action.kind) {
        case OQ_ACTION_CONNECT:
            s_open(self);
            break;
        case OQ_ACTION_CLOSE:
            s_close(self);
            break;
        case OQ_ACTION_SEND:
            s_send(self, &action);
            break;
        case OQ_ACTION_START_JOB:
            s_start_jobs(self, &action);
            break;
        case OQ_ACTION_DROP_HELD:
            s_job_free(action.job);
            break;
        case OQ_ACTION_PROBE:
            snprintf(s_push_work(self, S_WORK_PROBE)->type, sizeof action.type, "%s", action.type);
            break;
        case OQ_ACTION_RELEASE:
            s_push_work(self, S_WORK_RELEASE);
            break;
        case OQ_ACTION_EXIT:
            s_exit(self, action.status);
            break;
        }
    }
}

/* The jobs of a decoded "job" or "jobs" message, one by one, each as the
   session sees a delivery: an entry that does not decode is failed as a
   "job" that does not would be (by its id, attempt and lease, if they can
   be read), without its neighbours. */
static void s_handle_jobs(s_worker_t *self, s_delivery_t *delivery, int64_t now)
{
    const oq_msg_t *msg = &delivery->msg;
    uint32_t count = msg->cmd == OQ_CMD_JOBS ? oq_proto_entry_count(msg) : 1;
    for (uint32_t i = 0; i < count && !self->finished; i++) {
        oq_job_msg_t envelope;
        const msgpack_object *payload;
        oq_err_t code;
        char reason[256];
        if (oq_proto_decode_delivery(msg, i, &envelope, &payload, &code, reason, sizeof reason) <
            0) {
            uint64_t id, lease;
            uint32_t attempt;
            bool has_lease;
            if (oq_proto_entry_ids(msg, i, &id, &attempt, &has_lease, &lease) == 0) {
                oq_session_on_bad_job_leased(self->session, id, attempt, has_lease, lease, reason,
                                             now);
            } else {
                oq_warn("ignoring job %u of %u from the broker, which does not decode (%s): %s",
                        i + 1, count, oq_proto_err_name(code), reason);
                oq_session_on_garbage(self->session, now);
            }
            s_act(self);
            continue;
        }
        s_job_t *job = malloc(sizeof *job);
        assert(job);
        oq_runner_job_init(&job->run, &envelope, payload);
        job->from = delivery;
        delivery->refs++;
        if (!oq_session_on_job(self->session, &envelope, &job->run, now))
            s_job_free(&job->run);
        s_act(self);
    }
}

static void s_handle_frame(s_worker_t *self, zmq_msg_t *frame)
{
    oq_err_t code;
    char reason[256];
    int64_t now = s_now(self);
    /* On the heap from the start: if it carries jobs, they point into it.
       Their fields are decoded one by one (s_handle_jobs), a lone job's
       too, so that a bad one is failed alone and no job is decoded twice. */
    s_delivery_t *delivery = malloc(sizeof *delivery);
    assert(delivery);
    delivery->refs = 1; /* this reader's, until the last entry is handled */
    oq_msg_t *msg = &delivery->msg;
    int rc = oq_proto_decode_shallow(msg, zmq_msg_data(frame), zmq_msg_size(frame), &code, reason,
                                     sizeof reason);
    if (rc == 0 && (msg->cmd == OQ_CMD_JOB || msg->cmd == OQ_CMD_JOBS)) {
        if (msg->cmd == OQ_CMD_JOBS)
            oq_debug("received jobs (%u)", oq_proto_entry_count(msg));
        else
            oq_debug("received job");
        s_handle_jobs(self, delivery, now);
    } else if (rc == 0) {
        oq_debug("received %s", oq_proto_cmd_name(msg->cmd));
        if (msg->cmd == OQ_CMD_WELCOME)
            self->acks_per_msg = msg->acks_per_msg;
        oq_session_on_message(self->session, msg, now);
        s_act(self);
    } else {
        oq_warn("ignoring a message from the broker that does not decode (%s): %s",
                oq_proto_err_name(code), reason);
        oq_session_on_garbage(self->session, now);
    }
    s_delivery_unref(delivery);
}

/* Read until the socket is empty, which is what lets the loop wait on its
   descriptor next (onceq/zpoll.h), or until the turn's share is read. */
static void s_read_broker(s_worker_t *self)
{
    for (int i = 0; self->socket && !self->finished; i++) {
        if (i == OQ_WORKER_BATCH_MSGS) {
            oq_zsock_used(&self->link); /* more may wait: the next turn looks first */
            break;
        }
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, self->socket, ZMQ_DONTWAIT) < 0) {
            oq_zsock_recv_failed(&self->link, errno);
            zmq_msg_close(&frame);
            break;
        }
        if (zmq_msg_more(&frame)) {
            /* The protocol is one frame per message; skip the rest whole. */
            oq_warn("ignoring a message of more than one frame from the broker");
            while (zmq_msg_more(&frame) && zmq_msg_recv(&frame, self->socket, 0) >= 0)
                ;
            oq_session_on_garbage(self->session, s_now(self));
        } else {
            s_handle_frame(self, &frame);
        }
        zmq_msg_close(&frame);
    }
}

static void s_read_signals(s_worker_t *self)
{
    struct signalfd_siginfo info;
    while (!self->finished && read(self->signal_fd, &info, sizeof info) == sizeof info) {
        oq_info("received %s", strsignal((int)info.ssi_signo));
        oq_session_on_signal(self->session, s_now(self));
        s_act(self);
    }
}

/* Tell the session what happened while handler code ran and nobody, or
   the keeper, held the loop: time the process did not run, a touch. */
static void s_catch_up(s_worker_t *self)
{
    int64_t now = s_now(self);
    if (self->resume) {
        self->last_tick = now;
        self->waited_ms = 0;
        self->resume = false;
    }
    int64_t stalled_ms = oq_keeper_take_stall(self->keeper);
    if (stalled_ms > 0)
        oq_session_on_stall(self->session, stalled_ms, now);
    uint64_t touch = oq_keeper_take_touch(self->keeper);
    if (touch) {
        oq_session_on_touch(self->session, touch, now);
        s_act(self);
    }
}

/* Whether the acks made so far may wait for the held job the main thread
   is about to run (OQ_WORKER_ACK_GATHER_US): fast jobs then ack several to
   a message, and the broker leases their successors as one. Never more
   than half the prefetch limit, so that the next jobs are on their way
   while the rest run. */
static bool s_gathering_acks(const s_worker_t *self)
{
    uint32_t most = oq_session_limit(self->session) / 2;
    return self->ack_count > 0 && self->ack_count < most && self->work_count &&
           oq_clock_mono_us() - self->first_ack_us < OQ_WORKER_ACK_GATHER_US;
}

/* One turn of the loop. wake_fd >= 0: the keeper runs it, and polls its
   fd too. 0, or -1 once the loop has finished. */
static int s_turn(s_worker_t *self, int wake_fd)
{
    s_catch_up(self);
    if (self->finished)
        return -1;
    /* Since the last tick the loop either waited in poll, as it asked, or
       ran, which takes a blink. Anything more means the process did not
       run (SIGSTOP) somewhere in that time: in the wait or in the reading,
       wherever the stop fell. All of it counts as not running, so that a
       handler that would have finished within its timeout still has the
       time it needs. */
    int64_t now = s_now(self);
    if (now - self->last_tick - self->waited_ms > OQ_WORKER_STALL_MS)
        oq_session_on_stall(self->session, now - self->last_tick, now);
    self->last_tick = now;
    oq_session_on_tick(self->session, now);
    s_act(self);
    if (self->finished)
        return -1;
    /* Held jobs ran back to back: the next one first, then the acks and a
       look at what came in. */
    if (wake_fd < 0 && s_gathering_acks(self))
        return 0;

    int64_t before = s_now(self);
    int64_t wait_ms = oq_session_deadline(self->session) - before;
    /* The main thread has work waiting: only a look at what came in. */
    if (wait_ms < 0 || (wake_fd < 0 && self->work_count))
        wait_ms = 0;
    if (wait_ms > OQ_MAX_HEARTBEAT_MS)
        wait_ms = OQ_MAX_HEARTBEAT_MS;
    s_flush_acks(self); /* never held back: what this turn made goes before the wait */
    /* The signalfd, the keeper's fd on the keeper's turns, the socket
       while there is one: one poll(2), and ZMQ_EVENTS only if the socket
       was used since it was last found empty (onceq/zpoll.h). */
    oq_zpoll_item_t items[3];
    size_t count = 0;
    int wake = -1, broker = -1;
    items[count++] = (oq_zpoll_item_t){.fd = self->signal_fd};
    if (wake_fd >= 0) {
        wake = (int)count;
        items[count++] = (oq_zpoll_item_t){.fd = wake_fd};
    }
    if (self->socket) {
        broker = (int)count;
        items[count++] = (oq_zpoll_item_t){.sock = &self->link};
    }
    if (oq_zpoll(items, count, (long)wait_ms) < 0 && errno != EINTR) {
        oq_error("poll failed: %s", strerror(errno));
        self->finished = true;
        self->status = OQ_EXIT_BROKEN;
        return -1;
    }
    /* A wait that ended early was only as long as it lasted. */
    int64_t polled_ms = s_now(self) - before;
    self->waited_ms = polled_ms < wait_ms ? polled_ms : wait_ms;

    /* Only what poll found ready: each read that finds nothing is a
       system call (and for a ZeroMQ socket a getpid and a poll of its
       mailbox) spent on every turn, that is on every job. */
    if (broker >= 0 && items[broker].ready)
        s_read_broker(self);
    if (wake >= 0 && items[wake].ready) {
        uint64_t tokens;
        if (read(wake_fd, &tokens, sizeof tokens) < 0 && errno != EAGAIN)
            oq_warn("cannot read the keeper's fd: %s", strerror(errno));
    }
    if (items[0].ready)
        s_read_signals(self);
    /* The keeper learns the heartbeat the broker gave. */
    int64_t patience_ms = oq_session_heartbeat_ms(self->session) / OQ_WORKER_KEEPER_PER_HEARTBEAT;
    oq_keeper_set_patience(self->keeper,
                           patience_ms < OQ_WORKER_KEEPER_MS ? patience_ms : OQ_WORKER_KEEPER_MS);
    return self->finished ? -1 : 0;
}

static int s_keeper_turn(void *arg, int wake_fd)
{
    return s_turn(arg, wake_fd);
}

/* The one line per job that operators and tests read, written once the
   ack is on its way: a write to the log is not worth delaying it for. */
static void s_log_done(const oq_runner_job_t *job, const oq_job_done_t *done)
{
    const oq_report_t *report = &done->report;
    oq_info("job %llu type=%s attempt=%u outcome=%s ms=%lld", (unsigned long long)done->id,
            job->type, done->attempt, oq_proto_outcome_name(report->outcome),
            (long long)done->elapsed_ms);
    if (report->outcome != OQ_OUTCOME_OK)
        oq_warn("job %llu %s: %s", (unsigned long long)done->id,
                oq_proto_outcome_name(report->outcome), report->error);
}

/* Run the oldest work, outside the loop, then tell the session how it went. */
static void s_run_work(s_worker_t *self)
{
    assert(self->work_count > 0);
    /* Taken out of the ring first: turns the keeper runs meanwhile may
       queue the next work. */
    const s_work_t *slot = &self->work[self->work_head];
    s_work_kind_t kind = slot->kind;
    size_t count = slot->count;
    oq_runner_job_t *jobs[OQ_WORKER_PREFETCH_MAX];
    memcpy(jobs, slot->jobs, count * sizeof *jobs);
    char type[OQ_MAX_NAME_LEN + 1];
    memcpy(type, slot->type, sizeof type);
    self->work_head = (self->work_head + 1) % S_WORK_MAX;
    self->work_count--;

    oq_job_done_t one_done;
    oq_job_done_t *done = NULL;
    oq_probe_done_t probed;
    if (kind == S_WORK_JOBS) {
        done = count == 1 ? &one_done : calloc(count, sizeof *done);
        assert(done);
    }

    self->resume = true;
    oq_keeper_leave(self->keeper);
    switch (kind) {
    case S_WORK_JOBS:
        oq_runner_run(self->registry, jobs, count, self->keeper, done);
        break;
    case S_WORK_PROBE:
        oq_runner_probe(self->registry, type, &probed);
        break;
    case S_WORK_RELEASE:
        oq_registry_release_all(self->registry);
        break;
    }
    oq_keeper_enter(self->keeper);

    /* Unless the keeper ended the loop meanwhile: then the reports go
       with the process, as a job cut off by the exit would. */
    if (!self->finished) {
        s_catch_up(self);
        int64_t now = s_now(self);
        if (kind == S_WORK_JOBS) {
            size_t told = 0;
            for (; told < count && !self->finished; told++) {
                oq_session_on_done(self->session, &done[told], now);
                s_act(self);
            }
            /* The acks leave now unless the next held job may take them
               along (the loop's turn would send them first thing), and
               the log lines after them. */
            if (!s_gathering_acks(self))
                s_flush_acks(self);
            for (size_t i = 0; i < told; i++)
                s_log_done(jobs[i], &done[i]);
        } else if (kind == S_WORK_PROBE) {
            oq_session_on_probed(self->session, &probed, now);
            s_act(self);
        }
    }
    if (kind == S_WORK_JOBS) {
        for (size_t i = 0; i < count; i++)
            s_job_free(jobs[i]);
        if (done != &one_done)
            free(done);
    }
}

static void s_drop_work(s_worker_t *self)
{
    while (self->work_count) {
        s_work_t *work = &self->work[self->work_head];
        for (size_t i = 0; i < work->count; i++)
            s_job_free(work->jobs[i]);
        self->work_head = (self->work_head + 1) % S_WORK_MAX;
        self->work_count--;
    }
}

static void s_loop(s_worker_t *self)
{
    self->last_tick = s_now(self);
    self->waited_ms = 0;
    while (!self->finished) {
        if (s_turn(self, -1) < 0)
            break;
        if (self->work_count)
            s_run_work(self);
    }
}

int oq_worker_parse_queues(oq_worker_config_t *config, const char *text, char *reason,
                           size_t reason_len)
{
    config->queue_count = 0;
    const char *at = text;
    for (;;) {
        const char *end = strchr(at, ',');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        if (config->queue_count == OQ_MAX_WORKER_QUEUES) {
            snprintf(reason, reason_len, "queue list \"%s\" names more than %d queues", text,
                     OQ_MAX_WORKER_QUEUES);
            return -1;
        }
        if (len == 0) {
            snprintf(reason, reason_len, "queue list \"%s\" has an empty name", text);
            return -1;
        }
        if (!oq_proto_name_valid(at, len)) {
            snprintf(reason, reason_len,
                     "queue \"%.*s\" in \"%s\": a queue name is 1 to %d characters of A-Z a-z "
                     "0-9 _ . : -",
                     (int)(len > 2 * OQ_MAX_NAME_LEN ? 2 * OQ_MAX_NAME_LEN : len), at, text,
                     OQ_MAX_NAME_LEN);
            return -1;
        }
        memcpy(config->queues[config->queue_count], at, len);
        config->queues[config->queue_count][len] = 0;
        config->queue_count++;
        if (!end)
            return 0;
        at = end + 1;
    }
}

int oq_worker_run(const oq_worker_config_t *config, oq_registry_t **registry_p)
{
    assert(config && config->endpoint);
    assert(registry_p && *registry_p);
    s_worker_t self;
    memset(&self, 0, sizeof self);
    self.config = config;
    self.clock = oq_clock_system();
    self.status = OQ_EXIT_BROKEN;

    sigset_t stop_signals, old_mask;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
    self.signal_fd = signalfd(-1, &stop_signals, SFD_NONBLOCK | SFD_CLOEXEC);
    if (self.signal_fd < 0) {
        oq_error("cannot open a signalfd: %s", strerror(errno));
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
        return OQ_EXIT_BROKEN;
    }
    /* The types go to the broker in every ready; the names are the
       registry's, which lives as long as the loop. */
    size_t types = oq_registry_count(*registry_p);
    if (types > OQ_MAX_WORKER_TYPES) {
        oq_error("the worker has %zu job types; a worker can announce at most %d", types,
                 OQ_MAX_WORKER_TYPES);
        close(self.signal_fd);
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
        return OQ_EXIT_BROKEN;
    }
    if (types == 0) {
        oq_error("the worker has no job handlers registered");
        close(self.signal_fd);
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
        return OQ_EXIT_BROKEN;
    }
    /* Which types take batches, and how many jobs each: the session decides
       when, without the registry. */
    size_t batch_max[OQ_MAX_WORKER_TYPES];
    for (size_t i = 0; i < types; i++) {
        self.types[i] = oq_registry_type(*registry_p, i);
        oq_batch_fn batch;
        void *state;
        if (oq_registry_find_batch(*registry_p, self.types[i], &batch, &state, &batch_max[i]) < 0)
            batch_max[i] = 1;
    }
    self.type_count = types;
    for (size_t i = 0; i < config->queue_count; i++)
        self.queues[i] = config->queues[i];
    self.registry = *registry_p;
    *registry_p = NULL;
    self.ctx = zmq_ctx_new();
    if (self.ctx && oq_io_cpus_apply(self.ctx, &config->io_cpus) < 0)
        oq_warn("cannot pin libzmq's I/O thread (--io-cpus): %s; it runs where it may",
                zmq_strerror(errno));
    self.keeper = self.ctx ? oq_keeper_new(s_keeper_turn, &self, OQ_WORKER_KEEPER_MS) : NULL;
    if (self.keeper) {
        /* Workers forked together must not probe in step. */
        oq_session_config_t session_config = {
            .heartbeat_ms = config->heartbeat_ms,
            .liveness = OQ_DEFAULT_LIVENESS,
            .idle_release_ms = config->idle_release_ms,
            .seed = ((uint64_t)getpid() << 32) ^ (uint64_t)oq_clock_mono_us(),
            .prefetch = config->prefetch,
            .prefetch_auto = config->prefetch_auto,
            .batch = config->batch,
        };
        self.session = oq_session_new(&session_config, s_now(&self));
        for (size_t i = 0; i < types; i++)
            oq_session_set_batch(self.session, self.types[i], batch_max[i]);
        oq_info("worker started (pid %d, broker %s)", (int)getpid(), config->endpoint);
        s_loop(&self);
    } else {
        oq_error("cannot start: %s", self.ctx ? "no keeper thread" : zmq_strerror(errno));
    }

    oq_keeper_destroy(&self.keeper);
    s_drop_work(&self);
    oq_runner_job_t *held;
    while (self.session && (held = oq_session_take_held(self.session)))
        s_job_free(held);
    s_close(&self);
    if (self.ctx)
        zmq_ctx_term(self.ctx);
    /* The worker stops: close what the handlers hold, so the database sees
       a clean goodbye rather than a connection that drops. */
    oq_registry_release_all(self.registry);
    oq_registry_destroy(&self.registry);
    oq_session_destroy(&self.session);
    close(self.signal_fd);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    return self.status;
}
