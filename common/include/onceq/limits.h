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
#define OQ_MAX_CLEAR_PER_CALL  1000 /* jobs one "clear" cancels, as prune's (protocol.md) */
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
   holds at once in all, from one connection and from all the connections
   of one CURVE key (beyond: "full"), and how many jobs that left without
   completing (cancelled, deleted from the failed store) it remembers to
   tell them from done ones. A key may hold a quarter of all: one key
   (a producer's, opening connection after connection) cannot lock out
   the others, an admin's among them. A connection's waits go when it
   closes. */
#define OQ_DEFAULT_WAIT_MS      30000
#define OQ_MAX_WAIT_MS          (3600LL * 1000)
#define OQ_MAX_WAITERS          65536
#define OQ_MAX_WAITERS_PER_PEER 256
#define OQ_MAX_WAITERS_PER_KEY  (OQ_MAX_WAITERS / 4)
#define OQ_WAIT_ENDS_REMEMBERED 4096

/* Job defaults */
#define OQ_DEFAULT_QUEUE          "default"
#define OQ_DEFAULT_MAX_TRIES      3
#define OQ_DEFAULT_BACKOFF_MS     10000
#define OQ_DEFAULT_TIMEOUT_MS     60000
#define OQ_DEFAULT_RETRY_AFTER_MS 90000
#define OQ_DEFAULT_MARGIN_MS      5000 /* timeout must be shorter than retry_after by this */
#define OQ_DEFAULT_FAILED_LIST    100

/* A "stats" reply lists the connected workers a page at a time
   (docs/protocol.md, "stats"): at most the request's "limit" (default
   DEFAULT_STATS_WORKERS, at most MAX_STATS_WORKERS), and no more once the
   page's entries take STATS_WORKERS_BYTES (one entry is at most some
   21 KB: 256 type and 32 queue names of 64 bytes, a 1,024-byte error), so
   a reply stays far below OQ_MAX_FRAME_BYTES whatever the workers
   registered. Once a loop turn's stats replies took STATS_TURN_BYTES
   (about one of the largest, a few of a plain fleet), the broker reads no
   more of the front socket in that turn: acks are read and jobs pumped
   first, however many admins ask. */
#define OQ_STATS_WORKER_NAMES    100 /* names summarised in one reply: the first that came */
#define OQ_DEFAULT_STATS_WORKERS 100
#define OQ_MAX_STATS_WORKERS     1000
#define OQ_STATS_WORKERS_BYTES   (64 * 1024)
#define OQ_STATS_TURN_BYTES      (128 * 1024)

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
/* Batches (docs/workflows.md): jobs in one dispatch_batch, batches held
   until they have settled, settled batches remembered for "batch show",
   and what a batch costs against --max-bytes beside its jobs and its
   callbacks' payloads. */
#define OQ_MAX_BATCH_JOBS       10000
#define OQ_MAX_BATCHES          1024
#define OQ_RECENT_BATCHES       256
#define OQ_BATCH_OVERHEAD_BYTES 512
#define OQ_MAX_BATCH_LIST       256 /* batches in one "batch list" reply */
/* The callbacks' payloads of one batch together, so that its journal
   record stays within OQ_JOURNAL_MAX_RECORD_BYTES. */
#define OQ_MAX_BATCH_CALLBACK_PAYLOAD_BYTES OQ_MAX_PAYLOAD_BYTES
/* Chains (docs/workflows.md): links after the first job, and their
   payloads with chain_catch's together: one journal record holds them
   with up to 17 links' fields (about 420 bytes each at their longest),
   within OQ_JOURNAL_MAX_RECORD_BYTES; what a chain costs against
   --max-bytes beside its links' sizes. */
#define OQ_MAX_CHAIN_LINKS         16
#define OQ_MAX_CHAIN_PAYLOAD_BYTES (OQ_MAX_PAYLOAD_BYTES - 4096)
#define OQ_CHAIN_OVERHEAD_BYTES    256
#define OQ_BROKER_BATCH_MSGS       256 /* messages read from one socket per loop turn */
/* The /metrics endpoint (--metrics): the loop renders the text at most
   every RENDER_MS, and waits at least RENDER_SPACING times as long as the
   last rendering took (a broker with many queues spends at most 2% of its
   time on it); the HTTP thread takes MAX_CONNS connections at most (they
   are the broker's descriptors too: within OQ_FD_RESERVE), MAX_CONNS_PER_IP
   of them from one address (so slow clients from one place cannot hold
   every slot), drops a silent one after TIMEOUT_S, and queues BACKLOG
   pending accepts. */
#define OQ_METRICS_RENDER_MS        250
#define OQ_METRICS_RENDER_SPACING   50
#define OQ_METRICS_MAX_CONNS        16
#define OQ_METRICS_MAX_CONNS_PER_IP 4
#define OQ_METRICS_TIMEOUT_S        5
#define OQ_METRICS_BACKLOG          16
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
/* Handshakes (broker/conns.h). libzmq drops a connection whose ZMTP
   handshake (the greeting; with CURVE, HELLO to INITIATE and the ZAP
   answer) has not finished HANDSHAKE_MS after it began
   (--handshake-timeout-ms; libzmq's own default is 30 s, long enough for
   idle connections to hold every descriptor). A connection counts as in
   its handshake until its first message, or until HANDSHAKE_MS plus
   HANDSHAKE_SLACK_MS (libzmq's timer starts a little after the accept) have
   passed. Of those, one source address (an IPv4 address, an IPv6 /64) may
   hold PER_ADDR (--max-handshakes-per-ip), and all together at most one
   connection cap in SHARE_DIVISOR and never more than OQ_MAX_HANDSHAKES:
   at that bound the oldest is dropped for the new one, so the rest of the
   cap stays with peers past their handshake. None is dropped for room in
   its first GRACE_MS (its first message may wait unread: far longer than
   a loop turn takes): if all are that young, the new one is refused. */
#define OQ_DEFAULT_HANDSHAKE_MS        5000
#define OQ_MIN_HANDSHAKE_MS            100
#define OQ_MAX_HANDSHAKE_MS            60000
#define OQ_HANDSHAKE_SLACK_MS          1000
#define OQ_HANDSHAKE_GRACE_MS          100
#define OQ_DEFAULT_HANDSHAKES_PER_ADDR 32
#define OQ_MAX_HANDSHAKES              4096
#define OQ_HANDSHAKE_SHARE_DIVISOR     2
#define OQ_IPV6_SOURCE_PREFIX_BYTES    8 /* a /64: what one IPv6 host commonly holds */

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
#define OQ_JOURNAL_FORMAT_VERSION    5
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
/* Replies kept for a peer whose pipe is full (the front socket holds
   libzmq's default 1,000 messages a peer), at most, with their identities
   and headers: about 60 bytes a "dispatched", so some 70,000 answers for
   one peer and 1,000,000 in all. Past either the peer holding most is cut
   off (its connection shut down, logged and counted). While replies are
   kept the loop tries them again after OQ_KEPT_RETRY_MIN_MS, doubling to
   OQ_KEPT_RETRY_MAX_MS while none goes: libzmq signals no room in a pipe. */
#define OQ_MAX_KEPT_BYTES_PER_PEER (4 * 1024 * 1024)
#define OQ_MAX_KEPT_BYTES          (64 * 1024 * 1024)
#define OQ_KEPT_RETRY_MIN_MS       1
#define OQ_KEPT_RETRY_MAX_MS       10

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
