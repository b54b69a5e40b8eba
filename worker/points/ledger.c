/*  ledger.c: the point ledger's dispatch to its implementation. */
#include "points/ledger.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>

struct oq_ledger {
    const oq_ledger_ops_t *ops; /* static */
    void *impl;                 /* owned if ops->destroy is set */
};

oq_ledger_t *oq_ledger_new(const oq_ledger_ops_t *ops, void *impl)
{
    assert(ops && ops->insert_grant && ops->add_to_balance && ops->find_grant && ops->get_balance &&
           ops->add_customer);
    oq_ledger_t *self = calloc(1, sizeof *self);
    assert(self);
    self->ops = ops;
    self->impl = impl;
    return self;
}

void oq_ledger_destroy(oq_ledger_t **self_p)
{
    assert(self_p);
    oq_ledger_t *self = *self_p;
    if (!self)
        return;
    if (self->ops->destroy)
        self->ops->destroy(self->impl);
    free(self);
    *self_p = NULL;
}

int oq_ledger_insert_grant(oq_ledger_t *self, const oq_ledger_grant_t *grant,
                           oq_ledger_insert_t *outcome, oq_pg_error_t *error)
{
    assert(self && grant && grant->reason && outcome && error);
    oq_pg_errors_clear(error);
    return self->ops->insert_grant(self->impl, grant, outcome, error);
}

/* The SQLSTATE of a foreign key violation, as PostgreSQL reports a grant
   for a customer without a balance row. */
#define S_SQLSTATE_FOREIGN_KEY "23503"

int oq_ledger_insert_grants(oq_ledger_t *self, const oq_ledger_grant_t *grants, size_t count,
                            bool *inserted, oq_pg_error_t *error)
{
    assert(self && grants && count >= 1 && inserted && error);
    oq_pg_errors_clear(error);
    if (self->ops->insert_grants)
        return self->ops->insert_grants(self->impl, grants, count, inserted, error);
    for (size_t i = 0; i < count; i++) {
        oq_ledger_insert_t outcome;
        if (oq_ledger_insert_grant(self, &grants[i], &outcome, error) < 0)
            return -1;
        if (outcome == OQ_LEDGER_NO_CUSTOMER) {
            oq_pg_errors_set(error, OQ_PG_ERR_FAIL, S_SQLSTATE_FOREIGN_KEY,
                             "customer %" PRId64 " has no balance row", grants[i].customer_id);
            return -1;
        }
        inserted[i] = outcome == OQ_LEDGER_INSERTED;
    }
    return 0;
}

int oq_ledger_add_to_balance(oq_ledger_t *self, int64_t customer_id, int64_t points, bool *found,
                             oq_pg_error_t *error)
{
    assert(self && found && error);
    oq_pg_errors_clear(error);
    return self->ops->add_to_balance(self->impl, customer_id, points, found, error);
}

int oq_ledger_add_to_balances(oq_ledger_t *self, const int64_t *customers, const int64_t *points,
                              size_t count, size_t *found, oq_pg_error_t *error)
{
    assert(self && customers && points && count >= 1 && found && error);
    for (size_t i = 1; i < count; i++)
        assert(customers[i - 1] < customers[i]);
    oq_pg_errors_clear(error);
    if (self->ops->add_to_balances)
        return self->ops->add_to_balances(self->impl, customers, points, count, found, error);
    *found = 0;
    for (size_t i = 0; i < count; i++) {
        bool one;
        if (oq_ledger_add_to_balance(self, customers[i], points[i], &one, error) < 0)
            return -1;
        *found += one;
    }
    return 0;
}

int oq_ledger_find_grant(oq_ledger_t *self, oq_ledger_grant_t *grant, bool *found,
                         oq_pg_error_t *error)
{
    assert(self && grant && grant->reason && found && error);
    oq_pg_errors_clear(error);
    return self->ops->find_grant(self->impl, grant, found, error);
}

int oq_ledger_get_balance(oq_ledger_t *self, int64_t customer_id, int64_t *balance, bool *found,
                          oq_pg_error_t *error)
{
    assert(self && balance && found && error);
    oq_pg_errors_clear(error);
    return self->ops->get_balance(self->impl, customer_id, balance, found, error);
}

int oq_ledger_add_customer(oq_ledger_t *self, int64_t customer_id, int64_t balance, bool *created,
                           oq_pg_error_t *error)
{
    assert(self && created && error);
    oq_pg_errors_clear(error);
    return self->ops->add_customer(self->impl, customer_id, balance, created, error);
}
