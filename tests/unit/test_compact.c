/*  test_compact: a compaction writes a journal that replays to the same live
    state (jobs in every state, their attempts and errors, dispatch ids, the
    next id), keeps what was appended while its child ran, shrinks the file
    to the size of the live jobs, keeps a requeued job's generation (the
    tokens of its deliveries before the requeue stay dead), and leaves the
    old journal alone when the disk fails under it. The child is a real
    fork. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compact.h"
#include "onceq/limits.h"
#include "record.h"
#include "replay.h"
#include "engine_fixture.h"

/* Why the engine refused a resolve (oq_engine_review_resolve). */
static oq_refusal_t s_why;

#define S_CHILD_MS  20000 /* a child gets this long at most */
#define S_MIN_BYTES 4096
#define S_RATIO     4

/* The journal fixture with a compactor on top. */
static int s_setup(void **state)
{
    ef_setup_journal(state);
    ef_fixture_t *f = *state;
    f->compact_config = (oq_compact_config_t){S_MIN_BYTES, S_RATIO};
    return 0;
}

static uint64_t s_journal_size(ef_fixture_t *f)
{
    struct stat st;
    assert_int_equal(stat(ef_path(f, "journal"), &st), 0);
    return (uint64_t)st.st_size;
}

/* Open (or reopen: a restart) and replay; every record is understood. */
static void s_open(ef_fixture_t *f)
{
    oq_replay_report_t r;
    ef_open_ok(f, &r);
    assert_int_equal(r.ignored, 0);
}

static const uint8_t s_payload[] = {0x81, 0xa1, 'n', 0x07};

static uint64_t s_dispatch(ef_fixture_t *f, const char *type, int64_t delay_ms)
{
    oq_job_msg_t job = EF_JOB(.type = type, .payload = s_payload, .payload_len = sizeof s_payload,
                              .delay_ms = delay_ms);
    return ef_dispatch(f, &job);
}

/* A dispatch with dispatch_id: the job's id; new (1) or the job of an
   earlier dispatch with that id (0), as the job count tells. */
static uint64_t s_dispatch_id(ef_fixture_t *f, const char *dispatch_id, size_t expect_new)
{
    size_t jobs = oq_engine_job_count(f->engine);
    oq_job_msg_t job = EF_JOB(.type = "noop", .payload = s_payload, .payload_len = sizeof s_payload,
                              .dispatch_id = dispatch_id);
    uint64_t id = ef_dispatch(f, &job);
    assert_int_equal(oq_engine_job_count(f->engine), jobs + expect_new);
    return id;
}

static oq_worker_t *s_lease_all(ef_fixture_t *f)
{
    return ef_lease_all(f, 'w');
}

static void s_flush(ef_fixture_t *f)
{
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
}

/* Run a compaction to its end: 1 if it replaced the journal, -1 if not. */
static int s_compact(ef_fixture_t *f, void (*meanwhile)(ef_fixture_t *f))
{
    assert_int_equal(oq_compact_start(f->compact), 0);
    if (meanwhile)
        meanwhile(f);
    struct pollfd p = {oq_compact_fd(f->compact), POLLIN, 0};
    assert_int_equal(poll(&p, 1, S_CHILD_MS), 1);
    return oq_compact_poll(f->compact);
}

typedef struct {
    uint64_t done, retried, failed, leased, ready, delayed;
} s_ids_t;

static s_ids_t s_history(ef_fixture_t *f)
{
    s_ids_t ids;
    ids.done = s_dispatch(f, "noop", 0);
    ids.retried = s_dispatch(f, "flaky", 0);
    ids.failed = s_dispatch(f, "bad", 0);
    ids.leased = s_dispatch(f, "slow", 0);
    oq_worker_t *w = s_lease_all(f);
    ef_ack_leased(f, w, ids.done, 1, OQ_OUTCOME_OK);
    ef_ack_leased(f, w, ids.retried, 1, OQ_OUTCOME_RETRY);
    ef_ack_leased(f, w, ids.failed, 1, OQ_OUTCOME_FAIL);
    /* Plenty of finished work for the compaction to drop. */
    for (int i = 0; i < 200; i++) {
        uint64_t id = s_dispatch(f, "churn", 0);
        oq_worker_t *cw = s_lease_all(f);
        ef_ack_leased(f, cw, id, 1, OQ_OUTCOME_OK);
    }
    ids.ready = s_dispatch(f, "noop", 0);
    ids.delayed = s_dispatch(f, "noop", 60000);
    s_flush(f);
    return ids;
}

static void s_expect_history(ef_fixture_t *f, const s_ids_t *ids)
{
    ef_expect(f, ids->done, NULL, 0);
    ef_expect(f, ids->retried, "delayed", 1);
    ef_expect(f, ids->failed, "failed", 1);
    ef_expect(f, ids->leased, "ready", 1);
    ef_expect(f, ids->ready, "ready", 0);
    ef_expect(f, ids->delayed, "delayed", 0);
    ef_expect(f, ids->ready, "ready", 0);
    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, ids->failed, &v), 0);
    assert_string_equal(v.error, "it broke");
}

static void test_compacted_journal_replays_to_the_same_state(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    /* A job done long ago: only its dispatch id is left, which the snapshot
       must keep (the job's own records are dropped). */
    uint64_t gone = s_dispatch_id(f, "order-9", 1);
    ef_ack_leased(f, s_lease_all(f), gone, 1, OQ_OUTCOME_OK);
    assert_null(oq_engine_job_state(f->engine, gone));
    s_ids_t ids = s_history(f);
    uint64_t next_id = oq_engine_next_id(f->engine);
    uint64_t before = s_journal_size(f);
    assert_true(oq_compact_due(f->compact));
    assert_int_equal(s_compact(f, NULL), 1);
    assert_int_equal(oq_compact_count(f->compact), 1);
    assert_true(s_journal_size(f) < before / 10);
    assert_false(oq_compact_due(f->compact));

    s_open(f);
    s_expect_history(f, &ids);
    assert_int_equal(oq_engine_job_count(f->engine), 5);
    assert_int_equal(oq_engine_next_id(f->engine), next_id);
    assert_int_equal(oq_engine_dispatch_ids(f->engine), 1);
    assert_int_equal(s_dispatch_id(f, "order-9", 0), gone);
    assert_int_equal(oq_engine_next_id(f->engine), next_id);
}

/* The review store through a restart and a compaction: jobs in review with
   their reasons, and the remembered resolutions with their notes. A job
   resolved as retry and sent to review again stays in review: the
   snapshot's resolution of its first stay must not resolve its second. */
static void s_expect_reviews(ef_fixture_t *f, uint64_t open_id, uint64_t done_id, uint64_t again_id)
{
    ef_expect(f, open_id, "review", 1);
    ef_expect(f, done_id, NULL, 0);
    ef_expect(f, again_id, "review", 1);
    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, open_id, &v), 0);
    assert_string_equal(v.error, "it broke");
    const oq_resolution_t *r = oq_engine_review_resolution(f->engine, done_id);
    assert_non_null(r);
    assert_int_equal(r->action, OQ_REVIEW_DONE);
    assert_string_equal(r->note, "the carrier has SHP-000001");
    assert_string_equal(r->reason, "it broke");
    assert_string_equal(r->type, "ship");
    r = oq_engine_review_resolution(f->engine, again_id);
    assert_non_null(r);
    assert_int_equal(r->action, OQ_REVIEW_RETRY);
    assert_int_equal(oq_engine_review_resolved_count(f->engine), 2);
    oq_queue_stats_t s;
    oq_engine_queue_stats(f->engine, 0, &s);
    assert_int_equal(s.review, 2);
}

static void test_review_store_survives_restart_and_compaction(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    uint64_t open_id = s_dispatch(f, "ship", 0), done_id = s_dispatch(f, "ship", 0),
             again_id = s_dispatch(f, "ship", 0);
    oq_worker_t *w = s_lease_all(f);
    ef_ack_leased(f, w, open_id, 1, OQ_OUTCOME_REVIEW);
    ef_ack_leased(f, w, done_id, 1, OQ_OUTCOME_REVIEW);
    ef_ack_leased(f, w, again_id, 1, OQ_OUTCOME_REVIEW);
    char reason[256];
    assert_int_equal(oq_engine_review_resolve(f->engine, done_id, OQ_REVIEW_DONE,
                                              "the carrier has SHP-000001", &s_why, reason,
                                              sizeof reason),
                     0);
    assert_int_equal(oq_engine_review_resolve(f->engine, again_id, OQ_REVIEW_RETRY, "try again",
                                              &s_why, reason, sizeof reason),
                     0);
    w = s_lease_all(f);
    ef_ack_leased(f, w, again_id, 1, OQ_OUTCOME_REVIEW);
    for (int i = 0; i < 200; i++) {
        uint64_t id = s_dispatch(f, "churn", 0);
        ef_ack_leased(f, s_lease_all(f), id, 1, OQ_OUTCOME_OK);
    }
    s_flush(f);

    s_open(f); /* a restart replays the records */
    s_expect_reviews(f, open_id, done_id, again_id);
    assert_int_equal(s_compact(f, NULL), 1);
    s_open(f); /* and the snapshot */
    s_expect_reviews(f, open_id, done_id, again_id);
}

static uint64_t s_during[3];

/* While the child writes: new jobs, and changes to jobs it is writing. */
static void s_meanwhile(ef_fixture_t *f)
{
    s_during[0] = s_dispatch(f, "noop", 0);
    s_during[1] = s_dispatch(f, "noop", 0);
    oq_worker_t *w = s_lease_all(f);
    ef_ack_leased(f, w, s_during[1], 1, OQ_OUTCOME_OK);
    s_during[2] = s_dispatch(f, "noop", 0);
    s_flush(f);
}

static void test_records_appended_while_the_child_runs_are_kept(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    s_ids_t ids = s_history(f);
    assert_int_equal(s_compact(f, s_meanwhile), 1);
    /* The pump meanwhile leased the history's ready job too. */
    s_open(f);
    ef_expect(f, s_during[0], "ready", 1);
    ef_expect(f, s_during[1], NULL, 0);
    ef_expect(f, s_during[2], "ready", 0);
    ef_expect(f, ids.ready, "ready", 1);
    ef_expect(f, ids.failed, "failed", 1);
    ef_expect(f, ids.done, NULL, 0);
    /* And appends go on into the new file. */
    uint64_t after = s_dispatch(f, "noop", 0);
    s_flush(f);
    s_open(f);
    ef_expect(f, after, "ready", 0);
}

/* While the child runs: appends that are still in memory, not written. */
static void s_meanwhile_unwritten(ef_fixture_t *f)
{
    s_during[0] = s_dispatch(f, "noop", 0);
    s_during[1] = s_dispatch(f, "noop", 0);
}

/* A compaction finishing while records waited in memory moved the append
   position past the end of the new file, leaving a hole that the next
   start took for damage. */
static void test_records_pending_at_the_switch_leave_no_hole(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    s_history(f);
    assert_int_equal(s_compact(f, s_meanwhile_unwritten), 1);
    uint64_t after = s_dispatch(f, "noop", 0);
    s_flush(f);
    assert_int_equal(s_journal_size(f), oq_journal_file_bytes(f->journal));
    s_open(f);
    ef_expect(f, s_during[0], "ready", 0);
    ef_expect(f, s_during[1], "ready", 0);
    ef_expect(f, after, "ready", 0);
}

static void test_disk_use_stays_proportional_to_live_jobs(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    uint64_t largest = 0;
    int compactions = 0;
    /* 20 live jobs at any time, 5,000 done in all: without compaction the
       file would grow without bound. */
    uint64_t live[20];
    for (int i = 0; i < 20; i++)
        live[i] = s_dispatch(f, "churn", 0);
    for (int round = 0; round < 250; round++) {
        oq_worker_t *w = s_lease_all(f);
        for (int i = 0; i < 20; i++) {
            ef_ack_leased(f, w, live[i], 1, OQ_OUTCOME_OK);
            live[i] = s_dispatch(f, "churn", 0);
        }
        s_flush(f);
        uint64_t size = s_journal_size(f);
        largest = size > largest ? size : largest;
        if (oq_compact_due(f->compact)) {
            assert_int_equal(s_compact(f, NULL), 1);
            compactions++;
        }
    }
    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, live[0], &v), 0);
    uint64_t per_job = oq_record_dispatched_bytes(&v);
    /* Never more than ratio x live state, or the minimum, plus one round. */
    uint64_t bound = S_MIN_BYTES + S_RATIO * 20 * per_job + 20 * 3 * per_job;
    assert_true(compactions > 10);
    if (largest > bound)
        fail_msg("the journal reached %llu bytes, bound %llu", (unsigned long long)largest,
                 (unsigned long long)bound);
    s_open(f);
    for (int i = 0; i < 20; i++)
        ef_expect(f, live[i], "ready", 0);
    assert_int_equal(oq_engine_job_count(f->engine), 20);
}

static void test_a_failed_snapshot_leaves_the_journal_alone(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    s_ids_t ids = s_history(f);
    uint64_t before = s_journal_size(f);
    f->disk.write_errno = ENOSPC; /* the child inherits the full disk */
    assert_int_equal(s_compact(f, NULL), -1);
    f->disk.write_errno = 0;
    assert_int_equal(s_journal_size(f), before);
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/journal.tmp", f->dir);
    assert_int_equal(access(tmp, F_OK), -1);
    assert_false(oq_compact_due(f->compact)); /* waits before trying again */
    uint64_t after = s_dispatch(f, "noop", 0);
    s_flush(f);
    s_open(f);
    s_expect_history(f, &ids);
    ef_expect(f, after, "ready", 0);
    assert_int_equal(oq_engine_job_count(f->engine), 6);
}

static void test_tried_again_after_a_failure(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    s_history(f);
    f->disk.write_errno = ENOSPC;
    assert_int_equal(s_compact(f, NULL), -1);
    f->disk.write_errno = 0;
    f->time.now += OQ_COMPACT_RETRY_MS - 1;
    assert_false(oq_compact_due(f->compact));
    f->time.now += 1;
    assert_true(oq_compact_due(f->compact));
    assert_int_equal(s_compact(f, NULL), 1);
}

/* On a full disk a compaction waits until its snapshot fits in the space
   that is free, rather than failing on it and waiting out the retry. */
static void test_on_a_full_disk_the_snapshot_must_fit_the_free_space(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    s_history(f);
    uint64_t live = oq_journal_live_bytes(f->journal) + OQ_RECORD_HEADER_BYTES;
    f->disk.free_bytes = live;
    assert_false(oq_compact_reclaim_due(f->compact));
    f->disk.free_bytes = 2 * live;
    assert_true(oq_compact_reclaim_due(f->compact));
}

static void test_not_due_below_the_minimum_or_the_ratio(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    for (int i = 0; i < 10; i++)
        s_dispatch(f, "noop", 0);
    s_flush(f);
    assert_false(oq_compact_due(f->compact)); /* under S_MIN_BYTES */
    for (int i = 0; i < 200; i++)
        s_dispatch(f, "noop", 0);
    s_flush(f);
    assert_true(s_journal_size(f) > S_MIN_BYTES);
    assert_false(oq_compact_due(f->compact)); /* every job is live */
}

static void s_collect_id(void *ctx, const oq_job_view_t *job)
{
    uint64_t *ids = ctx;
    while (*ids)
        ids++;
    *ids = job->id;
}

static uint64_t s_op_during[2];

/* While the child writes: a failed job it is writing is forgotten, and a
   ready one cancelled. */
static void s_meanwhile_operations(ef_fixture_t *f)
{
    oq_refusal_t why;
    char reason[256];
    assert_int_equal(oq_engine_forget(f->engine, s_op_during[0], &why, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_cancel(f->engine, s_op_during[1], &why, reason, sizeof reason), 0);
    s_flush(f);
}

/* A snapshot keeps each failed job's failure time (so the failed list's
   order), and jobs forgotten or cancelled before or during the compaction
   stay gone. */
static void test_failure_times_and_operator_changes_survive_compaction(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    uint64_t failed[3], forgotten = s_dispatch(f, "bad", 0);
    for (int i = 0; i < 3; i++)
        failed[i] = s_dispatch(f, "bad", 0);
    s_op_during[0] = s_dispatch(f, "bad", 0);
    oq_worker_t *w = s_lease_all(f);
    int64_t failed_at[3];
    static const int order[] = {1, 2, 0};
    for (int i = 0; i < 3; i++) {
        f->time.now += 250;
        ef_ack_leased(f, w, failed[order[i]], 1, OQ_OUTCOME_FAIL);
        failed_at[order[i]] = EF_WALL_BASE_MS + f->time.now;
    }
    ef_ack_leased(f, w, forgotten, 1, OQ_OUTCOME_FAIL);
    ef_ack_leased(f, w, s_op_during[0], 1, OQ_OUTCOME_FAIL);
    oq_refusal_t why;
    char reason[256];
    assert_int_equal(oq_engine_forget(f->engine, forgotten, &why, reason, sizeof reason), 0);
    f->time.now += 250;
    s_ids_t ids = s_history(f); /* its failed job fails last */
    uint64_t cancelled = s_dispatch(f, "noop", 60000);
    assert_int_equal(oq_engine_cancel(f->engine, cancelled, &why, reason, sizeof reason), 0);
    s_op_during[1] = s_dispatch(f, "noop", 60000);
    s_flush(f);
    assert_int_equal(s_compact(f, s_meanwhile_operations), 1);

    f->time.now += 500; /* the restart comes later: failure times must not be "now" */
    s_open(f);
    s_expect_history(f, &ids);
    ef_expect(f, forgotten, NULL, 0);
    ef_expect(f, cancelled, NULL, 0);
    ef_expect(f, s_op_during[0], NULL, 0);
    ef_expect(f, s_op_during[1], NULL, 0);
    uint64_t listed[8] = {0};
    bool more;
    assert_int_equal(oq_engine_failed_page(f->engine, NULL, NULL, 8, s_collect_id, listed, &more),
                     4);
    assert_int_equal(listed[3], ids.failed);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(listed[i], failed[order[i]]);
        oq_job_view_t v;
        assert_int_equal(oq_engine_job_view(f->engine, failed[i], &v), 0);
        assert_int_equal(v.failed_at_ms, failed_at[i]);
    }
}

static uint64_t s_dispatch_keyed(ef_fixture_t *f, const char *unique_key, int64_t unique_for_ms,
                                 const char *overlap_key, int *rc)
{
    oq_job_msg_t job = EF_JOB(.type = "keyed", .payload = s_payload,
                              .payload_len = sizeof s_payload, .unique_key = unique_key,
                              .unique_for_ms = unique_for_ms, .overlap_key = overlap_key);
    uint64_t id;
    oq_err_t code;
    char reason[256];
    *rc = oq_engine_dispatch(f->engine, &job, &id, &code, reason, sizeof reason);
    assert_true(*rc >= 0);
    return id;
}

/* The unique key held and where it answers, after a restart or a compaction. */
static void s_expect_keys(ef_fixture_t *f, uint64_t live, uint64_t windowed, uint64_t failed)
{
    int rc;
    assert_int_equal(s_dispatch_keyed(f, "live", 0, NULL, &rc), live);
    assert_int_equal(rc, 1);
    assert_int_equal(s_dispatch_keyed(f, "window", 0, NULL, &rc), windowed);
    assert_int_equal(rc, 1);
    assert_int_equal(s_dispatch_keyed(f, "failed", 0, NULL, &rc), failed);
    assert_int_equal(rc, 1);
    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, live, &v), 0);
    assert_string_equal(v.unique_key, "live");
    assert_string_equal(v.overlap_key, "cust");
    /* The failed job keeps its overlap key for a requeue, but holds its
       unique key by its window only. */
    assert_int_equal(oq_engine_job_view(f->engine, failed, &v), 0);
    assert_null(v.unique_key);
    assert_string_equal(v.overlap_key, "cust");
}

static void test_unique_and_overlap_keys_survive_restart_and_compaction(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    int rc;
    uint64_t windowed = s_dispatch_keyed(f, "window", 3600 * 1000, NULL, &rc);
    uint64_t failed = s_dispatch_keyed(f, "failed", 3600 * 1000, "cust", &rc);
    oq_worker_t *w = s_lease_all(f);
    ef_ack_leased(f, w, windowed, 1, OQ_OUTCOME_OK); /* done: its window holds the key on */
    ef_ack_leased(f, w, failed, 1, OQ_OUTCOME_FAIL);
    uint64_t live = s_dispatch_keyed(f, "live", 0, "cust", &rc);
    for (int i = 0; i < 200; i++) {
        uint64_t id = s_dispatch(f, "churn", 0);
        ef_ack_leased(f, s_lease_all(f), id, 1, OQ_OUTCOME_OK);
    }
    s_flush(f);

    s_open(f); /* a restart replays the records */
    s_expect_keys(f, live, windowed, failed);
    assert_int_equal(s_compact(f, NULL), 1);
    s_open(f); /* and the snapshot */
    s_expect_keys(f, live, windowed, failed);
    /* Past the window, the done job's key is free; the live one's is not. */
    f->time.now += 3600 * 1000 + 1;
    assert_true(s_dispatch_keyed(f, "window", 0, NULL, &rc) > live);
    assert_int_equal(rc, 0);
}

/* A requeue starts a new generation of lease tokens. A snapshot keeps it:
   after a requeue, a compaction and a restart, the first new delivery's
   token differs from the one the job had before the requeue, and an ok
   with the old token is fenced. A job failed again after its requeue keeps
   its generation too, so its next requeue moves on from there. */
static void test_requeue_generation_survives_compaction(void **state)
{
    ef_fixture_t *f = *state;
    s_open(f);
    uint64_t id = s_dispatch(f, "bad", 0);
    uint64_t again = s_dispatch(f, "bad", 0);
    oq_worker_t *w = s_lease_all(f);
    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, id, &v), 0);
    uint64_t old_lease = v.lease;
    ef_ack_leased(f, w, id, 1, OQ_OUTCOME_FAIL);
    ef_ack_leased(f, w, again, 1, OQ_OUTCOME_FAIL);
    char reason[256];
    oq_refusal_t why;
    assert_int_equal(oq_engine_requeue(f->engine, again, &why, reason, sizeof reason), 0);
    ef_ack_leased(f, s_lease_all(f), again, 1, OQ_OUTCOME_FAIL); /* failed in generation 1 */
    assert_int_equal(oq_engine_job_view(f->engine, again, &v), 0);
    uint64_t again_lease = v.lease;
    for (int i = 0; i < 200; i++) {
        uint64_t churn = s_dispatch(f, "churn", 0);
        ef_ack_leased(f, s_lease_all(f), churn, 1, OQ_OUTCOME_OK);
    }
    assert_int_equal(oq_engine_requeue(f->engine, id, &why, reason, sizeof reason), 0);
    s_flush(f);
    assert_int_equal(s_compact(f, NULL), 1);

    s_open(f);
    ef_expect(f, id, "ready", 0);
    ef_expect(f, again, "failed", 1);
    assert_int_equal(oq_engine_job_view(f->engine, id, &v), 0);
    assert_int_equal(v.generation, 1);
    assert_int_equal(oq_engine_job_view(f->engine, again, &v), 0);
    assert_int_equal(v.generation, 1);
    assert_int_equal(v.lease, again_lease);
    w = s_lease_all(f);
    ef_expect(f, id, "leased", 1);
    assert_int_equal(oq_engine_job_view(f->engine, id, &v), 0);
    assert_true(v.lease != old_lease);
    oq_ack_msg_t ack = {
        .id = id, .attempt = 1, .outcome = OQ_OUTCOME_OK, .lease = old_lease, .has_lease = true};
    assert_int_equal(oq_engine_ack(f->engine, w, NULL, &ack), OQ_ACK_FENCED);
    ef_expect(f, id, "leased", 1);
    assert_int_equal(oq_engine_requeue(f->engine, again, &why, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_job_view(f->engine, again, &v), 0);
    assert_int_equal(v.generation, 2);
}

int main(void)
{
#define S_TEST(t) cmocka_unit_test_setup_teardown(t, s_setup, ef_teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_review_store_survives_restart_and_compaction, s_setup,
                                        ef_teardown),
        S_TEST(test_compacted_journal_replays_to_the_same_state),
        S_TEST(test_records_appended_while_the_child_runs_are_kept),
        S_TEST(test_records_pending_at_the_switch_leave_no_hole),
        S_TEST(test_disk_use_stays_proportional_to_live_jobs),
        S_TEST(test_a_failed_snapshot_leaves_the_journal_alone),
        S_TEST(test_tried_again_after_a_failure),
        S_TEST(test_not_due_below_the_minimum_or_the_ratio),
        S_TEST(test_on_a_full_disk_the_snapshot_must_fit_the_free_space),
        S_TEST(test_failure_times_and_operator_changes_survive_compaction),
        S_TEST(test_unique_and_overlap_keys_survive_restart_and_compaction),
        S_TEST(test_requeue_generation_survives_compaction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
