/*  ledger_pg.c: the point ledger in PostgreSQL.

    The guard is the table's UNIQUE (order_id, reason): the INSERT says
    ON CONFLICT DO NOTHING, and the number of rows it reports (1 or 0) is
    the answer to "is this the first time?". Under READ COMMITTED an INSERT
    that meets a concurrent, uncommitted row with the same key waits for
    that transaction and then reports 0 if it committed; under REPEATABLE
    READ and SERIALIZABLE a conflict with a row the snapshot cannot see is a
    serialization failure, which the runner re-runs with a fresh snapshot.
    Either way, two runs of one grant never both see 1. */
#include "points/ledger_pg.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An int64 as text: sign and 19 digits. */
#define S_INT_TEXT_LEN 21
/* foreign_key_violation: point_grants.customer_id has no balance row. */
#define S_SQLSTATE_FOREIGN_KEY "23503"

#define S_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct {
    char text[S_INT_TEXT_LEN];
} s_int_t;

static s_int_t s_int(int64_t value)
{
    s_int_t out;
    snprintf(out.text, sizeof out.text, "%" PRId64, value);
    return out;
}

/* Rows a command touched, from its tag ("INSERT 0 1", "UPDATE 0"). */
static long s_rows(const PGresult *res)
{
    return strtol(PQcmdTuples((PGresult *)res), NULL, 10);
}

/* Column col of a row as an int64. 0, or -1 with error if it is not one. */
static int s_get_int_at(const PGresult *res, int row, int col, int64_t *out, oq_pg_error_t *error)
{
    const char *text = PQgetvalue(res, row, col);
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "the database returned \"%s\" where a whole number was expected", text);
        return -1;
    }
    *out = v;
    return 0;
}

/* Column col of row 0 as an int64. */
static int s_get_int(const PGresult *res, int col, int64_t *out, oq_pg_error_t *error)
{
    return s_get_int_at(res, 0, col, out, error);
}

static int s_insert_grant(void *impl, const oq_ledger_grant_t *grant, oq_ledger_insert_t *outcome,
                          oq_pg_error_t *error)
{
    s_int_t order = s_int(grant->order_id), customer = s_int(grant->customer_id),
            points = s_int(grant->points);
    const char *params[] = {order.text, grant->reason, customer.text, points.text};
    PGresult *res;
    if (oq_pg_exec(impl,
                   "INSERT INTO point_grants (order_id, reason, customer_id, points) "
                   "VALUES ($1, $2, $3, $4) ON CONFLICT (order_id, reason) DO NOTHING",
                   S_COUNT(params), params, &res, error) < 0) {
        /* The foreign key to point_balances refuses a grant for a customer
           without a balance row: an answer about the data. The
           transaction is aborted now; the caller rolls it back. */
        if (strcmp(error->sqlstate, S_SQLSTATE_FOREIGN_KEY) == 0) {
            oq_pg_errors_clear(error);
            *outcome = OQ_LEDGER_NO_CUSTOMER;
            return 0;
        }
        return -1;
    }
    *outcome = s_rows(res) == 1 ? OQ_LEDGER_INSERTED : OQ_LEDGER_EXISTS;
    PQclear(res);
    return 0;
}

/* A growing text buffer for array literals. */
typedef struct {
    char *text;
    size_t len, cap;
} s_buf_t;

static void s_buf_add(s_buf_t *b, const char *text, size_t len)
{
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + len + 1 > cap)
            cap *= 2;
        b->text = realloc(b->text, cap);
        assert(b->text);
        b->cap = cap;
    }
    memcpy(b->text + b->len, text, len);
    b->len += len;
    b->text[b->len] = 0;
}

/* The array literals of the grants' columns, as bound parameters:
   "{1,2}" for the numbers; each reason in double quotes with its quotes
   and backslashes escaped, so that no reason can end an element early. */
static void s_arrays(const oq_ledger_grant_t *grants, size_t count, s_buf_t *orders,
                     s_buf_t *reasons, s_buf_t *customers, s_buf_t *points)
{
    s_buf_t *all[] = {orders, reasons, customers, points};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        s_buf_add(all[k], "{", 1);
    for (size_t i = 0; i < count; i++) {
        const char *sep = i ? "," : "";
        s_int_t o = s_int(grants[i].order_id), c = s_int(grants[i].customer_id),
                p = s_int(grants[i].points);
        s_buf_add(orders, sep, strlen(sep));
        s_buf_add(orders, o.text, strlen(o.text));
        s_buf_add(customers, sep, strlen(sep));
        s_buf_add(customers, c.text, strlen(c.text));
        s_buf_add(points, sep, strlen(sep));
        s_buf_add(points, p.text, strlen(p.text));
        s_buf_add(reasons, sep, strlen(sep));
        s_buf_add(reasons, "\"", 1);
        for (const char *r = grants[i].reason; *r; r++) {
            if (*r == '"' || *r == '\\')
                s_buf_add(reasons, "\\", 1);
            s_buf_add(reasons, r, 1);
        }
        s_buf_add(reasons, "\"", 1);
    }
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        s_buf_add(all[k], "}", 1);
}

/* An array literal of numbers, "{1,2}". */
static void s_int_array(const int64_t *values, size_t count, s_buf_t *out)
{
    s_buf_add(out, "{", 1);
    for (size_t i = 0; i < count; i++) {
        s_int_t v = s_int(values[i]);
        if (i)
            s_buf_add(out, ",", 1);
        s_buf_add(out, v.text, strlen(v.text));
    }
    s_buf_add(out, "}", 1);
}

/* Why two statements: an UPDATE ... FROM a list locks its rows in the
   order its join happens to visit them, which two batches need not share.
   SELECT ... ORDER BY ... FOR NO KEY UPDATE locks them in customer order
   first (the lock is taken on each row as the sort hands it over, the
   lock an UPDATE of a non-key column takes); the UPDATE then finds them
   locked by its own transaction. One customer needs no ordering. */
static int s_add_to_balances(void *impl, const int64_t *customers, const int64_t *points,
                             size_t count, size_t *found, oq_pg_error_t *error)
{
    s_buf_t ids = {0}, amounts = {0};
    s_int_array(customers, count, &ids);
    s_int_array(points, count, &amounts);
    const char *params[] = {ids.text, amounts.text};
    PGresult *res = NULL;
    int rc = 0;
    if (count > 1)
        rc = oq_pg_exec(impl,
                        "SELECT 1 FROM point_balances WHERE customer_id = ANY($1::bigint[]) "
                        "ORDER BY customer_id FOR NO KEY UPDATE",
                        1, params, NULL, error);
    if (rc == 0)
        rc = oq_pg_exec(impl,
                        "UPDATE point_balances b SET balance = b.balance + d.points "
                        "FROM unnest($1::bigint[], $2::bigint[]) AS d(customer_id, points) "
                        "WHERE b.customer_id = d.customer_id",
                        S_COUNT(params), params, &res, error);
    free(ids.text);
    free(amounts.text);
    if (rc < 0)
        return -1;
    *found = (size_t)s_rows(res);
    PQclear(res);
    return 0;
}

/* Why INSERT ... SELECT FROM unnest: one statement of fixed text for any
   number of grants, the values bound as four array parameters, never
   spliced into the SQL. WITH ORDINALITY and ORDER BY keep the rows in the
   order given, which is the order their keys are taken in: the use case
   sorts them so that two batches take their keys in the same order. */
static int s_insert_grants(void *impl, const oq_ledger_grant_t *grants, size_t count,
                           bool *inserted, oq_pg_error_t *error)
{
    s_buf_t orders = {0}, reasons = {0}, customers = {0}, points = {0};
    s_arrays(grants, count, &orders, &reasons, &customers, &points);
    const char *params[] = {orders.text, reasons.text, customers.text, points.text};
    PGresult *res = NULL;
    int rc = oq_pg_exec(impl,
                        "INSERT INTO point_grants (order_id, reason, customer_id, points) "
                        "SELECT g.order_id, g.reason, g.customer_id, g.points "
                        "FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::integer[]) "
                        "WITH ORDINALITY AS g(order_id, reason, customer_id, points, n) "
                        "ORDER BY g.n "
                        "ON CONFLICT (order_id, reason) DO NOTHING "
                        "RETURNING order_id, reason",
                        S_COUNT(params), params, &res, error);
    free(orders.text);
    free(reasons.text);
    free(customers.text);
    free(points.text);
    if (rc < 0)
        return -1;
    for (size_t i = 0; i < count; i++)
        inserted[i] = false;
    /* A returned key belongs to the first grant with that key: of two,
       the second met the first's row. */
    for (int row = 0; row < PQntuples(res) && rc == 0; row++) {
        int64_t order;
        if (s_get_int_at(res, row, 0, &order, error) < 0) {
            rc = -1;
            break;
        }
        const char *reason = PQgetvalue(res, row, 1);
        size_t i = 0;
        while (i < count && (inserted[i] || grants[i].order_id != order ||
                             strcmp(grants[i].reason, reason) != 0))
            i++;
        if (i == count) {
            oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                             "the database returned a grant for order %" PRId64
                             " that was not asked for",
                             order);
            rc = -1;
            break;
        }
        inserted[i] = true;
    }
    PQclear(res);
    return rc;
}

static int s_add_to_balance(void *impl, int64_t customer_id, int64_t points, bool *found,
                            oq_pg_error_t *error)
{
    s_int_t customer = s_int(customer_id), amount = s_int(points);
    const char *params[] = {customer.text, amount.text};
    PGresult *res;
    if (oq_pg_exec(impl, "UPDATE point_balances SET balance = balance + $2 WHERE customer_id = $1",
                   S_COUNT(params), params, &res, error) < 0)
        return -1;
    *found = s_rows(res) == 1;
    PQclear(res);
    return 0;
}

static int s_find_grant(void *impl, oq_ledger_grant_t *grant, bool *found, oq_pg_error_t *error)
{
    s_int_t order = s_int(grant->order_id);
    const char *params[] = {order.text, grant->reason};
    PGresult *res;
    if (oq_pg_exec(impl,
                   "SELECT customer_id, points FROM point_grants "
                   "WHERE order_id = $1 AND reason = $2",
                   S_COUNT(params), params, &res, error) < 0)
        return -1;
    *found = PQntuples(res) == 1;
    int rc = 0;
    if (*found && (s_get_int(res, 0, &grant->customer_id, error) < 0 ||
                   s_get_int(res, 1, &grant->points, error) < 0))
        rc = -1;
    PQclear(res);
    return rc;
}

static int s_get_balance(void *impl, int64_t customer_id, int64_t *balance, bool *found,
                         oq_pg_error_t *error)
{
    s_int_t customer = s_int(customer_id);
    const char *params[] = {customer.text};
    PGresult *res;
    if (oq_pg_exec(impl, "SELECT balance FROM point_balances WHERE customer_id = $1",
                   S_COUNT(params), params, &res, error) < 0)
        return -1;
    *found = PQntuples(res) == 1;
    int rc = *found ? s_get_int(res, 0, balance, error) : 0;
    PQclear(res);
    return rc;
}

static int s_add_customer(void *impl, int64_t customer_id, int64_t balance, bool *created,
                          oq_pg_error_t *error)
{
    s_int_t customer = s_int(customer_id), amount = s_int(balance);
    const char *params[] = {customer.text, amount.text};
    PGresult *res;
    if (oq_pg_exec(impl,
                   "INSERT INTO point_balances (customer_id, balance) VALUES ($1, $2) "
                   "ON CONFLICT (customer_id) DO NOTHING",
                   S_COUNT(params), params, &res, error) < 0)
        return -1;
    *created = s_rows(res) == 1;
    PQclear(res);
    return 0;
}

oq_ledger_t *oq_ledger_pg_new(oq_pg_t *pg)
{
    assert(pg);
    /* No destroy: the ledger borrows the connection. */
    static const oq_ledger_ops_t ops = {
        .insert_grant = s_insert_grant,
        .insert_grants = s_insert_grants,
        .add_to_balance = s_add_to_balance,
        .add_to_balances = s_add_to_balances,
        .find_grant = s_find_grant,
        .get_balance = s_get_balance,
        .add_customer = s_add_customer,
        .destroy = NULL,
    };
    return oq_ledger_new(&ops, pg);
}
