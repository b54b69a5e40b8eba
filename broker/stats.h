/*  stats.h: the broker's answers to "stats" and "failed", encoded from the
    engine's counters and failed store (docs/protocol.md, section 5). */
#ifndef ONCEQ_STATS_H
#define ONCEQ_STATS_H

#include <msgpack.h>
#include <stdint.h>

#include "engine.h"

/* Append a "stats" reply for request req to buf. */
void oq_stats_encode(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine, int64_t uptime_ms);

/* Append a "failed" reply listing at most limit failed jobs of queue (NULL:
   all queues), oldest first. */
void oq_stats_encode_failed(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine,
                            const char *queue, uint32_t limit);

#endif
