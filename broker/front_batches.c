/*  front_batches.c: batches and chains on the front socket.

    dispatch_batch is a dispatch of many: every job is decoded and checked
    before the engine sees any, the engine queues all or none, and the
    reply waits in the outbox until the batch's records are durable (its
    row is durable, commands.h). A dispatch with a chain is decoded the
    same way, link by link, and answered "dispatched" once durable (a
    chained dispatch takes no "wait"). batch is the admin's view (show,
    list) and cancel, which is journaled like cancel and so answered once
    durable; chain shows a job's place in its chain. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_reply.h"
#include "broker_internal.h"
#include "commands.h"
#include "onceq/limits.h"
#include "onceq/log.h"

oq_answer_t oq_front_dispatch_batch(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                                    const oq_msg_t *msg)
{
    size_t conns = self->conns ? oq_conns_count(self->conns) : 0;
    oq_engine_set_outside_bytes(self->engine,
                                (uint64_t)oq_waiters_count(self->waiters) * OQ_WAIT_COST_BYTES +
                                    (uint64_t)conns * OQ_PEER_COST_BYTES);
    uint32_t n = oq_proto_entry_count(msg);
    oq_job_msg_t *jobs = calloc(n + OQ_BATCH_CALLBACKS, sizeof *jobs);
    msgpack_sbuffer *payloads = calloc(n + OQ_BATCH_CALLBACKS, sizeof *payloads);
    char reason[512], why[400];
    oq_err_t code = OQ_ERR_INTERNAL;
    int rc = -1;
    uint32_t decoded = 0;
    snprintf(reason, sizeof reason, "out of memory decoding the batch");
    if (!jobs || !payloads)
        goto done;
    oq_batch_msg_t batch = {.jobs = jobs,
                            .count = n,
                            .allow_failures = msg->allow_failures,
                            .dispatch_id = msg->job.dispatch_id};
    static const char *const names[OQ_BATCH_CALLBACKS] = {"then", "catch", "finally"};
    for (; decoded < n + OQ_BATCH_CALLBACKS; decoded++) {
        bool callback = decoded >= n;
        const msgpack_object *map =
            callback ? msg->callbacks[decoded - n] : &msg->entries->via.array.ptr[decoded];
        if (!map)
            continue;
        if (oq_proto_decode_job_object(map, &jobs[decoded], &payloads[decoded], &code, why,
                                       sizeof why) < 0) {
            if (callback)
                snprintf(reason, sizeof reason, "the %s callback: %s", names[decoded - n], why);
            else
                snprintf(reason, sizeof reason, "job %u of the batch: %s", decoded, why);
            decoded++; /* its payload buffer is to be freed too */
            goto done;
        }
        if (callback)
            batch.callbacks[decoded - n] = &jobs[decoded];
    }
    uint64_t id = 0, first = 0;
    rc = oq_engine_dispatch_batch(self->engine, &batch, &id, &first, &code, reason, sizeof reason);
    if (rc == 0)
        oq_proto_encode_batch_dispatched(&self->out, req, id, first, n);
done:
    for (uint32_t i = 0; payloads && i < decoded; i++)
        msgpack_sbuffer_destroy(&payloads[i]);
    free(payloads);
    free(jobs);
    if (rc < 0) {
        oq_gate_reply_error(self, self->front, env, req, code, reason);
        return OQ_ANSWER_HANDLED;
    }
    return OQ_ANSWER_READY;
}

/* Called by oq_front_dispatch for a dispatch with a chain: within the
   dispatch row, which is durable. */
oq_answer_t oq_front_dispatch_chain(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                                    const oq_msg_t *msg)
{
    uint32_t n = msg->chain ? msg->chain->via.array.size : 0;
    oq_job_msg_t links[OQ_MAX_CHAIN_LINKS + 1];
    msgpack_sbuffer payloads[OQ_MAX_CHAIN_LINKS + 1];
    char reason[512], why[400];
    oq_err_t code = OQ_ERR_INTERNAL;
    uint32_t decoded = 0;
    int rc = 0;
    for (; rc == 0 && decoded <= n; decoded++) {
        const msgpack_object *map =
            decoded < n ? &msg->chain->via.array.ptr[decoded] : msg->chain_catch;
        if (!map) {
            memset(&links[decoded], 0, sizeof links[decoded]);
            msgpack_sbuffer_init(&payloads[decoded]);
            continue;
        }
        rc = oq_proto_decode_job_object(map, &links[decoded], &payloads[decoded], &code, why,
                                        sizeof why);
        if (rc < 0 && decoded < n)
            snprintf(reason, sizeof reason, "link %u of the chain: %s", decoded + 1, why);
        else if (rc < 0)
            snprintf(reason, sizeof reason, "chain_catch: %s", why);
    }
    uint64_t id = 0;
    if (rc == 0)
        rc = oq_engine_dispatch_chain(self->engine, &msg->job, links, n,
                                      msg->chain_catch ? &links[n] : NULL, &id, &code, reason,
                                      sizeof reason);
    for (uint32_t i = 0; i < decoded; i++)
        msgpack_sbuffer_destroy(&payloads[i]);
    if (rc < 0) {
        oq_gate_reply_error(self, self->front, env, req, code, reason);
        return OQ_ANSWER_HANDLED;
    }
    oq_proto_encode_dispatched(&self->out, req, id);
    return OQ_ANSWER_READY;
}

oq_answer_t oq_admin_batch(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                           const oq_msg_t *msg)
{
    char reason[256];
    oq_batch_view_t view;
    if (oq_str_eq(msg->name, "list")) {
        oq_batch_reply_list(&self->out, req, self->engine);
        return OQ_ANSWER_READY;
    }
    if (oq_str_eq(msg->name, "show")) {
        if (oq_engine_batch_view(self->engine, msg->id, &view) < 0) {
            snprintf(reason, sizeof reason,
                     "batch %llu is not known: never dispatched, or settled and forgotten "
                     "(settled batches are remembered until %d newer ones settle, and not "
                     "across a restart)",
                     (unsigned long long)msg->id, OQ_RECENT_BATCHES);
            oq_gate_reply_error(self, self->front, env, req, OQ_ERR_NOT_FOUND, reason);
            return OQ_ANSWER_HANDLED;
        }
        oq_batch_reply_one(&self->out, req, "show", &view, 0);
        return OQ_ANSWER_READY;
    }
    /* cancel: journaled, so answered once durable, as a durable row is. */
    if (!oq_front_can_promise(self, env, req))
        return OQ_ANSWER_HANDLED;
    uint64_t withdrawn = 0;
    oq_refusal_t why;
    if (oq_engine_batch_cancel(self->engine, msg->id, &withdrawn, &why, reason, sizeof reason) <
        0) {
        oq_err_t code = why == OQ_REFUSED_UNRECORDED ? OQ_ERR_UNAVAILABLE
                        : why == OQ_REFUSED_UNKNOWN  ? OQ_ERR_NOT_FOUND
                                                     : OQ_ERR_WRONG_STATE;
        oq_gate_reply_error(self, self->front, env, req, code, reason);
        return OQ_ANSWER_HANDLED;
    }
    oq_engine_batch_view(self->engine, msg->id, &view);
    oq_batch_reply_one(&self->out, req, "cancel", &view, withdrawn);
    oq_front_promise(self, env, req);
    return OQ_ANSWER_HANDLED;
}

oq_answer_t oq_admin_chain(oq_broker_t *self, const oq_envelope_t *env, int64_t req,
                           const oq_msg_t *msg)
{
    oq_chain_view_t view;
    if (oq_engine_chain_view(self->engine, msg->id, &view) < 0) {
        char reason[160];
        snprintf(reason, sizeof reason,
                 "job %llu holds no chain: not a chained job, or its chain has moved on or ended",
                 (unsigned long long)msg->id);
        oq_gate_reply_error(self, self->front, env, req, OQ_ERR_NOT_FOUND, reason);
        return OQ_ANSWER_HANDLED;
    }
    oq_batch_reply_chain(&self->out, req, &view);
    return OQ_ANSWER_READY;
}
