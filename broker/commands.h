/*  commands.h: the broker's command table. One row per command a peer may
    send: the socket it belongs on, the roles whose keys may send it, whether
    its answer waits until its records are durable, and its handler. The
    gate (gate.c) refuses a command no row names on the socket it came on
    ("unknown_command"), then one the sender's role may not send
    ("forbidden"), then one whose fields do not decode; everything else goes
    to oq_command_run, which calls the row's handler.

    A durable row is an operator's or a producer's change that a restart
    must keep (dispatch, requeue, the failed store's commands, cancel,
    clear, resolve): it is refused "unavailable" before its handler runs if the
    journal cannot take it, and its reply leaves through the outbox once the
    journal has made its records durable. Any other row's reply leaves at
    once.

    Adding a command: its entry in onceq/proto.h and docs/protocol.md, one
    row in commands.c, and one handler beside its socket's others, named
    in the list at the end of this header. */
#ifndef ONCEQ_BROKER_COMMANDS_H
#define ONCEQ_BROKER_COMMANDS_H

#include <stdbool.h>

#include "broker_internal.h"

/* The roles of a row, as bits. */
#define OQ_ROLE_BIT(role) (1u << (role))

/* What a handler did with its request. */
typedef enum {
    OQ_ANSWER_READY,   /* its reply is in self->out: oq_command_run sends it as the row says */
    OQ_ANSWER_HANDLED, /* answered already (an error, a held wait), or nothing to answer */
} oq_answer_t;

/* A handler: carries out msg from env's sender, whose req is req (-1 if
   none). Called only for a message that decoded, on its row's socket,
   from a role the row allows. */
typedef oq_answer_t oq_command_fn(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                                  const oq_msg_t *msg);

typedef struct {
    oq_cmd_t cmd;
    oq_side_t side;         /* the socket it belongs on */
    unsigned roles;         /* OQ_ROLE_BIT of each role that may send it (with --keys) */
    bool durable;           /* journaled: answered only once its records are durable */
    oq_command_fn *handler; /* one per row */
} oq_command_t;

/* The row of cmd, or NULL if a peer may not send it. Static. */
const oq_command_t *oq_command_find(oq_cmd_t cmd);

/* The table itself, for tests that walk it: *count rows. Static. */
const oq_command_t *oq_command_table(size_t *count);

/* True if a peer of role may send cmd on side: cmd has a row on side
   that names role. OQ_ROLE_NONE may send nothing. */
bool oq_command_allows(oq_role_t role, oq_side_t side, oq_cmd_t cmd);

/* Carry out msg by its row: for a durable row, only if the journal can
   take it; then the handler; then send what it encoded, at once or once
   durable. */
void oq_command_run(oq_broker_t *self, const oq_command_t *row, const oq_envelope_t *env,
                    const oq_msg_t *msg);

/* ---- the handlers, by the file they live in ---- */

/* front.c: producers (and admins) */
oq_command_fn oq_front_dispatch, oq_front_ping, oq_front_stats, oq_front_wait;
/* Batches and chains (front_batches.c). */
oq_command_fn oq_front_dispatch_batch, oq_front_dispatch_chain, oq_admin_batch, oq_admin_chain;

/* front_admin.c: the failed and review stores, cancel, clear, the prune horizon */
oq_command_fn oq_admin_failed, oq_admin_requeue, oq_admin_requeue_all, oq_admin_forget,
    oq_admin_flush, oq_admin_prune_failed, oq_admin_cancel, oq_admin_clear, oq_admin_horizon,
    oq_admin_review, oq_admin_review_show, oq_admin_resolve;

/* back.c: workers */
oq_command_fn oq_back_ready, oq_back_heartbeat, oq_back_ack, oq_back_acks, oq_back_touch,
    oq_back_drain, oq_back_disconnect, oq_back_status;

#endif
