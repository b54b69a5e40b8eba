/*  verdict.c: the database is read in two queries (the run's grant rows,
    the run's balances) and judged against the orders in memory, order by
    order and customer by customer; the broker in two requests (stats and
    the failed store). Per order the judgement needs its grant rows and
    whether a job of it failed; per customer the sum of its grant rows and
    what its orders imply: both arrays are indexed like the load's orders
    and customers. */
#include "verdict.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "chaos_limits.h"
#include "faults.h"

#define S_LINE_LEN     512
#define S_MAX_NOTES    32
#define S_GRANT_REASON "order_points" /* OQ_GRANT_REASON_ORDER of the worker */
#define S_MS_PER_S     1000.0
#define S_NUM_LEN      32
#define S_P50          0.5 /* the median of the kill-to-done times */
#define S_P90          0.9
#define S_DEATHS_NAMED 5 /* unexpected worker exits named in the notes */

/* What the failed store says of an order. */
enum { S_NOT_FAILED = 0, S_FAILED_WITH_REASON, S_FAILED_WITHOUT_REASON };

struct oq_verdict {
    size_t count;                                    /* violations */
    char lines[OQ_CHAOS_MAX_VIOLATIONS][S_LINE_LEN]; /* the first ones */
    size_t note_count;
    char notes[S_MAX_NOTES][S_LINE_LEN]; /* skipped faults, lower bounds, ... */
    uint8_t *failed;                     /* per order index: S_NOT_FAILED ... */
    size_t failed_len;                   /* orders the array covers */
    uint64_t failed_total;               /* jobs in the failed store */
    uint64_t failed_orders;              /* orders of ours that failed with a reason */
    /* the database's findings, for the table */
    bool db_read;                                               /* the rows below are known */
    uint64_t grant_rows, granted_orders, double_granted_orders; /* rows; orders with >= 1, > 1 */
    uint64_t missing;                            /* confirmed, no grant, not failed */
    uint64_t optional_granted, optional_missing; /* unconfirmed orders */
    uint64_t customers_over, points_over;        /* balances above their grants */
    uint64_t customers_wrong;                    /* grant rows not as the orders imply */
    uint64_t leased_end;                         /* the run's queues at the end */

    /* the shipments */
    uint8_t *ship_failed; /* per order index: S_NOT_FAILED ... (the shipments' queue) */
    uint8_t *ship_review; /* per order index: S_NOT_FAILED ... of the review store */
    uint64_t ship_failed_total, review_total, review_listed;
    bool carrier_read;                                  /* the rows below are known */
    oq_carrier_totals_t carrier_totals;                 /* the carrier's POSTs by outcome */
    uint64_t shipments, shipped_orders, double_shipped; /* at the carrier */
    uint64_t requests_sum, requests_max, dropped_sum;   /* POSTs processed per key */
    uint64_t ship_missing;                              /* confirmed, no shipment, no review */
    uint64_t ship_in_review,
        ship_review_shipped;        /* confirmed orders in review: without, with one */
    uint64_t ship_failed_orders;    /* confirmed, no shipment, failed with a reason */
    uint64_t ship_optional_missing; /* unconfirmed, not shipped */
    bool rows_read;
    uint64_t rows_confirmed, rows_review, rows_failed, rows_requested, rows_wrong_reference;
};

oq_verdict_t *oq_verdict_new(void)
{
    oq_verdict_t *self = calloc(1, sizeof *self);
    assert(self);
    return self;
}

void oq_verdict_destroy(oq_verdict_t **self_p)
{
    assert(self_p);
    oq_verdict_t *self = *self_p;
    if (!self)
        return;
    free(self->failed);
    free(self->ship_failed);
    free(self->ship_review);
    free(self);
    *self_p = NULL;
}

void oq_verdict_violation(oq_verdict_t *self, const char *format, ...)
{
    if (self->count < OQ_CHAOS_MAX_VIOLATIONS) {
        va_list args;
        va_start(args, format);
        vsnprintf(self->lines[self->count], S_LINE_LEN, format, args);
        va_end(args);
    }
    self->count++;
}

void oq_verdict_note(oq_verdict_t *self, const char *format, ...)
{
    if (self->note_count == S_MAX_NOTES)
        return;
    va_list args;
    va_start(args, format);
    vsnprintf(self->notes[self->note_count++], S_LINE_LEN, format, args);
    va_end(args);
}

size_t oq_verdict_count(const oq_verdict_t *self)
{
    return self->count;
}

/* ---- the broker ------------------------------------------------------- */

typedef struct {
    oq_verdict_t *self;
    int64_t o_lo, o_hi;
    uint8_t *marks; /* per order index */
} s_failed_ctx_t;

/* Mark an order failed (or in review) with or without a reason. */
static void s_mark(s_failed_ctx_t *ctx, int64_t order_id, const char *why)
{
    if (order_id < ctx->o_lo || order_id > ctx->o_hi)
        return; /* another producer's job on the same queue */
    size_t index = (size_t)(order_id - ctx->o_lo);
    if (index >= ctx->self->failed_len)
        return;
    uint8_t *slot = &ctx->marks[index];
    if (why && *why)
        *slot = S_FAILED_WITH_REASON;
    else if (*slot == S_NOT_FAILED)
        *slot = S_FAILED_WITHOUT_REASON;
}

static void s_on_failed(void *arg, uint64_t job_id, int64_t order_id, const char *type,
                        const char *error)
{
    s_mark(arg, order_id, error);
}

static void s_on_review(void *arg, uint64_t job_id, int64_t order_id, const char *reason)
{
    s_mark(arg, order_id, reason);
}

/* The shipments' queue: still leased or waiting, its failed and review
   stores. 0 or -1 (a violation). */
static int s_check_ship_queue(oq_verdict_t *self, oq_observe_t *observe, const char *queue,
                              int64_t o_lo, int64_t o_hi)
{
    self->ship_failed = calloc(self->failed_len, 1);
    self->ship_review = calloc(self->failed_len, 1);
    assert(self->ship_failed && self->ship_review);
    uint64_t listed = 0;
    s_failed_ctx_t failed = {self, o_lo, o_hi, self->ship_failed};
    if (oq_observe_failed(observe, queue, s_on_failed, &failed, &self->ship_failed_total, &listed) <
        0) {
        oq_verdict_violation(self, "the broker did not answer the failed listing of %s: %s", queue,
                             oq_observe_error(observe));
        return -1;
    }
    if (self->ship_failed_total > listed)
        oq_verdict_note(self,
                        "the failed store of %s holds %" PRIu64 " jobs; the broker lists %" PRIu64
                        ", so orders among the rest count as missing",
                        queue, self->ship_failed_total, listed);
    s_failed_ctx_t review = {self, o_lo, o_hi, self->ship_review};
    if (oq_observe_review(observe, queue, s_on_review, &review, &self->review_total,
                          &self->review_listed) < 0) {
        oq_verdict_violation(self, "the broker did not answer the review listing of %s: %s", queue,
                             oq_observe_error(observe));
        return -1;
    }
    return 0;
}

int oq_verdict_check_broker(oq_verdict_t *self, oq_observe_t *observe, const oq_load_t *load,
                            bool settled, const char *queue, const char *ship_queue)
{
    int64_t c_lo, c_hi, o_lo, o_hi;
    oq_load_ranges(load, &c_lo, &c_hi, &o_lo, &o_hi);
    self->failed_len = (size_t)(o_hi - o_lo + 1);
    self->failed = calloc(self->failed_len, 1);
    assert(self->failed);

    oq_observe_stats_t *stats = malloc(sizeof *stats);
    assert(stats);
    int rc = oq_observe_stats(observe, stats);
    if (rc < 0) {
        oq_verdict_violation(self, "the broker did not answer stats at the end: %s",
                             oq_observe_error(observe));
    } else {
        self->leased_end = stats->leased + stats->ship_leased;
        if (stats->leased > 0)
            oq_verdict_violation(
                self, "%" PRIu64 " jobs of the run's queue still leased at the end", stats->leased);
        if (settled && stats->ready + stats->delayed > 0)
            oq_verdict_violation(
                self, "%" PRIu64 " ready and %" PRIu64 " delayed jobs left after the run settled",
                stats->ready, stats->delayed);
        if (stats->ship_leased > 0)
            oq_verdict_violation(self, "%" PRIu64 " shipment jobs still leased at the end",
                                 stats->ship_leased);
        if (settled && stats->ship_ready + stats->ship_delayed > 0)
            oq_verdict_violation(self,
                                 "%" PRIu64 " ready and %" PRIu64
                                 " delayed shipment jobs left after the run settled",
                                 stats->ship_ready, stats->ship_delayed);
    }
    free(stats);
    if (rc < 0)
        return -1;

    s_failed_ctx_t ctx = {self, o_lo, o_hi, self->failed};
    uint64_t listed = 0;
    if (oq_observe_failed(observe, queue, s_on_failed, &ctx, &self->failed_total, &listed) < 0) {
        oq_verdict_violation(self, "the broker did not answer the failed listing: %s",
                             oq_observe_error(observe));
        return -1;
    }
    if (self->failed_total > listed)
        oq_verdict_note(self,
                        "the failed store holds %" PRIu64 " jobs; the broker lists %" PRIu64
                        ", so orders among the rest count as missing",
                        self->failed_total, listed);
    return ship_queue ? s_check_ship_queue(self, observe, ship_queue, o_lo, o_hi) : 0;
}

/* ---- the database ----------------------------------------------------- */

/* Run sql with n int64 parameters. The caller clears the result. */
static PGresult *s_query(PGconn *db, const char *sql, int n, const int64_t *values)
{
    enum { S_MAX_PARAMS = 4 };
    assert(n <= S_MAX_PARAMS);
    char text[S_MAX_PARAMS][S_NUM_LEN];
    const char *params[S_MAX_PARAMS];
    for (int i = 0; i < n; i++) {
        snprintf(text[i], sizeof text[i], "%" PRId64, values[i]);
        params[i] = text[i];
    }
    return PQexecParams(db, sql, n, NULL, params, NULL, NULL, 0);
}

/* The rows: each grant of the run's orders or customers, judged alone;
   rows[i] counts the grant rows of order i, sums[c] the points of
   customer c's grant rows. */
static void s_judge_rows(oq_verdict_t *self, PGresult *res, const oq_load_t *load, int64_t c_lo,
                         int64_t c_hi, uint32_t *rows, int64_t *sums)
{
    int64_t o_lo, o_hi, unused_lo, unused_hi;
    oq_load_ranges(load, &unused_lo, &unused_hi, &o_lo, &o_hi);
    for (int r = 0; r < PQntuples(res); r++) {
        int64_t order_id = strtoll(PQgetvalue(res, r, 0), NULL, 10);
        int64_t customer_id = strtoll(PQgetvalue(res, r, 1), NULL, 10);
        int64_t points = strtoll(PQgetvalue(res, r, 2), NULL, 10);
        const char *reason = PQgetvalue(res, r, 3);
        self->grant_rows++;
        if (customer_id >= c_lo && customer_id <= c_hi)
            sums[customer_id - c_lo] += points;
        const oq_order_t *o = oq_load_find(load, order_id);
        if (!o || strcmp(reason, S_GRANT_REASON) != 0) {
            oq_verdict_violation(self,
                                 "a grant this run never asked for: order %" PRId64
                                 ", reason %s, customer %" PRId64 ", %" PRId64 " points",
                                 order_id, reason, customer_id, points);
            continue;
        }
        rows[order_id - o_lo]++;
        if (o->customer_id != customer_id || (int64_t)o->points != points)
            oq_verdict_violation(self,
                                 "order %" PRId64 " granted %" PRId64 " points to customer %" PRId64
                                 "; it was dispatched for %u points to customer %" PRId64,
                                 order_id, points, customer_id, o->points, o->customer_id);
    }
}

/* The orders: each one granted exactly once, or (confirmed or not) as the
   rules allow. implied[c] gets the points customer c's orders should have
   given. */
static void s_judge_orders(oq_verdict_t *self, const oq_load_t *load, int64_t c_lo,
                           const uint32_t *rows, int64_t *implied)
{
    for (size_t i = 0; i < oq_load_order_count(load); i++) {
        const oq_order_t *o = oq_load_order(load, i);
        if (!o->dispatches)
            continue;
        uint32_t n = rows[i];
        uint8_t failed = i < self->failed_len ? self->failed[i] : S_NOT_FAILED;
        if (n > 0) {
            self->granted_orders++;
            implied[o->customer_id - c_lo] += o->points;
            if (!o->confirmed)
                self->optional_granted++;
        }
        if (n > 1) {
            self->double_granted_orders++;
            oq_verdict_violation(self, "order %" PRId64 " has %u grant rows (a double grant)",
                                 o->order_id, n);
        }
        if (n > 0 || !o->confirmed) {
            self->optional_missing += n == 0;
            continue;
        }
        if (failed == S_FAILED_WITH_REASON) {
            self->failed_orders++;
        } else if (failed == S_FAILED_WITHOUT_REASON) {
            self->missing++;
            oq_verdict_violation(self, "order %" PRId64 " is in the failed store without a reason",
                                 o->order_id);
        } else {
            self->missing++;
            oq_verdict_violation(self,
                                 "order %" PRId64 " (job %" PRIu64 ") was confirmed by the "
                                 "broker (%u of %u dispatches) but has no grant and no job in "
                                 "the failed store",
                                 o->order_id, o->job_id, o->confirmed, o->dispatches);
        }
    }
}

/* The balances: equal to their grant rows, and to what the orders imply. */
static void s_judge_balances(oq_verdict_t *self, PGresult *res, int64_t c_lo, int64_t c_hi,
                             const int64_t *sums, const int64_t *implied)
{
    size_t customers = (size_t)(c_hi - c_lo + 1);
    uint8_t *seen = calloc(customers, 1);
    assert(seen);
    for (int r = 0; r < PQntuples(res); r++) {
        int64_t customer_id = strtoll(PQgetvalue(res, r, 0), NULL, 10);
        int64_t balance = strtoll(PQgetvalue(res, r, 1), NULL, 10);
        size_t c = (size_t)(customer_id - c_lo);
        seen[c] = 1;
        if (balance > sums[c]) {
            self->customers_over++;
            self->points_over += (uint64_t)(balance - sums[c]);
            oq_verdict_violation(self,
                                 "customer %" PRId64 ": balance %" PRId64 " is %" PRId64
                                 " points above the sum of its grant rows (%" PRId64
                                 "): points added twice for one order (double grant)",
                                 customer_id, balance, balance - sums[c], sums[c]);
        } else if (balance < sums[c]) {
            oq_verdict_violation(self,
                                 "customer %" PRId64 ": balance %" PRId64 " is %" PRId64
                                 " points below the sum of its grant rows (%" PRId64
                                 "): a grant without its points",
                                 customer_id, balance, sums[c] - balance, sums[c]);
        }
        /* Rows that no order explains were named one by one; this is the
           same fact per customer, so a balance is also checked against the
           orders and not only against rows that might themselves be wrong. */
        if (sums[c] != implied[c]) {
            self->customers_wrong++;
            oq_verdict_violation(self,
                                 "customer %" PRId64 ": grant rows sum to %" PRId64
                                 " points, the granted orders to %" PRId64,
                                 customer_id, sums[c], implied[c]);
        }
    }
    for (size_t c = 0; c < customers; c++)
        if (!seen[c])
            oq_verdict_violation(self, "customer %" PRId64 " has no balance row any more",
                                 c_lo + (int64_t)c);
    free(seen);
}

int oq_verdict_check_db(oq_verdict_t *self, PGconn *db, const oq_load_t *load, uint64_t applied)
{
    int64_t c_lo, c_hi, o_lo, o_hi;
    oq_load_ranges(load, &c_lo, &c_hi, &o_lo, &o_hi);
    const int64_t grant_range[] = {o_lo, o_hi, c_lo, c_hi};
    PGresult *grants = s_query(db,
                               "SELECT order_id, customer_id, points, reason FROM point_grants "
                               "WHERE order_id BETWEEN $1 AND $2 OR customer_id BETWEEN $3 AND $4",
                               4, grant_range);
    const int64_t customer_range[] = {c_lo, c_hi};
    PGresult *balances = s_query(db,
                                 "SELECT customer_id, balance FROM point_balances "
                                 "WHERE customer_id BETWEEN $1 AND $2",
                                 2, customer_range);
    if (PQresultStatus(grants) != PGRES_TUPLES_OK || PQresultStatus(balances) != PGRES_TUPLES_OK) {
        oq_verdict_violation(self, "the database could not be read: %s", PQerrorMessage(db));
        PQclear(grants);
        PQclear(balances);
        return -1;
    }
    self->db_read = true;
    size_t customers = (size_t)(c_hi - c_lo + 1), orders = (size_t)(o_hi - o_lo + 1);
    uint32_t *rows = calloc(orders, sizeof *rows);
    int64_t *sums = calloc(customers, sizeof *sums);
    int64_t *implied = calloc(customers, sizeof *implied);
    assert(rows && sums && implied);
    s_judge_rows(self, grants, load, c_lo, c_hi, rows, sums);
    s_judge_orders(self, load, c_lo, rows, implied);
    /* Each run that inserted a grant reports "applied"; at most one run per
       order can. More applied than orders granted is effects written twice. */
    if (applied != UINT64_MAX && applied > self->granted_orders)
        oq_verdict_violation(self,
                             "the broker counted %" PRIu64 " grants applied for %" PRIu64
                             " granted orders: %" PRIu64 " effects applied twice (double grants)",
                             applied, self->granted_orders, applied - self->granted_orders);
    s_judge_balances(self, balances, c_lo, c_hi, sums, implied);
    free(rows);
    free(sums);
    free(implied);
    PQclear(grants);
    PQclear(balances);
    return 0;
}

/* ---- the carrier ------------------------------------------------------ */

#define S_KEY_PREFIX  "shipment-request:" /* the handler's business key */
#define S_REF_PREFIX  "SHP-"              /* the carrier's references */
#define S_ADDRESS_LEN 64

typedef struct {
    oq_verdict_t *self;
    const oq_load_t *load;
    int64_t o_lo, o_hi;
    uint32_t *shipped;   /* per order index: shipments at the carrier */
    uint64_t *reference; /* per order index: the number of its (first) shipment's reference */
} s_carrier_ctx_t;

/* One shipment of GET /shipments, judged alone: an order of the run, its
   business key, its request; counted for its order. */
static void s_on_shipment(void *arg, const oq_carrier_shipment_t *sh)
{
    s_carrier_ctx_t *ctx = arg;
    oq_verdict_t *self = ctx->self;
    self->shipments++;
    self->requests_sum += sh->requests;
    self->dropped_sum += sh->dropped;
    if (sh->requests > self->requests_max)
        self->requests_max = sh->requests;
    const oq_order_t *o = oq_load_find(ctx->load, sh->order_id);
    if (!o || !o->ship_dispatches) {
        oq_verdict_violation(self,
                             "a shipment this run never asked for: %s, order %" PRId64 ", key %s",
                             sh->reference, sh->order_id, sh->key);
        return;
    }
    char key[S_LINE_LEN], address[S_ADDRESS_LEN];
    snprintf(key, sizeof key, S_KEY_PREFIX "%" PRId64, sh->order_id);
    if (strcmp(sh->key, key) != 0)
        oq_verdict_violation(self,
                             "shipment %s of order %" PRId64 " was made under the key %s, not the "
                             "business key %s",
                             sh->reference, sh->order_id, sh->key, key);
    oq_load_ship_address(sh->order_id, address, sizeof address);
    if (strcmp(sh->address, address) != 0)
        oq_verdict_violation(self,
                             "shipment %s of order %" PRId64 " is for \"%s\"; the order was "
                             "dispatched for \"%s\"",
                             sh->reference, sh->order_id, sh->address, address);
    size_t index = (size_t)(sh->order_id - ctx->o_lo);
    if (ctx->shipped[index]++ == 0) {
        if (strncmp(sh->reference, S_REF_PREFIX, strlen(S_REF_PREFIX)) == 0)
            ctx->reference[index] = strtoull(sh->reference + strlen(S_REF_PREFIX), NULL, 10);
    } else {
        oq_verdict_violation(self,
                             "order %" PRId64 " has %u shipments at the carrier (the latest %s "
                             "under key %s): more than one parcel for one order",
                             sh->order_id, ctx->shipped[index], sh->reference, sh->key);
    }
}

/* The orders: each with a confirmed request_shipment has exactly one
   shipment, or waits in review with a reason, or failed with one. */
static void s_judge_shipments(oq_verdict_t *self, const oq_load_t *load, const uint32_t *shipped)
{
    for (size_t i = 0; i < oq_load_order_count(load); i++) {
        const oq_order_t *o = oq_load_order(load, i);
        if (!o->ship_dispatches)
            continue;
        uint32_t n = shipped[i];
        uint8_t review = self->ship_review ? self->ship_review[i] : S_NOT_FAILED;
        uint8_t failed = self->ship_failed ? self->ship_failed[i] : S_NOT_FAILED;
        self->shipped_orders += n > 0;
        self->double_shipped += n > 1;
        if (review == S_FAILED_WITHOUT_REASON)
            oq_verdict_violation(self,
                                 "order %" PRId64 ": its shipment job waits in review without a "
                                 "reason",
                                 o->order_id);
        if (n > 0) {
            self->ship_review_shipped += review != S_NOT_FAILED && o->ship_confirmed;
            continue;
        }
        if (!o->ship_confirmed) {
            self->ship_optional_missing++;
            continue;
        }
        if (review == S_FAILED_WITH_REASON) {
            self->ship_in_review++;
        } else if (failed == S_FAILED_WITH_REASON) {
            self->ship_failed_orders++;
        } else {
            self->ship_missing++;
            oq_verdict_violation(self,
                                 "order %" PRId64 " (shipment job %" PRIu64
                                 ") was confirmed by the "
                                 "broker (%u of %u dispatches) but has no shipment at the carrier "
                                 "and no job in review%s",
                                 o->order_id, o->ship_job_id, o->ship_confirmed, o->ship_dispatches,
                                 failed == S_FAILED_WITHOUT_REASON ? " (it failed without a reason)"
                                                                   : " or in the failed store");
        }
    }
}

/* The handler's record: every confirmed row names the carrier's shipment
   of its order. */
static int s_judge_ship_rows(oq_verdict_t *self, PGconn *db, const oq_load_t *load, int64_t o_lo,
                             int64_t o_hi, const uint32_t *shipped, const uint64_t *reference)
{
    const int64_t range[] = {o_lo, o_hi};
    PGresult *res = s_query(db,
                            "SELECT order_id, status, coalesce(reference, '') FROM "
                            "shipment_requests WHERE order_id BETWEEN $1 AND $2",
                            2, range);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        oq_verdict_violation(self, "shipment_requests could not be read: %s", PQerrorMessage(db));
        PQclear(res);
        return -1;
    }
    self->rows_read = true;
    for (int r = 0; r < PQntuples(res); r++) {
        int64_t order_id = strtoll(PQgetvalue(res, r, 0), NULL, 10);
        const char *status = PQgetvalue(res, r, 1);
        const char *ref = PQgetvalue(res, r, 2);
        self->rows_confirmed += strcmp(status, "confirmed") == 0;
        self->rows_review += strcmp(status, "review") == 0;
        self->rows_failed += strcmp(status, "failed") == 0;
        self->rows_requested += strcmp(status, "requested") == 0;
        if (strcmp(status, "confirmed") != 0 || !oq_load_find(load, order_id))
            continue;
        size_t index = (size_t)(order_id - o_lo);
        uint64_t number = strncmp(ref, S_REF_PREFIX, strlen(S_REF_PREFIX)) == 0
                              ? strtoull(ref + strlen(S_REF_PREFIX), NULL, 10)
                              : 0;
        if (!shipped[index] || number != reference[index]) {
            self->rows_wrong_reference++;
            oq_verdict_violation(self,
                                 "order %" PRId64 ": its row is confirmed with %s, but the carrier "
                                 "%s",
                                 order_id, ref,
                                 shipped[index] ? "holds another shipment for it"
                                                : "has no shipment for it");
        }
    }
    PQclear(res);
    return 0;
}

int oq_verdict_check_carrier(oq_verdict_t *self, oq_carrier_client_t *carrier, PGconn *db,
                             const oq_load_t *load)
{
    int64_t c_lo, c_hi, o_lo, o_hi;
    oq_load_ranges(load, &c_lo, &c_hi, &o_lo, &o_hi);
    size_t orders = (size_t)(o_hi - o_lo + 1);
    uint32_t *shipped = calloc(orders, sizeof *shipped);
    uint64_t *reference = calloc(orders, sizeof *reference);
    assert(shipped && reference);
    s_carrier_ctx_t ctx = {self, load, o_lo, o_hi, shipped, reference};
    int rc = oq_carrier_client_shipments(carrier, s_on_shipment, &ctx, &self->carrier_totals);
    if (rc < 0) {
        oq_verdict_violation(self, "the carrier's shipments could not be read: %s",
                             oq_carrier_client_error(carrier));
    } else {
        self->carrier_read = true;
        s_judge_shipments(self, load, shipped);
        if (db)
            rc = s_judge_ship_rows(self, db, load, o_lo, o_hi, shipped, reference);
    }
    free(shipped);
    free(reference);
    return rc;
}

/* ---- the table -------------------------------------------------------- */

static int s_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted values. */
static int64_t s_percentile(const int64_t *sorted, size_t n, double p)
{
    size_t rank = (size_t)ceil(p * (double)n);
    return sorted[rank > 0 ? rank - 1 : 0];
}

static void s_row(FILE *out, const char *label, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void s_row(FILE *out, const char *label, const char *format, ...)
{
    char value[S_LINE_LEN];
    va_list args;
    va_start(args, format);
    vsnprintf(value, sizeof value, format, args);
    va_end(args);
    fprintf(out, "  %-50s %s\n", label, value);
}

/* What became of the job a kill took down: S_TIMED with the job and the
   time from the kill to its first completion after it; S_IDLE if the
   process held no job we know of; S_UNDONE if the job never completed. */
enum { S_TIMED = 0, S_IDLE, S_UNDONE };

static int s_kill_result(const oq_verdict_report_t *r, const oq_kill_t *kill, uint64_t *job,
                         int64_t *delay_ms)
{
    *job = kill->job_id;
    if (!*job && oq_worklog_held_job(r->worklog, kill->pid, kill->t_ms, job) < 0)
        return S_IDLE;
    int64_t done_ms;
    if (oq_worklog_done_after(r->worklog, *job, kill->t_ms, &done_ms) < 0)
        return S_UNDONE;
    *delay_ms = done_ms > kill->t_ms ? done_ms - kill->t_ms : 0;
    return S_TIMED;
}

/* Kill to completion of the job the killed process held, per kind of kill
   (OQ_FAULT_KIND_COUNT_: all kinds). */
static void s_kill_times(FILE *out, const oq_verdict_report_t *r, oq_fault_kind_t only,
                         const char *label)
{
    const oq_kill_t *kills;
    size_t n = oq_faults_kills(r->faults, &kills);
    int64_t *times = calloc(n ? n : 1, sizeof *times);
    assert(times);
    size_t timed = 0, idle = 0, unfinished = 0, of_kind = 0;
    for (size_t i = 0; i < n; i++) {
        if (only != OQ_FAULT_KIND_COUNT_ && kills[i].kind != only)
            continue;
        of_kind++;
        uint64_t job;
        int64_t delay_ms = 0;
        int result = s_kill_result(r, &kills[i], &job, &delay_ms);
        idle += result == S_IDLE;
        unfinished += result == S_UNDONE;
        if (result == S_TIMED)
            times[timed++] = delay_ms;
    }
    if (of_kind) {
        qsort(times, timed, sizeof *times, s_cmp_i64);
        char extra[S_LINE_LEN] = "";
        if (idle || unfinished)
            snprintf(extra, sizeof extra,
                     " (%zu held no grant we know of: between jobs or on a shipment; %zu never "
                     "done)",
                     idle, unfinished);
        if (timed)
            s_row(out, label, "%.2f / %.2f / %.2f s  (n=%zu)%s",
                  (double)s_percentile(times, timed, S_P50) / S_MS_PER_S,
                  (double)s_percentile(times, timed, S_P90) / S_MS_PER_S,
                  (double)times[timed - 1] / S_MS_PER_S, timed, extra);
        else
            s_row(out, label, "-%s", extra);
    }
    free(times);
}

/* Every kill on a line of its own, for a look at the tail: kind, pid, the
   kill's Unix ms, the job, the ms to its completion (-1: none). */
static void s_write_kills(const oq_verdict_report_t *r)
{
    const oq_kill_t *kills;
    size_t n = oq_faults_kills(r->faults, &kills);
    FILE *f = fopen(r->kills_path, "w");
    if (!f)
        return;
    fprintf(f, "# kind\tpid\tkill_unix_ms\tjob\tms_to_done\n");
    for (size_t i = 0; i < n; i++) {
        uint64_t job = 0;
        int64_t delay_ms = -1;
        s_kill_result(r, &kills[i], &job, &delay_ms);
        fprintf(f, "%s\t%d\t%" PRId64 "\t%" PRIu64 "\t%" PRId64 "\n",
                oq_schedule_kind_name(kills[i].kind), (int)kills[i].pid, kills[i].t_ms, job,
                delay_ms);
    }
    fclose(f);
}

/* Worker processes that ended though nobody asked them to: not a graceful
   stop (status 0), not one of our kills nor a self-kill hook (SIGKILL of a
   pid on the kill list). A watchdog exit (status 3) is a designed outcome,
   a crash is a bug; neither breaks exactly-once by itself, so they are
   reported, with the first few named in the notes, and not counted as
   violations. */
static size_t s_unexpected_deaths(oq_verdict_t *self, const oq_verdict_report_t *r)
{
    const oq_worklog_death_t *deaths;
    size_t n = oq_worklog_deaths(r->worklog, &deaths);
    const oq_kill_t *kills;
    size_t kill_count = oq_faults_kills(r->faults, &kills);
    size_t unexpected = 0;
    for (size_t i = 0; i < n; i++) {
        if (deaths[i].status == 0)
            continue;
        bool ours = false;
        for (size_t k = 0; k < kill_count && !ours; k++)
            ours = deaths[i].status == -SIGKILL && kills[k].pid == deaths[i].pid;
        if (ours)
            continue;
        if (unexpected++ < S_DEATHS_NAMED) {
            if (deaths[i].status > 0)
                oq_verdict_note(self,
                                "worker pid %d exited with status %d on its own (see "
                                "workers.log)",
                                (int)deaths[i].pid, deaths[i].status);
            else
                oq_verdict_note(self,
                                "worker pid %d was ended by signal %d, not by us (see "
                                "workers.log)",
                                (int)deaths[i].pid, -deaths[i].status);
        }
    }
    return unexpected;
}

static void s_print_faults(FILE *out, const oq_verdict_report_t *r)
{
    oq_faults_counts_t fc;
    oq_faults_counts(r->faults, &fc);
    uint32_t injected = 0;
    for (int k = 0; k < OQ_FAULT_KIND_COUNT_; k++)
        injected += fc.injected[k];
    s_row(out, "faults injected", "%u", injected);
    for (int k = 0; k < OQ_FAULT_KIND_COUNT_; k++) {
        uint32_t planned = oq_schedule_count_of(r->schedule, (oq_fault_kind_t)k);
        if (!planned)
            continue;
        char label[S_LINE_LEN], extra[S_LINE_LEN] = "";
        snprintf(label, sizeof label, "  %s", oq_schedule_kind_name((oq_fault_kind_t)k));
        if (fc.skipped[k] || fc.missed[k])
            snprintf(extra, sizeof extra, "  (%u skipped, %u missed)", fc.skipped[k], fc.missed[k]);
        if (k == OQ_FAULT_BURST && fc.strangers)
            s_row(out, label,
                  "%u of %u: %u messages, %u answered; %u pings without a key, %u answered%s",
                  fc.injected[k], planned, fc.burst_frames, fc.burst_answers, fc.strangers,
                  fc.stranger_answers, extra);
        else if (k == OQ_FAULT_BURST)
            s_row(out, label, "%u of %u: %u messages, %u answered%s", fc.injected[k], planned,
                  fc.burst_frames, fc.burst_answers, extra);
        else
            s_row(out, label, "%u of %u%s", fc.injected[k], planned, extra);
    }
}

/* The shipments' rows: what was asked, what the carrier holds, what is in
   review, how hard each key was tried. */
static void s_print_shipments(const oq_verdict_t *self, FILE *out, const oq_verdict_report_t *r)
{
    oq_load_counts_t lc;
    oq_load_counts(r->load, &lc);
    s_row(out, "shipment requests dispatched (request_shipment)", "%u", lc.ship_sent);
    s_row(out, "  confirmed / unconfirmed by the broker", "%u / %u%s", lc.ship_confirmed,
          lc.ship_unconfirmed, lc.ship_refused ? " (and some refused)" : "");
    s_row(out, "shipment duplicates absorbed (broker)", "%" PRIu64 "%s", r->totals->ship_duplicates,
          r->totals->lifetimes > 1 ? " (at least)" : "");
    if (!self->carrier_read)
        return;
    const oq_carrier_totals_t *t = &self->carrier_totals;
    s_row(out, "shipments at the carrier (its GET /shipments)",
          "%" PRIu64 " for %" PRIu64 " orders", self->shipments, self->shipped_orders);
    s_row(out, "orders with more than one shipment", "%" PRIu64, self->double_shipped);
    s_row(out, "carrier requests per key: max / mean", "%" PRIu64 " / %.2f", self->requests_max,
          self->shipments ? (double)self->requests_sum / (double)self->shipments : 0.0);
    s_row(out, "carrier POSTs: created / replayed / 422", "%" PRIu64 " / %" PRIu64 " / %" PRIu64,
          t->created, t->replayed, t->conflicts);
    s_row(out, "carrier POSTs: 503 injected / reply dropped", "%" PRIu64 " / %" PRIu64,
          t->injected_errors, t->dropped_replies);
    s_row(out, "confirmed orders in review, no shipment", "%" PRIu64, self->ship_in_review);
    s_row(out, "confirmed orders in review, shipment exists", "%" PRIu64,
          self->ship_review_shipped);
    s_row(out, "jobs in review (shipments' queue)", "%" PRIu64, self->review_total);
    s_row(out, "confirmed orders failed with a reason, no shipment", "%" PRIu64,
          self->ship_failed_orders);
    s_row(out, "unconfirmed shipment orders not shipped", "%" PRIu64, self->ship_optional_missing);
    s_row(out, "confirmed orders with no shipment and no review", "%" PRIu64, self->ship_missing);
    if (self->rows_read) {
        s_row(out, "shipment rows: confirmed/review/failed/requested",
              "%" PRIu64 " / %" PRIu64 " / %" PRIu64 " / %" PRIu64, self->rows_confirmed,
              self->rows_review, self->rows_failed, self->rows_requested);
        s_row(out, "confirmed rows not matching the carrier", "%" PRIu64,
              self->rows_wrong_reference);
    }
}

void oq_verdict_print(oq_verdict_t *self, FILE *out, const oq_verdict_report_t *r)
{
    oq_load_counts_t lc;
    oq_load_counts(r->load, &lc);
    size_t distinct = 0;
    for (size_t i = 0; i < oq_load_order_count(r->load); i++)
        distinct += oq_load_order(r->load, i)->dispatches > 0;

    fprintf(out, "\nonceq-chaos verdict (seed %" PRIu64 ", job type %s)\n", r->config->seed,
            r->config->job_type);
    s_row(out, "jobs dispatched", "%u", lc.sent);
    s_row(out, "  confirmed by the broker", "%u", lc.confirmed);
    s_row(out, "  unconfirmed (no answer: grant optional)", "%u", lc.unconfirmed);
    if (lc.late)
        s_row(out, "  given up on, then confirmed by a late answer", "%u", lc.late);
    if (lc.refused)
        s_row(out, "  refused by the broker", "%u (%s)", lc.refused, lc.refusal);
    s_row(out, "  re-dispatches of an earlier order", "%u", lc.redispatches);
    s_row(out, "  resent after a silence (same dispatch_id)", "%u", lc.resends);
    s_row(out, "distinct orders", "%zu", distinct);
    if (r->worklog)
        s_row(out, "deliveries (handler runs, worker log)", "%zu", oq_worklog_runs(r->worklog));
    s_row(out, "redeliveries (broker: lease ended, worker died)", "%" PRIu64 "%s",
          r->totals->redelivered, r->totals->lifetimes > 1 ? " (at least)" : "");
    s_row(out, "retries (broker: retry and timeout outcomes)", "%" PRIu64 "%s", r->totals->retried,
          r->totals->lifetimes > 1 ? " (at least)" : "");
    if (r->worklog)
        s_row(out, "duplicates absorbed by the UNIQUE (worker log)", "%zu",
              oq_worklog_already(r->worklog));
    s_row(out, "duplicates absorbed (broker: already_applied)", "%" PRIu64 "%s",
          r->totals->type_duplicates, r->totals->lifetimes > 1 ? " (at least)" : "");
    if (self->db_read) {
        s_row(out, "grant rows / orders granted", "%" PRIu64 " / %" PRIu64, self->grant_rows,
              self->granted_orders);
        s_row(out, "unconfirmed orders granted / not granted", "%" PRIu64 " / %" PRIu64,
              self->optional_granted, self->optional_missing);
        s_row(out, "orders with more than one grant row", "%" PRIu64, self->double_granted_orders);
        s_row(out, "balances above their grant rows (double grants)",
              "%" PRIu64 " (+%" PRIu64 " points)", self->customers_over, self->points_over);
    }
    s_row(out, "orders failed (in the failed store, with a reason)", "%" PRIu64,
          self->failed_orders);
    s_row(out, "confirmed orders missing their grant", "%" PRIu64, self->missing);
    if (oq_load_ships(r->load))
        s_print_shipments(self, out, r);
    s_row(out, "jobs leased at the end", "%" PRIu64, self->leased_end);
    s_row(out, "broker lifetimes", "%u", r->totals->lifetimes);
    if (r->worklog)
        s_row(out, "worker exits we did not cause", "%zu", s_unexpected_deaths(self, r));
    s_print_faults(out, r);
    const oq_kill_t *kills;
    if (r->worklog && oq_faults_kills(r->faults, &kills) > 0) {
        if (r->kills_path)
            s_write_kills(r);
        fprintf(out,
                "  kill -> that job done: p50 / p90 / max (heartbeat window %.2f s, "
                "retry_after %g s)\n",
                r->heartbeat_window_s, r->retry_after_s);
        s_kill_times(out, r, OQ_FAULT_KILL, "  mid-job SIGKILL");
        s_kill_times(out, r, OQ_FAULT_COMMIT_KILL, "  SIGKILL between COMMIT and ack");
        s_kill_times(out, r, OQ_FAULT_SELF_KILL, "  self-SIGKILL after COMMIT");
        s_kill_times(out, r, OQ_FAULT_KIND_COUNT_, "  all kills");
    }
    uint32_t jobs = lc.confirmed + lc.ship_confirmed;
    if (r->run_s > 0)
        s_row(out, "throughput (confirmed jobs / run time)", "%.1f jobs/s (%u in %.1f s%s)",
              jobs / r->run_s, jobs, r->run_s, r->settled ? "" : ", not settled");
    s_row(out, "violations", "%zu", self->count);

    for (size_t i = 0; i < self->note_count; i++)
        fprintf(out, "  note: %s\n", self->notes[i]);
    if (self->count) {
        fprintf(out, "\nviolations:\n");
        size_t shown =
            self->count < OQ_CHAOS_MAX_VIOLATIONS ? self->count : OQ_CHAOS_MAX_VIOLATIONS;
        for (size_t i = 0; i < shown; i++)
            fprintf(out, "  - %s\n", self->lines[i]);
        if (self->count > shown)
            fprintf(out, "  ... and %zu more\n", self->count - shown);
        fprintf(out, "\nFAIL: %zu violations of exactly-once effects or of the run's rules\n",
                self->count);
    } else {
        fprintf(out, "\nPASS: every confirmed order granted exactly once, every balance exact%s\n",
                oq_load_ships(r->load)
                    ? ",\n      one shipment per confirmed order at the carrier (or in review)"
                    : "");
    }
}
