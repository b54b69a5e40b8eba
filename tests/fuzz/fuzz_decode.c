/*  fuzz_decode.c: libFuzzer target for the wire protocol decoder. Any bytes
    must decode or be refused with a reason, never crash, read out of bounds or
    leak; what decodes must hold to the limits, and a decoded dispatch must
    survive its own re-encoding unchanged. The worker's decode (shallow, then
    each delivery with its payload left in place) must agree with the full
    one. See README.md to run it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "mpcheck.h"
#include "onceq/proto.h"

static void s_check_job(const oq_job_msg_t *j)
{
    OQ_FUZZ_CHECK(oq_proto_name_valid(j->type.ptr, j->type.len));
    OQ_FUZZ_CHECK(oq_proto_name_valid(j->queue.ptr, j->queue.len));
    OQ_FUZZ_CHECK(j->payload && j->payload_len > 0 && j->payload_len <= OQ_MAX_PAYLOAD_BYTES);
    OQ_FUZZ_CHECK(oq_mpcheck(j->payload, j->payload_len, OQ_MAX_DEPTH, NULL, 0) == 0);
    OQ_FUZZ_CHECK((j->payload[0] & 0xf0) == 0x80 || j->payload[0] == 0xde || j->payload[0] == 0xdf);
    OQ_FUZZ_CHECK(!j->has_timeout || (j->timeout_ms > 0 && j->timeout_ms <= OQ_MAX_TIMEOUT_MS));
    OQ_FUZZ_CHECK(!j->has_delay || (j->delay_ms >= 0 && j->delay_ms <= OQ_MAX_DELAY_MS));
    OQ_FUZZ_CHECK(j->priority >= -OQ_MAX_PRIORITY && j->priority <= OQ_MAX_PRIORITY);
    OQ_FUZZ_CHECK(j->backoff_len <= OQ_MAX_BACKOFF_STEPS);
    for (uint32_t k = 0; k < j->backoff_len; k++)
        OQ_FUZZ_CHECK(j->backoff_ms[k] >= 0 && j->backoff_ms[k] <= OQ_MAX_BACKOFF_MS);
}

/* Encode a decoded dispatch again; it must decode to the same job. */
static void s_check_reencode(const oq_msg_t *msg)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_dispatch(&buf, msg->has_req ? (int64_t)msg->req : -1, &msg->job);
    oq_msg_t again;
    oq_err_t code;
    char why[256];
    OQ_FUZZ_CHECK(oq_proto_decode(&again, buf.data, buf.size, &code, why, sizeof why) == 0);
    const oq_job_msg_t *a = &msg->job, *b = &again.job;
    OQ_FUZZ_CHECK(again.cmd == OQ_CMD_DISPATCH && again.has_req == msg->has_req &&
                  again.req == msg->req);
    OQ_FUZZ_CHECK(a->type.len == b->type.len && memcmp(a->type.ptr, b->type.ptr, a->type.len) == 0);
    OQ_FUZZ_CHECK(a->queue.len == b->queue.len &&
                  memcmp(a->queue.ptr, b->queue.ptr, a->queue.len) == 0);
    OQ_FUZZ_CHECK(a->payload_len == b->payload_len &&
                  memcmp(a->payload, b->payload, a->payload_len) == 0);
    OQ_FUZZ_CHECK(a->has_max_tries == b->has_max_tries && a->max_tries == b->max_tries);
    OQ_FUZZ_CHECK(a->has_timeout == b->has_timeout && a->timeout_ms == b->timeout_ms);
    OQ_FUZZ_CHECK(a->has_delay == b->has_delay && a->delay_ms == b->delay_ms);
    OQ_FUZZ_CHECK(a->has_priority == b->has_priority && a->priority == b->priority);
    OQ_FUZZ_CHECK(a->backoff_len == b->backoff_len &&
                  memcmp(a->backoff_ms, b->backoff_ms, a->backoff_len * sizeof a->backoff_ms[0]) ==
                      0);
    OQ_FUZZ_CHECK(a->unique_key.len == b->unique_key.len &&
                  (!a->unique_key.len ||
                   memcmp(a->unique_key.ptr, b->unique_key.ptr, a->unique_key.len) == 0));
    OQ_FUZZ_CHECK(a->overlap_key.len == b->overlap_key.len &&
                  (!a->overlap_key.len ||
                   memcmp(a->overlap_key.ptr, b->overlap_key.ptr, a->overlap_key.len) == 0));
    OQ_FUZZ_CHECK(a->unique_for_ms == b->unique_for_ms);
    oq_proto_msg_release(&again);
    msgpack_sbuffer_destroy(&buf);
}

/* Every entry of a jobs or acks message decodes as a job or an ack alone
   would, or is refused with a reason; either way it is released safely. */
static void s_check_entries(const oq_msg_t *msg)
{
    uint32_t count = oq_proto_entry_count(msg);
    OQ_FUZZ_CHECK(count >= 1 &&
                  count <= (msg->cmd == OQ_CMD_JOBS ? OQ_MAX_JOBS_PER_MSG : OQ_MAX_ACKS_PER_MSG));
    for (uint32_t i = 0; i <= count; i++) {
        oq_msg_t entry;
        oq_err_t code;
        char why[256];
        int rc = oq_proto_decode_entry(msg, i, &entry, &code, why, sizeof why);
        if (i == count) {
            OQ_FUZZ_CHECK(rc < 0); /* past the end */
        } else if (rc < 0) {
            OQ_FUZZ_CHECK(code > OQ_ERR_NONE && code < OQ_ERR_COUNT_ && why[0] != 0);
        } else if (msg->cmd == OQ_CMD_JOBS) {
            OQ_FUZZ_CHECK(entry.cmd == OQ_CMD_JOB && entry.job.id > 0);
            s_check_job(&entry.job);
        } else {
            OQ_FUZZ_CHECK(entry.cmd == OQ_CMD_ACK && entry.ack.id > 0 &&
                          entry.ack.error.len <= OQ_MAX_ERROR_LEN &&
                          entry.ack.credit <= OQ_MAX_CREDIT);
        }
        uint64_t id, lease;
        uint32_t attempt;
        bool has_lease;
        if (oq_proto_entry_ids(msg, i, &id, &attempt, &has_lease, &lease) == 0)
            OQ_FUZZ_CHECK(id > 0 && attempt > 0);
        oq_proto_msg_release(&entry);
        oq_proto_msg_release(&entry);
    }
}

/* A delivery as the worker decodes it is the job the full decode gives,
   its payload the map the full decode packed. */
static void s_check_delivery(const oq_job_msg_t *full, const oq_job_msg_t *job,
                             const msgpack_object *payload)
{
    OQ_FUZZ_CHECK(payload && payload->type == MSGPACK_OBJECT_MAP && !job->payload);
    OQ_FUZZ_CHECK(job->id == full->id && job->attempt == full->attempt);
    OQ_FUZZ_CHECK(job->has_lease == full->has_lease && job->lease == full->lease);
    OQ_FUZZ_CHECK(job->type.len == full->type.len &&
                  memcmp(job->type.ptr, full->type.ptr, job->type.len) == 0);
    OQ_FUZZ_CHECK(job->queue.len == full->queue.len &&
                  memcmp(job->queue.ptr, full->queue.ptr, job->queue.len) == 0);
    OQ_FUZZ_CHECK(job->has_timeout == full->has_timeout && job->timeout_ms == full->timeout_ms);
    OQ_FUZZ_CHECK(job->has_max_tries == full->has_max_tries && job->max_tries == full->max_tries);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, *payload);
    OQ_FUZZ_CHECK(buf.size == full->payload_len && memcmp(buf.data, full->payload, buf.size) == 0);
    msgpack_sbuffer_destroy(&buf);
}

/* The same bytes decoded as the worker decodes them: refused for the same
   reason as by the full decode (full_rc, full_code, full_why), a "job"
   message's job at its delivery's decode, or every delivery the same. */
static void s_check_shallow(const uint8_t *data, size_t size, const oq_msg_t *full, int full_rc,
                            oq_err_t full_code, const char *full_why)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (size)
        memcpy(copy, data, size);
    oq_msg_t msg;
    oq_err_t code;
    char why[256];
    int rc = oq_proto_decode_shallow(&msg, copy, size, &code, why, sizeof why);
    memset(copy, 0xc1, size);
    free(copy);
    oq_job_msg_t job;
    const msgpack_object *payload;
    if (rc < 0) {
        OQ_FUZZ_CHECK(full_rc < 0 && code == full_code && strcmp(why, full_why) == 0);
    } else if (msg.cmd == OQ_CMD_JOB) {
        rc = oq_proto_decode_delivery(&msg, 0, &job, &payload, &code, why, sizeof why);
        OQ_FUZZ_CHECK(rc == full_rc);
        if (rc < 0)
            OQ_FUZZ_CHECK(code == full_code && strcmp(why, full_why) == 0);
        else
            s_check_delivery(&full->job, &job, payload);
    } else {
        OQ_FUZZ_CHECK(full_rc == 0 && msg.cmd == full->cmd);
        for (uint32_t i = 0; msg.cmd == OQ_CMD_JOBS && i < oq_proto_entry_count(&msg); i++) {
            oq_msg_t entry;
            oq_err_t entry_code;
            char entry_why[256];
            int entry_rc =
                oq_proto_decode_entry(full, i, &entry, &entry_code, entry_why, sizeof entry_why);
            rc = oq_proto_decode_delivery(&msg, i, &job, &payload, &code, why, sizeof why);
            OQ_FUZZ_CHECK(rc == entry_rc);
            if (rc < 0)
                OQ_FUZZ_CHECK(code == entry_code && strcmp(why, entry_why) == 0);
            else
                s_check_delivery(&entry.job, &job, payload);
            oq_proto_msg_release(&entry);
        }
    }
    oq_proto_msg_release(&msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    oq_msg_t msg;
    oq_err_t code;
    char why[256];
    /* A copy of exactly size bytes, so that any read past the end is caught. */
    uint8_t *copy = malloc(size ? size : 1);
    if (size)
        memcpy(copy, data, size);
    int rc = oq_proto_decode(&msg, copy, size, &code, why, sizeof why);
    /* The decoded message must not depend on the input buffer any more. */
    memset(copy, 0xc1, size);
    free(copy);
    s_check_shallow(data, size, &msg, rc, code, why);
    if (rc < 0) {
        OQ_FUZZ_CHECK(code > OQ_ERR_NONE && code < OQ_ERR_COUNT_);
        OQ_FUZZ_CHECK(why[0] != 0 && memchr(why, 0, sizeof why));
    } else {
        OQ_FUZZ_CHECK(code == OQ_ERR_NONE);
        OQ_FUZZ_CHECK(msg.cmd > OQ_CMD_UNKNOWN && msg.cmd < OQ_CMD_COUNT_);
        OQ_FUZZ_CHECK(!msg.has_req || msg.req <= INT64_MAX);
        if (msg.cmd == OQ_CMD_DISPATCH || msg.cmd == OQ_CMD_JOB)
            s_check_job(&msg.job);
        if (msg.cmd == OQ_CMD_DISPATCH)
            s_check_reencode(&msg);
        if (msg.cmd == OQ_CMD_ACK)
            OQ_FUZZ_CHECK(msg.ack.id > 0 && msg.ack.error.len <= OQ_MAX_ERROR_LEN &&
                          msg.ack.credit <= OQ_MAX_CREDIT);
        if (msg.cmd == OQ_CMD_READY)
            OQ_FUZZ_CHECK(msg.credit <= OQ_MAX_CREDIT && msg.jobs_per_msg >= 1 &&
                          msg.jobs_per_msg <= OQ_MAX_JOBS_PER_MSG);
        if (msg.cmd == OQ_CMD_WAIT)
            OQ_FUZZ_CHECK(msg.id > 0 && msg.wait_ms >= 0 && msg.wait_ms <= OQ_MAX_WAIT_MS);
        if (msg.cmd == OQ_CMD_WAITED)
            OQ_FUZZ_CHECK(msg.id > 0 && msg.wait_state >= OQ_WAIT_PENDING &&
                          msg.wait_state <= OQ_WAIT_CANCELLED &&
                          msg.err_text.len <= OQ_MAX_ERROR_LEN);
        if (msg.cmd == OQ_CMD_WELCOME)
            OQ_FUZZ_CHECK(msg.acks_per_msg <= OQ_MAX_ACKS_PER_MSG);
        if (msg.cmd == OQ_CMD_JOBS || msg.cmd == OQ_CMD_ACKS)
            s_check_entries(&msg);
        else
            OQ_FUZZ_CHECK(oq_proto_entry_count(&msg) == 0);
    }
    oq_proto_msg_release(&msg);
    oq_proto_msg_release(&msg);
    return 0;
}
