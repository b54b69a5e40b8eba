/*  batch.c: the transaction runner for several items at once.

    Why batches: a job's effect is a few statements and a COMMIT, and with
    one transaction per job the round trips and the COMMIT's flush are most
    of its cost. Run together, n jobs share them.

    Why a fallback to one item per transaction: a batch is all or nothing,
    and one item the database refuses (a value its CHECK rejects, a
    customer its foreign key does not know) rolls back every item with it.
    Run alone, each item gets the answer it would have got without
    batching: the bad one fails, its neighbours commit. The batch's own
    error says nothing about any one item, so it is only logged; the items
    get the errors of their own runs. A serialization failure or deadlock
    of the batch is not a reason to fall back: the single runner re-runs it
    in place first, as it would a single job's.

    Why the fallback stops at a connection that cannot be had: when the
    database is away, every item would wait for its own failed connection
    attempt in turn, n times the connect timeout, for the same answer. The
    items not tried get that answer (infrastructure: handed back unrun,
    without using a try). An outcome unknown at COMMIT does not stop it:
    that item's run is over, and the next one reconnects. */
#include <assert.h>
#include <string.h>

#include "onceq/effects.h"
#include "onceq/log.h"

/* The batch body's run, as an oq_txn_body_fn. */
typedef struct {
    oq_batch_body_fn body;
    void *ctx;
    size_t count;
    oq_batch_item_t *items;
} s_batch_t;

/* One item's run, as an oq_txn_body_fn. */
typedef struct {
    oq_batch_one_fn one;
    void *ctx;
    size_t index;
    bool applied;
} s_one_t;

static int s_batch_body(oq_txn_t *txn, void *arg, oq_pg_error_t *error)
{
    s_batch_t *b = arg;
    /* Every run starts from nothing: a re-run must not see what the
       rolled-back one decided. */
    for (size_t i = 0; i < b->count; i++) {
        b->items[i].applied = false;
        oq_pg_errors_clear(&b->items[i].error);
    }
    return b->body(txn, b->ctx, b->count, b->items, error);
}

static int s_one_body(oq_txn_t *txn, void *arg, oq_pg_error_t *error)
{
    s_one_t *o = arg;
    o->applied = false;
    return o->one(txn, o->ctx, o->index, &o->applied, error);
}

/* Item index in a transaction of its own. */
static void s_run_one(oq_txn_t *txn, oq_batch_one_fn one, void *ctx, size_t index,
                      oq_batch_item_t *item)
{
    s_one_t o = {one, ctx, index, false};
    item->applied = oq_txn_run(txn, s_one_body, &o, &item->error) == 0 && o.applied;
}

int oq_txn_run_batch(oq_txn_t *txn, size_t count, oq_batch_body_fn batch, oq_batch_one_fn one,
                     void *ctx, oq_batch_item_t *items, oq_pg_error_t *batch_error)
{
    assert(txn && batch && one && items);
    assert(count >= 1 && count <= OQ_BATCH_MAX_ITEMS);
    oq_pg_error_t ignored;
    if (!batch_error)
        batch_error = &ignored;
    oq_pg_errors_clear(batch_error);
    memset(items, 0, count * sizeof *items);

    bool fell_back = false;
    if (count == 1) {
        s_run_one(txn, one, ctx, 0, &items[0]);
    } else {
        s_batch_t b = {batch, ctx, count, items};
        if (oq_txn_run(txn, s_batch_body, &b, batch_error) < 0) {
            fell_back = true;
            oq_info("a batch of %zu rolled back (%s, SQLSTATE %s: %s); running its items one "
                    "per transaction",
                    count, oq_pg_errors_class_name(batch_error->cls),
                    batch_error->sqlstate[0] ? batch_error->sqlstate : "-", batch_error->message);
        }
    }

    if (fell_back) {
        memset(items, 0, count * sizeof *items);
        const oq_batch_item_t *unreachable = NULL;
        for (size_t i = 0; i < count; i++) {
            if (unreachable) {
                items[i] = *unreachable;
                items[i].applied = false;
                continue;
            }
            s_run_one(txn, one, ctx, i, &items[i]);
            if (items[i].error.cls == OQ_PG_ERR_CONNECTION)
                unreachable = &items[i];
        }
    }

    int rc = 0;
    for (size_t i = 0; i < count; i++)
        if (items[i].error.cls != OQ_PG_ERR_NONE)
            rc = -1;
    return rc;
}
