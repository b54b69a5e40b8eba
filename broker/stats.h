/*  stats.h: the broker's answers to "stats", "failed", "horizon", "review"
    and "review_show", encoded from the engine's counters, failed store and
    review store (docs/protocol.md, section 5). */
#ifndef ONCEQ_STATS_H
#define ONCEQ_STATS_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine.h"

/* The journal's and the dedupe table's numbers for the "journal" map. */
typedef struct {
    bool enabled;                           /* false with --no-journal */
    const char *fsync;                      /* the policy's name */
    uint64_t bytes, live_bytes;             /* the file, and what a snapshot would take */
    uint64_t fsyncs, failures, compactions; /* since start */
    uint64_t backlog_bytes;                 /* appended, not durable yet */
    const char *error;                      /* "" while writes succeed */
    uint64_t dispatch_ids, dedupe_hits, dedupe_evicted;
    uint64_t dedupe_window_held_ms; /* oq_engine_dedupe_window_held_ms */
} oq_stats_journal_t;

/* The numbers of the "auth" map: keys, handshakes, refusals, and the
   connections of each role (indexed by oq_role_t; [0] unused). */
typedef struct {
    bool curve;            /* false: plaintext (--insecure) */
    uint64_t handshakes;   /* accepted */
    uint64_t unknown_keys; /* handshakes refused: key not allowed */
    uint64_t refused_full; /* handshakes or connections refused: role at its limit */
    uint64_t forbidden;    /* commands refused for the sender's key or role */
    size_t keys[4], connected[4], max[4];
} oq_stats_auth_t;

/* The numbers of the "messages" map: the back socket's messages that carry
   deliveries (sent) and acks (received), and how many each carried, so the
   batching ratio shows (docs/protocol.md §6, "Several jobs or acks per
   message"). Counted since start. */
typedef struct {
    uint64_t job_sent;      /* "job" messages sent: one delivery each */
    uint64_t jobs_sent;     /* "jobs" messages sent */
    uint64_t jobs_entries;  /* the deliveries those carried */
    uint64_t ack_received;  /* "ack" messages received: one ack each */
    uint64_t acks_received; /* "acks" messages received (not those refused whole) */
    uint64_t acks_entries;  /* the entries those carried, refused ones included */
} oq_stats_messages_t;

/* The numbers of the "waits" map: the waits (docs/protocol.md, "wait")
   held now, and the limits on them. */
typedef struct {
    uint64_t held;         /* waits held now, until their job ends or they time out */
    uint64_t max;          /* held at most, in all */
    uint64_t max_per_peer; /* held at most from one connection */
    uint64_t max_per_key;  /* held at most from all the connections of one key */
    uint64_t closed;       /* forgotten because their connection closed, since start */
} oq_stats_waits_t;

/* The numbers of the "replies" map: replies to producers that met a full
   pipe and were kept for it (outbox.h), now and since start. */
typedef struct {
    uint64_t kept;        /* replies kept for full pipes now */
    uint64_t kept_bytes;  /* their bytes */
    uint64_t kept_peers;  /* the connections they are for */
    uint64_t full_pipes;  /* replies that met a full pipe, since start */
    uint64_t peers_cut;   /* connections cut off at the bound, since start */
    uint64_t cut_replies; /* replies dropped with them */
} oq_stats_replies_t;

/* Append a "stats" reply for request req to buf, listing at most
   workers_limit workers (0: none), those registered after the cursor
   workers_after (0: from the first), with "workers_next" while more
   remain. */
void oq_stats_encode(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine, int64_t uptime_ms,
                     const oq_stats_journal_t *journal, const oq_stats_auth_t *auth,
                     const oq_stats_messages_t *messages, const oq_stats_waits_t *waits,
                     const oq_stats_replies_t *replies, uint64_t workers_after,
                     uint32_t workers_limit);

/* Append a "failed" reply listing at most limit failed jobs of queue (NULL:
   all queues) after the cursor (NULL: from the first), oldest failure first,
   with "next" and "next_at" (the cursor for the next page) while more
   remain. */
void oq_stats_encode_failed(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine,
                            const char *queue, const oq_failed_cursor_t *after, uint32_t limit);

/* Append a "horizon" reply: what bounds the time a duplicate of a held job
   can still arrive (the dispatch-id window, each queue's lease length and
   largest budget and backoff), for `onceq db prune`'s floor. */
void oq_stats_encode_horizon(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine,
                             int64_t dedupe_window_ms);

/* Append a "review" reply: a page of the jobs in review, as the failed one
   (with "reason" and "review_at" in place of "error" and "failed_at"). */
void oq_stats_encode_review(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine,
                            const char *queue, const oq_failed_cursor_t *after, uint32_t limit);

/* Append a "review_show" reply for job id: the job as it is in the review
   store, and its newest remembered resolution. -1 (nothing appended) if
   the job is neither in review nor resolved on record. */
int oq_stats_encode_review_show(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine,
                                uint64_t id);

#endif
