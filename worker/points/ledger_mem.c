/*  ledger_mem.c: the point ledger in memory. Linear arrays: a unit test
    holds a handful of rows. A transaction is a copy of both arrays taken at
    BEGIN and restored at ROLLBACK; there is only ever one, as there is only
    one connection per worker. */
#include "points/ledger_mem.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Longest reason kept; longer ones are refused like a too long value. */
#define S_REASON_LEN 64

/* The SQLSTATEs the schema's rules raise. */
#define S_SQLSTATE_OUT_OF_RANGE "22003" /* numeric_value_out_of_range */
#define S_SQLSTATE_TOO_LONG     "22001" /* string_data_right_truncation */
#define S_SQLSTATE_CHECK        "23514" /* check_violation */
#define S_SQLSTATE_FOREIGN_KEY  "23503" /* foreign_key_violation */

typedef struct {
    int64_t order_id;
    char reason[S_REASON_LEN + 1];
    int64_t customer_id;
    int64_t points;
} s_grant_t;

typedef struct {
    int64_t customer_id;
    int64_t balance;
} s_balance_t;

/* The data: both tables. */
typedef struct {
    s_grant_t *grants;
    size_t grant_count;
    s_balance_t *balances;
    size_t balance_count;
} s_tables_t;

typedef struct {
    bool armed;       /* times > 0 */
    bool lost;        /* a lost connection, not a SQLSTATE */
    char sqlstate[6]; /* when not lost */
    uint32_t times;   /* calls still to fail */
} s_fault_t;

struct oq_ledger_mem {
    oq_ledger_t *ledger; /* the interface over this */
    s_tables_t live;     /* what statements see and change */
    s_tables_t saved;    /* copy taken at BEGIN */
    bool in_txn;
    bool foreign_key; /* enforce grant.customer_id -> balance */
    s_fault_t faults[OQ_LEDGER_MEM_AT_COUNT_];
    uint32_t calls[OQ_LEDGER_MEM_AT_COUNT_];
};

static void s_tables_free(s_tables_t *t)
{
    free(t->grants);
    free(t->balances);
    memset(t, 0, sizeof *t);
}

static void s_tables_copy(s_tables_t *to, const s_tables_t *from)
{
    s_tables_free(to);
    to->grant_count = from->grant_count;
    to->balance_count = from->balance_count;
    to->grants = malloc((from->grant_count + 1) * sizeof *to->grants);
    to->balances = malloc((from->balance_count + 1) * sizeof *to->balances);
    assert(to->grants && to->balances);
    /* memcpy from NULL is undefined even for 0 bytes. */
    if (from->grant_count)
        memcpy(to->grants, from->grants, from->grant_count * sizeof *to->grants);
    if (from->balance_count)
        memcpy(to->balances, from->balances, from->balance_count * sizeof *to->balances);
}

/* A call at `at`: count it, and fail it if a fault is armed there. */
static int s_fault(oq_ledger_mem_t *self, oq_ledger_mem_at_t at, oq_pg_error_t *error)
{
    self->calls[at]++;
    s_fault_t *fault = &self->faults[at];
    if (!fault->armed)
        return 0;
    if (--fault->times == 0)
        fault->armed = false;
    bool in_commit = at == OQ_LEDGER_MEM_AT_COMMIT;
    if (fault->lost) {
        oq_pg_errors_set(error, oq_pg_errors_classify(NULL, false, in_commit), NULL,
                         "injected: server closed the connection unexpectedly");
    } else {
        oq_pg_errors_set(error, oq_pg_errors_classify(fault->sqlstate, true, in_commit),
                         fault->sqlstate, "injected: SQLSTATE %s", fault->sqlstate);
    }
    return -1;
}

static s_balance_t *s_balance(oq_ledger_mem_t *self, int64_t customer_id)
{
    for (size_t i = 0; i < self->live.balance_count; i++)
        if (self->live.balances[i].customer_id == customer_id)
            return &self->live.balances[i];
    return NULL;
}

static s_grant_t *s_grant(oq_ledger_mem_t *self, int64_t order_id, const char *reason)
{
    for (size_t i = 0; i < self->live.grant_count; i++)
        if (self->live.grants[i].order_id == order_id &&
            strcmp(self->live.grants[i].reason, reason) == 0)
            return &self->live.grants[i];
    return NULL;
}

/* ---- ledger ops ----------------------------------------------------- */

static int s_insert_grant(void *impl, const oq_ledger_grant_t *grant, oq_ledger_insert_t *outcome,
                          oq_pg_error_t *error)
{
    oq_ledger_mem_t *self = impl;
    if (s_fault(self, OQ_LEDGER_MEM_AT_INSERT_GRANT, error) < 0)
        return -1;
    if (strlen(grant->reason) > S_REASON_LEN) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, S_SQLSTATE_TOO_LONG, "reason too long");
        return -1;
    }
    if (grant->points <= 0) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, S_SQLSTATE_CHECK,
                         "new row violates check constraint \"point_grants_points_check\"");
        return -1;
    }
    if (s_grant(self, grant->order_id, grant->reason)) {
        *outcome = OQ_LEDGER_EXISTS;
        return 0;
    }
    if (self->foreign_key && !s_balance(self, grant->customer_id)) {
        *outcome = OQ_LEDGER_NO_CUSTOMER;
        return 0;
    }
    s_tables_t *t = &self->live;
    s_grant_t *grants = realloc(t->grants, (t->grant_count + 1) * sizeof *grants);
    assert(grants);
    t->grants = grants;
    s_grant_t *row = &grants[t->grant_count++];
    memset(row, 0, sizeof *row);
    row->order_id = grant->order_id;
    strcpy(row->reason, grant->reason); /* fits: checked above */
    row->customer_id = grant->customer_id;
    row->points = grant->points;
    *outcome = OQ_LEDGER_INSERTED;
    return 0;
}

static int s_add_to_balance(void *impl, int64_t customer_id, int64_t points, bool *found,
                            oq_pg_error_t *error)
{
    oq_ledger_mem_t *self = impl;
    if (s_fault(self, OQ_LEDGER_MEM_AT_ADD_TO_BALANCE, error) < 0)
        return -1;
    s_balance_t *row = s_balance(self, customer_id);
    *found = row != NULL;
    if (!row)
        return 0;
    int64_t sum;
    if (__builtin_add_overflow(row->balance, points, &sum)) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, S_SQLSTATE_OUT_OF_RANGE, "bigint out of range");
        return -1;
    }
    if (sum < 0) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, S_SQLSTATE_CHECK,
                         "new row violates check constraint \"point_balances_balance_check\"");
        return -1;
    }
    row->balance = sum;
    return 0;
}

static int s_find_grant(void *impl, oq_ledger_grant_t *grant, bool *found, oq_pg_error_t *error)
{
    const s_grant_t *row = s_grant(impl, grant->order_id, grant->reason);
    *found = row != NULL;
    if (row) {
        grant->customer_id = row->customer_id;
        grant->points = row->points;
    }
    return 0;
}

static int s_get_balance(void *impl, int64_t customer_id, int64_t *balance, bool *found,
                         oq_pg_error_t *error)
{
    const s_balance_t *row = s_balance(impl, customer_id);
    *found = row != NULL;
    if (row)
        *balance = row->balance;
    return 0;
}

static int s_add_customer(void *impl, int64_t customer_id, int64_t balance, bool *created,
                          oq_pg_error_t *error)
{
    oq_ledger_mem_t *self = impl;
    if (balance < 0) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, S_SQLSTATE_CHECK,
                         "new row violates check constraint \"point_balances_balance_check\"");
        return -1;
    }
    *created = s_balance(self, customer_id) == NULL;
    if (!*created)
        return 0;
    s_tables_t *t = &self->live;
    s_balance_t *balances = realloc(t->balances, (t->balance_count + 1) * sizeof *balances);
    assert(balances);
    t->balances = balances;
    balances[t->balance_count++] = (s_balance_t){customer_id, balance};
    return 0;
}

/* ---- transaction ops ------------------------------------------------ */

static int s_begin(void *db, oq_txn_isolation_t isolation, oq_pg_error_t *error)
{
    oq_ledger_mem_t *self = db;
    assert(!self->in_txn);
    if (s_fault(self, OQ_LEDGER_MEM_AT_BEGIN, error) < 0)
        return -1;
    s_tables_copy(&self->saved, &self->live);
    self->in_txn = true;
    return 0;
}

static void s_rollback(void *db)
{
    oq_ledger_mem_t *self = db;
    if (!self->in_txn)
        return;
    s_tables_free(&self->live);
    self->live = self->saved;
    memset(&self->saved, 0, sizeof self->saved);
    self->in_txn = false;
}

static int s_commit(void *db, oq_pg_error_t *error)
{
    oq_ledger_mem_t *self = db;
    assert(self->in_txn);
    const s_fault_t *fault = &self->faults[OQ_LEDGER_MEM_AT_COMMIT];
    bool lost_after_commit = fault->armed && fault->lost;
    if (!lost_after_commit && s_fault(self, OQ_LEDGER_MEM_AT_COMMIT, error) < 0) {
        /* An error answer to COMMIT: the server rolled back. */
        s_rollback(self);
        return -1;
    }
    s_tables_free(&self->saved);
    self->in_txn = false;
    /* The commit happened; the answer is what gets lost. */
    return lost_after_commit ? s_fault(self, OQ_LEDGER_MEM_AT_COMMIT, error) : 0;
}

/* ---- the module ------------------------------------------------------ */

oq_ledger_mem_t *oq_ledger_mem_new(void)
{
    static const oq_ledger_ops_t ops = {
        .insert_grant = s_insert_grant,
        .add_to_balance = s_add_to_balance,
        .find_grant = s_find_grant,
        .get_balance = s_get_balance,
        .add_customer = s_add_customer,
        .destroy = NULL, /* the ledger interface belongs to this object */
    };
    oq_ledger_mem_t *self = calloc(1, sizeof *self);
    assert(self);
    self->foreign_key = true;
    self->ledger = oq_ledger_new(&ops, self);
    return self;
}

void oq_ledger_mem_destroy(oq_ledger_mem_t **self_p)
{
    assert(self_p);
    oq_ledger_mem_t *self = *self_p;
    if (!self)
        return;
    oq_ledger_destroy(&self->ledger);
    s_tables_free(&self->live);
    s_tables_free(&self->saved);
    free(self);
    *self_p = NULL;
}

oq_ledger_t *oq_ledger_mem_ledger(oq_ledger_mem_t *self)
{
    assert(self);
    return self->ledger;
}

const oq_txn_ops_t *oq_ledger_mem_txn_ops(void)
{
    /* No once: the points domain guards with its own table. */
    static const oq_txn_ops_t ops = {.begin = s_begin, .commit = s_commit, .rollback = s_rollback};
    return &ops;
}

void oq_ledger_mem_set_foreign_key(oq_ledger_mem_t *self, bool enforce)
{
    assert(self);
    self->foreign_key = enforce;
}

void oq_ledger_mem_inject(oq_ledger_mem_t *self, oq_ledger_mem_at_t at, const char *sqlstate,
                          uint32_t times)
{
    assert(self);
    assert(at < OQ_LEDGER_MEM_AT_COUNT_);
    assert(!sqlstate || strlen(sqlstate) == sizeof self->faults[at].sqlstate - 1);
    s_fault_t *fault = &self->faults[at];
    memset(fault, 0, sizeof *fault);
    fault->armed = times > 0;
    fault->times = times;
    fault->lost = sqlstate == NULL;
    if (sqlstate)
        strcpy(fault->sqlstate, sqlstate);
}

uint32_t oq_ledger_mem_calls(const oq_ledger_mem_t *self, oq_ledger_mem_at_t at)
{
    assert(self);
    assert(at < OQ_LEDGER_MEM_AT_COUNT_);
    return self->calls[at];
}

size_t oq_ledger_mem_grant_count(const oq_ledger_mem_t *self)
{
    assert(self);
    return self->live.grant_count;
}

bool oq_ledger_mem_in_txn(const oq_ledger_mem_t *self)
{
    assert(self);
    return self->in_txn;
}
