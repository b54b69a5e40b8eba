/*  waits.c: a producer waiting for a job to end ("wait", and "dispatch"
    with "wait"), on top of the waiters' bookkeeping (waiters.h).

    The broker hears of every end through the engine's observer, which it
    installs in front of the journal's (oq_waits_changed): once the journal
    has taken a record of a job's end (done, failed, review, cancelled),
    that job's waiters are answered through the outbox like a dispatch, so
    an answer never says more than a restart would keep. A wait whose
    timeout passes is answered "pending" at once. */
#include <stdio.h>
#include <string.h>

#include "broker_internal.h"
#include "onceq/log.h"

/* Send the answer in self->wait_out to waiter w once the journal is
   durable up to where it is now (the record of the end it reports), as a
   dispatch's answer waits; with the outbox full, at once, unless it
   confirms a dispatch: that one is answered "unavailable", and the
   producer's resend with the same dispatch_id finds the job. */
static void s_wait_answer(oq_broker_t *self, const oq_waiter_view_t *w)
{
    if (oq_outbox_add(self->outbox, oq_front_appended(self), w->req, w->identity, w->identity_len,
                      w->fd, w->delimiter, self->wait_out.data, self->wait_out.size) < 0) {
        if (w->confirms) {
            oq_envelope_t env = {
                .identity_len = w->identity_len, .fd = w->fd, .delimiter = w->delimiter};
            memcpy(env.identity, w->identity, w->identity_len);
            oq_gate_reply_error(self, self->front, &env, w->req, OQ_ERR_UNAVAILABLE,
                                "too many replies wait for the journal to confirm the job's "
                                "dispatch; send it again with the same dispatch_id");
        } else {
            oq_outbox_send(self->outbox, w->identity, w->identity_len, w->fd, w->delimiter,
                           self->wait_out.data, self->wait_out.size, oq_gate_outbox_send, self);
        }
    }
    msgpack_sbuffer_clear(&self->wait_out);
}

typedef struct {
    oq_broker_t *broker;
    oq_wait_state_t state;
    const char *error; /* the failed job's error, the reviewed job's reason; or NULL */
} s_ended_t;

static void s_answer_ended(void *ctx, const oq_waiter_view_t *w)
{
    s_ended_t *ended = ctx;
    oq_proto_encode_waited(&ended->broker->wait_out, w->req, w->job_id, ended->state, ended->error);
    s_wait_answer(ended->broker, w);
}

/* "pending" promises nothing and leaves at once, unless it answers a
   dispatch: then it confirms the job as "dispatched" would, and waits for
   the journal like one. */
static void s_answer_pending(void *ctx, const oq_waiter_view_t *w)
{
    oq_broker_t *self = ctx;
    oq_proto_encode_waited(&self->wait_out, w->req, w->job_id, OQ_WAIT_PENDING, NULL);
    if (w->confirms) {
        s_wait_answer(self, w);
        return;
    }
    if (oq_outbox_send(self->outbox, w->identity, w->identity_len, w->fd, w->delimiter,
                       self->wait_out.data, self->wait_out.size, oq_gate_outbox_send, self) < 0)
        oq_debug("a waiter for job %llu went away before its timeout",
                 (unsigned long long)w->job_id);
    msgpack_sbuffer_clear(&self->wait_out);
}

int oq_waits_batch_changed(void *ctx, oq_batch_event_t event, const oq_batch_view_t *batch,
                           oq_batch_callback_t which)
{
    oq_broker_t *self = ctx;
    const oq_engine_hooks_t *journal = &self->journal_hooks;
    return journal->batch ? journal->batch(journal->ctx, event, batch, which) : 0;
}

int oq_waits_chain_changed(void *ctx, oq_chain_event_t event, const oq_chain_view_t *chain)
{
    oq_broker_t *self = ctx;
    const oq_engine_hooks_t *journal = &self->journal_hooks;
    return journal->chain ? journal->chain(journal->ctx, event, chain) : 0;
}

/* The journal records the change first (and may refuse an asked one),
   then the waiters of a job that ended are answered. Called inside engine
   calls: it touches only the waiters, the outbox and its own buffer. */
int oq_waits_changed(void *ctx, oq_job_event_t event, const oq_job_view_t *job,
                     const oq_job_msg_t *dispatch)
{
    oq_broker_t *self = ctx;
    const oq_engine_hooks_t *journal = &self->journal_hooks;
    int rc = journal->changed ? journal->changed(journal->ctx, event, job, dispatch) : 0;
    /* An asked change the journal cannot keep is not made; any other has
       happened already, and its waiters hear of it (their answers then
       wait for the journal, and are answered "unavailable" if it fails). */
    if (rc < 0 && oq_engine_asked(event))
        return -1;
    s_ended_t ended = {self, OQ_WAIT_DONE, NULL};
    switch (event) {
    case OQ_EVENT_DONE:
        break;
    case OQ_EVENT_FAILED:
        ended = (s_ended_t){self, OQ_WAIT_FAILED, job->error};
        break;
    case OQ_EVENT_REVIEW:
        ended = (s_ended_t){self, OQ_WAIT_REVIEW, job->error};
        break;
    case OQ_EVENT_CANCELLED:
        ended.state = OQ_WAIT_CANCELLED;
        oq_waiters_remember_end(self->waiters, job->id, OQ_WAIT_CANCELLED);
        break;
    case OQ_EVENT_FORGOTTEN:
        /* A failed job: its waiters were answered when it failed. */
        oq_waiters_remember_end(self->waiters, job->id, OQ_WAIT_FAILED);
        return rc;
    default:
        return rc;
    }
    oq_waiters_end(self->waiters, job->id, s_answer_ended, &ended);
    return rc;
}

/* A job that has ended (or is in the failed or review store) is answered
   at once, one that is live is waited for, an id the broker never issued
   is refused. A job the broker no longer holds has ended: ids only grow,
   and the journal keeps the next one, so below it an id not held is a job
   that completed, unless it is remembered as cancelled or deleted from
   the failed store. confirms: the wait of a dispatch (front.c), whose
   every answer goes through the outbox. A wait read after its connection
   closed is not held: nobody is there to answer (its connection's other
   waits went at the close, broker.c's s_forget_fd). */
int oq_waits_for(oq_broker_t *self, const oq_envelope_t *env, int64_t req, uint64_t id,
                 int64_t wait_ms, bool confirms)
{
    char reason[256];
    oq_job_view_t view;
    s_ended_t ended = {self, OQ_WAIT_DONE, NULL};
    oq_waiter_view_t now = {id,      req, env->identity, env->identity_len, env->fd, env->delimiter,
                            confirms};
    oq_waiter_owner_t owner = {env->identity, env->identity_len, env->fd,
                               env->has_key ? env->key : NULL, env->delimiter};
    if (oq_engine_job_view(self->engine, id, &view) == 0) {
        if (view.state == OQ_STATE_FAILED || view.state == OQ_STATE_REVIEW) {
            ended.state = view.state == OQ_STATE_FAILED ? OQ_WAIT_FAILED : OQ_WAIT_REVIEW;
            ended.error = view.error;
        } else if (wait_ms == 0) {
            s_answer_pending(self, &now);
            return 0;
        } else if (self->conns && oq_conns_closed(self->conns, env->fd)) {
            oq_debug("a wait for job %llu came from a connection that has closed: not held",
                     (unsigned long long)id);
            return 0;
        } else {
            if (oq_waiters_add(self->waiters, id, wait_ms, &owner, confirms, req, reason,
                               sizeof reason) == 0)
                return 0;
            /* A dispatch is answered "dispatched" instead: the job is queued. */
            if (!confirms)
                oq_gate_reply_error(self, self->front, env, req, OQ_ERR_FULL, reason);
            return -1;
        }
    } else if (id >= oq_engine_next_id(self->engine)) {
        snprintf(reason, sizeof reason,
                 "job %llu was never issued: this broker's newest job id is %llu",
                 (unsigned long long)id, (unsigned long long)(oq_engine_next_id(self->engine) - 1));
        oq_gate_reply_error(self, self->front, env, req, OQ_ERR_NOT_FOUND, reason);
        return -1;
    } else {
        oq_waiters_recall_end(self->waiters, id, &ended.state);
    }
    s_answer_ended(&ended, &now);
    return 0;
}

void oq_waits_expire(oq_broker_t *self)
{
    oq_waiters_expire(self->waiters, s_answer_pending, self);
}
