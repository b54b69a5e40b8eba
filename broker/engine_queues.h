/*  engine_queues.h: queues, job types and the ready lists, inside the
    engine (engine_model.h). A queue has its lease length and default
    timeout (checked against the timeout rule), its ready jobs, its failed
    and review lists and its counters. A ready job sits on the list of its
    (queue, type) lane, in the queue's order (priority high to low, FIFO
    within), so that a worker finds its next job among the lanes' heads
    without a scan (engine_pump.c); the queue's order is the merge of its
    lanes. */
#ifndef ONCEQ_ENGINE_QUEUES_H
#define ONCEQ_ENGINE_QUEUES_H

#include "engine_model.h"

/* The timeout rule: timeout_ms must be shorter than retry_after_ms by the
   margin. 0, or -1 with reason naming queue and the numbers. */
int oq_eng_check_rule(const oq_engine_t *self, const char *queue, int64_t timeout_ms,
                      int64_t retry_after_ms, char *reason, size_t reason_len);

/* The queue named name; created (with the engine defaults) if create and
   the engine holds fewer than OQ_MAX_QUEUES. NULL if none. */
oq_eng_queue_t *oq_eng_queue_get(oq_engine_t *self, const char *name, bool create);

/* The job type named name, created if new and the engine knows fewer than
   OQ_MAX_TYPES. NULL if none. */
oq_eng_type_t *oq_eng_type_get(oq_engine_t *self, oq_str_t name);

/* The lane of (q, type), made if new: 0, or -1 if memory runs out. A job
   gets its lane when it is made (oq_eng_job_new), so that becoming ready
   never fails. */
int oq_eng_lane_make(oq_engine_t *self, oq_eng_queue_t *q, oq_eng_type_t *type);

/* Put job on its lane (made already): behind its priority band, or in
   front of it (a job given back after its lease ended). */
void oq_eng_ready_insert(oq_engine_t *self, oq_eng_queue_t *q, oq_eng_job_t *job, bool in_front);

/* Take job off its lane. */
void oq_eng_ready_remove(oq_engine_t *self, oq_eng_job_t *job);

/* Does a come before b in their queue's order (both ready, same queue)? */
static inline bool oq_eng_ready_before(const oq_eng_job_t *a, const oq_eng_job_t *b)
{
    return a->priority > b->priority || (a->priority == b->priority && a->u.r.seq < b->u.r.seq);
}

/* Call fn for each of q's ready jobs in the queue's order. fn must not
   change the engine. */
void oq_eng_ready_each(const oq_engine_t *self, const oq_eng_queue_t *q,
                       void (*fn)(void *ctx, oq_eng_job_t *job), void *ctx);

#endif
