/*  test_outage: the database goes away, and no job pays for it.

    - An outage longer than the jobs' tries × backoff: the test's own
      PostgreSQL is stopped (pg_ctl stop -m fast) while grants keep being
      dispatched, and started again after tries × backoff plus a margin.
      No job fails, none uses a try, every effect is exact (each balance is
      the sum of its grants, one grant row per order), and while the
      database is down the broker's stats show the workers paused, with the
      error that paused them.
    - More worker processes than the server has connection slots: those
      refused with 53300 pause instead of failing jobs, the others do the
      work, every effect is exact; once the load is over the idle workers
      release their connections and the paused ones get theirs.

    - One connection per worker process: a worker that runs both of
      onceq-worker's database handlers (grant_points, request_shipment)
      holds one connection, not one per handler.

    Each test has a cluster of its own (deploy/pg.sh, in its temp dir),
    made by its setup and stopped by its teardown, which cmocka runs also
    when the test fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <signal.h>

#include "harness.h"
#include "payloads.h"
#include "support.h"

#define S_CUSTOMERS 20
#define S_TRIES     3
#define S_BACKOFF_S 1
/* Longer than tries × backoff (3 s), with a margin: every job dispatched
   just before the stop would have failed three times over. */
#define S_OUTAGE_MS 8000
/* Grants dispatched per second while the database is down. */
#define S_OUTAGE_RATE 10
#define S_POLL_MS     20

/* What these tests read from stats beyond it_stats: the pauses. */
typedef struct {
    uint64_t done, failed, retried, returned, ready, delayed, leased;
    uint64_t workers, unavailable;
    char error[OQ_MAX_ERROR_LEN + 1]; /* of one paused worker */
} s_view_t;

static uint64_t s_u64(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

static int s_view(it_t *it, s_view_t *v)
{
    memset(v, 0, sizeof *v);
    oq_msg_t reply;
    if (it_stats_reply(it, &reply, 5000) < 0)
        return -1;
    const msgpack_object *queues = oq_proto_map_get(&reply.root, "queues");
    for (uint32_t i = 0; queues && i < queues->via.array.size; i++) {
        const msgpack_object *q = &queues->via.array.ptr[i];
        v->done += s_u64(q, "done");
        v->failed += s_u64(q, "failed");
        v->retried += s_u64(q, "retried");
        v->returned += s_u64(q, "returned");
        v->ready += s_u64(q, "ready");
        v->delayed += s_u64(q, "delayed");
        v->leased += s_u64(q, "leased");
    }
    const msgpack_object *broker = oq_proto_map_get(&reply.root, "broker");
    v->workers = s_u64(broker, "workers");
    v->unavailable = s_u64(broker, "workers_unavailable");
    const msgpack_object *workers = oq_proto_map_get(&reply.root, "workers");
    for (uint32_t i = 0; workers && i < workers->via.array.size; i++) {
        const msgpack_object *state = oq_proto_map_get(&workers->via.array.ptr[i], "state");
        const msgpack_object *error = oq_proto_map_get(&workers->via.array.ptr[i], "error");
        if (state && state->type == MSGPACK_OBJECT_STR &&
            oq_str_eq((oq_str_t){state->via.str.ptr, state->via.str.size}, "unavailable") &&
            error && error->type == MSGPACK_OBJECT_STR)
            oq_str_copy((oq_str_t){error->via.str.ptr, error->via.str.size}, v->error,
                        sizeof v->error);
    }
    oq_proto_msg_release(&reply);
    return 0;
}

typedef bool (*s_cond_t)(const s_view_t *v, uint64_t arg);

/* Poll stats until cond holds; false after timeout_ms. */
static bool s_wait(it_t *it, s_cond_t cond, uint64_t arg, int timeout_ms, s_view_t *v)
{
    int64_t end = it_now_ms() + timeout_ms;
    for (;;) {
        if (s_view(it, v) == 0 && cond(v, arg))
            return true;
        if (it_now_ms() > end)
            return false;
        oq_support_sleep_ms(S_POLL_MS);
    }
}

static bool s_workers(const s_view_t *v, uint64_t n)
{
    return v->workers == n;
}

static bool s_done(const s_view_t *v, uint64_t n)
{
    return v->done >= n;
}

static bool s_paused(const s_view_t *v, uint64_t n)
{
    return v->unavailable >= n;
}

static bool s_all_ready(const s_view_t *v, uint64_t workers)
{
    return v->workers == workers && v->unavailable == 0;
}

/* Customers 1..S_CUSTOMERS at 0, no grants. */
static void s_customers(it_t *it)
{
    it_sql(it, "TRUNCATE point_grants, point_balances");
    char sql[160];
    snprintf(sql, sizeof sql,
             "INSERT INTO point_balances (customer_id, balance) "
             "SELECT g, 0 FROM generate_series(1, %d) g",
             S_CUSTOMERS);
    it_sql(it, sql);
}

/* Grant order's points to a customer derived from it: 3 tries, 1 s
   backoff. Returns the points. */
static uint64_t s_grant(it_t *it, uint64_t order)
{
    uint64_t customer = 1 + order % S_CUSTOMERS, points = 1 + order % 7;
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_payload_grant(&buf, order, customer, points);
    oq_job_msg_t options = {.max_tries = S_TRIES,
                            .has_max_tries = true,
                            .backoff_ms = {S_BACKOFF_S * 1000},
                            .backoff_len = 1};
    uint64_t id = it_dispatch(it, "grant_points", &buf, &options);
    msgpack_sbuffer_destroy(&buf);
    assert_true(id > 0);
    return points;
}

/* Every effect exact: one grant row per order 1..orders, and the balances
   add up to the points granted. */
static void s_effects_exact(it_t *it, uint64_t orders, uint64_t points)
{
    char sql[200];
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM point_grants"), (int64_t)orders);
    assert_int_equal(it_sql_int(it, "SELECT count(DISTINCT order_id) FROM point_grants"),
                     (int64_t)orders);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM point_grants WHERE order_id < 1 OR order_id > %llu",
             (unsigned long long)orders);
    assert_int_equal(it_sql_int(it, sql), 0);
    assert_int_equal(it_sql_int(it, "SELECT coalesce(sum(balance), 0) FROM point_balances"),
                     (int64_t)points);
    assert_int_equal(it_sql_int(it, "SELECT coalesce(sum(points), 0) FROM point_grants"),
                     (int64_t)points);
    /* And per customer: the balance is the sum of its grants. */
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM point_balances b WHERE balance <> "
                                    "(SELECT coalesce(sum(points), 0) FROM point_grants g "
                                    "WHERE g.customer_id = b.customer_id)"),
                     0);
}

/* The database is stopped for longer than tries × backoff while grants keep
   coming: nothing fails, nothing uses a try, the pause shows in stats. */
/* A fixture with a cluster of its own, started with server_opts. */
static int s_setup_with(void **state, const char *name, const char *server_opts)
{
    it_t *it = it_new(name);
    if (!it)
        return -1;
    if (it_start_pg_with(it, server_opts) < 0) {
        it_destroy(&it); /* cmocka runs no teardown after a failed setup */
        return -1;
    }
    s_customers(it);
    *state = it;
    return 0;
}

static int s_setup_outage(void **state)
{
    return s_setup_with(state, "outage", NULL);
}

static void test_outage_longer_than_tries_fails_nothing(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    const char *flags[] = {"--processes", "4", NULL};
    assert_true(it_start_worker(it, "workers", flags) > 0);
    s_view_t v;
    assert_true(s_wait(it, s_workers, 4, IT_WAIT_MS, &v));

    uint64_t orders = 0, points = 0;
    for (int i = 0; i < 40; i++)
        points += s_grant(it, ++orders);
    assert_true(s_wait(it, s_done, orders, IT_WAIT_MS, &v));

    /* Down. Grants keep coming at S_OUTAGE_RATE a second. */
    assert_int_equal(it_stop_pg(it), 0);
    int64_t stopped = it_now_ms();
    bool seen_paused = false;
    char paused_error[OQ_MAX_ERROR_LEN + 1] = "";
    while (it_now_ms() - stopped < S_OUTAGE_MS) {
        points += s_grant(it, ++orders);
        if (!seen_paused && s_view(it, &v) == 0 && v.unavailable > 0) {
            seen_paused = true;
            snprintf(paused_error, sizeof paused_error, "%s", v.error);
        }
        oq_support_sleep_ms(1000 / S_OUTAGE_RATE);
    }
    /* The pause is visible while the database is down, with its cause;
       every worker has met the outage by now (jobs kept coming). */
    assert_true(s_wait(it, s_paused, 4, IT_WAIT_MS, &v));
    seen_paused = true;
    if (!paused_error[0])
        snprintf(paused_error, sizeof paused_error, "%s", v.error);
    assert_non_null(strstr(paused_error, "database"));
    assert_int_equal(v.failed, 0);
    assert_true(v.returned > 0);

    /* Up again: everything dispatched gets done. */
    assert_int_equal(it_restart_pg(it), 0);
    assert_true(s_wait(it, s_done, orders, IT_WAIT_MS, &v));
    assert_true(s_wait(it, s_all_ready, 4, IT_WAIT_MS, &v));
    assert_int_equal(v.done, orders);
    assert_int_equal(v.failed, 0);
    assert_int_equal(v.retried, 0); /* no job used a try for the outage */
    s_effects_exact(it, orders, points);
}

/* 12 worker processes, 7 connection slots (max_connections 8, none kept
   for superusers, one held by the test itself). */
#define S_SLOTS_WORKERS "12"
#define S_SLOTS_JOBS    240

static int s_setup_slots(void **state)
{
    return s_setup_with(state, "slots", "-c max_connections=8 -c superuser_reserved_connections=0");
}

static void test_more_workers_than_connections_fails_nothing(void **state)
{
    it_t *it = *state;
    assert_int_equal(it_sql_int(it, "SELECT current_setting('max_connections')::int"), 8);
    assert_true(it_start_broker(it, NULL) > 0);
    const char *flags[] = {"--processes", S_SLOTS_WORKERS, "--idle-release", "1", NULL};
    assert_true(it_start_worker(it, "workers", flags) > 0);
    s_view_t v;
    assert_true(s_wait(it, s_workers, 12, IT_WAIT_MS, &v));

    uint64_t points = 0;
    for (uint64_t order = 1; order <= S_SLOTS_JOBS; order++)
        points += s_grant(it, order);
    /* Some workers were refused a connection: they pause, with 53300 in
       their error, and fail nothing. */
    assert_true(s_wait(it, s_paused, 1, IT_WAIT_MS, &v));
    assert_non_null(strstr(v.error, "53300"));
    assert_true(s_wait(it, s_done, S_SLOTS_JOBS, IT_WAIT_MS, &v));
    assert_int_equal(v.failed, 0);
    assert_int_equal(v.retried, 0);
    assert_true(v.returned > 0);
    s_effects_exact(it, S_SLOTS_JOBS, points);

    /* Idle now: the connected workers release their connections, the
       paused ones' probes get slots and they take jobs again; in the end
       every worker is ready and, idle, holds no connection. */
    assert_true(s_wait(it, s_all_ready, 12, IT_WAIT_MS, &v));
    int64_t end = it_now_ms() + IT_WAIT_MS;
    while (it_sql_int(it, "SELECT count(*) FROM pg_stat_activity "
                          "WHERE application_name = 'onceq-worker'") > 0 &&
           it_now_ms() < end)
        oq_support_sleep_ms(100);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM pg_stat_activity "
                                    "WHERE application_name = 'onceq-worker'"),
                     0);
}

static int s_setup_one_connection(void **state)
{
    return s_setup_with(state, "one-connection", NULL);
}

static void test_one_connection_per_worker_process(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    /* Nothing listens at the carrier's URL: request_shipment still writes
       its record before and after the call, on the database. Idle
       connections are kept, so the count is what the jobs opened. */
    const char *flags[] = {"--carrier-url", "http://127.0.0.1:1", "--idle-release", "0", NULL};
    assert_true(it_start_worker(it, "worker", flags) > 0);
    s_view_t v;
    assert_true(s_wait(it, s_workers, 1, IT_WAIT_MS, &v));

    uint64_t points = s_grant(it, 1);
    assert_true(s_wait(it, s_done, 1, IT_WAIT_MS, &v));
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_payload_shipment(&buf, 42, "1 Quay Street", "MUG-1", 2);
    oq_job_msg_t options = {.max_tries = 1, .has_max_tries = true};
    assert_true(it_dispatch(it, "request_shipment", &buf, &options) > 0);
    msgpack_sbuffer_destroy(&buf);
    assert_int_equal(it_wait_log(it, "worker", "type=request_shipment", 1, IT_WAIT_MS), 0);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM shipment_requests WHERE order_id = 42"),
                     1);
    assert_int_equal(it_sql_int(it, "SELECT count(*) FROM pg_stat_activity "
                                    "WHERE application_name = 'onceq-worker'"),
                     1);
    s_effects_exact(it, 1, points);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_outage_longer_than_tries_fails_nothing, s_setup_outage,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_more_workers_than_connections_fails_nothing,
                                        s_setup_slots, it_teardown),
        cmocka_unit_test_setup_teardown(test_one_connection_per_worker_process,
                                        s_setup_one_connection, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
