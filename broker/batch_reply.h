/*  batch_reply.h: the broker's answers about batches and chains
    (docs/protocol.md, "batch", "chain"): one batch's counts and
    callbacks, the list of them, or a job's place in its chain, as
    msgpack replies. The engine (engine.h, "batches") knows the batches;
    this only writes them out. */
#ifndef ONCEQ_BATCH_REPLY_H
#define ONCEQ_BATCH_REPLY_H

#include <msgpack.h>
#include <stdint.h>

#include "engine.h"

/* A "batch" reply to op show or cancel: the batch, and for cancel how
   many waiting jobs were withdrawn. */
void oq_batch_reply_one(msgpack_sbuffer *buf, int64_t req, const char *op,
                        const oq_batch_view_t *batch, uint64_t withdrawn);

/* A "batch" reply to op list: the held batches, then the settled ones
   remembered, at most OQ_MAX_BATCH_LIST, with "total" of them all. */
void oq_batch_reply_list(msgpack_sbuffer *buf, int64_t req, const oq_engine_t *engine);

/* A "chain" reply: the job's place in its chain, the types of the links
   after it and of chain_catch. */
void oq_batch_reply_chain(msgpack_sbuffer *buf, int64_t req, const oq_chain_view_t *chain);

#endif
