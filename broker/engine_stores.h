/*  engine_stores.h: where jobs go when they leave the queues, inside the
    engine: the failed store, the review store (engine_stores.c holds their
    pages and operator commands) and the ring of recently done jobs. A job
    done (or forgotten, or cancelled) is remembered for the last
    OQ_RECENT_DONE_JOBS, so that an ack arriving after it (the slower of two
    overlapping deliveries) is still attributed rather than "unknown". */
#ifndef ONCEQ_ENGINE_STORES_H
#define ONCEQ_ENGINE_STORES_H

#include "engine_model.h"

/* Remember job, which is leaving for done; the oldest is forgotten. */
void oq_eng_done_remember(oq_engine_t *self, const oq_eng_job_t *job);

/* The remembered done job id, or NULL. */
oq_eng_recent_t *oq_eng_done_find(oq_engine_t *self, uint64_t id);

#endif
