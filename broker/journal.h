/*  journal.h: the broker's journal file. Every change of a job's state that
    a restart needs (record.h) is appended to an in-memory buffer as the
    engine makes it; once per loop turn, "before sleep", the buffer is written
    with one write and made durable with at most one fsync for everything the
    turn did (group commit), under the policy in force:

      always  fsync before any reply that waits on a record (oq_journal_flush
              with needs past the durable position); other records ride along,
              or are fsynced within the interval
      batch   fsync at most every interval; replies wait for it
      off     no fsync: durable means written (the OS flushes when it likes)

    A failed write or fsync keeps every record in memory and is retried every
    OQ_JOURNAL_RETRY_MS; until one succeeds the journal reports itself
    unhealthy (the broker then refuses dispatches). After a failed fsync the
    kernel may have dropped the dirty pages, so everything since the last good
    fsync is written again before the next one.

    The durable mark. After every write or fsync that moves the durable
    position, the file offset it reached is written into DIR/journal.durable
    (not fsynced: it only ever lags, which keeps it a lower bound). Replay
    uses it to tell a torn tail from damage: bytes below the mark were
    durable, so a record there that fails to verify is damage.

    The disk reserve. With reserve_bytes, a file DIR/reserve of that size is
    allocated at open. A write that fails for lack of space (ENOSPC, EDQUOT)
    deletes it, so the records waiting in memory and a compaction have room;
    the journal counts as unhealthy (dispatches refused) until the reserve
    can be allocated again, tried every OQ_JOURNAL_RESERVE_RETRY_MS and at
    once after a compaction (whose rename is what frees the space).

    Disk writes and fsyncs go through a small table (oq_disk_ops_t) that
    tests replace to play a full disk. */
#ifndef ONCEQ_JOURNAL_H
#define ONCEQ_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine.h"
#include "onceq/clock.h"
#include "record.h"

/* The data directory and every file the broker makes in it: the records
   hold job payloads in plaintext, so only the broker's own user may read
   them. Folders above the data directory that the broker has to make get
   the usual 0755. */
#define OQ_JOURNAL_DIR_MODE    0700
#define OQ_JOURNAL_FILE_MODE   0600
#define OQ_JOURNAL_PARENT_MODE 0755

/* The disk seam: pwrite(2) and fsync(2) by default. Each returns what the
   system call returns, with errno set on failure. */
typedef struct {
    ssize_t (*pwrite)(void *ctx, int fd, const void *data, size_t len, off_t offset);
    int (*fsync)(void *ctx, int fd);
    void *ctx;
    /* Allocate len bytes for fd (the disk reserve); 0, or -1 with errno.
       NULL: posix_fallocate(3). */
    int (*allocate)(void *ctx, int fd, off_t len);
    /* The bytes an unprivileged writer may still write on the file system
       that holds dir; 0, or -1 with errno. NULL: statvfs(3). */
    int (*free_bytes)(void *ctx, const char *dir, uint64_t *bytes);
} oq_disk_ops_t;

/* The real system calls. Borrowed. */
const oq_disk_ops_t *oq_disk_ops_system(void);

typedef enum { OQ_FSYNC_ALWAYS, OQ_FSYNC_BATCH, OQ_FSYNC_OFF } oq_fsync_t;

/* "always", "batch" or "off": 0, or -1 if unknown. */
int oq_fsync_parse(const char *text, oq_fsync_t *policy);

/* The policy's name. Borrowed. */
const char *oq_fsync_name(oq_fsync_t policy);

typedef struct {
    const char *dir;           /* data directory (borrowed); created if missing */
    oq_fsync_t fsync;          /* policy */
    int64_t fsync_interval_ms; /* batch: the longest wait; always: for records no reply waits on */
    const oq_disk_ops_t *ops;  /* NULL: oq_disk_ops_system() */
    uint64_t reserve_bytes;    /* the disk reserve (0: none); see "the disk reserve" above */
    bool repair;               /* a damaged header is rebuilt, not refused (--repair) */
} oq_journal_config_t;

typedef struct oq_journal oq_journal_t;

/* Open the journal in config->dir, creating the directory and the file (with
   a new header and dedupe key) if missing, and lock the directory against a
   second broker. An unfinished compaction file is removed. Records are not
   read: replay (replay.h) does that before anything is appended. NULL with a
   reason on failure. config and clock are borrowed.

   A damaged header (a bad magic or CRC: nothing in it can be trusted) is
   refused with a reason naming --repair, unless config->repair: then the
   journal is opened under a new header (this format version, a new
   creation time and a new dedupe key, oq_journal_damaged_header), and the
   durable mark, which names the file by the old creation time, is not
   used. Replay then rewrites the file. A sound header of a newer format or
   with unknown flags is refused either way: it is no damage. */
oq_journal_t *oq_journal_new(const oq_journal_config_t *config, const oq_clock_t *clock,
                             char *reason, size_t reason_len);

/* Write and fsync what is pending (best effort), close, unlock, free; set
 *self_p to NULL. */
void oq_journal_destroy(oq_journal_t **self_p);

/* ---- the file ---- */

/* The journal's path and its directory. Borrowed. */
const char *oq_journal_path(const oq_journal_t *self);
const char *oq_journal_dir(const oq_journal_t *self);

/* The header read or written at open. Borrowed. */
const oq_record_header_t *oq_journal_header(const oq_journal_t *self);

/* If the header on disk was damaged and rebuilt (see oq_journal_new): its
   OQ_RECORD_HEADER_BYTES bytes as they were, and *why what was wrong with
   them. NULL if the header was sound. Borrowed. */
const uint8_t *oq_journal_damaged_header(const oq_journal_t *self, const char **why);

/* The open file, for replay to read. */
int oq_journal_fd(const oq_journal_t *self);

/* Bytes in the file once everything appended is written. */
uint64_t oq_journal_file_bytes(const oq_journal_t *self);

/* The durable mark found at open for this file: true with the offset the
   file was durable up to, false if there was none (an older broker, a
   first start, a mark for another file; logged at open). */
bool oq_journal_mark(const oq_journal_t *self, uint64_t *durable_bytes);

/* Replay found the valid records ending at valid_bytes: cut the rest off and
   fsync. 0, or -1 with a reason. */
int oq_journal_truncate(oq_journal_t *self, uint64_t valid_bytes, char *reason, size_t reason_len);

/* ---- appending ---- */

/* The observer to give the engine: every state change a restart needs
   becomes a record. The journal must outlive the engine's use of it. */
oq_engine_hooks_t oq_journal_hooks(oq_journal_t *self);

/* What a snapshot of the live jobs would take, kept up to date by the
   hooks; set by replay to start from. */
uint64_t oq_journal_live_bytes(const oq_journal_t *self);
void oq_journal_set_live_bytes(oq_journal_t *self, uint64_t bytes);

/* ---- group commit ---- */

/* Positions in the stream of appended bytes (since open): everything
   appended, and the part durable under the policy. */
uint64_t oq_journal_appended(const oq_journal_t *self);
uint64_t oq_journal_durable(const oq_journal_t *self);

/* The loop turn's end: write what was appended, then fsync if the policy
   says so; needs is the position the waiting replies need (0: none). 0, or
   -1 while writes fail (see oq_journal_error). */
int oq_journal_flush(oq_journal_t *self, uint64_t needs);

/* Write and fsync everything now, whatever the policy (a clean stop). */
int oq_journal_sync(oq_journal_t *self);

/* When the loop must wake for a batch fsync or a retry (monotonic ms), or
   -1 if it need not. */
int64_t oq_journal_next_deadline(const oq_journal_t *self);

/* False while writes or fsyncs fail, or the disk reserve is not in place;
   oq_journal_error then says why (the OS error included). Borrowed text. */
bool oq_journal_healthy(const oq_journal_t *self);

/* True while writes or fsyncs fail (records wait in memory). */
bool oq_journal_failing(const oq_journal_t *self);
const char *oq_journal_error(const oq_journal_t *self);

/* True if no reserve is configured or it is in place; false while it is
   released (or could not be allocated), when a compaction may run to
   reclaim space whatever its size thresholds. */
bool oq_journal_reserve_held(const oq_journal_t *self);

/* The free space on the journal's file system (through the disk seam):
   0 with *bytes, or -1 if it cannot be told. */
int oq_journal_free_bytes(const oq_journal_t *self, uint64_t *bytes);

/* Bytes appended and not yet durable. */
uint64_t oq_journal_backlog_bytes(const oq_journal_t *self);

/* fsyncs done, and writes or fsyncs that failed, since open. */
uint64_t oq_journal_fsyncs(const oq_journal_t *self);
uint64_t oq_journal_failures(const oq_journal_t *self);

/* How long the journal file's fsyncs took, since open. Borrowed. */
const oq_histogram_t *oq_journal_fsync_latency(const oq_journal_t *self);

oq_fsync_t oq_journal_policy(const oq_journal_t *self);

/* The disk seam in use (the compaction writes through it too). Borrowed. */
const oq_disk_ops_t *oq_journal_ops(const oq_journal_t *self);

/* ---- compaction (compact.h) ---- */

/* Path of the compaction file. Borrowed. */
const char *oq_journal_tmp_path(const oq_journal_t *self);

/* From now on keep a copy of every appended record (the records a snapshot
   taken now will not contain). */
void oq_journal_tee_begin(oq_journal_t *self);

/* Stop keeping the copy and drop it. */
void oq_journal_tee_end(oq_journal_t *self);

/* Finish a compaction: fd holds a snapshot of `bytes` bytes taken when the
   tee began. Append the tee to it, fsync it, rename it over the journal,
   fsync the directory, and append to it from now on (fd is taken over).
   Everything appended so far is then durable. 0, or -1 with a reason (the
   old journal stays in use; fd is closed and the file removed). */
int oq_journal_switch(oq_journal_t *self, int fd, uint64_t bytes, char *reason, size_t reason_len);

#endif
