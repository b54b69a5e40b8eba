/*  compact.h: keeping the journal proportional to the live jobs. When the
    file holds much more than a snapshot of the live state would take, a
    child process (fork) writes that snapshot to journal.tmp from its copy
    of the broker's memory, while the broker goes on serving and appending
    to the old journal and keeps a copy of what it appends. When the child
    is done, the broker adds that copy to the snapshot, fsyncs it and renames
    it over the journal (the approach of Redis's AOF rewrite). */
#ifndef ONCEQ_COMPACT_H
#define ONCEQ_COMPACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "journal.h"
#include "onceq/clock.h"

typedef struct {
    uint64_t min_bytes; /* never compact a journal smaller than this */
    uint32_t ratio;     /* compact when the file is over ratio x the live state */
} oq_compact_config_t;

typedef struct oq_compact oq_compact_t;

/* A compactor for journal, over engine (both borrowed, outliving it).
   NULL if memory runs out. */
oq_compact_t *oq_compact_new(const oq_compact_config_t *config, oq_journal_t *journal,
                             oq_engine_t *engine, const oq_clock_t *clock);

/* Stop a running compaction (its child is killed, its file removed); free;
   set *self_p to NULL. */
void oq_compact_destroy(oq_compact_t **self_p);

/* True if no compaction runs, none failed within its retry interval (see
   oq_compact_start), and the journal is over both the minimum and ratio x
   the live state. */
bool oq_compact_due(const oq_compact_t *self);

/* The disk is full (the journal's reserve is released): true if no
   compaction runs, none failed within its retry interval, and
   a snapshot would take at most half the file and half the free space,
   whatever the thresholds. */
bool oq_compact_reclaim_due(const oq_compact_t *self);

/* Start a compaction: fork the child that writes the snapshot. 0, or -1
   (logged; tried again after OQ_COMPACT_RETRY_MS, or on a full disk after
   OQ_COMPACT_RECLAIM_RETRY_MS). */
int oq_compact_start(oq_compact_t *self);

/* While a compaction runs: the file descriptor that becomes readable when
   its child is done (for the event loop's poll); -1 otherwise. */
int oq_compact_fd(const oq_compact_t *self);

/* Call when oq_compact_fd is readable: finish the compaction. Returns 1 if
   the journal was replaced, 0 if the child is not done yet, -1 if the
   compaction failed (logged; the old journal stays, and it is tried again
   as after a failed start). */
int oq_compact_poll(oq_compact_t *self);

/* Compactions finished since start. */
uint64_t oq_compact_count(const oq_compact_t *self);

/* What a snapshot written now would take, estimated: the live jobs'
   records, the dispatch ids' records and the header. The thresholds are
   measured against it, and stats shows it as the journal's live size. */
uint64_t oq_compact_live_bytes(const oq_compact_t *self);

/* Write a snapshot of the live state into fd from offset 0: a header with
   key, the next job id, every live job, every dispatch id the engine
   remembers still inside its window at now_ms (wall clock). *bytes gets
   its size. 0, or -1 with errno. What the child runs; tests call it
   directly. */
int oq_compact_snapshot(int fd, const oq_disk_ops_t *ops, const oq_record_header_t *header,
                        oq_engine_t *engine, int64_t now_ms, uint64_t *bytes);

#endif
