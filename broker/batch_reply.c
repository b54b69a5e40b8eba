/*  batch_reply.c: batches written out as replies. A batch is a map of its
    counts and flags with "callbacks", a map from then / catch / finally to
    the job each was dispatched as (0: not yet, or never). */
#include "batch_reply.h"

#include "onceq/limits.h"
#include "onceq/proto.h"

static const char *const s_names[OQ_BATCH_CALLBACKS] = {"then", "catch", "finally"};

static void s_pack_batch(msgpack_packer *pk, const oq_batch_view_t *b)
{
    uint32_t callbacks = 0;
    for (int i = 0; i < OQ_BATCH_CALLBACKS; i++)
        callbacks += b->has_callback[i];
    msgpack_pack_map(pk, 11);
    oq_proto_pack_cstr(pk, "id");
    msgpack_pack_uint64(pk, b->id);
    oq_proto_pack_cstr(pk, "first");
    msgpack_pack_uint64(pk, b->first_id);
    oq_proto_pack_cstr(pk, "total");
    msgpack_pack_uint32(pk, b->total);
    oq_proto_pack_cstr(pk, "pending");
    msgpack_pack_uint32(pk, b->pending);
    oq_proto_pack_cstr(pk, "done");
    msgpack_pack_uint32(pk, b->done);
    oq_proto_pack_cstr(pk, "failed");
    msgpack_pack_uint32(pk, b->failed);
    oq_proto_pack_cstr(pk, "cancelled");
    msgpack_pack_uint32(pk, b->cancelled);
    oq_proto_pack_cstr(pk, "state");
    oq_proto_pack_cstr(pk, b->is_cancelled ? "cancelled" : b->live ? "running" : "settled");
    oq_proto_pack_cstr(pk, "allow_failures");
    if (b->allow_failures)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
    oq_proto_pack_cstr(pk, "created_at");
    msgpack_pack_double(pk, (double)b->created_ms / 1000.0);
    oq_proto_pack_cstr(pk, "callbacks");
    msgpack_pack_map(pk, callbacks);
    for (int i = 0; i < OQ_BATCH_CALLBACKS; i++) {
        if (!b->has_callback[i])
            continue;
        oq_proto_pack_cstr(pk, s_names[i]);
        msgpack_pack_uint64(pk, b->callback_ids[i]);
    }
}

void oq_batch_reply_one(msgpack_sbuffer *buf, int64_t req, const char *op,
                        const oq_batch_view_t *batch, uint64_t withdrawn)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    bool cancel = op[0] == 'c';
    oq_proto_begin(&pk, OQ_CMD_BATCH, req, 2 + cancel);
    oq_proto_pack_cstr(&pk, "op");
    oq_proto_pack_cstr(&pk, op);
    oq_proto_pack_cstr(&pk, "batch");
    s_pack_batch(&pk, batch);
    if (cancel) {
        oq_proto_pack_cstr(&pk, "withdrawn");
        msgpack_pack_uint64(&pk, withdrawn);
    }
}

typedef struct {
    msgpack_packer *pk;
    size_t left;
} s_list_t;

static void s_one(void *ctx, const oq_batch_view_t *b)
{
    s_list_t *l = ctx;
    if (l->left == 0)
        return;
    l->left--;
    s_pack_batch(l->pk, b);
}

static void s_count(void *ctx, const oq_batch_view_t *b)
{
    (void)b;
    (*(size_t *)ctx)++;
}

void oq_batch_reply_list(msgpack_sbuffer *buf, int64_t req, const oq_engine_t *engine)
{
    size_t total = 0;
    oq_engine_batch_each(engine, true, s_count, &total);
    size_t shown = total < OQ_MAX_BATCH_LIST ? total : OQ_MAX_BATCH_LIST;
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_BATCH, req, 3);
    oq_proto_pack_cstr(&pk, "op");
    oq_proto_pack_cstr(&pk, "list");
    oq_proto_pack_cstr(&pk, "total");
    msgpack_pack_uint64(&pk, total);
    oq_proto_pack_cstr(&pk, "batches");
    msgpack_pack_array(&pk, shown);
    s_list_t l = {&pk, shown};
    oq_engine_batch_each(engine, true, s_one, &l);
}

void oq_batch_reply_chain(msgpack_sbuffer *buf, int64_t req, const oq_chain_view_t *c)
{
    static const char *const due[] = {"live", "next", "catch"};
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_CHAIN, req, 7);
    oq_proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, c->job_id);
    oq_proto_pack_cstr(&pk, "root");
    msgpack_pack_uint64(&pk, c->root);
    oq_proto_pack_cstr(&pk, "place");
    msgpack_pack_uint32(&pk, c->place);
    oq_proto_pack_cstr(&pk, "total");
    msgpack_pack_uint32(&pk, c->total);
    oq_proto_pack_cstr(&pk, "due");
    oq_proto_pack_cstr(&pk, due[c->due <= OQ_CHAIN_CATCH ? c->due : 0]);
    oq_proto_pack_cstr(&pk, "links");
    msgpack_pack_array(&pk, c->rest_count);
    for (uint32_t i = 0; i < c->rest_count; i++)
        oq_proto_pack_str(&pk, c->rest[i]->type);
    oq_proto_pack_cstr(&pk, "chain_catch");
    if (c->catch_)
        oq_proto_pack_str(&pk, c->catch_->type);
    else
        msgpack_pack_nil(&pk);
}
