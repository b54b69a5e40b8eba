/*  test_engine: the lease and redelivery state machine, driven by a clock
    the test moves by hand. No sockets and no sleeps: a lease "runs out"
    because the test says an hour passed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "engine.h"
#include "engine_fixture.h"
#include "onceq/keys.h"
#include "onceq/limits.h"

/* Why the engine refused a resolve (oq_engine_review_resolve). */
static oq_refusal_t s_why;

static uint64_t s_dispatch(ef_fixture_t *f, const char *type)
{
    oq_job_msg_t job = EF_JOB(.type = type);
    return ef_dispatch(f, &job);
}

/* flush and requeue_all that the observer never refuses: how many. */
static uint64_t s_flush(ef_fixture_t *f, const char *queue)
{
    uint64_t count = 0;
    assert_int_equal(oq_engine_flush_failed(f->engine, queue, &count), 0);
    return count;
}

static uint64_t s_requeue_all(ef_fixture_t *f, const char *queue)
{
    uint64_t count = 0;
    assert_int_equal(oq_engine_requeue_all(f->engine, queue, &count), 0);
    return count;
}

/* An ack echoing the token of that delivery, as a worker sends it. */
static oq_ack_effect_t s_ack(ef_fixture_t *f, oq_worker_t *w, uint64_t id, uint32_t attempt,
                             oq_outcome_t outcome, const char *error)
{
    oq_ack_msg_t ack = {.id = id,
                        .attempt = attempt,
                        .outcome = outcome,
                        .credit = 1,
                        .error = oq_str(error ? error : ""),
                        .lease = ef_lease(f, id, attempt),
                        .has_lease = true};
    return oq_engine_ack(f->engine, w, NULL, &ack);
}

static oq_queue_stats_t s_stats(ef_fixture_t *f)
{
    oq_queue_stats_t s;
    assert_int_equal(oq_engine_queue_count(f->engine), 1);
    oq_engine_queue_stats(f->engine, 0, &s);
    return s;
}

static void test_dispatch_deliver_ack(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "noop");
    assert_string_equal(oq_engine_job_state(f->engine, id), "ready");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[0].id, id);
    assert_int_equal(f->sent[0].attempt, 1);
    assert_string_equal(oq_engine_job_state(f->engine, id), "leased");
    assert_int_equal(oq_engine_next_deadline(f->engine), EF_RETRY_AFTER_MS);

    assert_int_equal(s_ack(f, a, id, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_APPLIED);
    assert_null(oq_engine_job_state(f->engine, id));
    oq_queue_stats_t s = s_stats(f);
    assert_int_equal(s.dispatched, 1);
    assert_int_equal(s.done, 1);
    assert_int_equal(s.leased + s.ready + s.delayed + s.failed, 0);
    assert_int_equal(oq_engine_next_deadline(f->engine), -1);
    assert_int_equal(oq_engine_job_count(f->engine), 0);
}

static void test_credit_limits_deliveries(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = s_dispatch(f, "noop");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);
    s_ack(f, a, ids[0], 1, OQ_OUTCOME_OK, NULL); /* returns one credit */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[1].id, ids[1]); /* FIFO */
    oq_engine_worker_credit(f->engine, a, 2);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 2);
    assert_int_equal(s_stats(f).leased, 3);
}

static void test_lease_expiry_redelivers_with_next_attempt(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "sleep");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    oq_worker_t *b = ef_worker(f, 'b', 0);
    oq_engine_pump(f->engine, ef_deliver, f);
    assert_int_equal(f->sent[0].worker, 'a');

    f->time.now = EF_RETRY_AFTER_MS - 1;
    assert_int_equal(oq_engine_tick(f->engine), 0);
    assert_string_equal(oq_engine_job_state(f->engine, id), "leased");
    f->time.now = EF_RETRY_AFTER_MS;
    assert_int_equal(oq_engine_tick(f->engine), 1);
    assert_string_equal(oq_engine_job_state(f->engine, id), "ready");

    oq_engine_worker_credit(f->engine, b, 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[1].worker, 'b');
    assert_int_equal(f->sent[1].attempt, 2);
    assert_int_equal(s_stats(f).redelivered, 1);

    /* The first worker wakes up and reports ok: the job is done, once. */
    assert_int_equal(s_ack(f, a, id, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_LATE);
    assert_null(oq_engine_job_state(f->engine, id));
    /* The second worker's ack finds nothing to do; its "already_applied"
       is still counted as a duplicate the unique guard absorbed. */
    oq_ack_msg_t second = {.id = id,
                           .attempt = 2,
                           .outcome = OQ_OUTCOME_OK,
                           .result = OQ_RESULT_ALREADY_APPLIED,
                           .credit = 1,
                           .lease = ef_lease(f, id, 2),
                           .has_lease = true};
    assert_int_equal(oq_engine_ack(f->engine, b, NULL, &second), OQ_ACK_IGNORED);
    oq_queue_stats_t s = s_stats(f);
    assert_int_equal(s.done, 1);
    assert_int_equal(s.late_acks, 1);
    assert_int_equal(s.ignored_acks, 1);
    assert_int_equal(s.duplicates, 1);
    assert_int_equal(oq_engine_unknown_acks(f->engine), 0);
    /* An id never issued is unknown. */
    assert_int_equal(s_ack(f, b, 999999, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_IGNORED);
    assert_int_equal(oq_engine_unknown_acks(f->engine), 1);
    assert_int_equal(s.leased, 0);
}

static void test_ok_ack_completes_job_waiting_for_redelivery(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "sleep");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    oq_engine_pump(f->engine, ef_deliver, f);
    f->time.now = EF_RETRY_AFTER_MS + 1;
    oq_engine_tick(f->engine);
    assert_string_equal(oq_engine_job_state(f->engine, id), "ready");
    assert_int_equal(s_ack(f, a, id, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_LATE);
    assert_null(oq_engine_job_state(f->engine, id));
    assert_int_equal(s_stats(f).ready, 0);
}

static void test_stale_retry_ack_is_ignored(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "sleep");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    oq_worker_t *b = ef_worker(f, 'b', 0);
    oq_engine_pump(f->engine, ef_deliver, f);
    f->time.now = EF_RETRY_AFTER_MS;
    oq_engine_tick(f->engine);
    oq_engine_worker_credit(f->engine, b, 1);
    oq_engine_pump(f->engine, ef_deliver, f);
    /* Attempt 1's failure report must not disturb attempt 2's lease. */
    assert_int_equal(s_ack(f, a, id, 1, OQ_OUTCOME_RETRY, "boom"), OQ_ACK_IGNORED);
    assert_string_equal(oq_engine_job_state(f->engine, id), "leased");
    assert_int_equal(s_stats(f).ignored_acks, 1);
}

static void test_dead_worker_gives_leases_back_at_once(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "sleep");
    ef_worker(f, 'a', 1);
    oq_engine_pump(f->engine, ef_deliver, f);
    oq_worker_t *b = ef_worker(f, 'b', 0);
    /* 'a' falls silent; 'b' keeps talking. Long before retry_after: */
    f->time.now = 3000;
    oq_engine_worker_seen(f->engine, b);
    assert_int_equal(oq_engine_reap_workers(f->engine, 2999), 1);
    assert_int_equal(oq_engine_worker_count(f->engine), 1);
    assert_string_equal(oq_engine_job_state(f->engine, id), "ready");
    oq_engine_worker_credit(f->engine, b, 1);
    oq_engine_pump(f->engine, ef_deliver, f);
    assert_int_equal(f->sent[1].worker, 'b');
    assert_int_equal(f->sent[1].attempt, 2);
    assert_int_equal(s_stats(f).redelivered, 1);
}

static void test_last_attempt_lease_end_fails_job(void **state)
{
    ef_fixture_t *f = *state;
    oq_job_msg_t job = EF_JOB(.type = "crash", .max_tries = 2);
    uint64_t id = ef_dispatch(f, &job);
    for (int attempt = 1; attempt <= 2; attempt++) {
        oq_worker_t *w = ef_worker(f, (char)('a' + attempt), 1);
        assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
        oq_engine_worker_remove(f->engine, &w, "killed");
        assert_null(w);
    }
    assert_string_equal(oq_engine_job_state(f->engine, id), "failed");
    oq_job_view_t view;
    assert_int_equal(oq_engine_job_view(f->engine, id, &view), 0);
    assert_non_null(strstr(view.error, "worker died"));
    assert_non_null(strstr(view.error, "attempt 2 of 2"));
}

static void test_retry_waits_backoff_then_fails_after_max_tries(void **state)
{
    ef_fixture_t *f = *state;
    oq_job_msg_t job = EF_JOB(.type = "fail", .max_tries = 3, .backoff_ms = {1000, 5000});
    uint64_t id = ef_dispatch(f, &job);
    oq_worker_t *a = ef_worker(f, 'a', 1);

    oq_engine_pump(f->engine, ef_deliver, f);
    assert_int_equal(s_ack(f, a, id, 1, OQ_OUTCOME_RETRY, "db down"), OQ_ACK_APPLIED);
    assert_string_equal(oq_engine_job_state(f->engine, id), "delayed");
    f->time.now = 999;
    oq_engine_tick(f->engine);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);
    f->time.now = 1000;
    oq_engine_tick(f->engine);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[1].attempt, 2);

    s_ack(f, a, id, 2, OQ_OUTCOME_TIMEOUT, NULL);
    f->time.now = 1000 + 4999; /* second step: 5 s */
    oq_engine_tick(f->engine);
    assert_string_equal(oq_engine_job_state(f->engine, id), "delayed");
    f->time.now = 1000 + 5000;
    oq_engine_tick(f->engine);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[2].attempt, 3);

    s_ack(f, a, id, 3, OQ_OUTCOME_RETRY, "db still down");
    assert_string_equal(oq_engine_job_state(f->engine, id), "failed");
    oq_job_view_t view;
    oq_engine_job_view(f->engine, id, &view);
    assert_non_null(strstr(view.error, "db still down"));
    assert_non_null(strstr(view.error, "attempt 3 of 3"));
    assert_int_equal(view.failed_at_ms, EF_WALL_BASE_MS + 6000);
    oq_queue_stats_t s = s_stats(f);
    assert_int_equal(s.retried, 3);
    assert_int_equal(s.failed, 1);
}

typedef struct {
    uint64_t ids[8];
    size_t n;
} s_seen_t;

static void s_collect(void *ctx, const oq_job_view_t *job)
{
    s_seen_t *seen = ctx;
    seen->ids[seen->n++] = job->id;
}

static void test_fail_goes_to_failed_store_and_listing(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id1 = s_dispatch(f, "fail");
    uint64_t id2 = s_dispatch(f, "fail");
    oq_worker_t *a = ef_worker(f, 'a', 2);
    oq_engine_pump(f->engine, ef_deliver, f);
    s_ack(f, a, id2, 1, OQ_OUTCOME_FAIL, "bad payload");
    s_ack(f, a, id1, 1, OQ_OUTCOME_FAIL, "bad payload too");
    s_seen_t seen = {0};
    assert_int_equal(oq_engine_failed_each(f->engine, NULL, 8, s_collect, &seen), 2);
    assert_int_equal(seen.n, 2);
    assert_int_equal(seen.ids[0], id2); /* oldest failure first */
    s_seen_t none = {0};
    assert_int_equal(oq_engine_failed_each(f->engine, "other", 8, s_collect, &none), 0);
    s_seen_t one = {0};
    assert_int_equal(oq_engine_failed_each(f->engine, "default", 1, s_collect, &one), 2);
    assert_int_equal(one.n, 1);
    /* The delivery decided: its own ok afterwards changes nothing. */
    assert_int_equal(s_ack(f, a, id1, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_IGNORED);
    assert_int_equal(s_stats(f).failed, 2);
    assert_string_equal(oq_engine_job_state(f->engine, id1), "failed");
}

static void test_timeout_rule_refuses_with_numbers(void **state)
{
    ef_fixture_t *f = *state;
    oq_job_msg_t job = EF_JOB(.type = "noop", .timeout_ms = 8001);
    uint64_t id;
    oq_err_t code = OQ_ERR_NONE;
    char reason[512];
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason), -1);
    assert_int_equal(code, OQ_ERR_TIMEOUT_RULE);
    assert_non_null(strstr(reason, "8 s"));
    assert_non_null(strstr(reason, "10 s"));
    assert_non_null(strstr(reason, "2 s"));
    job.timeout_ms = 8000; /* exactly retry_after - margin is allowed */
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason), 0);

    assert_int_equal(oq_engine_queue_config(f->engine, "slow", 5000, 4000, reason, sizeof reason),
                     -1);
    assert_non_null(strstr(reason, "slow"));
    assert_int_equal(oq_engine_queue_config(f->engine, "slow", 60000, 30000, reason, sizeof reason),
                     0);
    assert_int_equal(oq_engine_check_defaults(f->engine, reason, sizeof reason), 0);
}

static void test_delay_and_priority_order(void **state)
{
    ef_fixture_t *f = *state;
    oq_job_msg_t later = EF_JOB(.type = "noop", .delay_ms = 5000);
    oq_job_msg_t now = EF_JOB(.type = "noop");
    oq_job_msg_t high = EF_JOB(.type = "noop", .priority = 5);
    uint64_t delayed = ef_dispatch(f, &later);
    uint64_t low = ef_dispatch(f, &now);
    uint64_t high1 = ef_dispatch(f, &high);
    uint64_t high2 = ef_dispatch(f, &high);
    assert_string_equal(oq_engine_job_state(f->engine, delayed), "delayed");
    assert_int_equal(oq_engine_next_deadline(f->engine), 5000);

    ef_worker(f, 'a', 10);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 3);
    assert_int_equal(f->sent[0].id, high1);
    assert_int_equal(f->sent[1].id, high2);
    assert_int_equal(f->sent[2].id, low);
    f->time.now = 5000;
    oq_engine_tick(f->engine);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[3].id, delayed);
}

static void test_unreachable_worker_loses_no_attempt(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "noop");
    ef_worker(f, 'x', 1);
    f->unreachable = 'x';
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);
    assert_int_equal(oq_engine_worker_count(f->engine), 0);
    assert_string_equal(oq_engine_job_state(f->engine, id), "ready");
    ef_worker(f, 'b', 1);
    oq_engine_pump(f->engine, ef_deliver, f);
    assert_int_equal(f->sent[0].attempt, 1);
    assert_int_equal(s_stats(f).redelivered, 0);
}

static void test_drain_stops_deliveries(void **state)
{
    ef_fixture_t *f = *state;
    s_dispatch(f, "noop");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    oq_engine_worker_drain(f->engine, a);
    oq_engine_worker_credit(f->engine, a, 1); /* ignored while draining */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);
}

static void test_full_broker_refuses(void **state)
{
    ef_fixture_t *f = *state;
    for (int i = 0; i < 100; i++)
        s_dispatch(f, "noop");
    oq_job_msg_t job = EF_JOB(.type = "noop");
    uint64_t id;
    oq_err_t code;
    char reason[256];
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason), -1);
    assert_int_equal(code, OQ_ERR_FULL);
    assert_int_equal(oq_engine_job_count(f->engine), 100);
}

static void test_outcomes_counted_per_type(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t a = s_dispatch(f, "grant_points");
    uint64_t b = s_dispatch(f, "grant_points");
    uint64_t c = s_dispatch(f, "noop");
    oq_worker_t *w = ef_worker(f, 'a', 3);
    oq_engine_pump(f->engine, ef_deliver, f);
    oq_ack_msg_t ack = {.id = a,
                        .attempt = 1,
                        .outcome = OQ_OUTCOME_OK,
                        .result = OQ_RESULT_APPLIED,
                        .lease = ef_lease(f, a, 1),
                        .has_lease = true};
    oq_engine_ack(f->engine, w, NULL, &ack);
    ack.id = b;
    ack.result = OQ_RESULT_ALREADY_APPLIED;
    ack.lease = ef_lease(f, b, 1);
    oq_engine_ack(f->engine, w, NULL, &ack);
    s_ack(f, w, c, 1, OQ_OUTCOME_FAIL, "no");
    assert_int_equal(oq_engine_type_count(f->engine), 2);
    oq_type_stats_t t;
    oq_engine_type_stats(f->engine, 0, &t);
    assert_string_equal(t.name, "grant_points");
    assert_int_equal(t.done, 2);
    assert_int_equal(t.applied, 1);
    assert_int_equal(t.duplicates, 1);
    assert_int_equal(t.failed, 0);
    oq_engine_type_stats(f->engine, 1, &t);
    assert_string_equal(t.name, "noop");
    assert_int_equal(t.failed, 1);
    assert_int_equal(s_stats(f).duplicates, 1);
}

static void test_refused_dispatch_creates_no_queue(void **state)
{
    ef_fixture_t *f = *state;
    oq_job_msg_t job = EF_JOB(.type = "noop", .queue = "fresh", .timeout_ms = 60000);
    uint64_t id;
    oq_err_t code;
    char reason[512];
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason), -1);
    assert_int_equal(code, OQ_ERR_TIMEOUT_RULE);
    assert_int_equal(oq_engine_queue_count(f->engine), 0);
}

/* ---- the observer and replay ------------------------------------------------ */

typedef struct {
    oq_job_event_t event[32];
    uint32_t attempt[32];
    size_t count;
    bool dispatch_seen; /* the request came with the dispatch event */
    uint32_t refuse;    /* bit 1 << event: the observer cannot record it */
} s_events_t;

static int s_record(void *ctx, oq_job_event_t event, const oq_job_view_t *job,
                    const oq_job_msg_t *dispatch)
{
    s_events_t *e = ctx;
    if (e->refuse & (1u << event))
        return -1;
    assert_true(e->count < 32);
    e->event[e->count] = event;
    e->attempt[e->count++] = job->attempt;
    if (event == OQ_EVENT_DISPATCHED)
        e->dispatch_seen = dispatch && oq_str_eq(dispatch->type, "noop");
    else
        assert_null(dispatch);
    return 0;
}

static void test_hooks_hear_every_change_in_order(void **state)
{
    ef_fixture_t *f = *state;
    s_events_t e = {.count = 0};
    oq_engine_hooks_t hooks = {.changed = s_record, .ctx = &e};
    oq_engine_set_hooks(f->engine, &hooks);
    uint64_t id = s_dispatch(f, "noop");
    assert_true(e.dispatch_seen);
    oq_worker_t *a = ef_worker(f, 'a', 5);
    oq_engine_pump(f->engine, ef_deliver, f);
    s_ack(f, a, id, 1, OQ_OUTCOME_RETRY, "later"); /* backoff 1 s */
    f->time.now += 1000;
    oq_engine_tick(f->engine);
    oq_engine_pump(f->engine, ef_deliver, f);
    f->time.now += EF_RETRY_AFTER_MS;
    oq_engine_tick(f->engine); /* the lease runs out */
    oq_engine_pump(f->engine, ef_deliver, f);
    s_ack(f, a, id, 3, OQ_OUTCOME_FAIL, "no");
    char reason[128];
    assert_int_equal(oq_engine_requeue(f->engine, id, &s_why, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_requeue(f->engine, id, &s_why, reason, sizeof reason), -1);
    assert_non_null(strstr(reason, "not in the failed store"));
    f->unreachable = 'a';
    oq_engine_pump(f->engine, ef_deliver, f); /* never sent: no lease reported */
    oq_worker_t *b = ef_worker(f, 'b', 1);
    oq_engine_pump(f->engine, ef_deliver, f);
    s_ack(f, b, id, 1, OQ_OUTCOME_OK, NULL);

    static const oq_job_event_t want[] = {
        OQ_EVENT_DISPATCHED, OQ_EVENT_LEASED,   OQ_EVENT_RETRY,  OQ_EVENT_DUE,
        OQ_EVENT_LEASED,     OQ_EVENT_RETURNED, OQ_EVENT_LEASED, OQ_EVENT_FAILED,
        OQ_EVENT_REQUEUED,   OQ_EVENT_RETURNED, OQ_EVENT_LEASED, OQ_EVENT_DONE,
    };
    static const uint32_t attempts[] = {0, 1, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1};
    assert_int_equal(e.count, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < e.count; i++) {
        assert_int_equal(e.event[i], want[i]);
        assert_int_equal(e.attempt[i], attempts[i]);
    }
}

static void test_restore_rebuilds_without_reporting(void **state)
{
    ef_fixture_t *f = *state;
    s_events_t e = {.count = 0};
    oq_engine_hooks_t hooks = {.changed = s_record, .ctx = &e};
    oq_engine_set_hooks(f->engine, &hooks);
    oq_job_msg_t job = EF_JOB(.type = "noop", .max_tries = 3, .timeout_ms = 2000);
    char reason[128];
    int64_t wall = oq_clock_wall_ms(&f->clock);
    for (uint64_t id = 10; id <= 14; id++) {
        job.id = id;
        assert_int_equal(
            oq_engine_restore(f->engine, &job, id == 11 ? wall + 5000 : 0, reason, sizeof reason),
            0);
    }
    assert_int_equal(oq_engine_restore(f->engine, &job, 0, reason, sizeof reason), 1);
    assert_string_equal(oq_engine_job_state(f->engine, 11), "delayed");
    assert_int_equal(oq_engine_restore_leased(f->engine, 11, 2), 0); /* delayed -> ready */
    assert_string_equal(oq_engine_job_state(f->engine, 11), "ready");
    assert_int_equal(oq_engine_restore_retry(f->engine, 12, 1, wall + 1000), 0);
    assert_string_equal(oq_engine_job_state(f->engine, 12), "delayed");
    assert_int_equal(oq_engine_restore_failed(f->engine, 13, 3, "gone", wall - 10), 0);
    assert_int_equal(oq_engine_restore_done(f->engine, 14), 0);
    assert_int_equal(oq_engine_restore_done(f->engine, 14), -1);
    assert_int_equal(oq_engine_restore_leased(f->engine, 99, 1), -1);
    /* A job keeps its attempt in 16 bits: a record past that is refused,
       and the job is left as it was. */
    assert_int_equal(oq_engine_restore_leased(f->engine, 10, UINT16_MAX + 1u), -1);
    assert_int_equal(oq_engine_restore_retry(f->engine, 10, UINT32_MAX, wall + 1000), -1);
    assert_int_equal(oq_engine_restore_failed(f->engine, 10, UINT16_MAX + 1u, "x", wall), -1);
    assert_int_equal(oq_engine_restore_review(f->engine, 10, UINT16_MAX + 1u, "x", wall), -1);
    assert_string_equal(oq_engine_job_state(f->engine, 10), "ready");
    oq_engine_restore_next_id(f->engine, 50);
    assert_int_equal(e.count, 0); /* nothing reported */

    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, 13, &v), 0);
    assert_int_equal(v.state, OQ_STATE_FAILED);
    assert_string_equal(v.error, "gone");
    assert_int_equal(v.failed_at_ms, wall - 10);
    assert_int_equal(v.attempt, 3);
    assert_int_equal(oq_engine_job_view(f->engine, 12, &v), 0);
    assert_int_equal(v.not_before_ms, wall + 1000);
    assert_int_equal(oq_engine_next_id(f->engine), 50);
    assert_int_equal(s_dispatch(f, "noop"), 50);
    oq_queue_stats_t s = s_stats(f);
    assert_int_equal(s.ready, 3);
    assert_int_equal(s.delayed, 1);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.dispatched, 1); /* restored jobs were dispatched before this start */
    assert_int_equal(s.done, 0);
    /* A restored job that was handed out counts as redelivered next time. */
    ef_worker(f, 'a', 1);
    oq_engine_pump(f->engine, ef_deliver, f);
    assert_int_equal(f->sent[0].id, 10);
    assert_int_equal(s_stats(f).redelivered, 0);
}

typedef struct {
    uint64_t ids[8];
    oq_job_state_t states[8];
    size_t count;
} s_walk_t;

static void s_walk(void *ctx, const oq_job_view_t *job)
{
    s_walk_t *w = ctx;
    w->ids[w->count] = job->id;
    w->states[w->count++] = job->state;
}

static void test_job_each_goes_leased_ready_delayed_failed(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t failed = s_dispatch(f, "noop");
    uint64_t leased = s_dispatch(f, "noop");
    oq_worker_t *a = ef_worker(f, 'a', 2);
    oq_engine_pump(f->engine, ef_deliver, f);
    s_ack(f, a, failed, 1, OQ_OUTCOME_FAIL, "x");
    uint64_t ready = s_dispatch(f, "noop");
    oq_job_msg_t job = EF_JOB(.type = "noop", .delay_ms = 5000);
    uint64_t delayed = ef_dispatch(f, &job);
    s_walk_t w = {.count = 0};
    oq_engine_job_each(f->engine, s_walk, &w);
    assert_int_equal(w.count, 4);
    assert_int_equal(w.ids[0], leased);
    assert_int_equal(w.states[0], OQ_STATE_LEASED);
    assert_int_equal(w.ids[1], ready);
    assert_int_equal(w.ids[2], delayed);
    assert_int_equal(w.states[2], OQ_STATE_DELAYED);
    assert_int_equal(w.ids[3], failed);
    assert_int_equal(w.states[3], OQ_STATE_FAILED);
}

static uint64_t s_dispatch_at(ef_fixture_t *f, const char *type, int32_t priority)
{
    oq_job_msg_t job = EF_JOB(.type = type, .priority = priority);
    return ef_dispatch(f, &job);
}

/* A ready job is on its type's lane only; the queue's order (priority
   high to low, FIFO within, a job given back in front of its band) is the
   merge of the lanes, both for the restart walk and for a worker that
   takes every type. */
static void test_ready_jobs_keep_the_queue_order_across_types(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t a1 = s_dispatch_at(f, "a", 0);
    uint64_t b1 = s_dispatch_at(f, "b", 0);
    uint64_t a2 = s_dispatch_at(f, "a", 5);
    uint64_t c1 = s_dispatch_at(f, "c", 0);
    uint64_t b2 = s_dispatch_at(f, "b", 5);
    uint64_t a3 = s_dispatch_at(f, "a", 0);
    oq_worker_t *w = ef_worker(f, 'w', 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[0].id, a2);
    uint64_t b3 = s_dispatch_at(f, "b", 5);
    oq_engine_worker_remove(f->engine, &w, "killed"); /* a2 back in front of its band */
    const uint64_t order[] = {a2, b2, b3, a1, b1, c1, a3};
    enum { N = sizeof order / sizeof order[0] };

    s_walk_t walk = {.count = 0};
    oq_engine_job_each(f->engine, s_walk, &walk);
    assert_int_equal(walk.count, N);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(walk.ids[i], order[i]);
        assert_int_equal(walk.states[i], OQ_STATE_READY);
    }

    ef_worker(f, 'x', N);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), N);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(f->sent[1 + i].id, order[i]);
}

/* ---- bytes, restored timeouts, drain, the rule's message, paging -- */

#define S_BIG_PAYLOAD 1000

static oq_job_msg_t s_big_job(void)
{
    static uint8_t payload[S_BIG_PAYLOAD] = {0x80};
    return EF_JOB(.type = "noop", .payload = payload, .payload_len = sizeof payload);
}

static void test_byte_limit_refuses_before_it_and_done_frees(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t cost = oq_engine_job_cost(S_BIG_PAYLOAD, 0);
    assert_int_equal(cost, S_BIG_PAYLOAD + OQ_JOB_OVERHEAD_BYTES);
    /* Room for three and a half, beside the worker, which counts too. */
    ef_engine_bytes(f, 3 * cost + cost / 2 + OQ_WORKER_COST_BYTES, 0);
    assert_int_equal(oq_engine_max_bytes(f->engine), f->config.max_bytes);
    oq_worker_t *a = ef_worker(f, 'a', 1);

    oq_job_msg_t job = s_big_job();
    uint64_t ids[3], id;
    oq_err_t code = OQ_ERR_NONE;
    char reason[512];
    for (int i = 0; i < 3; i++)
        assert_int_equal(oq_engine_dispatch(f->engine, &job, &ids[i], &code, reason, sizeof reason),
                         0);
    assert_int_equal(oq_engine_bytes(f->engine), 3 * cost);
    /* The fourth would pass the limit: refused before it, with the numbers. */
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason), -1);
    assert_int_equal(code, OQ_ERR_FULL);
    char held[32], limit[32];
    snprintf(held, sizeof held, "%llu", (unsigned long long)(3 * cost));
    snprintf(limit, sizeof limit, "%llu", (unsigned long long)f->config.max_bytes);
    assert_non_null(strstr(reason, held));
    assert_non_null(strstr(reason, limit));
    assert_non_null(strstr(reason, "--max-bytes"));
    assert_int_equal(oq_engine_job_count(f->engine), 3);
    assert_int_equal(oq_engine_bytes(f->engine), 3 * cost);
    /* A small job still fits in the half left. */
    s_dispatch(f, "noop");
    assert_int_equal(oq_engine_bytes(f->engine), 3 * cost + oq_engine_job_cost(1, 0));

    /* Workers are still served, and a done job frees its bytes. */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[0].id, ids[0]);
    assert_int_equal(s_ack(f, a, ids[0], 1, OQ_OUTCOME_OK, NULL), OQ_ACK_APPLIED);
    assert_int_equal(oq_engine_bytes(f->engine), 2 * cost + oq_engine_job_cost(1, 0));
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason), 0);

    /* Backoff steps a job carries count too. */
    job.backoff_len = 4;
    job.backoff_ms[0] = job.backoff_ms[1] = job.backoff_ms[2] = job.backoff_ms[3] = 1000;
    assert_int_equal(oq_engine_job_cost(S_BIG_PAYLOAD, 4), cost + 4 * sizeof(int64_t));
}

/* A job with keys and a dispatch id, numbered n. */
static int s_dispatch_keyed(ef_fixture_t *f, int n, uint64_t *id, oq_err_t *code)
{
    char unique[32], overlap[32], did[32];
    snprintf(unique, sizeof unique, "u-%d", n);
    snprintf(overlap, sizeof overlap, "o-%d", n);
    snprintf(did, sizeof did, "d-%d", n);
    oq_job_msg_t job = EF_JOB(.type = "noop", .unique_key = unique, .unique_for_ms = 3600 * 1000,
                              .overlap_key = overlap, .dispatch_id = did);
    char reason[512];
    return oq_engine_dispatch(f->engine, &job, id, code, reason, sizeof reason);
}

static void test_keys_and_ids_count_and_what_is_only_remembered_yields(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t cost = oq_engine_job_cost(1, 0) + 2 * OQ_JOB_KEY_COST_BYTES;
    ef_engine_bytes(f, 64 * cost, 0);

    uint64_t id, ids[64];
    oq_err_t code = OQ_ERR_NONE;
    assert_int_equal(s_dispatch_keyed(f, 0, &ids[0], &code), 0);
    /* Both keys count beside the job (the first dispatch ids fit the
       table's smallest size, which is not counted). */
    assert_int_equal(oq_engine_held_bytes(f->engine), cost);
    int n = 1;
    while (n < 64 && s_dispatch_keyed(f, n, &ids[n], &code) == 0)
        n++;
    assert_int_equal(n, 64);
    assert_int_equal(oq_engine_held_bytes(f->engine), 64 * cost);
    /* Full of live jobs: refused, and nothing remembered is forgotten. */
    size_t held_ids = oq_engine_dispatch_ids(f->engine);
    assert_int_equal(s_dispatch_keyed(f, 64, &id, &code), -1);
    assert_int_equal(code, OQ_ERR_FULL);
    assert_int_equal(oq_engine_dispatch_ids(f->engine), held_ids);
    assert_int_equal(oq_engine_dedupe_evicted(f->engine), 0);

    /* A cancelled job leaves its unique window: held, still counted, and
       given to a new job that needs the room (the job and its overlap key
       gave back less than a job with two keys takes). */
    oq_refusal_t why;
    char reason[256];
    assert_int_equal(oq_engine_cancel(f->engine, ids[0], &why, reason, sizeof reason), 0);
    oq_keys_stats_t keys;
    oq_engine_keys_stats(f->engine, &keys);
    assert_int_equal(keys.unique_keys, 64);
    assert_int_equal(s_dispatch_keyed(f, 64, &id, &code), 0);
    oq_engine_keys_stats(f->engine, &keys);
    assert_int_equal(keys.unique_evicted, 1);
    assert_int_equal(keys.unique_keys, 64);
    assert_true(oq_engine_held_bytes(f->engine) <= f->config.max_bytes);
    /* The window is whole: no dispatch id was forgotten. */
    assert_int_equal(oq_engine_dedupe_window_held_ms(f->engine), f->config.dedupe_window_ms);
}

static void test_dispatch_ids_yield_to_jobs_and_the_window_held_is_told(void **state)
{
    ef_fixture_t *f = *state;
    ef_engine_bytes(f, 1024 * 1024, 0);

    /* One job holds a unique key; dispatches naming it add only their ids,
       until the table grows to what the limit leaves it. */
    oq_job_msg_t job = EF_JOB(.type = "noop", .unique_key = "held");
    uint64_t holder, id;
    oq_err_t code;
    char reason[512], did[32];
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &holder, &code, reason, sizeof reason), 0);
    for (int n = 0; n < 40000; n++) {
        snprintf(did, sizeof did, "d-%d", n);
        job.dispatch_id = oq_str(did);
        assert_int_equal(oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason), 1);
    }
    assert_true(oq_engine_held_bytes(f->engine) <= f->config.max_bytes);
    assert_true(oq_engine_dedupe_evicted(f->engine) > 0);
    int64_t window = f->config.dedupe_window_ms;
    assert_true(oq_engine_dedupe_window_held_ms(f->engine) < window);
    /* Jobs take the ids' room, oldest ids first, until only live jobs are
       left: then "full". */
    job.unique_key = oq_str(NULL);
    job.dispatch_id = oq_str(NULL);
    uint64_t before = oq_engine_dedupe_evicted(f->engine);
    int taken = 0;
    while (oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason) == 0)
        taken++;
    assert_int_equal(code, OQ_ERR_FULL);
    assert_true((uint64_t)taken * oq_engine_job_cost(1, 0) > f->config.max_bytes / 2);
    assert_true(oq_engine_dedupe_evicted(f->engine) > before);
    assert_true(oq_engine_held_bytes(f->engine) <= f->config.max_bytes);
    /* The newest id is still held. */
    snprintf(did, sizeof did, "d-%d", 39999);
    job.dispatch_id = oq_str(did);
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason), 0);
    assert_int_equal(id, holder);
    /* A window's length with nothing forgotten: whole again. */
    f->time.now += window;
    assert_int_equal(oq_engine_dedupe_window_held_ms(f->engine), window);
}

static void test_replayed_jobs_count_and_are_never_refused(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t cost = oq_engine_job_cost(S_BIG_PAYLOAD, 0);
    ef_engine_bytes(f, 2 * cost, 2);
    oq_job_msg_t job = s_big_job();
    job.has_max_tries = job.has_timeout = true;
    job.max_tries = 3;
    job.timeout_ms = 1000;
    char reason[256];
    for (uint64_t id = 1; id <= 5; id++) {
        job.id = id;
        assert_int_equal(oq_engine_restore(f->engine, &job, 0, reason, sizeof reason), 0);
    }
    assert_int_equal(oq_engine_job_count(f->engine), 5);
    assert_int_equal(oq_engine_bytes(f->engine), 5 * cost);
    assert_int_equal(oq_engine_restore_done(f->engine, 5), 0);
    assert_int_equal(oq_engine_bytes(f->engine), 4 * cost);
    /* New work waits until the restored jobs are below the limit again. */
    uint64_t id;
    oq_err_t code;
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason), -1);
    assert_int_equal(code, OQ_ERR_FULL);
}

static void test_restored_job_breaking_timeout_rule_is_clamped(void **state)
{
    ef_fixture_t *f = *state;
    char reason[512];
    /* The queue's lease was shortened since the jobs were accepted. */
    assert_int_equal(oq_engine_queue_config(f->engine, "short", 6000, 3000, reason, sizeof reason),
                     0);
    oq_job_msg_t job = EF_JOB(.type = "noop", .queue = "short", .max_tries = 3);
    job.has_timeout = true;
    job.id = 1;
    job.timeout_ms = 30000; /* legal under the old retry_after, not now */
    assert_int_equal(oq_engine_restore(f->engine, &job, 0, reason, sizeof reason), 0);
    job.id = 2;
    job.timeout_ms = 20000;
    assert_int_equal(oq_engine_restore(f->engine, &job, 0, reason, sizeof reason), 0);
    job.id = 3;
    job.timeout_ms = 4000; /* exactly retry_after - margin: legal, untouched */
    assert_int_equal(oq_engine_restore(f->engine, &job, 0, reason, sizeof reason), 0);
    job.id = 4;
    job.queue = oq_str("default");
    job.timeout_ms = 8000; /* the default queue: 10 s - 2 s, legal */
    assert_int_equal(oq_engine_restore(f->engine, &job, 0, reason, sizeof reason), 0);

    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, 1, &v), 0);
    assert_int_equal(v.timeout_ms, 4000); /* the longest legal timeout */
    assert_int_equal(oq_engine_job_view(f->engine, 2, &v), 0);
    assert_int_equal(v.timeout_ms, 4000);
    assert_int_equal(oq_engine_job_view(f->engine, 3, &v), 0);
    assert_int_equal(v.timeout_ms, 4000);
    assert_int_equal(oq_engine_job_view(f->engine, 4, &v), 0);
    assert_int_equal(v.timeout_ms, 8000);
    assert_int_equal(oq_engine_restore_report(f->engine), 2);
    /* Kept, and delivered with the clamped timeout. */
    assert_int_equal(oq_engine_job_count(f->engine), 4);
}

static void test_ready_after_drain_resumes_the_worker(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t first = s_dispatch(f, "noop");
    uint64_t second = s_dispatch(f, "noop");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    oq_engine_worker_drain(f->engine, a);
    /* The ack of the job it was finishing returns credit: still ignored, or
       a stopping worker would be sent a job it is about to give back. */
    assert_int_equal(s_ack(f, a, first, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_APPLIED);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);
    /* Its stop was cancelled: ready ends the drain and adds credit. */
    oq_engine_worker_resume(f->engine, a);
    oq_engine_worker_credit(f->engine, a, 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[1].id, second);
}

static void test_rule_message_says_raise_retry_after_when_no_timeout_fits(void **state)
{
    ef_fixture_t *f = *state;
    char reason[512];
    /* retry_after 2 s is not above the 2 s margin: no timeout fits. */
    assert_int_equal(oq_engine_queue_config(f->engine, "bad", 2000, 2000, reason, sizeof reason),
                     -1);
    assert_null(strstr(reason, "at most 0"));
    assert_non_null(strstr(reason, "raise retry_after to at least 4 s"));
    assert_int_equal(oq_engine_queue_config(f->engine, "bad", 1500, 500, reason, sizeof reason),
                     -1);
    assert_non_null(strstr(reason, "raise retry_after to at least 2.5 s"));
    /* When a shorter timeout fits, the message names it. */
    assert_int_equal(oq_engine_queue_config(f->engine, "ok", 5000, 5000, reason, sizeof reason),
                     -1);
    assert_non_null(strstr(reason, "use a timeout of at most 3 s"));
}

static void test_failed_pages_by_id_cursor(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t ids[7];
    for (int i = 0; i < 7; i++)
        ids[i] = s_dispatch(f, "fail");
    oq_worker_t *a = ef_worker(f, 'a', 7);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 7);
    /* Fail them in an order unlike their ids. */
    static const int order[] = {4, 0, 6, 2, 1, 5, 3};
    for (int i = 0; i < 7; i++)
        s_ack(f, a, ids[order[i]], 1, OQ_OUTCOME_FAIL, "bad");
    s_seen_t page = {0};
    bool more = false;
    assert_int_equal(oq_engine_failed_page(f->engine, NULL, NULL, 3, s_collect, &page, &more), 7);
    assert_int_equal(page.n, 3);
    assert_true(more);
    for (int i = 0; i < 3; i++)
        assert_int_equal(page.ids[i], ids[i]);
    /* Between pages a listed job is requeued and an unlisted one done:
       the next page neither repeats nor skips a job still failed. */
    char reason[128];
    assert_int_equal(oq_engine_requeue(f->engine, ids[1], &s_why, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_forget(f->engine, ids[4], &s_why, reason, sizeof reason), 0);
    s_seen_t next = {0};
    oq_failed_cursor_t cursor;
    assert_int_equal(oq_engine_failed_cursor(f->engine, page.ids[2], &cursor), 0);
    assert_int_equal(oq_engine_failed_page(f->engine, NULL, &cursor, 3, s_collect, &next, &more),
                     5);
    assert_int_equal(next.n, 3);
    assert_int_equal(next.ids[0], ids[3]);
    assert_int_equal(next.ids[1], ids[5]);
    assert_int_equal(next.ids[2], ids[6]);
    assert_false(more);
    s_seen_t none = {0};
    assert_int_equal(oq_engine_failed_cursor(f->engine, ids[6], &cursor), 0);
    assert_int_equal(oq_engine_failed_page(f->engine, NULL, &cursor, 3, s_collect, &none, &more),
                     5);
    assert_int_equal(none.n, 0);
    assert_false(more);
    s_seen_t other = {0};
    assert_int_equal(oq_engine_failed_page(f->engine, "other", NULL, 3, s_collect, &other, &more),
                     0);
    assert_int_equal(other.n, 0);
}

/* ---- routing, fenced acks, touch, release, return ------------------------ */

static uint64_t s_dispatch_to(ef_fixture_t *f, const char *type, const char *queue,
                              int64_t delay_ms, uint32_t max_tries)
{
    oq_job_msg_t job =
        EF_JOB(.type = type, .queue = queue, .delay_ms = delay_ms, .max_tries = max_tries);
    return ef_dispatch(f, &job);
}

/* A worker with the given lists (comma-separated names; NULL: every one). */
static oq_worker_t *s_routed_worker(ef_fixture_t *f, char name, uint32_t credit, const char *types,
                                    const char *queues)
{
    static msgpack_zone zone;
    static bool zone_ready;
    if (!zone_ready) {
        msgpack_zone_init(&zone, 4096);
        zone_ready = true;
    }
    /* The decoded strings point into the buffers: both live until the route is taken. */
    msgpack_object lists[2];
    msgpack_sbuffer bufs[2];
    const char *texts[2] = {types, queues};
    for (int l = 0; l < 2; l++) {
        msgpack_sbuffer_init(&bufs[l]);
        if (!texts[l])
            continue;
        msgpack_sbuffer *buf = &bufs[l];
        msgpack_packer pk;
        msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
        char copy[256];
        snprintf(copy, sizeof copy, "%s", texts[l]);
        uint32_t n = 1;
        for (char *c = copy; *c; c++)
            n += *c == ',';
        msgpack_pack_array(&pk, n);
        for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ","))
            oq_proto_pack_cstr(&pk, tok);
        size_t off = 0;
        assert_int_equal(msgpack_unpack(buf->data, buf->size, &off, &zone, &lists[l]),
                         MSGPACK_UNPACK_SUCCESS);
    }
    oq_worker_t *w = oq_engine_worker_add(f->engine, &name, 1, oq_str("w"), (uint32_t)name, NULL);
    assert_non_null(w);
    char reason[256];
    assert_int_equal(oq_engine_worker_route(f->engine, w, types ? &lists[0] : NULL,
                                            queues ? &lists[1] : NULL, reason, sizeof reason),
                     0);
    msgpack_sbuffer_destroy(&bufs[0]);
    msgpack_sbuffer_destroy(&bufs[1]);
    oq_engine_worker_credit(f->engine, w, credit);
    return w;
}

static oq_type_stats_t s_type(ef_fixture_t *f, const char *name)
{
    oq_type_stats_t t;
    for (size_t i = 0; i < oq_engine_type_count(f->engine); i++) {
        oq_engine_type_stats(f->engine, i, &t);
        if (strcmp(t.name, name) == 0)
            return t;
    }
    fail_msg("no type %s", name);
    return t;
}

static oq_ack_effect_t s_blind_ack(ef_fixture_t *f, uint64_t id, uint32_t attempt, bool has_lease,
                                   uint64_t lease)
{
    oq_ack_msg_t ack = {.id = id,
                        .attempt = attempt,
                        .outcome = OQ_OUTCOME_OK,
                        .result = OQ_RESULT_APPLIED,
                        .has_lease = has_lease,
                        .lease = lease};
    return oq_engine_ack(f->engine, NULL, NULL, &ack);
}

static void test_blind_acks_change_nothing(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t ready = s_dispatch(f, "noop");
    uint64_t delayed = s_dispatch_to(f, "noop", "default", 3600 * 1000, 0);
    uint64_t failing = s_dispatch_to(f, "noop", "default", 0, 1);
    uint64_t done = s_dispatch(f, "noop");
    oq_worker_t *a = ef_worker(f, 'a', 3);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 3); /* ready, failing, done */
    uint64_t lease_ready = ef_lease(f, ready, 1);
    /* Put ready back to ready (its worker dies) so a blind ack meets a ready
       job that was delivered once; failing fails; done completes. */
    s_ack(f, a, failing, 1, OQ_OUTCOME_FAIL, "no");
    s_ack(f, a, done, 1, OQ_OUTCOME_OK, NULL);
    oq_engine_worker_remove(f->engine, &a, "test");
    assert_string_equal(oq_engine_job_state(f->engine, ready), "ready");
    assert_string_equal(oq_engine_job_state(f->engine, delayed), "delayed");
    assert_string_equal(oq_engine_job_state(f->engine, failing), "failed");

    /* Without a token, with a guessed one, at an attempt never reached. */
    uint64_t ids[] = {ready, delayed, failing, done};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(s_blind_ack(f, ids[i], 1, false, 0), OQ_ACK_FENCED);
        assert_int_equal(s_blind_ack(f, ids[i], 1, true, 12345), OQ_ACK_FENCED);
        assert_int_equal(s_blind_ack(f, ids[i], 99, true, lease_ready), OQ_ACK_FENCED);
    }
    /* A real token of one job does not fit another. */
    assert_int_equal(s_blind_ack(f, delayed, 1, true, lease_ready), OQ_ACK_FENCED);
    assert_int_equal(oq_engine_fenced_acks(f->engine), 13);
    assert_string_equal(oq_engine_job_state(f->engine, ready), "ready");
    assert_string_equal(oq_engine_job_state(f->engine, delayed), "delayed");
    assert_string_equal(oq_engine_job_state(f->engine, failing), "failed");
    oq_queue_stats_t s = s_stats(f);
    assert_int_equal(s.done, 1);
    assert_int_equal(s.late_acks + s.ignored_acks + s.duplicates, 0);
    assert_int_equal(s_type(f, "noop").applied, 0);

    /* The real late ack of the delivery that happened still completes it. */
    assert_int_equal(s_blind_ack(f, ready, 1, true, lease_ready), OQ_ACK_LATE);
    assert_null(oq_engine_job_state(f->engine, ready));
    assert_int_equal(s_type(f, "noop").applied, 1);
}

static void test_requeue_kills_old_tokens(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch_to(f, "noop", "default", 0, 1);
    oq_worker_t *a = ef_worker(f, 'a', 1);
    oq_engine_pump(f->engine, ef_deliver, f);
    uint64_t old = ef_lease(f, id, 1);
    s_ack(f, a, id, 1, OQ_OUTCOME_FAIL, "no");
    char reason[128];
    assert_int_equal(oq_engine_requeue(f->engine, id, &s_why, reason, sizeof reason), 0);
    oq_engine_pump(f->engine, ef_deliver, f);
    assert_string_equal(oq_engine_job_state(f->engine, id), "leased");
    /* The first life's token is the same attempt number, but dead. */
    assert_int_equal(s_blind_ack(f, id, 1, true, old), OQ_ACK_FENCED);
    assert_string_equal(oq_engine_job_state(f->engine, id), "leased");
    assert_int_not_equal(ef_lease(f, id, 1), old);
    assert_int_equal(s_ack(f, a, id, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_APPLIED);
}

static void test_routing_by_type_waits_without_a_try(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t hello = s_dispatch(f, "hello");
    uint64_t noop = s_dispatch(f, "noop");
    oq_worker_t *a = s_routed_worker(f, 'a', 2, "noop,sleep", NULL);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[0].id, noop);
    s_ack(f, a, noop, 1, OQ_OUTCOME_OK, NULL);
    assert_string_equal(oq_engine_job_state(f->engine, hello), "ready");
    oq_type_stats_t t = s_type(f, "hello");
    assert_int_equal(t.unhandled, 1);
    assert_int_equal(t.workers, 0);
    assert_int_equal(s_type(f, "noop").unhandled, 0);
    /* Time passes; the job neither fails nor uses a try. */
    f->time.now += 10 * EF_RETRY_AFTER_MS;
    oq_engine_tick(f->engine);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);
    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, hello, &v), 0);
    assert_int_equal(v.attempt, 0);
    assert_int_equal(v.state, OQ_STATE_READY);
    /* A worker that handles it connects: it runs. */
    s_routed_worker(f, 'b', 1, "hello", NULL);
    assert_int_equal(s_type(f, "hello").unhandled, 0);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[f->sent_count - 1].id, hello);
    assert_int_equal(f->sent[f->sent_count - 1].worker, 'b');
}

static void test_queue_order_drains_higher_first(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t d1 = s_dispatch_to(f, "noop", "default", 0, 0);
    uint64_t h1 = s_dispatch_to(f, "noop", "high", 0, 0);
    uint64_t d2 = s_dispatch_to(f, "noop", "default", 0, 0);
    uint64_t h2 = s_dispatch_to(f, "noop", "high", 0, 0);
    uint64_t other = s_dispatch_to(f, "noop", "other", 0, 0);
    oq_worker_t *w = s_routed_worker(f, 'a', 1, "noop", "high,default");
    uint64_t order[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
        order[i] = f->sent[f->sent_count - 1].id;
        s_ack(f, w, order[i], 1, OQ_OUTCOME_OK, NULL);
    }
    assert_int_equal(order[0], h1);
    assert_int_equal(order[1], h2);
    assert_int_equal(order[2], d1);
    assert_int_equal(order[3], d2);
    /* A queue it does not serve is never its. */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);
    assert_string_equal(oq_engine_job_state(f->engine, other), "ready");
}

static void test_touch_restarts_the_lease_of_its_holder_only(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "noop");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    oq_worker_t *b = ef_worker(f, 'b', 1);
    oq_engine_pump(f->engine, ef_deliver, f);
    oq_worker_t *holder = f->sent[0].worker == 'a' ? a : b;
    oq_worker_t *other = holder == a ? b : a;
    oq_ack_msg_t touch = {.id = id, .attempt = 1, .lease = ef_lease(f, id, 1), .has_lease = true};
    f->time.now += EF_RETRY_AFTER_MS - 1000;
    assert_int_equal(oq_engine_touch(f->engine, holder, NULL, &touch), 0);
    assert_int_equal(oq_engine_next_deadline(f->engine), f->time.now + EF_RETRY_AFTER_MS);
    /* From another worker, with a wrong token, or for another attempt: nothing. */
    int64_t deadline = oq_engine_next_deadline(f->engine);
    f->time.now += 1000;
    assert_int_equal(oq_engine_touch(f->engine, other, NULL, &touch), -1);
    oq_ack_msg_t wrong = touch;
    wrong.lease ^= 1;
    assert_int_equal(oq_engine_touch(f->engine, holder, NULL, &wrong), -1);
    wrong = touch;
    wrong.attempt = 2;
    assert_int_equal(oq_engine_touch(f->engine, holder, NULL, &wrong), -1);
    assert_int_equal(oq_engine_stale_touches(f->engine), 3);
    assert_int_equal(oq_engine_next_deadline(f->engine), deadline);
    /* The old deadline passes: still leased, nothing redelivered. */
    f->time.now = EF_RETRY_AFTER_MS + 500;
    oq_engine_tick(f->engine);
    assert_string_equal(oq_engine_job_state(f->engine, id), "leased");
    assert_int_equal(s_stats(f).redelivered, 0);
}

static void test_release_waits_its_delay_and_uses_a_try(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "noop");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    oq_engine_pump(f->engine, ef_deliver, f);
    oq_ack_msg_t ack = {.id = id,
                        .attempt = 1,
                        .outcome = OQ_OUTCOME_RETRY,
                        .credit = 1,
                        .error = oq_str("later"),
                        .lease = ef_lease(f, id, 1),
                        .has_lease = true,
                        .delay_ms = 7000,
                        .has_delay = true};
    assert_int_equal(oq_engine_ack(f->engine, a, NULL, &ack), OQ_ACK_APPLIED);
    assert_string_equal(oq_engine_job_state(f->engine, id), "delayed");
    assert_int_equal(oq_engine_next_deadline(f->engine), f->time.now + 7000);
    f->time.now += 6999;
    oq_engine_tick(f->engine);
    assert_string_equal(oq_engine_job_state(f->engine, id), "delayed");
    f->time.now += 1;
    oq_engine_tick(f->engine);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[1].attempt, 2); /* the release used a try */
    assert_int_equal(s_stats(f).retried, 1);
}

static void test_return_keeps_the_attempt_and_skips_the_worker(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "hello");
    uint64_t noop = s_dispatch(f, "noop");
    oq_worker_t *a = ef_worker(f, 'a', 1); /* names no types: an older worker */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[0].id, id);
    oq_ack_msg_t ack = {.id = id,
                        .attempt = 1,
                        .outcome = OQ_OUTCOME_RETURN,
                        .credit = 1,
                        .error = oq_str("no handler"),
                        .lease = ef_lease(f, id, 1),
                        .has_lease = true};
    assert_int_equal(oq_engine_ack(f->engine, a, NULL, &ack), OQ_ACK_APPLIED);
    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, id, &v), 0);
    assert_int_equal(v.state, OQ_STATE_READY);
    assert_int_equal(v.attempt, 0);
    /* Stats say so: no connected worker takes the type, its job waits. */
    assert_int_equal(s_type(f, "hello").workers, 0);
    assert_int_equal(s_type(f, "hello").unhandled, 1);
    assert_int_equal(s_type(f, "noop").workers, 1);
    /* Not sent back to the worker that handed it back: it gets the noop. */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[1].id, noop);
    s_ack(f, a, noop, 1, OQ_OUTCOME_OK, NULL);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);
    /* Another worker runs it as its first attempt. */
    ef_worker(f, 'b', 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[2].id, id);
    assert_int_equal(f->sent[2].attempt, 1);
    assert_int_equal(f->sent[2].worker, 'b');
    assert_int_equal(s_stats(f).retried, 0);
    assert_int_equal(s_type(f, "hello").workers, 1);
    /* The worker that handed it back leaves: its refusal goes with it. */
    oq_engine_worker_remove(f->engine, &a, "test");
    assert_int_equal(s_type(f, "hello").workers, 1);
    assert_int_equal(s_type(f, "noop").workers, 1);
}

/* The summary by name counts the workers of each name as they come, pause
   and go; a name leaves with its last worker. */
typedef struct {
    char names[4][OQ_MAX_NAME_LEN + 1];
    uint32_t workers[4], unavailable[4];
    size_t count;
} s_names_seen_t;

static bool s_name_seen(void *ctx, const char *name, uint32_t workers, uint32_t unavailable)
{
    s_names_seen_t *seen = ctx;
    assert_true(seen->count < 4);
    snprintf(seen->names[seen->count], sizeof seen->names[0], "%s", name);
    seen->workers[seen->count] = workers;
    seen->unavailable[seen->count++] = unavailable;
    return true;
}

static s_names_seen_t s_names(ef_fixture_t *f)
{
    s_names_seen_t seen = {0};
    oq_engine_worker_names(f->engine, s_name_seen, &seen);
    assert_int_equal(seen.count, oq_engine_worker_names_count(f->engine));
    return seen;
}

static void test_workers_are_summarised_by_name(void **state)
{
    ef_fixture_t *f = *state;
    oq_worker_t *a1 = oq_engine_worker_add(f->engine, "1", 1, oq_str("host-a"), 1, NULL);
    oq_worker_t *b = oq_engine_worker_add(f->engine, "2", 1, oq_str("host-b"), 2, NULL);
    oq_worker_t *a2 = oq_engine_worker_add(f->engine, "3", 1, oq_str("host-a"), 3, NULL);
    oq_engine_worker_status(f->engine, a2, OQ_STATUS_UNAVAILABLE, 0, oq_str("db down"));
    oq_engine_worker_status(f->engine, a2, OQ_STATUS_UNAVAILABLE, 0, oq_str("db down"));
    s_names_seen_t seen = s_names(f);
    assert_int_equal(seen.count, 2);
    assert_string_equal(seen.names[0], "host-a");
    assert_int_equal(seen.workers[0], 2);
    assert_int_equal(seen.unavailable[0], 1);
    assert_string_equal(seen.names[1], "host-b");
    assert_int_equal(seen.workers[1], 1);
    assert_int_equal(seen.unavailable[1], 0);
    /* A paused worker that goes takes its pause with it. */
    oq_engine_worker_remove(f->engine, &a2, "test");
    seen = s_names(f);
    assert_int_equal(seen.workers[0], 1);
    assert_int_equal(seen.unavailable[0], 0);
    oq_engine_worker_status(f->engine, b, OQ_STATUS_UNAVAILABLE, 0, oq_str("db down"));
    oq_engine_worker_status(f->engine, b, OQ_STATUS_READY, 0, oq_str(""));
    oq_engine_worker_remove(f->engine, &a1, "test");
    seen = s_names(f);
    assert_int_equal(seen.count, 1);
    assert_string_equal(seen.names[0], "host-b");
    assert_int_equal(seen.unavailable[0], 0);
    oq_engine_worker_remove(f->engine, &b, "test");
    assert_int_equal(s_names(f).count, 0);
}

/* A worker that prefetched a job and hands it back unrun (stopping, or it
   waited too long behind another) marks the return held: no try used, and
   the worker keeps the type. */
static void test_held_return_keeps_the_attempt_and_the_type(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "hello");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    oq_ack_msg_t ack = {.id = id,
                        .attempt = 1,
                        .outcome = OQ_OUTCOME_RETURN,
                        .credit = 1,
                        .error = oq_str("held, and the worker is stopping"),
                        .lease = ef_lease(f, id, 1),
                        .has_lease = true,
                        .held = true};
    assert_int_equal(oq_engine_ack(f->engine, a, NULL, &ack), OQ_ACK_APPLIED);
    /* Straight back to the same worker, as its first attempt. */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[1].id, id);
    assert_int_equal(f->sent[1].attempt, 1);
    assert_int_equal(f->sent[1].worker, 'a');
    assert_int_equal(s_stats(f).retried, 0);
}

/* The database is down: the worker hands the job back (unavailable) and
   pauses (status unavailable). The job uses no try, goes in front of the
   queue for a worker that can run it, and the paused worker keeps its
   types: once it says ready and gives credit, it gets that type again. */
/* The view of worker 'a' (its identity is its name, one byte). */
static void s_view_of_a(void *ctx, const oq_worker_view_t *w)
{
    if (((const char *)w->identity)[0] == 'a')
        *(oq_worker_view_t *)ctx = *w;
}

static void test_unavailable_hands_back_without_a_try_and_keeps_the_type(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t first = s_dispatch(f, "grant_points");
    uint64_t second = s_dispatch(f, "grant_points");
    oq_worker_t *a = s_routed_worker(f, 'a', 1, "grant_points", NULL);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[0].id, first);
    oq_ack_msg_t ack = {.id = first,
                        .attempt = 1,
                        .outcome = OQ_OUTCOME_UNAVAILABLE,
                        .credit = 0,
                        .error = oq_str("grant_points: database unavailable"),
                        .lease = ef_lease(f, first, 1),
                        .has_lease = true};
    const char why[] = "cannot connect to the database: connection refused";
    oq_engine_worker_status(f->engine, a, OQ_STATUS_UNAVAILABLE, 250, oq_str(why));
    assert_int_equal(oq_engine_ack(f->engine, a, NULL, &ack), OQ_ACK_APPLIED);
    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, first, &v), 0);
    assert_int_equal(v.state, OQ_STATE_READY);
    assert_int_equal(v.attempt, 0);
    assert_int_equal(s_stats(f).returned, 1);
    assert_int_equal(s_stats(f).retried, 0);
    assert_int_equal(s_stats(f).failed, 0);

    /* The paused worker is shown so, with its error, and sent nothing. */
    oq_worker_view_t view;
    oq_engine_worker_each(f->engine, s_view_of_a, &view);
    assert_int_equal(view.status, OQ_STATUS_UNAVAILABLE);
    assert_int_equal(view.status_ms, 250);
    assert_string_equal(view.status_error, why);
    assert_int_equal(oq_engine_workers_unavailable(f->engine), 1);
    assert_int_equal(s_type(f, "grant_points").workers, 1); /* keeps the type */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);

    /* A status unavailable takes away credit a worker still had. */
    oq_engine_worker_credit(f->engine, a, 1);
    oq_engine_worker_status(f->engine, a, OQ_STATUS_UNAVAILABLE, 1250, oq_str(why));
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);

    /* Another worker takes the returned job first, as its first attempt. */
    s_routed_worker(f, 'b', 1, "grant_points", NULL);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[1].id, first);
    assert_int_equal(f->sent[1].attempt, 1);
    assert_int_equal(f->sent[1].worker, 'b');

    /* Back: ready again, and the same type is sent to it. */
    f->time.now += 1000;
    oq_engine_worker_status(f->engine, a, OQ_STATUS_READY, 0, oq_str(""));
    oq_engine_worker_credit(f->engine, a, 1);
    assert_int_equal(oq_engine_workers_unavailable(f->engine), 0);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[2].id, second);
    assert_int_equal(f->sent[2].worker, 'a');
    oq_engine_worker_each(f->engine, s_view_of_a, &view);
    assert_int_equal(view.status, OQ_STATUS_READY);
    assert_string_equal(view.status_error, "");
}

/* Of two overlapping runs the slower one wrote the effect; and each ack a
   worker resends after a reconnect is counted only once. */
static void test_results_counted_once_in_any_order(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "grant_points");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    oq_engine_pump(f->engine, ef_deliver, f);
    f->time.now += EF_RETRY_AFTER_MS;
    oq_engine_tick(f->engine);
    oq_worker_t *b = ef_worker(f, 'b', 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[1].attempt, 2);
    oq_ack_msg_t dup = {.id = id,
                        .attempt = 2,
                        .outcome = OQ_OUTCOME_OK,
                        .result = OQ_RESULT_ALREADY_APPLIED,
                        .lease = ef_lease(f, id, 2),
                        .has_lease = true};
    oq_ack_msg_t wrote = {.id = id,
                          .attempt = 1,
                          .outcome = OQ_OUTCOME_OK,
                          .result = OQ_RESULT_APPLIED,
                          .lease = ef_lease(f, id, 1),
                          .has_lease = true};
    assert_int_equal(oq_engine_ack(f->engine, b, NULL, &dup), OQ_ACK_APPLIED);
    assert_int_equal(oq_engine_ack(f->engine, a, NULL, &wrote), OQ_ACK_IGNORED);
    for (int resend = 0; resend < 3; resend++) {
        assert_int_equal(oq_engine_ack(f->engine, NULL, NULL, &dup), OQ_ACK_IGNORED);
        assert_int_equal(oq_engine_ack(f->engine, NULL, NULL, &wrote), OQ_ACK_IGNORED);
    }
    oq_type_stats_t t = s_type(f, "grant_points");
    assert_int_equal(t.done, 1);
    assert_int_equal(t.applied, 1);
    assert_int_equal(t.duplicates, 1);
    assert_int_equal(s_stats(f).ignored_acks, 7);
}

/* ---- the failed store's operations and cancelling ----------------------- */

/* Fail job id, leased to w on attempt 1, now. */
static void s_fail_now(ef_fixture_t *f, oq_worker_t *w, uint64_t id)
{
    assert_int_equal(s_ack(f, w, id, 1, OQ_OUTCOME_FAIL, "bad"), OQ_ACK_APPLIED);
}

/* The list is ordered by failure time across queues, not by queue or by
   id, and a --limit N page is the oldest N. Jobs failed in the same
   millisecond are ordered by id, and a cursor holding (failed_at, id)
   pages on correctly after the job it names has left the store. */
static void test_failed_listed_by_failure_time_across_queues(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t a1 = s_dispatch_to(f, "fail", "alpha", 0, 1);
    uint64_t a2 = s_dispatch_to(f, "fail", "alpha", 0, 1);
    uint64_t b1 = s_dispatch_to(f, "fail", "beta", 0, 1);
    uint64_t b2 = s_dispatch_to(f, "fail", "beta", 0, 1);
    uint64_t b3 = s_dispatch_to(f, "fail", "beta", 0, 1);
    oq_worker_t *w = ef_worker(f, 'a', 5);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 5);
    /* Failure order: b2, a2, then b3 and a1 in the same ms, then b1. */
    s_fail_now(f, w, b2);
    f->time.now += 10;
    s_fail_now(f, w, a2);
    f->time.now += 10;
    s_fail_now(f, w, b3);
    s_fail_now(f, w, a1);
    f->time.now += 10;
    s_fail_now(f, w, b1);
    uint64_t want[] = {b2, a2, a1, b3, b1}; /* a1 < b3: the tie goes by id */
    s_seen_t all = {0};
    bool more = true;
    assert_int_equal(oq_engine_failed_page(f->engine, NULL, NULL, 8, s_collect, &all, &more), 5);
    assert_false(more);
    assert_int_equal(all.n, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(all.ids[i], want[i]);
    /* --limit 2: the oldest two. */
    s_seen_t two = {0};
    assert_int_equal(oq_engine_failed_page(f->engine, NULL, NULL, 2, s_collect, &two, &more), 5);
    assert_true(more);
    assert_int_equal(two.n, 2);
    assert_int_equal(two.ids[0], b2);
    assert_int_equal(two.ids[1], a2);
    /* The next page from a cursor inside the tie, after its job is gone. */
    oq_failed_cursor_t cursor;
    assert_int_equal(oq_engine_failed_cursor(f->engine, a1, &cursor), 0);
    oq_refusal_t why;
    char reason[256];
    assert_int_equal(oq_engine_forget(f->engine, a1, &why, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_failed_cursor(f->engine, a1, &cursor) == 0, false);
    s_seen_t rest = {0};
    assert_int_equal(oq_engine_failed_page(f->engine, NULL, &cursor, 8, s_collect, &rest, &more),
                     4);
    assert_int_equal(rest.n, 2);
    assert_int_equal(rest.ids[0], b3);
    assert_int_equal(rest.ids[1], b1);
    /* One queue's page keeps the same order. */
    s_seen_t beta = {0};
    assert_int_equal(oq_engine_failed_page(f->engine, "beta", NULL, 8, s_collect, &beta, &more), 3);
    assert_int_equal(beta.ids[0], b2);
    assert_int_equal(beta.ids[1], b3);
    assert_int_equal(beta.ids[2], b1);
    assert_int_equal(oq_engine_oldest_failed_ms(f->engine), EF_WALL_BASE_MS + f->time.now - 30);
}

static void test_forget_deletes_a_failed_job_and_nothing_else(void **state)
{
    ef_fixture_t *f = *state;
    s_events_t e = {.count = 0};
    oq_engine_hooks_t hooks = {.changed = s_record, .ctx = &e};
    oq_engine_set_hooks(f->engine, &hooks);
    uint64_t failed = s_dispatch(f, "fail");
    oq_worker_t *w = ef_worker(f, 'a', 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    s_fail_now(f, w, failed);
    uint64_t waiting = s_dispatch(f, "noop");
    uint64_t bytes = oq_engine_bytes(f->engine);

    oq_refusal_t why;
    char reason[256];
    assert_int_equal(oq_engine_forget(f->engine, waiting, &why, reason, sizeof reason), -1);
    assert_int_equal(why, OQ_REFUSED_STATE);
    assert_non_null(strstr(reason, "is ready"));
    assert_string_equal(oq_engine_job_state(f->engine, waiting), "ready");

    assert_int_equal(oq_engine_forget(f->engine, failed, &why, reason, sizeof reason), 0);
    assert_null(oq_engine_job_state(f->engine, failed));
    assert_int_equal(s_stats(f).failed, 0);
    assert_int_equal(s_stats(f).done, 0); /* forgetting is not completing */
    assert_true(oq_engine_bytes(f->engine) < bytes);
    assert_int_equal(e.event[e.count - 1], OQ_EVENT_FORGOTTEN);

    assert_int_equal(oq_engine_forget(f->engine, failed, &why, reason, sizeof reason), -1);
    assert_int_equal(why, OQ_REFUSED_UNKNOWN);
    char name[32];
    snprintf(name, sizeof name, "job %llu ", (unsigned long long)failed);
    assert_non_null(strstr(reason, name));
    assert_int_equal(oq_engine_forget(f->engine, 9999, &why, reason, sizeof reason), -1);
    assert_int_equal(why, OQ_REFUSED_UNKNOWN);
    assert_non_null(strstr(reason, "job 9999 is unknown"));
    /* An ack of the forgotten job's delivery is attributed, not unknown. */
    s_ack(f, w, failed, 1, OQ_OUTCOME_OK, NULL);
    assert_int_equal(oq_engine_unknown_acks(f->engine), 0);
}

static void test_flush_and_requeue_all_by_queue(void **state)
{
    ef_fixture_t *f = *state;
    s_events_t e = {.count = 0};
    oq_engine_hooks_t hooks = {.changed = s_record, .ctx = &e};
    uint64_t ids[5];
    const char *queues[5] = {"alpha", "beta", "alpha", "beta", "beta"};
    for (int i = 0; i < 5; i++)
        ids[i] = s_dispatch_to(f, "fail", queues[i], 0, 1);
    uint64_t waiting = s_dispatch_to(f, "noop", "alpha", 60000, 0);
    oq_worker_t *w = ef_worker(f, 'a', 5);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 5);
    for (int i = 0; i < 5; i++)
        s_fail_now(f, w, ids[i]);
    oq_engine_set_hooks(f->engine, &hooks);
    uint64_t old_lease = ef_lease(f, ids[1], 1);

    assert_int_equal(s_requeue_all(f, "beta"), 3);
    assert_int_equal(e.count, 3);
    for (size_t i = 0; i < e.count; i++)
        assert_int_equal(e.event[i], OQ_EVENT_REQUEUED);
    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, ids[1], &v), 0);
    assert_int_equal(v.state, OQ_STATE_READY);
    assert_int_equal(v.attempt, 0);
    /* A new generation: the token of the delivery before the requeue is dead. */
    oq_ack_msg_t old = {.id = ids[1],
                        .attempt = 1,
                        .outcome = OQ_OUTCOME_OK,
                        .lease = old_lease,
                        .has_lease = true};
    assert_int_equal(oq_engine_ack(f->engine, NULL, NULL, &old), OQ_ACK_FENCED);
    assert_string_equal(oq_engine_job_state(f->engine, ids[0]), "failed");
    assert_int_equal(s_requeue_all(f, "nowhere"), 0);

    assert_int_equal(s_flush(f, NULL), 2);
    assert_int_equal(e.event[e.count - 1], OQ_EVENT_FORGOTTEN);
    assert_null(oq_engine_job_state(f->engine, ids[0]));
    assert_null(oq_engine_job_state(f->engine, ids[2]));
    assert_string_equal(oq_engine_job_state(f->engine, waiting), "delayed");
    assert_int_equal(s_flush(f, NULL), 0);
    /* The requeued ones run again. */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 3);
}

/* prune: what failed more than the age ago goes, of one queue or all, at
   most limit per call with "more" exact; the age is strict (a job exactly
   that old stays); each deletion is a FORGOTTEN for the journal; a
   deletion that cannot be recorded stops the walk and changes nothing. */
static uint64_t s_prune(ef_fixture_t *f, const char *queue, int64_t older_than_ms, size_t limit,
                        bool *more)
{
    uint64_t count = 99;
    assert_int_equal(oq_engine_prune_failed(f->engine, queue, older_than_ms, limit, &count, more),
                     0);
    return count;
}

static void test_prune_failed_by_age_in_bounded_steps(void **state)
{
    ef_fixture_t *f = *state;
    s_events_t e = {.count = 0};
    oq_engine_hooks_t hooks = {.changed = s_record, .ctx = &e};
    const char *queues[5] = {"alpha", "alpha", "beta", "alpha", "beta"};
    uint64_t ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = s_dispatch_to(f, "fail", queues[i], 0, 1);
    oq_worker_t *w = ef_worker(f, 'a', 5);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 5);
    /* 0, 1, 2 fail at 0 s; 3 and 4 at 5 s (within their lease). */
    for (int i = 0; i < 3; i++)
        s_fail_now(f, w, ids[i]);
    f->time.now = 5000;
    s_fail_now(f, w, ids[3]);
    s_fail_now(f, w, ids[4]);
    oq_engine_set_hooks(f->engine, &hooks);
    f->time.now = 6000;
    bool more = true;

    /* Older than 3 s, of beta: job 2 alone. */
    assert_int_equal(s_prune(f, "beta", 3000, OQ_MAX_PRUNE_PER_CALL, &more), 1);
    assert_false(more);
    assert_int_equal(e.count, 1);
    assert_int_equal(e.event[0], OQ_EVENT_FORGOTTEN);
    assert_null(oq_engine_job_state(f->engine, ids[2]));
    assert_string_equal(oq_engine_job_state(f->engine, ids[4]), "failed");
    assert_int_equal(s_prune(f, "nowhere", 3000, OQ_MAX_PRUNE_PER_CALL, &more), 0);
    assert_false(more);

    /* Of every queue, one per call: more says another is due, exactly. */
    assert_int_equal(s_prune(f, NULL, 3000, 1, &more), 1);
    assert_true(more);
    assert_int_equal(s_prune(f, NULL, 3000, 1, &more), 1);
    assert_false(more);
    assert_null(oq_engine_job_state(f->engine, ids[0]));
    assert_null(oq_engine_job_state(f->engine, ids[1]));
    assert_int_equal(s_prune(f, NULL, 3000, 1, &more), 0);
    assert_false(more);
    assert_int_equal(e.count, 3);

    /* More than the age, not as old as it: 3 and 4 are exactly 1 s old. */
    assert_int_equal(s_prune(f, NULL, 1000, OQ_MAX_PRUNE_PER_CALL, &more), 0);
    assert_string_equal(oq_engine_job_state(f->engine, ids[3]), "failed");

    /* A deletion the journal cannot keep: refused, both jobs stay. */
    f->time.now = 6001;
    e.refuse = 1u << OQ_EVENT_FORGOTTEN;
    uint64_t count = 99;
    assert_int_equal(oq_engine_prune_failed(f->engine, NULL, 1000, 5, &count, &more), -1);
    assert_int_equal(count, 0);
    assert_string_equal(oq_engine_job_state(f->engine, ids[3]), "failed");
    assert_string_equal(oq_engine_job_state(f->engine, ids[4]), "failed");
    e.refuse = 0;
    assert_int_equal(s_prune(f, NULL, 1000, OQ_MAX_PRUNE_PER_CALL, &more), 2);
    assert_int_equal(oq_engine_queue_count(f->engine), 2);
    oq_queue_stats_t s;
    for (size_t q = 0; q < 2; q++) {
        oq_engine_queue_stats(f->engine, q, &s);
        assert_int_equal(s.failed, 0);
    }
    /* An ack of a pruned job's delivery is attributed, not unknown. */
    s_ack(f, w, ids[3], 1, OQ_OUTCOME_OK, NULL);
    assert_int_equal(oq_engine_unknown_acks(f->engine), 0);
}

/* A failed list restored from a snapshot is in the snapshot's order, not
   the failures': the walk finds an old job behind a young one. */
static void test_prune_failed_finds_old_jobs_behind_young_ones(void **state)
{
    ef_fixture_t *f = *state;
    static const uint8_t empty_map = 0x80;
    oq_job_msg_t job = {.type = oq_str("fail"),
                        .queue = oq_str("default"),
                        .payload = &empty_map,
                        .payload_len = 1,
                        .max_tries = 1,
                        .has_max_tries = true,
                        .timeout_ms = EF_TIMEOUT_MS,
                        .has_timeout = true};
    char reason[128];
    int64_t wall = oq_clock_wall_ms(&f->clock);
    const int64_t age_ms[4] = {1000, 60000, 2000, 90000}; /* young, old, young, old */
    for (uint64_t id = 1; id <= 4; id++) {
        job.id = id;
        assert_int_equal(oq_engine_restore(f->engine, &job, 0, reason, sizeof reason), 0);
        assert_int_equal(oq_engine_restore_failed(f->engine, id, 1, "bad", wall - age_ms[id - 1]),
                         0);
    }
    bool more;
    assert_int_equal(s_prune(f, NULL, 30000, 1, &more), 1);
    assert_true(more);
    assert_int_equal(s_prune(f, NULL, 30000, 1, &more), 1);
    assert_false(more);
    assert_null(oq_engine_job_state(f->engine, 2));
    assert_null(oq_engine_job_state(f->engine, 4));
    assert_string_equal(oq_engine_job_state(f->engine, 1), "failed");
    assert_string_equal(oq_engine_job_state(f->engine, 3), "failed");
}

static void test_cancel_ready_and_delayed_refuses_leased(void **state)
{
    ef_fixture_t *f = *state;
    s_events_t e = {.count = 0};
    oq_engine_hooks_t hooks = {.changed = s_record, .ctx = &e};
    oq_engine_set_hooks(f->engine, &hooks);
    uint64_t leased = s_dispatch(f, "noop");
    oq_worker_t *w = ef_worker(f, 'a', 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    uint64_t ready = s_dispatch(f, "noop");
    uint64_t delayed = s_dispatch_to(f, "noop", "default", 60000, 0);
    uint64_t failed = s_dispatch_to(f, "fail", "default", 0, 1);

    oq_refusal_t why;
    char reason[256];
    assert_int_equal(oq_engine_cancel(f->engine, ready, &why, reason, sizeof reason), 0);
    assert_int_equal(e.event[e.count - 1], OQ_EVENT_CANCELLED);
    assert_int_equal(oq_engine_cancel(f->engine, delayed, &why, reason, sizeof reason), 0);
    assert_null(oq_engine_job_state(f->engine, ready));
    assert_null(oq_engine_job_state(f->engine, delayed));
    oq_queue_stats_t st = s_stats(f);
    assert_int_equal(st.cancelled, 2);
    assert_int_equal(st.ready, 1); /* the failing one, not yet run */
    assert_int_equal(st.delayed, 0);
    assert_int_equal(st.done, 0);
    /* The lease is the only deadline left: the delayed job's timer is gone. */
    assert_int_equal(oq_engine_next_deadline(f->engine), f->time.now + EF_RETRY_AFTER_MS);

    assert_int_equal(oq_engine_cancel(f->engine, leased, &why, reason, sizeof reason), -1);
    assert_int_equal(why, OQ_REFUSED_STATE);
    assert_non_null(strstr(reason, "is leased"));
    assert_non_null(strstr(reason, "effect may be under way"));
    assert_string_equal(oq_engine_job_state(f->engine, leased), "leased");
    s_ack(f, w, leased, 1, OQ_OUTCOME_OK, NULL);
    assert_int_equal(oq_engine_cancel(f->engine, leased, &why, reason, sizeof reason), -1);
    assert_int_equal(why, OQ_REFUSED_UNKNOWN);

    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    s_fail_now(f, w, failed);
    assert_int_equal(oq_engine_cancel(f->engine, failed, &why, reason, sizeof reason), -1);
    assert_int_equal(why, OQ_REFUSED_STATE);
    assert_non_null(strstr(reason, "is failed"));
    assert_non_null(strstr(reason, "failed forget"));
    assert_int_equal(s_stats(f).cancelled, 2);
}

/* clear: the jobs of one queue that have not started (ready, delayed,
   waiting behind an overlap key) are cancelled, at most limit per call
   with "more" exact, each a CANCELLED for the journal; the leased job and
   the other queue are untouched; a cancel the journal cannot keep stops
   the walk with nothing changed. */
static uint64_t s_clear(ef_fixture_t *f, const char *queue, size_t limit, bool *more)
{
    uint64_t count = 99;
    assert_int_equal(oq_engine_clear(f->engine, queue, limit, &count, more), 0);
    return count;
}

static void test_clear_cancels_a_queues_waiting_jobs_in_bounded_steps(void **state)
{
    ef_fixture_t *f = *state;
    s_events_t e = {.count = 0};
    oq_engine_hooks_t hooks = {.changed = s_record, .ctx = &e};
    oq_job_msg_t keyed = EF_JOB(.queue = "alpha", .overlap_key = "order-7");
    uint64_t leased = ef_dispatch(f, &keyed);
    uint64_t waiting = ef_dispatch(f, &keyed);
    oq_worker_t *w = ef_worker(f, 'a', 2);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    ef_expect(f, leased, "leased", 1);
    uint64_t ready[3], delayed[2];
    for (int i = 0; i < 3; i++)
        ready[i] = s_dispatch_to(f, i == 1 ? "other" : "noop", "alpha", 0, 0);
    for (int i = 0; i < 2; i++)
        delayed[i] = s_dispatch_to(f, "noop", "alpha", 60000 * (i + 1), 0);
    uint64_t beta_ready = s_dispatch_to(f, "noop", "beta", 0, 0);
    uint64_t beta_delayed = s_dispatch_to(f, "noop", "beta", 60000, 0);
    oq_engine_set_hooks(f->engine, &hooks);

    /* A journal that cannot keep a cancel: refused, nothing changed. */
    e.refuse = 1u << OQ_EVENT_CANCELLED;
    uint64_t count = 99;
    bool more = false;
    assert_int_equal(oq_engine_clear(f->engine, "alpha", 5, &count, &more), -1);
    assert_int_equal(count, 0);
    assert_string_equal(oq_engine_job_state(f->engine, ready[0]), "ready");
    e.refuse = 0;

    /* Two per call: more while any of the six is left. */
    assert_int_equal(s_clear(f, "alpha", 2, &more), 2);
    assert_true(more);
    assert_int_equal(s_clear(f, "alpha", 2, &more), 2);
    assert_true(more);
    assert_int_equal(s_clear(f, "alpha", OQ_MAX_CLEAR_PER_CALL, &more), 2);
    assert_false(more);
    assert_int_equal(e.count, 6);
    for (size_t i = 0; i < e.count; i++)
        assert_int_equal(e.event[i], OQ_EVENT_CANCELLED);
    assert_null(oq_engine_job_state(f->engine, waiting));
    for (int i = 0; i < 3; i++)
        assert_null(oq_engine_job_state(f->engine, ready[i]));
    for (int i = 0; i < 2; i++)
        assert_null(oq_engine_job_state(f->engine, delayed[i]));
    assert_int_equal(s_clear(f, "alpha", OQ_MAX_CLEAR_PER_CALL, &more), 0);
    assert_false(more);
    assert_int_equal(s_clear(f, "nowhere", OQ_MAX_CLEAR_PER_CALL, &more), 0);
    assert_false(more);

    /* The leased job still runs to its end; beta is untouched. */
    ef_expect(f, leased, "leased", 1);
    assert_string_equal(oq_engine_job_state(f->engine, beta_ready), "ready");
    assert_string_equal(oq_engine_job_state(f->engine, beta_delayed), "delayed");
    oq_queue_stats_t alpha, beta;
    oq_engine_queue_stats(f->engine, 0, &alpha);
    oq_engine_queue_stats(f->engine, 1, &beta);
    assert_string_equal(alpha.name, "alpha");
    assert_int_equal(alpha.cancelled, 6);
    assert_int_equal(alpha.ready + alpha.delayed, 0);
    assert_int_equal(alpha.leased, 1);
    assert_int_equal(beta.cancelled, 0);
    assert_int_equal(beta.ready, 1);
    assert_int_equal(beta.delayed, 1);
    assert_int_equal(s_ack(f, w, leased, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_APPLIED);
    assert_null(oq_engine_job_state(f->engine, leased));
    oq_engine_queue_stats(f->engine, 0, &alpha);
    assert_int_equal(alpha.done, 1);
}

/* What the retention floor is made of: each queue's lease length, the
   largest budget and backoff among the defaults and the jobs it holds, and
   the held job whose own runs span longest (named when a prune is refused). */
static void test_horizons_take_the_largest_budget_held(void **state)
{
    ef_fixture_t *f = *state;
    char reason[256];
    assert_int_equal(oq_engine_queue_config(f->engine, "slow", 60000, 0, reason, sizeof reason), 0);
    oq_job_msg_t job =
        EF_JOB(.type = "noop", .queue = "slow", .max_tries = 7, .backoff_ms = {1000, 300000, 2000});
    uint64_t id = ef_dispatch(f, &job);
    s_dispatch(f, "noop");
    assert_int_equal(oq_engine_queue_count(f->engine), 2);
    oq_queue_horizon_t h[2];
    oq_engine_horizons(f->engine, h);
    assert_string_equal(h[0].name, "slow");
    assert_int_equal(h[0].retry_after_ms, 60000);
    assert_int_equal(h[0].max_tries, 7);
    assert_int_equal(h[0].backoff_ms, 300000);
    assert_string_equal(h[1].name, "default");
    assert_int_equal(h[1].retry_after_ms, EF_RETRY_AFTER_MS);
    assert_int_equal(h[1].max_tries, OQ_DEFAULT_MAX_TRIES);
    assert_int_equal(h[1].backoff_ms, 1000);
    /* The job that sets a queue's term is named; a queue of default jobs names none. */
    assert_int_equal(h[0].job.id, id);
    assert_string_equal(h[0].job.type, "noop");
    assert_int_equal(h[0].job.max_tries, 7);
    assert_int_equal(h[0].job.attempt, 0);
    assert_int_equal(h[0].job.backoff_ms, 300000);
    assert_int_equal(h[1].job.id, 0);
    oq_queue_horizon_t d;
    oq_engine_default_horizon(f->engine, &d);
    assert_string_equal(d.name, "*");
    assert_int_equal(d.retry_after_ms, EF_RETRY_AFTER_MS);
    /* Once the job with the large budget is gone, so is its share. */
    oq_refusal_t why;
    assert_int_equal(oq_engine_cancel(f->engine, id, &why, reason, sizeof reason), 0);
    oq_engine_horizons(f->engine, h);
    assert_int_equal(h[0].max_tries, OQ_DEFAULT_MAX_TRIES);
    assert_int_equal(h[0].backoff_ms, 1000);
    assert_int_equal(h[0].job.id, 0);
}

/* ---- the review store ---- */

static void s_collect_ids(void *ctx, const oq_job_view_t *job)
{
    uint64_t *ids = ctx;
    ids[ids[0] + 1] = job->id;
    ids[0]++;
}

/* A job whose handler reports review leaves its queue for the review store,
   uses no more tries and is never retried on its own; a person's decision
   takes it out (done, retry with a fresh budget, fail with the note), is
   remembered, and a second decision on it is refused naming the first. */
static void test_review_holds_the_job_until_resolved(void **state)
{
    ef_fixture_t *f = *state;
    s_events_t e = {.count = 0};
    oq_engine_hooks_t hooks = {.changed = s_record, .ctx = &e};
    oq_engine_set_hooks(f->engine, &hooks);
    uint64_t a = s_dispatch(f, "ship"), b = s_dispatch(f, "ship"), c = s_dispatch(f, "ship");
    oq_worker_t *w = ef_worker(f, 'a', 10);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 3);
    assert_int_equal(s_ack(f, w, a, 1, OQ_OUTCOME_REVIEW, "outcome unknown: timed out"),
                     OQ_ACK_APPLIED);
    assert_int_equal(s_ack(f, w, b, 1, OQ_OUTCOME_REVIEW, "carrier says key reused"),
                     OQ_ACK_APPLIED);
    assert_int_equal(s_ack(f, w, c, 1, OQ_OUTCOME_REVIEW, "unknown"), OQ_ACK_APPLIED);
    oq_queue_stats_t s = s_stats(f);
    assert_int_equal(s.review, 3);
    assert_int_equal(s.ready + s.delayed + s.leased + s.failed, 0);
    assert_string_equal(oq_engine_job_state(f->engine, a), "review");
    /* Time passes: nothing comes back on its own. */
    f->time.now += 10 * EF_RETRY_AFTER_MS;
    oq_engine_tick(f->engine);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);
    oq_job_view_t view;
    assert_int_equal(oq_engine_job_view(f->engine, a, &view), 0);
    assert_string_equal(view.error, "outcome unknown: timed out");
    assert_true(view.failed_at_ms > 0);

    uint64_t ids[8] = {0};
    bool more = false;
    assert_int_equal(oq_engine_review_page(f->engine, NULL, 0, 2, s_collect_ids, ids, &more), 3);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], a);
    assert_int_equal(ids[2], b);
    assert_true(more);

    char reason[512];
    assert_int_equal(oq_engine_review_resolve(f->engine, a, OQ_REVIEW_DONE, "shipped: SHP-000001",
                                              &s_why, reason, sizeof reason),
                     0);
    assert_null(oq_engine_job_state(f->engine, a));
    assert_int_equal(oq_engine_review_resolve(f->engine, b, OQ_REVIEW_FAIL, "order cancelled",
                                              &s_why, reason, sizeof reason),
                     0);
    assert_int_equal(oq_engine_job_view(f->engine, b, &view), 0);
    assert_int_equal(view.state, OQ_STATE_FAILED);
    assert_non_null(strstr(view.error, "order cancelled"));
    assert_non_null(strstr(view.error, "carrier says key reused"));
    assert_int_equal(oq_engine_review_resolve(f->engine, c, OQ_REVIEW_RETRY, NULL, &s_why, reason,
                                              sizeof reason),
                     0);
    assert_int_equal(oq_engine_job_view(f->engine, c, &view), 0);
    assert_int_equal(view.state, OQ_STATE_READY);
    assert_int_equal(view.attempt, 0);
    s = s_stats(f);
    assert_int_equal(s.review, 0);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.ready, 1);

    /* Resolved already, or never in review: refused, naming the job. */
    assert_int_equal(oq_engine_review_resolve(f->engine, a, OQ_REVIEW_RETRY, "again", &s_why,
                                              reason, sizeof reason),
                     -1);
    assert_non_null(strstr(reason, "resolved already (done: shipped: SHP-000001)"));
    assert_int_equal(s_why, OQ_REFUSED_STATE);
    char want[64];
    snprintf(want, sizeof want, "job %llu", (unsigned long long)a);
    assert_non_null(strstr(reason, want));
    assert_int_equal(oq_engine_review_resolve(f->engine, 999, OQ_REVIEW_DONE, NULL, &s_why, reason,
                                              sizeof reason),
                     -1);
    assert_non_null(strstr(reason, "job 999 is not in review and has no resolution on record"));
    assert_int_equal(s_why, OQ_REFUSED_UNKNOWN);

    const oq_resolution_t *r = oq_engine_review_resolution(f->engine, b);
    assert_non_null(r);
    assert_int_equal(r->action, OQ_REVIEW_FAIL);
    assert_string_equal(r->note, "order cancelled");
    assert_string_equal(r->reason, "carrier says key reused");
    assert_string_equal(r->type, "ship");
    assert_int_equal(oq_engine_review_resolved_count(f->engine), 3);

    /* The observer heard each move into the store and each decision. */
    size_t reviews = 0, resolved = 0;
    for (size_t i = 0; i < e.count; i++) {
        reviews += e.event[i] == OQ_EVENT_REVIEW;
        resolved += e.event[i] == OQ_EVENT_RESOLVED;
    }
    assert_int_equal(reviews, 3);
    assert_int_equal(resolved, 3);

    /* The retried job goes to review again and may be resolved again. */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(s_ack(f, w, c, 1, OQ_OUTCOME_REVIEW, "still unknown"), OQ_ACK_APPLIED);
    assert_int_equal(oq_engine_review_resolve(f->engine, c, OQ_REVIEW_DONE, "found it", &s_why,
                                              reason, sizeof reason),
                     0);
}

/* An ok from an earlier delivery proves the effect: the job leaves review as
   resolved done, and the decision says so. */
static void test_late_ok_resolves_a_review_as_done(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "ship");
    oq_worker_t *w = ef_worker(f, 'a', 1), *v = ef_worker(f, 'b', 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    f->time.now += EF_RETRY_AFTER_MS;
    oq_engine_tick(f->engine); /* lease ran out: redelivered as attempt 2 */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(s_ack(f, w, id, 2, OQ_OUTCOME_REVIEW, "timed out"), OQ_ACK_APPLIED);
    assert_string_equal(oq_engine_job_state(f->engine, id), "review");
    assert_int_equal(s_ack(f, v, id, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_LATE);
    assert_null(oq_engine_job_state(f->engine, id));
    const oq_resolution_t *r = oq_engine_review_resolution(f->engine, id);
    assert_non_null(r);
    assert_int_equal(r->action, OQ_REVIEW_DONE);
    assert_non_null(strstr(r->note, "earlier delivery (attempt 1)"));
    assert_int_equal(s_stats(f).review, 0);
}

/* Replay: a review record puts a restored job in review, a resolution
   record of a job in review resolves it, and one of a job not held is only
   remembered. */
static void test_restore_review_and_resolutions(void **state)
{
    ef_fixture_t *f = *state;
    oq_job_msg_t job = EF_JOB(.id = 5, .type = "ship", .max_tries = 3, .timeout_ms = EF_TIMEOUT_MS);
    char reason[128];
    assert_int_equal(oq_engine_restore(f->engine, &job, 0, reason, sizeof reason), 0);
    job.id = 6;
    assert_int_equal(oq_engine_restore(f->engine, &job, 0, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_restore_leased(f->engine, 5, 2), 0);
    assert_int_equal(oq_engine_restore_review(f->engine, 5, 2, "unknown", 1234), 0);
    assert_int_equal(oq_engine_restore_review(f->engine, 6, 1, "unknown too", 1235), 0);
    assert_int_equal(oq_engine_restore_review(f->engine, 6, 1, "twice", 1236), -1);
    oq_resolution_t r = {.id = 6,
                         .action = OQ_REVIEW_FAIL,
                         .attempt = 1,
                         .reviewed_at_ms = 1235,
                         .resolved_at_ms = 2000,
                         .type = "ship",
                         .queue = "default",
                         .reason = "unknown too",
                         .note = "gave up"};
    assert_int_equal(oq_engine_restore_resolution(f->engine, &r), 0);
    r.id = 77; /* left the store before a snapshot */
    r.action = OQ_REVIEW_DONE;
    assert_int_equal(oq_engine_restore_resolution(f->engine, &r), 0);
    oq_queue_stats_t s = s_stats(f);
    assert_int_equal(s.review, 1);
    assert_int_equal(s.failed, 1);
    assert_string_equal(oq_engine_job_state(f->engine, 5), "review");
    assert_string_equal(oq_engine_job_state(f->engine, 6), "failed");
    assert_null(oq_engine_job_state(f->engine, 77));
    assert_int_equal(oq_engine_review_resolution(f->engine, 77)->action, OQ_REVIEW_DONE);
    assert_int_equal(oq_engine_review_resolve(f->engine, 77, OQ_REVIEW_DONE, NULL, &s_why, reason,
                                              sizeof reason),
                     -1);
    assert_non_null(strstr(reason, "resolved already"));
}

/* The counters of the metrics: a lease that runs out, a worker reaped for
   its silence, and the dispatch-to-done time of a job acked ok (restored
   jobs are not timed: their dispatch was in another run). */
static void test_metrics_count_expiries_deaths_and_latency(void **state)
{
    ef_fixture_t *f = *state;
    f->time.now = 1000;
    uint64_t quick = s_dispatch(f, "noop");
    uint64_t slow = s_dispatch(f, "noop");
    oq_job_msg_t old = EF_JOB(.id = 500, .type = "noop");
    char reason[128];
    assert_int_equal(oq_engine_restore(f->engine, &old, 0, reason, sizeof reason), 0);
    oq_worker_t *a = ef_worker(f, 'a', 3);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 3);

    f->time.now = 1000 + 120;
    assert_int_equal(s_ack(f, a, quick, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_APPLIED);
    assert_int_equal(s_ack(f, a, 500, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_APPLIED);
    const oq_histogram_t *h = oq_engine_queue_latency(f->engine, 0);
    assert_int_equal(h->count, 1); /* the restored job is not timed */
    assert_int_equal(h->sum_us, 120000);
    assert_int_equal(oq_engine_queue_expired(f->engine, 0), 0);

    f->time.now = 1000 + EF_RETRY_AFTER_MS;
    assert_int_equal(oq_engine_tick(f->engine), 1);
    assert_string_equal(oq_engine_job_state(f->engine, slow), "ready");
    assert_int_equal(oq_engine_queue_expired(f->engine, 0), 1);

    assert_int_equal(oq_engine_workers_dead(f->engine), 0);
    f->time.now += 10000;
    assert_int_equal(oq_engine_reap_workers(f->engine, 5000), 1);
    assert_int_equal(oq_engine_workers_dead(f->engine), 1);
    /* A worker that leaves is not dead. */
    oq_worker_t *b = ef_worker(f, 'b', 1);
    oq_engine_worker_remove(f->engine, &b, "bye");
    assert_int_equal(oq_engine_workers_dead(f->engine), 1);
}

/* A dispatch_id seen within the window gets the first job's id back, even
   once that job is done and while the broker is full; after the window it
   is a new dispatch. Counted in the dispatch stats. */
static void test_dispatch_id_returns_the_first_job_for_its_window(void **state)
{
    ef_fixture_t *f = *state;
    oq_job_msg_t job = EF_JOB(.type = "grant", .dispatch_id = "order-7:grant");
    uint64_t first = 0, again = 0;
    oq_err_t code;
    char reason[256];
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &first, &code, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &again, &code, reason, sizeof reason), 0);
    assert_int_equal(again, first);
    assert_int_equal(oq_engine_job_count(f->engine), 1);
    assert_int_equal(oq_engine_dispatch_ids(f->engine), 1);
    assert_int_equal(oq_engine_dedupe_hits(f->engine), 1);

    /* Done: the id still maps to it. */
    oq_worker_t *w = ef_worker(f, 'a', 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(s_ack(f, w, first, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_APPLIED);
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &again, &code, reason, sizeof reason), 0);
    assert_int_equal(again, first);

    /* Full: a resend is still answered, a new dispatch is refused. */
    while (oq_engine_job_count(f->engine) < 100)
        s_dispatch(f, "filler");
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &again, &code, reason, sizeof reason), 0);
    assert_int_equal(again, first);
    oq_job_msg_t other = job;
    other.dispatch_id = oq_str("order-8:grant");
    assert_int_equal(oq_engine_dispatch(f->engine, &other, &again, &code, reason, sizeof reason),
                     -1);
    assert_int_equal(code, OQ_ERR_FULL);
    assert_int_equal(oq_engine_dispatch_ids(f->engine), 1); /* a refused one is not kept */

    /* Past the window: forgotten at the next tick. */
    f->time.now += OQ_DEFAULT_DEDUPE_WINDOW_MS;
    oq_engine_tick(f->engine);
    assert_int_equal(oq_engine_dispatch_ids(f->engine), 0);
    assert_int_equal(oq_engine_dedupe_hits(f->engine), 3);
}

/* The observer cannot record a change (the journal out of memory). What a
   producer or an operator asked for is refused with nothing changed, so
   that no reply promises what a restart would lose; what a worker or a
   deadline reports has happened, and stands. */
static void test_unrecorded_changes_are_refused_and_change_nothing(void **state)
{
    ef_fixture_t *f = *state;
    s_events_t e = {.count = 0};
    oq_engine_hooks_t hooks = {.changed = s_record, .ctx = &e};
    oq_engine_set_hooks(f->engine, &hooks);
    oq_job_msg_t job = EF_JOB(.type = "noop", .dispatch_id = "order-1");
    uint64_t id = 0, next = oq_engine_next_id(f->engine);
    oq_err_t code = OQ_ERR_NONE;
    char reason[512];

    /* A dispatch: nothing queued, no id used, the dispatch id not kept. */
    e.refuse = 1u << OQ_EVENT_DISPATCHED;
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason), -1);
    assert_int_equal(code, OQ_ERR_UNAVAILABLE);
    assert_non_null(strstr(reason, "nothing was queued"));
    assert_int_equal(oq_engine_job_count(f->engine), 0);
    assert_int_equal(oq_engine_bytes(f->engine), 0);
    assert_int_equal(oq_engine_next_id(f->engine), next);
    assert_int_equal(oq_engine_dispatch_ids(f->engine), 0);
    oq_queue_stats_t qs;
    oq_engine_queue_stats(f->engine, 0, &qs);
    assert_int_equal(qs.dispatched + qs.ready, 0);
    assert_int_equal(e.count, 0);
    e.refuse = 0;
    assert_int_equal(oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason), 0);
    assert_int_equal(id, next);
    uint64_t waiting = s_dispatch(f, "noop");

    /* A failed job: requeue, requeue all, forget and flush are refused. */
    oq_worker_t *w = ef_worker(f, 'a', 2);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 2);
    s_fail_now(f, w, id);
    oq_job_view_t before, after;
    assert_int_equal(oq_engine_job_view(f->engine, id, &before), 0);
    e.refuse = 1u << OQ_EVENT_REQUEUED | 1u << OQ_EVENT_FORGOTTEN | 1u << OQ_EVENT_CANCELLED;
    assert_int_equal(oq_engine_requeue(f->engine, id, &s_why, reason, sizeof reason), -1);
    assert_int_equal(s_why, OQ_REFUSED_UNRECORDED);
    uint64_t count = 99;
    assert_int_equal(oq_engine_requeue_all(f->engine, NULL, &count), -1);
    assert_int_equal(count, 0);
    assert_int_equal(oq_engine_forget(f->engine, id, &s_why, reason, sizeof reason), -1);
    assert_int_equal(s_why, OQ_REFUSED_UNRECORDED);
    assert_int_equal(oq_engine_flush_failed(f->engine, NULL, &count), -1);
    assert_int_equal(count, 0);
    assert_int_equal(oq_engine_job_view(f->engine, id, &after), 0);
    assert_int_equal(after.state, OQ_STATE_FAILED);
    assert_int_equal(after.attempt, before.attempt);
    assert_int_equal(after.lease, before.lease); /* same generation: its tokens live */
    assert_string_equal(after.error, "bad");
    assert_int_equal(after.failed_at_ms, before.failed_at_ms);

    /* A job in review: the resolution is neither taken nor remembered. */
    assert_int_equal(s_ack(f, w, waiting, 1, OQ_OUTCOME_REVIEW, "unknown"), OQ_ACK_APPLIED);
    e.refuse = 1u << OQ_EVENT_RESOLVED;
    for (int action = OQ_REVIEW_DONE; action <= OQ_REVIEW_FAIL; action++) {
        assert_int_equal(oq_engine_review_resolve(f->engine, waiting, (oq_review_action_t)action,
                                                  "checked", &s_why, reason, sizeof reason),
                         -1);
        assert_int_equal(s_why, OQ_REFUSED_UNRECORDED);
        assert_string_equal(oq_engine_job_state(f->engine, waiting), "review");
        assert_null(oq_engine_review_resolution(f->engine, waiting));
    }
    assert_int_equal(oq_engine_job_view(f->engine, waiting, &after), 0);
    assert_int_equal(after.attempt, 1);
    assert_string_equal(after.error, "unknown");

    /* A cancel of a ready job. */
    uint64_t ready = s_dispatch(f, "noop");
    e.refuse = 1u << OQ_EVENT_CANCELLED;
    assert_int_equal(oq_engine_cancel(f->engine, ready, &s_why, reason, sizeof reason), -1);
    assert_int_equal(s_why, OQ_REFUSED_UNRECORDED);
    assert_string_equal(oq_engine_job_state(f->engine, ready), "ready");
    oq_engine_queue_stats(f->engine, 0, &qs);
    assert_int_equal(qs.cancelled, 0);

    /* Once the observer records again, each goes through. */
    e.refuse = 0;
    assert_int_equal(oq_engine_requeue(f->engine, id, &s_why, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_review_resolve(f->engine, waiting, OQ_REVIEW_FAIL, "checked", &s_why,
                                              reason, sizeof reason),
                     0);
    assert_non_null(oq_engine_review_resolution(f->engine, waiting));
    assert_int_equal(oq_engine_cancel(f->engine, ready, &s_why, reason, sizeof reason), 0);

    /* A worker's ok is a fact: the job is done whether or not it is recorded. */
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    e.refuse = 1u << OQ_EVENT_DONE;
    assert_int_equal(s_ack(f, w, id, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_APPLIED);
    assert_null(oq_engine_job_state(f->engine, id));
}

/* ---- several deliveries per message (oq_engine_pump_many) ------------------- */

/* Each call of the batched deliver: who got it and how many jobs. */
static struct {
    char worker[32];
    size_t count[32];
    size_t calls;
} s_msgs;

static int s_deliver_many(void *ctx, const oq_worker_view_t *w, const oq_job_view_t *jobs,
                          size_t count)
{
    ef_fixture_t *f = ctx;
    char who = ((const char *)w->identity)[0];
    assert_true(count >= 1 && count <= w->jobs_per_msg);
    if (who == f->unreachable)
        return -1;
    assert_true(s_msgs.calls < 32);
    s_msgs.worker[s_msgs.calls] = who;
    s_msgs.count[s_msgs.calls++] = count;
    for (size_t i = 0; i < count; i++) {
        assert_true(f->sent_count < 64);
        f->sent[f->sent_count++] = (ef_delivery_t){who, jobs[i].id, jobs[i].attempt, jobs[i].lease};
    }
    return 0;
}

/* A worker that takes several jobs a message gets what one pump leases it
   in one call, in lease order, at most its jobs_per_msg; one that takes one
   gets a call per job; the round-robin over workers is as before. */
static void test_pump_many_groups_per_worker(void **state)
{
    ef_fixture_t *f = *state;
    memset(&s_msgs, 0, sizeof s_msgs);
    uint64_t ids[9];
    for (int k = 0; k < 9; k++)
        ids[k] = s_dispatch(f, "noop");
    oq_worker_t *a = ef_worker(f, 'a', 8);
    oq_engine_worker_jobs_per_msg(f->engine, a, 3);
    ef_worker(f, 'b', 2);
    assert_int_equal(oq_engine_pump_many(f->engine, s_deliver_many, f), 9);
    /* Round-robin: a b a b a (a's third fills a message of 3), then a alone:
       a a a (another 3), a (sent as the pump ends). */
    assert_int_equal(s_msgs.calls, 5);
    const size_t want_a[] = {3, 3, 1};
    size_t per[2] = {0, 0}, total = 0, nth_a = 0;
    for (size_t i = 0; i < s_msgs.calls; i++) {
        if (s_msgs.worker[i] == 'a')
            assert_int_equal(s_msgs.count[i], want_a[nth_a++]);
        else
            assert_int_equal(s_msgs.count[i], 1);
        per[s_msgs.worker[i] == 'b'] += s_msgs.count[i];
        total += s_msgs.count[i];
    }
    assert_int_equal(per[0], 7);
    assert_int_equal(per[1], 2);
    assert_int_equal(total, 9);
    /* In lease order within a worker: a's jobs in dispatch order. */
    uint64_t last = 0;
    for (size_t i = 0; i < f->sent_count; i++)
        if (f->sent[i].worker == 'a') {
            assert_true(f->sent[i].id > last);
            last = f->sent[i].id;
        }
    oq_queue_stats_t st = s_stats(f);
    assert_int_equal(st.leased, 9);
    assert_int_equal(st.ready, 0);
    (void)ids;
}

/* A message that cannot go out never left the broker: every job in it is
   ready again at its old attempt, in front and in its order, and the
   worker is dead. */
static void test_pump_many_unreachable_puts_all_back(void **state)
{
    ef_fixture_t *f = *state;
    memset(&s_msgs, 0, sizeof s_msgs);
    uint64_t ids[4];
    for (int k = 0; k < 4; k++)
        ids[k] = s_dispatch(f, "noop");
    oq_worker_t *a = ef_worker(f, 'a', 4);
    oq_engine_worker_jobs_per_msg(f->engine, a, 4);
    f->unreachable = 'a';
    assert_int_equal(oq_engine_pump_many(f->engine, s_deliver_many, f), 0);
    assert_int_equal(oq_engine_worker_count(f->engine), 0);
    oq_queue_stats_t st = s_stats(f);
    assert_int_equal(st.ready, 4);
    assert_int_equal(st.leased, 0);
    f->unreachable = 0;
    oq_worker_t *b = ef_worker(f, 'b', 4);
    oq_engine_worker_jobs_per_msg(f->engine, b, 4);
    assert_int_equal(oq_engine_pump_many(f->engine, s_deliver_many, f), 4);
    assert_int_equal(s_msgs.calls, 1);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(f->sent[k].id, ids[k]);
        assert_int_equal(f->sent[k].attempt, 1);
    }
    assert_int_equal(s_stats(f).redelivered, 0);
}

/* ---- keyed tokens, first decisions, credit of fenced acks ---------------- */

static const uint8_t s_key_a[OQ_KEY_BYTES] = {'A'}, s_key_b[OQ_KEY_BYTES] = {'B'};

/* A worker whose connection authenticated with key. */
static oq_worker_t *s_keyed_worker(ef_fixture_t *f, char name, const uint8_t *key, uint32_t credit)
{
    oq_worker_t *w = oq_engine_worker_add(f->engine, &name, 1, oq_str("k"), 1, key);
    assert_non_null(w);
    oq_engine_worker_credit(f->engine, w, credit);
    return w;
}

typedef struct {
    const oq_worker_t *w;
    uint32_t credit;
} s_credit_t;

static void s_credit_one(void *ctx, const oq_worker_view_t *v)
{
    s_credit_t *c = ctx;
    if (v->worker_ == c->w)
        c->credit = v->credit;
}

static uint32_t s_credit(ef_fixture_t *f, const oq_worker_t *w)
{
    s_credit_t c = {w, UINT32_MAX};
    oq_engine_worker_each(f->engine, s_credit_one, &c);
    return c.credit;
}

static oq_ack_effect_t s_keyed_ack(ef_fixture_t *f, oq_worker_t *w, const uint8_t *key, uint64_t id,
                                   uint32_t attempt, oq_outcome_t outcome, uint32_t credit)
{
    oq_ack_msg_t ack = {.id = id,
                        .attempt = attempt,
                        .outcome = outcome,
                        .credit = credit,
                        .error = oq_str("x"),
                        .lease = ef_lease(f, id, attempt),
                        .has_lease = true};
    return oq_engine_ack(f->engine, w, key, &ack);
}

/* A token is worth something only from the key its delivery went to: the
   same token from another key is fenced and the job stays the first
   key's, which may still ack it, also from a fresh connection (an
   unknown worker), as after a reconnect or a broker restart. */
static void test_token_bound_to_the_worker_key(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_dispatch(f, "noop");
    oq_worker_t *a = s_keyed_worker(f, 'a', s_key_a, 1);
    oq_worker_t *b = s_keyed_worker(f, 'b', s_key_b, 0);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[0].worker, 'a');
    assert_int_equal(s_keyed_ack(f, b, s_key_b, id, 1, OQ_OUTCOME_OK, 1), OQ_ACK_FENCED);
    assert_int_equal(s_keyed_ack(f, NULL, NULL, id, 1, OQ_OUTCOME_OK, 1), OQ_ACK_FENCED);
    assert_int_equal(oq_engine_fenced_acks(f->engine), 2);
    assert_string_equal(oq_engine_job_state(f->engine, id), "leased");
    oq_ack_msg_t touch = {.id = id, .attempt = 1, .lease = ef_lease(f, id, 1), .has_lease = true};
    assert_int_equal(oq_engine_touch(f->engine, a, s_key_b, &touch), -1);
    assert_int_equal(oq_engine_touch(f->engine, a, s_key_a, &touch), 0);
    assert_int_equal(s_keyed_ack(f, NULL, s_key_a, id, 1, OQ_OUTCOME_OK, 1), OQ_ACK_APPLIED);
    assert_null(oq_engine_job_state(f->engine, id));
}

/* The first outcome a delivery reports stands: its own later ok neither
   takes a failed job out of the failed store, nor completes a job it
   asked to retry, nor one in review; an expired delivery that decided
   nothing still completes the job with its ok. */
static void test_first_decision_of_a_delivery_stands(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t failed = s_dispatch(f, "noop"), retried = s_dispatch(f, "noop");
    uint64_t reviewed = s_dispatch(f, "noop");
    oq_worker_t *w = ef_worker(f, 'a', 3);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 3);
    assert_int_equal(s_ack(f, w, failed, 1, OQ_OUTCOME_FAIL, "bad"), OQ_ACK_APPLIED);
    assert_int_equal(s_ack(f, w, retried, 1, OQ_OUTCOME_RETRY, "again"), OQ_ACK_APPLIED);
    assert_int_equal(s_ack(f, w, reviewed, 1, OQ_OUTCOME_REVIEW, "unknown"), OQ_ACK_APPLIED);
    uint64_t ignored = s_stats(f).ignored_acks;
    assert_int_equal(s_ack(f, w, failed, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_IGNORED);
    assert_int_equal(s_ack(f, w, reviewed, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_IGNORED);
    assert_string_equal(oq_engine_job_state(f->engine, failed), "failed");
    assert_string_equal(oq_engine_job_state(f->engine, reviewed), "review");
    /* The retried job runs again; the first delivery's ok is still its retry. */
    f->time.now += EF_BACKOFF_MS;
    oq_engine_tick(f->engine);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(s_ack(f, w, retried, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_IGNORED);
    assert_string_equal(oq_engine_job_state(f->engine, retried), "leased");
    assert_int_equal(s_stats(f).ignored_acks, ignored + 3);
    /* Its lease runs out on the last try: an undecided delivery's ok counts. */
    f->time.now += EF_RETRY_AFTER_MS;
    oq_engine_tick(f->engine);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    f->time.now += EF_RETRY_AFTER_MS;
    oq_engine_tick(f->engine);
    assert_string_equal(oq_engine_job_state(f->engine, retried), "failed");
    assert_int_equal(s_ack(f, w, retried, 2, OQ_OUTCOME_OK, NULL), OQ_ACK_LATE);
    assert_null(oq_engine_job_state(f->engine, retried));
    /* A requeue is a fresh start: the next delivery decides afresh. */
    char reason[128];
    assert_int_equal(oq_engine_requeue(f->engine, failed, &s_why, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(s_ack(f, w, failed, 1, OQ_OUTCOME_OK, NULL), OQ_ACK_APPLIED);
}

/* Past the attempts whose decisions are told apart, a decision of one
   delivery never keeps the current delivery from completing the job. */
static void test_decisions_past_the_tracked_attempts(void **state)
{
    ef_fixture_t *f = *state;
    oq_job_msg_t msg = EF_JOB(.type = "noop", .max_tries = 100);
    uint64_t id = ef_dispatch(f, &msg);
    oq_worker_t *w = ef_worker(f, 'a', 1);
    const uint32_t last = 70; /* past OQ_ENG_DECIDED_ATTEMPTS */
    for (uint32_t attempt = 1; attempt < last; attempt++) {
        f->sent_count = 0;
        oq_engine_tick(f->engine);
        assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
        assert_int_equal(s_ack(f, w, id, attempt, OQ_OUTCOME_RETRY, "again"), OQ_ACK_APPLIED);
        f->time.now += EF_BACKOFF_MS;
    }
    f->sent_count = 0;
    oq_engine_tick(f->engine);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    assert_int_equal(f->sent[0].attempt, last);
    assert_int_equal(s_ack(f, w, id, last, OQ_OUTCOME_OK, NULL), OQ_ACK_APPLIED);
    assert_null(oq_engine_job_state(f->engine, id));
}

/* Credit comes back with an ack whose token proves a delivery to the
   sender, and with no other: a worker that never echoes its lease is sent
   no more than it gave, and one whose job was requeued under it (its
   token is of the generation before) is free again all the same. */
static void test_fenced_acks_give_no_credit(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t first = s_dispatch(f, "noop");
    s_dispatch(f, "noop");
    oq_worker_t *w = s_keyed_worker(f, 'a', s_key_a, 1);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    oq_ack_msg_t blind = {.id = first, .attempt = 1, .outcome = OQ_OUTCOME_OK, .credit = 1};
    assert_int_equal(oq_engine_ack(f->engine, w, s_key_a, &blind), OQ_ACK_FENCED);
    assert_int_equal(s_credit(f, w), 0);
    assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 0);
    /* Another key's replay of the token gives that worker nothing either. */
    oq_worker_t *b = s_keyed_worker(f, 'b', s_key_b, 0);
    assert_int_equal(s_keyed_ack(f, b, s_key_b, first, 1, OQ_OUTCOME_OK, 1), OQ_ACK_FENCED);
    assert_int_equal(s_credit(f, b), 0);
    /* The holder's lease runs out on its last try and the job is requeued
       while it still runs: its ack changes nothing, its credit comes back. */
    for (uint32_t attempt = 1; attempt < 3; attempt++) {
        f->time.now += EF_RETRY_AFTER_MS;
        oq_engine_tick(f->engine);
        oq_engine_worker_credit(f->engine, w, 1);
        assert_int_equal(oq_engine_pump(f->engine, ef_deliver, f), 1);
    }
    f->time.now += EF_RETRY_AFTER_MS;
    oq_engine_tick(f->engine);
    char reason[128];
    uint64_t stale = ef_lease(f, first, 3);
    assert_int_not_equal(stale, 0);
    assert_int_equal(oq_engine_requeue(f->engine, first, &s_why, reason, sizeof reason), 0);
    oq_ack_msg_t old = {.id = first,
                        .attempt = 3,
                        .outcome = OQ_OUTCOME_OK,
                        .credit = 1,
                        .lease = stale,
                        .has_lease = true};
    assert_int_equal(s_credit(f, w), 0);
    assert_int_equal(oq_engine_ack(f->engine, w, s_key_a, &old), OQ_ACK_FENCED);
    assert_int_equal(s_credit(f, w), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dispatch_id_returns_the_first_job_for_its_window,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_blind_acks_change_nothing, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_token_bound_to_the_worker_key, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_first_decision_of_a_delivery_stands, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_decisions_past_the_tracked_attempts, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_fenced_acks_give_no_credit, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_results_counted_once_in_any_order, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_requeue_kills_old_tokens, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_routing_by_type_waits_without_a_try, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_queue_order_drains_higher_first, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_touch_restarts_the_lease_of_its_holder_only, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_release_waits_its_delay_and_uses_a_try, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(
            test_unavailable_hands_back_without_a_try_and_keeps_the_type, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_held_return_keeps_the_attempt_and_the_type, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_workers_are_summarised_by_name, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_return_keeps_the_attempt_and_skips_the_worker,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_hooks_hear_every_change_in_order, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_unrecorded_changes_are_refused_and_change_nothing,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_restore_rebuilds_without_reporting, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_job_each_goes_leased_ready_delayed_failed, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_ready_jobs_keep_the_queue_order_across_types, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_dispatch_deliver_ack, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_credit_limits_deliveries, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_lease_expiry_redelivers_with_next_attempt, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_ok_ack_completes_job_waiting_for_redelivery, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_stale_retry_ack_is_ignored, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_dead_worker_gives_leases_back_at_once, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_last_attempt_lease_end_fails_job, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_retry_waits_backoff_then_fails_after_max_tries,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_fail_goes_to_failed_store_and_listing, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_timeout_rule_refuses_with_numbers, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_delay_and_priority_order, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_unreachable_worker_loses_no_attempt, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_drain_stops_deliveries, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_full_broker_refuses, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_outcomes_counted_per_type, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_refused_dispatch_creates_no_queue, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_keys_and_ids_count_and_what_is_only_remembered_yields,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_dispatch_ids_yield_to_jobs_and_the_window_held_is_told,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_byte_limit_refuses_before_it_and_done_frees, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_replayed_jobs_count_and_are_never_refused, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_restored_job_breaking_timeout_rule_is_clamped,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_ready_after_drain_resumes_the_worker, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(
            test_rule_message_says_raise_retry_after_when_no_timeout_fits, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_failed_pages_by_id_cursor, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_failed_listed_by_failure_time_across_queues, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_forget_deletes_a_failed_job_and_nothing_else, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_flush_and_requeue_all_by_queue, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_prune_failed_by_age_in_bounded_steps, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_prune_failed_finds_old_jobs_behind_young_ones,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_clear_cancels_a_queues_waiting_jobs_in_bounded_steps,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_ready_and_delayed_refuses_leased, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_horizons_take_the_largest_budget_held, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_review_holds_the_job_until_resolved, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_late_ok_resolves_a_review_as_done, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_restore_review_and_resolutions, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_pump_many_groups_per_worker, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_pump_many_unreachable_puts_all_back, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_count_expiries_deaths_and_latency, ef_setup,
                                        ef_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
