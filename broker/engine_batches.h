/*  engine_batches.h: the batches' side of the engine (engine_model.h):
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

/* Free every batch (engine destroy). */
void oq_eng_batches_destroy(oq_engine_t *self);

#endif
