/*  engine_dispatch.c: jobs coming in. A dispatch is checked against the
    limits (jobs, bytes, queues, types) and the timeout rule before anything
    is created, so a refused dispatch leaves nothing behind. */
#include "engine.h"

#include <stdio.h>

#include "engine_jobs.h"
#include "engine_queues.h"

int oq_engine_dispatch(oq_engine_t *self, const oq_job_msg_t *msg, uint64_t *id, oq_err_t *code,
                       char *reason, size_t reason_len)
{
#define S_REFUSE(c, ...)                                                                           \
    do {                                                                                           \
        *code = (c);                                                                               \
        snprintf(reason, reason_len, __VA_ARGS__);                                                 \
        return -1;                                                                                 \
    } while (0)

    if (oq_idmap_size(self->jobs) >= self->config.max_jobs)
        S_REFUSE(OQ_ERR_FULL, "the broker holds its maximum of %zu jobs", self->config.max_jobs);
    /* Refused before the limit, not after: the bytes held never pass it. */
    uint64_t cost = oq_engine_job_cost(msg->payload_len, msg->backoff_len);
    if (self->bytes + cost > self->config.max_bytes)
        S_REFUSE(OQ_ERR_FULL,
                 "the broker holds %llu bytes of jobs; this one needs %llu more (a %zu-byte "
                 "payload and %d bytes per job) and the limit is %llu (--max-bytes)",
                 (unsigned long long)self->bytes, (unsigned long long)cost, msg->payload_len,
                 OQ_JOB_OVERHEAD_BYTES, (unsigned long long)self->config.max_bytes);
    char qname[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(msg->queue, qname, sizeof qname);
    /* Check before creating anything: a refused dispatch leaves no queue behind. */
    oq_eng_queue_t *q = oq_eng_queue_get(self, qname, false);
    int64_t retry_after_ms = q ? q->retry_after_ms : self->config.retry_after_ms;
    int64_t timeout_ms =
        msg->has_timeout ? msg->timeout_ms : (q ? q->timeout_ms : self->config.timeout_ms);
    if (oq_eng_check_rule(self, qname, timeout_ms, retry_after_ms, reason, reason_len) < 0) {
        *code = OQ_ERR_TIMEOUT_RULE;
        return -1;
    }
    if (!q && !(q = oq_eng_queue_get(self, qname, true)))
        S_REFUSE(OQ_ERR_FULL,
                 "cannot create queue \"%s\": the broker holds its maximum of %d queues", qname,
                 OQ_MAX_QUEUES);
    oq_eng_type_t *type = oq_eng_type_get(self, msg->type);
    if (!type)
        S_REFUSE(OQ_ERR_FULL, "the broker knows its maximum of %d job types", OQ_MAX_TYPES);
    oq_eng_job_t *job;
    if (oq_eng_job_new(self, msg, self->next_id, q, type, timeout_ms, &job) != 0)
        S_REFUSE(OQ_ERR_INTERNAL, "out of memory");
    self->next_id++;
    q->dispatched++;
    job->dispatched_ms = (uint32_t)oq_eng_now(self);
    job->timed = 1;
    oq_eng_enter_t how = {.dispatch = msg};
    if (msg->has_delay && msg->delay_ms > 0) {
        how.until_ms = oq_eng_now(self) + msg->delay_ms;
        oq_eng_transition(self, job, OQ_ENG_DELAYED, OQ_EVENT_DISPATCHED, &how);
    } else {
        oq_eng_transition(self, job, OQ_ENG_READY, OQ_EVENT_DISPATCHED, &how);
    }
    *id = job->id;
    return 0;
#undef S_REFUSE
}
