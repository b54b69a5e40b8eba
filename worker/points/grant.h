/*  grant.h: the use case "grant the points of an order", guarded so that it
    takes effect once however often it runs. In one transaction: insert the
    grant with ON CONFLICT (order_id, reason) DO NOTHING, and only if the row
    went in, add the points to the customer's balance. A customer without a
    balance row rolls the whole transaction back: a grant is never recorded
    without its balance.

    Every path to a grant calls this: the grant_points job handler and
    `onceq grant`. */
#ifndef ONCEQ_GRANT_H
#define ONCEQ_GRANT_H

#include <stddef.h>
#include <stdint.h>

#include "onceq/effects.h"
#include "points/ledger.h"

/* The reason recorded with the points of an order. Part of the unique key:
   other reasons for the same order (a review bonus, say) are other grants. */
#define OQ_GRANT_REASON_ORDER "order_points"

typedef enum {
    OQ_GRANT_GRANTED,          /* this call recorded the grant and added the points */
    OQ_GRANT_ALREADY_GRANTED,  /* the same grant was on record: nothing changed */
    OQ_GRANT_UNKNOWN_CUSTOMER, /* no balance row: rolled back, nothing changed */
    OQ_GRANT_CONFLICT,         /* the order was granted with another customer or amount */
    OQ_GRANT_INVALID,          /* an argument out of range: nothing was tried */
    OQ_GRANT_ERROR,            /* the database failed: error.cls says retry or fail */
} oq_grant_status_t;

typedef struct {
    oq_grant_status_t status;
    /* With ALREADY_GRANTED and CONFLICT: the grant on record. */
    int64_t existing_customer_id;
    int64_t existing_points;
    /* With every status but GRANTED and ALREADY_GRANTED: why, in one line,
       and the class that decides the job's outcome (OQ_PG_ERR_FAIL for
       UNKNOWN_CUSTOMER, CONFLICT and INVALID). */
    oq_pg_error_t error;
} oq_grant_result_t;

/* Called inside the transaction right after the grant row went in, before
   the balance changes. Test hooks only (a pause to widen a race window). */
typedef struct {
    void (*after_insert)(void *ctx);
    void *ctx;
} oq_grant_hooks_t;

/* Grant `points` (1 .. OQ_MAX_POINTS) to customer_id (>= 1) for order_id
   (>= 1), in a transaction of txn on the ledger's database. hooks may be
   NULL. 0 with status GRANTED or ALREADY_GRANTED; -1 with any other status. */
int oq_grant_order_points(oq_ledger_t *ledger, oq_txn_t *txn, int64_t order_id, int64_t customer_id,
                          int64_t points, const oq_grant_hooks_t *hooks, oq_grant_result_t *result);

/* One grant of a batch: the arguments of oq_grant_order_points. */
typedef struct {
    int64_t order_id;
    int64_t customer_id;
    int64_t points;
} oq_grant_request_t;

/* Grant the points of count orders (1 .. OQ_BATCH_MAX_ITEMS) in one
   transaction of txn: one INSERT of every grant (ON CONFLICT DO NOTHING),
   then one balance update per customer with the points of the grants that
   went in. Grants are inserted in order_id order and balances updated in
   customer order, so that two batches take their locks in the same order
   and cannot deadlock each other. On any error the batch rolls back and
   each request runs alone, as oq_grant_order_points (the transaction
   runner's fallback, onceq/effects.h): results[i] is then exactly what
   oq_grant_order_points would have given requests[i], and otherwise the
   same statuses from the batch. Two requests for one order: the first
   (in the order given) is granted, the second finds it (already granted,
   or a conflict). batch_error (may be NULL) gets why the batch fell back,
   OQ_PG_ERR_NONE if it did not. 0 if every status is GRANTED or
   ALREADY_GRANTED, else -1. */
int oq_grant_order_points_batch(oq_ledger_t *ledger, oq_txn_t *txn, size_t count,
                                const oq_grant_request_t *requests, oq_grant_result_t *results,
                                oq_pg_error_t *batch_error);

/* "granted", "already_granted", "unknown_customer", "conflict", "invalid"
   or "error". */
const char *oq_grant_status_name(oq_grant_status_t status);

#endif
