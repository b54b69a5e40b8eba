/*  test_journal: the journal format, group commit, replay and disk errors.

    - records: every type survives encode/decode; framing tells a short, an
      impossible and a damaged record apart; the header refuses another
      file, a damaged header and a newer format;
    - group commit: one write and at most one fsync per flush; "always"
      fsyncs only when a reply waits (or the interval is over), "batch" waits
      for the interval, "off" never fsyncs;
    - replay: a journal rebuilds ready, delayed, failed jobs and dispatch
      ids; a torn write past the durable mark is cut with a warning; a
      length running past the end 40 KB before it, a bit flipped in the
      last durable record and a file cut below its mark are damage that
      stops the start (also without the mark, by the good records after
      it); repair resynchronises past each damaged range, keeps every
      record that verifies (counted exactly), skips records about jobs lost
      in a gap, and leaves a journal that starts cleanly; a damaged header
      is refused naming --repair, which rebuilds it under a new dedupe key
      (dispatch ids kept only as digests of the old one are forgotten);
    - disk errors through the seam: a failed write or fsync keeps every
      record, and after a failed fsync everything since the last good one is
      written again; at the broker, a dispatch waiting when the disk fills
      is answered "unavailable" at once, a full disk refuses new dispatches
      with "unavailable" while workers are served, releases the disk
      reserve, loses no confirmed job, and recovers when the reserve can be
      allocated again; a small disk (one capacity for every file of the
      data dir, a compaction child's too) filled by jobs still waiting
      accepts dispatches again within 2 s of the clock after workers
      drained them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "broker.h"
#include "crc32c.h"
#include "journal.h"
#include "onceq/limits.h"
#include "record.h"
#include "replay.h"
#include "engine_fixture.h"
#include "payloads.h"
#include "support.h"

#define S_TURNS   200 /* loop turns a broker test waits for a reply at most */
#define S_TURN_MS 5

/* ---- fixtures: the engine fixture's journal setup (engine_fixture.h) ---- */

static const uint8_t s_payload[] = {0x81, 0xa1, 'n', 0x07}; /* {"n": 7} */

static uint64_t s_dispatch(ef_fixture_t *f, const char *type, int64_t delay_ms,
                           const char *dispatch_id)
{
    oq_job_msg_t job = EF_JOB(.type = type, .payload = s_payload, .payload_len = sizeof s_payload,
                              .delay_ms = delay_ms, .dispatch_id = dispatch_id);
    return ef_dispatch(f, &job);
}

/* A dispatch sent again with dispatch_id: the id of the job it maps to
   (nothing new is queued: the job count stays). */
static uint64_t s_resend(ef_fixture_t *f, const char *dispatch_id)
{
    oq_job_msg_t job = EF_JOB(.type = "noop", .dispatch_id = dispatch_id);
    size_t jobs = oq_engine_job_count(f->engine);
    uint64_t id = ef_dispatch(f, &job);
    assert_int_equal(oq_engine_job_count(f->engine), jobs);
    return id;
}

static uint64_t s_file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

/* ---- records ---- */

static void test_record_round_trip_every_type(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    static const int64_t backoff[] = {1000, 60000};
    oq_job_view_t job = {
        .id = 77,
        .type = "grant_points",
        .queue = "orders",
        .payload = s_payload,
        .payload_len = sizeof s_payload,
        .max_tries = 5,
        .timeout_ms = 30000,
        .backoff_ms = backoff,
        .backoff_len = 2,
        .priority = -3,
        .not_before_ms = EF_WALL_BASE_MS + 5000,
    };
    uint8_t digest[OQ_SIPHASH_DIGEST_BYTES];
    memset(digest, 0xab, sizeof digest);
    assert_int_equal(oq_record_dispatched(&buf, &job, oq_str("order-42"), EF_WALL_BASE_MS), 0);
    assert_int_equal(oq_record_leased(&buf, 77, 2), 0);
    assert_int_equal(oq_record_retry(&buf, 77, 2, EF_WALL_BASE_MS + 10), 0);
    assert_int_equal(oq_record_failed(&buf, 77, 3, EF_WALL_BASE_MS + 20, "boom"), 0);
    assert_int_equal(oq_record_done(&buf, 77), 0);
    assert_int_equal(oq_record_requeued(&buf, 77), 0);
    assert_int_equal(oq_record_dedupe(&buf, digest, 77, EF_WALL_BASE_MS + 30), 0);
    assert_int_equal(oq_record_next_id(&buf, 78), 0);
    assert_int_equal(oq_record_forgotten(&buf, 77), 0);
    assert_int_equal(oq_record_cancelled(&buf, 77), 0);
    assert_int_equal(oq_record_generation(&buf, 77, 3), 0);

    const uint8_t *p = (const uint8_t *)buf.data;
    size_t left = buf.size, frame;
    oq_record_t rec;
    char why[256];
    const int types[] = {OQ_RECORD_DISPATCHED, OQ_RECORD_LEASED,    OQ_RECORD_RETRY,
                         OQ_RECORD_FAILED,     OQ_RECORD_DONE,      OQ_RECORD_REQUEUED,
                         OQ_RECORD_DEDUPE,     OQ_RECORD_NEXT_ID,   OQ_RECORD_FORGOTTEN,
                         OQ_RECORD_CANCELLED,  OQ_RECORD_GENERATION};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        assert_int_equal(oq_record_frame(p, left, &frame), OQ_FRAME_OK);
        if (oq_record_decode(p, frame, &rec, why, sizeof why) < 0)
            fail_msg("decode %zu: %s", i, why);
        assert_int_equal(rec.type, types[i]);
        assert_true(oq_record_verify(p, left, &frame));
        switch (rec.type) {
        case OQ_RECORD_DISPATCHED:
            assert_int_equal(frame, oq_record_dispatched_bytes(&job) + strlen("order-42"));
            assert_int_equal(rec.id, 77);
            assert_int_equal(rec.job.id, 77);
            assert_true(oq_str_eq(rec.job.type, "grant_points"));
            assert_true(oq_str_eq(rec.job.queue, "orders"));
            assert_true(oq_str_eq(rec.job.dispatch_id, "order-42"));
            assert_int_equal(rec.job.payload_len, sizeof s_payload);
            assert_memory_equal(rec.job.payload, s_payload, sizeof s_payload);
            assert_int_equal(rec.job.max_tries, 5);
            assert_int_equal(rec.job.timeout_ms, 30000);
            assert_int_equal(rec.job.priority, -3);
            assert_int_equal(rec.job.backoff_len, 2);
            assert_int_equal(rec.job.backoff_ms[1], 60000);
            assert_int_equal(rec.at_ms, EF_WALL_BASE_MS + 5000);
            assert_int_equal(rec.dispatched_at_ms, EF_WALL_BASE_MS);
            break;
        case OQ_RECORD_LEASED:
            assert_int_equal(rec.attempt, 2);
            break;
        case OQ_RECORD_RETRY:
            assert_int_equal(rec.attempt, 2);
            assert_int_equal(rec.at_ms, EF_WALL_BASE_MS + 10);
            break;
        case OQ_RECORD_FAILED:
            assert_int_equal(rec.attempt, 3);
            assert_int_equal(rec.at_ms, EF_WALL_BASE_MS + 20);
            assert_true(oq_str_eq(rec.error, "boom"));
            break;
        case OQ_RECORD_DEDUPE:
            assert_memory_equal(rec.digest, digest, sizeof digest);
            assert_int_equal(rec.at_ms, EF_WALL_BASE_MS + 30);
            assert_int_equal(rec.id, 77);
            break;
        case OQ_RECORD_NEXT_ID:
            assert_int_equal(rec.id, 78);
            break;
        case OQ_RECORD_GENERATION:
            assert_int_equal(rec.id, 77);
            assert_int_equal(rec.generation, 3);
            break;
        default:
            assert_int_equal(rec.id, 77);
        }
        p += frame;
        left -= frame;
    }
    assert_int_equal(left, 0);
    assert_int_equal(oq_record_dedupe_bytes(), 41);
    msgpack_sbuffer_destroy(&buf);
}

/* Format version 2: the review store's records, and a damaged one refused. */
static void test_record_round_trip_review_and_resolved(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    char note[OQ_MAX_REVIEW_NOTE_LEN + 1];
    memset(note, 'n', OQ_MAX_REVIEW_NOTE_LEN);
    note[OQ_MAX_REVIEW_NOTE_LEN] = 0;
    oq_resolution_t r = {.id = 77,
                         .action = OQ_REVIEW_FAIL,
                         .attempt = 3,
                         .reviewed_at_ms = EF_WALL_BASE_MS + 20,
                         .resolved_at_ms = EF_WALL_BASE_MS + 30,
                         .type = "request_shipment",
                         .queue = "ships",
                         .reason = "timed out after the request went out",
                         .note = note};
    assert_int_equal(oq_record_review(&buf, 77, 3, EF_WALL_BASE_MS + 20, "unknown"), 0);
    assert_int_equal(oq_record_resolved(&buf, &r), 0);
    const uint8_t *p = (const uint8_t *)buf.data;
    size_t frame;
    oq_record_t rec;
    char why[256];
    assert_true(oq_record_verify(p, buf.size, &frame));
    assert_int_equal(oq_record_decode(p, frame, &rec, why, sizeof why), 0);
    assert_int_equal(rec.type, OQ_RECORD_REVIEW);
    assert_int_equal(rec.id, 77);
    assert_int_equal(rec.attempt, 3);
    assert_int_equal(rec.at_ms, EF_WALL_BASE_MS + 20);
    assert_true(oq_str_eq(rec.error, "unknown"));
    p += frame;
    size_t left = buf.size - frame;
    assert_true(oq_record_verify(p, left, &frame));
    assert_int_equal(frame, left);
    assert_int_equal(oq_record_decode(p, frame, &rec, why, sizeof why), 0);
    assert_int_equal(rec.type, OQ_RECORD_RESOLVED);
    assert_int_equal(rec.id, 77);
    assert_int_equal(rec.attempt, 3);
    assert_int_equal(rec.action, OQ_REVIEW_FAIL);
    assert_int_equal(rec.reviewed_at_ms, EF_WALL_BASE_MS + 20);
    assert_int_equal(rec.at_ms, EF_WALL_BASE_MS + 30);
    assert_true(oq_str_eq(rec.job.type, "request_shipment"));
    assert_true(oq_str_eq(rec.job.queue, "ships"));
    assert_true(oq_str_eq(rec.error, "timed out after the request went out"));
    assert_true(oq_str_eq(rec.note, note));
    assert_string_equal(oq_record_type_name(OQ_RECORD_RESOLVED), "resolved");

    /* An action byte this broker does not know: refused, not guessed. */
    msgpack_sbuffer_clear(&buf);
    r.note = "";
    assert_int_equal(oq_record_resolved(&buf, &r), 0);
    uint8_t *body = (uint8_t *)buf.data;
    body[OQ_RECORD_FRAME_BYTES + 1 + 8 + 4] = 9; /* type, id, attempt, then the action */
    uint32_t len = (uint32_t)(buf.size - OQ_RECORD_FRAME_BYTES);
    uint32_t crc = oq_crc32c(0, body + OQ_RECORD_FRAME_BYTES, len);
    for (int i = 0; i < 4; i++)
        body[4 + i] = (uint8_t)(crc >> (8 * i));
    assert_int_equal(oq_record_frame(body, buf.size, &frame), OQ_FRAME_OK);
    assert_int_equal(oq_record_decode(body, frame, &rec, why, sizeof why), -1);
    assert_non_null(strstr(why, "unknown action 9"));
    msgpack_sbuffer_destroy(&buf);
}

static void test_frame_tells_short_impossible_and_damaged(void **state)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_record_done(&buf, 5);
    uint8_t *p = (uint8_t *)buf.data;
    size_t frame;
    assert_int_equal(oq_record_frame(p, 3, &frame), OQ_FRAME_SHORT);
    assert_int_equal(oq_record_frame(p, buf.size - 1, &frame), OQ_FRAME_SHORT);
    assert_int_equal(frame, buf.size);
    p[OQ_RECORD_FRAME_BYTES + 2] ^= 0x10;
    assert_int_equal(oq_record_frame(p, buf.size, &frame), OQ_FRAME_BAD_CRC);
    p[OQ_RECORD_FRAME_BYTES + 2] ^= 0x10;
    assert_int_equal(oq_record_frame(p, buf.size, &frame), OQ_FRAME_OK);
    uint8_t zeros[16] = {0};
    assert_int_equal(oq_record_frame(zeros, sizeof zeros, &frame), OQ_FRAME_BAD_LENGTH);
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0x7f};
    assert_int_equal(oq_record_frame(huge, sizeof huge, &frame), OQ_FRAME_BAD_LENGTH);

    /* Whole and checksummed, but a type this broker does not know. */
    p[OQ_RECORD_FRAME_BYTES] = 99;
    uint32_t crc = oq_crc32c(0, p + OQ_RECORD_FRAME_BYTES, buf.size - OQ_RECORD_FRAME_BYTES);
    for (int i = 0; i < 4; i++)
        p[4 + i] = (uint8_t)(crc >> (8 * i)); /* little-endian, as the format says */
    oq_record_t rec;
    char why[256];
    assert_int_equal(oq_record_frame(p, buf.size, &frame), OQ_FRAME_OK);
    assert_int_equal(oq_record_decode(p, frame, &rec, why, sizeof why), -1);
    assert_non_null(strstr(why, "unknown record type 99"));
    msgpack_sbuffer_destroy(&buf);
}

static void test_header_refuses_other_files_and_newer_formats(void **state)
{
    oq_record_header_t h = {.version = OQ_JOURNAL_FORMAT_VERSION, .created_ms = 5}, back;
    memset(h.dedupe_key, 3, sizeof h.dedupe_key);
    uint8_t bytes[OQ_RECORD_HEADER_BYTES];
    char why[256];
    oq_record_header_encode(&h, bytes);
    assert_int_equal(oq_record_header_decode(bytes, sizeof bytes, &back, why, sizeof why), 0);
    assert_int_equal(back.created_ms, 5);
    assert_memory_equal(back.dedupe_key, h.dedupe_key, sizeof h.dedupe_key);

    h.version = OQ_JOURNAL_FORMAT_VERSION + 1;
    oq_record_header_encode(&h, bytes);
    assert_int_equal(oq_record_header_decode(bytes, sizeof bytes, &back, why, sizeof why), -1);
    assert_non_null(strstr(why, "newer than this broker"));

    h.version = OQ_JOURNAL_FORMAT_VERSION;
    oq_record_header_encode(&h, bytes);
    bytes[20] ^= 1;
    assert_int_equal(oq_record_header_decode(bytes, sizeof bytes, &back, why, sizeof why), -1);
    assert_non_null(strstr(why, "damaged"));
    memcpy(bytes, "SQLite f", 8);
    assert_int_equal(oq_record_header_decode(bytes, sizeof bytes, &back, why, sizeof why), -1);
    assert_non_null(strstr(why, "not an onceq journal"));
    assert_int_equal(oq_record_header_decode(bytes, 10, &back, why, sizeof why), -1);
}

/* ---- group commit ---- */

static void test_always_fsyncs_once_per_flush_when_a_reply_waits(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    int writes = f->disk.writes, fsyncs = f->disk.fsyncs;
    for (int i = 0; i < 10; i++)
        s_dispatch(f, "noop", 0, NULL);
    uint64_t needs = oq_journal_appended(f->journal);
    assert_true(needs > oq_journal_durable(f->journal));
    assert_int_equal(f->disk.writes, writes); /* nothing written until the turn ends */
    assert_int_equal(oq_journal_flush(f->journal, needs), 0);
    assert_int_equal(f->disk.writes - writes, 1);
    assert_int_equal(f->disk.fsyncs - fsyncs, 1);
    assert_int_equal(oq_journal_durable(f->journal), needs);

    /* Leases alone wait for no reply: written now, fsynced within the interval. */
    ef_lease_all(f, 'a');
    assert_int_equal(oq_journal_flush(f->journal, 0), 0);
    assert_int_equal(f->disk.writes - writes, 2);
    assert_int_equal(f->disk.fsyncs - fsyncs, 1);
    assert_true(oq_journal_durable(f->journal) < oq_journal_appended(f->journal));
    assert_int_equal(oq_journal_next_deadline(f->journal), f->time.now + EF_FSYNC_INTERVAL_MS);
    f->time.now += EF_FSYNC_INTERVAL_MS;
    assert_int_equal(oq_journal_flush(f->journal, 0), 0);
    assert_int_equal(f->disk.fsyncs - fsyncs, 2);
    assert_int_equal(oq_journal_durable(f->journal), oq_journal_appended(f->journal));
    assert_int_equal(oq_journal_next_deadline(f->journal), -1);
}

static void test_batch_waits_for_the_interval(void **state)
{
    ef_fixture_t *f = *state;
    f->policy = OQ_FSYNC_BATCH;
    ef_open_ok(f, NULL);
    int fsyncs = f->disk.fsyncs;
    s_dispatch(f, "noop", 0, NULL);
    uint64_t needs = oq_journal_appended(f->journal);
    assert_int_equal(oq_journal_flush(f->journal, needs), 0);
    assert_int_equal(f->disk.fsyncs, fsyncs); /* written, the reply waits */
    assert_true(oq_journal_durable(f->journal) < needs);
    f->time.now += EF_FSYNC_INTERVAL_MS - 1;
    oq_journal_flush(f->journal, needs);
    assert_true(oq_journal_durable(f->journal) < needs);
    f->time.now += 1;
    oq_journal_flush(f->journal, needs);
    assert_int_equal(f->disk.fsyncs - fsyncs, 1);
    assert_int_equal(oq_journal_durable(f->journal), needs);
}

static void test_off_never_fsyncs(void **state)
{
    ef_fixture_t *f = *state;
    f->policy = OQ_FSYNC_OFF;
    ef_open_ok(f, NULL);
    int fsyncs = f->disk.fsyncs;
    s_dispatch(f, "noop", 0, NULL);
    uint64_t needs = oq_journal_appended(f->journal);
    assert_int_equal(oq_journal_flush(f->journal, needs), 0);
    assert_int_equal(oq_journal_durable(f->journal), needs);
    f->time.now += 10 * EF_FSYNC_INTERVAL_MS;
    oq_journal_flush(f->journal, needs);
    assert_int_equal(f->disk.fsyncs, fsyncs);
    assert_int_equal(oq_journal_next_deadline(f->journal), -1);
}

/* ---- replay ---- */

/* A journal with every kind of state in it; returns the ids. */
typedef struct {
    uint64_t ready, delayed, retried, failed, done, requeued, leased, keyed;
} s_ids_t;

static s_ids_t s_build_history(ef_fixture_t *f)
{
    s_ids_t ids;
    ids.done = s_dispatch(f, "noop", 0, NULL);
    ids.retried = s_dispatch(f, "flaky", 0, NULL);
    ids.failed = s_dispatch(f, "bad", 0, NULL);
    ids.requeued = s_dispatch(f, "bad", 0, NULL);
    ids.leased = s_dispatch(f, "slow", 0, NULL);
    oq_worker_t *w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, ids.done, 1, OQ_OUTCOME_OK);
    ef_ack_leased(f, w, ids.retried, 1, OQ_OUTCOME_RETRY); /* delayed by the 1 s backoff */
    ef_ack_leased(f, w, ids.failed, 1, OQ_OUTCOME_FAIL);
    ef_ack_leased(f, w, ids.requeued, 1, OQ_OUTCOME_FAIL);
    char reason[256];
    oq_refusal_t why;
    assert_int_equal(oq_engine_requeue(f->engine, ids.requeued, &why, reason, sizeof reason), 0);
    ids.ready = s_dispatch(f, "noop", 0, NULL);
    ids.delayed = s_dispatch(f, "noop", 60000, NULL);
    ids.keyed = s_dispatch(f, "noop", 0, "order-42");
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    return ids;
}

static void s_expect_history(ef_fixture_t *f, const s_ids_t *ids)
{
    ef_expect(f, ids->done, NULL, 0);
    ef_expect(f, ids->retried, "delayed", 1);
    ef_expect(f, ids->failed, "failed", 1);
    ef_expect(f, ids->requeued, "ready", 0);
    ef_expect(f, ids->leased, "ready", 1); /* was leased: back with its attempt */
    ef_expect(f, ids->ready, "ready", 0);
    ef_expect(f, ids->delayed, "delayed", 0);
    ef_expect(f, ids->keyed, "ready", 0);
    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, ids->failed, &v), 0);
    assert_string_equal(v.error, "it broke");
    assert_int_equal(v.payload_len, sizeof s_payload);
    assert_memory_equal(v.payload, s_payload, sizeof s_payload);
    assert_int_equal(oq_engine_next_id(f->engine), ids->keyed + 1);
    /* The engine remembers the dispatch id again from the job's record. */
    assert_int_equal(s_resend(f, "order-42"), ids->keyed);
    assert_int_equal(oq_engine_next_id(f->engine), ids->keyed + 1);
}

static void test_replay_rebuilds_every_state(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    s_ids_t ids = s_build_history(f);
    oq_replay_report_t r;
    ef_open_ok(f, &r); /* a restart: the same journal into a fresh engine */
    s_expect_history(f, &ids);
    assert_int_equal(r.ready, 4);
    assert_int_equal(r.delayed, 2);
    assert_int_equal(r.failed, 1);
    assert_int_equal(r.dispatch_ids, 1);
    assert_int_equal(r.torn_bytes, 0);
    assert_int_equal(r.ignored, 0);
    assert_int_equal(r.bytes, s_file_size(ef_path(f, "journal")));
    /* Delays still count from the wall clock: the retry's second passes. */
    f->time.now += 1000;
    oq_engine_tick(f->engine);
    ef_expect(f, ids.retried, "ready", 1);
}

/* Write what was appended without making it durable: the fsync fails, so
   the durable mark stays where it was, as when the broker is killed between
   its write and its fsync. The journal is closed. */
static void s_write_unsynced(ef_fixture_t *f)
{
    f->disk.fsync_errno = EIO;
    oq_journal_flush(f->journal, oq_journal_appended(f->journal));
    ef_close(f);
    f->disk.fsync_errno = 0;
}

static void test_torn_tail_is_cut_with_a_warning(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    s_ids_t ids = s_build_history(f);
    uint64_t good = s_file_size(ef_path(f, "journal"));
    uint64_t last = s_dispatch(f, "noop", 0, NULL);
    s_write_unsynced(f);
    uint64_t whole = s_file_size(ef_path(f, "journal"));
    assert_true(whole > good);

    /* The broker died inside the write of its last record. */
    assert_int_equal(truncate(ef_path(f, "journal"), (off_t)(whole - 7)), 0);
    oq_replay_report_t r;
    ef_open_ok(f, &r);
    assert_true(r.has_mark);
    assert_int_equal(r.mark, good);
    assert_int_equal(r.torn_bytes, whole - 7 - good);
    assert_int_equal(s_file_size(ef_path(f, "journal")), good);
    s_expect_history(f, &ids);
    ef_expect(f, last, NULL, 0);

    /* And it goes on appending after the cut: the next start is clean. */
    uint64_t next = s_dispatch(f, "noop", 0, NULL);
    assert_int_equal(next, last); /* the id was never confirmed, so it is free */
    oq_journal_flush(f->journal, oq_journal_appended(f->journal));
    ef_open_ok(f, &r);
    assert_int_equal(r.torn_bytes, 0);
    ef_expect(f, next, "ready", 0);
}

static void test_zeros_or_a_bad_crc_past_the_mark_are_torn_too(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    s_ids_t ids = s_build_history(f);
    uint64_t good = s_file_size(ef_path(f, "journal"));
    ef_close(f);
    /* The file grew but the data never landed. */
    int fd = open(ef_path(f, "journal"), O_WRONLY | O_APPEND);
    uint8_t zeros[300] = {0};
    assert_int_equal(write(fd, zeros, sizeof zeros), (ssize_t)sizeof zeros);
    close(fd);
    oq_replay_report_t r;
    ef_open_ok(f, &r);
    assert_int_equal(r.torn_bytes, sizeof zeros);
    s_expect_history(f, &ids);

    /* The last record whole in length, but part of it never written. */
    uint64_t last = s_dispatch(f, "noop", 0, NULL);
    s_write_unsynced(f);
    uint64_t whole = s_file_size(ef_path(f, "journal"));
    fd = open(ef_path(f, "journal"), O_WRONLY);
    assert_int_equal(pwrite(fd, zeros, 20, (off_t)(whole - 20)), 20);
    close(fd);
    ef_open_ok(f, &r);
    assert_int_equal(r.torn_bytes, whole - good);
    ef_expect(f, last, NULL, 0);
}

/* Flip one byte inside the record that starts at offset `at` or later. */
static void s_damage_at(ef_fixture_t *f, uint64_t at)
{
    int fd = open(ef_path(f, "journal"), O_RDWR);
    uint8_t b;
    off_t where = (off_t)at + OQ_RECORD_FRAME_BYTES + 3;
    assert_int_equal(pread(fd, &b, 1, where), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, where), 1);
    close(fd);
}

static void s_write_u32(ef_fixture_t *f, uint64_t at, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    int fd = open(ef_path(f, "journal"), O_RDWR);
    assert_int_equal(pwrite(fd, b, 4, (off_t)at), 4);
    close(fd);
}

#define S_MAX_OFFSETS 4096

/* The offset of every record in the journal; returns how many. */
static size_t s_offsets(ef_fixture_t *f, uint64_t *offs)
{
    int fd = open(ef_path(f, "journal"), O_RDONLY);
    uint64_t size = s_file_size(ef_path(f, "journal"));
    uint8_t *data = malloc(size);
    assert_int_equal(pread(fd, data, size, 0), (ssize_t)size);
    close(fd);
    size_t n = 0;
    for (uint64_t at = OQ_RECORD_HEADER_BYTES; at < size;) {
        size_t frame;
        assert_int_equal(oq_record_frame(data + at, size - at, &frame), OQ_FRAME_OK);
        assert_true(n < S_MAX_OFFSETS);
        offs[n++] = at;
        at += frame;
    }
    free(data);
    return n;
}

static void test_damage_before_the_end_stops_the_start(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    s_dispatch(f, "noop", 0, NULL);
    oq_journal_flush(f->journal, oq_journal_appended(f->journal));
    uint64_t at = s_file_size(ef_path(f, "journal"));
    s_dispatch(f, "noop", 0, NULL);
    s_dispatch(f, "noop", 0, NULL);
    oq_journal_flush(f->journal, oq_journal_appended(f->journal));
    uint64_t size = s_file_size(ef_path(f, "journal"));
    ef_close(f);
    s_damage_at(f, at);

    char reason[4096];
    oq_replay_report_t r;
    assert_int_equal(ef_open(f, false, &r, reason, sizeof reason), -1);
    char where[64];
    snprintf(where, sizeof where, "damaged at byte %llu", (unsigned long long)at);
    assert_non_null(strstr(reason, where));
    assert_non_null(strstr(reason, "bad CRC"));
    assert_non_null(strstr(reason, "--repair"));
    assert_int_equal(s_file_size(ef_path(f, "journal")), size); /* nothing changed */
}

/* Many small group commits: the shape of a busy journal. */
static size_t s_build_many(ef_fixture_t *f, size_t jobs, uint64_t *offs)
{
    for (size_t i = 0; i < jobs; i++) {
        s_dispatch(f, "noop", 0, NULL);
        if (i % 10 == 9)
            assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    }
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    ef_close(f);
    return s_offsets(f, offs);
}

#define S_MANY_JOBS  1000
#define S_BACK_BYTES 40000

static void test_a_length_running_past_the_end_40kb_before_it_is_damage(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    uint64_t *offs = calloc(S_MAX_OFFSETS, sizeof *offs);
    size_t n = s_build_many(f, S_MANY_JOBS, offs);
    assert_int_equal(n, S_MANY_JOBS);
    uint64_t size = s_file_size(ef_path(f, "journal"));
    size_t k = 0;
    while (offs[k] < size - S_BACK_BYTES)
        k++;
    /* A legal length (under the record limit) that runs past the end. */
    uint32_t len = (uint32_t)(size - offs[k]);
    assert_true(len < OQ_JOURNAL_MAX_RECORD_BYTES);
    s_write_u32(f, offs[k], len);

    char reason[4096];
    oq_replay_report_t r;
    assert_int_equal(ef_open(f, false, &r, reason, sizeof reason), -1);
    assert_non_null(strstr(reason, "past the end of the file"));
    assert_non_null(strstr(reason, "below the durable mark"));
    assert_int_equal(s_file_size(ef_path(f, "journal")), size);

    /* Without the mark (a journal from before it existed), the good
       records after it prove the damage just the same. */
    assert_int_equal(unlink(ef_path(f, "journal.durable")), 0);
    assert_int_equal(ef_open(f, false, &r, reason, sizeof reason), -1);
    char next[64];
    snprintf(next, sizeof next, "good record at byte %llu", (unsigned long long)offs[k + 1]);
    assert_non_null(strstr(reason, next));

    /* Repair keeps every record but the damaged one. */
    if (ef_open(f, true, &r, reason, sizeof reason) < 0)
        fail_msg("repair: %s", reason);
    assert_int_equal(r.records, S_MANY_JOBS - 1);
    assert_int_equal(r.gaps, 1);
    assert_int_equal(r.ranges[0].from, offs[k]);
    assert_int_equal(r.ranges[0].to, offs[k + 1]);
    assert_int_equal(r.dropped_bytes, offs[k + 1] - offs[k]);
    assert_int_equal(s_file_size(r.saved_to), offs[k + 1] - offs[k]);
    assert_true(r.rewritten);
    assert_int_equal(r.ready, S_MANY_JOBS - 1);
    uint64_t lost = k + 1; /* ids run from 1 in record order */
    ef_expect(f, lost, NULL, 0);
    ef_expect(f, lost - 1, "ready", 0);
    ef_expect(f, lost + 1, "ready", 0);
    ef_expect(f, S_MANY_JOBS, "ready", 0);
    /* Ids the gap may have held are not handed out again. */
    assert_true(oq_engine_next_id(f->engine) > S_MANY_JOBS + 1);
    /* The rewritten journal starts cleanly. */
    ef_open_ok(f, &r);
    assert_int_equal(r.gaps, 0);
    assert_int_equal(r.torn_bytes, 0);
    assert_int_equal(r.ready, S_MANY_JOBS - 1);
    free(offs);
}

static void test_a_bit_flipped_in_the_last_durable_record_is_damage(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    uint64_t *offs = calloc(S_MAX_OFFSETS, sizeof *offs);
    size_t n = s_build_many(f, 20, offs);
    uint64_t size = s_file_size(ef_path(f, "journal"));
    s_damage_at(f, offs[n - 1]);

    char reason[4096];
    oq_replay_report_t r;
    assert_int_equal(ef_open(f, false, &r, reason, sizeof reason), -1);
    char where[64];
    snprintf(where, sizeof where, "damaged at byte %llu", (unsigned long long)offs[n - 1]);
    assert_non_null(strstr(reason, where));
    assert_non_null(strstr(reason, "below the durable mark"));
    assert_int_equal(s_file_size(ef_path(f, "journal")), size);

    if (ef_open(f, true, &r, reason, sizeof reason) < 0)
        fail_msg("repair: %s", reason);
    assert_int_equal(r.records, n - 1);
    assert_int_equal(r.gaps, 1);
    assert_int_equal(r.dropped_bytes, size - offs[n - 1]);
    assert_false(r.rewritten); /* a gap at the end is cut */
    assert_int_equal(s_file_size(ef_path(f, "journal")), offs[n - 1]);
    ef_expect(f, n, NULL, 0);
    ef_expect(f, n - 1, "ready", 0);
    free(offs);
}

static void test_a_journal_shorter_than_its_mark_is_damage(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    uint64_t *offs = calloc(S_MAX_OFFSETS, sizeof *offs);
    size_t n = s_build_many(f, 20, offs);
    /* Cut at a record boundary: every record left verifies. */
    assert_int_equal(truncate(ef_path(f, "journal"), (off_t)offs[n - 3]), 0);
    char reason[4096];
    oq_replay_report_t r;
    assert_int_equal(ef_open(f, false, &r, reason, sizeof reason), -1);
    assert_non_null(strstr(reason, "its end was cut off"));
    if (ef_open(f, true, &r, reason, sizeof reason) < 0)
        fail_msg("repair: %s", reason);
    assert_int_equal(r.records, n - 3);
    ef_open_ok(f, &r); /* the mark now agrees with the file */
    assert_int_equal(r.records, n - 3);
    free(offs);
}

static void test_repair_resyncs_and_keeps_every_good_record(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    uint64_t first = s_dispatch(f, "noop", 0, NULL);
    oq_journal_flush(f->journal, oq_journal_appended(f->journal));
    uint64_t at = s_file_size(ef_path(f, "journal"));
    uint64_t second = s_dispatch(f, "noop", 0, NULL);
    oq_journal_flush(f->journal, oq_journal_appended(f->journal));
    uint64_t after = s_file_size(ef_path(f, "journal"));
    uint64_t third = s_dispatch(f, "noop", 0, NULL);
    /* Records after the gap about the job whose DISPATCHED is lost. */
    oq_worker_t *w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, second, 1, OQ_OUTCOME_FAIL);
    ef_ack_leased(f, w, first, 1, OQ_OUTCOME_OK);
    uint64_t fourth = s_dispatch(f, "noop", 0, NULL);
    oq_journal_flush(f->journal, oq_journal_appended(f->journal));
    ef_close(f);
    uint64_t *offs = calloc(S_MAX_OFFSETS, sizeof *offs);
    size_t n = s_offsets(f, offs);
    s_damage_at(f, at);

    char reason[4096];
    oq_replay_report_t r;
    if (ef_open(f, true, &r, reason, sizeof reason) < 0)
        fail_msg("repair: %s", reason);
    assert_int_equal(r.gaps, 1);
    assert_int_equal(r.damaged_at, at);
    assert_int_equal(r.ranges[0].to, after);
    assert_int_equal(r.dropped_bytes, after - at);
    assert_int_equal(r.records, n - 1);
    assert_int_equal(r.ignored, 2); /* second's LEASED and FAILED */
    assert_true(r.saved_to[0]);
    assert_int_equal(s_file_size(r.saved_to), after - at);
    ef_expect(f, first, NULL, 0);
    ef_expect(f, second, NULL, 0);
    ef_expect(f, third, "ready", 1);
    ef_expect(f, fourth, "ready", 0);
    /* The repaired journal starts cleanly from then on. */
    ef_open_ok(f, &r);
    assert_int_equal(r.gaps, 0);
    assert_int_equal(r.ignored, 0);
    ef_expect(f, third, "ready", 1);
    ef_expect(f, fourth, "ready", 0);
    free(offs);
}

/* Flip one bit of the journal file at byte at. */
static void s_flip_bit(ef_fixture_t *f, off_t at, int bit)
{
    int fd = open(ef_path(f, "journal"), O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= (uint8_t)(1u << bit);
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

/* A damaged header (one bit of its dedupe key, then of its CRC) is refused
   with a reason naming --repair; --repair rebuilds it under a new dedupe
   key, keeps every record, saves the old header aside and rewrites the
   file. Dispatch ids written in full with their jobs still map to them;
   those the file remembered only by a digest of the old key are forgotten,
   and counted. A sound header of a newer format, or another file, is
   refused even with --repair. */
static void test_a_damaged_header_is_refused_then_rebuilt_by_repair(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    uint64_t a = s_dispatch(f, "noop", 0, "order-1");
    uint64_t b = s_dispatch(f, "noop", 0, NULL);
    uint64_t c = s_dispatch(f, "noop", 0, "order-2");
    ef_ack_leased(f, ef_lease_all(f, 'w'), c, 1, OQ_OUTCOME_OK);
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    uint8_t key[OQ_SIPHASH_KEY_BYTES];
    memcpy(key, oq_journal_header(f->journal)->dedupe_key, sizeof key);
    ef_close(f);
    s_flip_bit(f, 30, 3); /* in the dedupe key */

    char reason[4096];
    oq_replay_report_t r;
    assert_int_equal(ef_open(f, false, &r, reason, sizeof reason), -1);
    assert_non_null(strstr(reason, "damaged"));
    assert_non_null(strstr(reason, "--repair"));
    assert_null(f->journal);

    if (ef_open(f, true, &r, reason, sizeof reason) < 0)
        fail_msg("repair: %s", reason);
    assert_true(r.header_rebuilt);
    assert_true(r.rewritten);
    assert_int_equal(r.gaps, 0);
    assert_int_equal(r.digests_dropped, 0);
    assert_int_equal(r.ready, 2);
    assert_true(r.saved_to[0]);
    assert_int_equal(s_file_size(r.saved_to), OQ_RECORD_HEADER_BYTES);
    assert_memory_not_equal(oq_journal_header(f->journal)->dedupe_key, key, sizeof key);
    ef_expect(f, a, "ready", 1);
    ef_expect(f, b, "ready", 1);
    assert_int_equal(s_resend(f, "order-1"), a);
    assert_int_equal(s_resend(f, "order-2"), c);

    /* Sound from then on; the rewrite holds both ids as digests now. */
    ef_open_ok(f, &r);
    assert_false(r.header_rebuilt);
    ef_close(f);
    s_flip_bit(f, OQ_RECORD_HEADER_BYTES - 1, 0); /* in the CRC */
    f->time.now += 1;                             /* a side file of its own */
    assert_int_equal(ef_open(f, false, &r, reason, sizeof reason), -1);
    assert_non_null(strstr(reason, "--repair"));
    if (ef_open(f, true, &r, reason, sizeof reason) < 0)
        fail_msg("repair: %s", reason);
    assert_int_equal(r.digests_dropped, 2);
    assert_int_equal(r.ready, 2);
    ef_expect(f, a, "ready", 1);
    size_t jobs = oq_engine_job_count(f->engine);
    assert_true(s_dispatch(f, "noop", 0, "order-1") != a); /* a new job now */
    assert_int_equal(oq_engine_job_count(f->engine), jobs + 1);
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    ef_close(f);

    /* Not damage: a newer format, and a file that is no journal. */
    int fd = open(ef_path(f, "journal"), O_RDWR);
    uint8_t head[OQ_RECORD_HEADER_BYTES];
    assert_int_equal(pread(fd, head, sizeof head, 0), sizeof head);
    oq_record_header_t h;
    char why[256];
    assert_int_equal(oq_record_header_decode(head, sizeof head, &h, why, sizeof why), 0);
    h.version = OQ_JOURNAL_FORMAT_VERSION + 1;
    oq_record_header_encode(&h, head);
    assert_int_equal(pwrite(fd, head, sizeof head, 0), sizeof head);
    assert_int_equal(ef_open(f, true, &r, reason, sizeof reason), -1);
    assert_non_null(strstr(reason, "newer than this broker"));
    assert_int_equal(pwrite(fd, "#!/bin/sh\n", 10, 0), 10);
    assert_int_equal(ef_open(f, true, &r, reason, sizeof reason), -1);
    assert_non_null(strstr(reason, "not an onceq journal"));
    close(fd);
}

static void test_a_second_broker_is_refused_the_directory(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    oq_journal_config_t jc = {f->dir, OQ_FSYNC_ALWAYS, EF_FSYNC_INTERVAL_MS, NULL, 0, false};
    char reason[4096];
    oq_journal_t *second = oq_journal_new(&jc, &f->clock, reason, sizeof reason);
    assert_null(second);
    assert_non_null(strstr(reason, "in use by another onceq-broker"));
}

/* ---- disk errors ---- */

static void test_failed_write_keeps_records_and_resumes_where_it_stopped(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    uint64_t a = s_dispatch(f, "noop", 0, NULL);
    uint64_t b = s_dispatch(f, "noop", 0, NULL);
    f->disk.write_errno = ENOSPC;
    f->disk.write_budget = 30; /* part of the first record reaches the file */
    uint64_t needs = oq_journal_appended(f->journal);
    assert_int_equal(oq_journal_flush(f->journal, needs), -1);
    assert_false(oq_journal_healthy(f->journal));
    assert_non_null(strstr(oq_journal_error(f->journal), "No space left on device"));
    assert_true(oq_journal_durable(f->journal) < needs);
    /* Not retried before its time. */
    int writes = f->disk.writes;
    assert_int_equal(oq_journal_flush(f->journal, needs), -1);
    assert_int_equal(f->disk.writes, writes);
    assert_int_equal(oq_journal_next_deadline(f->journal), f->time.now + OQ_JOURNAL_RETRY_MS);

    f->disk.write_errno = 0;
    f->time.now += OQ_JOURNAL_RETRY_MS;
    assert_int_equal(oq_journal_flush(f->journal, needs), 0);
    assert_true(oq_journal_healthy(f->journal));
    assert_int_equal(oq_journal_durable(f->journal), needs);
    assert_int_equal(oq_journal_failures(f->journal), 1);
    oq_replay_report_t r;
    ef_open_ok(f, &r);
    assert_int_equal(r.torn_bytes, 0);
    ef_expect(f, a, "ready", 0);
    ef_expect(f, b, "ready", 0);
}

static void test_failed_fsync_writes_everything_since_the_last_good_one_again(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    s_dispatch(f, "noop", 0, NULL);
    oq_journal_flush(f->journal, oq_journal_appended(f->journal));
    uint64_t synced = s_file_size(ef_path(f, "journal"));
    uint64_t b = s_dispatch(f, "noop", 0, NULL);
    f->disk.fsync_errno = EIO;
    uint64_t needs = oq_journal_appended(f->journal);
    assert_int_equal(oq_journal_flush(f->journal, needs), -1);
    assert_non_null(strstr(oq_journal_error(f->journal), "fsync"));
    assert_true(oq_journal_durable(f->journal) < needs);
    f->disk.fsync_errno = 0;
    f->time.now += OQ_JOURNAL_RETRY_MS;
    assert_int_equal(oq_journal_flush(f->journal, needs), 0);
    /* The pages the failed fsync may have dropped went out again. */
    assert_int_equal(f->disk.last_offset, (off_t)synced);
    assert_int_equal(oq_journal_durable(f->journal), needs);
    ef_open_ok(f, NULL);
    ef_expect(f, b, "ready", 0);
}

/* ---- the broker on a full disk ---- */

typedef struct {
    oq_broker_t *broker;
    void *ctx, *producer, *worker;
    int64_t next_req;
} s_net_t;

static void s_send_msg(void *sock, msgpack_sbuffer *buf)
{
    assert_true(zmq_send(sock, buf->data, buf->size, 0) >= 0);
    msgpack_sbuffer_clear(buf);
}

/* Run broker turns until sock has a message (decoded into *msg), or give
   up after S_TURNS turns. 0 or -1. */
static int s_await(s_net_t *n, void *sock, oq_msg_t *msg)
{
    for (int i = 0; i < S_TURNS; i++) {
        oq_broker_turn(n->broker, S_TURN_MS);
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, sock, ZMQ_DONTWAIT) >= 0) {
            oq_err_t code;
            char why[256];
            int rc = oq_proto_decode(msg, zmq_msg_data(&frame), zmq_msg_size(&frame), &code, why,
                                     sizeof why);
            zmq_msg_close(&frame);
            assert_int_equal(rc, 0);
            return 0;
        }
        zmq_msg_close(&frame);
    }
    return -1;
}

static void s_net_dispatch(s_net_t *n, const char *dispatch_id)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_job_msg_t job = EF_JOB(.type = "noop", .dispatch_id = dispatch_id);
    oq_proto_encode_dispatch(&buf, n->next_req++, &job);
    s_send_msg(n->producer, &buf);
    msgpack_sbuffer_destroy(&buf);
}

static void s_start_broker(ef_fixture_t *f, s_net_t *n)
{
    char front[300], back[300], reason[4096];
    snprintf(front, sizeof front, "ipc://%s/front", f->dir);
    snprintf(back, sizeof back, "ipc://%s/back", f->dir);
    oq_broker_config_t c = oq_broker_config_default();
    c.front_endpoint = front;
    c.back_endpoint = back;
    c.journal.dir = ef_path(f, "data");
    c.journal.ops = &f->ops;
    if (f->reserve_bytes)
        c.journal.reserve_bytes = f->reserve_bytes;
    c.insecure = true;
    n->broker = oq_broker_new(&c, &f->clock, reason, sizeof reason);
    if (!n->broker)
        fail_msg("broker: %s", reason);
    n->ctx = zmq_ctx_new();
    int zero = 0;
    n->producer = zmq_socket(n->ctx, ZMQ_DEALER);
    n->worker = zmq_socket(n->ctx, ZMQ_DEALER);
    zmq_setsockopt(n->producer, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(n->worker, ZMQ_LINGER, &zero, sizeof zero);
    assert_int_equal(zmq_connect(n->producer, front), 0);
    assert_int_equal(zmq_connect(n->worker, back), 0);
    n->next_req = 1;
}

static void s_stop_broker(s_net_t *n)
{
    zmq_close(n->producer);
    zmq_close(n->worker);
    zmq_ctx_term(n->ctx);
    oq_broker_destroy(&n->broker);
}

static void test_full_disk_refuses_dispatches_serves_workers_and_recovers(void **state)
{
    ef_fixture_t *f = *state;
    s_net_t n;
    s_start_broker(f, &n);
    oq_msg_t msg;
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);

    /* A worker that will ack what it gets. */
    oq_proto_encode_ready(&buf, 10, "w", 1);
    s_send_msg(n.worker, &buf);
    assert_int_equal(s_await(&n, n.worker, &msg), 0);
    assert_int_equal(msg.cmd, OQ_CMD_WELCOME);
    oq_proto_msg_release(&msg);

    s_net_dispatch(&n, "a");
    assert_int_equal(s_await(&n, n.producer, &msg), 0);
    assert_int_equal(msg.cmd, OQ_CMD_DISPATCHED);
    uint64_t a = msg.id;
    oq_proto_msg_release(&msg);

    /* The disk fills up. B is taken before the broker knows; its record
       cannot be written, so it is answered "unavailable" at once rather
       than left waiting for the disk. */
    f->disk.write_errno = ENOSPC;
    s_net_dispatch(&n, "b");
    assert_int_equal(s_await(&n, n.producer, &msg), 0);
    assert_int_equal(msg.cmd, OQ_CMD_ERROR);
    assert_int_equal(msg.err_code, OQ_ERR_UNAVAILABLE);
    char text[512];
    oq_str_copy(msg.err_text, text, sizeof text);
    assert_non_null(strstr(text, "not confirmed"));
    oq_proto_msg_release(&msg);
    assert_int_equal(s_await(&n, n.worker, &msg), 0); /* job a */
    assert_int_equal(msg.cmd, OQ_CMD_JOB);
    uint64_t a_lease = msg.job.lease;
    oq_proto_msg_release(&msg);
    assert_int_equal(s_await(&n, n.worker, &msg), 0); /* job b */
    assert_int_equal(msg.cmd, OQ_CMD_JOB);
    uint64_t b = msg.job.id;
    oq_proto_msg_release(&msg);

    /* New work is refused with the reason... */
    s_net_dispatch(&n, "c");
    assert_int_equal(s_await(&n, n.producer, &msg), 0);
    assert_int_equal(msg.cmd, OQ_CMD_ERROR);
    assert_int_equal(msg.err_code, OQ_ERR_UNAVAILABLE);
    oq_str_copy(msg.err_text, text, sizeof text);
    assert_non_null(strstr(text, "No space left on device"));
    oq_proto_msg_release(&msg);

    /* ...while workers are served: the ack of a is taken. */
    oq_ack_msg_t ack = {.id = a,
                        .attempt = 1,
                        .outcome = OQ_OUTCOME_OK,
                        .credit = 1,
                        .lease = a_lease,
                        .has_lease = true};
    oq_proto_encode_ack(&buf, &ack);
    s_send_msg(n.worker, &buf);
    for (int i = 0; i < 10; i++)
        oq_broker_turn(n.broker, S_TURN_MS);
    assert_null(oq_engine_job_state(oq_broker_engine(n.broker), a));

    /* The disk has room again: once the reserve is back, b's resend with
       its dispatch id finds b, and c is taken. No operator action. */
    f->disk.write_errno = 0;
    f->time.now += OQ_JOURNAL_RESERVE_RETRY_MS;
    for (int i = 0; i < 3; i++)
        oq_broker_turn(n.broker, S_TURN_MS);
    s_net_dispatch(&n, "b");
    assert_int_equal(s_await(&n, n.producer, &msg), 0);
    assert_int_equal(msg.cmd, OQ_CMD_DISPATCHED);
    assert_int_equal(msg.id, b);
    oq_proto_msg_release(&msg);
    s_net_dispatch(&n, "c");
    assert_int_equal(s_await(&n, n.producer, &msg), 0);
    assert_int_equal(msg.cmd, OQ_CMD_DISPATCHED);
    uint64_t c = msg.id;
    oq_proto_msg_release(&msg);
    s_stop_broker(&n);

    /* After a restart: a is done, b and c are kept, and b's dispatch id
       still answers with b. */
    s_start_broker(f, &n);
    oq_engine_t *e = oq_broker_engine(n.broker);
    assert_null(oq_engine_job_state(e, a));
    assert_non_null(oq_engine_job_state(e, b));
    assert_non_null(oq_engine_job_state(e, c));
    s_net_dispatch(&n, "b");
    assert_int_equal(s_await(&n, n.producer, &msg), 0);
    assert_int_equal(msg.cmd, OQ_CMD_DISPATCHED);
    assert_int_equal(msg.id, b);
    oq_proto_msg_release(&msg);
    s_stop_broker(&n);
    msgpack_sbuffer_destroy(&buf);
}

/* ---- a small disk: one capacity shared by every file of the data dir ---- */

#define S_SMALL_DISK_BYTES    (1024 * 1024)
#define S_SMALL_RESERVE_BYTES (128 * 1024)
#define S_SMALL_PAD_BYTES     2000 /* payload padding: the disk fills in ~450 jobs */
#define S_SMALL_MAX_JOBS      4000
#define S_DRAIN_TURNS         20000
#define S_STEP_MS             100 /* the clock moves this much between dispatch tries */
#define S_STEP_TURNS          5
#define S_RECOVERY_BOUND_MS   2000 /* the docs say about 1 s; it took 10 s */

typedef struct {
    char dir[512];
    uint64_t capacity;
} s_small_t;

/* Bytes the data dir's files take. */
static uint64_t s_small_used(const s_small_t *d)
{
    DIR *dir = opendir(d->dir);
    uint64_t used = 0;
    struct stat st;
    for (struct dirent *e; dir && (e = readdir(dir));)
        if (fstatat(dirfd(dir), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
            used += (uint64_t)st.st_size;
    if (dir)
        closedir(dir);
    return used;
}

/* Room for growing the file of fd to end: how far it may grow. */
static uint64_t s_small_room(const s_small_t *d, int fd, uint64_t *size)
{
    struct stat st;
    *size = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    uint64_t used = s_small_used(d);
    return used < d->capacity ? d->capacity - used : 0;
}

/* As a real disk: what fits is written, then ENOSPC. Every file counts,
   also a compaction child's (it writes through its copy of the seam). */
static ssize_t s_small_pwrite(void *ctx, int fd, const void *data, size_t len, off_t offset)
{
    uint64_t size, room = s_small_room(ctx, fd, &size);
    uint64_t end = (uint64_t)offset + len;
    if (end > size + room) {
        if ((uint64_t)offset >= size + room) {
            errno = ENOSPC;
            return -1;
        }
        len = (size_t)(size + room - (uint64_t)offset);
    }
    return pwrite(fd, data, len, offset);
}

static int s_small_fsync(void *ctx, int fd)
{
    (void)ctx;
    return fsync(fd);
}

static int s_small_allocate(void *ctx, int fd, off_t len)
{
    uint64_t size, room = s_small_room(ctx, fd, &size);
    if ((uint64_t)len > size + room) {
        errno = ENOSPC;
        return -1;
    }
    int rc = posix_fallocate(fd, 0, len);
    errno = rc;
    return rc ? -1 : 0;
}

static int s_small_free(void *ctx, const char *dir, uint64_t *bytes)
{
    const s_small_t *d = ctx;
    (void)dir;
    uint64_t used = s_small_used(d);
    *bytes = used < d->capacity ? d->capacity - used : 0;
    return 0;
}

static void s_net_dispatch_padded(s_net_t *n)
{
    msgpack_sbuffer payload, buf;
    msgpack_sbuffer_init(&payload);
    msgpack_sbuffer_init(&buf);
    oq_payload_pad(&payload, S_SMALL_PAD_BYTES);
    oq_job_msg_t job = EF_JOB(.type = "noop", .payload = (const uint8_t *)payload.data,
                              .payload_len = payload.size);
    oq_proto_encode_dispatch(&buf, n->next_req++, &job);
    s_send_msg(n->producer, &buf);
    msgpack_sbuffer_destroy(&payload);
    msgpack_sbuffer_destroy(&buf);
}

/* The reply to one padded dispatch: DISPATCHED, or ERROR "unavailable". */
static oq_cmd_t s_try_dispatch(s_net_t *n)
{
    oq_msg_t msg;
    s_net_dispatch_padded(n);
    assert_int_equal(s_await(n, n->producer, &msg), 0);
    oq_cmd_t cmd = msg.cmd;
    if (cmd != OQ_CMD_DISPATCHED)
        assert_int_equal(msg.err_code, OQ_ERR_UNAVAILABLE);
    oq_proto_msg_release(&msg);
    return cmd;
}

/* Every job the worker socket gets is acked ok, until the broker holds none. */
static void s_drain(s_net_t *n)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready(&buf, 16, "w", 1);
    s_send_msg(n->worker, &buf);
    oq_engine_t *e = oq_broker_engine(n->broker);
    for (int i = 0; i < S_DRAIN_TURNS && oq_engine_job_count(e) > 0; i++) {
        oq_broker_turn(n->broker, S_TURN_MS);
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        while (zmq_msg_recv(&frame, n->worker, ZMQ_DONTWAIT) >= 0) {
            oq_msg_t msg;
            oq_err_t code;
            char why[256];
            assert_int_equal(oq_proto_decode(&msg, zmq_msg_data(&frame), zmq_msg_size(&frame),
                                             &code, why, sizeof why),
                             0);
            if (msg.cmd == OQ_CMD_JOB) {
                oq_ack_msg_t ack = {.id = msg.job.id,
                                    .attempt = msg.job.attempt,
                                    .outcome = OQ_OUTCOME_OK,
                                    .credit = 1,
                                    .lease = msg.job.lease,
                                    .has_lease = true};
                oq_proto_encode_ack(&buf, &ack);
                s_send_msg(n->worker, &buf);
            }
            oq_proto_msg_release(&msg);
        }
        zmq_msg_close(&frame);
    }
    assert_int_equal(oq_engine_job_count(e), 0);
    msgpack_sbuffer_destroy(&buf);
}

/* A disk filled by jobs no worker has taken yet: no snapshot fits then.
   Once workers drained them, dispatches are accepted again within about a
   second of the clock, without anyone freeing space; a compaction started
   halfway through the drain used to fail for room and wait 10 s. */
static void test_a_disk_full_of_waiting_jobs_recovers_as_workers_drain(void **state)
{
    ef_fixture_t *f = *state;
    s_small_t disk = {.capacity = S_SMALL_DISK_BYTES};
    snprintf(disk.dir, sizeof disk.dir, "%s", ef_path(f, "data"));
    f->ops = (oq_disk_ops_t){.pwrite = s_small_pwrite,
                             .fsync = s_small_fsync,
                             .ctx = &disk,
                             .allocate = s_small_allocate,
                             .free_bytes = s_small_free};
    f->reserve_bytes = S_SMALL_RESERVE_BYTES;
    s_net_t n;
    s_start_broker(f, &n);
    int accepted = 0;
    while (s_try_dispatch(&n) == OQ_CMD_DISPATCHED)
        assert_true(++accepted < S_SMALL_MAX_JOBS);
    assert_true(accepted > 100);

    s_drain(&n);
    int64_t drained = f->time.now;
    while (s_try_dispatch(&n) != OQ_CMD_DISPATCHED) {
        f->time.now += S_STEP_MS;
        if (f->time.now - drained > S_RECOVERY_BOUND_MS)
            fail_msg("%d jobs filled the disk; dispatches are still refused %lld ms after the "
                     "workers drained them",
                     accepted, (long long)(f->time.now - drained));
        for (int i = 0; i < S_STEP_TURNS; i++)
            oq_broker_turn(n.broker, S_TURN_MS);
    }
    print_message("%d jobs filled the disk; dispatches accepted again %lld ms (of the clock) "
                  "after the workers drained them\n",
                  accepted, (long long)(f->time.now - drained));
    s_stop_broker(&n);
}

/* ---- the failed store's operations and cancelling ---- */

typedef struct {
    uint64_t failed[4]; /* failed in the order 2, 0, 3, 1: unlike their ids */
    int64_t failed_at[4];
    uint64_t forgotten, cancelled_ready, cancelled_delayed, requeued, flushed_queue;
} s_ops_t;

static s_ops_t s_build_operations(ef_fixture_t *f)
{
    s_ops_t ops;
    for (int i = 0; i < 4; i++)
        ops.failed[i] = s_dispatch(f, "bad", 0, NULL);
    ops.forgotten = s_dispatch(f, "bad", 0, NULL);
    ops.requeued = s_dispatch(f, "bad", 0, NULL);
    oq_worker_t *w = ef_lease_all(f, 'a');
    static const int order[] = {2, 0, 3, 1};
    for (int i = 0; i < 4; i++) {
        f->time.now += 100;
        ef_ack_leased(f, w, ops.failed[order[i]], 1, OQ_OUTCOME_FAIL);
        ops.failed_at[order[i]] = EF_WALL_BASE_MS + f->time.now;
    }
    ef_ack_leased(f, w, ops.forgotten, 1, OQ_OUTCOME_FAIL);
    ef_ack_leased(f, w, ops.requeued, 1, OQ_OUTCOME_FAIL);
    oq_refusal_t why;
    char reason[256];
    assert_int_equal(oq_engine_forget(f->engine, ops.forgotten, &why, reason, sizeof reason), 0);
    ops.cancelled_ready = s_dispatch(f, "noop", 0, NULL);
    ops.cancelled_delayed = s_dispatch(f, "noop", 60000, NULL);
    assert_int_equal(oq_engine_cancel(f->engine, ops.cancelled_ready, &why, reason, sizeof reason),
                     0);
    assert_int_equal(
        oq_engine_cancel(f->engine, ops.cancelled_delayed, &why, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_requeue(f->engine, ops.requeued, &why, reason, sizeof reason), 0);
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    return ops;
}

static void s_collect_id(void *ctx, const oq_job_view_t *job)
{
    uint64_t *ids = ctx;
    while (*ids)
        ids++;
    *ids = job->id;
}

static void s_expect_operations(ef_fixture_t *f, const s_ops_t *ops)
{
    ef_expect(f, ops->forgotten, NULL, 0);
    ef_expect(f, ops->cancelled_ready, NULL, 0);
    ef_expect(f, ops->cancelled_delayed, NULL, 0);
    ef_expect(f, ops->requeued, "ready", 0);
    /* Failure times came back as they were, and with them the order. */
    uint64_t listed[8] = {0};
    bool more;
    assert_int_equal(oq_engine_failed_page(f->engine, NULL, NULL, 8, s_collect_id, listed, &more),
                     4);
    static const int order[] = {2, 0, 3, 1};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(listed[i], ops->failed[order[i]]);
        oq_job_view_t v;
        assert_int_equal(oq_engine_job_view(f->engine, ops->failed[i], &v), 0);
        assert_int_equal(v.failed_at_ms, ops->failed_at[i]);
    }
}

/* Forget, cancel and requeue are journaled: a restart does not bring a
   forgotten or cancelled job back; failure times and the order they give
   the failed list are kept. */
static void test_replay_keeps_operator_changes_and_failure_times(void **state)
{
    ef_fixture_t *f = *state;
    ef_open_ok(f, NULL);
    s_ops_t ops = s_build_operations(f);
    oq_replay_report_t r;
    f->time.now += 5000; /* the restart happens later: times must not be "now" */
    ef_open_ok(f, &r);
    s_expect_operations(f, &ops);
    assert_int_equal(r.ignored, 0);
    assert_int_equal(r.failed, 4);
    /* flush after a restart is journaled too. */
    uint64_t flushed = 0;
    assert_int_equal(oq_engine_flush_failed(f->engine, NULL, &flushed), 0);
    assert_int_equal(flushed, 4);
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    ef_open_ok(f, &r);
    assert_int_equal(r.failed, 0);
    assert_int_equal(r.ignored, 0);
    ef_expect(f, ops.requeued, "ready", 0);
}

/* A journal written in format version 1 is read, then rewritten in the
   current version before anything is appended to it. */
static void s_older_format_is_rewritten_at_open(ef_fixture_t *f, uint32_t version)
{
    ef_open_ok(f, NULL);
    s_ids_t ids = s_build_history(f);
    ef_close(f);
    /* Make it an older file: the same records under an older header. */
    int fd = open(ef_path(f, "journal"), O_RDWR);
    assert_true(fd >= 0);
    uint8_t head[OQ_RECORD_HEADER_BYTES];
    assert_int_equal(pread(fd, head, sizeof head, 0), sizeof head);
    oq_record_header_t h;
    char why[256];
    assert_int_equal(oq_record_header_decode(head, sizeof head, &h, why, sizeof why), 0);
    h.version = version;
    oq_record_header_encode(&h, head);
    assert_int_equal(pwrite(fd, head, sizeof head, 0), sizeof head);
    close(fd);

    oq_replay_report_t r;
    ef_open_ok(f, &r);
    s_expect_history(f, &ids);
    assert_true(r.rewritten);
    assert_int_equal(oq_journal_header(f->journal)->version, OQ_JOURNAL_FORMAT_VERSION);
    uint64_t id = s_dispatch(f, "noop", 0, NULL);
    oq_refusal_t refusal;
    assert_int_equal(oq_engine_cancel(f->engine, id, &refusal, why, sizeof why), 0);
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    ef_open_ok(f, &r);
    assert_false(r.rewritten);
    ef_expect(f, ids.failed, "failed", 1);
    ef_expect(f, ids.delayed, "delayed", 0);
    ef_expect(f, id, NULL, 0);
    assert_int_equal(oq_engine_next_id(f->engine), id + 1);
    fd = open(ef_path(f, "journal"), O_RDONLY);
    assert_int_equal(pread(fd, head, sizeof head, 0), sizeof head);
    close(fd);
    assert_int_equal(oq_record_header_decode(head, sizeof head, &h, why, sizeof why), 0);
    assert_int_equal(h.version, OQ_JOURNAL_FORMAT_VERSION);
}

static void test_older_format_is_rewritten_at_open(void **state)
{
    s_older_format_is_rewritten_at_open(*state, 1);
}

/* Version 4, the format before batches and chains, replays as it is. */
static void test_format_4_is_rewritten_at_open(void **state)
{
    s_older_format_is_rewritten_at_open(*state, 4);
}

int main(void)
{
#define S_TEST(t) cmocka_unit_test_setup_teardown(t, ef_setup_journal, ef_teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_round_trip_review_and_resolved),
        cmocka_unit_test(test_record_round_trip_every_type),
        cmocka_unit_test(test_frame_tells_short_impossible_and_damaged),
        cmocka_unit_test(test_header_refuses_other_files_and_newer_formats),
        S_TEST(test_always_fsyncs_once_per_flush_when_a_reply_waits),
        S_TEST(test_batch_waits_for_the_interval),
        S_TEST(test_off_never_fsyncs),
        S_TEST(test_replay_rebuilds_every_state),
        S_TEST(test_replay_keeps_operator_changes_and_failure_times),
        S_TEST(test_older_format_is_rewritten_at_open),
        S_TEST(test_format_4_is_rewritten_at_open),
        S_TEST(test_torn_tail_is_cut_with_a_warning),
        S_TEST(test_zeros_or_a_bad_crc_past_the_mark_are_torn_too),
        S_TEST(test_damage_before_the_end_stops_the_start),
        S_TEST(test_a_length_running_past_the_end_40kb_before_it_is_damage),
        S_TEST(test_a_bit_flipped_in_the_last_durable_record_is_damage),
        S_TEST(test_a_journal_shorter_than_its_mark_is_damage),
        S_TEST(test_repair_resyncs_and_keeps_every_good_record),
        S_TEST(test_a_damaged_header_is_refused_then_rebuilt_by_repair),
        S_TEST(test_a_second_broker_is_refused_the_directory),
        S_TEST(test_failed_write_keeps_records_and_resumes_where_it_stopped),
        S_TEST(test_failed_fsync_writes_everything_since_the_last_good_one_again),
        S_TEST(test_full_disk_refuses_dispatches_serves_workers_and_recovers),
        S_TEST(test_a_disk_full_of_waiting_jobs_recovers_as_workers_drain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
