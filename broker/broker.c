/*  broker.c: sockets and the event loop around the engine.

    One loop turn: poll both sockets until the nearest deadline; read up to
    OQ_BROKER_BATCH_MSGS messages from each socket without blocking; process
    due deadlines; send heartbeats and reap silent workers when the heartbeat
    timer is due; then pump ready jobs to workers with credit. Reading in
    batches before pumping lets one turn's acks return credit that the same
    turn's pump uses.

    Nothing a peer sends can stop the loop: every message is decoded under
    the limits of the protocol, and anything wrong is answered with an error
    on the socket it came from. Sends never block (ZMQ_DONTWAIT); with
    ROUTER_MANDATORY a send to a worker that has gone fails at once, and the
    worker's leases are given back. */
#include "broker.h"

#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "onceq/limits.h"
#include "onceq/log.h"
#include "onceq/proto.h"
#include "stats.h"

#define S_MAX_IDENTITY 255

struct oq_broker {
    oq_broker_config_t config;
    const oq_clock_t *clock;
    void *ctx;
    void *front;
    void *back;
    oq_engine_t *engine;
    msgpack_sbuffer out; /* reused encoding buffer */
    int64_t started_ms;
    int64_t next_heartbeat_ms;
};

/* Where a message came from and how to answer it. */
typedef struct {
    uint8_t identity[S_MAX_IDENTITY];
    size_t identity_len;
    bool delimiter; /* a REQ peer: answer behind an empty frame */
} s_envelope_t;

static volatile sig_atomic_t s_stop = 0;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

static void *s_bind(void *ctx, const char *endpoint, char *reason, size_t reason_len)
{
    void *sock = zmq_socket(ctx, ZMQ_ROUTER);
    int one = 1, zero = 0;
    int64_t max_size = OQ_MAX_WIRE_MSG_BYTES;
    if (!sock)
        goto fail;
    zmq_setsockopt(sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max_size, sizeof max_size);
    if (zmq_bind(sock, endpoint) < 0)
        goto fail;
    return sock;
fail:
    snprintf(reason, reason_len, "cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
    if (sock)
        zmq_close(sock);
    return NULL;
}

oq_broker_t *oq_broker_new(const oq_broker_config_t *config, const oq_clock_t *clock, char *reason,
                           size_t reason_len)
{
    oq_broker_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(reason, reason_len, "out of memory");
        return NULL;
    }
    self->config = *config;
    self->clock = clock;
    msgpack_sbuffer_init(&self->out);
    self->engine = oq_engine_new(&config->engine, clock);
    self->ctx = zmq_ctx_new();
    if (!self->engine || !self->ctx) {
        snprintf(reason, reason_len, "out of memory");
        oq_broker_destroy(&self);
        return NULL;
    }
    if (oq_engine_check_defaults(self->engine, reason, reason_len) < 0 ||
        !(self->front = s_bind(self->ctx, config->front_endpoint, reason, reason_len)) ||
        !(self->back = s_bind(self->ctx, config->back_endpoint, reason, reason_len))) {
        oq_broker_destroy(&self);
        return NULL;
    }
    self->started_ms = oq_clock_now_ms(clock);
    self->next_heartbeat_ms = self->started_ms + config->heartbeat_ms;
    return self;
}

void oq_broker_destroy(oq_broker_t **self_p)
{
    assert(self_p);
    oq_broker_t *self = *self_p;
    if (!self)
        return;
    if (self->front)
        zmq_close(self->front);
    if (self->back)
        zmq_close(self->back);
    if (self->ctx)
        zmq_ctx_term(self->ctx);
    oq_engine_destroy(&self->engine);
    msgpack_sbuffer_destroy(&self->out);
    free(self);
    *self_p = NULL;
}

oq_engine_t *oq_broker_engine(oq_broker_t *self)
{
    return self->engine;
}

/* ---- sending ---------------------------------------------------------------- */

/* Send self->out to the peer of env on sock, then clear the buffer.
   0 if it went out, -1 if the peer is unreachable. */
static int s_send(oq_broker_t *self, void *sock, const void *identity, size_t identity_len,
                  bool delimiter)
{
    int rc = zmq_send(sock, identity, identity_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    if (rc >= 0 && delimiter)
        rc = zmq_send(sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    if (rc >= 0)
        rc = zmq_send(sock, self->out.data, self->out.size, ZMQ_DONTWAIT);
    msgpack_sbuffer_clear(&self->out);
    return rc < 0 ? -1 : 0;
}

static int s_reply(oq_broker_t *self, void *sock, const s_envelope_t *env)
{
    return s_send(self, sock, env->identity, env->identity_len, env->delimiter);
}

static void s_reply_error(oq_broker_t *self, void *sock, const s_envelope_t *env, int64_t req,
                          oq_err_t code, const char *text)
{
    oq_debug("error to peer on %s socket: %s: %s", sock == self->front ? "front" : "back",
             oq_proto_err_name(code), text);
    oq_proto_encode_error(&self->out, req, code, text);
    s_reply(self, sock, env);
}

/* ---- receiving ---------------------------------------------------------------- */

/* Read one whole message (all its frames) from a ROUTER socket. Returns 1
   with the body in *body and the envelope filled, 0 if nothing is waiting,
   -1 after a message of the wrong shape (answered already). */
static int s_recv(oq_broker_t *self, void *sock, s_envelope_t *env, zmq_msg_t *body)
{
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&frame);
        return 0;
    }
    /* The first frame is the identity the ROUTER socket put there. */
    env->identity_len = zmq_msg_size(&frame);
    if (env->identity_len > S_MAX_IDENTITY)
        env->identity_len = S_MAX_IDENTITY;
    memcpy(env->identity, zmq_msg_data(&frame), env->identity_len);
    env->delimiter = false;

    size_t parts = 0;
    bool first_empty = false;
    while (zmq_msg_more(&frame)) {
        zmq_msg_close(&frame);
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, sock, 0) < 0)
            break;
        if (++parts == 1)
            first_empty = zmq_msg_size(&frame) == 0;
    }
    /* Valid: [body] from a DEALER, or ["", body] from a REQ. */
    bool ok = parts == 1 || (parts == 2 && first_empty);
    if (!ok || zmq_msg_size(&frame) == 0) {
        env->delimiter = parts >= 2 && first_empty;
        zmq_msg_close(&frame);
        char text[128];
        snprintf(text, sizeof text,
                 "expected one body frame (after an optional empty delimiter), got %zu frame(s)",
                 parts);
        s_reply_error(self, sock, env, -1, OQ_ERR_MALFORMED, parts == 1 ? "empty frame" : text);
        return -1;
    }
    env->delimiter = parts == 2;
    zmq_msg_move(body, &frame);
    zmq_msg_close(&frame);
    return 1;
}

/* ---- front socket: producers and admin ------------------------------------------ */

static void s_handle_front(oq_broker_t *self, const s_envelope_t *env, oq_msg_t *msg)
{
    int64_t req = msg->has_req ? (int64_t)msg->req : -1;
    char reason[512];
    switch (msg->cmd) {
    case OQ_CMD_DISPATCH: {
        uint64_t id;
        oq_err_t code;
        if (oq_engine_dispatch(self->engine, &msg->job, &id, &code, reason, sizeof reason) < 0) {
            s_reply_error(self, self->front, env, req, code, reason);
            return;
        }
        oq_proto_encode_dispatched(&self->out, req, id);
        break;
    }
    case OQ_CMD_STATS:
        oq_stats_encode(&self->out, req, self->engine,
                        oq_clock_now_ms(self->clock) - self->started_ms);
        break;
    case OQ_CMD_FAILED: {
        char queue[OQ_MAX_NAME_LEN + 1];
        oq_str_copy(msg->name, queue, sizeof queue);
        uint32_t limit = msg->limit ? msg->limit : OQ_DEFAULT_FAILED_LIST;
        oq_stats_encode_failed(&self->out, req, self->engine, msg->name.ptr ? queue : NULL, limit);
        break;
    }
    case OQ_CMD_PING:
        oq_proto_encode_simple(&self->out, OQ_CMD_PONG, req);
        break;
    default:
        assert(!"s_valid_on admits only front commands");
        return;
    }
    if (s_reply(self, self->front, env) < 0)
        oq_debug("producer went away before its reply");
}

/* ---- back socket: workers ------------------------------------------------------ */

static void s_send_reconnect(oq_broker_t *self, const s_envelope_t *env, const char *why)
{
    oq_proto_encode_reconnect(&self->out, why);
    s_reply(self, self->back, env);
}

static void s_handle_back(oq_broker_t *self, const s_envelope_t *env, oq_msg_t *msg)
{
    oq_worker_t *w = oq_engine_worker_find(self->engine, env->identity, env->identity_len);
    switch (msg->cmd) {
    case OQ_CMD_READY:
        if (!w) {
            w = oq_engine_worker_add(self->engine, env->identity, env->identity_len, msg->name,
                                     msg->pid);
            if (!w) {
                s_reply_error(self, self->back, env, -1, OQ_ERR_FULL,
                              "the broker cannot register more workers");
                return;
            }
            oq_info("worker registered: pid %u name \"%.*s\" credit %u", msg->pid,
                    (int)msg->name.len, msg->name.ptr ? msg->name.ptr : "", msg->credit);
            oq_proto_encode_welcome(&self->out, (uint32_t)self->config.heartbeat_ms,
                                    (uint32_t)self->config.liveness);
            if (s_reply(self, self->back, env) < 0) {
                oq_engine_worker_remove(self->engine, &w, "unreachable");
                return;
            }
        }
        oq_engine_worker_seen(self->engine, w);
        oq_engine_worker_credit(self->engine, w, msg->credit);
        break;
    case OQ_CMD_HEARTBEAT:
        if (w)
            oq_engine_worker_seen(self->engine, w);
        else
            s_send_reconnect(self, env, "unknown worker: send ready");
        break;
    case OQ_CMD_ACK: {
        oq_ack_effect_t effect = oq_engine_ack(self->engine, w, &msg->ack);
        if (effect != OQ_ACK_APPLIED)
            oq_debug("ack for job %llu attempt %u: %s", (unsigned long long)msg->ack.id,
                     msg->ack.attempt,
                     effect == OQ_ACK_LATE ? "late, completed the job" : "ignored");
        if (!w)
            s_send_reconnect(self, env, "unknown worker: ack applied, send ready");
        break;
    }
    case OQ_CMD_DRAIN:
        if (w)
            oq_engine_worker_drain(self->engine, w);
        else
            s_send_reconnect(self, env, "unknown worker: send ready");
        break;
    case OQ_CMD_DISCONNECT:
        if (w)
            oq_engine_worker_remove(self->engine, &w, "disconnected");
        break;
    default:
        assert(!"s_valid_on admits only back commands");
    }
}

/* Commands a peer may send on each socket (docs/protocol.md, sections 5, 6). */
static bool s_valid_on(const oq_broker_t *self, void *sock, oq_cmd_t cmd)
{
    if (sock == self->front)
        return cmd == OQ_CMD_DISPATCH || cmd == OQ_CMD_STATS || cmd == OQ_CMD_FAILED ||
               cmd == OQ_CMD_PING;
    return cmd == OQ_CMD_READY || cmd == OQ_CMD_HEARTBEAT || cmd == OQ_CMD_ACK ||
           cmd == OQ_CMD_DRAIN || cmd == OQ_CMD_DISCONNECT;
}

/* Read and handle up to one batch of messages from sock. */
static void s_drain_socket(oq_broker_t *self, void *sock)
{
    for (int n = 0; n < OQ_BROKER_BATCH_MSGS; n++) {
        s_envelope_t env;
        zmq_msg_t body;
        zmq_msg_init(&body);
        int got = s_recv(self, sock, &env, &body);
        if (got == 0) {
            zmq_msg_close(&body);
            return;
        }
        if (got < 0) {
            zmq_msg_close(&body);
            continue;
        }
        oq_msg_t msg;
        oq_err_t code;
        char reason[256];
        int rc = oq_proto_decode(&msg, zmq_msg_data(&body), zmq_msg_size(&body), &code, reason,
                                 sizeof reason);
        int64_t req = msg.has_req ? (int64_t)msg.req : -1;
        if (msg.cmd != OQ_CMD_UNKNOWN && !s_valid_on(self, sock, msg.cmd)) {
            /* The command is the first thing wrong, whatever its fields. */
            snprintf(reason, sizeof reason, "command \"%s\" is not valid on the %s socket",
                     oq_proto_cmd_name(msg.cmd), sock == self->front ? "front" : "back");
            s_reply_error(self, sock, &env, req, OQ_ERR_UNKNOWN_COMMAND, reason);
        } else if (rc < 0) {
            s_reply_error(self, sock, &env, req, code, reason);
        } else if (sock == self->front) {
            s_handle_front(self, &env, &msg);
        } else {
            s_handle_back(self, &env, &msg);
        }
        oq_proto_msg_release(&msg);
        zmq_msg_close(&body);
    }
}

/* ---- deliveries and heartbeats ------------------------------------------------------ */

static int s_deliver(void *ctx, const oq_worker_view_t *worker, const oq_job_view_t *job)
{
    oq_broker_t *self = ctx;
    oq_job_msg_t msg = {
        .id = job->id,
        .type = oq_str(job->type),
        .queue = oq_str(job->queue),
        .payload = job->payload,
        .payload_len = job->payload_len,
        .attempt = job->attempt,
        .max_tries = job->max_tries,
        .timeout_ms = job->timeout_ms,
        .has_timeout = true,
    };
    if (job->backoff_ms) {
        memcpy(msg.backoff_ms, job->backoff_ms, job->backoff_len * sizeof *job->backoff_ms);
        msg.backoff_len = job->backoff_len;
    }
    oq_proto_encode_job(&self->out, &msg);
    if (s_send(self, self->back, worker->identity, worker->identity_len, false) < 0) {
        oq_warn("cannot deliver job %llu to worker pid %u: %s", (unsigned long long)job->id,
                worker->pid, zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

typedef struct {
    oq_broker_t *broker;
    uint8_t (*gone)[S_MAX_IDENTITY + 1]; /* identities that could not be reached */
    size_t gone_count;
} s_beat_t;

static void s_beat_one(void *ctx, const oq_worker_view_t *w)
{
    s_beat_t *beat = ctx;
    oq_proto_encode_simple(&beat->broker->out, OQ_CMD_HEARTBEAT, -1);
    if (s_send(beat->broker, beat->broker->back, w->identity, w->identity_len, false) < 0 &&
        beat->gone) {
        beat->gone[beat->gone_count][0] = (uint8_t)w->identity_len;
        memcpy(&beat->gone[beat->gone_count][1], w->identity, w->identity_len);
        beat->gone_count++;
    }
}

/* Heartbeat every worker; a worker the socket says is gone dies now, one
   silent for `liveness` intervals dies by the reaper. */
static void s_heartbeat(oq_broker_t *self)
{
    s_beat_t beat = {self, NULL, 0};
    size_t workers = oq_engine_worker_count(self->engine);
    if (workers)
        beat.gone = malloc(workers * sizeof *beat.gone);
    oq_engine_worker_each(self->engine, s_beat_one, &beat);
    for (size_t i = 0; i < beat.gone_count; i++) {
        oq_worker_t *w = oq_engine_worker_find(self->engine, &beat.gone[i][1], beat.gone[i][0]);
        oq_engine_worker_remove(self->engine, &w, "disconnected");
    }
    free(beat.gone);
    oq_engine_reap_workers(self->engine,
                           (int64_t)self->config.heartbeat_ms * self->config.liveness);
}

int oq_broker_run(oq_broker_t *self)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    zmq_pollitem_t items[] = {{self->front, 0, ZMQ_POLLIN, 0}, {self->back, 0, ZMQ_POLLIN, 0}};
    oq_info("serving: front %s, back %s, heartbeat %d ms x %d", self->config.front_endpoint,
            self->config.back_endpoint, self->config.heartbeat_ms, self->config.liveness);
    while (!s_stop) {
        int64_t now = oq_clock_now_ms(self->clock);
        int64_t wake = self->next_heartbeat_ms;
        int64_t deadline = oq_engine_next_deadline(self->engine);
        if (deadline >= 0 && deadline < wake)
            wake = deadline;
        long timeout = wake > now ? (long)(wake - now) : 0;
        if (zmq_poll(items, 2, timeout) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            oq_error("poll failed: %s", zmq_strerror(zmq_errno()));
            return -1;
        }
        if (items[1].revents & ZMQ_POLLIN)
            s_drain_socket(self, self->back);
        if (items[0].revents & ZMQ_POLLIN)
            s_drain_socket(self, self->front);
        oq_engine_tick(self->engine);
        now = oq_clock_now_ms(self->clock);
        if (now >= self->next_heartbeat_ms) {
            s_heartbeat(self);
            self->next_heartbeat_ms = now + self->config.heartbeat_ms;
        }
        oq_engine_pump(self->engine, s_deliver, self);
    }
    oq_info("stopping: %zu job(s) held, %zu worker(s) connected", oq_engine_job_count(self->engine),
            oq_engine_worker_count(self->engine));
    return 0;
}
