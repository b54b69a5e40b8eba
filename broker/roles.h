/*  roles.h: who may send what. With keys (--keys), every peer's public key
    belongs to one role, and every command has the roles that may send it:
    the table s_command_roles in roles.c is the one place that says so.

        producer   front: dispatch, ping, stats
        worker     back:  every worker command (ready, heartbeat, ack,
                          touch, drain, disconnect, and any added later)
        admin      front: every command (the failed store: list, requeue,
                          forget, flush, prune by age; cancel; the review
                          store: list, show, resolve; the prune horizon;
                          and any added later)

    A command missing from the table falls to the rule of its socket:
    admin-only on the front, worker-only on the back, so that a command
    added later is never open to a producer by accident. Which socket a
    command belongs on is checked before this (broker.c); this says only
    whether the sender's role may send it. */
#ifndef ONCEQ_BROKER_ROLES_H
#define ONCEQ_BROKER_ROLES_H

#include <stdbool.h>

#include "onceq/proto.h"

typedef enum {
    OQ_ROLE_NONE = 0, /* no role: an unknown or revoked key */
    OQ_ROLE_PRODUCER,
    OQ_ROLE_WORKER,
    OQ_ROLE_ADMIN,
    OQ_ROLE_COUNT_
} oq_role_t;

/* The two sockets a command can arrive on. */
typedef enum { OQ_SIDE_FRONT, OQ_SIDE_BACK } oq_side_t;

/* "producer", "worker", "admin" ("none" for OQ_ROLE_NONE). Static. */
const char *oq_role_name(oq_role_t role);

/* The plural, for the key directories and messages: "producers", ... */
const char *oq_role_plural(oq_role_t role);

/* True if a peer of role may send cmd on side. OQ_ROLE_NONE may send
   nothing. */
bool oq_roles_allow(oq_role_t role, oq_side_t side, oq_cmd_t cmd);

#endif
