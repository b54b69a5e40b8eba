/*  replay.h: rebuilding the broker's state from its journal before it
    serves. Ready, delayed, failed and review jobs come back with their attempt
    counts (a job that was leased comes back ready), and the engine
    remembers again the dispatch ids still inside their window.

    The end of the file may hold a record the broker was writing when it was
    killed: such a torn tail is cut off with a warning, but only when it is
    provably unconfirmed: it lies at or past the durable mark (journal.h)
    and no record after it verifies (a torn write is the last thing
    written). Anything else that fails to verify (a bad CRC, an impossible
    length, a record that does not decode, a file shorter than its mark) is
    damage and stops the start with an error naming the offset, unless
    repair is set: then replay resynchronises at the next record that
    verifies, keeps every good record, saves the damaged bytes to a side
    file and reports each skipped range.

    A header that was damaged and rebuilt under repair (journal.h) has a
    new dedupe key: a dispatch id the file holds only as a digest of the
    old key (a snapshot's DEDUPE records) can never match again and is
    dropped and counted, while every dispatch id written in full with its
    job is digested afresh. The old header goes to the side file, and the
    journal is rewritten under the new one. */
#ifndef ONCEQ_REPLAY_H
#define ONCEQ_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "journal.h"
#include "onceq/clock.h"

#define OQ_REPLAY_PATH_LEN   4200
#define OQ_REPLAY_MAX_RANGES 16 /* skipped ranges listed in a report (all are logged) */

typedef struct {
    uint64_t from, to; /* file offsets, to excluded */
} oq_replay_range_t;

typedef struct {
    uint64_t records;       /* applied */
    uint64_t bytes;         /* valid bytes, header included */
    uint64_t torn_bytes;    /* cut off the end: a torn record */
    bool has_mark;          /* a durable mark was found for the file */
    uint64_t mark;          /* what it said: the file was durable up to here */
    uint64_t damaged_at;    /* repair: file offset of the first damage */
    uint64_t dropped_bytes; /* repair: damaged bytes skipped, in all */
    uint64_t gaps;          /* repair: damaged ranges skipped */
    oq_replay_range_t ranges[OQ_REPLAY_MAX_RANGES]; /* the first gaps */
    bool rewritten;           /* rewritten: by repair without the gaps, or from an older format */
    bool header_rebuilt;      /* repair: the header was damaged and rebuilt (journal.h) */
    uint64_t digests_dropped; /* repair: DEDUPE records a rebuilt header's new key cannot use */
    uint64_t ignored;         /* records naming a job not held (none in a sound journal) */
    size_t ready, delayed, failed, review;
    size_t dispatch_ids;
    int64_t elapsed_ms;
    char saved_to[OQ_REPLAY_PATH_LEN]; /* repair: where the dropped bytes went ("" if nowhere) */
} oq_replay_report_t;

/* Read the journal into engine (no hooks set, no jobs held), whose
   dispatch ids are digested with the journal's key from now on. Cuts a
   torn tail (and, with repair, damage) off the file. 0 with *report
   filled, or -1 with a reason for the operator. All arguments are
   borrowed. */
int oq_replay_run(oq_journal_t *journal, oq_engine_t *engine, const oq_clock_t *clock, bool repair,
                  oq_replay_report_t *report, char *reason, size_t reason_len);

#endif
