/*  back.c: the back socket, the workers' side: their commands, the jobs
    handed to them, and the heartbeats both ways.

    A worker registers with "ready" and is then known by its ROUTER
    identity; any other command from an identity the engine does not know
    is answered "reconnect" (after its ack is applied: the ack's lease
    token, bound to the CURVE key of the connection, not the identity,
    says whether it counts). Lease tokens are checked by the engine
    (engine_acks.c); each message's key goes to it for that.

    Deliveries leave at once, before their records are durable: a job lost
    with an unwritten record was never confirmed. A delivery that fails
    (the worker has gone: ROUTER_MANDATORY) gives the worker's leases back.
    Heartbeats go to every worker each interval; one the socket says is
    gone dies now, one silent for `liveness` intervals dies by the reaper. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "broker_internal.h"
#include "commands.h"
#include "onceq/limits.h"
#include "onceq/log.h"

/* The sender's key for the engine: lease tokens are bound to it. */
static const uint8_t *s_key_of(const oq_envelope_t *env)
{
    return env->has_key ? env->key : NULL;
}

static void s_send_reconnect(oq_broker_t *self, const oq_envelope_t *env, const char *why)
{
    oq_proto_encode_reconnect(&self->out, why);
    oq_gate_reply(self, self->back, env);
}

static oq_worker_t *s_worker(oq_broker_t *self, const oq_envelope_t *env)
{
    return oq_engine_worker_find(self->engine, env->identity, env->identity_len);
}

/* The worker env's sender registered as, or NULL after telling it to send
   ready: a command that only a registered worker can mean. */
static oq_worker_t *s_known(oq_broker_t *self, const oq_envelope_t *env)
{
    oq_worker_t *w = s_worker(self, env);
    if (!w)
        s_send_reconnect(self, env, "unknown worker: send ready");
    return w;
}

/* ---- the workers' commands ---------------------------------------------------- */

/* A new worker is registered and welcomed; a known one's ready gives
   credit (and ends a drain: a stop that was cancelled). */
oq_answer_t oq_back_ready(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                          const oq_msg_t *msg)
{
    (void)req;
    oq_worker_t *w = s_worker(self, env);
    if (!w) {
        w = oq_engine_worker_add(self->engine, env->identity, env->identity_len, msg->name,
                                 msg->pid, s_key_of(env));
        if (!w) {
            oq_gate_reply_error(self, self->back, env, -1, OQ_ERR_FULL,
                                "the broker cannot register more workers");
            return OQ_ANSWER_HANDLED;
        }
        char why[256];
        if (oq_engine_worker_route(self->engine, w, msg->types, msg->queues, why, sizeof why) < 0) {
            oq_engine_worker_remove(self->engine, &w, "refused");
            oq_gate_reply_error(self, self->back, env, -1, OQ_ERR_FULL, why);
            return OQ_ANSWER_HANDLED;
        }
        oq_info("worker registered: pid %u name \"%.*s\" credit %u, %u type(s), %u "
                "queue(s) (0: every one)",
                msg->pid, (int)msg->name.len, msg->name.ptr ? msg->name.ptr : "", msg->credit,
                oq_proto_list_size(msg->types), oq_proto_list_size(msg->queues));
        oq_proto_encode_welcome_acks(&self->out, (uint32_t)self->config.heartbeat_ms,
                                     (uint32_t)self->config.liveness, OQ_MAX_ACKS_PER_MSG);
        if (oq_gate_reply(self, self->back, env) < 0) {
            oq_engine_worker_remove(self->engine, &w, "unreachable");
            return OQ_ANSWER_HANDLED;
        }
    }
    oq_engine_worker_seen(self->engine, w);
    oq_engine_worker_jobs_per_msg(self->engine, w, msg->jobs_per_msg);
    oq_engine_worker_resume(self->engine, w);
    oq_engine_worker_credit(self->engine, w, msg->credit);
    return OQ_ANSWER_HANDLED;
}

oq_answer_t oq_back_heartbeat(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                              const oq_msg_t *msg)
{
    (void)req;
    (void)msg;
    oq_worker_t *w = s_known(self, env);
    if (w)
        oq_engine_worker_seen(self->engine, w);
    return OQ_ANSWER_HANDLED;
}

static void s_ack(oq_broker_t *self, const oq_envelope_t *env, oq_worker_t *w,
                  const oq_ack_msg_t *ack)
{
    oq_ack_effect_t effect = oq_engine_ack(self->engine, w, s_key_of(env), ack);
    if (effect != OQ_ACK_APPLIED)
        oq_debug("ack for job %llu attempt %u: %s", (unsigned long long)ack->id, ack->attempt,
                 effect == OQ_ACK_LATE     ? "late, completed the job"
                 : effect == OQ_ACK_FENCED ? "fenced: no valid lease token, ignored"
                                           : "ignored");
}

oq_answer_t oq_back_ack(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                        const oq_msg_t *msg)
{
    (void)req;
    oq_worker_t *w = s_worker(self, env);
    self->messages.ack_received++;
    s_ack(self, env, w, &msg->ack);
    if (!w)
        s_send_reconnect(self, env, "unknown worker: ack applied, send ready");
    return OQ_ANSWER_HANDLED;
}

/* Each entry of an "acks" message as if it had come alone: an entry that
   does not decode gets its own error, naming its place in the list (and
   its job, if that can be read), and the others are applied all the same. */
oq_answer_t oq_back_acks(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                         const oq_msg_t *msg)
{
    (void)req;
    oq_worker_t *w = s_worker(self, env);
    uint32_t count = oq_proto_entry_count(msg);
    self->messages.acks_received++;
    self->messages.acks_entries += count;
    for (uint32_t i = 0; i < count; i++) {
        oq_msg_t entry;
        oq_err_t code;
        char reason[256];
        if (oq_proto_decode_entry(msg, i, &entry, &code, reason, sizeof reason) == 0) {
            s_ack(self, env, w, &entry.ack);
        } else {
            uint64_t id = 0, lease;
            uint32_t attempt = 0;
            bool has_lease;
            char text[384], job[64] = "";
            if (oq_proto_entry_ids(msg, i, &id, &attempt, &has_lease, &lease) == 0)
                snprintf(job, sizeof job, " (job %llu attempt %u)", (unsigned long long)id,
                         attempt);
            snprintf(text, sizeof text, "acks entry %u of %u%s refused, the others applied: %s", i,
                     count, job, reason);
            oq_gate_reply_error(self, self->back, env, -1, code, text);
        }
        oq_proto_msg_release(&entry);
    }
    if (!w)
        s_send_reconnect(self, env, "unknown worker: acks applied, send ready");
    return OQ_ANSWER_HANDLED;
}

oq_answer_t oq_back_touch(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                          const oq_msg_t *msg)
{
    (void)req;
    oq_worker_t *w = s_worker(self, env);
    if (oq_engine_touch(self->engine, w, s_key_of(env), &msg->ack) < 0)
        oq_debug("touch for job %llu attempt %u changed nothing", (unsigned long long)msg->ack.id,
                 msg->ack.attempt);
    if (!w)
        s_send_reconnect(self, env, "unknown worker: send ready");
    return OQ_ANSWER_HANDLED;
}

oq_answer_t oq_back_drain(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                          const oq_msg_t *msg)
{
    (void)req;
    (void)msg;
    oq_worker_t *w = s_known(self, env);
    if (w)
        oq_engine_worker_drain(self->engine, w);
    return OQ_ANSWER_HANDLED;
}

oq_answer_t oq_back_disconnect(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                               const oq_msg_t *msg)
{
    (void)req;
    (void)msg;
    oq_worker_t *w = s_worker(self, env);
    if (w)
        oq_engine_worker_remove(self->engine, &w, "disconnected");
    return OQ_ANSWER_HANDLED;
}

oq_answer_t oq_back_status(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                           const oq_msg_t *msg)
{
    (void)req;
    oq_worker_t *w = s_known(self, env);
    if (w) {
        oq_engine_worker_seen(self->engine, w);
        oq_engine_worker_status(self->engine, w, msg->status, msg->status_ms, msg->err_text);
    }
    return OQ_ANSWER_HANDLED;
}

/* ---- deliveries and heartbeats ------------------------------------------------------ */

static void s_job_msg(const oq_job_view_t *job, oq_job_msg_t *out)
{
    oq_job_msg_t msg = {
        .id = job->id,
        .type = oq_str(job->type),
        .queue = oq_str(job->queue),
        .payload = job->payload,
        .payload_len = job->payload_len,
        .attempt = job->attempt,
        .max_tries = job->max_tries,
        .timeout_ms = job->timeout_ms,
        .has_timeout = true,
        .lease = job->lease,
        .has_lease = true,
    };
    if (job->backoff_ms) {
        memcpy(msg.backoff_ms, job->backoff_ms, job->backoff_len * sizeof *job->backoff_ms);
        msg.backoff_len = job->backoff_len;
    }
    *out = msg;
}

/* One "job" message, or one "jobs" message for several (the engine keeps
   them within the worker's jobs_per_msg and the frame's budget). */
int oq_back_deliver(void *ctx, const oq_worker_view_t *worker, const oq_job_view_t *jobs,
                    size_t count)
{
    oq_broker_t *self = ctx;
    oq_job_msg_t msgs[OQ_MAX_JOBS_PER_MSG];
    assert(count >= 1 && count <= OQ_MAX_JOBS_PER_MSG);
    for (size_t i = 0; i < count; i++)
        s_job_msg(&jobs[i], &msgs[i]);
    if (count == 1)
        oq_proto_encode_job(&self->out, &msgs[0]);
    else
        oq_proto_encode_jobs(&self->out, msgs, count);
    if (oq_gate_send(self, self->back, worker->identity, worker->identity_len, -1, false) < 0) {
        oq_warn("cannot deliver job %llu%s to worker pid %u: %s", (unsigned long long)jobs[0].id,
                count > 1 ? " and the jobs sent with it" : "", worker->pid,
                zmq_strerror(zmq_errno()));
        return -1;
    }
    bool several = count > 1;
    self->messages.job_sent += !several;
    self->messages.jobs_sent += several;
    self->messages.jobs_entries += several ? count : 0;
    return 0;
}

typedef struct {
    oq_broker_t *broker;
    uint8_t (*gone)[OQ_BROKER_MAX_IDENTITY + 1]; /* identities that could not be reached */
    size_t gone_count;
} s_beat_t;

static void s_beat_one(void *ctx, const oq_worker_view_t *w)
{
    s_beat_t *beat = ctx;
    oq_proto_encode_simple(&beat->broker->out, OQ_CMD_HEARTBEAT, -1);
    if (oq_gate_send(beat->broker, beat->broker->back, w->identity, w->identity_len, -1, false) <
            0 &&
        beat->gone) {
        beat->gone[beat->gone_count][0] = (uint8_t)w->identity_len;
        memcpy(&beat->gone[beat->gone_count][1], w->identity, w->identity_len);
        beat->gone_count++;
    }
}

void oq_back_beat(oq_broker_t *self)
{
    s_beat_t beat = {self, NULL, 0};
    size_t workers = oq_engine_worker_count(self->engine);
    if (workers)
        beat.gone = malloc(workers * sizeof *beat.gone);
    oq_engine_worker_each(self->engine, s_beat_one, &beat);
    for (size_t i = 0; i < beat.gone_count; i++) {
        oq_worker_t *w = oq_engine_worker_find(self->engine, &beat.gone[i][1], beat.gone[i][0]);
        oq_engine_worker_remove(self->engine, &w, "disconnected");
    }
    free(beat.gone);
    oq_engine_reap_workers(self->engine,
                           (int64_t)self->config.heartbeat_ms * self->config.liveness);
}
