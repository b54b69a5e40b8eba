/*  engine_batches.h: the batches' and the chains' side of the engine (engine_model.h):
    what oq_eng_transition tells them about a job that moved, and their
    cleanup. The API is in engine.h ("batches"). */
#ifndef ONCEQ_ENGINE_BATCHES_H
#define ONCEQ_ENGINE_BATCHES_H

#include "engine_model.h"

/* Job id moved from one state to another by event: count it in its
   batch, if it has one, and dispatch the callbacks that became due
   (unless replaying). Called by oq_eng_transition after the move. */
void oq_eng_batch_note(oq_engine_t *self, uint64_t id, oq_eng_state_t from, oq_eng_state_t to,
                       oq_job_event_t event);

/* A job message copied into one allocation (free it) with its strings
   and payload, *bytes its size; dispatch_id and unique_key dropped (a
   callback or a link gets its own). NULL if memory runs out. */
oq_job_msg_t *oq_eng_msg_copy(const oq_job_msg_t *m, size_t *bytes);

/* The chains' side of a job's move, as oq_eng_batch_note
   (engine_chains.c). */
void oq_eng_chain_note(oq_engine_t *self, uint64_t id, oq_eng_state_t from, oq_eng_state_t to,
                       oq_job_event_t event);

/* Free every chain (engine destroy). */
void oq_eng_chains_destroy(oq_engine_t *self);

/* Free every batch (engine destroy). */
void oq_eng_batches_destroy(oq_engine_t *self);

#endif
