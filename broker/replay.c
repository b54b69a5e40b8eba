/*  replay.c: the journal is read in chunks of OQ_JOURNAL_IO_CHUNK_BYTES into
    a buffer that always has room for the largest record, so every record is
    decoded from contiguous memory and the file is read once, front to back.

    Torn or damaged. A crash while appending leaves at most the last record
    incomplete: its bytes run past the end of the file, or they are all
    there but the CRC fails because part of them never reached the disk, or
    the space is zeros (the file grew but its data did not land). All three
    can only be at the very end. The same faults anywhere before the end
    mean the file was damaged after it was written, and the records after
    them cannot be trusted to be whole, so the start stops. */
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
#include "record.h"

#define S_BUF_BYTES                                                                                \
    (OQ_JOURNAL_IO_CHUNK_BYTES + OQ_JOURNAL_MAX_RECORD_BYTES + OQ_RECORD_FRAME_BYTES)
#define S_COPY_CHUNK_BYTES (64 * 1024)

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

/* True if every byte from offset to the end of the file is zero. */
static bool s_zeros_to_end(int fd, uint64_t offset, uint64_t size)
{
    uint8_t chunk[S_COPY_CHUNK_BYTES];
    while (offset < size) {
        ssize_t n = pread(fd, chunk, sizeof chunk, (off_t)offset);
        if (n <= 0)
            return false;
        for (ssize_t i = 0; i < n; i++)
            if (chunk[i])
                return false;
        offset += (uint64_t)n;
    }
    return true;
}

/* Copy the file from offset to its end into path. 0, or -1 with errno. */
static int s_save_tail(int fd, uint64_t offset, uint64_t size, const char *path)
{
    int out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0)
        return -1;
    uint8_t chunk[S_COPY_CHUNK_BYTES];
    int rc = 0;
    while (rc == 0 && offset < size) {
        ssize_t n = pread(fd, chunk, sizeof chunk, (off_t)offset);
        if (n <= 0 || write(out, chunk, (size_t)n) != n)
            rc = -1;
        offset += n > 0 ? (uint64_t)n : 0;
    }
    if (rc == 0 && fsync(out) < 0)
        rc = -1;
    int saved = errno;
    close(out);
    errno = saved;
    return rc;
}

typedef struct {
    oq_engine_t *engine;
    oq_dedupe_t *dedupe;
    const uint8_t *key;
    int64_t now_ms; /* wall clock */
    int64_t window_ms;
    oq_replay_report_t *report;
} s_apply_t;

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
        int64_t expires_ms = rec->dispatched_at_ms + a->window_ms;
        if (rec->job.dispatch_id.len && expires_ms > a->now_ms) {
            uint8_t digest[OQ_SIPHASH_DIGEST_BYTES];
            oq_siphash128(a->key, rec->job.dispatch_id.ptr, rec->job.dispatch_id.len, digest);
            if (oq_dedupe_add(a->dedupe, digest, rec->id, expires_ms) < 0)
                goto oom;
        }
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
    case OQ_RECORD_DONE:
        rc = oq_engine_restore_done(a->engine, rec->id);
        break;
    case OQ_RECORD_REQUEUED: {
        char why[256];
        rc = oq_engine_requeue(a->engine, rec->id, why, sizeof why);
        break;
    }
    case OQ_RECORD_DEDUPE:
        if (rec->at_ms > a->now_ms &&
            oq_dedupe_add(a->dedupe, rec->digest, rec->id, rec->at_ms) < 0)
            goto oom;
        break;
    case OQ_RECORD_NEXT_ID:
        oq_engine_restore_next_id(a->engine, rec->id);
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
}

static void s_live(void *ctx, const oq_job_view_t *job)
{
    *(uint64_t *)ctx += oq_record_dispatched_bytes(job);
}

/* Damage at offset: refuse, or with repair keep what precedes it. */
static int s_damage(oq_journal_t *journal, s_reader_t *r, uint64_t at, const char *what,
                    bool repair, int64_t now_ms, oq_replay_report_t *report, char *reason,
                    size_t reason_len)
{
    uint64_t follow = r->size - at;
    if (!repair) {
        snprintf(reason, reason_len,
                 "journal %s is damaged at byte %" PRIu64 " (%s); %" PRIu64
                 " bytes from there to the end cannot be trusted. Nothing was changed. "
                 "Start with --repair to keep the %" PRIu64 " bytes (%" PRIu64
                 " records) before it and drop the rest (saved to a side file first)",
                 oq_journal_path(journal), at, what, follow, at, report->records);
        return -1;
    }
    snprintf(report->saved_to, sizeof report->saved_to, "%s.damaged-%lld", oq_journal_path(journal),
             (long long)now_ms);
    if (s_save_tail(r->fd, at, r->size, report->saved_to) < 0) {
        oq_warn("repair: cannot save the dropped bytes to %s: %s (dropping them anyway)",
                report->saved_to, strerror(errno));
        report->saved_to[0] = 0;
    }
    if (oq_journal_truncate(journal, at, reason, reason_len) < 0)
        return -1;
    report->damaged_at = at;
    report->dropped_bytes = follow;
    oq_warn("repair: journal %s was damaged at byte %" PRIu64 " (%s): kept the %" PRIu64
            " bytes (%" PRIu64 " records) before it, dropped %" PRIu64
            " bytes%s%s; jobs and outcomes recorded there are lost",
            oq_journal_path(journal), at, what, at, report->records, follow,
            report->saved_to[0] ? ", saved to " : "", report->saved_to);
    return 0;
}

int oq_replay_run(oq_journal_t *journal, oq_engine_t *engine, oq_dedupe_t *dedupe,
                  const oq_clock_t *clock, int64_t dedupe_window_ms, bool repair,
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
    s_apply_t apply = {
        engine,           dedupe, oq_journal_header(journal)->dedupe_key, oq_clock_wall_ms(clock),
        dedupe_window_ms, report};
    int rc = 0;
    char why[256];
    for (;;) {
        if (r.len - r.pos < OQ_RECORD_FRAME_BYTES + OQ_JOURNAL_MAX_RECORD_BYTES &&
            s_more_in_file(&r) && s_refill(&r) < 0) {
            snprintf(reason, reason_len, "cannot read %s: %s", oq_journal_path(journal),
                     strerror(errno));
            rc = -1;
            break;
        }
        uint64_t at = r.off + r.pos;
        if (at == r.size)
            break;
        size_t frame;
        oq_frame_t status = oq_record_frame(r.buf + r.pos, r.len - r.pos, &frame);
        bool last = at + frame >= r.size;
        if (status == OQ_FRAME_SHORT || (status == OQ_FRAME_BAD_CRC && last) ||
            (status == OQ_FRAME_BAD_LENGTH && s_zeros_to_end(r.fd, at, r.size))) {
            report->torn_bytes = r.size - at;
            oq_warn("journal %s: cut %" PRIu64 " bytes at its end (offset %" PRIu64
                    "): a record the broker was writing when it stopped; it was never "
                    "confirmed",
                    oq_journal_path(journal), report->torn_bytes, at);
            rc = oq_journal_truncate(journal, at, reason, reason_len);
            break;
        }
        oq_record_t rec;
        const char *damage = NULL;
        if (status == OQ_FRAME_BAD_CRC)
            damage = "a record with a bad CRC";
        else if (status == OQ_FRAME_BAD_LENGTH)
            damage = "an impossible record length";
        else if (oq_record_decode(r.buf + r.pos, frame, &rec, why, sizeof why) < 0)
            damage = why; /* whole and checksummed, yet not a record this broker knows */
        if (damage) {
            rc =
                s_damage(journal, &r, at, damage, repair, apply.now_ms, report, reason, reason_len);
            break;
        }
        if (s_apply(&apply, &rec, reason, reason_len) < 0) {
            rc = -1;
            break;
        }
        report->records++;
        r.pos += frame;
    }
    free(r.buf);
    if (rc < 0)
        return -1;
    report->bytes = oq_journal_file_bytes(journal);
    oq_engine_job_each(engine, s_count, &apply);
    uint64_t live = 0;
    oq_engine_job_each(engine, s_live, &live);
    oq_journal_set_live_bytes(journal, live);
    report->dispatch_ids = oq_dedupe_count(dedupe);
    report->elapsed_ms = (oq_clock_mono_us() - start_us) / 1000;
    return 0;
}
