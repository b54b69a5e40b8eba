/*  roles.h: the roles a peer's key can have. With keys (--keys), every
    peer's public key belongs to one role (keystore.h), and every command
    names the roles that may send it in the roles column of the broker's
    command table (commands.c, the one place that says so):

        producer   front: dispatch, ping, stats, wait
        worker     back:  every worker command (ready, heartbeat, ack,
                          acks, touch, drain, disconnect, status)
        admin      front: every command (the producers' and the failed
                          store: list, requeue, forget, flush,
                          requeue_all, prune by age; cancel, clear; the review
                          store: list, show, resolve; the prune horizon)

    A command has one row, so a command added later is open to no role
    until its row names one. */
#ifndef ONCEQ_BROKER_ROLES_H
#define ONCEQ_BROKER_ROLES_H

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

#endif
