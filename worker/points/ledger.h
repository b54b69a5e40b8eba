/*  ledger.h: the point ledger, as the use case sees it: grants recorded once
    per (order, reason), and one balance per customer. It is a small table of
    functions with two implementations: PostgreSQL (ledger_pg.h) and an
    in-memory one for unit tests (ledger_mem.h). Every call runs inside the
    transaction the caller's runner (onceq/effects.h) opened on the same database.

    Each function returns 0 with its answer, or -1 with a classified error
    (onceq/effects.h). Answers that are facts about the data (the grant
    existed, the customer has no balance row) are answers, not errors. */
#ifndef ONCEQ_LEDGER_H
#define ONCEQ_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onceq/effects.h"

/* One grant: points given to a customer for an order, for a reason. */
typedef struct {
    int64_t order_id;
    const char *reason; /* borrowed, e.g. OQ_GRANT_REASON_ORDER */
    int64_t customer_id;
    int64_t points;
} oq_ledger_grant_t;

/* What inserting a grant did. */
typedef enum {
    OQ_LEDGER_INSERTED,    /* the row went in */
    OQ_LEDGER_EXISTS,      /* a grant for (order_id, reason) was there: nothing written */
    OQ_LEDGER_NO_CUSTOMER, /* refused: the customer has no balance row */
} oq_ledger_insert_t;

typedef struct {
    /* INSERT ... ON CONFLICT (order_id, reason) DO NOTHING. */
    int (*insert_grant)(void *impl, const oq_ledger_grant_t *grant, oq_ledger_insert_t *outcome,
                        oq_pg_error_t *error);
    /* Several grants in one statement, in the order given: INSERT ...
       SELECT ... ON CONFLICT (order_id, reason) DO NOTHING RETURNING.
       inserted[i] is true if grants[i]'s row went in; of two grants with
       one key, only the first can. A grant for a customer without a
       balance row refuses the whole statement: -1 with the database's
       error (23503). May be NULL: then oq_ledger_insert_grants inserts
       the grants one by one through insert_grant. */
    int (*insert_grants)(void *impl, const oq_ledger_grant_t *grants, size_t count, bool *inserted,
                         oq_pg_error_t *error);
    /* Add points to a balance; *found false if the customer has no row. */
    int (*add_to_balance)(void *impl, int64_t customer_id, int64_t points, bool *found,
                          oq_pg_error_t *error);
    /* Add points[i] to the balance of customers[i], for count customers,
       distinct and in ascending order, whose rows are locked in that order
       before any changes (two callers then wait for each other at most,
       never deadlock); *found is the number of customers that have a row.
       May be NULL: then oq_ledger_add_to_balances calls add_to_balance for
       each, in order. */
    int (*add_to_balances)(void *impl, const int64_t *customers, const int64_t *points,
                           size_t count, size_t *found, oq_pg_error_t *error);
    /* The grant for (grant->order_id, grant->reason): fills customer_id and
       points; *found false if there is none. */
    int (*find_grant)(void *impl, oq_ledger_grant_t *grant, bool *found, oq_pg_error_t *error);
    /* A customer's balance; *found false if the customer has no row. */
    int (*get_balance)(void *impl, int64_t customer_id, int64_t *balance, bool *found,
                       oq_pg_error_t *error);
    /* Create a customer's balance row; *created false if it existed (then
       nothing changes). */
    int (*add_customer)(void *impl, int64_t customer_id, int64_t balance, bool *created,
                        oq_pg_error_t *error);
    /* Free impl, if the ledger owns it (NULL: it does not). */
    void (*destroy)(void *impl);
} oq_ledger_ops_t;

typedef struct oq_ledger oq_ledger_t;

/* A ledger over impl through ops (static). It owns impl if ops->destroy is
   set. */
oq_ledger_t *oq_ledger_new(const oq_ledger_ops_t *ops, void *impl);

/* Free the ledger (and impl, see above) and set *self_p to NULL. */
void oq_ledger_destroy(oq_ledger_t **self_p);

/* The calls, as in oq_ledger_ops_t. */
int oq_ledger_insert_grant(oq_ledger_t *self, const oq_ledger_grant_t *grant,
                           oq_ledger_insert_t *outcome, oq_pg_error_t *error);
/* Several grants at once (count >= 1), as insert_grants says; one by one
   through insert_grant for an implementation without it (a customer
   without a balance row then also ends it: -1 with a FAIL error, SQLSTATE
   23503, as the database's foreign key does). */
int oq_ledger_insert_grants(oq_ledger_t *self, const oq_ledger_grant_t *grants, size_t count,
                            bool *inserted, oq_pg_error_t *error);
int oq_ledger_add_to_balance(oq_ledger_t *self, int64_t customer_id, int64_t points, bool *found,
                             oq_pg_error_t *error);
/* Several balances at once (count >= 1), as add_to_balances says. */
int oq_ledger_add_to_balances(oq_ledger_t *self, const int64_t *customers, const int64_t *points,
                              size_t count, size_t *found, oq_pg_error_t *error);
int oq_ledger_find_grant(oq_ledger_t *self, oq_ledger_grant_t *grant, bool *found,
                         oq_pg_error_t *error);
int oq_ledger_get_balance(oq_ledger_t *self, int64_t customer_id, int64_t *balance, bool *found,
                          oq_pg_error_t *error);
int oq_ledger_add_customer(oq_ledger_t *self, int64_t customer_id, int64_t balance, bool *created,
                           oq_pg_error_t *error);

#endif
