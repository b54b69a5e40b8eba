/*  replay.c: the journal is read in chunks of OQ_JOURNAL_IO_CHUNK_BYTES into
    a buffer that always has room for the largest record, so every record is
    decoded from contiguous memory and the file is read once, front to back.

    Torn or damaged. A crash while appending leaves at most the last write
    incomplete: its bytes run past the end of the file, or they are all
    there but the CRC fails because part of them never reached the disk, or
    the space is zeros (the file grew but its data did not land). A record
    that fails to verify is taken for such a torn tail only if both hold:
    it starts at or past the durable mark (bytes below it were durable, so
    no crash can have torn them), and no record after it verifies (a torn
    write is the last thing written; a good record after it proves the bad
    one was damaged later). Anything else is damage: the start stops.

    Repair. From damage, the scan tries every following offset until a
    record verifies (known type, a length that fits it, good CRC, a body
    that decodes), keeps it and goes on; the skipped bytes go to a side
    file. With gaps in the middle the journal is then rewritten as a
    snapshot of what was replayed (compact.h), so that the next start
    reads a sound file. Job ids that may have been lost in a gap are never
    handed out again: the next id moves past as many as the gap could have
    held. */
#include "replay.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onceq/limits.h"
#include "onceq/log.h"
#include "compact.h"
#include "record.h"

#define S_BUF_BYTES                                                                                \
    (OQ_JOURNAL_IO_CHUNK_BYTES + OQ_JOURNAL_MAX_RECORD_BYTES + OQ_RECORD_FRAME_BYTES)
#define S_COPY_CHUNK_BYTES   (64 * 1024)
#define S_REWRITE_REASON_LEN 4400

typedef struct {
    int fd;
    uint64_t size; /* of the file */
    uint8_t *buf;
    uint64_t off; /* file offset of buf[0] */
    size_t len;   /* bytes in buf */
    size_t pos;   /* next record in buf */
} s_reader_t;

/* Move the unread bytes to the front and read more behind them. */
static int s_refill(s_reader_t *r)
{
    memmove(r->buf, r->buf + r->pos, r->len - r->pos);
    r->off += r->pos;
    r->len -= r->pos;
    r->pos = 0;
    while (r->len < S_BUF_BYTES && r->off + r->len < r->size) {
        ssize_t n = pread(r->fd, r->buf + r->len, S_BUF_BYTES - r->len, (off_t)(r->off + r->len));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        r->len += (size_t)n;
    }
    return 0;
}

static bool s_more_in_file(const s_reader_t *r)
{
    return r->off + r->len < r->size;
}

/* Append the file's bytes [from, to) to out. 0, or -1 with errno. */
static int s_save_range(int fd, uint64_t from, uint64_t to, int out)
{
    uint8_t chunk[S_COPY_CHUNK_BYTES];
    while (from < to) {
        size_t want = to - from < sizeof chunk ? (size_t)(to - from) : sizeof chunk;
        ssize_t n = pread(fd, chunk, want, (off_t)from);
        if (n <= 0 || write(out, chunk, (size_t)n) != n) {
            if (n == 0)
                errno = EIO;
            return -1;
        }
        from += (uint64_t)n;
    }
    return 0;
}

/* Go to file offset to (inside the buffer if it is there). */
static void s_seek(s_reader_t *r, uint64_t to)
{
    if (to >= r->off && to <= r->off + r->len) {
        r->pos = (size_t)(to - r->off);
    } else {
        r->off = to;
        r->len = r->pos = 0;
    }
}

/* The offset of the first record at or after from that verifies, or the
   file's size if none does; UINT64_MAX if the file cannot be read. The
   reader is left there. */
static uint64_t s_find_record(s_reader_t *r, uint64_t from)
{
    s_seek(r, from);
    for (;;) {
        if (r->len - r->pos < OQ_RECORD_FRAME_BYTES + OQ_JOURNAL_MAX_RECORD_BYTES &&
            s_more_in_file(r) && s_refill(r) < 0)
            return UINT64_MAX;
        uint64_t at = r->off + r->pos;
        if (at >= r->size)
            return r->size;
        size_t frame;
        if (oq_record_verify(r->buf + r->pos, r->len - r->pos, &frame))
            return at;
        r->pos++;
    }
}

typedef struct {
    oq_engine_t *engine;
    int64_t now_ms; /* wall clock */
    oq_replay_report_t *report;
    bool key_lost; /* the header was rebuilt: digests of the old key mean nothing */
} s_apply_t;

/* A resolution: of a job in review (it is resolved again), or of one that
   left the store before a snapshot (it is only remembered). 0, or -1 if
   memory runs out. */
static int s_apply_resolved(s_apply_t *a, const oq_record_t *rec)
{
    char type[OQ_MAX_NAME_LEN + 1], queue[OQ_MAX_NAME_LEN + 1];
    char reason[OQ_MAX_ERROR_LEN + 1], note[OQ_MAX_REVIEW_NOTE_LEN + 1];
    oq_str_copy(rec->job.type, type, sizeof type);
    oq_str_copy(rec->job.queue, queue, sizeof queue);
    oq_str_copy(rec->error, reason, sizeof reason);
    oq_str_copy(rec->note, note, sizeof note);
    oq_resolution_t r = {
        .id = rec->id,
        .action = rec->action,
        .attempt = rec->attempt,
        .reviewed_at_ms = rec->reviewed_at_ms,
        .resolved_at_ms = rec->at_ms,
        .type = type,
        .queue = queue,
        .reason = reason,
        .note = note,
    };
    return oq_engine_restore_resolution(a->engine, &r);
}

/* Apply one record. 0, or -1 with reason if the state cannot hold it (out
   of memory); a record about a job not held is counted and skipped. */
static int s_apply(s_apply_t *a, const oq_record_t *rec, char *reason, size_t reason_len)
{
    int rc = 0;
    switch (rec->type) {
    case OQ_RECORD_DISPATCHED: {
        rc = oq_engine_restore(a->engine, &rec->job, rec->at_ms, reason, reason_len);
        if (rc < 0)
            return -1;
        if (rc > 0) {
            rc = -1; /* a job dispatched twice: counted below */
            break;
        }
        if (oq_engine_restore_dispatch_id(a->engine, rec->job.dispatch_id, rec->id,
                                          rec->dispatched_at_ms) < 0)
            goto oom;
        break;
    }
    case OQ_RECORD_LEASED:
        rc = oq_engine_restore_leased(a->engine, rec->id, rec->attempt);
        break;
    case OQ_RECORD_RETRY:
        rc = oq_engine_restore_retry(a->engine, rec->id, rec->attempt, rec->at_ms);
        break;
    case OQ_RECORD_FAILED: {
        char error[OQ_MAX_ERROR_LEN + 1];
        oq_str_copy(rec->error, error, sizeof error);
        rc = oq_engine_restore_failed(a->engine, rec->id, rec->attempt, error, rec->at_ms);
        break;
    }
    case OQ_RECORD_REVIEW: {
        char why_review[OQ_MAX_ERROR_LEN + 1];
        oq_str_copy(rec->error, why_review, sizeof why_review);
        rc = oq_engine_restore_review(a->engine, rec->id, rec->attempt, why_review, rec->at_ms);
        break;
    }
    case OQ_RECORD_RESOLVED:
        if (s_apply_resolved(a, rec) < 0)
            goto oom;
        break;
    case OQ_RECORD_DONE:
        rc = oq_engine_restore_done(a->engine, rec->id);
        break;
    case OQ_RECORD_FORGOTTEN:
        rc = oq_engine_restore_forgotten(a->engine, rec->id);
        break;
    case OQ_RECORD_CANCELLED:
        rc = oq_engine_restore_cancelled(a->engine, rec->id);
        break;
    case OQ_RECORD_REQUEUED: {
        char why[256];
        oq_refusal_t refusal;
        rc = oq_engine_requeue(a->engine, rec->id, &refusal, why, sizeof why);
        break;
    }
    case OQ_RECORD_DEDUPE:
        if (a->key_lost)
            a->report->digests_dropped++;
        else if (oq_engine_restore_dispatch_digest(a->engine, rec->digest, rec->id, rec->at_ms) < 0)
            goto oom;
        break;
    case OQ_RECORD_NEXT_ID:
        oq_engine_restore_next_id(a->engine, rec->id);
        break;
    case OQ_RECORD_GENERATION:
        rc = oq_engine_restore_generation(a->engine, rec->id, rec->generation);
        break;
    case OQ_RECORD_BATCH:
        if (oq_engine_restore_batch(a->engine, &rec->batch, reason, reason_len) < 0)
            return -1;
        break;
    case OQ_RECORD_BATCH_FIRED:
        rc = oq_engine_restore_batch_fired(a->engine, rec->id, rec->which, rec->job_id);
        break;
    case OQ_RECORD_BATCH_CANCELLED:
        rc = oq_engine_restore_batch_cancelled(a->engine, rec->id, rec->batch.total);
        break;
    case OQ_RECORD_CHAIN:
        if (oq_engine_restore_chain(a->engine, &rec->chain, reason, reason_len) < 0)
            return -1;
        break;
    case OQ_RECORD_CHAIN_FIRED:
        rc = oq_engine_restore_chain_fired(a->engine, rec->id);
        break;
    case OQ_RECORD_KEYS:
        if (oq_engine_restore_keys(a->engine, rec->id, rec->unique_key, rec->unique_until_ms,
                                   rec->window_only, rec->overlap_key) < 0)
            goto oom;
        break;
    }
    if (rc < 0) {
        if (a->report->ignored == 0)
            oq_warn("journal: a %s record names job %" PRIu64
                    ", which the journal does not hold in a state that allows it; skipped "
                    "(further ones are only counted)",
                    oq_record_type_name(rec->type), rec->id);
        a->report->ignored++;
    }
    return 0;
oom:
    snprintf(reason, reason_len, "out of memory replaying the journal");
    return -1;
}

static void s_count(void *ctx, const oq_job_view_t *job)
{
    s_apply_t *a = ctx;
    a->report->ready += job->state == OQ_STATE_READY;
    a->report->delayed += job->state == OQ_STATE_DELAYED;
    a->report->failed += job->state == OQ_STATE_FAILED;
    a->report->review += job->state == OQ_STATE_REVIEW;
}

static void s_live(void *ctx, const oq_job_view_t *job)
{
    *(uint64_t *)ctx += oq_record_dispatched_bytes(job);
}

#define S_SIDE_UNOPENED (-1)
#define S_SIDE_FAILED   (-2)

/* The side file for damaged bytes, created on the first need. */
static void s_side_open(oq_journal_t *journal, int64_t now_ms, int *side_fd,
                        oq_replay_report_t *report)
{
    if (*side_fd != S_SIDE_UNOPENED)
        return;
    snprintf(report->saved_to, sizeof report->saved_to, "%s.damaged-%lld", oq_journal_path(journal),
             (long long)now_ms);
    *side_fd =
        open(report->saved_to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, OQ_JOURNAL_FILE_MODE);
    if (*side_fd < 0) {
        oq_warn("repair: cannot create %s: %s (the damaged bytes are not saved)", report->saved_to,
                strerror(errno));
        report->saved_to[0] = 0;
        *side_fd = S_SIDE_FAILED;
    }
}

/* The header was damaged and rebuilt (journal.h): its old bytes go first
   into the side file, and the consequence is said. */
static void s_rebuilt_header(oq_journal_t *journal, int64_t now_ms, int *side_fd,
                             oq_replay_report_t *report)
{
    const char *why;
    const uint8_t *old = oq_journal_damaged_header(journal, &why);
    report->header_rebuilt = true;
    s_side_open(journal, now_ms, side_fd, report);
    if (*side_fd >= 0 && write(*side_fd, old, OQ_RECORD_HEADER_BYTES) != OQ_RECORD_HEADER_BYTES)
        oq_warn("repair: cannot save the damaged header to %s: %s", report->saved_to,
                strerror(errno));
    oq_warn("repair: journal %s: %s; the header is rebuilt as format version %d with "
            "a new creation time and a new dedupe key%s%s. The durable mark is not used, and "
            "every record that verifies is kept",
            oq_journal_path(journal), why, OQ_JOURNAL_FORMAT_VERSION,
            report->saved_to[0] ? "; the old header is saved to " : "", report->saved_to);
}

/* Skip the damaged range [from, to): save it to the side file (opened on
   the first need) and report it. */
static void s_skip(oq_journal_t *journal, s_reader_t *r, uint64_t from, uint64_t to,
                   const char *what, int64_t now_ms, int *side_fd, oq_replay_report_t *report)
{
    if (report->gaps == 0)
        report->damaged_at = from;
    s_side_open(journal, now_ms, side_fd, report);
    if (*side_fd >= 0 && s_save_range(r->fd, from, to, *side_fd) < 0)
        oq_warn("repair: cannot save bytes %" PRIu64 "-%" PRIu64 " to %s: %s", from, to,
                report->saved_to, strerror(errno));
    if (report->gaps < OQ_REPLAY_MAX_RANGES)
        report->ranges[report->gaps] = (oq_replay_range_t){from, to};
    report->gaps++;
    report->dropped_bytes += to - from;
    oq_warn("repair: journal %s: skipped bytes %" PRIu64 " to %" PRIu64 " (%" PRIu64
            " bytes: %s)%s%s; resuming at the next record that verifies",
            oq_journal_path(journal), from, to, to - from, what,
            report->saved_to[0] ? ", saved to " : "", report->saved_to);
}

/* Write what was replayed as a snapshot (compact.h) and make it the
   journal: the file then replays to the same state, in the current format. */
static int s_rewrite(oq_journal_t *journal, oq_engine_t *engine, int64_t now_ms, char *reason,
                     size_t reason_len)
{
    int fd = open(oq_journal_tmp_path(journal), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
                  OQ_JOURNAL_FILE_MODE);
    uint64_t bytes = 0;
    if (fd < 0 || oq_compact_snapshot(fd, oq_journal_ops(journal), oq_journal_header(journal),
                                      engine, now_ms, &bytes) < 0) {
        snprintf(reason, reason_len, "cannot write %s: %s", oq_journal_tmp_path(journal),
                 strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(oq_journal_tmp_path(journal));
        }
        return -1;
    }
    oq_journal_tee_begin(journal);
    return oq_journal_switch(journal, fd, bytes, reason, reason_len);
}

/* After repair skipped gaps or rebuilt the header: ids a gap may have
   held are never reused, and the journal is rewritten from what was
   replayed (unless the only damage was a gap running to the end, which a
   cut removes). */
static int s_finish_repair(oq_journal_t *journal, s_reader_t *r, oq_engine_t *engine,
                           int64_t now_ms, oq_replay_report_t *report, char *reason,
                           size_t reason_len)
{
    if (report->gaps)
        oq_engine_restore_next_id(engine,
                                  oq_engine_next_id(engine) +
                                      report->dropped_bytes / oq_record_min_dispatched_bytes() + 1);
    if (report->gaps == 1 && report->ranges[0].to == r->size && !report->header_rebuilt)
        return oq_journal_truncate(journal, report->ranges[0].from, reason, reason_len);
    char why[S_REWRITE_REASON_LEN];
    if (s_rewrite(journal, engine, now_ms, why, sizeof why) < 0) {
        snprintf(reason, reason_len, "repair: %s", why);
        return -1;
    }
    report->rewritten = true;
    return 0;
}

/* A journal of an older format version is rewritten in the current one
   before anything is appended: records of the new version must never land
   in a file whose header promises an older layout, which an older broker
   would then take for damage. */
static int s_upgrade(oq_journal_t *journal, oq_engine_t *engine, int64_t now_ms,
                     oq_replay_report_t *report, char *reason, size_t reason_len)
{
    uint32_t version = oq_journal_header(journal)->version;
    if (version >= OQ_JOURNAL_FORMAT_VERSION || report->rewritten)
        return 0;
    char why[S_REWRITE_REASON_LEN];
    if (s_rewrite(journal, engine, now_ms, why, sizeof why) < 0) {
        snprintf(reason, reason_len,
                 "journal %s is format version %u; rewriting it in version %d failed: %s. "
                 "Nothing was lost: the old file is still in place",
                 oq_journal_path(journal), version, OQ_JOURNAL_FORMAT_VERSION, why);
        return -1;
    }
    report->rewritten = true;
    oq_info("journal %s: rewritten from format version %u to %d", oq_journal_path(journal), version,
            OQ_JOURNAL_FORMAT_VERSION);
    return 0;
}

static int s_run(oq_journal_t *journal, oq_engine_t *engine, const oq_clock_t *clock, bool repair,
                 oq_replay_report_t *report, char *reason, size_t reason_len)
{
    memset(report, 0, sizeof *report);
    int64_t start_us = oq_clock_mono_us();
    struct stat st;
    s_reader_t r = {.fd = oq_journal_fd(journal), .off = OQ_RECORD_HEADER_BYTES};
    if (fstat(r.fd, &st) < 0 || !(r.buf = malloc(S_BUF_BYTES))) {
        snprintf(reason, reason_len, "cannot read %s: %s", oq_journal_path(journal),
                 strerror(errno));
        free(r.buf);
        return -1;
    }
    r.size = (uint64_t)st.st_size;
    report->has_mark = oq_journal_mark(journal, &report->mark);
    oq_engine_set_dispatch_key(engine, oq_journal_header(journal)->dedupe_key);
    const char *ignored_why;
    bool rebuilt = oq_journal_damaged_header(journal, &ignored_why) != NULL;
    s_apply_t apply = {engine, oq_clock_wall_ms(clock), report, rebuilt};
    const char *path = oq_journal_path(journal);
    int side_fd = S_SIDE_UNOPENED;
    if (rebuilt)
        s_rebuilt_header(journal, apply.now_ms, &side_fd, report);
    int rc = 0;
    char why[256], what[512];
    if (report->has_mark && report->mark > r.size) {
        /* Bytes that were durable are gone: the file was cut. */
        snprintf(what, sizeof what,
                 "the file ends at byte %" PRIu64 ", but its durable mark says %" PRIu64
                 " bytes were durable: its end was cut off",
                 r.size, report->mark);
        if (!repair) {
            snprintf(reason, reason_len,
                     "journal %s is damaged: %s. Nothing was changed. Start with --repair to "
                     "keep every record that is left",
                     path, what);
            free(r.buf);
            return -1;
        }
        oq_warn("repair: journal %s: %s; keeping what is left", path, what);
        report->damaged_at = r.size;
        report->dropped_bytes = report->mark - r.size;
    }
    for (;;) {
        if (r.len - r.pos < OQ_RECORD_FRAME_BYTES + OQ_JOURNAL_MAX_RECORD_BYTES &&
            s_more_in_file(&r) && s_refill(&r) < 0) {
            snprintf(reason, reason_len, "cannot read %s: %s", path, strerror(errno));
            rc = -1;
            break;
        }
        uint64_t at = r.off + r.pos;
        if (at == r.size)
            break;
        size_t frame;
        oq_frame_t status = oq_record_frame(r.buf + r.pos, r.len - r.pos, &frame);
        oq_record_t rec;
        const char *damage = NULL;
        bool whole = false; /* checksummed yet not a record: never torn */
        if (status == OQ_FRAME_SHORT)
            damage = "a record that runs past the end of the file";
        else if (status == OQ_FRAME_BAD_CRC)
            damage = "a record with a bad CRC";
        else if (status == OQ_FRAME_BAD_LENGTH)
            damage = "an impossible record length";
        else if (oq_record_decode(r.buf + r.pos, frame, &rec, why, sizeof why) < 0)
            damage = why, whole = true;
        if (!damage) {
            if (s_apply(&apply, &rec, reason, reason_len) < 0) {
                rc = -1;
                break;
            }
            report->records++;
            r.pos += frame;
            continue;
        }
        bool below_mark = report->has_mark && report->mark > at;
        uint64_t next = s_find_record(&r, at + 1);
        if (next == UINT64_MAX) {
            snprintf(reason, reason_len, "cannot read %s: %s", path, strerror(errno));
            rc = -1;
            break;
        }
        if (!whole && !below_mark && next == r.size) {
            /* Provably a write that never completed: nothing was confirmed. */
            report->torn_bytes = r.size - at;
            oq_warn("journal %s: cut %" PRIu64 " bytes at its end (offset %" PRIu64 ", %s): a "
                    "write the broker did not finish when it stopped, past the durable mark "
                    "(%s) with no good record after it; it was never confirmed",
                    path, report->torn_bytes, at, damage,
                    report->has_mark ? "found" : "none was found");
            if (report->gaps == 0)
                rc = oq_journal_truncate(journal, at, reason, reason_len);
            else
                r.size = at; /* the rewrite below leaves it out */
            break;
        }
        if (below_mark)
            snprintf(what, sizeof what, "%s, below the durable mark at byte %" PRIu64, damage,
                     report->mark);
        else if (next < r.size)
            snprintf(what, sizeof what, "%s, followed by a good record at byte %" PRIu64, damage,
                     next);
        else
            snprintf(what, sizeof what, "%s", damage);
        if (!repair) {
            snprintf(reason, reason_len,
                     "journal %s is damaged at byte %" PRIu64 " (%s); the %" PRIu64
                     " bytes from there to the end cannot be trusted. Nothing was changed. Start "
                     "with --repair to keep every record that verifies (the %" PRIu64
                     " records before it and every good one after it); the damaged bytes are "
                     "saved to a side file first",
                     path, at, what, r.size - at, report->records);
            rc = -1;
            break;
        }
        s_skip(journal, &r, at, next, what, apply.now_ms, &side_fd, report);
        s_seek(&r, next);
    }
    if (side_fd >= 0) {
        if (fsync(side_fd) < 0)
            oq_warn("repair: cannot fsync %s: %s", report->saved_to, strerror(errno));
        close(side_fd);
    }
    if (rc == 0 && (report->gaps || report->header_rebuilt))
        rc = s_finish_repair(journal, &r, engine, apply.now_ms, report, reason, reason_len);
    else if (rc == 0 && report->has_mark && report->mark > r.size)
        rc = oq_journal_truncate(journal, r.size, reason, reason_len); /* the mark: no more */
    if (rc == 0)
        rc = s_upgrade(journal, engine, apply.now_ms, report, reason, reason_len);
    free(r.buf);
    if (rc < 0)
        return -1;
    if (report->gaps)
        oq_warn("repair: journal %s: kept %" PRIu64 " records, skipped %" PRIu64
                " damaged range(s) of %" PRIu64 " bytes in all (first at byte %" PRIu64
                ")%s%s%s; jobs and outcomes recorded in them are lost",
                path, report->records, report->gaps, report->dropped_bytes, report->damaged_at,
                report->saved_to[0] ? ", saved to " : "", report->saved_to,
                report->rewritten ? "; the journal was rewritten without them" : "");
    if (report->header_rebuilt)
        oq_warn("repair: journal %s: kept %" PRIu64 " records under the rebuilt header and "
                "rewrote the file. Dispatch ids written in full with their jobs are kept; the "
                "%" PRIu64 " remembered only by their digest under the old key are forgotten: a "
                "producer that resends one of those dispatch_ids within its window gets a new "
                "job instead of the first one's id (its effect is still guarded by the "
                "database)",
                path, report->records, report->digests_dropped);
    report->bytes = oq_journal_file_bytes(journal);
    oq_engine_job_each(engine, s_count, &apply);
    uint64_t live = 0;
    oq_engine_job_each(engine, s_live, &live);
    oq_journal_set_live_bytes(journal, live);
    report->dispatch_ids = oq_engine_dispatch_ids(engine);
    report->elapsed_ms = (oq_clock_mono_us() - start_us) / 1000;
    return 0;
}

/* Batches replay their counts but dispatch no callback while replaying:
   the callbacks that were dispatched are in the journal, and those due
   but not yet dispatched are the caller's to settle once the journal's
   observer is attached (oq_engine_batches_settle). */
int oq_replay_run(oq_journal_t *journal, oq_engine_t *engine, const oq_clock_t *clock, bool repair,
                  oq_replay_report_t *report, char *reason, size_t reason_len)
{
    oq_engine_batches_hold(engine, true);
    int rc = s_run(journal, engine, clock, repair, report, reason, reason_len);
    oq_engine_batches_hold(engine, false);
    return rc;
}
