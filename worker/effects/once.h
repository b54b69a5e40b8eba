/*  once.h: the once-guard's parts that the transaction runner dispatches to
    (oq_once itself is in txn.c, next to the runner state it checks). Inside
    libonceq-effects only. */
#ifndef ONCEQ_ONCE_H
#define ONCEQ_ONCE_H

#include "onceq/effects.h"

/* Not part of the library's interface: kept out of its exported symbols. */
#define OQ_EFFECTS_INTERNAL __attribute__((visibility("hidden")))

/* Check a guard's scope, key and job id against their bounds. 0, or -1
   with an OQ_PG_ERR_FAIL error naming the value. */
OQ_EFFECTS_INTERNAL int oq_once_check(const char *scope, const char *key, uint64_t job_id,
                                      oq_pg_error_t *error);

/* The PostgreSQL once op of oq_txn_pg_ops(): db is an oq_pg_t in a
   transaction. */
OQ_EFFECTS_INTERNAL int oq_once_pg(void *db, const char *scope, const char *key, uint64_t job_id,
                                   bool *applied, oq_pg_error_t *error);

#endif
