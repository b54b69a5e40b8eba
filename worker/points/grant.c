/*  grant.c: grant_order_points, the use case shaped like the article.

    Why the insert comes first: the grant row is the guard. Its INSERT
    either takes the (order_id, reason) key, and then this run owns the
    effect and adds the points, or finds it taken, and then some run (an
    earlier attempt, a redelivery running in parallel, a worker killed after
    its commit, `onceq grant` by hand) already did. Checking first and
    inserting later would leave a window in which two runs both see "not
    yet"; the constraint has no such window.

    Why a second run with different values is a conflict and not "already
    granted": the key says the order's points were granted; a request for
    the same order with another customer or amount is not a duplicate of
    that grant but a contradiction of it, which a person should see. */
#include "points/grant.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "points/points_limits.h"

typedef struct {
    /* inputs */
    oq_ledger_t *ledger;
    oq_ledger_grant_t grant;
    const oq_grant_hooks_t *hooks;
    /* what the last run of the body found */
    oq_grant_status_t status;
    oq_ledger_grant_t existing;
} s_ctx_t;

/* A grant that did not go in: the row that stopped it is the same grant
   (ALREADY_GRANTED) or contradicts it (CONFLICT, with error set to the
   reason, class FAIL). -1 only for a database error. */
static int s_compare(s_ctx_t *ctx, oq_pg_error_t *error)
{
    ctx->existing = ctx->grant;
    bool found;
    if (oq_ledger_find_grant(ctx->ledger, &ctx->existing, &found, error) < 0)
        return -1;
    /* Not found: the row that stopped us is gone again (deleted by hand);
       what matters is that this run did not write. */
    if (found && (ctx->existing.customer_id != ctx->grant.customer_id ||
                  ctx->existing.points != ctx->grant.points)) {
        ctx->status = OQ_GRANT_CONFLICT;
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "order %" PRId64 " was already granted %" PRId64
                         " points for customer %" PRId64 "; not granting %" PRId64
                         " points to customer %" PRId64,
                         ctx->grant.order_id, ctx->existing.points, ctx->existing.customer_id,
                         ctx->grant.points, ctx->grant.customer_id);
        return 0;
    }
    if (!found) {
        ctx->existing.customer_id = ctx->grant.customer_id;
        ctx->existing.points = ctx->grant.points;
    }
    ctx->status = OQ_GRANT_ALREADY_GRANTED;
    return 0;
}

static void s_unknown_customer(int64_t customer_id, oq_pg_error_t *error)
{
    oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                     "customer %" PRId64 " has no balance row (add it with: onceq customer add "
                     "%" PRId64 ")",
                     customer_id, customer_id);
}

/* The transaction body: grant_once. */
static int s_grant_once(oq_txn_t *txn, void *arg, oq_pg_error_t *error)
{
    (void)txn;
    s_ctx_t *ctx = arg;
    ctx->status = OQ_GRANT_ERROR;
    oq_ledger_insert_t inserted;
    if (oq_ledger_insert_grant(ctx->ledger, &ctx->grant, &inserted, error) < 0)
        return -1;
    if (inserted == OQ_LEDGER_NO_CUSTOMER)
        goto unknown_customer;
    if (inserted == OQ_LEDGER_EXISTS) {
        if (s_compare(ctx, error) < 0)
            return -1;
        /* A conflict rolls back: nothing was written anyway. */
        return ctx->status == OQ_GRANT_CONFLICT ? -1 : 0;
    }
    if (ctx->hooks && ctx->hooks->after_insert)
        ctx->hooks->after_insert(ctx->hooks->ctx);
    bool found;
    if (oq_ledger_add_to_balance(ctx->ledger, ctx->grant.customer_id, ctx->grant.points, &found,
                                 error) < 0)
        return -1;
    if (!found)
        goto unknown_customer;
    ctx->status = OQ_GRANT_GRANTED;
    return 0;

unknown_customer:
    /* Returning -1 rolls back the grant row if it went in. */
    ctx->status = OQ_GRANT_UNKNOWN_CUSTOMER;
    s_unknown_customer(ctx->grant.customer_id, error);
    return -1;
}

/* An argument out of range: result says which (status INVALID). */
static bool s_invalid(int64_t order_id, int64_t customer_id, int64_t points,
                      oq_grant_result_t *result)
{
    if (order_id >= 1 && customer_id >= 1 && points >= 1 && points <= (int64_t)OQ_MAX_POINTS)
        return false;
    result->status = OQ_GRANT_INVALID;
    if (points < 1 || points > (int64_t)OQ_MAX_POINTS)
        oq_pg_errors_set(&result->error, OQ_PG_ERR_FAIL, NULL,
                         "points must be from 1 to %d, not %" PRId64, OQ_MAX_POINTS, points);
    else
        oq_pg_errors_set(
            &result->error, OQ_PG_ERR_FAIL, NULL, "%s must be a positive integer, not %" PRId64,
            order_id < 1 ? "order_id" : "customer_id", order_id < 1 ? order_id : customer_id);
    return true;
}

/* The result of a grant whose last run found ctx->status, with
   result->error holding the run's error (class NONE: committed). */
static void s_result(const s_ctx_t *ctx, oq_grant_result_t *result)
{
    if (result->error.cls != OQ_PG_ERR_NONE) {
        /* The body's own verdicts (unknown customer, conflict) end its
           last run and come back as FAIL errors; anything else is the
           database's (or a run that never happened). */
        bool verdict =
            result->error.cls == OQ_PG_ERR_FAIL &&
            (ctx->status == OQ_GRANT_UNKNOWN_CUSTOMER || ctx->status == OQ_GRANT_CONFLICT);
        result->status = verdict ? ctx->status : OQ_GRANT_ERROR;
    } else {
        result->status = ctx->status;
    }
    if (result->status == OQ_GRANT_ALREADY_GRANTED || result->status == OQ_GRANT_CONFLICT) {
        result->existing_customer_id = ctx->existing.customer_id;
        result->existing_points = ctx->existing.points;
    }
}

static int s_done(const oq_grant_result_t *result)
{
    return result->status == OQ_GRANT_GRANTED || result->status == OQ_GRANT_ALREADY_GRANTED ? 0
                                                                                            : -1;
}

int oq_grant_order_points(oq_ledger_t *ledger, oq_txn_t *txn, int64_t order_id, int64_t customer_id,
                          int64_t points, const oq_grant_hooks_t *hooks, oq_grant_result_t *result)
{
    assert(ledger && txn && result);
    memset(result, 0, sizeof *result);
    oq_pg_errors_clear(&result->error);
    if (s_invalid(order_id, customer_id, points, result))
        return -1;
    s_ctx_t ctx = {
        .ledger = ledger,
        .grant = {order_id, OQ_GRANT_REASON_ORDER, customer_id, points},
        .hooks = hooks,
    };
    if (oq_txn_run(txn, s_grant_once, &ctx, &result->error) == 0)
        oq_pg_errors_clear(&result->error);
    s_result(&ctx, result);
    return s_done(result);
}

/* ---- batches ---------------------------------------------------------- */

/* A batch of valid requests, with the two orders its locks are taken in. */
typedef struct {
    oq_ledger_t *ledger;
    size_t count;
    s_ctx_t *items;            /* per request: its grant, and what its last run found */
    size_t *by_order;          /* indexes of items by (order_id, position) */
    size_t *by_customer;       /* indexes of items by (customer_id, position) */
    oq_ledger_grant_t *sorted; /* the grants in by_order order, for the INSERT */
    bool *inserted;            /* of sorted[k] */
    int64_t *customers, *sums; /* the balance updates: customers ascending */
} s_batch_t;

/* A sort key and the position it belongs to. */
typedef struct {
    int64_t key;
    size_t index;
} s_key_t;

static int s_key_cmp(const void *a, const void *b)
{
    const s_key_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Indexes of items sorted by a key, ties in their given order. */
static void s_sort(const s_ctx_t *items, size_t count, bool by_customer, size_t *out)
{
    s_key_t *keys = calloc(count, sizeof *keys);
    assert(keys);
    for (size_t i = 0; i < count; i++)
        keys[i] = (s_key_t){by_customer ? items[i].grant.customer_id : items[i].grant.order_id, i};
    qsort(keys, count, sizeof *keys, s_key_cmp);
    for (size_t i = 0; i < count; i++)
        out[i] = keys[i].index;
    free(keys);
}

/* The batch's transaction: every grant in one INSERT, in order_id order;
   the ones that did not go in compared with the row that stopped them;
   then each customer's balance updated once, with the points of the
   grants that went in, the rows locked in customer_id order. */
static int s_batch_body(oq_txn_t *txn, void *arg, size_t count, oq_batch_item_t *items,
                        oq_pg_error_t *error)
{
    (void)txn;
    s_batch_t *b = arg;
    assert(count == b->count);
    for (size_t i = 0; i < count; i++)
        b->items[i].status = OQ_GRANT_ERROR;
    if (oq_ledger_insert_grants(b->ledger, b->sorted, count, b->inserted, error) < 0)
        return -1;
    for (size_t k = 0; k < count; k++) {
        size_t i = b->by_order[k];
        s_ctx_t *ctx = &b->items[i];
        if (b->inserted[k]) {
            ctx->status = OQ_GRANT_GRANTED;
            items[i].applied = true;
            continue;
        }
        if (s_compare(ctx, &items[i].error) < 0) {
            *error = items[i].error;
            return -1;
        }
    }
    size_t customers = 0;
    for (size_t k = 0; k < count;) {
        int64_t customer = b->items[b->by_customer[k]].grant.customer_id;
        int64_t sum = 0;
        for (; k < count && b->items[b->by_customer[k]].grant.customer_id == customer; k++)
            if (b->items[b->by_customer[k]].status == OQ_GRANT_GRANTED)
                sum += b->items[b->by_customer[k]].grant.points;
        if (sum == 0)
            continue; /* none of this customer's grants went in */
        b->customers[customers] = customer;
        b->sums[customers++] = sum;
    }
    if (customers == 0)
        return 0;
    size_t found;
    if (oq_ledger_add_to_balances(b->ledger, b->customers, b->sums, customers, &found, error) < 0)
        return -1;
    if (found < customers) {
        /* The foreign key makes this rare (a row deleted meanwhile); the
           fallback finds which grant it concerns. */
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "%zu of the batch's customers have no balance row", customers - found);
        return -1;
    }
    return 0;
}

/* One request alone, in the fallback: the single grant. */
static int s_batch_one(oq_txn_t *txn, void *arg, size_t index, bool *applied, oq_pg_error_t *error)
{
    s_batch_t *b = arg;
    int rc = s_grant_once(txn, &b->items[index], error);
    *applied = rc == 0 && b->items[index].status == OQ_GRANT_GRANTED;
    return rc;
}

int oq_grant_order_points_batch(oq_ledger_t *ledger, oq_txn_t *txn, size_t count,
                                const oq_grant_request_t *requests, oq_grant_result_t *results,
                                oq_pg_error_t *batch_error)
{
    assert(ledger && txn && requests && results);
    assert(count >= 1 && count <= OQ_BATCH_MAX_ITEMS);
    if (batch_error)
        oq_pg_errors_clear(batch_error);
    memset(results, 0, count * sizeof *results);
    s_batch_t b = {.ledger = ledger};
    b.items = calloc(count, sizeof *b.items);
    size_t *which = calloc(count, sizeof *which); /* request of each item */
    assert(b.items && which);
    for (size_t i = 0; i < count; i++) {
        const oq_grant_request_t *r = &requests[i];
        oq_pg_errors_clear(&results[i].error);
        if (s_invalid(r->order_id, r->customer_id, r->points, &results[i]))
            continue;
        which[b.count] = i;
        b.items[b.count++] = (s_ctx_t){
            .ledger = ledger,
            .grant = {r->order_id, OQ_GRANT_REASON_ORDER, r->customer_id, r->points},
        };
    }
    if (b.count > 0) {
        b.by_order = calloc(b.count, sizeof *b.by_order);
        b.by_customer = calloc(b.count, sizeof *b.by_customer);
        b.sorted = calloc(b.count, sizeof *b.sorted);
        b.inserted = calloc(b.count, sizeof *b.inserted);
        b.customers = calloc(b.count, sizeof *b.customers);
        b.sums = calloc(b.count, sizeof *b.sums);
        oq_batch_item_t *outcomes = calloc(b.count, sizeof *outcomes);
        assert(b.by_order && b.by_customer && b.sorted && b.inserted && b.customers && b.sums &&
               outcomes);
        s_sort(b.items, b.count, false, b.by_order);
        s_sort(b.items, b.count, true, b.by_customer);
        for (size_t k = 0; k < b.count; k++)
            b.sorted[k] = b.items[b.by_order[k]].grant;
        oq_txn_run_batch(txn, b.count, s_batch_body, s_batch_one, &b, outcomes, batch_error);
        for (size_t k = 0; k < b.count; k++) {
            oq_grant_result_t *result = &results[which[k]];
            result->error = outcomes[k].error;
            s_result(&b.items[k], result);
        }
        free(outcomes);
        free(b.sums);
        free(b.customers);
        free(b.inserted);
        free(b.sorted);
        free(b.by_customer);
        free(b.by_order);
    }
    free(which);
    free(b.items);
    int rc = 0;
    for (size_t i = 0; i < count; i++)
        if (s_done(&results[i]) < 0)
            rc = -1;
    return rc;
}

const char *oq_grant_status_name(oq_grant_status_t status)
{
    switch (status) {
    case OQ_GRANT_GRANTED:
        return "granted";
    case OQ_GRANT_ALREADY_GRANTED:
        return "already_granted";
    case OQ_GRANT_UNKNOWN_CUSTOMER:
        return "unknown_customer";
    case OQ_GRANT_CONFLICT:
        return "conflict";
    case OQ_GRANT_INVALID:
        return "invalid";
    case OQ_GRANT_ERROR:
        return "error";
    }
    return "?";
}
