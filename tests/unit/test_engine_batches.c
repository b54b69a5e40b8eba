/*  test_engine_batches.c: batches in the engine (broker/engine_batches.c)
    on the fixture's hand-moved clock: which callback runs when, that each
    runs once, that a batch is refused whole before anything is made, and
    that a restart between the ack that makes a callback due and its
    dispatch (a journal cut there) dispatches it exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "engine_fixture.h"
#include "journal.h"

#define S_JOBS_MAX 8

/* A batch of n noop jobs (max_tries 1) with the callbacks named. */
typedef struct {
    oq_job_msg_t jobs[S_JOBS_MAX];
    oq_job_msg_t then, catch_, finally;
    oq_batch_msg_t msg;
} s_batch_t;

static void s_batch(s_batch_t *b, size_t n, bool then, bool catch_, bool finally)
{
    memset(b, 0, sizeof *b);
    for (size_t i = 0; i < n; i++)
        b->jobs[i] = EF_JOB(.max_tries = 1);
    b->then = EF_JOB(.type = "bonus");
    b->catch_ = EF_JOB(.type = "alert");
    b->finally = EF_JOB(.type = "report");
    b->msg.jobs = b->jobs;
    b->msg.count = n;
    b->msg.callbacks[OQ_BATCH_THEN] = then ? &b->then : NULL;
    b->msg.callbacks[OQ_BATCH_CATCH] = catch_ ? &b->catch_ : NULL;
    b->msg.callbacks[OQ_BATCH_FINALLY] = finally ? &b->finally : NULL;
}

static uint64_t s_dispatch(ef_fixture_t *f, s_batch_t *b)
{
    uint64_t id = 0, first = 0;
    oq_err_t code = OQ_ERR_NONE;
    char reason[256] = "";
    if (oq_engine_dispatch_batch(f->engine, &b->msg, &id, &first, &code, reason, sizeof reason) < 0)
        fail_msg("batch refused: %s", reason);
    assert_int_equal(first, id + 1);
    return id;
}

static oq_batch_view_t s_view(ef_fixture_t *f, uint64_t id)
{
    oq_batch_view_t v;
    assert_int_equal(oq_engine_batch_view(f->engine, id, &v), 0);
    return v;
}

/* Jobs held of this type. */
typedef struct {
    const char *type;
    size_t count;
    uint64_t last;
} s_count_t;

static void s_count_type(void *ctx, const oq_job_view_t *job)
{
    s_count_t *c = ctx;
    if (strcmp(job->type, c->type) == 0) {
        c->count++;
        c->last = job->id;
    }
}

static s_count_t s_held(ef_fixture_t *f, const char *type)
{
    s_count_t c = {type, 0, 0};
    oq_engine_job_each(f->engine, s_count_type, &c);
    return c;
}

static void test_then_runs_once_when_every_job_is_done(void **state)
{
    ef_fixture_t *f = *state;
    s_batch_t b;
    s_batch(&b, 3, true, true, true);
    uint64_t id = s_dispatch(f, &b);
    assert_int_equal(oq_engine_batch_of(f->engine, id + 2), id);
    assert_int_equal(oq_engine_batch_of(f->engine, id), 0);
    oq_worker_t *w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, id + 1, 1, OQ_OUTCOME_OK);
    ef_ack_leased(f, w, id + 2, 1, OQ_OUTCOME_OK);
    oq_batch_view_t v = s_view(f, id);
    assert_int_equal(v.pending, 1);
    assert_int_equal(v.done, 2);
    assert_int_equal(v.callback_ids[OQ_BATCH_THEN], 0);
    ef_ack_leased(f, w, id + 3, 1, OQ_OUTCOME_OK);
    v = s_view(f, id);
    assert_false(v.live); /* settled: remembered, no longer held */
    assert_int_equal(v.done, 3);
    assert_int_not_equal(v.callback_ids[OQ_BATCH_THEN], 0);
    assert_int_not_equal(v.callback_ids[OQ_BATCH_FINALLY], 0);
    assert_int_equal(v.callback_ids[OQ_BATCH_CATCH], 0);
    assert_int_equal(s_held(f, "bonus").count, 1);
    assert_int_equal(s_held(f, "report").count, 1);
    assert_int_equal(s_held(f, "alert").count, 0);
    assert_int_equal(oq_engine_batches_settle(f->engine), 0);
    assert_int_equal(s_held(f, "bonus").count, 1);
    assert_int_equal(oq_engine_batch_count(f->engine), 0);
}

static void test_catch_on_first_failure_and_no_then(void **state)
{
    ef_fixture_t *f = *state;
    s_batch_t b;
    s_batch(&b, 3, true, true, true);
    uint64_t id = s_dispatch(f, &b);
    oq_worker_t *w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, id + 1, 1, OQ_OUTCOME_FAIL);
    oq_batch_view_t v = s_view(f, id);
    assert_int_equal(v.failed, 1);
    assert_int_not_equal(v.callback_ids[OQ_BATCH_CATCH], 0);
    ef_ack_leased(f, w, id + 2, 1, OQ_OUTCOME_FAIL);
    assert_int_equal(s_held(f, "alert").count, 1); /* the first failure only */
    ef_ack_leased(f, w, id + 3, 1, OQ_OUTCOME_OK);
    v = s_view(f, id);
    assert_true(v.live); /* its failed jobs are held: a requeue may still make it whole */
    assert_int_equal(v.pending, 0);
    assert_int_not_equal(v.callback_ids[OQ_BATCH_FINALLY], 0);
    assert_int_equal(v.callback_ids[OQ_BATCH_THEN], 0);
    assert_int_equal(s_held(f, "bonus").count, 0);
}

static void test_allow_failures_runs_then_once_all_have_settled(void **state)
{
    ef_fixture_t *f = *state;
    s_batch_t b;
    s_batch(&b, 2, true, true, false);
    b.msg.allow_failures = true;
    uint64_t id = s_dispatch(f, &b);
    oq_worker_t *w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, id + 1, 1, OQ_OUTCOME_FAIL);
    assert_int_equal(s_held(f, "alert").count, 0);
    ef_ack_leased(f, w, id + 2, 1, OQ_OUTCOME_OK);
    assert_int_equal(s_held(f, "bonus").count, 1);
}

static void test_cancel_withdraws_waiting_jobs_and_runs_finally(void **state)
{
    ef_fixture_t *f = *state;
    s_batch_t b;
    s_batch(&b, 3, true, true, true);
    uint64_t id = s_dispatch(f, &b);
    uint64_t withdrawn = 0;
    oq_refusal_t why;
    char reason[256];
    assert_int_equal(oq_engine_batch_cancel(f->engine, id, &withdrawn, &why, reason, sizeof reason),
                     0);
    assert_int_equal(withdrawn, 3);
    for (uint64_t k = id + 1; k <= id + 3; k++)
        ef_expect(f, k, NULL, 0);
    oq_batch_view_t v = s_view(f, id);
    assert_true(v.is_cancelled);
    assert_int_equal(v.cancelled, 3);
    assert_int_equal(s_held(f, "report").count, 1);
    assert_int_equal(s_held(f, "bonus").count + s_held(f, "alert").count, 0);
    assert_int_equal(oq_engine_batch_cancel(f->engine, id, &withdrawn, &why, reason, sizeof reason),
                     -1);
    assert_int_equal(why, OQ_REFUSED_UNKNOWN);
}

static void test_batch_over_a_limit_is_refused_before_anything_is_made(void **state)
{
    ef_fixture_t *f = *state;
    ef_engine_bytes(f, 0, 4);
    s_batch_t b;
    s_batch(&b, 4, true, false, false); /* 4 jobs and a callback: one over */
    uint64_t id = 0, first = 0, next = oq_engine_next_id(f->engine);
    oq_err_t code;
    char reason[256];
    assert_int_equal(
        oq_engine_dispatch_batch(f->engine, &b.msg, &id, &first, &code, reason, sizeof reason), -1);
    assert_int_equal(code, OQ_ERR_FULL);
    assert_int_equal(oq_engine_job_count(f->engine), 0);
    assert_int_equal(oq_engine_batch_count(f->engine), 0);
    assert_int_equal(oq_engine_next_id(f->engine), next);
    /* A job with a unique key is refused too: the batch's ids are one range. */
    s_batch(&b, 2, true, false, false);
    b.jobs[1].unique_key = oq_str("order-7");
    assert_int_equal(
        oq_engine_dispatch_batch(f->engine, &b.msg, &id, &first, &code, reason, sizeof reason), -1);
    assert_int_equal(code, OQ_ERR_BAD_REQUEST);
    assert_int_equal(oq_engine_job_count(f->engine), 0);
}

static void test_resent_dispatch_id_returns_the_first_batch(void **state)
{
    ef_fixture_t *f = *state;
    s_batch_t b;
    s_batch(&b, 2, true, false, false);
    b.msg.dispatch_id = oq_str("import-42");
    uint64_t id = s_dispatch(f, &b);
    assert_int_equal(s_dispatch(f, &b), id);
    assert_int_equal(oq_engine_job_count(f->engine), 2);
}

static off_t s_size(ef_fixture_t *f)
{
    struct stat st;
    assert_int_equal(stat(ef_path(f, "journal"), &st), 0);
    return st.st_size;
}

/* The records an ack of the last job appends: DONE (frame, type, id),
   then the callback's DISPATCHED, then BATCH_FIRED (frame, type, batch
   id, callback, job id). */
#define S_DONE_RECORD_BYTES  (OQ_RECORD_FRAME_BYTES + 1 + 8)
#define S_FIRED_RECORD_BYTES (OQ_RECORD_FRAME_BYTES + 1 + 8 + 1 + 8)

/* Run a batch of two to the last ack in a journal, cut the journal at
   cut_from_end bytes before the end (or at the end of the last DONE if
   negative), restart, and return the fixture for checks. */
static uint64_t s_crash_after_trigger(ef_fixture_t *f, long cut)
{
    ef_open_ok(f, NULL);
    s_batch_t b;
    s_batch(&b, 2, true, false, false);
    uint64_t id = s_dispatch(f, &b);
    oq_worker_t *w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, id + 1, 1, OQ_OUTCOME_OK);
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    off_t before = s_size(f);
    ef_ack_leased(f, w, id + 2, 1, OQ_OUTCOME_OK);
    assert_int_equal(s_held(f, "bonus").count, 1);
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    off_t after = s_size(f);
    ef_close(f);
    off_t at = cut < 0 ? before + S_DONE_RECORD_BYTES : after - cut;
    assert_true(at > before && at <= after);
    assert_int_equal(truncate(ef_path(f, "journal"), at), 0);
    unlink(ef_path(f, "journal.durable")); /* the cut bytes were never durable */
    ef_open_ok(f, NULL);                   /* the restart: replay, then settle */
    return id;
}

static void test_crash_before_the_callback_dispatch_dispatches_it_once(void **state)
{
    ef_fixture_t *f = *state;
    uint64_t id = s_crash_after_trigger(f, -1);
    assert_int_equal(s_held(f, "bonus").count, 1);
    assert_int_equal(oq_engine_job_count(f->engine), 1);
    /* Another restart finds it fired. */
    ef_open_ok(f, NULL);
    assert_int_equal(s_held(f, "bonus").count, 1);
    assert_int_equal(oq_engine_batch_count(f->engine), 0);
    (void)id;
}

static void test_crash_before_the_firing_record_keeps_the_first_callback(void **state)
{
    ef_fixture_t *f = *state;
    s_crash_after_trigger(f, S_FIRED_RECORD_BYTES);
    s_count_t c = s_held(f, "bonus");
    assert_int_equal(c.count, 1); /* the restored one, answered by its dispatch id */
    assert_int_equal(oq_engine_job_count(f->engine), 1);
    ef_open_ok(f, NULL);
    assert_int_equal(s_held(f, "bonus").count, 1);
    assert_int_equal(s_held(f, "bonus").last, c.last);
}

static void test_counts_survive_a_restart_and_a_snapshot(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    s_batch_t b;
    s_batch(&b, 3, true, true, true);
    uint64_t id = s_dispatch(f, &b);
    oq_worker_t *w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, id + 1, 1, OQ_OUTCOME_OK);
    ef_ack_leased(f, w, id + 2, 1, OQ_OUTCOME_FAIL);
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    ef_open_ok(f, NULL);
    oq_batch_view_t v = s_view(f, id);
    assert_int_equal(v.done, 1);
    assert_int_equal(v.failed, 1);
    assert_int_equal(v.pending, 1);
    assert_int_not_equal(v.callback_ids[OQ_BATCH_CATCH], 0);
    assert_int_equal(s_held(f, "alert").count, 1);
    /* A snapshot holds the batch with the counts of its jobs gone. */
    int fd = open(ef_path(f, "snap"), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(fd >= 0);
    uint64_t bytes;
    assert_int_equal(oq_compact_snapshot(fd, &f->ops, oq_journal_header(f->journal), f->engine,
                                         EF_WALL_BASE_MS, &bytes),
                     0);
    close(fd);
    ef_close(f);
    assert_int_equal(rename(ef_path(f, "snap"), ef_path(f, "journal")), 0);
    unlink(ef_path(f, "journal.durable"));
    ef_open_ok(f, NULL);
    v = s_view(f, id);
    assert_int_equal(v.done, 1);
    assert_int_equal(v.failed, 1);
    assert_int_equal(v.pending, 1);
    assert_int_equal(s_held(f, "alert").count, 1);
    w = ef_lease_all(f, 'b');
    ef_ack_leased(f, w, id + 3, 2, OQ_OUTCOME_OK); /* its second delivery */
    assert_int_equal(s_held(f, "report").count, 1);
    assert_int_equal(s_held(f, "alert").count, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_then_runs_once_when_every_job_is_done, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_catch_on_first_failure_and_no_then, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_allow_failures_runs_then_once_all_have_settled,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_withdraws_waiting_jobs_and_runs_finally,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_batch_over_a_limit_is_refused_before_anything_is_made,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_resent_dispatch_id_returns_the_first_batch, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_crash_before_the_callback_dispatch_dispatches_it_once,
                                        ef_setup_journal, ef_teardown),
        cmocka_unit_test_setup_teardown(
            test_crash_before_the_firing_record_keeps_the_first_callback, ef_setup_journal,
            ef_teardown),
        cmocka_unit_test_setup_teardown(test_counts_survive_a_restart_and_a_snapshot,
                                        ef_setup_journal, ef_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
