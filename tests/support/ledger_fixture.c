/*  ledger_fixture.c: the in-memory ledger for grant_points' unit tests
    (ledger_fixture.h). */
#include "ledger_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

static void s_record_sleep(void *ctx, uint32_t ms)
{
    oq_ledger_fx_t *self = ctx;
    if (self->sleeps < OQ_TXN_MAX_RETRIES + 1)
        self->slept_ms[self->sleeps] = ms;
    self->sleeps++;
}

int oq_ledger_fx_setup(void **state)
{
    oq_ledger_fx_t *self = calloc(1, sizeof *self);
    assert_non_null(self);
    self->mem = oq_ledger_mem_new();
    self->ledger = oq_ledger_mem_ledger(self->mem);
    self->txn = oq_txn_new(oq_ledger_mem_txn_ops(), self->mem, OQ_TXN_READ_COMMITTED);
    oq_txn_set_sleep(self->txn, s_record_sleep, self);
    oq_ledger_fx_add_customer(self, 42, 0);
    oq_ledger_fx_add_customer(self, 43, 1000);
    *state = self;
    return 0;
}

int oq_ledger_fx_teardown(void **state)
{
    oq_ledger_fx_t *self = *state;
    oq_txn_destroy(&self->txn);
    oq_ledger_mem_destroy(&self->mem);
    free(self);
    *state = NULL;
    return 0;
}

void oq_ledger_fx_add_customer(oq_ledger_fx_t *self, int64_t customer_id, int64_t balance)
{
    bool created;
    oq_pg_error_t error;
    assert_int_equal(oq_ledger_add_customer(self->ledger, customer_id, balance, &created, &error),
                     0);
    assert_true(created);
}

int64_t oq_ledger_fx_balance(oq_ledger_fx_t *self, int64_t customer_id)
{
    int64_t balance = -1;
    bool found;
    oq_pg_error_t error;
    assert_int_equal(oq_ledger_get_balance(self->ledger, customer_id, &balance, &found, &error), 0);
    assert_true(found);
    return balance;
}
