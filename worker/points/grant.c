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

/* The transaction body: grant_once. */
static int s_grant_once(oq_txn_t *txn, void *arg, oq_pg_error_t *error)
{
    s_ctx_t *ctx = arg;
    ctx->status = OQ_GRANT_ERROR;
    oq_ledger_insert_t inserted;
    if (oq_ledger_insert_grant(ctx->ledger, &ctx->grant, &inserted, error) < 0)
        return -1;
    if (inserted == OQ_LEDGER_NO_CUSTOMER)
        goto unknown_customer;
    if (inserted == OQ_LEDGER_EXISTS) {
        ctx->existing = ctx->grant;
        bool found;
        if (oq_ledger_find_grant(ctx->ledger, &ctx->existing, &found, error) < 0)
            return -1;
        /* Not found: the row that stopped us is gone again (deleted by
           hand); what matters is that this run did not write. */
        if (found && (ctx->existing.customer_id != ctx->grant.customer_id ||
                      ctx->existing.points != ctx->grant.points)) {
            ctx->status = OQ_GRANT_CONFLICT;
            oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                             "order %" PRId64 " was already granted %" PRId64
                             " points for customer %" PRId64 "; not granting %" PRId64
                             " points to customer %" PRId64,
                             ctx->grant.order_id, ctx->existing.points, ctx->existing.customer_id,
                             ctx->grant.points, ctx->grant.customer_id);
            return -1;
        }
        if (!found) {
            ctx->existing.customer_id = ctx->grant.customer_id;
            ctx->existing.points = ctx->grant.points;
        }
        ctx->status = OQ_GRANT_ALREADY_GRANTED;
        return 0;
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
    oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                     "customer %" PRId64 " has no balance row (add it with: onceq customer add "
                     "%" PRId64 ")",
                     ctx->grant.customer_id, ctx->grant.customer_id);
    return -1;
}

int oq_grant_order_points(oq_ledger_t *ledger, oq_txn_t *txn, int64_t order_id, int64_t customer_id,
                          int64_t points, const oq_grant_hooks_t *hooks, oq_grant_result_t *result)
{
    assert(ledger && txn && result);
    memset(result, 0, sizeof *result);
    oq_pg_errors_clear(&result->error);
    if (order_id < 1 || customer_id < 1 || points < 1 || points > (int64_t)OQ_MAX_POINTS) {
        result->status = OQ_GRANT_INVALID;
        if (points < 1 || points > (int64_t)OQ_MAX_POINTS)
            oq_pg_errors_set(&result->error, OQ_PG_ERR_FAIL, NULL,
                             "points must be from 1 to %d, not %" PRId64, OQ_MAX_POINTS, points);
        else
            oq_pg_errors_set(
                &result->error, OQ_PG_ERR_FAIL, NULL, "%s must be a positive integer, not %" PRId64,
                order_id < 1 ? "order_id" : "customer_id", order_id < 1 ? order_id : customer_id);
        return -1;
    }
    s_ctx_t ctx = {
        .ledger = ledger,
        .grant = {order_id, OQ_GRANT_REASON_ORDER, customer_id, points},
        .hooks = hooks,
    };
    if (oq_txn_run(txn, s_grant_once, &ctx, &result->error) < 0) {
        /* The body's own verdicts (unknown customer, conflict) end its
           last run and come back as FAIL errors; anything else is the
           database's. */
        bool verdict = ctx.status == OQ_GRANT_UNKNOWN_CUSTOMER || ctx.status == OQ_GRANT_CONFLICT;
        result->status = verdict ? ctx.status : OQ_GRANT_ERROR;
    } else {
        result->status = ctx.status;
        oq_pg_errors_clear(&result->error);
    }
    if (result->status == OQ_GRANT_ALREADY_GRANTED || result->status == OQ_GRANT_CONFLICT) {
        result->existing_customer_id = ctx.existing.customer_id;
        result->existing_points = ctx.existing.points;
    }
    return result->status == OQ_GRANT_GRANTED || result->status == OQ_GRANT_ALREADY_GRANTED ? 0
                                                                                            : -1;
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
