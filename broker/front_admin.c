/*  front_admin.c: the operator's commands on the front socket: the failed
    store (list, requeue, forget, flush, requeue_all, prune by age), cancel
    and clear (a queue's waiting jobs), the review
    store (list, show, resolve) and the prune horizon.

    Every change here is journaled, and its row in the command table is
    durable (commands.h): refused "unavailable" with nothing changed while
    the journal cannot take it, and answered only once its records are
    durable, so an operator told "forgotten" or "cancelled" never sees the
    job again after a restart. The lists and the horizon change nothing
    and are answered at once. */
#include <stdio.h>

#include "broker_internal.h"
#include "commands.h"
#include "onceq/limits.h"
#include "onceq/log.h"

/* The error code of a change the engine refused. */
static oq_err_t s_refusal_code(oq_refusal_t why)
{
    if (why == OQ_REFUSED_UNRECORDED)
        return OQ_ERR_UNAVAILABLE;
    return why == OQ_REFUSED_UNKNOWN ? OQ_ERR_NOT_FOUND : OQ_ERR_WRONG_STATE;
}

/* prune_failed: the failed jobs older than the age given, at most limit
   of them per request (the loop serves everyone else between two), each
   journaled as a forget, so that a restart does not bring them back. The
   reply says "more" while others of that age remain; the tool asks
   again. */
oq_answer_t oq_admin_prune_failed(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                                  const oq_msg_t *msg)
{
    char name[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(msg->name, name, sizeof name);
    const char *queue = msg->name.ptr ? name : NULL;
    uint64_t count = 0;
    bool more = false;
    int rc = oq_engine_prune_failed(self->engine, queue, msg->wait_ms, msg->limit, &count, &more);
    if (count)
        oq_info("pruned %llu failed job(s)%s%s that failed more than %lld s ago",
                (unsigned long long)count, queue ? " of queue " : "", queue ? queue : "",
                (long long)(msg->wait_ms / 1000));
    if (rc < 0) {
        char reason[256];
        snprintf(reason, sizeof reason,
                 "pruned %llu failed job(s), then the journal could not keep the next record "
                 "(out of memory); the rest stay failed, try again later",
                 (unsigned long long)count);
        oq_gate_reply_error(self, self->front, env, req, OQ_ERR_UNAVAILABLE, reason);
        return OQ_ANSWER_HANDLED;
    }
    oq_proto_encode_pruned_failed(&self->out, req, count, more);
    return OQ_ANSWER_READY;
}

/* The cursor of a page of the failed or the review store: (after_at,
   after) as given, or the time of job after looked up. 0, or -1 after
   answering with an error. */
static int s_store_cursor(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                          const oq_msg_t *msg, oq_failed_cursor_t *cursor)
{
    if (msg->has_after_at) {
        *cursor = (oq_failed_cursor_t){msg->after_at, msg->after};
        return 0;
    }
    if (oq_engine_failed_cursor(self->engine, msg->after, cursor) == 0)
        return 0;
    char reason[256];
    snprintf(reason, sizeof reason,
             "job %llu, the page's cursor, is no longer in the %s store: give its time too "
             "(\"after_at\", the previous page's \"next_at\")",
             (unsigned long long)msg->after, msg->cmd == OQ_CMD_REVIEW ? "review" : "failed");
    oq_gate_reply_error(self, self->front, env, req, OQ_ERR_NOT_FOUND, reason);
    return -1;
}

oq_answer_t oq_admin_failed(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                            const oq_msg_t *msg)
{
    char queue[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(msg->name, queue, sizeof queue);
    uint32_t limit = msg->limit ? msg->limit : OQ_DEFAULT_FAILED_LIST;
    oq_failed_cursor_t cursor;
    bool paged = msg->after || msg->has_after_at;
    if (paged && s_store_cursor(self, env, req, msg, &cursor) < 0)
        return OQ_ANSWER_HANDLED;
    oq_stats_encode_failed(&self->out, req, self->engine, msg->name.ptr ? queue : NULL,
                           paged ? &cursor : NULL, limit);
    return OQ_ANSWER_READY;
}

oq_answer_t oq_admin_requeue(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                             const oq_msg_t *msg)
{
    char reason[256];
    oq_refusal_t why;
    if (oq_engine_requeue(self->engine, msg->id, &why, reason, sizeof reason) < 0) {
        oq_gate_reply_error(self, self->front, env, req,
                            why == OQ_REFUSED_UNRECORDED ? OQ_ERR_UNAVAILABLE : OQ_ERR_BAD_REQUEST,
                            reason);
        return OQ_ANSWER_HANDLED;
    }
    oq_info("job %llu requeued from the failed store", (unsigned long long)msg->id);
    oq_proto_encode_requeue(&self->out, OQ_CMD_REQUEUED, req, msg->id);
    return OQ_ANSWER_READY;
}

/* flush or requeue_all: every failed job of one queue, or of all. */
static oq_answer_t s_failed_all(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                                const oq_msg_t *msg, bool flush)
{
    char name[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(msg->name, name, sizeof name);
    const char *queue = msg->name.ptr ? name : NULL;
    uint64_t count = 0;
    int rc = flush ? oq_engine_flush_failed(self->engine, queue, &count)
                   : oq_engine_requeue_all(self->engine, queue, &count);
    oq_info("%s %llu failed job(s)%s%s", flush ? "flushed" : "requeued", (unsigned long long)count,
            queue ? " of queue " : "", queue ? queue : "");
    if (rc < 0) {
        /* Those done are journaled; the rest stay failed. */
        char reason[256];
        snprintf(reason, sizeof reason,
                 "%s %llu failed job(s), then the journal could not keep the next record (out "
                 "of memory); the rest stay failed, try again later",
                 flush ? "flushed" : "requeued", (unsigned long long)count);
        oq_gate_reply_error(self, self->front, env, req, OQ_ERR_UNAVAILABLE, reason);
        return OQ_ANSWER_HANDLED;
    }
    oq_proto_encode_count(&self->out, flush ? OQ_CMD_FLUSHED : OQ_CMD_REQUEUED_ALL, req, count);
    return OQ_ANSWER_READY;
}

oq_answer_t oq_admin_requeue_all(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                                 const oq_msg_t *msg)
{
    return s_failed_all(self, env, req, msg, false);
}

oq_answer_t oq_admin_flush(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                           const oq_msg_t *msg)
{
    return s_failed_all(self, env, req, msg, true);
}

/* An engine change of one job that the engine may refuse (forget, cancel). */
typedef int s_change_fn(oq_engine_t *engine, uint64_t id, oq_refusal_t *why, char *reason,
                        size_t reason_len);

/* Make change to job id; on success log "job ID <done>" and encode reply. */
static oq_answer_t s_change(oq_broker_t *self, const oq_envelope_t *env, int64_t req, uint64_t id,
                            s_change_fn *change, oq_cmd_t reply, const char *done)
{
    char reason[512];
    oq_refusal_t why;
    if (change(self->engine, id, &why, reason, sizeof reason) < 0) {
        oq_gate_reply_error(self, self->front, env, req, s_refusal_code(why), reason);
        return OQ_ANSWER_HANDLED;
    }
    oq_info("job %llu %s", (unsigned long long)id, done);
    oq_proto_encode_job_id(&self->out, reply, req, id);
    return OQ_ANSWER_READY;
}

oq_answer_t oq_admin_forget(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                            const oq_msg_t *msg)
{
    return s_change(self, env, req, msg->id, oq_engine_forget, OQ_CMD_FORGOTTEN,
                    "forgotten: deleted from the failed store");
}

oq_answer_t oq_admin_cancel(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                            const oq_msg_t *msg)
{
    return s_change(self, env, req, msg->id, oq_engine_cancel, OQ_CMD_CANCELLED, "cancelled");
}

/* clear: the jobs of one queue that have not started, at most limit per
   request, each journaled as a cancel (so a restart does not bring them
   back, and a waiter on one is answered "cancelled"). Leased jobs are
   left to finish or fail. The reply says "more" while others wait; the
   tool asks again. */
oq_answer_t oq_admin_clear(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                           const oq_msg_t *msg)
{
    char queue[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(msg->name, queue, sizeof queue);
    uint64_t count = 0;
    bool more = false;
    int rc = oq_engine_clear(self->engine, queue, msg->limit, &count, &more);
    if (count)
        oq_info("cleared queue %s: %llu waiting job(s) cancelled%s", queue,
                (unsigned long long)count, more ? ", more remain" : "");
    if (rc < 0) {
        char reason[256];
        snprintf(reason, sizeof reason,
                 "cancelled %llu job(s) of queue %s, then the journal could not keep the next "
                 "record (out of memory); the rest still wait, try again later",
                 (unsigned long long)count, queue);
        oq_gate_reply_error(self, self->front, env, req, OQ_ERR_UNAVAILABLE, reason);
        return OQ_ANSWER_HANDLED;
    }
    oq_proto_encode_cleared(&self->out, req, count, more);
    return OQ_ANSWER_READY;
}

oq_answer_t oq_admin_horizon(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                             const oq_msg_t *msg)
{
    (void)env;
    (void)msg;
    oq_stats_encode_horizon(&self->out, req, self->engine, self->config.engine.dedupe_window_ms);
    return OQ_ANSWER_READY;
}

/* The review store's commands (docs/protocol.md, "review"). */
oq_answer_t oq_admin_review(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                            const oq_msg_t *msg)
{
    char queue[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(msg->name, queue, sizeof queue);
    oq_failed_cursor_t cursor;
    bool paged = msg->after || msg->has_after_at;
    if (paged && s_store_cursor(self, env, req, msg, &cursor) < 0)
        return OQ_ANSWER_HANDLED;
    oq_stats_encode_review(&self->out, req, self->engine, msg->name.ptr ? queue : NULL,
                           paged ? &cursor : NULL,
                           msg->limit ? msg->limit : OQ_DEFAULT_FAILED_LIST);
    return OQ_ANSWER_READY;
}

oq_answer_t oq_admin_review_show(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                                 const oq_msg_t *msg)
{
    if (oq_stats_encode_review_show(&self->out, req, self->engine, msg->id) == 0)
        return OQ_ANSWER_READY;
    char text[128];
    snprintf(text, sizeof text, "job %llu is not in review and has no resolution on record",
             (unsigned long long)msg->id);
    oq_gate_reply_error(self, self->front, env, req, OQ_ERR_NOT_FOUND, text);
    return OQ_ANSWER_HANDLED;
}

/* `resolve`: answered, like a requeue, once the resolution is durable. */
oq_answer_t oq_admin_resolve(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                             const oq_msg_t *msg)
{
    oq_review_action_t action;
    oq_str_t note_str;
    char reason[OQ_MAX_ERROR_LEN + 1], note[OQ_MAX_REVIEW_NOTE_LEN + 1];
    if (oq_proto_resolve_get(msg, &action, &note_str) < 0) {
        oq_gate_reply_error(self, self->front, env, req, OQ_ERR_BAD_REQUEST,
                            "a resolve needs an action");
        return OQ_ANSWER_HANDLED;
    }
    oq_str_copy(note_str, note, sizeof note);
    oq_refusal_t why;
    if (oq_engine_review_resolve(self->engine, msg->id, action, note, &why, reason, sizeof reason) <
        0) {
        oq_gate_reply_error(self, self->front, env, req, s_refusal_code(why), reason);
        return OQ_ANSWER_HANDLED;
    }
    oq_proto_encode_resolve(&self->out, OQ_CMD_RESOLVED, req, msg->id, action, note);
    return OQ_ANSWER_READY;
}
