/*  journal.c: appending, group commit and the disk seam.

    The buffer. Records are appended to buf as the engine changes jobs. buf
    holds everything appended since the last good fsync (under "off": since
    the last write); `written` of its bytes are in the file already, at file
    offset `base`. A flush writes the rest and, when the policy wants it,
    fsyncs; only then is buf emptied and the durable position moved to the
    end. Keeping written-but-unsynced bytes is what lets a failed fsync be
    repaired: on Linux the kernel may mark the failed pages clean and drop
    them, so the next attempt writes them again from here before fsyncing.

    Positions. `appended` counts every byte ever appended; `durable` the part
    the policy counts as safe. A reply waiting in the outbox records the
    position its record ends at and leaves once durable reaches it. */
#include "journal.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "onceq/limits.h"
#include "onceq/log.h"

#define S_PATH_LEN     4096
#define S_DIR_LEN      (S_PATH_LEN - 64) /* room for a file name after it */
#define S_ERROR_LEN    (S_PATH_LEN + 512)
#define S_JOURNAL_NAME "journal"
#define S_TMP_NAME     "journal.tmp"
#define S_LOCK_NAME    "lock"
#define S_MARK_NAME    "journal.durable"
#define S_RESERVE_NAME "reserve"
#define S_PID_TEXT_LEN 32
#define S_WHY_LEN      256
/* A header whose magic differs from OQ_RECORD_MAGIC in more bits than this
   is taken for another file, not a damaged journal: --repair does not
   rebuild it (it would replace that file's bytes with an empty journal). */
#define S_MAGIC_MAX_DAMAGED_BITS 8

struct oq_journal {
    oq_journal_config_t config;
    const oq_disk_ops_t *ops;
    const oq_clock_t *clock;
    char dir[S_DIR_LEN];
    char path[S_PATH_LEN];         /* dir/journal */
    char tmp_path[S_PATH_LEN];     /* dir/journal.tmp */
    char mark_path[S_PATH_LEN];    /* dir/journal.durable */
    char reserve_path[S_PATH_LEN]; /* dir/reserve */
    int mark_fd;
    bool has_mark;         /* a mark for this file was found at open */
    uint64_t mark_at_open; /* what it said */
    uint64_t marked;       /* the offset the mark holds now */
    bool mark_failing;     /* the last mark write failed (logged once) */
    bool reserve_held;     /* the reserve file is allocated (or none is configured) */
    int64_t reserve_retry_at_ms;
    char reserve_error[S_ERROR_LEN];
    int fd;      /* the journal */
    int lock_fd; /* dir/lock, flock()ed while open */
    oq_record_header_t header;
    msgpack_sbuffer buf;  /* appended, not yet durable (see the top) */
    size_t written;       /* bytes of buf in the file */
    uint64_t base;        /* file offset of buf[0] */
    uint64_t appended;    /* stream position: every byte appended */
    uint64_t durable;     /* stream position durable under the policy */
    int64_t last_sync_ms; /* monotonic */
    uint64_t live_bytes;  /* a snapshot's size, estimated by the hooks */
    bool tee;             /* a compaction is running: copy appends to tee_buf */
    msgpack_sbuffer tee_buf;
    bool failing; /* the last write or fsync failed */
    int64_t failing_since_ms;
    int64_t retry_at_ms;
    char error[S_ERROR_LEN];
    uint64_t fsyncs, failures;
    oq_histogram_t fsync_latency; /* of the journal file's fsyncs that succeeded */

    /* With --repair, a damaged header is replaced by a new one. */
    bool header_rebuilt;
    uint8_t damaged_header[OQ_RECORD_HEADER_BYTES]; /* what was on disk */
    char header_why[S_WHY_LEN];                     /* what was wrong with it */
};

/* ---- the disk seam ---- */

static ssize_t s_sys_pwrite(void *ctx, int fd, const void *data, size_t len, off_t offset)
{
    (void)ctx;
    return pwrite(fd, data, len, offset);
}

static int s_sys_fsync(void *ctx, int fd)
{
    (void)ctx;
    return fsync(fd);
}

static int s_sys_allocate(void *ctx, int fd, off_t len)
{
    (void)ctx;
    int rc = posix_fallocate(fd, 0, len); /* returns the error, errno untouched */
    if (rc) {
        errno = rc;
        return -1;
    }
    return 0;
}

static int s_sys_free_bytes(void *ctx, const char *dir, uint64_t *bytes)
{
    (void)ctx;
    struct statvfs st;
    if (statvfs(dir, &st) < 0)
        return -1;
    *bytes = (uint64_t)st.f_bavail * st.f_frsize;
    return 0;
}

static const oq_disk_ops_t s_system_ops = {s_sys_pwrite, s_sys_fsync, NULL, s_sys_allocate,
                                           s_sys_free_bytes};

const oq_disk_ops_t *oq_disk_ops_system(void)
{
    return &s_system_ops;
}

static const char *s_fsync_names[] = {"always", "batch", "off"};

int oq_fsync_parse(const char *text, oq_fsync_t *policy)
{
    for (int i = OQ_FSYNC_ALWAYS; i <= OQ_FSYNC_OFF; i++) {
        if (strcmp(text, s_fsync_names[i]) == 0) {
            *policy = (oq_fsync_t)i;
            return 0;
        }
    }
    return -1;
}

const char *oq_fsync_name(oq_fsync_t policy)
{
    return policy <= OQ_FSYNC_OFF ? s_fsync_names[policy] : "unknown";
}

/* Write all of data at offset through the seam. 0, or -1 with errno. */
static int s_write_all(const oq_disk_ops_t *ops, int fd, const void *data, size_t len,
                       uint64_t offset, size_t *done)
{
    const uint8_t *p = data;
    *done = 0;
    while (*done < len) {
        ssize_t n = ops->pwrite(ops->ctx, fd, p + *done, len - *done, (off_t)(offset + *done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = ENOSPC; /* no progress and no error: as good as a full disk */
            return -1;
        }
        *done += (size_t)n;
    }
    return 0;
}

static int s_fsync_dir(const oq_disk_ops_t *ops, const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = ops->fsync(ops->ctx, fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* ---- the durable mark ---- */

/* Record that the file is durable up to offset. Not fsynced: after a
   machine crash the mark may be older, never ahead of the journal. */
static void s_mark(oq_journal_t *self, uint64_t offset)
{
    if (self->mark_fd < 0 || offset == self->marked)
        return;
    oq_record_mark_t m = {self->header.created_ms, offset};
    uint8_t bytes[OQ_RECORD_MARK_BYTES];
    oq_record_mark_encode(&m, bytes);
    if (pwrite(self->mark_fd, bytes, sizeof bytes, 0) != (ssize_t)sizeof bytes) {
        if (!self->mark_failing)
            oq_warn("cannot write %s: %s (replay can then tell damage from a torn tail only "
                    "by the records after it)",
                    self->mark_path, strerror(errno));
        self->mark_failing = true;
        return;
    }
    self->mark_failing = false;
    self->marked = offset;
}

/* Read the mark left by the last broker, if it is about this file. */
static void s_read_mark(oq_journal_t *self)
{
    self->mark_fd = open(self->mark_path, O_RDWR | O_CREAT | O_CLOEXEC, OQ_JOURNAL_FILE_MODE);
    if (self->mark_fd < 0) {
        oq_warn("cannot open %s: %s", self->mark_path, strerror(errno));
        return;
    }
    uint8_t bytes[OQ_RECORD_MARK_BYTES];
    ssize_t n = pread(self->mark_fd, bytes, sizeof bytes, 0);
    oq_record_mark_t m;
    char why[128];
    if (n <= 0)
        return; /* new: a first start, or a journal written by an older broker */
    if (oq_record_mark_decode(bytes, (size_t)n, &m, why, sizeof why) < 0) {
        oq_warn("%s: %s; ignored (damage at the journal's end is then told from a torn "
                "write only by the records after it)",
                self->mark_path, why);
        return;
    }
    if (m.created_ms != self->header.created_ms) {
        oq_warn("%s belongs to another journal file (created at %lld, this one at %lld); "
                "ignored",
                self->mark_path, (long long)m.created_ms, (long long)self->header.created_ms);
        return;
    }
    self->has_mark = true;
    self->mark_at_open = self->marked = m.durable_bytes;
}

bool oq_journal_mark(const oq_journal_t *self, uint64_t *durable_bytes)
{
    *durable_bytes = self->mark_at_open;
    return self->has_mark;
}

/* ---- the disk reserve ---- */

static bool s_no_space(int err)
{
    return err == ENOSPC || err == EDQUOT;
}

/* Allocate the reserve file. Logs the change when it comes back. */
static void s_reserve_make(oq_journal_t *self)
{
    if (self->config.reserve_bytes == 0) {
        self->reserve_held = true;
        return;
    }
    int64_t now = oq_clock_now_ms(self->clock);
    int fd = open(self->reserve_path, O_RDWR | O_CREAT | O_CLOEXEC, OQ_JOURNAL_FILE_MODE);
    int err = 0;
    if (fd < 0)
        err = errno;
    else if (self->ops->allocate
                 ? self->ops->allocate(self->ops->ctx, fd, (off_t)self->config.reserve_bytes) < 0
                 : s_sys_allocate(NULL, fd, (off_t)self->config.reserve_bytes) < 0)
        err = errno;
    if (fd >= 0)
        close(fd);
    if (err) {
        /* A partial allocation would only take space from the journal. */
        unlink(self->reserve_path);
        self->reserve_retry_at_ms = now + OQ_JOURNAL_RESERVE_RETRY_MS;
        char text[S_ERROR_LEN];
        snprintf(text, sizeof text,
                 "cannot allocate the %llu-byte disk reserve %s: %s; dispatches are refused "
                 "until that much space is free (see --disk-reserve-bytes)",
                 (unsigned long long)self->config.reserve_bytes, self->reserve_path, strerror(err));
        if (strcmp(text, self->reserve_error) != 0)
            oq_error("%s", text);
        snprintf(self->reserve_error, sizeof self->reserve_error, "%s", text);
        self->reserve_held = false;
        return;
    }
    if (!self->reserve_held && self->reserve_error[0])
        oq_info("the %llu-byte disk reserve is allocated again; dispatches are accepted",
                (unsigned long long)self->config.reserve_bytes);
    self->reserve_error[0] = 0;
    self->reserve_held = true;
}

/* The disk is full: free the reserve so that the records waiting in memory
   and a compaction fit. */
static void s_reserve_release(oq_journal_t *self)
{
    if (!self->reserve_held || self->config.reserve_bytes == 0)
        return;
    unlink(self->reserve_path);
    self->reserve_held = false;
    self->reserve_retry_at_ms = oq_clock_now_ms(self->clock) + OQ_JOURNAL_RESERVE_RETRY_MS;
    snprintf(self->reserve_error, sizeof self->reserve_error,
             "the disk is full: the %llu-byte reserve %s was released for the journal and a "
             "compaction; dispatches are refused until that much space is free again",
             (unsigned long long)self->config.reserve_bytes, self->reserve_path);
    oq_error("%s", self->reserve_error);
}

bool oq_journal_reserve_held(const oq_journal_t *self)
{
    return self->reserve_held;
}

/* ---- opening ---- */

static int s_mkdirs(const char *dir)
{
    char path[S_DIR_LEN];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(path, OQ_JOURNAL_PARENT_MODE) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(path, OQ_JOURNAL_DIR_MODE) < 0 && errno != EEXIST ? -1 : 0;
}

/* Take the directory's lock, with our pid in the file for the next one's
   message. */
static int s_lock(oq_journal_t *self, char *reason, size_t reason_len)
{
    char lock_path[S_PATH_LEN + 16];
    snprintf(lock_path, sizeof lock_path, "%s/%s", self->dir, S_LOCK_NAME);
    self->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, OQ_JOURNAL_FILE_MODE);
    if (self->lock_fd < 0) {
        snprintf(reason, reason_len, "cannot open %s: %s", lock_path, strerror(errno));
        return -1;
    }
    if (flock(self->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        char pid[S_PID_TEXT_LEN] = "";
        ssize_t n = pread(self->lock_fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        snprintf(reason, reason_len,
                 "data directory %s is in use by another onceq-broker%s%s (%s); two brokers "
                 "must never share a journal",
                 self->dir, pid[0] ? " with pid " : "", pid, strerror(errno));
        return -1;
    }
    char pid[S_PID_TEXT_LEN];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(self->lock_fd, 0) < 0 || pwrite(self->lock_fd, pid, (size_t)len, 0) != len)
        oq_warn("cannot write the pid into %s: %s", lock_path, strerror(errno));
    return 0;
}

/* A header of this format with a new creation time and a new dedupe key.
   0, or -1 with a reason. */
static int s_new_header(oq_journal_t *self, char *reason, size_t reason_len)
{
    self->header.version = OQ_JOURNAL_FORMAT_VERSION;
    self->header.created_ms = oq_clock_wall_ms(self->clock);
    if (getrandom(self->header.dedupe_key, sizeof self->header.dedupe_key, 0) !=
        (ssize_t)sizeof self->header.dedupe_key) {
        snprintf(reason, reason_len, "cannot read random bytes for the journal key: %s",
                 strerror(errno));
        return -1;
    }
    return 0;
}

static int s_create_header(oq_journal_t *self, char *reason, size_t reason_len)
{
    if (s_new_header(self, reason, reason_len) < 0)
        return -1;
    uint8_t bytes[OQ_RECORD_HEADER_BYTES];
    oq_record_header_encode(&self->header, bytes);
    size_t done;
    if (ftruncate(self->fd, 0) < 0 ||
        s_write_all(self->ops, self->fd, bytes, sizeof bytes, 0, &done) < 0 ||
        self->ops->fsync(self->ops->ctx, self->fd) < 0 || s_fsync_dir(self->ops, self->dir) < 0) {
        snprintf(reason, reason_len, "cannot create %s: %s", self->path, strerror(errno));
        return -1;
    }
    self->base = OQ_RECORD_HEADER_BYTES;
    return 0;
}

/* The bits in which the header's magic differs from OQ_RECORD_MAGIC. */
static int s_magic_bits_off(const uint8_t *bytes)
{
    int differ = 0;
    for (int i = 0; i < OQ_RECORD_MAGIC_BYTES; i++)
        differ += __builtin_popcount((unsigned)(bytes[i] ^ (uint8_t)OQ_RECORD_MAGIC[i]));
    return differ;
}

static int s_read_header(oq_journal_t *self, uint64_t size, char *reason, size_t reason_len)
{
    uint8_t bytes[OQ_RECORD_HEADER_BYTES];
    ssize_t n = pread(self->fd, bytes, sizeof bytes, 0);
    char why[S_WHY_LEN];
    if (n != (ssize_t)sizeof bytes) {
        snprintf(reason, reason_len, "cannot read %s: %s", self->path,
                 n < 0 ? strerror(errno) : "short read");
        return -1;
    }
    if (oq_record_header_decode(bytes, sizeof bytes, &self->header, why, sizeof why) == 0) {
        self->base = size;
        return 0;
    }
    int bits_off = s_magic_bits_off(bytes);
    if (oq_record_header_intact(bytes) || bits_off > S_MAGIC_MAX_DAMAGED_BITS) {
        /* A newer format, unknown flags, or not a journal: no damage to
           repair. */
        snprintf(reason, reason_len, "%s: %s", self->path, why);
        return -1;
    }
    if (bits_off)
        snprintf(why, sizeof why,
                 "the journal header is damaged (its magic is %d bit%s off \"%s\")", bits_off,
                 bits_off == 1 ? "" : "s", OQ_RECORD_MAGIC);
    if (!self->config.repair) {
        snprintf(reason, reason_len,
                 "journal %s: %s, so neither its format version nor its dedupe key "
                 "can be trusted. Nothing was changed. Start with --repair to rebuild the header "
                 "(a new dedupe key: dispatch ids the journal remembers only by their digest are "
                 "forgotten, so a producer that resends one of them gets a new job) and keep "
                 "every record that verifies; the damaged header is saved to a side file first",
                 self->path, why);
        return -1;
    }
    /* Rebuilt: replay keeps every record that verifies under it and
       rewrites the file (replay.c). */
    memcpy(self->damaged_header, bytes, sizeof bytes);
    snprintf(self->header_why, sizeof self->header_why, "%s", why);
    if (s_new_header(self, reason, reason_len) < 0)
        return -1;
    self->header_rebuilt = true;
    self->base = size;
    return 0;
}

const uint8_t *oq_journal_damaged_header(const oq_journal_t *self, const char **why)
{
    *why = self->header_why;
    return self->header_rebuilt ? self->damaged_header : NULL;
}

oq_journal_t *oq_journal_new(const oq_journal_config_t *config, const oq_clock_t *clock,
                             char *reason, size_t reason_len)
{
    oq_journal_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(reason, reason_len, "out of memory");
        return NULL;
    }
    self->config = *config;
    oq_histogram_init(&self->fsync_latency, oq_histogram_fsync_us, oq_histogram_fsync_count);
    self->ops = config->ops ? config->ops : oq_disk_ops_system();
    self->clock = clock;
    self->fd = self->lock_fd = self->mark_fd = -1;
    msgpack_sbuffer_init(&self->buf);
    msgpack_sbuffer_init(&self->tee_buf);
    if (strlen(config->dir) >= sizeof self->dir) {
        snprintf(reason, reason_len, "data directory path is longer than %d bytes", S_DIR_LEN - 1);
        goto fail;
    }
    snprintf(self->dir, sizeof self->dir, "%s", config->dir);
    snprintf(self->path, sizeof self->path, "%s/%s", config->dir, S_JOURNAL_NAME);
    snprintf(self->tmp_path, sizeof self->tmp_path, "%s/%s", config->dir, S_TMP_NAME);
    snprintf(self->mark_path, sizeof self->mark_path, "%s/%s", config->dir, S_MARK_NAME);
    snprintf(self->reserve_path, sizeof self->reserve_path, "%s/%s", config->dir, S_RESERVE_NAME);
    self->last_sync_ms = oq_clock_now_ms(clock);
    if (s_mkdirs(self->dir) < 0) {
        snprintf(reason, reason_len, "cannot create data directory %s: %s", self->dir,
                 strerror(errno));
        goto fail;
    }
    if (s_lock(self, reason, reason_len) < 0)
        goto fail;
    /* A compaction that never reached its rename: the journal is whole. */
    if (unlink(self->tmp_path) == 0)
        oq_info("removed %s, left by a compaction that did not finish", self->tmp_path);
    self->fd = open(self->path, O_RDWR | O_CREAT | O_CLOEXEC, OQ_JOURNAL_FILE_MODE);
    struct stat st;
    if (self->fd < 0 || fstat(self->fd, &st) < 0) {
        snprintf(reason, reason_len, "cannot open %s: %s", self->path, strerror(errno));
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size > 0 && size < OQ_RECORD_HEADER_BYTES)
        /* The broker stopped while creating the file: no record can follow. */
        oq_warn("%s holds %llu bytes, less than a header: the broker stopped while creating "
                "it; starting it again",
                self->path, (unsigned long long)size);
    if (size < OQ_RECORD_HEADER_BYTES ? s_create_header(self, reason, reason_len) < 0
                                      : s_read_header(self, size, reason, reason_len) < 0)
        goto fail;
    if (size < OQ_RECORD_HEADER_BYTES) {
        self->mark_fd = open(self->mark_path, O_RDWR | O_CREAT | O_CLOEXEC, OQ_JOURNAL_FILE_MODE);
        self->marked = UINT64_MAX;
        s_mark(self, OQ_RECORD_HEADER_BYTES);
    } else if (self->header_rebuilt) {
        /* The mark names its file by the creation time, which was in the
           damaged header: it is not used, and is rewritten for the file
           replay writes. */
        self->mark_fd = open(self->mark_path, O_RDWR | O_CREAT | O_CLOEXEC, OQ_JOURNAL_FILE_MODE);
    } else {
        s_read_mark(self);
    }
    s_reserve_make(self);
    return self;
fail:
    oq_journal_destroy(&self);
    return NULL;
}

void oq_journal_destroy(oq_journal_t **self_p)
{
    assert(self_p);
    oq_journal_t *self = *self_p;
    if (!self)
        return;
    if (self->fd >= 0) {
        if (self->buf.size && oq_journal_sync(self) < 0)
            oq_error("stopping with %zu journal bytes not durable: %s", self->buf.size,
                     self->error);
        close(self->fd);
    }
    if (self->mark_fd >= 0)
        close(self->mark_fd);
    if (self->lock_fd >= 0)
        close(self->lock_fd); /* releases the lock */
    msgpack_sbuffer_destroy(&self->buf);
    msgpack_sbuffer_destroy(&self->tee_buf);
    free(self);
    *self_p = NULL;
}

const char *oq_journal_path(const oq_journal_t *self)
{
    return self->path;
}

const char *oq_journal_dir(const oq_journal_t *self)
{
    return self->dir;
}

const char *oq_journal_tmp_path(const oq_journal_t *self)
{
    return self->tmp_path;
}

const oq_record_header_t *oq_journal_header(const oq_journal_t *self)
{
    return &self->header;
}

int oq_journal_fd(const oq_journal_t *self)
{
    return self->fd;
}

uint64_t oq_journal_file_bytes(const oq_journal_t *self)
{
    return self->base + self->buf.size;
}

int oq_journal_truncate(oq_journal_t *self, uint64_t valid_bytes, char *reason, size_t reason_len)
{
    assert(self->buf.size == 0 && valid_bytes >= OQ_RECORD_HEADER_BYTES);
    if (ftruncate(self->fd, (off_t)valid_bytes) < 0 ||
        self->ops->fsync(self->ops->ctx, self->fd) < 0) {
        snprintf(reason, reason_len, "cannot cut %s to %llu bytes: %s", self->path,
                 (unsigned long long)valid_bytes, strerror(errno));
        return -1;
    }
    self->base = valid_bytes;
    s_mark(self, valid_bytes);
    return 0;
}

/* ---- appending ---- */

static void s_failed(oq_journal_t *self, const char *what, int err)
{
    int64_t now = oq_clock_now_ms(self->clock);
    self->failures++;
    self->retry_at_ms = now + OQ_JOURNAL_RETRY_MS;
    char text[S_ERROR_LEN];
    snprintf(text, sizeof text, "cannot %s %s: %s", what, self->path, strerror(err));
    if (!self->failing || strcmp(text, self->error) != 0)
        oq_error("%s; %zu journal bytes wait in memory, dispatches are refused until it "
                 "succeeds (retrying every %d ms)",
                 text, self->buf.size, OQ_JOURNAL_RETRY_MS);
    if (!self->failing)
        self->failing_since_ms = now;
    self->failing = true;
    snprintf(self->error, sizeof self->error, "%s", text);
    if (s_no_space(err) && self->reserve_held && self->config.reserve_bytes) {
        s_reserve_release(self);
        self->retry_at_ms = now; /* the room is there now */
    }
}

static void s_recovered(oq_journal_t *self)
{
    if (!self->failing)
        return;
    oq_info("journal writes succeed again after %lld ms",
            (long long)(oq_clock_now_ms(self->clock) - self->failing_since_ms));
    self->failing = false;
    self->error[0] = 0;
}

/* Copy what the last append added to the compaction's tee. */
static void s_tee(oq_journal_t *self, size_t before)
{
    if (!self->tee || self->buf.size == before)
        return;
    if (msgpack_sbuffer_write(&self->tee_buf, self->buf.data + before, self->buf.size - before) <
        0) {
        /* The snapshot would miss this record: give the compaction up. */
        oq_error("out of memory copying a record for the compaction; it will be abandoned");
        self->tee = false;
        msgpack_sbuffer_destroy(&self->tee_buf);
        msgpack_sbuffer_init(&self->tee_buf);
    }
}

/* The engine's observer: one record per change a restart needs. -1 if the
   record cannot be buffered (the journal then counts as failing, which
   refuses new dispatches until memory comes back); the engine refuses the
   changes a producer or an operator asked for, and keeps the others. */
static int s_changed(void *ctx, oq_job_event_t event, const oq_job_view_t *job,
                     const oq_job_msg_t *dispatch)
{
    oq_journal_t *self = ctx;
    size_t before = self->buf.size;
    int rc = 0;
    switch (event) {
    case OQ_EVENT_DISPATCHED:
        rc = oq_record_dispatched(&self->buf, job, dispatch ? dispatch->dispatch_id : oq_str(NULL),
                                  oq_clock_wall_ms(self->clock));
        if (rc == 0 && (job->unique_key || job->overlap_key))
            rc = oq_record_keys(&self->buf, job->id, job->unique_key, job->unique_until_ms, false,
                                job->overlap_key);
        if (rc == 0)
            self->live_bytes += oq_record_dispatched_bytes(job);
        break;
    case OQ_EVENT_LEASED:
        rc = oq_record_leased(&self->buf, job->id, job->attempt);
        break;
    case OQ_EVENT_RETRY:
        rc = oq_record_retry(&self->buf, job->id, job->attempt, job->not_before_ms);
        break;
    case OQ_EVENT_FAILED:
        rc = oq_record_failed(&self->buf, job->id, job->attempt, job->failed_at_ms, job->error);
        break;
    case OQ_EVENT_DONE:
    case OQ_EVENT_FORGOTTEN:
    case OQ_EVENT_CANCELLED: {
        rc = event == OQ_EVENT_DONE        ? oq_record_done(&self->buf, job->id)
             : event == OQ_EVENT_FORGOTTEN ? oq_record_forgotten(&self->buf, job->id)
                                           : oq_record_cancelled(&self->buf, job->id);
        /* A forget or cancel refused for want of its record keeps the job. */
        uint64_t bytes = rc == 0 || event == OQ_EVENT_DONE ? oq_record_dispatched_bytes(job) : 0;
        self->live_bytes -= bytes < self->live_bytes ? bytes : self->live_bytes;
        break;
    }
    case OQ_EVENT_REQUEUED:
        rc = oq_record_requeued(&self->buf, job->id);
        break;
    case OQ_EVENT_REVIEW:
        rc = oq_record_review(&self->buf, job->id, job->attempt, job->failed_at_ms, job->error);
        break;
    case OQ_EVENT_RESOLVED:
        /* One record says it all: replay takes the job out of review the
           way the decision did (done, ready again, or failed). */
        rc = oq_record_resolved(&self->buf, job->resolution);
        if (rc == 0 && job->resolution->action == OQ_REVIEW_DONE) {
            uint64_t bytes = oq_record_dispatched_bytes(job);
            self->live_bytes -= bytes < self->live_bytes ? bytes : self->live_bytes;
        }
        break;
    case OQ_EVENT_RETURNED: /* replay brings leased jobs back ready by itself */
    case OQ_EVENT_DUE:      /* replay compares not-before times with its clock */
    case OQ_EVENT_RESTORED:
    case OQ_EVENT_WAITING: /* to the outside it stays ready */
        return 0;
    }
    if (rc < 0) {
        /* A change the journal cannot hold: none of its records stay (the
           engine may refuse it), and new work is refused until memory
           comes back and the buffer can be written. */
        self->buf.size = before;
        s_failed(self, "buffer a record for", ENOMEM);
        return -1;
    }
    self->appended += self->buf.size - before;
    s_tee(self, before);
    return 0;
}

/* The batches' observer: one record per batch change a restart needs. */
static int s_batch_changed(void *ctx, oq_batch_event_t event, const oq_batch_view_t *batch,
                           oq_batch_callback_t which)
{
    oq_journal_t *self = ctx;
    size_t before = self->buf.size;
    int rc = 0;
    switch (event) {
    case OQ_BATCH_CREATED:
        rc = oq_record_batch(&self->buf, batch);
        break;
    case OQ_BATCH_FIRED:
        rc = oq_record_batch_fired(&self->buf, batch->id, which, batch->callback_ids[which]);
        break;
    case OQ_BATCH_CANCELLED:
        rc = oq_record_batch_cancelled(&self->buf, batch->id, batch->total);
        break;
    }
    if (rc < 0) {
        self->buf.size = before;
        s_failed(self, "buffer a record for", ENOMEM);
        return -1;
    }
    self->appended += self->buf.size - before;
    s_tee(self, before);
    return 0;
}

/* The chains' observer: one record per chain change a restart needs. */
static int s_chain_changed(void *ctx, oq_chain_event_t event, const oq_chain_view_t *chain)
{
    oq_journal_t *self = ctx;
    size_t before = self->buf.size;
    int rc = event == OQ_CHAIN_CREATED ? oq_record_chain(&self->buf, chain)
                                       : oq_record_chain_fired(&self->buf, chain->job_id);
    if (rc < 0) {
        self->buf.size = before;
        s_failed(self, "buffer a record for", ENOMEM);
        return -1;
    }
    self->appended += self->buf.size - before;
    s_tee(self, before);
    return 0;
}

oq_engine_hooks_t oq_journal_hooks(oq_journal_t *self)
{
    oq_engine_hooks_t hooks = {
        .changed = s_changed, .ctx = self, .batch = s_batch_changed, .chain = s_chain_changed};
    return hooks;
}

uint64_t oq_journal_live_bytes(const oq_journal_t *self)
{
    return self->live_bytes;
}

void oq_journal_set_live_bytes(oq_journal_t *self, uint64_t bytes)
{
    self->live_bytes = bytes;
}

/* ---- group commit ---- */

uint64_t oq_journal_appended(const oq_journal_t *self)
{
    return self->appended;
}

uint64_t oq_journal_durable(const oq_journal_t *self)
{
    return self->durable;
}

/* Everything in buf is durable now. */
static void s_settle(oq_journal_t *self)
{
    self->base += self->buf.size;
    msgpack_sbuffer_clear(&self->buf);
    self->written = 0;
    self->durable = self->appended;
    s_mark(self, self->base);
}

/* Write the part of buf not in the file yet. */
static int s_write_pending(oq_journal_t *self)
{
    if (self->written == self->buf.size)
        return 0;
    size_t done = 0;
    int rc = s_write_all(self->ops, self->fd, self->buf.data + self->written,
                         self->buf.size - self->written, self->base + self->written, &done);
    /* What did reach the file stays there: the next try continues after it. */
    self->written += done;
    if (rc < 0)
        s_failed(self, "write", errno);
    return rc;
}

/* CLOCK_MONOTONIC in microseconds. The fsync timing is an observation for
   the metrics, not a deadline: it reads the system clock directly rather
   than the injected millisecond one, which is too coarse for an fsync. */
static int64_t s_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int s_fsync(oq_journal_t *self)
{
    int64_t started_us = s_now_us();
    if (self->ops->fsync(self->ops->ctx, self->fd) < 0) {
        int err = errno;
        self->written = 0; /* the pages may be gone: write them all again */
        s_failed(self, "fsync", err);
        return -1;
    }
    self->fsyncs++;
    oq_histogram_observe(&self->fsync_latency, s_now_us() - started_us);
    self->last_sync_ms = oq_clock_now_ms(self->clock);
    return 0;
}

int oq_journal_flush(oq_journal_t *self, uint64_t needs)
{
    int64_t now = oq_clock_now_ms(self->clock);
    if (!self->reserve_held && !self->failing && now >= self->reserve_retry_at_ms)
        s_reserve_make(self);
    if (self->failing && now < self->retry_at_ms)
        return -1;
    if (s_write_pending(self) < 0)
        return -1;
    if (self->config.fsync == OQ_FSYNC_OFF) {
        s_settle(self);
        s_recovered(self);
        return 0;
    }
    if (self->buf.size == 0) {
        s_recovered(self);
        return 0;
    }
    bool reply_waits = self->config.fsync == OQ_FSYNC_ALWAYS && needs > self->durable;
    bool interval_over = now - self->last_sync_ms >= self->config.fsync_interval_ms;
    if (!reply_waits && !interval_over && !self->failing)
        return 0;
    if (s_fsync(self) < 0)
        return -1;
    s_settle(self);
    s_recovered(self);
    return 0;
}

int oq_journal_sync(oq_journal_t *self)
{
    if (s_write_pending(self) < 0 || s_fsync(self) < 0)
        return -1;
    s_settle(self);
    s_recovered(self);
    return 0;
}

int64_t oq_journal_next_deadline(const oq_journal_t *self)
{
    if (self->failing)
        return self->retry_at_ms;
    int64_t wake = -1;
    if (self->buf.size && self->config.fsync != OQ_FSYNC_OFF)
        wake = self->last_sync_ms + self->config.fsync_interval_ms;
    if (!self->reserve_held && (wake < 0 || self->reserve_retry_at_ms < wake))
        wake = self->reserve_retry_at_ms;
    return wake;
}

bool oq_journal_healthy(const oq_journal_t *self)
{
    return !self->failing && self->reserve_held;
}

bool oq_journal_failing(const oq_journal_t *self)
{
    return self->failing;
}

const char *oq_journal_error(const oq_journal_t *self)
{
    return self->failing ? self->error : !self->reserve_held ? self->reserve_error : "";
}

int oq_journal_free_bytes(const oq_journal_t *self, uint64_t *bytes)
{
    return self->ops->free_bytes ? self->ops->free_bytes(self->ops->ctx, self->dir, bytes)
                                 : s_sys_free_bytes(NULL, self->dir, bytes);
}

uint64_t oq_journal_backlog_bytes(const oq_journal_t *self)
{
    return self->buf.size;
}

const oq_histogram_t *oq_journal_fsync_latency(const oq_journal_t *self)
{
    return &self->fsync_latency;
}

uint64_t oq_journal_fsyncs(const oq_journal_t *self)
{
    return self->fsyncs;
}

uint64_t oq_journal_failures(const oq_journal_t *self)
{
    return self->failures;
}

oq_fsync_t oq_journal_policy(const oq_journal_t *self)
{
    return self->config.fsync;
}

const oq_disk_ops_t *oq_journal_ops(const oq_journal_t *self)
{
    return self->ops;
}

/* ---- compaction ---- */

void oq_journal_tee_begin(oq_journal_t *self)
{
    msgpack_sbuffer_clear(&self->tee_buf);
    self->tee = true;
}

void oq_journal_tee_end(oq_journal_t *self)
{
    self->tee = false;
    msgpack_sbuffer_destroy(&self->tee_buf);
    msgpack_sbuffer_init(&self->tee_buf);
}

int oq_journal_switch(oq_journal_t *self, int fd, uint64_t bytes, char *reason, size_t reason_len)
{
    if (!self->tee) {
        snprintf(reason, reason_len, "records were lost for the snapshot (out of memory)");
        close(fd);
        unlink(self->tmp_path);
        return -1;
    }
    size_t done;
    const char *step = "write";
    if (s_write_all(self->ops, fd, self->tee_buf.data, self->tee_buf.size, bytes, &done) < 0 ||
        (step = "fsync", self->ops->fsync(self->ops->ctx, fd) < 0) ||
        (step = "rename", rename(self->tmp_path, self->path) < 0)) {
        snprintf(reason, reason_len, "cannot %s %s: %s", step, self->tmp_path, strerror(errno));
        close(fd);
        unlink(self->tmp_path);
        oq_journal_tee_end(self);
        return -1;
    }
    /* Renamed: from here on the new file is the journal, whatever happens.
       Its header names it (a snapshot gets its own creation time), so the
       durable mark written next is about it. */
    if (s_fsync_dir(self->ops, self->dir) < 0)
        oq_warn("cannot fsync directory %s after the compaction: %s (a machine crash now may "
                "bring the old journal back, which is still whole)",
                self->dir, strerror(errno));
    close(self->fd);
    self->fd = fd;
    /* The records in buf are all in the new file, as snapshot or as tee:
       they are durable, and the next append goes after the tee. */
    s_settle(self);
    self->base = bytes + self->tee_buf.size;
    uint8_t head[OQ_RECORD_HEADER_BYTES];
    char why[128];
    oq_record_header_t header;
    if (pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head &&
        oq_record_header_decode(head, sizeof head, &header, why, sizeof why) == 0)
        self->header = header;
    self->marked = UINT64_MAX; /* the mark names the old file: write it whatever the offset */
    s_mark(self, self->base);
    oq_journal_tee_end(self);
    self->last_sync_ms = oq_clock_now_ms(self->clock);
    /* The rename freed the old file's space: on a full disk, the reserve
       is tried again at the next flush, not a retry interval later. */
    if (!self->reserve_held)
        self->reserve_retry_at_ms = self->last_sync_ms;
    s_recovered(self);
    return 0;
}
