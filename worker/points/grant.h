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

/* "granted", "already_granted", "unknown_customer", "conflict", "invalid"
   or "error". */
const char *oq_grant_status_name(oq_grant_status_t status);

#endif
