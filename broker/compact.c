/*  compact.c: the snapshot and the child that writes it.

    Why fork. A snapshot of a million jobs takes a good part of a second to
    encode and write; the broker's loop must not stop that long. fork gives
    the child a copy-on-write image of the state at one instant, which it
    walks with the engine's own functions while the parent keeps serving.
    The child touches no ZeroMQ socket and leaves with _exit, so nothing of
    the parent's is closed or flushed twice. It dies with the parent
    (PR_SET_PDEATHSIG): an orphan must not write journal.tmp under the next
    broker.

    What the new file holds. Records appended after the fork are copied
    (journal tee) and appended to the snapshot before the rename, so the
    file replays to exactly the state the parent has then. Records appended
    before the fork but not yet written are in the snapshot's state already.

    How a job is written. DISPATCHED with the job in full; GENERATION if it
    was ever requeued (its lease tokens are made of it); then, when it is
    not a fresh ready or delayed job, the record that puts it in its state:
    LEASED for its attempt count (a leased job comes back ready), RETRY for
    a delayed job with attempts, FAILED for a failed one, REVIEW for one in
    review. The review store's remembered resolutions go first, as RESOLVED
    records. The engine's dispatch ids go as DEDUPE records of their
    digests (a DISPATCHED record in a snapshot carries none, and the id
    outlives its job), the next job id as NEXT_ID so that ids are never
    handed out twice. */
#include "compact.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "onceq/limits.h"
#include "onceq/log.h"
#include "record.h"

#define S_REASON_LEN 4400
/* On a full disk, compact whenever the snapshot would take at most half the
   file, whatever --compact-min-bytes and --compact-ratio say, and at most
   half the space still free: the estimate leaves out the records that put
   a job in its state and the tee, and a snapshot that does not fit fails
   and only wastes the wait before the next try. */
#define S_RECLAIM_FACTOR 2

/* What the child reports through its pipe. */
typedef struct {
    int32_t status; /* 0 or an errno */
    uint32_t pad;
    uint64_t bytes;
} s_result_t;

struct oq_compact {
    oq_compact_config_t config;
    oq_journal_t *journal;
    oq_engine_t *engine;
    const oq_clock_t *clock;
    pid_t child;        /* 0 when none runs */
    int pipe_fd;        /* read end, -1 when none runs */
    int tmp_fd;         /* the snapshot file, -1 when none runs */
    int64_t started_ms; /* monotonic */
    uint64_t size_before;
    int64_t retry_at_ms; /* after a failure: not before this */
    uint64_t count;
};

oq_compact_t *oq_compact_new(const oq_compact_config_t *config, oq_journal_t *journal,
                             oq_engine_t *engine, const oq_clock_t *clock)
{
    oq_compact_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->config = *config;
    self->journal = journal;
    self->engine = engine;
    self->clock = clock;
    self->pipe_fd = self->tmp_fd = -1;
    return self;
}

/* Forget the running compaction: its child, pipe and file. */
static void s_abandon(oq_compact_t *self, bool kill_child)
{
    if (self->child > 0) {
        if (kill_child)
            kill(self->child, SIGKILL);
        while (waitpid(self->child, NULL, 0) < 0 && errno == EINTR)
            ;
        self->child = 0;
    }
    if (self->pipe_fd >= 0)
        close(self->pipe_fd);
    if (self->tmp_fd >= 0) {
        close(self->tmp_fd);
        unlink(oq_journal_tmp_path(self->journal));
    }
    self->pipe_fd = self->tmp_fd = -1;
    oq_journal_tee_end(self->journal);
}

void oq_compact_destroy(oq_compact_t **self_p)
{
    assert(self_p);
    oq_compact_t *self = *self_p;
    if (!self)
        return;
    if (self->child > 0 || self->tmp_fd >= 0)
        s_abandon(self, true);
    free(self);
    *self_p = NULL;
}

uint64_t oq_compact_count(const oq_compact_t *self)
{
    return self->count;
}

int oq_compact_fd(const oq_compact_t *self)
{
    return self->pipe_fd;
}

uint64_t oq_compact_live_bytes(const oq_compact_t *self)
{
    return oq_journal_live_bytes(self->journal) +
           oq_engine_dispatch_ids(self->engine) * oq_record_dedupe_bytes() + OQ_RECORD_HEADER_BYTES;
}

bool oq_compact_due(const oq_compact_t *self)
{
    if (self->child > 0 || oq_clock_now_ms(self->clock) < self->retry_at_ms)
        return false;
    uint64_t size = oq_journal_file_bytes(self->journal);
    uint64_t live = oq_compact_live_bytes(self);
    return size >= self->config.min_bytes && size > live * self->config.ratio;
}

bool oq_compact_reclaim_due(const oq_compact_t *self)
{
    if (self->child > 0 || oq_clock_now_ms(self->clock) < self->retry_at_ms)
        return false;
    uint64_t size = oq_journal_file_bytes(self->journal);
    uint64_t live = oq_compact_live_bytes(self);
    uint64_t free_bytes;
    if (size < live * S_RECLAIM_FACTOR)
        return false;
    /* Space that cannot be told is no reason to wait: try. */
    return oq_journal_free_bytes(self->journal, &free_bytes) < 0 ||
           free_bytes >= live * S_RECLAIM_FACTOR;
}

/* After a failure: not again for a while; on a full disk a short while,
   since the snapshot shrinks as workers drain and dispatches wait for it. */
static void s_wait_after_failure(oq_compact_t *self)
{
    int64_t wait_ms =
        oq_journal_reserve_held(self->journal) ? OQ_COMPACT_RETRY_MS : OQ_COMPACT_RECLAIM_RETRY_MS;
    self->retry_at_ms = oq_clock_now_ms(self->clock) + wait_ms;
}

/* ---- the snapshot ---- */

typedef struct {
    int fd;
    const oq_disk_ops_t *ops;
    msgpack_sbuffer buf; /* encoded, not yet written */
    uint64_t offset;     /* file offset of buf[0] */
    int64_t now_ms;
    int err; /* first errno */
} s_snap_t;

/* Write buf out once it is a chunk's worth (or at the end, force). */
static void s_drain(s_snap_t *s, bool force)
{
    if (s->err || (!force && s->buf.size < OQ_JOURNAL_IO_CHUNK_BYTES) || s->buf.size == 0)
        return;
    size_t done = 0;
    while (done < s->buf.size) {
        ssize_t n = s->ops->pwrite(s->ops->ctx, s->fd, s->buf.data + done, s->buf.size - done,
                                   (off_t)(s->offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            s->err = n < 0 ? errno : ENOSPC;
            return;
        }
        done += (size_t)n;
    }
    s->offset += s->buf.size;
    msgpack_sbuffer_clear(&s->buf);
}

static void s_check(s_snap_t *s, int rc)
{
    if (rc < 0 && !s->err)
        s->err = ENOMEM;
    s_drain(s, false);
}

static void s_snap_job(void *ctx, const oq_job_view_t *job)
{
    s_snap_t *s = ctx;
    if (s->err)
        return;
    /* Written fresh, then moved to its state by the record that does so. */
    oq_job_view_t fresh = *job;
    bool delayed_retry = job->state == OQ_STATE_DELAYED && job->attempt > 0;
    if (job->state != OQ_STATE_DELAYED || delayed_retry)
        fresh.not_before_ms = 0;
    s_check(s, oq_record_dispatched(&s->buf, &fresh, oq_str(NULL), 0));
    /* Its keys while it is still ready: a failed job keeps its overlap key
       for a requeue, and holds no unique key (its view has none). */
    if (job->unique_key || job->overlap_key)
        s_check(s, oq_record_keys(&s->buf, job->id, job->unique_key, job->unique_until_ms, false,
                                  job->overlap_key));
    /* A requeued job's generation: without it the first delivery after a
       restart would carry the same token as the first one before the
       requeue, and that old delivery's ack would complete the new one. */
    if (job->generation)
        s_check(s, oq_record_generation(&s->buf, job->id, job->generation));
    if (job->state == OQ_STATE_FAILED)
        s_check(s, oq_record_failed(&s->buf, job->id, job->attempt, job->failed_at_ms, job->error));
    else if (job->state == OQ_STATE_REVIEW)
        s_check(s, oq_record_review(&s->buf, job->id, job->attempt, job->failed_at_ms, job->error));
    else if (delayed_retry)
        s_check(s, oq_record_retry(&s->buf, job->id, job->attempt, job->not_before_ms));
    else if (job->attempt > 0)
        s_check(s, oq_record_leased(&s->buf, job->id, job->attempt));
}

/* A held batch, with what its jobs that are gone came to: the jobs still
   held follow and count themselves again as replay moves them. Its
   dispatch id is kept by the DEDUPE records, as a job's is. */
static void s_snap_batch(void *ctx, const oq_batch_view_t *b)
{
    s_snap_t *s = ctx;
    if (s->err)
        return;
    oq_batch_view_t kept = *b;
    kept.failed = b->failed - b->failed_held;
    kept.dispatch_id = oq_str(NULL);
    s_check(s, oq_record_batch(&s->buf, &kept));
}

/* A held chain, with what is due: its job may be gone already (done,
   its next link not yet dispatched). */
static void s_snap_chain(void *ctx, const oq_chain_view_t *c)
{
    s_snap_t *s = ctx;
    if (!s->err)
        s_check(s, oq_record_chain(&s->buf, c));
}

static void s_snap_window(void *ctx, const char *key, uint64_t id, int64_t expires_ms)
{
    s_snap_t *s = ctx;
    if (!s->err && expires_ms > s->now_ms)
        s_check(s, oq_record_keys(&s->buf, id, key, expires_ms, true, NULL));
}

static void s_snap_resolved(void *ctx, const oq_resolution_t *r)
{
    s_snap_t *s = ctx;
    if (!s->err)
        s_check(s, oq_record_resolved(&s->buf, r));
}

static void s_snap_dedupe(void *ctx, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES], uint64_t job_id,
                          int64_t expires_ms)
{
    s_snap_t *s = ctx;
    if (!s->err && expires_ms > s->now_ms)
        s_check(s, oq_record_dedupe(&s->buf, digest, job_id, expires_ms));
}

int oq_compact_snapshot(int fd, const oq_disk_ops_t *ops, const oq_record_header_t *header,
                        oq_engine_t *engine, int64_t now_ms, uint64_t *bytes)
{
    s_snap_t s = {.fd = fd, .ops = ops, .now_ms = now_ms};
    msgpack_sbuffer_init(&s.buf);
    oq_record_header_t h = *header;
    h.version = OQ_JOURNAL_FORMAT_VERSION; /* a snapshot is written in the current format */
    /* A new file gets its own creation time: the durable mark names the
       file it is about by it. */
    h.created_ms = now_ms > header->created_ms ? now_ms : header->created_ms + 1;
    uint8_t head[OQ_RECORD_HEADER_BYTES];
    oq_record_header_encode(&h, head);
    s_check(&s, msgpack_sbuffer_write(&s.buf, (const char *)head, sizeof head));
    s_check(&s, oq_record_next_id(&s.buf, oq_engine_next_id(engine)));
    /* Resolutions before the jobs: no job is held yet when replay reads
       them, so each is only remembered, never applied to a job that went
       to review again after it. */
    oq_engine_review_each_resolved(engine, s_snap_resolved, &s);
    /* Batches before their jobs, as a batch's record comes before its
       jobs' in the journal. */
    oq_engine_batch_each(engine, false, s_snap_batch, &s);
    oq_engine_chain_each(engine, s_snap_chain, &s);
    oq_engine_job_each(engine, s_snap_job, &s);
    /* After the jobs: a window whose job is still held (failed, say) is
       only remembered, never taken as the job's live key. */
    oq_engine_unique_each_window(engine, s_snap_window, &s);
    oq_engine_dispatch_id_each(engine, s_snap_dedupe, &s);
    s_drain(&s, true);
    if (!s.err && ops->fsync(ops->ctx, fd) < 0)
        s.err = errno;
    msgpack_sbuffer_destroy(&s.buf);
    *bytes = s.offset;
    errno = s.err;
    return s.err ? -1 : 0;
}

/* ---- the child ---- */

static void s_child(oq_compact_t *self, pid_t parent, int pipe_fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1); /* the parent died before prctl took effect */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    s_result_t result = {0, 0, 0};
    if (oq_compact_snapshot(self->tmp_fd, oq_journal_ops(self->journal),
                            oq_journal_header(self->journal), self->engine,
                            oq_clock_wall_ms(self->clock), &result.bytes) < 0)
        result.status = errno ? errno : EIO;
    ssize_t n = write(pipe_fd, &result, sizeof result);
    _exit(n == (ssize_t)sizeof result ? 0 : 1);
}

int oq_compact_start(oq_compact_t *self)
{
    assert(self->child == 0);
    int64_t now = oq_clock_now_ms(self->clock);
    const char *tmp = oq_journal_tmp_path(self->journal);
    int fds[2] = {-1, -1};
    self->tmp_fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, OQ_JOURNAL_FILE_MODE);
    if (self->tmp_fd < 0 || pipe2(fds, O_CLOEXEC) < 0)
        goto fail;
    self->pipe_fd = fds[0];
    self->size_before = oq_journal_file_bytes(self->journal);
    self->started_ms = now;
    /* The tee starts at the fork: nothing is appended between the two. */
    oq_journal_tee_begin(self->journal);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        s_child(self, parent, fds[1]);
    }
    close(fds[1]);
    if (pid < 0)
        goto fail;
    self->child = pid;
    oq_info("compacting the journal (%" PRIu64 " bytes, about %" PRIu64 " live) in child pid %d",
            self->size_before, oq_journal_live_bytes(self->journal), (int)pid);
    return 0;
fail:
    s_wait_after_failure(self);
    oq_error("cannot start a compaction: %s; trying again in %lld ms", strerror(errno),
             (long long)(self->retry_at_ms - now));
    s_abandon(self, true);
    return -1;
}

int oq_compact_poll(oq_compact_t *self)
{
    if (self->child <= 0)
        return 0;
    s_result_t result;
    ssize_t n = read(self->pipe_fd, &result, sizeof result);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    int status = 0;
    while (waitpid(self->child, &status, 0) < 0 && errno == EINTR)
        ;
    self->child = 0;
    char reason[S_REASON_LEN] = "";
    if (n != (ssize_t)sizeof result)
        snprintf(reason, sizeof reason, "the child ended without a result (wait status %d)",
                 status);
    else if (result.status)
        snprintf(reason, sizeof reason, "the child could not write the snapshot: %s",
                 strerror(result.status));
    int tmp_fd = self->tmp_fd;
    if (!reason[0]) {
        self->tmp_fd = -1; /* taken over by the journal, or closed by it */
        if (oq_journal_switch(self->journal, tmp_fd, result.bytes, reason, sizeof reason) == 0) {
            close(self->pipe_fd);
            self->pipe_fd = -1;
            self->count++;
            oq_info("compacted the journal: %" PRIu64 " -> %" PRIu64 " bytes in %lld ms",
                    self->size_before, oq_journal_file_bytes(self->journal),
                    (long long)(oq_clock_now_ms(self->clock) - self->started_ms));
            return 1;
        }
    }
    s_wait_after_failure(self);
    oq_error("compaction failed: %s; the journal stays as it was, trying again in %lld ms", reason,
             (long long)(self->retry_at_ms - oq_clock_now_ms(self->clock)));
    s_abandon(self, true);
    return -1;
}
