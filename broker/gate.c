/*  gate.c: the broker's two ROUTER sockets as its handlers see them. Every
    message comes in here and every reply goes out here.

    In. A message is read whole without blocking, and judged in a fixed
    order, each step answering on the socket it came from: its shape
    (one body frame, after an optional empty delimiter: "malformed"); with
    --keys, the sender's key, by the keys in force now (a key revoked by
    SIGHUP is refused from its next message on, and a worker of it dropped),
    and the first message of a connection binds it to its role for the
    per-role limits (peers.h); then the command, which must have a row on
    this socket in the command table ("unknown_command", commands.h), and a
    role the row allows ("forbidden"); then its fields ("bad_request" and
    the like, from the decoder). The command is the first thing wrong,
    whatever its fields. What passes goes to its row's handler.

    Out. Sends never block (ZMQ_DONTWAIT); with ROUTER_MANDATORY a send to
    a worker that has gone fails at once. A front reply that meets a full
    pipe is kept in the outbox and sent again, in order, until the pipe
    takes it (outbox.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "broker_internal.h"
#include "commands.h"
#include "onceq/limits.h"
#include "onceq/log.h"

void *oq_gate_socket(oq_broker_t *self, oq_side_t side)
{
    return side == OQ_SIDE_FRONT ? self->front : self->back;
}

static oq_zsock_t *s_wait_of(oq_broker_t *self, void *sock)
{
    return sock == self->front ? &self->front_wait : &self->back_wait;
}

static const char *s_side_name(const oq_broker_t *self, void *sock)
{
    return sock == self->front ? "front" : "back";
}

/* ---- sending ---------------------------------------------------------------- */

/* One message to a peer on sock, without blocking: 0, or -1 with errno
   (EAGAIN: its pipe is full; EHOSTUNREACH: the socket knows no such peer). */
static int s_send_raw(oq_broker_t *self, void *sock, const void *identity, size_t identity_len,
                      bool delimiter, const void *body, size_t body_len)
{
    /* A send may take in the socket's news: the loop looks before it waits. */
    oq_zsock_used(s_wait_of(self, sock));
    int rc = zmq_send(sock, identity, identity_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    if (rc >= 0 && delimiter)
        rc = zmq_send(sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    if (rc >= 0)
        rc = zmq_send(sock, body, body_len, ZMQ_DONTWAIT);
    return rc < 0 ? -1 : 0;
}

int oq_gate_outbox_send(void *ctx, const void *identity, size_t identity_len, bool delimiter,
                        const void *body, size_t body_len)
{
    oq_broker_t *self = ctx;
    return s_send_raw(self, self->front, identity, identity_len, delimiter, body, body_len);
}

int oq_gate_send(oq_broker_t *self, void *sock, const void *identity, size_t identity_len, int fd,
                 bool delimiter)
{
    int rc = sock == self->front
                 ? oq_outbox_send(self->outbox, identity, identity_len, fd, delimiter,
                                  self->out.data, self->out.size, oq_gate_outbox_send, self)
                 : s_send_raw(self, sock, identity, identity_len, delimiter, self->out.data,
                              self->out.size);
    msgpack_sbuffer_clear(&self->out);
    return rc;
}

int oq_gate_reply(oq_broker_t *self, void *sock, const oq_envelope_t *env)
{
    return oq_gate_send(self, sock, env->identity, env->identity_len, env->fd, env->delimiter);
}

void oq_gate_reply_error(oq_broker_t *self, void *sock, const oq_envelope_t *env, int64_t req,
                         oq_err_t code, const char *text)
{
    oq_debug("error to peer on %s socket: %s: %s", s_side_name(self, sock), oq_proto_err_name(code),
             text);
    oq_proto_encode_error(&self->out, req, code, text);
    oq_gate_reply(self, sock, env);
}

/* ---- receiving ---------------------------------------------------------------- */

/* Read one whole message (all its frames) from a ROUTER socket. Returns 1
   with the body in *body and the envelope filled, 0 if nothing is waiting,
   -1 after a message of the wrong shape (answered already). */
static int s_recv(oq_broker_t *self, void *sock, oq_envelope_t *env, zmq_msg_t *body)
{
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, sock, ZMQ_DONTWAIT) < 0) {
        oq_zsock_recv_failed(s_wait_of(self, sock), errno);
        zmq_msg_close(&frame);
        return 0;
    }
    /* The first frame is the identity the ROUTER socket put there. */
    env->identity_len = zmq_msg_size(&frame);
    env->fd = -1;
    env->has_key = false;
    if (env->identity_len > OQ_BROKER_MAX_IDENTITY)
        env->identity_len = OQ_BROKER_MAX_IDENTITY;
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
        oq_gate_reply_error(self, sock, env, -1, OQ_ERR_MALFORMED,
                            parts == 1 ? "empty frame" : text);
        return -1;
    }
    env->delimiter = parts == 2;
    env->fd = zmq_msg_get(&frame, ZMQ_SRCFD);
    zmq_msg_move(body, &frame);
    zmq_msg_close(&frame);
    return 1;
}

/* ---- who may send what -------------------------------------------------------- */

/* The role of a message's sender: the role of the key libzmq put in its
   User-Id, in the keys in force now. *key gets the key. */
static oq_role_t s_sender_role(const oq_broker_t *self, zmq_msg_t *body, uint8_t key[OQ_KEY_BYTES],
                               const char **name)
{
    const char *user = zmq_msg_gets(body, "User-Id");
    *name = "";
    if (!user || oq_keys_decode(user, key) < 0)
        return OQ_ROLE_NONE;
    return oq_keystore_role(self->keys, key, name);
}

/* The first message of a connection binds it to its role; one that would
   take the role past its limit is shut down. false if it was. */
static bool s_admit(oq_broker_t *self, zmq_msg_t *body, oq_side_t side, oq_role_t role,
                    const uint8_t key[OQ_KEY_BYTES], const oq_envelope_t *env)
{
    int fd = self->peers ? zmq_msg_get(body, ZMQ_SRCFD) : -1;
    if (fd < 0 ||
        oq_peers_bind(self->peers, fd, side, role, key, env->identity, env->identity_len) == 0)
        return true;
    oq_peers_refusing(self->peers, role);
    oq_conns_shutdown(self->conns, fd);
    return false;
}

/* Answer "forbidden", count it, and say so in the log once a minute per key. */
static void s_forbid(oq_broker_t *self, void *sock, const oq_envelope_t *env, int64_t req,
                     const uint8_t key[OQ_KEY_BYTES], const char *text)
{
    self->forbidden++;
    if (oq_throttle_allow(self->forbidden_log, key, OQ_KEY_BYTES, oq_clock_now_ms(self->clock))) {
        char z85[OQ_KEY_Z85_LEN + 1], more[96] = "";
        oq_keys_encode(key, z85);
        uint64_t quiet = oq_throttle_take_suppressed(self->forbidden_log);
        if (quiet)
            snprintf(more, sizeof more, "; %llu other refusals not logged since the last line",
                     (unsigned long long)quiet);
        oq_warn("forbidden on the %s socket: %s (key %s; logged once a minute per key%s)",
                s_side_name(self, sock), text, z85, more);
    }
    oq_gate_reply_error(self, sock, env, req, OQ_ERR_FORBIDDEN, text);
}

/* A message from a key that lost its role: refused, and a worker of that
   key is dropped now (its leases go back) instead of at its silence. */
static void s_revoked(oq_broker_t *self, void *sock, const oq_envelope_t *env, int64_t req,
                      const uint8_t key[OQ_KEY_BYTES])
{
    if (sock == self->back) {
        oq_worker_t *w = oq_engine_worker_find(self->engine, env->identity, env->identity_len);
        if (w)
            oq_engine_worker_remove(self->engine, &w, "key revoked");
    }
    s_forbid(self, sock, env, req, key,
             "this key is not allowed (any more): it is in none of the broker's key "
             "directories");
}

/* ---- judging one message ---------------------------------------------------------- */

/* The role of body's sender with --keys, its key in env; OQ_ROLE_NONE for
   an unknown key (or without --keys). false if the connection was shut
   down for its role's limit. */
static bool s_identify(oq_broker_t *self, zmq_msg_t *body, oq_side_t side, oq_envelope_t *env,
                       oq_role_t *role, const char **key_name)
{
    uint8_t key[OQ_KEY_BYTES] = {0};
    *key_name = "";
    *role = OQ_ROLE_NONE;
    env->has_key = false;
    if (!self->keys)
        return true;
    *role = s_sender_role(self, body, key, key_name);
    memcpy(env->key, key, OQ_KEY_BYTES);
    env->has_key = *role != OQ_ROLE_NONE;
    return *role == OQ_ROLE_NONE || s_admit(self, body, side, *role, key, env);
}

/* Judge one message read whole (the order is the file header's), then
   hand it to its row. */
static void s_judge(oq_broker_t *self, void *sock, oq_side_t side, oq_envelope_t *env,
                    zmq_msg_t *body)
{
    oq_role_t role;
    const char *key_name;
    if (!s_identify(self, body, side, env, &role, &key_name))
        return;
    oq_msg_t msg;
    oq_err_t code;
    char reason[256];
    int rc =
        oq_proto_decode(&msg, zmq_msg_data(body), zmq_msg_size(body), &code, reason, sizeof reason);
    int64_t req = msg.has_req ? (int64_t)msg.req : -1;
    /* No row on this socket: a command a peer may not send here (one the
       decoder does not know fails to decode, below). */
    const oq_command_t *row = oq_command_find(msg.cmd);
    bool misplaced = row ? row->side != side : msg.cmd != OQ_CMD_UNKNOWN || rc == 0;
    if (self->keys && role == OQ_ROLE_NONE) {
        s_revoked(self, sock, env, req, env->key);
    } else if (misplaced) {
        snprintf(reason, sizeof reason, "command \"%s\" is not valid on the %s socket",
                 oq_proto_cmd_name(msg.cmd), s_side_name(self, sock));
        oq_gate_reply_error(self, sock, env, req, OQ_ERR_UNKNOWN_COMMAND, reason);
    } else if (self->keys && msg.cmd != OQ_CMD_UNKNOWN && !oq_command_allows(role, side, msg.cmd)) {
        snprintf(reason, sizeof reason, "a %s key (\"%s\") may not send \"%s\"", oq_role_name(role),
                 key_name, oq_proto_cmd_name(msg.cmd));
        s_forbid(self, sock, env, req, env->key, reason);
    } else if (rc < 0) {
        oq_gate_reply_error(self, sock, env, req, code, reason);
    } else {
        oq_command_run(self, row, env, &msg);
    }
    oq_proto_msg_release(&msg);
}

void oq_gate_drain(oq_broker_t *self, void *sock)
{
    oq_side_t side = sock == self->front ? OQ_SIDE_FRONT : OQ_SIDE_BACK;
    for (int n = 0; n < OQ_BROKER_BATCH_MSGS; n++) {
        oq_envelope_t env;
        zmq_msg_t body;
        zmq_msg_init(&body);
        int got = s_recv(self, sock, &env, &body);
        if (got == 0) {
            zmq_msg_close(&body);
            return;
        }
        if (got > 0) {
            if (self->conns) /* its handshake is over (conns.h) */
                oq_conns_spoke(self->conns, zmq_msg_get(&body, ZMQ_SRCFD));
            s_judge(self, sock, side, &env, &body);
        }
        zmq_msg_close(&body);
        /* Admins asking for stats in a tight loop wait for the next turn
           once this one's stats took their budget: the pump comes first. */
        if (side == OQ_SIDE_FRONT && self->stats_turn_bytes >= OQ_STATS_TURN_BYTES)
            break;
    }
    /* The turn's share is read; more may wait, unsignalled. */
    oq_zsock_used(s_wait_of(self, sock));
}
