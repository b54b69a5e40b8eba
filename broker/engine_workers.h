/*  engine_workers.h: what the other parts of the engine ask of its
    workers (engine_workers.c holds them, with their credit, routing,
    drain, status and reaping). */
#ifndef ONCEQ_ENGINE_WORKERS_H
#define ONCEQ_ENGINE_WORKERS_H

#include "engine_model.h"

/* Fill v with worker w as it is now. */
void oq_eng_worker_view(const oq_engine_t *self, const oq_worker_t *w, oq_worker_view_t *v);

/* Does w take jobs of type t? */
bool oq_eng_worker_handles(const oq_worker_t *w, const oq_eng_type_t *t);

/* A worker handed a job back because it does not handle its type: send it
   no more of that type. */
void oq_eng_worker_refuse_type(oq_engine_t *self, oq_worker_t *w, oq_eng_type_t *t);

#endif
