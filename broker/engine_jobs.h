/*  engine_jobs.h: the job table and the job state machine, inside the
    engine (engine_model.h). Jobs are allocated into the id map, change
    state only through oq_eng_transition, which asserts that the change is
    legal, keeps the per-queue counts and list memberships right and reports
    it to the observer, and are freed on entering done. Also the lease
    tokens that fence acks, and the view of a job that the API hands out. */
#ifndef ONCEQ_ENGINE_JOBS_H
#define ONCEQ_ENGINE_JOBS_H

#include "engine_model.h"

/* The state names, by oq_eng_state_t ("new", "ready", ...). */
extern const char *const oq_eng_state_names[];

/* The engine's clock, monotonic ms. */
int64_t oq_eng_now(const oq_engine_t *self);

/* The lease token of one delivery to a worker with this CURVE key
   (OQ_KEY_BYTES; NULL: a worker without one): unguessable without the
   broker's key, and worth nothing from another worker key. */
uint64_t oq_eng_token(const oq_engine_t *self, uint64_t id, uint32_t attempt, uint32_t gen,
                      const uint8_t *key);

/* Does lease prove a delivery of this job (at job_attempt, generation gen)
   on this attempt to the worker with key (NULL: none)? */
bool oq_eng_fenced_ok(const oq_engine_t *self, uint64_t id, uint32_t job_attempt, uint32_t gen,
                      const uint8_t *key, uint32_t attempt, bool has_lease, uint64_t lease);

/* Does lease prove a delivery of this job to key on this attempt in one
   of the generations before gen (a delivery from before a requeue, whose
   ack changes nothing but whose worker is free again)? */
bool oq_eng_stale_token(const oq_engine_t *self, uint64_t id, uint32_t gen, const uint8_t *key,
                        uint32_t attempt, bool has_lease, uint64_t lease);

/* Has the delivery of job on this attempt decided (reported an outcome
   the broker took or ignored), in the job's current generation? */
bool oq_eng_decided(const oq_engine_t *self, const oq_eng_job_t *job, uint32_t attempt);

/* Remember that it has: any later ack of that delivery changes nothing.
   (Out of memory: logged, and not remembered.) */
void oq_eng_decide(oq_engine_t *self, const oq_eng_job_t *job, uint32_t attempt);

/* Allocate a job for msg with the given id in queue q, held in the id map
   and still OQ_ENG_NEW, into *job_p. 0; 1 if the id is held already; -1 if
   memory runs out. Nothing is left behind unless it returns 0. */
int oq_eng_job_new(oq_engine_t *self, const oq_job_msg_t *msg, uint64_t id, oq_eng_queue_t *q,
                   oq_eng_type_t *type, int64_t timeout_ms, oq_eng_job_t **job_p);

/* Free a job that is in no list, heap or map any more. */
void oq_eng_job_free(oq_eng_job_t *job);

/* Undo oq_eng_job_new of a job still OQ_ENG_NEW: out of the id map and
   the byte count, freed. */
void oq_eng_job_unmake(oq_engine_t *self, oq_eng_job_t *job);

/* The one place a job changes state (how: what the new state needs; NULL
   where it needs nothing). A job entering OQ_ENG_DONE is freed. The
   observer hears of every change but a lease (see oq_engine_pump). 0, or
   -1 if the change is an asked one the observer could not record: nothing
   changed (the caller undoes what it set on the job beforehand). */
int oq_eng_transition(oq_engine_t *self, oq_eng_job_t *job, oq_eng_state_t to, oq_job_event_t event,
                      oq_eng_enter_t *how);

/* Report event about job, after the change, to the observer (dispatch: the
   request, for OQ_EVENT_DISPATCHED). Restores are reported to nobody. */
void oq_eng_notify(oq_engine_t *self, oq_job_event_t event, const oq_eng_job_t *job,
                   const oq_job_msg_t *dispatch);

/* To the failed store with error (taken over; NULL: none). */
void oq_eng_fail(oq_engine_t *self, oq_eng_job_t *job, char *error);

/* The handler could not know the outcome: hold the job for a person, with
   its reason (taken over). */
void oq_eng_review(oq_engine_t *self, oq_eng_job_t *job, char *reason);

/* Take job, which is in review, out of it by a decision, report it and
   remember it (restoring: replay, reported to nobody). 0, or -1 if memory
   runs out or the observer cannot record the decision: nothing changed.
   (Memory for remembering it running out after it was carried out is
   only logged, except while restoring.) */
int oq_eng_resolve(oq_engine_t *self, oq_eng_job_t *job, oq_review_action_t action,
                   const char *note, int64_t resolved_at_ms, bool restoring);

/* A lease ended without an ack (ran out, or the worker is gone): ready
   again in front of its band, or failed on its last attempt, with why. */
void oq_eng_lease_end(oq_engine_t *self, oq_eng_job_t *job, const char *why);

/* A new job takes its keys (unique: with its window's end, 0 for none).
   Both are optimisations: a key that cannot be kept is logged and the job
   runs without it. */
void oq_eng_keys_take(oq_engine_t *self, const oq_eng_job_t *job, oq_str_t unique_key,
                      int64_t unique_until_ms, oq_str_t overlap_key);

/* Undo oq_eng_keys_take of a job that was not queued after all. */
void oq_eng_keys_drop(oq_engine_t *self, const oq_eng_job_t *job);

/* Fill v with job as it is now (pointers borrowed from the job). */
void oq_eng_job_view(const oq_engine_t *self, const oq_eng_job_t *job, oq_job_view_t *v);

/* A formatted error of at most OQ_MAX_ERROR_LEN bytes; the caller frees.
   NULL if memory runs out. */
char *oq_eng_format(const char *format, ...) __attribute__((format(printf, 1, 2)));

#endif
