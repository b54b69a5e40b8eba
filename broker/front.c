/*  front.c: the producers' commands on the front socket (admins may send
    them too), and the promise every durable reply keeps.

    The promise. A reply that says something a restart must keep
    ("dispatched", "requeued", "forgotten", ...) is not sent when it is
    made: the engine has reported the change to the journal, which buffers
    its record, and the reply goes to the outbox tagged with the journal
    position that record ends at. Before the loop sleeps the journal writes
    (and under --fsync always, fsyncs) the turn's records once, and the
    outbox sends each reply whose records are durable (group commit). So a
    durable row of the command table (commands.h) runs as: can the journal
    take it (oq_front_can_promise: "unavailable" if not, with nothing
    changed), the handler (which changes the engine and encodes the
    reply), then oq_front_promise. */
#include <stdio.h>

#include "broker_internal.h"
#include "commands.h"
#include "onceq/limits.h"
#include "onceq/log.h"

uint64_t oq_front_appended(const oq_broker_t *self)
{
    return self->journal ? oq_journal_appended(self->journal) : 0;
}

bool oq_front_can_promise(oq_broker_t *self, const oq_envelope_t *env, int64_t req)
{
    char reason[OQ_MAX_ERROR_LEN];
    if (self->journal && !oq_journal_healthy(self->journal)) {
        snprintf(reason, sizeof reason,
                 "the broker cannot make jobs durable (%s); nothing was queued, try again later",
                 oq_journal_error(self->journal));
    } else if (oq_outbox_count(self->outbox) >= OQ_MAX_OUTBOX_REPLIES) {
        snprintf(reason, sizeof reason,
                 "%d replies are waiting for the journal already; try again later",
                 OQ_MAX_OUTBOX_REPLIES);
    } else {
        return true;
    }
    oq_gate_reply_error(self, self->front, env, req, OQ_ERR_UNAVAILABLE, reason);
    return false;
}

void oq_front_promise(oq_broker_t *self, const oq_envelope_t *env, int64_t req)
{
    int rc =
        oq_outbox_add(self->outbox, oq_front_appended(self), req, env->identity, env->identity_len,
                      env->fd, env->delimiter, self->out.data, self->out.size);
    msgpack_sbuffer_clear(&self->out);
    if (rc < 0)
        oq_gate_reply_error(self, self->front, env, req, OQ_ERR_INTERNAL,
                            "out of memory keeping the reply; the request was carried out");
}

/* A dispatch with "wait" is answered by its wait (waits.c): once the
   job has ended, or "pending" at the timeout, through the outbox like a
   "dispatched". One whose unique key an earlier job holds, or whose wait
   cannot be held, is answered "dispatched" as without "wait". */
oq_answer_t oq_front_dispatch(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                              const oq_msg_t *msg)
{
    if (msg->chain || msg->chain_catch)
        return oq_front_dispatch_chain(self, env, req, msg);
    /* The waits and connections held count against --max-bytes too. */
    size_t conns = self->conns ? oq_conns_count(self->conns) : 0;
    oq_engine_set_outside_bytes(self->engine,
                                (uint64_t)oq_waiters_count(self->waiters) * OQ_WAIT_COST_BYTES +
                                    (uint64_t)conns * OQ_PEER_COST_BYTES);
    char reason[512];
    oq_err_t code;
    uint64_t id = 0;
    /* Refused with nothing queued if the journal cannot hold the job's
       record. A resend of a dispatch_id gets the first dispatch's answer,
       which waits like it for its record to be durable if it still has to;
       so does the answer naming a unique key's holder (rc 1). */
    int rc = oq_engine_dispatch(self->engine, &msg->job, &id, &code, reason, sizeof reason);
    if (rc < 0) {
        oq_gate_reply_error(self, self->front, env, req, code, reason);
        return OQ_ANSWER_HANDLED;
    }
    bool unique = rc == 1;
    if (msg->has_wait && !unique && oq_waits_for(self, env, req, id, msg->wait_ms, true) == 0)
        return OQ_ANSWER_HANDLED;
    if (unique)
        oq_proto_encode_dispatched_unique(&self->out, req, id);
    else
        oq_proto_encode_dispatched(&self->out, req, id);
    return OQ_ANSWER_READY;
}

oq_answer_t oq_front_ping(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                          const oq_msg_t *msg)
{
    (void)env;
    (void)msg;
    oq_proto_encode_simple(&self->out, OQ_CMD_PONG, req);
    return OQ_ANSWER_READY;
}

/* `stats`, with the page of workers the request asked for. Its bytes count
   against the turn's stats budget (oq_gate_drain). */
oq_answer_t oq_front_stats(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                           const oq_msg_t *msg)
{
    (void)env;
    oq_stats_journal_t j;
    oq_stats_auth_t a;
    oq_stats_waits_t w;
    oq_stats_replies_t r;
    oq_report_gather(self, &j, &a, &w, &r);
    size_t before = self->out.size;
    oq_stats_encode(&self->out, req, self->engine, oq_clock_now_ms(self->clock) - self->started_ms,
                    &j, &a, &self->messages, &w, &r, msg->after, msg->limit);
    self->stats_turn_bytes += self->out.size - before;
    return OQ_ANSWER_READY;
}

/* `wait` (waits.c). */
oq_answer_t oq_front_wait(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                          const oq_msg_t *msg)
{
    oq_waits_for(self, env, req, msg->id, msg->wait_ms, false);
    return OQ_ANSWER_HANDLED;
}
