/*  auth.c: ZAP requests and replies.

    A request is, after REP's envelope: version "1.0", request id, domain
    (the socket: "front" or "back"), the peer's address, its identity,
    the mechanism and its credentials, for CURVE the client's 32-byte
    public key. The reply: version, the same request id, a status code
    ("200" or "400"), a status text, the User-Id and metadata (empty).

    Only libzmq talks to this socket (inproc, in our own context), but a
    request of the wrong shape is answered "500" all the same rather than
    trusted. */
#include "auth.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "onceq/limits.h"
#include "onceq/log.h"
#include "throttle.h"

#define S_FRAMES      8 /* a CURVE request has 7 */
#define S_FRAME_BYTES 256
#define S_ZAP_VERSION "1.0"

struct oq_auth {
    void *sock;      /* REP bound to OQ_AUTH_ENDPOINT */
    oq_zsock_t wait; /* the same, as the broker's loop waits on it */
    const oq_keystore_t *store;
    oq_peers_t *peers; /* NULL: no per-role limits */
    const oq_clock_t *clock;
    oq_throttle_t *unknown_log; /* unknown keys said once a minute each */
    uint64_t accepted, refused_unknown, refused_full;
};

typedef struct {
    uint8_t data[S_FRAMES][S_FRAME_BYTES];
    size_t len[S_FRAMES]; /* each cut to S_FRAME_BYTES */
    int count;
    bool too_many;
} s_request_t;

oq_auth_t *oq_auth_new(void *ctx, const oq_keystore_t *store, const oq_clock_t *clock, char *reason,
                       size_t reason_len)
{
    assert(ctx && store && clock);
    oq_auth_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(reason, reason_len, "out of memory");
        return NULL;
    }
    self->store = store;
    self->clock = clock;
    self->unknown_log = oq_throttle_new(OQ_AUTH_LOG_KEYS, OQ_AUTH_LOG_INTERVAL_MS);
    self->sock = zmq_socket(ctx, ZMQ_REP);
    int zero = 0;
    if (!self->unknown_log || !self->sock ||
        zmq_setsockopt(self->sock, ZMQ_LINGER, &zero, sizeof zero) < 0 ||
        zmq_bind(self->sock, OQ_AUTH_ENDPOINT) < 0 || oq_zsock_init(&self->wait, self->sock) < 0) {
        snprintf(reason, reason_len, "cannot start the ZAP handler on %s: %s", OQ_AUTH_ENDPOINT,
                 zmq_strerror(zmq_errno()));
        oq_auth_destroy(&self);
        return NULL;
    }
    return self;
}

void oq_auth_destroy(oq_auth_t **self_p)
{
    assert(self_p);
    oq_auth_t *self = *self_p;
    if (!self)
        return;
    if (self->sock)
        zmq_close(self->sock);
    oq_throttle_destroy(&self->unknown_log);
    free(self);
    *self_p = NULL;
}

oq_zsock_t *oq_auth_socket(oq_auth_t *self)
{
    return &self->wait;
}

void oq_auth_set_peers(oq_auth_t *self, oq_peers_t *peers)
{
    self->peers = peers;
}

void oq_auth_set_store(oq_auth_t *self, const oq_keystore_t *store)
{
    assert(store);
    self->store = store;
}

uint64_t oq_auth_accepted(const oq_auth_t *self)
{
    return self->accepted;
}

uint64_t oq_auth_refused_unknown(const oq_auth_t *self)
{
    return self->refused_unknown;
}

uint64_t oq_auth_refused_full(const oq_auth_t *self)
{
    return self->refused_full;
}

/* Read one whole request; 0 if none is waiting. */
static int s_read(oq_auth_t *self, s_request_t *req)
{
    req->count = 0;
    req->too_many = false;
    for (;;) {
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, self->sock, req->count ? 0 : ZMQ_DONTWAIT) < 0) {
            if (!req->count)
                oq_zsock_recv_failed(&self->wait, errno);
            zmq_msg_close(&frame);
            return req->count ? 1 : 0;
        }
        if (req->count < S_FRAMES) {
            size_t len = zmq_msg_size(&frame);
            if (len > S_FRAME_BYTES)
                len = S_FRAME_BYTES;
            memcpy(req->data[req->count], zmq_msg_data(&frame), len);
            req->len[req->count++] = len;
        } else {
            req->too_many = true;
        }
        bool more = zmq_msg_more(&frame);
        zmq_msg_close(&frame);
        if (!more)
            return 1;
    }
}

static void s_reply(oq_auth_t *self, const s_request_t *req, const char *status, const char *text,
                    const char *user_id)
{
    const void *id = req->count > 1 ? (const void *)req->data[1] : "";
    size_t id_len = req->count > 1 ? req->len[1] : 0;
    zmq_send(self->sock, S_ZAP_VERSION, strlen(S_ZAP_VERSION), ZMQ_SNDMORE);
    zmq_send(self->sock, id, id_len, ZMQ_SNDMORE);
    zmq_send(self->sock, status, strlen(status), ZMQ_SNDMORE);
    zmq_send(self->sock, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(self->sock, user_id, strlen(user_id), ZMQ_SNDMORE);
    zmq_send(self->sock, "", 0, 0);
    oq_zsock_used(&self->wait);
}

static bool s_is(const s_request_t *req, int i, const char *text)
{
    return req->len[i] == strlen(text) && memcmp(req->data[i], text, req->len[i]) == 0;
}

static void s_handle(oq_auth_t *self, const s_request_t *req)
{
    if (req->count != 7 || req->too_many || !s_is(req, 0, S_ZAP_VERSION) ||
        !s_is(req, 5, "CURVE") || req->len[6] != OQ_KEY_BYTES) {
        /* Only CURVE sockets are guarded here; anything else is a bug. */
        oq_warn("ZAP: a request that is not a CURVE handshake (%d frames); refused", req->count);
        s_reply(self, req, "500", "not a CURVE handshake", "");
        return;
    }
    char domain[S_FRAME_BYTES + 1], address[S_FRAME_BYTES + 1], z85[OQ_KEY_Z85_LEN + 1];
    snprintf(domain, sizeof domain, "%.*s", (int)req->len[2], (const char *)req->data[2]);
    snprintf(address, sizeof address, "%.*s", (int)req->len[3], (const char *)req->data[3]);
    oq_keys_encode(req->data[6], z85);
    const char *name;
    oq_role_t role = oq_keystore_role(self->store, req->data[6], &name);
    if (role == OQ_ROLE_NONE) {
        self->refused_unknown++;
        int64_t now = oq_clock_now_ms(self->clock);
        if (oq_throttle_allow(self->unknown_log, req->data[6], OQ_KEY_BYTES, now)) {
            uint64_t quiet = oq_throttle_take_suppressed(self->unknown_log);
            char more[96] = "";
            if (quiet)
                snprintf(more, sizeof more, "; %llu other refusals not logged since the last line",
                         (unsigned long long)quiet);
            oq_warn("refused a handshake on the %s socket from %s: unknown key %s (logged once a "
                    "minute per key%s)",
                    domain, address[0] ? address : "?", z85, more);
        }
        s_reply(self, req, "400", "unknown key", "");
        return;
    }
    if (self->peers && !oq_peers_room(self->peers, role)) {
        self->refused_full++;
        oq_peers_refusing(self->peers, role);
        char text[128];
        snprintf(text, sizeof text, "too many %s connected (limit %zu)", oq_role_plural(role),
                 oq_peers_max(self->peers, role));
        s_reply(self, req, "400", text, "");
        return;
    }
    self->accepted++;
    oq_debug("handshake on the %s socket from %s: %s key \"%s\"", domain, address,
             oq_role_name(role), name);
    s_reply(self, req, "200", "OK", z85);
}

void oq_auth_poll(oq_auth_t *self, int batch)
{
    s_request_t *req = malloc(sizeof *req);
    if (!req)
        return; /* libzmq waits; the next turn tries again */
    for (int i = 0; i < batch && s_read(self, req) == 1; i++)
        s_handle(self, req);
    free(req);
}
