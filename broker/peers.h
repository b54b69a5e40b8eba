/*  peers.h: the authenticated connections, one per descriptor, each bound
    to its key and role on its first message, and counted per role against
    a limit (--max-producers, --max-workers, --max-admins).

    Why at the first message: libzmq tells the ZAP handler a key, and the
    socket monitor a descriptor, but neither tells which goes with which.
    Every message carries both (its User-Id is the key, ZMQ_SRCFD the
    descriptor), so a connection is bound when it first speaks, and conns.h
    reports when its descriptor closes. The ZAP handler refuses a new peer
    of a role that is full already; peers that pass it together and would
    go over the limit are refused at their first message (the broker shuts
    their connection down). A connection that never speaks is counted only
    against the overall cap (--max-conns). */
#ifndef ONCEQ_BROKER_PEERS_H
#define ONCEQ_BROKER_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onceq/keys.h"
#include "roles.h"

typedef struct oq_peers oq_peers_t;

/* One bound connection, as oq_peers_each shows it. Borrowed. */
typedef struct {
    int fd;
    oq_side_t side;
    oq_role_t role;
    const uint8_t *key; /* OQ_KEY_BYTES */
    const uint8_t *identity;
    size_t identity_len;
} oq_peer_view_t;

/* Limits: max[role] connections of each role (max[OQ_ROLE_NONE] unused).
   NULL if out of memory. */
oq_peers_t *oq_peers_new(const size_t max[OQ_ROLE_COUNT_]);

/* Free it and set *self_p to NULL. */
void oq_peers_destroy(oq_peers_t **self_p);

/* A message came on connection fd (side) from key, whose role is role,
   with ROUTER identity. 0 if the connection is bound with that key and
   role (now, or before); -1 if binding it would take its role past the
   limit (it is then not bound: the caller refuses the connection). */
int oq_peers_bind(oq_peers_t *self, int fd, oq_side_t side, oq_role_t role,
                  const uint8_t key[OQ_KEY_BYTES], const void *identity, size_t identity_len);

/* Descriptor fd was opened or closed: whatever was bound to it is gone. */
void oq_peers_forget(oq_peers_t *self, int fd);

/* True while a new connection of role fits under its limit. */
bool oq_peers_room(const oq_peers_t *self, oq_role_t role);

/* Connections of role bound now, and the limit. */
size_t oq_peers_count(const oq_peers_t *self, oq_role_t role);
size_t oq_peers_max(const oq_peers_t *self, oq_role_t role);

/* A peer of role was refused for want of room: counted, and the first
   refusal of an episode is logged (so is getting below the limit again). */
void oq_peers_refusing(oq_peers_t *self, oq_role_t role);

/* Peers of role refused for want of room, since start. */
uint64_t oq_peers_refused(const oq_peers_t *self, oq_role_t role);

/* Call fn for every bound connection. fn must not bind or forget. */
void oq_peers_each(const oq_peers_t *self, void (*fn)(void *ctx, const oq_peer_view_t *peer),
                   void *ctx);

#endif
