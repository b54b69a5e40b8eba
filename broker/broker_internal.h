/*  broker_internal.h: what the parts of onceq-broker's loop share, and
    nothing else links against. The loop (broker.c) owns one oq_broker_t;
    the gate (gate.c, gate_keys.c) reads each message and judges it; the
    command table (commands.c) names the handler of each command, and the
    handlers live by socket: the front's (front.c for producers,
    front_admin.c for the operator's stores, waits.c for waits) and the
    back's (back.c, with deliveries and heartbeats). report.c gathers the
    numbers for stats and /metrics.

    Every handler runs inside one loop turn and never blocks; replies go
    out through the gate's send, which keeps a front reply that meets a
    full pipe in the outbox. */
#ifndef ONCEQ_BROKER_INTERNAL_H
#define ONCEQ_BROKER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "broker.h"
#include "conns.h"
#include "keystore.h"
#include "metrics_http.h"
#include "onceq/proto.h"
#include "onceq/zpoll.h"
#include "outbox.h"
#include "peers.h"
#include "roles.h"
#include "stats.h"
#include "throttle.h"
#include "waiters.h"

/* Bytes of a peer's ROUTER identity kept; a longer one is cut. */
#define OQ_BROKER_MAX_IDENTITY 255

struct oq_broker {
    oq_broker_config_t config;
    const oq_clock_t *clock;
    void *ctx;
    void *front;
    void *back;
    oq_zsock_t front_wait; /* the sockets as the loop waits on them (onceq/zpoll.h) */
    oq_zsock_t back_wait;
    oq_engine_t *engine;
    oq_journal_t *journal; /* NULL with --no-journal */
    oq_compact_t *compact; /* NULL with --no-journal */
    oq_outbox_t *outbox;
    oq_conns_t *conns;            /* connections against the open-file limit; NULL if unwatched */
    oq_keystore_t *keys;          /* allowed keys; NULL: plaintext (--insecure) */
    oq_auth_t *auth;              /* the ZAP handler, with keys */
    oq_peers_t *peers;            /* connections per role, with keys and conns */
    oq_throttle_t *forbidden_log; /* a refused command is logged once a minute per key */
    uint64_t forbidden;           /* commands refused for the sender's key or role */
    oq_stats_messages_t messages; /* deliveries sent and acks received, per message */
    bool paused;                  /* deliveries paused: too many records wait for the disk */
    msgpack_sbuffer out;          /* reused encoding buffer */
    size_t stats_turn_bytes;      /* stats replies encoded in this loop turn */
    int64_t started_ms;
    int64_t next_heartbeat_ms;
    oq_metrics_http_t *metrics;      /* serving GET /metrics; NULL without --metrics */
    int64_t next_metrics_ms;         /* when the loop renders the metrics next */
    oq_waiters_t *waiters;           /* producers waiting for a job to end */
    oq_engine_hooks_t journal_hooks; /* the journal's observer; changed NULL without one */
    msgpack_sbuffer wait_out;        /* encoding buffer of answers to waits (waits.c) */
    int64_t kept_retry_ms;           /* wait before retrying replies kept for full pipes */
    int64_t next_kept_retry_ms;      /* when the loop retries them next */
};

/* Where a message came from and how to answer it. */
typedef struct {
    uint8_t identity[OQ_BROKER_MAX_IDENTITY];
    size_t identity_len;
    int fd;                    /* the connection's descriptor (ZMQ_SRCFD), -1 if unknown */
    bool delimiter;            /* a REQ peer: answer behind an empty frame */
    uint8_t key[OQ_KEY_BYTES]; /* the CURVE key libzmq stamped on the message (User-Id) */
    bool has_key;              /* false under --insecure */
} oq_envelope_t;

/* ---- gate.c: the sockets, and who may send what ---- */

/* The socket of side. Borrowed. */
void *oq_gate_socket(oq_broker_t *self, oq_side_t side);

/* Send self->out to a peer on sock, then clear the buffer. On the front a
   reply that meets a full pipe is kept and sent later, in order
   (outbox.h). 0 if it went out (or is kept), -1 if the peer is
   unreachable. */
int oq_gate_send(oq_broker_t *self, void *sock, const void *identity, size_t identity_len, int fd,
                 bool delimiter);

/* oq_outbox_send_fn for the front socket (ctx: the broker). */
int oq_gate_outbox_send(void *ctx, const void *identity, size_t identity_len, bool delimiter,
                        const void *body, size_t body_len);

/* oq_gate_send to the sender of env. */
int oq_gate_reply(oq_broker_t *self, void *sock, const oq_envelope_t *env);

/* Answer the sender of env with an error, at once. */
void oq_gate_reply_error(oq_broker_t *self, void *sock, const oq_envelope_t *env, int64_t req,
                         oq_err_t code, const char *text);

/* Read, judge and hand on messages from sock until it is empty, or up to
   one batch of them. */
void oq_gate_drain(oq_broker_t *self, void *sock);

/* ---- gate_keys.c: the keys in force ---- */

/* With --keys: read them and start the ZAP handler, which must be bound
   before the sockets it guards. 0 (also without --keys), or -1 with a
   reason. */
int oq_gate_keys_start(oq_broker_t *self, char *reason, size_t reason_len);

/* ---- front.c: producers' commands, and the promise of a durable reply ---- */

/* Before taking anything a restart must keep: can the journal take it?
   false after answering "unavailable". */
bool oq_front_can_promise(oq_broker_t *self, const oq_envelope_t *env, int64_t req);

/* The position a reply's records end at in the journal (0 without one). */
uint64_t oq_front_appended(const oq_broker_t *self);

/* Put the encoded reply in self->out into the outbox, to leave once the
   journal is durable up to where it is now. */
void oq_front_promise(oq_broker_t *self, const oq_envelope_t *env, int64_t req);

/* ---- waits.c: a producer waiting for a job to end ---- */

/* The engine's observer, installed in front of the journal's (ctx: the
   broker). */
/* The batches' and the chains' observers: the journal's (waits.c). */
int oq_waits_batch_changed(void *ctx, oq_batch_event_t event, const oq_batch_view_t *batch,
                           oq_batch_callback_t which);
int oq_waits_chain_changed(void *ctx, oq_chain_event_t event, const oq_chain_view_t *chain);

int oq_waits_changed(void *ctx, oq_job_event_t event, const oq_job_view_t *job,
                     const oq_job_msg_t *dispatch);

/* Wait for job id on behalf of env's sender (waits.c says how). confirms:
   the wait of a dispatch. 0 once answered or held, -1 if not (answered
   with an error, unless confirms). */
int oq_waits_for(oq_broker_t *self, const oq_envelope_t *env, int64_t req, uint64_t id,
                 int64_t wait_ms, bool confirms);

/* Answer "pending" to every wait whose timeout has passed. */
void oq_waits_expire(oq_broker_t *self);

/* ---- back.c: deliveries and heartbeats ---- */

/* oq_engine_pump_many's delivery (ctx: the broker). */
int oq_back_deliver(void *ctx, const oq_worker_view_t *worker, const oq_job_view_t *jobs,
                    size_t count);

/* Heartbeat every worker; a worker the socket says is gone dies now, one
   silent for `liveness` intervals dies by the reaper. */
void oq_back_beat(oq_broker_t *self);

/* ---- report.c: the numbers for stats and /metrics ---- */

/* The journal's, auth's, the waits' and the kept replies' numbers. */
void oq_report_gather(oq_broker_t *self, oq_stats_journal_t *journal, oq_stats_auth_t *auth,
                      oq_stats_waits_t *waits, oq_stats_replies_t *replies);

/* Render the metrics for the HTTP thread when they are due. */
void oq_report_publish_metrics(oq_broker_t *self, int64_t now);

#endif
