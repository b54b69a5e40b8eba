/*  ledger_fixture.h: the points use case's world without a database, for
    the unit tests of grant_points and its batch function: the in-memory
    ledger, a transaction on it whose pauses between tries are recorded
    instead of slept, and customers 42 (balance 0) and 43 (balance 1000).
    Its fields are for the tests to read and pass on. */
#ifndef ONCEQ_TEST_LEDGER_FIXTURE_H
#define ONCEQ_TEST_LEDGER_FIXTURE_H

#include <stdint.h>

#include "onceq/effects.h"
#include "points/ledger_mem.h"

typedef struct {
    oq_ledger_mem_t *mem;
    oq_ledger_t *ledger; /* borrowed from mem */
    oq_txn_t *txn;       /* on mem, its sleep recorded below */
    uint32_t sleeps;     /* pauses the runner asked for: one per re-run in place */
    uint32_t slept_ms[OQ_TXN_MAX_RETRIES + 1]; /* the first ones' lengths */
} oq_ledger_fx_t;

/* A cmocka setup: a new fixture in *state. Returns 0. */
int oq_ledger_fx_setup(void **state);

/* A cmocka teardown: destroy the fixture in *state. Returns 0. */
int oq_ledger_fx_teardown(void **state);

/* Add a customer with a balance; fails the test unless it is created. */
void oq_ledger_fx_add_customer(oq_ledger_fx_t *self, int64_t customer_id, int64_t balance);

/* A customer's balance; fails the test unless the customer exists. */
int64_t oq_ledger_fx_balance(oq_ledger_fx_t *self, int64_t customer_id);

#endif
