/*  record.h: the journal's on-disk format, docs/journal.md being its
    specification: the file header and the records, encoded into and decoded
    from memory. Nothing here touches a file; journal.c appends what this
    encodes, replay.c and the tests decode it.

    A record is framed as u32 length, u32 CRC-32C of the type byte and the
    body, then the type byte and the body; all integers little-endian. The
    decoder trusts no length it has not checked against the bytes present. */
#ifndef ONCEQ_RECORD_H
#define ONCEQ_RECORD_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "onceq/proto.h"
#include "siphash.h"

#define OQ_RECORD_MAGIC        "ONCEQJNL"
#define OQ_RECORD_MAGIC_BYTES  8
#define OQ_RECORD_HEADER_BYTES 48 /* the file header */
#define OQ_RECORD_FRAME_BYTES  8  /* length and CRC in front of each record */

typedef enum {
    OQ_RECORD_DISPATCHED = 1, /* a new job, in full */
    OQ_RECORD_LEASED = 2,     /* handed out: its attempt count */
    OQ_RECORD_RETRY = 3,      /* a retry outcome: attempt and when it may run again */
    OQ_RECORD_FAILED = 4,     /* to the failed store, with its error */
    OQ_RECORD_DONE = 5,       /* completed: forget it */
    OQ_RECORD_REQUEUED = 6,   /* from the failed store back to ready */
    OQ_RECORD_DEDUPE = 7,     /* a remembered dispatch id (snapshots) */
    OQ_RECORD_NEXT_ID = 8,    /* the next job id (snapshots) */
    /* Format version 2. */
    OQ_RECORD_REVIEW = 9,    /* to the review store, with the handler's reason */
    OQ_RECORD_RESOLVED = 10, /* a resolution of a job in review (snapshots: one remembered) */
    /* Format version 3. */
    OQ_RECORD_KEYS = 11, /* a job's unique and overlap keys (snapshots: a unique window too) */
    /* Format version 4. */
    OQ_RECORD_GENERATION = 12, /* a job's requeue generation (snapshots) */
    OQ_RECORD_FORGOTTEN = 16,  /* deleted from the failed store */
    OQ_RECORD_CANCELLED = 17,  /* a ready or delayed job withdrawn */
    /* Format version 5. */
    OQ_RECORD_BATCH = 18,           /* a batch with its callbacks (snapshots: with its counts) */
    OQ_RECORD_BATCH_FIRED = 19,     /* a batch's callback was dispatched */
    OQ_RECORD_BATCH_CANCELLED = 20, /* a batch was cancelled */
    OQ_RECORD_CHAIN = 21,           /* a job's place in a chain, with the links after it */
    OQ_RECORD_CHAIN_FIRED = 22,     /* a job's chain moved on or stopped */
} oq_record_type_t;

/* True if type is a record type of this format. */
bool oq_record_type_known(int type);

typedef struct {
    uint32_t version;                         /* OQ_JOURNAL_FORMAT_VERSION when written */
    int64_t created_ms;                       /* wall clock */
    uint8_t dedupe_key[OQ_SIPHASH_KEY_BYTES]; /* digests of dispatch ids use this key */
} oq_record_header_t;

/* One decoded record. Strings and the payload point into the decoded bytes. */
typedef struct {
    oq_record_type_t type;
    uint64_t id;               /* the job (DISPATCHED: job.id too); NEXT_ID: the next id */
    uint32_t attempt;          /* LEASED, RETRY, FAILED, REVIEW, RESOLVED */
    uint32_t generation;       /* GENERATION: requeues so far (part of the lease token) */
    int64_t at_ms;             /* wall clock. RETRY: not before (0: at once); FAILED: failed at;
                                  DEDUPE: expires at; DISPATCHED: not before (0: at once);
                                  REVIEW: reviewed at; RESOLVED: resolved at */
    oq_str_t error;            /* FAILED; REVIEW, RESOLVED: the handler's reason */
    oq_job_msg_t job;          /* DISPATCHED, with has_max_tries and has_timeout set and
                                  job.dispatch_id as sent (empty: none); RESOLVED: job.type
                                  and job.queue only */
    oq_review_action_t action; /* RESOLVED */
    int64_t reviewed_at_ms;    /* RESOLVED: when the job went to review */
    oq_str_t note;             /* RESOLVED: the person's note */
    int64_t dispatched_at_ms;  /* DISPATCHED (0: unknown, in snapshots) */
    uint8_t digest[OQ_SIPHASH_DIGEST_BYTES]; /* DEDUPE; id is the job it maps to */
    oq_str_t unique_key, overlap_key;        /* KEYS (empty: none) */
    int64_t unique_until_ms;                 /* KEYS: the unique window's end (0: none) */
    bool window_only;                        /* KEYS: the job no longer holds the key while live */
    oq_batch_view_t batch; /* BATCH (callbacks point into callbacks[]); BATCH_CANCELLED: id
                              and total; BATCH_FIRED: id */
    oq_job_msg_t callbacks[OQ_BATCH_CALLBACKS]; /* BATCH: those batch.callbacks names */
    oq_batch_callback_t which;                  /* BATCH_FIRED: the callback */
    uint64_t job_id;                            /* BATCH_FIRED: the job it was dispatched as */
    oq_chain_view_t chain; /* CHAIN (links point into links[]); CHAIN_FIRED: job_id */
    oq_job_msg_t links[OQ_MAX_CHAIN_LINKS + 1]; /* CHAIN: the rest, then chain_catch */
} oq_record_t;

/* What oq_record_frame found at the start of the bytes given. */
typedef enum {
    OQ_FRAME_OK,         /* a whole record with a good CRC */
    OQ_FRAME_SHORT,      /* the bytes end inside the record */
    OQ_FRAME_BAD_LENGTH, /* a length of 0 or over OQ_JOURNAL_MAX_RECORD_BYTES */
    OQ_FRAME_BAD_CRC,    /* a whole record whose CRC does not match */
} oq_frame_t;

/* ---- the file header ---- */

/* Encode h (version is written as given) into out. */
void oq_record_header_encode(const oq_record_header_t *h, uint8_t out[OQ_RECORD_HEADER_BYTES]);

/* Decode and check a header: magic, CRC, flags, version (1 to
   OQ_JOURNAL_FORMAT_VERSION). 0, or -1 with why. */
int oq_record_header_decode(const uint8_t *data, size_t len, oq_record_header_t *h, char *why,
                            size_t why_len);

/* True if data (OQ_RECORD_HEADER_BYTES) starts with the magic and its CRC
   matches: a header that oq_record_header_decode refuses all the same is
   of a newer format or has unknown flags, not damaged. */
bool oq_record_header_intact(const uint8_t *data);

/* ---- the durable mark (the data directory's journal.durable) ---- */

#define OQ_RECORD_MARK_MAGIC "ONCEQDUR"
#define OQ_RECORD_MARK_BYTES 36

/* The journal whose header says created_ms was durable up to durable_bytes
   (a file offset) when the mark was written. */
typedef struct {
    int64_t created_ms;
    uint64_t durable_bytes;
} oq_record_mark_t;

void oq_record_mark_encode(const oq_record_mark_t *m, uint8_t out[OQ_RECORD_MARK_BYTES]);

/* 0, or -1 with why (not a mark, a bad CRC, a version this broker does not
   know). */
int oq_record_mark_decode(const uint8_t *data, size_t len, oq_record_mark_t *m, char *why,
                          size_t why_len);

/* ---- framing and decoding ---- */

/* Look at the record starting at data, of which avail bytes are present.
   *frame_bytes gets the record's whole length (frame included) when the
   length is readable, else OQ_RECORD_FRAME_BYTES. */
oq_frame_t oq_record_frame(const uint8_t *data, size_t avail, size_t *frame_bytes);

/* Decode the record whose frame starts at data (checked by oq_record_frame
   first). 0, or -1 with why: an unknown type, or a body of the wrong size
   or with a field out of range. */
int oq_record_decode(const uint8_t *data, size_t frame_bytes, oq_record_t *rec, char *why,
                     size_t why_len);

/* True if a whole record starts at data (of which avail bytes are present):
   a known type, a length that fits it, a good CRC and a body that decodes.
   *frame_bytes gets its length. What a scan for the next good record after
   damage tests at every offset: the cheap checks come first, and requiring
   all four makes a false match in damaged bytes improbable. */
bool oq_record_verify(const uint8_t *data, size_t avail, size_t *frame_bytes);

/* The fewest bytes a DISPATCHED record takes: a gap of n damaged bytes can
   have held at most n / this many job ids. */
size_t oq_record_min_dispatched_bytes(void);

/* The type's name, for messages. */
const char *oq_record_type_name(int type);

/* ---- encoding: each appends one framed record to buf; 0, or -1 if memory
   runs out (buf is then as it was) ---- */

int oq_record_dispatched(msgpack_sbuffer *buf, const oq_job_view_t *job, oq_str_t dispatch_id,
                         int64_t dispatched_at_ms);
int oq_record_leased(msgpack_sbuffer *buf, uint64_t id, uint32_t attempt);
int oq_record_retry(msgpack_sbuffer *buf, uint64_t id, uint32_t attempt, int64_t not_before_ms);
int oq_record_failed(msgpack_sbuffer *buf, uint64_t id, uint32_t attempt, int64_t failed_at_ms,
                     const char *error);
int oq_record_done(msgpack_sbuffer *buf, uint64_t id);
int oq_record_requeued(msgpack_sbuffer *buf, uint64_t id);
int oq_record_forgotten(msgpack_sbuffer *buf, uint64_t id);
int oq_record_cancelled(msgpack_sbuffer *buf, uint64_t id);
int oq_record_dedupe(msgpack_sbuffer *buf, const uint8_t digest[OQ_SIPHASH_DIGEST_BYTES],
                     uint64_t job_id, int64_t expires_ms);
int oq_record_next_id(msgpack_sbuffer *buf, uint64_t next_id);
int oq_record_review(msgpack_sbuffer *buf, uint64_t id, uint32_t attempt, int64_t reviewed_at_ms,
                     const char *reason);
int oq_record_resolved(msgpack_sbuffer *buf, const oq_resolution_t *resolution);
/* KEYS of job id: unique_key (NULL: none) with its window's end (0: none),
   held only by its window if window_only; overlap_key (NULL: none). */
int oq_record_keys(msgpack_sbuffer *buf, uint64_t id, const char *unique_key,
                   int64_t unique_until_ms, bool window_only, const char *overlap_key);
/* GENERATION of job id: how many times it was requeued (or retried after
   review), which its lease tokens are made from. */
int oq_record_generation(msgpack_sbuffer *buf, uint64_t id, uint32_t generation);

/* BATCH: the batch as b says (callbacks, counts, the callbacks fired). */
int oq_record_batch(msgpack_sbuffer *buf, const oq_batch_view_t *b);
/* BATCH_FIRED: callback which of batch id went out as job_id. */
int oq_record_batch_fired(msgpack_sbuffer *buf, uint64_t id, oq_batch_callback_t which,
                          uint64_t job_id);
/* BATCH_CANCELLED: batch id, holding total jobs from now on. */
int oq_record_batch_cancelled(msgpack_sbuffer *buf, uint64_t id, uint32_t total);

/* CHAIN: job c->job_id's place in its chain, what is due, the links after it. */
int oq_record_chain(msgpack_sbuffer *buf, const oq_chain_view_t *c);
/* CHAIN_FIRED: the chain of job_id moved on or stopped. */
int oq_record_chain_fired(msgpack_sbuffer *buf, uint64_t job_id);

/* The bytes oq_record_dispatched writes for job without a dispatch id: what
   a job costs in a snapshot, for the compaction trigger. */
size_t oq_record_dispatched_bytes(const oq_job_view_t *job);

/* The bytes of one DEDUPE record. */
size_t oq_record_dedupe_bytes(void);

#endif
