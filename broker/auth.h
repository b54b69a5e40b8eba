/*  auth.h: the broker's ZAP handler (ZeroMQ RFC 27). libzmq asks it about
    every CURVE handshake on the broker's sockets; it answers in the
    broker's own poll loop, from a REP socket bound to
    inproc://zeromq.zap.01 in the broker's context, with no thread of its
    own. A key the keystore allows gets 200 with the key itself (Z85) as
    the User-Id, which libzmq then attaches to every message of that
    connection: the broker looks the key up again at each message, so a
    key revoked by a reload stops working at once. An unknown key gets 400
    and is logged at most once a minute; a key whose role is at its
    connection limit (peers.h) gets 400 too. */
#ifndef ONCEQ_BROKER_AUTH_H
#define ONCEQ_BROKER_AUTH_H

#include <stdint.h>

#include "keystore.h"
#include "onceq/clock.h"
#include "onceq/zpoll.h"
#include "peers.h"

#define OQ_AUTH_ENDPOINT "inproc://zeromq.zap.01"

typedef struct oq_auth oq_auth_t;

/* Bind the handler in ctx; bind it before the sockets it guards. store
   is borrowed. NULL with a reason. */
oq_auth_t *oq_auth_new(void *ctx, const oq_keystore_t *store, const oq_clock_t *clock, char *reason,
                       size_t reason_len);

/* Close the socket, free, set *self_p to NULL. */
void oq_auth_destroy(oq_auth_t **self_p);

/* The socket to wait on for input (onceq/zpoll.h). Borrowed; oq_auth_poll
   keeps its state. */
oq_zsock_t *oq_auth_socket(oq_auth_t *self);

/* Refuse a key whose role is at its limit in peers (borrowed; NULL: no
   per-role limits, the default). */
void oq_auth_set_peers(oq_auth_t *self, oq_peers_t *peers);

/* Answer from now on with this store (borrowed), after a reload. */
void oq_auth_set_store(oq_auth_t *self, const oq_keystore_t *store);

/* Answer every waiting request, at most batch of them (more wait for the
   next call: the socket stays ready). Never blocks. */
void oq_auth_poll(oq_auth_t *self, int batch);

/* Handshakes since start: accepted, refused for an unknown key, refused
   because the key's role was at its limit. */
uint64_t oq_auth_accepted(const oq_auth_t *self);
uint64_t oq_auth_refused_unknown(const oq_auth_t *self);
uint64_t oq_auth_refused_full(const oq_auth_t *self);

#endif
