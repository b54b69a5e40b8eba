/*  engine_memory.h: what the engine holds against --max-bytes, and how a
    dispatch makes room (engine_memory.c). Inside the engine only. */
#ifndef ONCEQ_ENGINE_MEMORY_H
#define ONCEQ_ENGINE_MEMORY_H

#include "engine_model.h"

/* Every byte counted against config.max_bytes now. */
uint64_t oq_eng_held_bytes(const oq_engine_t *self);

/* The throttle of its log lines. 0, or -1 if memory runs out. */
int oq_eng_memory_init(oq_engine_t *self);

/* Would need more bytes fit, once everything only remembered is forgotten? */
bool oq_eng_fits(const oq_engine_t *self, uint64_t need);

/* Make room for need more bytes, taking it from what is only remembered
   (dispatch ids, then unique windows). 0; -1 if even all of that would not
   be enough: then nothing is forgotten. */
int oq_eng_make_room(oq_engine_t *self, uint64_t need);

/* Bytes below the limit now (0 at or over it): what the dispatch-id table
   may grow by. */
uint64_t oq_eng_room_left(const oq_engine_t *self);

/* After a change to the dispatch ids or unique keys: note ids and windows
   forgotten before their end, and say so at most once per interval. */
void oq_eng_memory_note(oq_engine_t *self);

#endif
