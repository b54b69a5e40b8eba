/*  ledger_mem.h: the point ledger in memory, for unit tests. It keeps the
    same rules as the SQL schema (one grant per order and reason, positive
    points, non-negative balances, a grant's customer must have a balance
    row) and simulates transactions: BEGIN takes a copy of the data,
    ROLLBACK puts it back. Faults are injected by name (a SQLSTATE, or a
    lost connection) at BEGIN, at a ledger call or at COMMIT, so the use case
    and the transaction runner are tested along the paths a real database
    takes them. */
#ifndef ONCEQ_LEDGER_MEM_H
#define ONCEQ_LEDGER_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onceq/effects.h"
#include "points/ledger.h"

typedef struct oq_ledger_mem oq_ledger_mem_t;

/* Where a fault can be injected. */
typedef enum {
    OQ_LEDGER_MEM_AT_BEGIN,
    OQ_LEDGER_MEM_AT_INSERT_GRANT,
    OQ_LEDGER_MEM_AT_ADD_TO_BALANCE,
    OQ_LEDGER_MEM_AT_COMMIT,
    OQ_LEDGER_MEM_AT_COUNT_
} oq_ledger_mem_at_t;

/* An empty ledger, enforcing the foreign key. */
oq_ledger_mem_t *oq_ledger_mem_new(void);

/* Free it and set *self_p to NULL. */
void oq_ledger_mem_destroy(oq_ledger_mem_t **self_p);

/* The ledger interface over it (borrowed; lives as long as self). */
oq_ledger_t *oq_ledger_mem_ledger(oq_ledger_mem_t *self);

/* The transaction ops over it, for oq_txn_new(ops, self, ...). */
const oq_txn_ops_t *oq_ledger_mem_txn_ops(void);

/* Enforce the grant -> balance foreign key (default) or not. Without it a
   grant for an unknown customer goes in, and only the use case's own check
   (its balance update finds no row) keeps it out: tests use that to prove
   the rollback. */
void oq_ledger_mem_set_foreign_key(oq_ledger_mem_t *self, bool enforce);

/* Make the next `times` calls at `at` fail with sqlstate, or with a lost
   connection if sqlstate is NULL. A lost connection at COMMIT happens after
   the commit: the data is committed and the caller cannot know it. */
void oq_ledger_mem_inject(oq_ledger_mem_t *self, oq_ledger_mem_at_t at, const char *sqlstate,
                          uint32_t times);

/* How often `at` was called (failed calls included). */
uint32_t oq_ledger_mem_calls(const oq_ledger_mem_t *self, oq_ledger_mem_at_t at);

/* Grant rows held (committed or in the open transaction). */
size_t oq_ledger_mem_grant_count(const oq_ledger_mem_t *self);

/* True between BEGIN and COMMIT or ROLLBACK. */
bool oq_ledger_mem_in_txn(const oq_ledger_mem_t *self);

#endif
