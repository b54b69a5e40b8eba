/*  test_job_keys: unique dispatch keys and overlap keys in the engine's
    state machine (unique.c, overlap.c and their hooks), driven by a clock
    the test moves by hand, and the KEYS journal record. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "engine.h"
#include "engine_fixture.h"
#include "onceq/limits.h"
#include "overlap.h"
#include "record.h"
#include "unique.h"

/* Dispatch a job with the keys given (NULL: none); unique_for_ms 0: until
   done. Returns the engine's rc; *id the job's (or the holder's) id. */
static int s_dispatch_keyed(ef_fixture_t *f, const char *type, const char *unique_key,
                            int64_t unique_for_ms, const char *overlap_key, uint64_t *id)
{
    oq_job_msg_t job = EF_JOB(.type = type, .unique_key = unique_key,
                              .unique_for_ms = unique_for_ms, .overlap_key = overlap_key);
    oq_err_t code;
    char reason[256];
    *id = 0;
    return oq_engine_dispatch(f->engine, &job, id, &code, reason, sizeof reason);
}

static uint64_t s_dispatch(ef_fixture_t *f, const char *unique_key, int64_t unique_for_ms,
                           const char *overlap_key)
{
    uint64_t id;
    assert_int_equal(s_dispatch_keyed(f, "t", unique_key, unique_for_ms, overlap_key, &id), 0);
    assert_true(id > 0);
    return id;
}

static oq_ack_effect_t s_ack(ef_fixture_t *f, oq_worker_t *w, uint64_t id, uint32_t attempt,
                             oq_outcome_t outcome)
{
    oq_ack_msg_t ack = {.id = id,
                        .attempt = attempt,
                        .outcome = outcome,
                        .credit = 1,
                        .error = oq_str("boom"),
                        .lease = ef_lease(f, id, attempt),
                        .has_lease = true};
    return oq_engine_ack(f->engine, w, NULL, &ack);
}

static size_t s_pump(ef_fixture_t *f)
{
    return oq_engine_pump(f->engine, ef_deliver, f);
}

/* How many jobs of the list given are leased now. */
static int s_leased(ef_fixture_t *f, const uint64_t *ids, size_t n)
{
    int leased = 0;
    for (size_t i = 0; i < n; i++) {
        const char *state = oq_engine_job_state(f->engine, ids[i]);
        leased += state && strcmp(state, "leased") == 0;
    }
    return leased;
}

/* ---- unique keys ---- */

static void test_unique_key_answers_with_the_live_holder(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t first = s_dispatch(f, "order-42", 0, NULL);
    uint64_t again;
    assert_int_equal(s_dispatch_keyed(f, "t", "order-42", 0, NULL, &again), 1);
    assert_int_equal(again, first);
    assert_int_equal(oq_engine_job_count(f->engine), 1);
    /* Another key queues its own job. */
    uint64_t other = s_dispatch(f, "order-43", 0, NULL);
    assert_int_not_equal(other, first);

    /* Leased: still held. */
    oq_worker_t *w = ef_worker(f, 'a', 1);
    assert_int_equal(s_pump(f), 1);
    assert_int_equal(s_dispatch_keyed(f, "t", "order-42", 0, NULL, &again), 1);
    assert_int_equal(again, first);

    /* Done with "until done": the key is free, a new dispatch queues a job. */
    assert_int_equal(s_ack(f, w, first, 1, OQ_OUTCOME_OK), OQ_ACK_APPLIED);
    uint64_t later = s_dispatch(f, "order-42", 0, NULL);
    assert_true(later > other);
    oq_keys_stats_t ks;
    oq_engine_keys_stats(f->engine, &ks);
    assert_int_equal(ks.unique_hits, 2);
    assert_int_equal(ks.unique_keys, 2);
}

static void test_unique_window_outlives_the_job(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t first = s_dispatch(f, "report", 60000, NULL);
    oq_worker_t *w = ef_worker(f, 'a', 1);
    assert_int_equal(s_pump(f), 1);
    assert_int_equal(s_ack(f, w, first, 1, OQ_OUTCOME_OK), OQ_ACK_APPLIED);
    assert_null(oq_engine_job_state(f->engine, first));

    /* Done, but within 60 s of its dispatch: a re-dispatch gets its id. */
    f->time.now += 59000;
    uint64_t again;
    assert_int_equal(s_dispatch_keyed(f, "t", "report", 60000, NULL, &again), 1);
    assert_int_equal(again, first);

    /* Past the window the key is free, and tick forgets it. */
    f->time.now += 2000;
    oq_engine_tick(f->engine);
    oq_keys_stats_t ks;
    oq_engine_keys_stats(f->engine, &ks);
    assert_int_equal(ks.unique_keys, 0);
    assert_true(s_dispatch(f, "report", 60000, NULL) > first);
}

static void test_unique_window_shorter_than_the_job_holds_while_live(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t first = s_dispatch(f, "k", 1000, NULL);
    f->time.now += 5000; /* the window is over, the job still queued */
    uint64_t again;
    assert_int_equal(s_dispatch_keyed(f, "t", "k", 1000, NULL, &again), 1);
    assert_int_equal(again, first);
}

static void test_unique_key_is_let_go_by_failure_and_cancel(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t a = s_dispatch(f, "ka", 0, NULL);
    oq_worker_t *w = ef_worker(f, 'a', 1);
    assert_int_equal(s_pump(f), 1);
    assert_int_equal(s_ack(f, w, a, 1, OQ_OUTCOME_FAIL), OQ_ACK_APPLIED);
    assert_string_equal(oq_engine_job_state(f->engine, a), "failed");
    assert_true(s_dispatch(f, "ka", 0, NULL) > a);

    uint64_t b = s_dispatch(f, "kb", 0, NULL);
    oq_refusal_t why;
    char reason[256];
    assert_int_equal(oq_engine_cancel(f->engine, b, &why, reason, sizeof reason), 0);
    assert_true(s_dispatch(f, "kb", 0, NULL) > b);
}

/* ---- overlap keys ---- */

static void test_overlap_leases_one_per_key_and_wakes_on_ack(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = s_dispatch(f, NULL, 0, "customer-7");
    oq_worker_t *a = ef_worker(f, 'a', 3);
    oq_worker_t *b = ef_worker(f, 'b', 3);
    (void)b;
    assert_int_equal(s_pump(f), 1);
    assert_int_equal(s_leased(f, ids, 3), 1);
    assert_string_equal(oq_engine_job_state(f->engine, ids[0]), "leased");
    assert_string_equal(oq_engine_job_state(f->engine, ids[1]), "waiting");
    oq_queue_stats_t qs;
    oq_engine_queue_stats(f->engine, 0, &qs);
    assert_int_equal(qs.waiting, 2);
    assert_int_equal(qs.ready, 0);

    /* Any outcome ends the holder's lease: a retry, then an ok. The next
       waiting job is leased, never two at once, and the waiters used no try. */
    assert_int_equal(s_ack(f, a, ids[0], 1, OQ_OUTCOME_RETRY), OQ_ACK_APPLIED);
    assert_string_equal(oq_engine_job_state(f->engine, ids[1]), "ready");
    assert_int_equal(s_pump(f), 1);
    assert_int_equal(s_leased(f, ids, 3), 1);
    assert_string_equal(oq_engine_job_state(f->engine, ids[1]), "leased");
    assert_int_equal(f->sent[f->sent_count - 1].attempt, 1);
    assert_int_equal(s_ack(f, a, ids[1], 1, OQ_OUTCOME_OK), OQ_ACK_APPLIED);
    assert_int_equal(s_pump(f), 1);
    assert_int_equal(s_leased(f, ids, 3), 1);
}

static void test_overlap_waiter_does_not_hold_up_other_keys(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t k1 = s_dispatch(f, NULL, 0, "k");
    uint64_t k2 = s_dispatch(f, NULL, 0, "k");
    uint64_t k3 = s_dispatch(f, NULL, 0, "k");
    uint64_t other = s_dispatch(f, NULL, 0, "other");
    uint64_t plain = s_dispatch(f, NULL, 0, NULL);
    ef_worker(f, 'a', 10);
    assert_int_equal(s_pump(f), 3);
    assert_string_equal(oq_engine_job_state(f->engine, k1), "leased");
    assert_string_equal(oq_engine_job_state(f->engine, k2), "waiting");
    assert_string_equal(oq_engine_job_state(f->engine, k3), "waiting");
    assert_string_equal(oq_engine_job_state(f->engine, other), "leased");
    assert_string_equal(oq_engine_job_state(f->engine, plain), "leased");
}

static void test_overlap_key_freed_by_lease_expiry_and_worker_death(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = s_dispatch(f, NULL, 0, "k");
    oq_worker_t *a = ef_worker(f, 'a', 1);
    assert_int_equal(s_pump(f), 1);
    assert_int_equal(s_leased(f, ids, 3), 1);

    /* The lease runs out: the holder is ready again (in front), and the
       key is free; one of them is leased next, only one. */
    f->time.now += EF_RETRY_AFTER_MS + 1;
    oq_engine_tick(f->engine);
    assert_int_equal(s_leased(f, ids, 3), 0);
    oq_worker_t *b = ef_worker(f, 'b', 2);
    (void)b;
    s_pump(f);
    assert_int_equal(s_leased(f, ids, 3), 1);

    /* Its worker dies: the key is free again at once. */
    ef_fixture_t *ff = f;
    oq_worker_t *holder = ff->sent[ff->sent_count - 1].worker == 'a' ? a : b;
    oq_engine_worker_remove(f->engine, &holder, "test");
    assert_int_equal(s_leased(f, ids, 3), 0);
    ef_worker(f, 'c', 5);
    s_pump(f);
    assert_int_equal(s_leased(f, ids, 3), 1);
}

static void test_overlap_cancelled_heir_wakes_the_next(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t k1 = s_dispatch(f, NULL, 0, "k");
    uint64_t k2 = s_dispatch(f, NULL, 0, "k");
    uint64_t k3 = s_dispatch(f, NULL, 0, "k");
    oq_worker_t *a = ef_worker(f, 'a', 2);
    assert_int_equal(s_pump(f), 1);
    /* The holder goes to the failed store: k2 is woken (ready), k3 waits. */
    assert_int_equal(s_ack(f, a, k1, 1, OQ_OUTCOME_FAIL), OQ_ACK_APPLIED);
    assert_string_equal(oq_engine_job_state(f->engine, k2), "ready");
    assert_string_equal(oq_engine_job_state(f->engine, k3), "waiting");
    /* k2 is cancelled before anyone takes it: k3 must not be left behind. */
    oq_refusal_t why;
    char reason[256];
    assert_int_equal(oq_engine_cancel(f->engine, k2, &why, reason, sizeof reason), 0);
    assert_string_equal(oq_engine_job_state(f->engine, k3), "ready");
    /* A waiting job may be cancelled too. */
    uint64_t k4 = s_dispatch(f, NULL, 0, "k");
    assert_int_equal(s_pump(f), 1);
    assert_string_equal(oq_engine_job_state(f->engine, k3), "leased");
    assert_string_equal(oq_engine_job_state(f->engine, k4), "waiting");
    assert_int_equal(oq_engine_cancel(f->engine, k4, &why, reason, sizeof reason), 0);
    assert_null(oq_engine_job_state(f->engine, k4));
}

static void test_overlap_unreachable_worker_gives_the_key_back(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t k1 = s_dispatch(f, NULL, 0, "k");
    uint64_t k2 = s_dispatch(f, NULL, 0, "k");
    f->unreachable = 'x';
    ef_worker(f, 'x', 1);
    s_pump(f);
    assert_string_equal(oq_engine_job_state(f->engine, k1), "ready");
    ef_worker(f, 'a', 2);
    assert_int_equal(s_pump(f), 1);
    assert_string_equal(oq_engine_job_state(f->engine, k1), "leased");
    assert_string_equal(oq_engine_job_state(f->engine, k2), "waiting");
}

static void test_late_ok_completes_a_waiting_job(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t k1 = s_dispatch(f, NULL, 0, "k");
    uint64_t k2 = s_dispatch(f, NULL, 0, "k");
    oq_worker_t *a = ef_worker(f, 'a', 2);
    assert_int_equal(s_pump(f), 1);
    assert_string_equal(oq_engine_job_state(f->engine, k2), "waiting");
    f->time.now += EF_RETRY_AFTER_MS + 1;
    oq_engine_tick(f->engine); /* k1's lease ran out; k2 waited longest: it goes first */
    ef_worker(f, 'b', 1);
    assert_int_equal(s_pump(f), 1);
    assert_string_equal(oq_engine_job_state(f->engine, k2), "leased");
    assert_string_equal(oq_engine_job_state(f->engine, k1), "waiting");
    /* The first run of k1 was only slow: its ok completes the job. */
    assert_int_equal(s_ack(f, a, k1, 1, OQ_OUTCOME_OK), OQ_ACK_LATE);
    assert_null(oq_engine_job_state(f->engine, k1));
    assert_string_equal(oq_engine_job_state(f->engine, k2), "leased");
}

/* Waiting jobs are live jobs: walked for snapshots (as ready), freed at destroy. */
static void s_count_job(void *ctx, const oq_job_view_t *job)
{
    int *n = ctx;
    assert_int_equal(job->state == OQ_STATE_READY || job->state == OQ_STATE_LEASED, 1);
    assert_string_equal(job->overlap_key, "k");
    (*n)++;
}

static void test_waiting_jobs_are_walked_and_freed(void **state)
{
    ef_fixture_t *f = *state;
    for (int i = 0; i < 4; i++)
        s_dispatch(f, NULL, 0, "k");
    ef_worker(f, 'a', 4);
    assert_int_equal(s_pump(f), 1);
    int n = 0;
    oq_engine_job_each(f->engine, s_count_job, &n);
    assert_int_equal(n, 4);
}

/* Random dispatches, acks of every outcome, lease expiries, worker deaths
   and cancels, with a fixed seed: after every step at most one job per
   overlap key is leased, and no job waits for a key that no leased or
   ready job of the key holds or will take (a waiter left behind a free
   key would wait for ever). In the end every job is done or failed. */
#define S_FUZZ_JOBS 60 /* under the fixture's max_jobs, and its 64 deliveries per pump */
#define S_FUZZ_KEYS 5

static uint32_t s_rand(uint32_t *state)
{
    *state = *state * 1103515245u + 12345u;
    return *state >> 8;
}

static void s_check_keys(ef_fixture_t *f, const uint64_t *ids, const int *keys, size_t n)
{
    for (int k = 0; k < S_FUZZ_KEYS; k++) {
        int leased = 0, ready = 0, waiting = 0;
        for (size_t i = 0; i < n; i++) {
            if (keys[i] != k)
                continue;
            const char *st = oq_engine_job_state(f->engine, ids[i]);
            if (!st)
                continue;
            leased += strcmp(st, "leased") == 0;
            ready += strcmp(st, "ready") == 0;
            waiting += strcmp(st, "waiting") == 0;
        }
        assert_true(leased <= 1);
        if (waiting)
            assert_true(leased + ready >= 1);
    }
}

static void test_overlap_invariants_hold_under_random_events(void **state)
{
    ef_fixture_t *f = *state;
    static uint64_t ids[S_FUZZ_JOBS];
    static int keys[S_FUZZ_JOBS];
    size_t n = 0;
    uint32_t seed = 20261203;
    oq_worker_t *workers[4] = {0};
    char names[4] = {'a', 'b', 'c', 'd'};
    for (int step = 0; step < 5000; step++) {
        uint32_t r = s_rand(&seed) % 100;
        if (r < 20 && n < S_FUZZ_JOBS) {
            char key[8];
            keys[n] = (int)(s_rand(&seed) % S_FUZZ_KEYS);
            snprintf(key, sizeof key, "k%d", keys[n]);
            ids[n] = s_dispatch(f, NULL, 0, key);
            n++;
        } else if (r < 30) {
            int w = (int)(s_rand(&seed) % 4);
            if (!workers[w])
                workers[w] = ef_worker(f, names[w], 1 + s_rand(&seed) % 3);
            else
                oq_engine_worker_credit(f->engine, workers[w], 1);
        } else if (r < 33) {
            int w = (int)(s_rand(&seed) % 4);
            if (workers[w])
                oq_engine_worker_remove(f->engine, &workers[w], "test");
        } else if (r < 60) {
            f->sent_count = 0;
            s_pump(f);
        } else if (r < 85 && n) {
            /* An outcome for a leased job, from its worker. */
            size_t i = s_rand(&seed) % n;
            oq_job_view_t v;
            const char *st = oq_engine_job_state(f->engine, ids[i]);
            if (st && strcmp(st, "leased") == 0 && oq_engine_job_view(f->engine, ids[i], &v) == 0) {
                static const oq_outcome_t outcomes[] = {OQ_OUTCOME_OK, OQ_OUTCOME_OK,
                                                        OQ_OUTCOME_RETRY, OQ_OUTCOME_FAIL};
                oq_ack_msg_t ack = {.id = ids[i],
                                    .attempt = v.attempt,
                                    .outcome = outcomes[s_rand(&seed) % 4],
                                    .credit = 1,
                                    .error = oq_str("x"),
                                    .lease = v.lease,
                                    .has_lease = true};
                oq_engine_ack(f->engine, NULL, NULL, &ack);
            }
        } else if (r < 92) {
            f->time.now += 1 + s_rand(&seed) % (EF_RETRY_AFTER_MS / 2);
            oq_engine_tick(f->engine);
        } else if (n) {
            size_t i = s_rand(&seed) % n;
            oq_refusal_t why;
            char reason[256];
            oq_engine_cancel(f->engine, ids[i], &why, reason, sizeof reason);
        }
        s_check_keys(f, ids, keys, n);
    }
    /* Drain: workers take everything left; every job ends. */
    for (int w = 0; w < 4; w++)
        if (!workers[w])
            workers[w] = ef_worker(f, names[w], 3);
    for (int round = 0; round < 10000 && oq_engine_job_count(f->engine) > 0; round++) {
        f->sent_count = 0;
        s_pump(f);
        for (size_t i = 0; i < f->sent_count; i++) {
            oq_ack_msg_t ack = {.id = f->sent[i].id,
                                .attempt = f->sent[i].attempt,
                                .outcome = OQ_OUTCOME_OK,
                                .credit = 1,
                                .lease = f->sent[i].lease,
                                .has_lease = true};
            oq_engine_ack(f->engine, workers[f->sent[i].worker - 'a'], NULL, &ack);
        }
        f->time.now += 1000;
        oq_engine_tick(f->engine);
        s_check_keys(f, ids, keys, n);
        /* Failed jobs stay failed: count them as ended. */
        oq_queue_stats_t qs;
        oq_engine_queue_stats(f->engine, 0, &qs);
        if (qs.ready + qs.delayed + qs.leased + qs.waiting == 0)
            break;
    }
    oq_queue_stats_t qs;
    oq_engine_queue_stats(f->engine, 0, &qs);
    assert_int_equal(qs.ready + qs.delayed + qs.leased + qs.waiting, 0);
    oq_keys_stats_t ks;
    oq_engine_keys_stats(f->engine, &ks);
    assert_int_equal(ks.overlap_held, 0);
    assert_int_equal(ks.overlap_waiting, 0);
}

/* ---- replay ---- */

static void test_restore_keys(void **state)
{
    ef_fixture_t *f = *state;
    oq_job_msg_t job = EF_JOB(.id = 5, .type = "t", .max_tries = 3, .timeout_ms = EF_TIMEOUT_MS);
    char reason[128];
    assert_int_equal(oq_engine_restore(f->engine, &job, 0, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_restore_keys(f->engine, 5, oq_str("u"), 0, false, oq_str("k")), 0);
    /* A window of a job long done. */
    int64_t wall = EF_WALL_BASE_MS + f->time.now;
    assert_int_equal(
        oq_engine_restore_keys(f->engine, 3, oq_str("w"), wall + 5000, true, oq_str(NULL)), 0);
    uint64_t id;
    assert_int_equal(s_dispatch_keyed(f, "t", "u", 0, NULL, &id), 1);
    assert_int_equal(id, 5);
    assert_int_equal(s_dispatch_keyed(f, "t", "w", 0, NULL, &id), 1);
    assert_int_equal(id, 3);
    oq_job_view_t view;
    assert_int_equal(oq_engine_job_view(f->engine, 5, &view), 0);
    assert_string_equal(view.unique_key, "u");
    assert_string_equal(view.overlap_key, "k");
}

/* ---- the KEYS record ---- */

static void test_keys_record_round_trip(void **state)
{
    (void)state;
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    assert_int_equal(oq_record_keys(&buf, 42, "order-42", 1700000000123LL, true, "cust-7"), 0);
    size_t frame;
    assert_int_equal(oq_record_frame((const uint8_t *)buf.data, buf.size, &frame), OQ_FRAME_OK);
    assert_true(oq_record_verify((const uint8_t *)buf.data, buf.size, &frame));
    oq_record_t rec;
    char why[128];
    assert_int_equal(oq_record_decode((const uint8_t *)buf.data, frame, &rec, why, sizeof why), 0);
    assert_int_equal(rec.type, OQ_RECORD_KEYS);
    assert_int_equal(rec.id, 42);
    assert_true(oq_str_eq(rec.unique_key, "order-42"));
    assert_true(oq_str_eq(rec.overlap_key, "cust-7"));
    assert_int_equal(rec.unique_until_ms, 1700000000123LL);
    assert_true(rec.window_only);
    msgpack_sbuffer_destroy(&buf);
}

/* ---- the tables alone ---- */

static void test_unique_table_evicts_the_earliest_window_when_full(void **state)
{
    (void)state;
    oq_unique_t *u = oq_unique_new(2);
    assert_int_equal(oq_unique_take(u, "a", 1, 1, 5000, 0), 0);
    assert_int_equal(oq_unique_take(u, "b", 1, 2, 9000, 0), 0);
    /* Full of live keys: refused. */
    assert_int_equal(oq_unique_take(u, "c", 1, 3, 0, 0), -1);
    assert_int_equal(oq_unique_take(u, "a", 1, 4, 0, 0), -1); /* held by job 1 */
    oq_unique_release(u, 1, 10);
    oq_unique_release(u, 2, 10);
    assert_int_equal(oq_unique_find(u, "a", 1, 10), 1);
    assert_int_equal(oq_unique_take(u, "c", 1, 3, 0, 10), 0);
    assert_int_equal(oq_unique_evicted(u), 1);
    assert_int_equal(oq_unique_find(u, "a", 1, 10), 0); /* the earliest window went */
    assert_int_equal(oq_unique_find(u, "b", 1, 10), 2);
    assert_int_equal(oq_unique_expire(u, 9000), 1);
    assert_int_equal(oq_unique_count(u), 1);
    oq_unique_destroy(&u);
    assert_null(u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unique_key_answers_with_the_live_holder, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_unique_window_outlives_the_job, ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_unique_window_shorter_than_the_job_holds_while_live,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_unique_key_is_let_go_by_failure_and_cancel, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_overlap_leases_one_per_key_and_wakes_on_ack, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_overlap_waiter_does_not_hold_up_other_keys, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_overlap_key_freed_by_lease_expiry_and_worker_death,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_overlap_cancelled_heir_wakes_the_next, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_overlap_unreachable_worker_gives_the_key_back,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_late_ok_completes_a_waiting_job, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_waiting_jobs_are_walked_and_freed, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_overlap_invariants_hold_under_random_events, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_restore_keys, ef_setup, ef_teardown),
        cmocka_unit_test(test_keys_record_round_trip),
        cmocka_unit_test(test_unique_table_evicts_the_earliest_window_when_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
