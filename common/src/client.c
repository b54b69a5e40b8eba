/*  client.c: the producer and admin client. One request is in flight at a
    time: it is sent with a fresh request id and the client reads replies
    until one carries that id or the deadline passes. Replies to earlier
    requests that timed out arrive late on the same socket; their ids are
    older, so they are dropped here instead of being taken for an answer.

    The client uses libzmq directly with a context of its own rather than
    czmq's process-wide one: czmq installs SIGINT/SIGTERM handlers on first
    use, which a library linked into someone else's program must not do.

    A timeout does not mean the broker did nothing: a dispatch may have been
    queued after all (the request can wait in the socket until the broker
    comes up, or the reply can be late, e.g. behind a broker restart). So a
    dispatch carries a dispatch_id and is resent as it was, same request id
    and same dispatch_id (Lazy Pirate): the broker answers a dispatch_id it
    knows with the first job's id, and a late reply to the first send is as
    good as the reply to the last, since both carry the same request id.

    A broker that refuses the handshake (an unknown key, a wrong broker key,
    a plaintext client at a CURVE broker) sends no reply at all: the socket
    only retries. So the client watches its own socket's handshake events
    and names a failed handshake in the timeout's error, instead of leaving
    the caller to guess between a dead broker and a refused key. */
#include "onceq/client.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <zmq.h>

#include "onceq/clock.h"

/* Room for the broker's message plus our own prefix. */
#define S_ERROR_TEXT_LEN (OQ_MAX_ERROR_LEN + 256)
#define S_NOTE_LEN       256
#define S_MONITOR_LEN    64
#define S_EVENT_BYTES    6 /* a monitor event: uint16 event, uint32 value */
#define S_HANDSHAKE_FAILED                                                                         \
    (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |                  \
     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

struct oq_client {
    void *ctx;                       /* ZeroMQ context owned by this client */
    void *sock;                      /* DEALER connected to the broker's front socket */
    void *monitor;                   /* PAIR reading sock's handshake failures, or NULL */
    bool curve;                      /* pair and server are set */
    oq_keypair_t pair;               /* ours */
    char server[OQ_KEY_Z85_LEN + 1]; /* the broker's public key */
    char handshake[S_NOTE_LEN];      /* the last failed handshake, for the timeout's error */
    unsigned sockets;                /* sockets opened, for a fresh monitor endpoint each */
    char *endpoint;                  /* for error messages */
    uint64_t next_req;               /* id of the next request; ids only grow */
    uint32_t retries;                /* dispatch resends after a timeout */
    msgpack_sbuffer buf;             /* encoding buffer, reused between requests */
    oq_err_t err_code;               /* last failure: the broker's code, see s_fail */
    char err_text[S_ERROR_TEXT_LEN]; /* what oq_client_error returns */
    char dropped[OQ_MAX_ERROR_LEN];  /* why the last unreadable message was dropped */
};

static void s_fail(oq_client_t *self, oq_err_t code, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* Record a failure. code is the broker's error code, or OQ_ERR_NONE when
   no usable answer came (timeout, send failure, unreadable reply). A request
   too large to send gets OQ_ERR_TOO_LARGE, the code the broker would have
   answered with: a caller that retries on OQ_ERR_NONE must not retry that. */
static void s_fail(oq_client_t *self, oq_err_t code, const char *format, ...)
{
    self->err_code = code;
    va_list args;
    va_start(args, format);
    vsnprintf(self->err_text, sizeof self->err_text, format, args);
    va_end(args);
}

static void s_close_socket(oq_client_t *self)
{
    if (self->monitor) {
        zmq_socket_monitor(self->sock, NULL, 0);
        zmq_close(self->monitor);
        self->monitor = NULL;
    }
    if (self->sock)
        zmq_close(self->sock);
    self->sock = NULL;
}

/* A DEALER to the endpoint, with CURVE if it is set. 0 or -1. */
static int s_open_socket(oq_client_t *self)
{
    self->sock = zmq_socket(self->ctx, ZMQ_DEALER);
    if (!self->sock)
        return -1;
    /* Nothing unsent may outlive the client: a dispatch the caller has given
       up on must not reach the broker after destroy returns. */
    int linger_ms = 0;
    zmq_setsockopt(self->sock, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    if (self->curve &&
        (zmq_setsockopt(self->sock, ZMQ_CURVE_SERVERKEY, self->server, OQ_KEY_Z85_LEN) < 0 ||
         zmq_setsockopt(self->sock, ZMQ_CURVE_PUBLICKEY, self->pair.public_z85, OQ_KEY_Z85_LEN) <
             0 ||
         zmq_setsockopt(self->sock, ZMQ_CURVE_SECRETKEY, self->pair.secret_z85, OQ_KEY_Z85_LEN) <
             0))
        return -1;
    /* Without it the client still works; its timeouts only say less. */
    /* A new name each time: the last socket's monitor may not have let go
       of its endpoint yet. */
    char endpoint[S_MONITOR_LEN];
    snprintf(endpoint, sizeof endpoint, "inproc://oq-client-%p-%u", (void *)self, self->sockets++);
    if (zmq_socket_monitor(self->sock, endpoint, S_HANDSHAKE_FAILED) == 0) {
        self->monitor = zmq_socket(self->ctx, ZMQ_PAIR);
        if (self->monitor && zmq_connect(self->monitor, endpoint) != 0) {
            zmq_close(self->monitor);
            self->monitor = NULL;
        }
    }
    self->handshake[0] = 0;
    return zmq_connect(self->sock, self->endpoint) == 0 ? 0 : -1;
}

oq_client_t *oq_client_new(const char *endpoint)
{
    assert(endpoint);
    oq_client_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->endpoint = strdup(endpoint);
    self->ctx = zmq_ctx_new();
    if (!self->endpoint || !self->ctx || s_open_socket(self) < 0)
        goto fail;
    self->next_req = 1;
    self->retries = OQ_DEFAULT_CLIENT_RETRIES;
    msgpack_sbuffer_init(&self->buf);
    return self;
fail:
    s_close_socket(self);
    if (self->ctx)
        zmq_ctx_term(self->ctx);
    free(self->endpoint);
    free(self);
    return NULL;
}

void oq_client_destroy(oq_client_t **self_p)
{
    assert(self_p);
    oq_client_t *self = *self_p;
    if (!self)
        return;
    s_close_socket(self);
    zmq_ctx_term(self->ctx);
    msgpack_sbuffer_destroy(&self->buf);
    free(self->endpoint);
    memset(&self->pair, 0, sizeof self->pair);
    free(self);
    *self_p = NULL;
}

int oq_client_set_curve(oq_client_t *self, const oq_keypair_t *pair, const char *broker_public)
{
    assert(self && pair && broker_public);
    if (!oq_keys_z85_valid(pair->public_z85, strlen(pair->public_z85)) ||
        !oq_keys_z85_valid(pair->secret_z85, strlen(pair->secret_z85)) ||
        !oq_keys_z85_valid(broker_public, strlen(broker_public))) {
        s_fail(self, OQ_ERR_NONE, "CURVE keys must be 40 characters of Z85 each");
        return -1;
    }
    if (!zmq_has("curve")) {
        s_fail(self, OQ_ERR_NONE, "this libzmq was built without CURVE");
        return -1;
    }
    s_close_socket(self);
    self->curve = true;
    self->pair = *pair;
    snprintf(self->server, sizeof self->server, "%s", broker_public);
    if (s_open_socket(self) < 0) {
        s_fail(self, OQ_ERR_NONE, "cannot connect to %s with CURVE: %s", self->endpoint,
               zmq_strerror(errno));
        return -1;
    }
    return 0;
}

int oq_client_set_curve_files(oq_client_t *self, const char *secret_file,
                              const char *broker_key_file)
{
    assert(self && secret_file && broker_key_file);
    oq_keypair_t pair;
    char broker[OQ_KEY_Z85_LEN + 1], why[S_ERROR_TEXT_LEN];
    if (oq_keys_load_pair(secret_file, &pair, why, sizeof why) < 0 ||
        oq_keys_load_public(broker_key_file, broker, why, sizeof why) < 0) {
        s_fail(self, OQ_ERR_NONE, "%s", why);
        return -1;
    }
    int rc = oq_client_set_curve(self, &pair, broker);
    memset(&pair, 0, sizeof pair);
    return rc;
}

/* Read the handshake failures the monitor reported, keeping the last. */
static void s_read_monitor(oq_client_t *self)
{
    for (;;) {
        zmq_msg_t head;
        zmq_msg_init(&head);
        if (zmq_msg_recv(&head, self->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&head);
            return;
        }
        uint16_t event = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&head) >= S_EVENT_BYTES) {
            memcpy(&event, zmq_msg_data(&head), sizeof event);
            memcpy(&value, (uint8_t *)zmq_msg_data(&head) + sizeof event, sizeof value);
        }
        while (zmq_msg_more(&head) && zmq_msg_recv(&head, self->monitor, 0) >= 0)
            ;
        zmq_msg_close(&head);
        if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
            snprintf(self->handshake, sizeof self->handshake,
                     "the broker refused our key (ZAP status %u): is this key's .key file in "
                     "the broker's producers/ or admins/ directory?",
                     value);
        else if (event && self->curve)
            snprintf(self->handshake, sizeof self->handshake,
                     "the CURVE handshake failed: is the broker key right, and does the broker "
                     "speak CURVE (--keys)?");
        else if (event)
            snprintf(self->handshake, sizeof self->handshake,
                     "the handshake failed: the broker speaks CURVE; give our key and the "
                     "broker's (onceq: --key and --broker-key)");
    }
}

oq_err_t oq_client_error_code(const oq_client_t *self)
{
    assert(self);
    return self->err_code;
}

const char *oq_client_error(const oq_client_t *self)
{
    assert(self);
    return self->err_text;
}

/* Send the encoded request in self->buf within the deadline. */
static int s_send(oq_client_t *self, int64_t deadline_ms, int timeout_ms)
{
    if (self->buf.size > OQ_MAX_FRAME_BYTES) {
        s_fail(self, OQ_ERR_TOO_LARGE, "request is %zu bytes, the limit is %d", self->buf.size,
               OQ_MAX_FRAME_BYTES);
        return -1;
    }
    const oq_clock_t *clock = oq_clock_system();
    for (;;) {
        if (zmq_send(self->sock, self->buf.data, self->buf.size, ZMQ_DONTWAIT) >= 0)
            return 0;
        if (errno != EAGAIN && errno != EINTR) {
            s_fail(self, OQ_ERR_NONE, "cannot send to %s: %s", self->endpoint, zmq_strerror(errno));
            return -1;
        }
        int64_t left_ms = deadline_ms - oq_clock_now_ms(clock);
        if (left_ms <= 0)
            break;
        zmq_pollitem_t item = {self->sock, 0, ZMQ_POLLOUT, 0};
        if (zmq_poll(&item, 1, (long)left_ms) < 0 && errno != EINTR) {
            s_fail(self, OQ_ERR_NONE, "cannot send to %s: %s", self->endpoint, zmq_strerror(errno));
            return -1;
        }
    }
    s_fail(self, OQ_ERR_NONE, "cannot send to %s within %d ms", self->endpoint, timeout_ms);
    return -1;
}

/* Wait for the reply to request `req` and decode it into *reply. A reply
   with another id is stale and dropped. An error without an id is taken as
   the answer: the broker sends one only when it could not read the request's
   id, and this client always sends one, so it is about our last request. */
static int s_receive(oq_client_t *self, uint64_t req, int64_t deadline_ms, int timeout_ms,
                     oq_cmd_t expect, oq_cmd_t also, oq_msg_t *reply)
{
    const oq_clock_t *clock = oq_clock_system();
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    for (;;) {
        int64_t left_ms = deadline_ms - oq_clock_now_ms(clock);
        if (left_ms < 0)
            left_ms = 0;
        zmq_pollitem_t items[] = {{self->sock, 0, ZMQ_POLLIN, 0},
                                  {self->monitor, 0, ZMQ_POLLIN, 0}};
        int ready = zmq_poll(items, self->monitor ? 2 : 1, (long)left_ms);
        if (ready < 0 && errno != EINTR) {
            s_fail(self, OQ_ERR_NONE, "cannot receive from %s: %s", self->endpoint,
                   zmq_strerror(errno));
            break;
        }
        if (self->monitor && (items[1].revents & ZMQ_POLLIN)) {
            s_read_monitor(self);
            if (!(items[0].revents & ZMQ_POLLIN))
                continue;
        }
        if (ready <= 0) {
            if (left_ms == 0) {
                if (self->handshake[0])
                    s_fail(self, OQ_ERR_NONE, "no reply from %s within %d ms: %s", self->endpoint,
                           timeout_ms, self->handshake);
                else if (self->dropped[0])
                    s_fail(self, OQ_ERR_NONE,
                           "no reply from %s within %d ms (dropped an unreadable message: %s)",
                           self->endpoint, timeout_ms, self->dropped);
                else
                    s_fail(self, OQ_ERR_NONE, "no reply from %s within %d ms", self->endpoint,
                           timeout_ms);
                break;
            }
            continue;
        }
        if (zmq_msg_recv(&frame, self->sock, ZMQ_DONTWAIT) < 0)
            continue;
        /* The broker speaks single-frame messages on a DEALER; drop the rest
           of anything longer rather than misread it. */
        bool multipart = zmq_msg_more(&frame);
        while (zmq_msg_more(&frame) && zmq_msg_recv(&frame, self->sock, ZMQ_DONTWAIT) >= 0)
            ;
        if (multipart)
            continue;

        const void *data = zmq_msg_data(&frame);
        size_t size = zmq_msg_size(&frame);
        oq_err_t code;
        char why[OQ_MAX_ERROR_LEN];
        int rc = oq_proto_decode(reply, data, size, &code, why, sizeof why);
        bool ours = reply->has_req ? reply->req == req : reply->cmd == OQ_CMD_ERROR;
        if (!ours) {
            /* Kept for the timeout message: a broker speaking another
               protocol version would otherwise look like no broker at all. */
            if (rc < 0)
                snprintf(self->dropped, sizeof self->dropped, "%s", why);
            oq_proto_msg_release(reply);
            continue;
        }
        if (rc < 0) {
            s_fail(self, OQ_ERR_NONE, "bad reply from %s: %s", self->endpoint, why);
        } else if (reply->cmd == OQ_CMD_ERROR) {
            char text[OQ_MAX_ERROR_LEN + 1];
            oq_str_copy(reply->err_text, text, sizeof text);
            s_fail(self, reply->err_code, "%s", text);
        } else if (reply->cmd != expect && (also == OQ_CMD_UNKNOWN || reply->cmd != also)) {
            s_fail(self, OQ_ERR_NONE, "bad reply from %s: \"%s\" to a \"%s\" request",
                   self->endpoint, oq_proto_cmd_name(reply->cmd), oq_proto_cmd_name(expect));
        } else {
            zmq_msg_close(&frame);
            return 0;
        }
        oq_proto_msg_release(reply);
        break;
    }
    zmq_msg_close(&frame);
    memset(reply, 0, sizeof *reply);
    return -1;
}

/* One round trip: the request is already encoded in self->buf, and stays
   there (the caller clears it) so that it can be sent again. The answer is
   an expect or (unless OQ_CMD_UNKNOWN) an also. */
static int s_round_trip_either(oq_client_t *self, uint64_t req, int timeout_ms, oq_cmd_t expect,
                               oq_cmd_t also, oq_msg_t *reply)
{
    assert(timeout_ms >= 0);
    memset(reply, 0, sizeof *reply);
    int64_t deadline_ms = oq_clock_now_ms(oq_clock_system()) + timeout_ms;
    if (s_send(self, deadline_ms, timeout_ms) < 0)
        return -1;
    return s_receive(self, req, deadline_ms, timeout_ms, expect, also, reply);
}

static int s_round_trip(oq_client_t *self, uint64_t req, int timeout_ms, oq_cmd_t expect,
                        oq_msg_t *reply)
{
    return s_round_trip_either(self, req, timeout_ms, expect, OQ_CMD_UNKNOWN, reply);
}

static int s_request(oq_client_t *self, uint64_t req, int timeout_ms, oq_cmd_t expect,
                     oq_msg_t *reply)
{
    int rc = s_round_trip(self, req, timeout_ms, expect, reply);
    msgpack_sbuffer_clear(&self->buf);
    return rc;
}

static uint64_t s_next_req(oq_client_t *self)
{
    self->err_code = OQ_ERR_NONE;
    self->err_text[0] = 0;
    self->dropped[0] = 0;
    self->handshake[0] = 0;
    uint64_t req = self->next_req++;
    /* The protocol allows ids up to 2^63-1; wrapping there takes centuries
       of requests but costs nothing to get right. */
    if (self->next_req > (uint64_t)INT64_MAX)
        self->next_req = 1;
    return req;
}

void oq_client_set_retries(oq_client_t *self, uint32_t retries)
{
    assert(self);
    self->retries = retries > OQ_MAX_CLIENT_RETRIES ? OQ_MAX_CLIENT_RETRIES : retries;
}

int oq_client_new_dispatch_id(char *out, size_t out_len)
{
    static const char digits[] = "0123456789abcdef";
    uint8_t bytes[OQ_DISPATCH_ID_RANDOM_BYTES];
    if (out_len < 2 * sizeof bytes + 1 || getrandom(bytes, sizeof bytes, 0) != sizeof bytes)
        return -1;
    for (size_t i = 0; i < sizeof bytes; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * sizeof bytes] = 0;
    return 0;
}

int oq_client_dispatch(oq_client_t *self, const oq_job_msg_t *job, int timeout_ms, uint64_t *id)
{
    bool unique;
    return oq_client_dispatch_reply(self, job, timeout_ms, id, &unique);
}

/* A dispatch, with a wait of wait_ms if that is >= 0, sent and resent as
   oq_client_dispatch says; *reply gets the answer ("dispatched", or with a
   wait "waited" too). 0 or -1. */
static int s_dispatch(oq_client_t *self, const oq_job_msg_t *job, int64_t wait_ms, int timeout_ms,
                      oq_msg_t *reply)
{
    uint64_t req = s_next_req(self);
    if (job->payload_len > OQ_MAX_PAYLOAD_BYTES) {
        s_fail(self, OQ_ERR_TOO_LARGE, "payload is %zu bytes, the limit is %d", job->payload_len,
               OQ_MAX_PAYLOAD_BYTES);
        return -1;
    }
    oq_job_msg_t request = *job;
    char made[2 * OQ_DISPATCH_ID_RANDOM_BYTES + 1];
    if (!request.dispatch_id.len) {
        if (oq_client_new_dispatch_id(made, sizeof made) < 0) {
            s_fail(self, OQ_ERR_NONE, "cannot make a dispatch id: %s", strerror(errno));
            return -1;
        }
        request.dispatch_id = oq_str(made);
    }
    if (wait_ms >= 0)
        oq_proto_encode_dispatch_wait(&self->buf, (int64_t)req, &request, wait_ms);
    else
        oq_proto_encode_dispatch(&self->buf, (int64_t)req, &request);
    /* A dispatch that waits is answered when the wait ends: give it that
       long and then the usual time for an answer. */
    int64_t patience = (wait_ms > 0 ? wait_ms : 0) + timeout_ms;
    int rc = -1;
    /* Bounded: one send and at most self->retries resends. Only silence is
       worth a resend; an answer, even an error, is final. */
    for (uint32_t attempt = 0; attempt <= self->retries; attempt++) {
        rc = s_round_trip_either(self, req, patience > INT32_MAX ? INT32_MAX : (int)patience,
                                 OQ_CMD_DISPATCHED, wait_ms >= 0 ? OQ_CMD_WAITED : OQ_CMD_UNKNOWN,
                                 reply);
        if (rc == 0 || self->err_code != OQ_ERR_NONE)
            break;
    }
    msgpack_sbuffer_clear(&self->buf);
    if (rc < 0) {
        if (self->err_code == OQ_ERR_NONE && self->retries > 0) {
            char last[S_ERROR_TEXT_LEN];
            snprintf(last, sizeof last, "%s", self->err_text);
            s_fail(self, OQ_ERR_NONE, "%s (sent %u times with dispatch_id %.*s)", last,
                   self->retries + 1, (int)request.dispatch_id.len, request.dispatch_id.ptr);
        }
        return -1;
    }
    return 0;
}

int oq_client_dispatch_reply(oq_client_t *self, const oq_job_msg_t *job, int timeout_ms,
                             uint64_t *id, bool *unique)
{
    assert(self && job && id && unique);
    oq_msg_t reply;
    if (s_dispatch(self, job, -1, timeout_ms, &reply) < 0)
        return -1;
    *id = reply.id;
    *unique = reply.unique;
    oq_proto_msg_release(&reply);
    return 0;
}

int oq_client_dispatch_batch(oq_client_t *self, const oq_job_msg_t *jobs, size_t count,
                             const oq_job_msg_t *const *callbacks, bool allow_failures,
                             const char *dispatch_id, int timeout_ms, uint64_t *batch,
                             uint64_t *first)
{
    assert(self && batch && first && (jobs || count == 0));
    uint64_t req = s_next_req(self);
    if (count == 0 || count > OQ_MAX_BATCH_JOBS) {
        s_fail(self, OQ_ERR_BAD_REQUEST, "a batch holds 1 to %d jobs, not %zu", OQ_MAX_BATCH_JOBS,
               count);
        return -1;
    }
    char made[2 * OQ_DISPATCH_ID_RANDOM_BYTES + 1];
    if (!dispatch_id) {
        if (oq_client_new_dispatch_id(made, sizeof made) < 0) {
            s_fail(self, OQ_ERR_NONE, "cannot make a dispatch id: %s", strerror(errno));
            return -1;
        }
        dispatch_id = made;
    }
    const oq_job_msg_t *none[3] = {NULL, NULL, NULL};
    oq_proto_encode_dispatch_batch(&self->buf, (int64_t)req, jobs, count,
                                   callbacks ? callbacks : none, allow_failures,
                                   oq_str(dispatch_id));
    if (self->buf.size > OQ_MAX_FRAME_BYTES) {
        s_fail(self, OQ_ERR_TOO_LARGE, "the batch is %zu bytes, a message holds at most %d",
               self->buf.size, OQ_MAX_FRAME_BYTES);
        msgpack_sbuffer_clear(&self->buf);
        return -1;
    }
    oq_msg_t reply;
    int rc = -1;
    /* Resent after silence only, as a dispatch: the dispatch_id makes it safe. */
    for (uint32_t attempt = 0; attempt <= self->retries; attempt++) {
        rc = s_round_trip(self, req, timeout_ms, OQ_CMD_BATCH_DISPATCHED, &reply);
        if (rc == 0 || self->err_code != OQ_ERR_NONE)
            break;
    }
    msgpack_sbuffer_clear(&self->buf);
    if (rc < 0)
        return -1;
    *batch = reply.id;
    *first = reply.after;
    oq_proto_msg_release(&reply);
    return 0;
}

int oq_client_dispatch_chain(oq_client_t *self, const oq_job_msg_t *job, const oq_job_msg_t *links,
                             size_t count, const oq_job_msg_t *chain_catch, int timeout_ms,
                             uint64_t *id)
{
    assert(self && job && id && (links || count == 0));
    uint64_t req = s_next_req(self);
    if (count > OQ_MAX_CHAIN_LINKS) {
        s_fail(self, OQ_ERR_TOO_LARGE, "a chain holds at most %d links, not %zu",
               OQ_MAX_CHAIN_LINKS, count);
        return -1;
    }
    oq_job_msg_t request = *job;
    char made[2 * OQ_DISPATCH_ID_RANDOM_BYTES + 1];
    if (!request.dispatch_id.len) {
        if (oq_client_new_dispatch_id(made, sizeof made) < 0) {
            s_fail(self, OQ_ERR_NONE, "cannot make a dispatch id: %s", strerror(errno));
            return -1;
        }
        request.dispatch_id = oq_str(made);
    }
    oq_proto_encode_dispatch_chain(&self->buf, (int64_t)req, &request, links, count, chain_catch);
    oq_msg_t reply;
    int rc = -1;
    for (uint32_t attempt = 0; attempt <= self->retries; attempt++) {
        rc = s_round_trip(self, req, timeout_ms, OQ_CMD_DISPATCHED, &reply);
        if (rc == 0 || self->err_code != OQ_ERR_NONE)
            break;
    }
    msgpack_sbuffer_clear(&self->buf);
    if (rc < 0)
        return -1;
    *id = reply.id;
    oq_proto_msg_release(&reply);
    return 0;
}

int oq_client_chain(oq_client_t *self, uint64_t id, int timeout_ms, oq_msg_t *reply)
{
    assert(self && reply);
    uint64_t req = s_next_req(self);
    oq_proto_encode_job_id(&self->buf, OQ_CMD_CHAIN, (int64_t)req, id);
    return s_request(self, req, timeout_ms, OQ_CMD_CHAIN, reply);
}

int oq_client_batch(oq_client_t *self, const char *op, uint64_t id, int timeout_ms, oq_msg_t *reply)
{
    assert(self && op && reply);
    uint64_t req = s_next_req(self);
    oq_proto_encode_batch_request(&self->buf, (int64_t)req, op, id);
    return s_request(self, req, timeout_ms, OQ_CMD_BATCH, reply);
}

int oq_client_dispatch_wait(oq_client_t *self, const oq_job_msg_t *job, int64_t wait_ms,
                            int timeout_ms, uint64_t *id, bool *unique, oq_wait_state_t *state,
                            char *error, size_t error_len)
{
    assert(self && job && id && state && timeout_ms >= 0);
    *id = 0;
    if (error_len)
        error[0] = 0;
    if (wait_ms < 0 || wait_ms > OQ_MAX_WAIT_MS) {
        s_next_req(self);
        s_fail(self, OQ_ERR_BAD_REQUEST, "a wait lasts 0 to %lld ms, not %lld",
               (long long)OQ_MAX_WAIT_MS, (long long)wait_ms);
        return -1;
    }
    oq_msg_t reply;
    if (s_dispatch(self, job, wait_ms, timeout_ms, &reply) < 0)
        return -1;
    *id = reply.id;
    if (unique)
        *unique = reply.unique;
    bool waited = reply.cmd == OQ_CMD_WAITED;
    if (waited) {
        *state = reply.wait_state;
        if (error && error_len)
            oq_str_copy(reply.err_text, error, error_len);
    }
    oq_proto_msg_release(&reply);
    /* "dispatched": a broker that knows no wait in a dispatch, a unique
       key's holder, or a wait it could not hold. Wait apart. */
    return waited ? 0 : oq_client_wait(self, *id, wait_ms, timeout_ms, state, error, error_len);
}

int oq_client_requeue(oq_client_t *self, uint64_t id, int timeout_ms)
{
    assert(self);
    uint64_t req = s_next_req(self);
    oq_proto_encode_requeue(&self->buf, OQ_CMD_REQUEUE, (int64_t)req, id);
    oq_msg_t reply;
    if (s_request(self, req, timeout_ms, OQ_CMD_REQUEUED, &reply) < 0)
        return -1;
    oq_proto_msg_release(&reply);
    return 0;
}

int oq_client_stats(oq_client_t *self, int timeout_ms, oq_msg_t *reply)
{
    assert(self && reply);
    uint64_t req = s_next_req(self);
    oq_proto_encode_simple(&self->buf, OQ_CMD_STATS, (int64_t)req);
    return s_request(self, req, timeout_ms, OQ_CMD_STATS, reply);
}

int oq_client_stats_page(oq_client_t *self, uint64_t after, uint32_t limit, int timeout_ms,
                         oq_msg_t *reply)
{
    assert(self && reply);
    uint64_t req = s_next_req(self);
    oq_proto_encode_stats(&self->buf, (int64_t)req, after, limit);
    return s_request(self, req, timeout_ms, OQ_CMD_STATS, reply);
}

int oq_client_failed(oq_client_t *self, const char *queue, uint32_t limit, int timeout_ms,
                     oq_msg_t *reply)
{
    assert(self && reply);
    uint64_t req = s_next_req(self);
    oq_proto_encode_failed_request(&self->buf, (int64_t)req, queue, limit);
    return s_request(self, req, timeout_ms, OQ_CMD_FAILED, reply);
}

int oq_client_failed_page(oq_client_t *self, const char *queue, uint64_t after, uint32_t limit,
                          int timeout_ms, oq_msg_t *reply)
{
    assert(self && reply);
    uint64_t req = s_next_req(self);
    oq_proto_encode_failed_page(&self->buf, (int64_t)req, queue, after, limit);
    return s_request(self, req, timeout_ms, OQ_CMD_FAILED, reply);
}

int oq_client_failed_cursor(oq_client_t *self, const char *queue, int64_t after_at, uint64_t after,
                            uint32_t limit, int timeout_ms, oq_msg_t *reply)
{
    assert(self && reply);
    uint64_t req = s_next_req(self);
    oq_proto_encode_failed_cursor(&self->buf, (int64_t)req, queue, after_at, after, limit);
    return s_request(self, req, timeout_ms, OQ_CMD_FAILED, reply);
}

/* A request carrying one job id, answered by a reply carrying it. */
static int s_job_command(oq_client_t *self, oq_cmd_t cmd, oq_cmd_t expect, uint64_t id,
                         int timeout_ms)
{
    assert(self);
    uint64_t req = s_next_req(self);
    oq_proto_encode_job_id(&self->buf, cmd, (int64_t)req, id);
    oq_msg_t reply;
    if (s_request(self, req, timeout_ms, expect, &reply) < 0)
        return -1;
    oq_proto_msg_release(&reply);
    return 0;
}

int oq_client_review_page(oq_client_t *self, const char *queue, int64_t after_at, uint64_t after,
                          uint32_t limit, int timeout_ms, oq_msg_t *reply)
{
    assert(self && reply);
    uint64_t req = s_next_req(self);
    oq_proto_encode_review_page(&self->buf, (int64_t)req, queue, after_at, after, limit);
    return s_request(self, req, timeout_ms, OQ_CMD_REVIEW, reply);
}

int oq_client_review_show(oq_client_t *self, uint64_t id, int timeout_ms, oq_msg_t *reply)
{
    assert(self && reply);
    uint64_t req = s_next_req(self);
    oq_proto_encode_review_show(&self->buf, (int64_t)req, id);
    return s_request(self, req, timeout_ms, OQ_CMD_REVIEW_SHOW, reply);
}

int oq_client_resolve(oq_client_t *self, uint64_t id, oq_review_action_t action, const char *note,
                      int timeout_ms)
{
    assert(self);
    uint64_t req = s_next_req(self);
    if (note && strlen(note) > OQ_MAX_REVIEW_NOTE_LEN) {
        s_fail(self, OQ_ERR_TOO_LARGE, "the note is %zu bytes, the limit is %d", strlen(note),
               OQ_MAX_REVIEW_NOTE_LEN);
        return -1;
    }
    oq_proto_encode_resolve(&self->buf, OQ_CMD_RESOLVE, (int64_t)req, id, action, note);
    oq_msg_t reply;
    if (s_request(self, req, timeout_ms, OQ_CMD_RESOLVED, &reply) < 0)
        return -1;
    oq_proto_msg_release(&reply);
    return 0;
}

/* A request on the failed store of one queue, answered with a count. */
static int s_queue_command(oq_client_t *self, oq_cmd_t cmd, oq_cmd_t expect, const char *queue,
                           int timeout_ms, uint64_t *count)
{
    assert(self && count);
    uint64_t req = s_next_req(self);
    oq_proto_encode_queue_op(&self->buf, cmd, (int64_t)req, queue);
    oq_msg_t reply;
    if (s_request(self, req, timeout_ms, expect, &reply) < 0)
        return -1;
    *count = reply.count;
    oq_proto_msg_release(&reply);
    return 0;
}

int oq_client_forget(oq_client_t *self, uint64_t id, int timeout_ms)
{
    return s_job_command(self, OQ_CMD_FORGET, OQ_CMD_FORGOTTEN, id, timeout_ms);
}

int oq_client_cancel(oq_client_t *self, uint64_t id, int timeout_ms)
{
    return s_job_command(self, OQ_CMD_CANCEL, OQ_CMD_CANCELLED, id, timeout_ms);
}

int oq_client_flush(oq_client_t *self, const char *queue, int timeout_ms, uint64_t *count)
{
    return s_queue_command(self, OQ_CMD_FLUSH, OQ_CMD_FLUSHED, queue, timeout_ms, count);
}

int oq_client_requeue_all(oq_client_t *self, const char *queue, int timeout_ms, uint64_t *count)
{
    return s_queue_command(self, OQ_CMD_REQUEUE_ALL, OQ_CMD_REQUEUED_ALL, queue, timeout_ms, count);
}

/* The request in self->buf, answered {count, more} by reply_cmd. */
static int s_count_more(oq_client_t *self, uint64_t req, int timeout_ms, oq_cmd_t reply_cmd,
                        uint64_t *count, bool *more)
{
    oq_msg_t reply;
    if (s_request(self, req, timeout_ms, reply_cmd, &reply) < 0)
        return -1;
    *count = reply.count;
    /* The decoder checked that "more", if there, is a boolean. */
    const msgpack_object *m = oq_proto_map_get(&reply.root, "more");
    *more = m && m->via.boolean;
    oq_proto_msg_release(&reply);
    return 0;
}

int oq_client_prune_failed(oq_client_t *self, const char *queue, int64_t older_than_ms,
                           uint32_t limit, int timeout_ms, uint64_t *count, bool *more)
{
    assert(self && count && more);
    uint64_t req = s_next_req(self);
    oq_proto_encode_prune_failed(&self->buf, (int64_t)req, queue, older_than_ms, limit);
    return s_count_more(self, req, timeout_ms, OQ_CMD_PRUNED_FAILED, count, more);
}

int oq_client_clear(oq_client_t *self, const char *queue, uint32_t limit, int timeout_ms,
                    uint64_t *count, bool *more)
{
    assert(self && queue && count && more);
    uint64_t req = s_next_req(self);
    oq_proto_encode_clear(&self->buf, (int64_t)req, queue, limit);
    return s_count_more(self, req, timeout_ms, OQ_CMD_CLEARED, count, more);
}

int oq_client_horizon(oq_client_t *self, int timeout_ms, oq_msg_t *reply)
{
    assert(self && reply);
    uint64_t req = s_next_req(self);
    oq_proto_encode_simple(&self->buf, OQ_CMD_HORIZON, (int64_t)req);
    return s_request(self, req, timeout_ms, OQ_CMD_HORIZON, reply);
}

int oq_client_wait(oq_client_t *self, uint64_t id, int64_t wait_ms, int timeout_ms,
                   oq_wait_state_t *state, char *error, size_t error_len)
{
    assert(self && state && timeout_ms >= 0);
    if (error_len)
        error[0] = 0;
    uint64_t req = s_next_req(self);
    if (wait_ms < 0 || wait_ms > OQ_MAX_WAIT_MS) {
        s_fail(self, OQ_ERR_BAD_REQUEST, "a wait lasts 0 to %lld ms, not %lld",
               (long long)OQ_MAX_WAIT_MS, (long long)wait_ms);
        return -1;
    }
    oq_proto_encode_wait(&self->buf, (int64_t)req, id, wait_ms);
    oq_msg_t reply;
    /* The broker answers when the wait ends: give it that long and then
       the usual time for an answer. */
    int64_t patience = wait_ms + timeout_ms;
    if (s_request(self, req, patience > INT32_MAX ? INT32_MAX : (int)patience, OQ_CMD_WAITED,
                  &reply) < 0)
        return -1;
    *state = reply.wait_state;
    if (error && error_len)
        oq_str_copy(reply.err_text, error, error_len);
    oq_proto_msg_release(&reply);
    return 0;
}

int oq_client_ping(oq_client_t *self, int timeout_ms)
{
    assert(self);
    uint64_t req = s_next_req(self);
    oq_proto_encode_simple(&self->buf, OQ_CMD_PING, (int64_t)req);
    oq_msg_t reply;
    if (s_request(self, req, timeout_ms, OQ_CMD_PONG, &reply) < 0)
        return -1;
    oq_proto_msg_release(&reply);
    return 0;
}
