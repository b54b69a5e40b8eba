/*  review_log.h: the resolutions of the review store, remembered after
    their jobs left it. A person resolves a job in review (done, retry,
    fail) with a note; the log keeps that decision with what the handler
    said (its reason) and where the job was (type, queue, attempt), so that
    `onceq review show ID` answers for a resolved job too, and a second
    resolve of it is refused with what the first one decided. Bounded: the
    newest OQ_MAX_REVIEW_RESOLVED (or the max given) are kept, the oldest
    forgotten. The engine owns one; the journal records each entry and a
    snapshot writes them all back. */
#ifndef ONCEQ_REVIEW_LOG_H
#define ONCEQ_REVIEW_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "onceq/proto.h"

/* One resolution. Strings are borrowed: from the caller for
   oq_review_log_add, from the log for what it returns. */
typedef struct {
    uint64_t id;
    oq_review_action_t action;
    uint32_t attempt;       /* the attempt that sent the job to review */
    int64_t reviewed_at_ms; /* wall clock: when it went to review */
    int64_t resolved_at_ms; /* wall clock: when it was resolved */
    const char *type;       /* the job's type and queue */
    const char *queue;
    const char *reason; /* the handler's reason, the context it attached */
    const char *note;   /* the person's note ("" for none) */
} oq_resolution_t;

typedef struct oq_review_log oq_review_log_t;

/* A log of at most max resolutions (>= 1). NULL if out of memory. */
oq_review_log_t *oq_review_log_new(size_t max);

/* Free every entry; set *self_p to NULL. */
void oq_review_log_destroy(oq_review_log_t **self_p);

/* Keep a copy of r (strings copied, NULL ones as ""; the reason and note
   cut at OQ_MAX_ERROR_LEN and OQ_MAX_REVIEW_NOTE_LEN bytes), forgetting the
   oldest entry if the log is full. Returns the kept entry (borrowed, valid
   until it is forgotten), or NULL if out of memory (nothing changed). */
const oq_resolution_t *oq_review_log_add(oq_review_log_t *self, const oq_resolution_t *r);

/* The newest resolution of job id, or NULL if none is remembered. */
const oq_resolution_t *oq_review_log_find(const oq_review_log_t *self, uint64_t id);

/* Entries held. */
size_t oq_review_log_count(const oq_review_log_t *self);

/* Call fn for every entry, oldest first (fn must not change the log). */
void oq_review_log_each(const oq_review_log_t *self,
                        void (*fn)(void *ctx, const oq_resolution_t *r), void *ctx);

#endif
