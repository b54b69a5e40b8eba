/*  store.c: the shipment_requests statements, each transaction through the
    effects runner (re-run in place on a serialization failure, classified
    errors otherwise). The row is locked (FOR UPDATE) only inside the first
    transaction, for the few statements that read and count it. */
#include "shipments/store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_INT_TEXT_LEN 24
#define S_COUNT(a)     ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct {
    const oq_shipment_request_t *request;
    oq_shipment_record_t *record;
} s_begin_t;

static int s_begin_body(oq_txn_t *txn, void *arg, oq_pg_error_t *error)
{
    s_begin_t *ctx = arg;
    oq_pg_t *pg = oq_txn_pg(txn);
    char order[S_INT_TEXT_LEN];
    snprintf(order, sizeof order, "%" PRId64, ctx->request->order_id);
    const char *params[] = {order, ctx->request->key, ctx->request->body};
    PGresult *res;
    if (oq_pg_exec(pg,
                   "INSERT INTO shipment_requests (order_id, idempotency_key, request) "
                   "VALUES ($1, $2, $3::jsonb) ON CONFLICT (order_id) DO NOTHING",
                   S_COUNT(params), params, &res, error) < 0)
        return -1;
    PQclear(res);
    /* A failed row's request was refused by the carrier (or never reached
       it): a new request for the order replaces it. */
    if (oq_pg_exec(pg,
                   "UPDATE shipment_requests SET request = $3::jsonb "
                   "WHERE order_id = $1 AND idempotency_key = $2 AND status = 'failed' "
                   "AND request <> $3::jsonb",
                   S_COUNT(params), params, &res, error) < 0)
        return -1;
    PQclear(res);
    if (oq_pg_exec(pg,
                   "SELECT status, coalesce(reference, ''), request = $3::jsonb "
                   "FROM shipment_requests WHERE order_id = $1 AND idempotency_key = $2 "
                   "FOR UPDATE",
                   S_COUNT(params), params, &res, error) < 0)
        return -1;
    if (PQntuples(res) != 1) {
        PQclear(res);
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "order %" PRId64 " has a shipment request under another key",
                         ctx->request->order_id);
        return -1;
    }
    oq_shipment_record_t *r = ctx->record;
    snprintf(r->status, sizeof r->status, "%s", PQgetvalue(res, 0, 0));
    snprintf(r->reference, sizeof r->reference, "%s", PQgetvalue(res, 0, 1));
    r->same_request = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
    PQclear(res);
    const char *count[] = {order};
    if (oq_pg_exec(pg,
                   "UPDATE shipment_requests SET attempts = attempts + 1, updated_at = now(), "
                   "status = CASE WHEN status = 'confirmed' THEN status ELSE 'requested' END "
                   "WHERE order_id = $1 RETURNING attempts",
                   S_COUNT(count), count, &res, error) < 0)
        return -1;
    r->attempts = PQntuples(res) == 1 ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0;
    PQclear(res);
    return 0;
}

int oq_shipment_store_begin(oq_effects_t *effects, const oq_shipment_request_t *request,
                            oq_shipment_record_t *record, oq_pg_error_t *error)
{
    memset(record, 0, sizeof *record);
    s_begin_t ctx = {request, record};
    return oq_effects_run(effects, s_begin_body, &ctx, error);
}

typedef struct {
    int64_t order_id;
    const oq_shipment_outcome_t *outcome;
} s_finish_t;

static int s_finish_body(oq_txn_t *txn, void *arg, oq_pg_error_t *error)
{
    s_finish_t *ctx = arg;
    oq_pg_t *pg = oq_txn_pg(txn);
    char order[S_INT_TEXT_LEN];
    snprintf(order, sizeof order, "%" PRId64, ctx->order_id);
    const oq_shipment_outcome_t *o = ctx->outcome;
    PGresult *res;
    if (o->verdict == OQ_SHIPMENT_CONFIRMED) {
        const char *params[] = {order, o->reference};
        if (oq_pg_exec(pg,
                       "UPDATE shipment_requests SET status = 'confirmed', reference = $2, "
                       "reason = NULL, confirmed_at = coalesce(confirmed_at, now()), "
                       "updated_at = now() WHERE order_id = $1",
                       S_COUNT(params), params, &res, error) < 0)
            return -1;
        PQclear(res);
        return 0;
    }
    const char *status = o->verdict == OQ_SHIPMENT_FAILED   ? "failed"
                         : o->verdict == OQ_SHIPMENT_REVIEW ? "review"
                                                            : "requested";
    const char *params[] = {order, status, o->reason};
    if (oq_pg_exec(pg,
                   "UPDATE shipment_requests SET status = $2, reason = $3, updated_at = now() "
                   "WHERE order_id = $1 AND (status <> 'confirmed' OR $2 = 'review')",
                   S_COUNT(params), params, &res, error) < 0)
        return -1;
    PQclear(res);
    return 0;
}

int oq_shipment_store_finish(oq_effects_t *effects, int64_t order_id,
                             const oq_shipment_outcome_t *outcome, oq_pg_error_t *error)
{
    s_finish_t ctx = {order_id, outcome};
    return oq_effects_run(effects, s_finish_body, &ctx, error);
}
