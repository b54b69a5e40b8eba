/*  ledger_pg.h: the point ledger in PostgreSQL, over the tables of
    deploy/sql/0001_points.sql. Every statement binds its values as
    parameters. Run it inside a transaction of oq_txn_pg_ops() (or of an
    oq_effects_t) on the same connection. */
#ifndef ONCEQ_LEDGER_PG_H
#define ONCEQ_LEDGER_PG_H

#include "onceq/effects.h"
#include "points/ledger.h"

/* A ledger on pg (borrowed: it must outlive the ledger). */
oq_ledger_t *oq_ledger_pg_new(oq_pg_t *pg);

#endif
