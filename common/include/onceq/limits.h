/*  onceq/limits.h: every default, limit and timer of onceq in one place.
    Units are in the names. The protocol document (docs/protocol.md) quotes
    these values; change both together. */
#ifndef ONCEQ_LIMITS_H
#define ONCEQ_LIMITS_H

/* Wire protocol */
#define OQ_PROTO_VERSION   1
#define OQ_MAX_FRAME_BYTES (1024 * 1024) /* one message body */
/* Messages up to this size are read and answered with too_large; beyond it
   libzmq drops the connection instead of buffering an unbounded frame. */
#define OQ_MAX_WIRE_MSG_BYTES  (4 * OQ_MAX_FRAME_BYTES)
#define OQ_MAX_PAYLOAD_BYTES   (256 * 1024) /* a job's encoded payload map */
#define OQ_MAX_NAME_LEN        64           /* job type, queue name, worker name */
#define OQ_MAX_ERROR_LEN       1024         /* error text in an ack or error reply */
#define OQ_MAX_DISPATCH_ID_LEN 64
#define OQ_MAX_BACKOFF_STEPS   16
#define OQ_MAX_DEPTH           32 /* nesting of maps and arrays in one message */
#define OQ_MAX_TRIES_LIMIT     1000
#define OQ_MAX_CREDIT          1000
#define OQ_MAX_PRIORITY        1000
#define OQ_MAX_DELAY_MS        (366LL * 24 * 3600 * 1000)
#define OQ_MAX_BACKOFF_MS      (30LL * 24 * 3600 * 1000)
#define OQ_MAX_TIMEOUT_MS      (24LL * 3600 * 1000)
#define OQ_MAX_FAILED_LIST     1000
/* Pruning the failed store by age (docs/protocol.md, "prune_failed"): one
   request deletes at most OQ_MAX_PRUNE_PER_CALL jobs (and as many when it
   names no limit) and says whether more are due, so that a huge store is
   pruned in steps with the broker's other work between them; the age is
   OQ_MIN_PRUNE_AGE_MS to OQ_MAX_PRUNE_AGE_MS (ten years). */
#define OQ_MAX_PRUNE_PER_CALL  1000
#define OQ_MIN_PRUNE_AGE_MS    1000LL
#define OQ_MAX_PRUNE_AGE_MS    (3650LL * 24 * 3600 * 1000)
#define OQ_MAX_WORKER_TYPES    256  /* job types one worker announces in ready */
#define OQ_MAX_WORKER_QUEUES   32   /* queues one worker serves, in priority order */
#define OQ_MAX_REVIEW_NOTE_LEN 1024 /* a person's note on a resolution */
/* Several deliveries or acks in one message (docs/protocol.md, "Several
   jobs or acks per message"): at most this many entries in a "jobs" or an
   "acks" message, and a "jobs" message stays within OQ_MAX_FRAME_BYTES,
   counting each job as its payload plus OQ_MAX_JOB_ENVELOPE_BYTES (what
   its other fields take at most, with room to spare), so that one job of
   the largest payload always fits alone. */
#define OQ_MAX_JOBS_PER_MSG       64
#define OQ_MAX_ACKS_PER_MSG       64
#define OQ_MAX_JOB_ENVELOPE_BYTES 1024
#define OQ_MAX_JOBS_MSG_BYTES     (OQ_MAX_FRAME_BYTES - OQ_MAX_JOB_ENVELOPE_BYTES)
/* Unique dispatch and overlap keys (docs/protocol.md, "unique_key"): a key
   is 1 to OQ_MAX_JOB_KEY_LEN printable ASCII characters without spaces; a
   unique window is 1 s to OQ_MAX_UNIQUE_FOR_MS. */
#define OQ_MAX_JOB_KEY_LEN   128
#define OQ_MAX_UNIQUE_FOR_MS (30LL * 24 * 3600 * 1000)
#define OQ_MIN_UNIQUE_FOR_MS 1000LL
#define OQ_MAX_UNIQUE_KEYS   (1024 * 1024) /* unique keys the broker remembers at once */

/* Waiting for a job to end (docs/protocol.md, "wait"): how long a wait
   lasts without a timeout of its own and at most, how many the broker
   holds at once in all and from one connection (beyond: "full"), and how
   many jobs that left without completing (cancelled, deleted from the
   failed store) it remembers to tell them from done ones. The limit per
   connection stays well below libzmq's default send high-water mark (1,000
   messages a peer): the answers of every wait one connection holds may
   come due in one loop turn, and a send beyond the mark would be dropped. */
#define OQ_DEFAULT_WAIT_MS      30000
#define OQ_MAX_WAIT_MS          (3600LL * 1000)
#define OQ_MAX_WAITERS          65536
#define OQ_MAX_WAITERS_PER_PEER 256
#define OQ_WAIT_ENDS_REMEMBERED 4096

/* Job defaults */
#define OQ_DEFAULT_QUEUE          "default"
#define OQ_DEFAULT_MAX_TRIES      3
#define OQ_DEFAULT_BACKOFF_MS     10000
#define OQ_DEFAULT_TIMEOUT_MS     60000
#define OQ_DEFAULT_RETRY_AFTER_MS 90000
#define OQ_DEFAULT_MARGIN_MS      5000 /* timeout must be shorter than retry_after by this */
#define OQ_DEFAULT_FAILED_LIST    100

/* The review store: resolutions remembered (with their notes and the
   handlers' reasons) after their jobs left it, newest kept; beyond it the
   oldest is forgotten (docs/protocol.md, "review"). */
#define OQ_MAX_REVIEW_RESOLVED 4096

/* Broker */
#define OQ_DEFAULT_FRONT_ENDPOINT "tcp://127.0.0.1:7750"
#define OQ_DEFAULT_BACK_ENDPOINT  "tcp://127.0.0.1:7751"
#define OQ_DEFAULT_MAX_JOBS       1000000 /* live jobs held in memory */
#define OQ_MAX_QUEUES             1024
#define OQ_MAX_TYPES              4096  /* distinct job types counted in stats */
#define OQ_RECENT_DONE_JOBS       65536 /* done jobs remembered to attribute late acks */
#define OQ_MAX_WORKERS            10000
#define OQ_BROKER_BATCH_MSGS      256 /* messages read from one socket per loop turn */
/* The /metrics endpoint (--metrics): the loop renders the text at most
   every RENDER_MS, and waits at least RENDER_SPACING times as long as the
   last rendering took (a broker with many queues spends at most 2% of its
   time on it); the HTTP thread takes MAX_CONNS connections at most, drops
   a silent one after TIMEOUT_S, and queues BACKLOG pending accepts. */
#define OQ_METRICS_RENDER_MS      250
#define OQ_METRICS_RENDER_SPACING 50
#define OQ_METRICS_MAX_CONNS      16
#define OQ_METRICS_TIMEOUT_S      10
#define OQ_METRICS_BACKLOG        16
/* Lease tokens (fenced acks): the 128-bit secret kept in the data dir. */
#define OQ_LEASE_KEY_FILE  "lease.key"
#define OQ_LEASE_KEY_BYTES 16
/* Job types a worker that announced none has handed back ("return"), and so
   is not sent again. */
#define OQ_MAX_REFUSED_TYPES 16

/* Memory held by jobs */
/* Bytes of live jobs held at most (--max-bytes). A job costs its encoded
   payload, its own backoff steps and this fixed overhead: the job header,
   its id-map slot and the allocator's rounding (measured: 200,000 jobs with
   12-byte payloads took 34 MB of RSS, about 160 bytes each beyond the
   payload; rounded up so the limit does not underestimate). */
#define OQ_JOB_OVERHEAD_BYTES 256
/* What else --max-bytes counts, each an upper bound of what it takes:
   - a unique or an overlap key: its entry (the key inline, up to
     OQ_MAX_JOB_KEY_LEN), its hash item and bucket, its id-map and heap
     slots, with the allocator's rounding (a job with both keys costs two);
   - a connected worker: its entry (identity, name, type bitmap, and
     routes of up to 64 types and queues);
   - a held wait, and a producer's or an admin's connection (what the broker
     holds for it beside libzmq's own buffers).
   The dispatch-id table counts as allocated (broker/dedupe.h). */
#define OQ_JOB_KEY_COST_BYTES 384
#define OQ_WORKER_COST_BYTES  4096
#define OQ_WAIT_COST_BYTES    512
#define OQ_PEER_COST_BYTES    512
/* A window shrunk by memory (dispatch ids or unique windows forgotten
   before their end) is logged at most once per this interval. */
#define OQ_MEMORY_LOG_INTERVAL_MS (60 * 1000)
/* Default --max-bytes: this fraction of physical memory (or of the cgroup's
   memory.max, if lower), within the bounds below. A quarter leaves the rest
   for what the limit does not count: libzmq's buffers of messages in
   flight, the journal's backlog (OQ_JOURNAL_MAX_BACKLOG_BYTES), the pages a
   compaction's forked child copies on write, and the other processes. */
#define OQ_DEFAULT_MAX_BYTES_DIVISOR 4
#define OQ_MIN_DEFAULT_MAX_BYTES     (64LL * 1024 * 1024) /* a small container still takes jobs */
/* Above this, replaying or compacting the journal of a full broker would take
   minutes; set --max-bytes explicitly to go higher. */
#define OQ_MAX_DEFAULT_MAX_BYTES (64LL * 1024 * 1024 * 1024)
#define OQ_MIN_MAX_BYTES         (1024 * 1024) /* --max-bytes at least */
#define OQ_MAX_MAX_BYTES         (1LL << 50)   /* --max-bytes at most */

/* Descriptors (broker/conns.h). Connections are capped this many below the
   open-file limit: room for the journal, a compaction, libzmq's own
   descriptors and a burst of accepts in flight, so that accept() never
   fails with EMFILE (libzmq would spin on it). */
#define OQ_FD_RESERVE 64

/* Authentication (CURVE and ZAP; docs/operations.md). */
#define OQ_MAX_KEYS 65536 /* public keys allowed, over every role */
/* Connections of each role at most (--max-producers, --max-workers,
   --max-admins), counted from each connection's first message. */
#define OQ_DEFAULT_MAX_PRODUCERS    10000
#define OQ_DEFAULT_MAX_WORKER_CONNS OQ_MAX_WORKERS
#define OQ_DEFAULT_MAX_ADMINS       64
#define OQ_MAX_ROLE_CONNS           1000000 /* the largest value of those flags */
/* A refused handshake is logged once per key per interval; at most this
   many keys are remembered, the rest only counted. */
#define OQ_AUTH_LOG_INTERVAL_MS (60 * 1000)
#define OQ_AUTH_LOG_KEYS        64

/* Journal (docs/journal.md). Sizes in bytes, times in ms. Format version
   2 added the review, resolved, forgotten and cancelled records, 3 the
   keys record, 4 the generation record. */
#define OQ_JOURNAL_FORMAT_VERSION    4
#define OQ_DEFAULT_DATA_DIR          "./onceq-data"
#define OQ_DEFAULT_FSYNC_INTERVAL_MS 50
#define OQ_MAX_FSYNC_INTERVAL_MS     10000
#define OQ_DEFAULT_COMPACT_MIN_BYTES (64LL * 1024 * 1024) /* no compaction below this size */
#define OQ_DEFAULT_COMPACT_RATIO     4 /* compact when the file is this many times the live state */
#define OQ_MAX_COMPACT_RATIO         1000
/* One record at most: a job with the largest payload, every name, backoff
   step and dispatch id at their limits, and room to spare. */
#define OQ_JOURNAL_MAX_RECORD_BYTES (OQ_MAX_PAYLOAD_BYTES + 4096)
#define OQ_JOURNAL_RETRY_MS         100 /* a failed write or fsync is tried again this often */
#define OQ_JOURNAL_RESERVE_RETRY_MS                                                                \
    1000 /* a released disk reserve is allocated again this often                                  \
          */
#define OQ_DEFAULT_DISK_RESERVE_BYTES (64LL * 1024 * 1024) /* room for recovery on a full disk */
#define OQ_MAX_DISK_RESERVE_BYTES     (1LL << 44)
/* Records waiting for the disk (unwritten, or written and not yet fsynced)
   at most; beyond it the broker stops handing out jobs until they are written. */
#define OQ_JOURNAL_MAX_BACKLOG_BYTES (256LL * 1024 * 1024)
#define OQ_JOURNAL_IO_CHUNK_BYTES    (4 * 1024 * 1024) /* replay reads and snapshot writes */
#define OQ_COMPACT_RETRY_MS          10000             /* wait after a failed compaction */
/* The same on a full disk (the reserve released), where the snapshot
   shrinks as workers drain and recovery waits for it. */
#define OQ_COMPACT_RECLAIM_RETRY_MS 1000
/* Dispatch replies waiting for their records to be durable, at most; a
   dispatch beyond it is refused with "unavailable". */
#define OQ_MAX_OUTBOX_REPLIES 65536

/* Dispatch ids: a repeated dispatch_id within the window gets the first job's id. */
#define OQ_DEFAULT_DEDUPE_WINDOW_MS (3600LL * 1000)
#define OQ_MAX_DEDUPE_WINDOW_MS     (7LL * 24 * 3600 * 1000)
/* Dispatch ids remembered at most: the bound of the table's 32-bit index
   slots (a ring position and an 8-bit tag; broker/dedupe.c). Below it the
   table is sized by bytes, within --max-bytes; past either bound the oldest
   id is forgotten early (counted in stats as dedupe_evicted, and the window
   still held is reported as dedupe_window_held_ms). */
#define OQ_MAX_DEDUPE_ENTRIES (1 << 23)

/* Heartbeats (Paranoid Pirate) */
#define OQ_DEFAULT_HEARTBEAT_MS 1000
#define OQ_DEFAULT_LIVENESS     3 /* heartbeats missed before a peer is dead */
#define OQ_MAX_LIVENESS         100
#define OQ_MIN_HEARTBEAT_MS     10
#define OQ_MAX_HEARTBEAT_MS     60000

/* Worker */
#define OQ_RECONNECT_MIN_MS         250
#define OQ_RECONNECT_MAX_MS         8000
#define OQ_EXIT_TIMEOUT             3   /* worker exit status after a handler overran */
#define OQ_EXIT_BROKEN              4   /* worker exit status after a fatal setup error */
#define OQ_SUPERVISOR_RESTART_MS    200 /* first delay before restarting a dead worker */
#define OQ_SUPERVISOR_MAX_PROCESSES 256

/* Client */
#define OQ_DEFAULT_CLIENT_TIMEOUT_MS 5000
/* Lazy Pirate: a dispatch with no answer in time is sent again, with the
   same dispatch_id, this many more times. */
#define OQ_DEFAULT_CLIENT_RETRIES   2
#define OQ_MAX_CLIENT_RETRIES       100
#define OQ_DISPATCH_ID_RANDOM_BYTES 16 /* a generated dispatch_id: 128 random bits in hex */

#endif
