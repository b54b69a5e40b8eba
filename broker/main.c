/*  main.c: onceq-broker's command line: one flag table (onceq/flags.h).
    Every flag falls back to its ONCEQ_* environment variable, then to the
    defaults in onceq/limits.h; --help is generated from the table. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "broker.h"
#include "onceq/config.h"
#include "onceq/flags.h"
#include "onceq/iocpus.h"
#include "onceq/limits.h"
#include "onceq/log.h"

#define S_PROGRAM               "onceq-broker"
#define S_EXIT_USAGE            2
#define S_MAX_QUEUE_FLAGS       64
#define S_MAX_JOBS_LIMIT        1000000000
#define S_MAX_COMPACT_MIN_BYTES (1LL << 50)
#define S_MS_PER_S              1000
#define S_DEFAULT_LEN           64
#define S_QUEUE_TEXT_LEN        128

/* The --queue flags (and ONCEQ_QUEUES) as parsed. */
typedef struct {
    oq_broker_queue_t queues[S_MAX_QUEUE_FLAGS];
    char names[S_MAX_QUEUE_FLAGS][OQ_MAX_NAME_LEN + 2];
    size_t count;
} s_queues_t;

/* One NAME:RETRY_AFTER[:TIMEOUT] into queues. */
static int s_parse_one_queue(s_queues_t *q, const char *text, size_t len, char *why, size_t why_len)
{
    char item[S_QUEUE_TEXT_LEN];
    if (len >= sizeof item)
        return -1;
    memcpy(item, text, len);
    item[len] = 0;
    if (q->count == S_MAX_QUEUE_FLAGS) {
        snprintf(why, why_len, "at most %d queues", S_MAX_QUEUE_FLAGS);
        return -1;
    }
    char *name = q->names[q->count];
    char ra[32] = "", to[32] = "";
    int64_t ra_ms, to_ms = 0;
    if (sscanf(item, "%65[^:]:%31[^:]:%31s", name, ra, to) < 2 ||
        oq_config_seconds(ra, OQ_MAX_TIMEOUT_MS * 2, &ra_ms) < 0 || ra_ms == 0 ||
        (to[0] && (oq_config_seconds(to, OQ_MAX_TIMEOUT_MS, &to_ms) < 0 || to_ms == 0)))
        return -1;
    q->queues[q->count++] = (oq_broker_queue_t){name, ra_ms, to_ms};
    return 0;
}

/* --queue NAME:RETRY_AFTER[:TIMEOUT], repeatable; a comma-separated list
   of them too (the form ONCEQ_QUEUES takes). */
static int s_parse_queue(const char *value, void *dest, char *why, size_t why_len)
{
    const char *at = value;
    for (;;) {
        const char *comma = strchr(at, ',');
        size_t len = comma ? (size_t)(comma - at) : strlen(at);
        if (s_parse_one_queue(dest, at, len, why, why_len) < 0)
            return -1;
        if (!comma)
            return 0;
        at = comma + 1;
    }
}

static void s_usage(const oq_flag_t *flags, size_t count)
{
    printf("usage: " S_PROGRAM " [options]\n"
           "\n"
           "The onceq broker: takes jobs from producers, leases each to one worker, and\n"
           "hands it out again when its lease runs out or its worker dies.\n"
           "\n");
    oq_flags_help(flags, count, stdout);
    printf("\n"
           "Seconds may have decimals (0.5). SIGINT or SIGTERM stops the broker; SIGHUP\n"
           "reads the --keys directory again (docs/operations.md).\n");
}

/* Every peer costs the broker a descriptor. The soft limit is often 1024
   while the hard one is far higher; take all of it. */
static void s_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        oq_warn("cannot read the open-file limit: %s", strerror(errno));
        return;
    }
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur != rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
            oq_warn("cannot raise the open-file limit from %llu to %llu: %s",
                    (unsigned long long)was, (unsigned long long)rl.rlim_max, strerror(errno));
            return;
        }
    }
    oq_info("open-file limit %llu (was %llu)", (unsigned long long)rl.rlim_cur,
            (unsigned long long)was);
}

int main(int argc, char **argv)
{
    oq_log_init(S_PROGRAM);
    oq_broker_config_t config = oq_broker_config_default();
    static s_queues_t queues;
    static const char *const fsyncs[] = {"always", "batch", "off", NULL};
    oq_log_level_t level = OQ_LOG_INFO;
    uint32_t heartbeat_ms = 0, liveness = 0, fsync_interval_ms = 0, handshake_ms = 0;
    uint64_t max_jobs = 0, max_conns = 0, max_producers = 0, max_workers = 0, max_admins = 0,
             max_handshakes = 0;
    int fsync = 0;
    bool help = false, version = false;
    char def_retry_after[S_DEFAULT_LEN], def_timeout[S_DEFAULT_LEN], def_margin[S_DEFAULT_LEN],
        def_max_tries[S_DEFAULT_LEN], def_backoff[S_DEFAULT_LEN], def_heartbeat[S_DEFAULT_LEN],
        def_liveness[S_DEFAULT_LEN], def_max_jobs[S_DEFAULT_LEN], def_max_bytes[S_DEFAULT_LEN * 2],
        def_fsync_interval[S_DEFAULT_LEN], def_compact_min[S_DEFAULT_LEN],
        def_compact_ratio[S_DEFAULT_LEN], def_reserve[S_DEFAULT_LEN], def_dedupe[S_DEFAULT_LEN],
        def_producers[S_DEFAULT_LEN], def_workers[S_DEFAULT_LEN], def_admins[S_DEFAULT_LEN],
        def_handshake[S_DEFAULT_LEN], def_handshakes[S_DEFAULT_LEN],
        help_max_bytes[S_DEFAULT_LEN * 2];
    snprintf(def_retry_after, sizeof def_retry_after, "%d", OQ_DEFAULT_RETRY_AFTER_MS / 1000);
    snprintf(def_timeout, sizeof def_timeout, "%d", OQ_DEFAULT_TIMEOUT_MS / 1000);
    snprintf(def_margin, sizeof def_margin, "%d", OQ_DEFAULT_MARGIN_MS / 1000);
    snprintf(def_max_tries, sizeof def_max_tries, "%d", OQ_DEFAULT_MAX_TRIES);
    snprintf(def_backoff, sizeof def_backoff, "%d", OQ_DEFAULT_BACKOFF_MS / 1000);
    snprintf(def_heartbeat, sizeof def_heartbeat, "%d", OQ_DEFAULT_HEARTBEAT_MS);
    snprintf(def_liveness, sizeof def_liveness, "%d", OQ_DEFAULT_LIVENESS);
    snprintf(def_max_jobs, sizeof def_max_jobs, "%d", OQ_DEFAULT_MAX_JOBS);
    snprintf(def_max_bytes, sizeof def_max_bytes, "a quarter of the memory, here %llu",
             (unsigned long long)oq_engine_default_max_bytes());
    snprintf(help_max_bytes, sizeof help_max_bytes,
             "bytes held at most: each job's payload plus %d bytes, %d per key, "
             "the dispatch ids, workers, waits and connections",
             OQ_JOB_OVERHEAD_BYTES, OQ_JOB_KEY_COST_BYTES);
    snprintf(def_fsync_interval, sizeof def_fsync_interval, "%d", OQ_DEFAULT_FSYNC_INTERVAL_MS);
    snprintf(def_compact_min, sizeof def_compact_min, "%lld",
             (long long)OQ_DEFAULT_COMPACT_MIN_BYTES);
    snprintf(def_compact_ratio, sizeof def_compact_ratio, "%d", OQ_DEFAULT_COMPACT_RATIO);
    snprintf(def_reserve, sizeof def_reserve, "%lld", (long long)OQ_DEFAULT_DISK_RESERVE_BYTES);
    snprintf(def_dedupe, sizeof def_dedupe, "%lld",
             (long long)(OQ_DEFAULT_DEDUPE_WINDOW_MS / S_MS_PER_S));
    snprintf(def_producers, sizeof def_producers, "%d", OQ_DEFAULT_MAX_PRODUCERS);
    snprintf(def_workers, sizeof def_workers, "%d", OQ_DEFAULT_MAX_WORKER_CONNS);
    snprintf(def_admins, sizeof def_admins, "%d", OQ_DEFAULT_MAX_ADMINS);
    snprintf(def_handshake, sizeof def_handshake, "%d", OQ_DEFAULT_HANDSHAKE_MS);
    snprintf(def_handshakes, sizeof def_handshakes, "%d", OQ_DEFAULT_HANDSHAKES_PER_ADDR);

    const oq_flag_t flags[] = {
        {.kind = OQ_FLAG_SECTION, .help = "options (environment variable in brackets):"},
        {.name = "front",
         .env = "ONCEQ_FRONT",
         .kind = OQ_FLAG_ENDPOINT,
         .arg = "ENDPOINT",
         .def = OQ_DEFAULT_FRONT_ENDPOINT,
         .dest = &config.front_endpoint,
         .help = "producers and admin"},
        {.name = "back",
         .env = "ONCEQ_BACK",
         .kind = OQ_FLAG_ENDPOINT,
         .arg = "ENDPOINT",
         .def = OQ_DEFAULT_BACK_ENDPOINT,
         .dest = &config.back_endpoint,
         .help = "workers"},
        {.name = "retry-after",
         .env = "ONCEQ_RETRY_AFTER",
         .kind = OQ_FLAG_SECONDS,
         .arg = "S",
         .min = 1,
         .max = (uint64_t)OQ_MAX_TIMEOUT_MS * 2,
         .def = def_retry_after,
         .dest = &config.engine.retry_after_ms,
         .help = "lease length of every queue"},
        {.name = "timeout",
         .env = "ONCEQ_TIMEOUT",
         .kind = OQ_FLAG_SECONDS,
         .arg = "S",
         .min = 1,
         .max = (uint64_t)OQ_MAX_TIMEOUT_MS,
         .def = def_timeout,
         .dest = &config.engine.timeout_ms,
         .help = "default job timeout"},
        {.name = "timeout-margin",
         .env = "ONCEQ_TIMEOUT_MARGIN",
         .kind = OQ_FLAG_SECONDS,
         .arg = "S",
         .max = (uint64_t)OQ_MAX_TIMEOUT_MS,
         .def = def_margin,
         .dest = &config.engine.margin_ms,
         .help = "a timeout must be shorter than retry_after by this"},
        {.name = "queue",
         .env = "ONCEQ_QUEUES",
         .kind = OQ_FLAG_CUSTOM,
         .arg = "NAME:RETRY_AFTER[:TIMEOUT]",
         .parse = s_parse_queue,
         .repeat = true,
         .expected = "NAME:RETRY_AFTER[:TIMEOUT] in seconds (a comma-separated list of them "
                     "in the variable)",
         .dest = &queues,
         .def_text = "none",
         .help = "lease length and default timeout of one queue, in seconds; repeatable"},
        {.name = "max-tries",
         .env = "ONCEQ_MAX_TRIES",
         .kind = OQ_FLAG_U32,
         .arg = "N",
         .min = 1,
         .max = OQ_MAX_TRIES_LIMIT,
         .def = def_max_tries,
         .dest = &config.engine.max_tries,
         .help = "default retry budget"},
        {.name = "backoff",
         .env = "ONCEQ_BACKOFF",
         .kind = OQ_FLAG_SECONDS,
         .arg = "S",
         .max = (uint64_t)OQ_MAX_BACKOFF_MS,
         .def = def_backoff,
         .dest = &config.engine.backoff_ms,
         .help = "default wait before a retry"},
        {.name = "heartbeat-ms",
         .env = "ONCEQ_HEARTBEAT_MS",
         .kind = OQ_FLAG_MS,
         .arg = "N",
         .min = OQ_MIN_HEARTBEAT_MS,
         .max = OQ_MAX_HEARTBEAT_MS,
         .def = def_heartbeat,
         .dest = &heartbeat_ms,
         .help = "heartbeat interval"},
        {.name = "liveness",
         .env = "ONCEQ_LIVENESS",
         .kind = OQ_FLAG_U32,
         .arg = "N",
         .min = 1,
         .max = OQ_MAX_LIVENESS,
         .def = def_liveness,
         .dest = &liveness,
         .help = "missed heartbeats before a worker is dead"},
        {.name = "max-jobs",
         .env = "ONCEQ_MAX_JOBS",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .min = 1,
         .max = S_MAX_JOBS_LIMIT,
         .def = def_max_jobs,
         .dest = &max_jobs,
         .help = "live jobs held at most"},
        {.name = "max-bytes",
         .env = "ONCEQ_MAX_BYTES",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .min = OQ_MIN_MAX_BYTES,
         .max = (uint64_t)OQ_MAX_MAX_BYTES,
         .def_text = def_max_bytes,
         .expected = "a number of bytes from 1048576 to 2^50",
         .dest = &config.engine.max_bytes,
         .help = help_max_bytes},
        OQ_FLAG_IO_CPUS(&config.io_cpus),
        OQ_FLAG_LOG_LEVEL(&level),
        {.name = "help", .kind = OQ_FLAG_BOOL, .stop = true, .dest = &help, .help = "this text"},
        {.name = "version",
         .kind = OQ_FLAG_BOOL,
         .stop = true,
         .dest = &version,
         .help = "the version"},

        {.kind = OQ_FLAG_SECTION,
         .help = "authentication (docs/operations.md; CURVE unless --insecure):"},
        {.name = "keys",
         .env = "ONCEQ_KEYS",
         .kind = OQ_FLAG_STRING,
         .arg = "DIR",
         .dest = &config.keys_dir,
         .def_text = "none: give it, or --insecure",
         .help = "speak CURVE on both sockets with DIR/broker.key_secret (onceq keygen --dir "
                 "DIR broker), and admit only the public keys in DIR/producers, DIR/workers "
                 "and DIR/admins (files NAME.key), each for its role's commands; SIGHUP reads "
                 "DIR again"},
        {.name = "insecure",
         .env = "ONCEQ_INSECURE",
         .kind = OQ_FLAG_BOOL,
         .dest = &config.insecure,
         .help = "without --keys: plaintext, no authentication, every peer may send every "
                 "command; binds loopback and ipc:// endpoints only"},
        {.name = "insecure-remote",
         .env = "ONCEQ_INSECURE_REMOTE",
         .kind = OQ_FLAG_BOOL,
         .dest = &config.insecure_remote,
         .help = "with --insecure: bind other addresses too (anyone who reaches them may "
                 "send, read and complete jobs)"},
        {.name = "max-conns",
         .env = "ONCEQ_MAX_CONNS",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .max = OQ_MAX_ROLE_CONNS,
         .def = "0",
         .def_text = "0: what the open-file limit allows",
         .dest = &max_conns,
         .help = "connections at most, both sockets, authenticated or not; a peer over it "
                 "is disconnected at once"},
        {.name = "handshake-timeout-ms",
         .env = "ONCEQ_HANDSHAKE_TIMEOUT_MS",
         .kind = OQ_FLAG_MS,
         .arg = "N",
         .min = OQ_MIN_HANDSHAKE_MS,
         .max = OQ_MAX_HANDSHAKE_MS,
         .def = def_handshake,
         .dest = &handshake_ms,
         .help = "a connection that has not finished its handshake (greeting, CURVE) by then "
                 "is dropped"},
        {.name = "max-handshakes-per-ip",
         .env = "ONCEQ_MAX_HANDSHAKES_PER_IP",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .max = OQ_MAX_HANDSHAKES,
         .def = def_handshakes,
         .dest = &max_handshakes,
         .help = "connections from one address (IPv6: one /64) still in their handshake at "
                 "most; one more is disconnected at once; 0: no such limit"},
        {.name = "max-producers",
         .env = "ONCEQ_MAX_PRODUCERS",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .min = 1,
         .max = OQ_MAX_ROLE_CONNS,
         .def = def_producers,
         .dest = &max_producers,
         .help = "with --keys: connections of producer keys at most; a new one over it is "
                 "refused at its handshake"},
        {.name = "max-workers",
         .env = "ONCEQ_MAX_WORKERS",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .min = 1,
         .max = OQ_MAX_ROLE_CONNS,
         .def = def_workers,
         .dest = &max_workers,
         .help = "with --keys: connections of worker keys at most"},
        {.name = "max-admins",
         .env = "ONCEQ_MAX_ADMINS",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .min = 1,
         .max = OQ_MAX_ROLE_CONNS,
         .def = def_admins,
         .dest = &max_admins,
         .help = "with --keys: connections of admin keys at most"},

        {.kind = OQ_FLAG_SECTION, .help = "durability (docs/journal.md):"},
        {.name = "data-dir",
         .env = "ONCEQ_DATA_DIR",
         .kind = OQ_FLAG_STRING,
         .arg = "DIR",
         .def = OQ_DEFAULT_DATA_DIR,
         .dest = &config.journal.dir,
         .help = "where the journal lives; created if missing"},
        {.name = "fsync",
         .env = "ONCEQ_FSYNC",
         .kind = OQ_FLAG_ENUM,
         .arg = "POLICY",
         .words = fsyncs,
         .def = "always",
         .dest = &fsync,
         .help = "always: a dispatch is confirmed only once its record is fsynced (one fsync "
                 "per loop turn for all of its writes); batch: fsync at most every "
                 "--fsync-interval-ms, replies wait for it; off: confirmed once written, the "
                 "OS flushes when it likes (a machine crash can lose confirmed jobs)"},
        {.name = "fsync-interval-ms",
         .env = "ONCEQ_FSYNC_INTERVAL_MS",
         .kind = OQ_FLAG_MS,
         .arg = "N",
         .min = 1,
         .max = OQ_MAX_FSYNC_INTERVAL_MS,
         .def = def_fsync_interval,
         .dest = &fsync_interval_ms,
         .help = "batch: longest wait for an fsync; always: for records no reply waits on"},
        {.name = "repair",
         .env = "ONCEQ_REPAIR",
         .kind = OQ_FLAG_BOOL,
         .dest = &config.repair,
         .help = "start even if the journal is damaged: keep every record that verifies, save "
                 "the damaged bytes to a side file and report what was skipped; a damaged "
                 "header is rebuilt with a new dedupe key (dispatch ids kept only as digests "
                 "are forgotten)"},
        {.name = "compact-min-bytes",
         .env = "ONCEQ_COMPACT_MIN_BYTES",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .max = (uint64_t)S_MAX_COMPACT_MIN_BYTES,
         .def = def_compact_min,
         .expected = "a number of bytes",
         .dest = &config.compact.min_bytes,
         .help = "never compact a journal smaller than this"},
        {.name = "compact-ratio",
         .env = "ONCEQ_COMPACT_RATIO",
         .kind = OQ_FLAG_U32,
         .arg = "R",
         .min = 2,
         .max = OQ_MAX_COMPACT_RATIO,
         .def = def_compact_ratio,
         .dest = &config.compact.ratio,
         .help = "compact when the journal is over R x the live jobs"},
        {.name = "disk-reserve-bytes",
         .env = "ONCEQ_DISK_RESERVE_BYTES",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .max = (uint64_t)OQ_MAX_DISK_RESERVE_BYTES,
         .def = def_reserve,
         .expected = "a number of bytes (0: no reserve)",
         .dest = &config.journal.reserve_bytes,
         .help = "space kept free in the data dir (file DIR/reserve): on a full disk it is "
                 "released so that the journal and a compaction fit, and dispatches resume by "
                 "themselves once it can be allocated again; 0: none"},
        {.name = "dedupe-window",
         .env = "ONCEQ_DEDUPE_WINDOW",
         .kind = OQ_FLAG_SECONDS,
         .arg = "S",
         .min = 1,
         .max = (uint64_t)OQ_MAX_DEDUPE_WINDOW_MS,
         .def = def_dedupe,
         .dest = &config.engine.dedupe_window_ms,
         .help = "a dispatch_id sent again within S seconds gets the first job's id"},
        {.name = "no-journal",
         .env = "ONCEQ_NO_JOURNAL",
         .kind = OQ_FLAG_BOOL,
         .dest = &config.no_journal,
         .help = "keep jobs in memory only: a restart LOSES every job"},

        {.kind = OQ_FLAG_SECTION, .help = "metrics (docs/operations.md, \"Metrics\"):"},
        {.name = "metrics",
         .env = "ONCEQ_METRICS",
         .kind = OQ_FLAG_STRING,
         .arg = "IP:PORT",
         .dest = &config.metrics_addr,
         .def_text = "off",
         .help = "serve GET /metrics (Prometheus text format, plain HTTP without "
                 "authentication: bind loopback or a private address) on IP:PORT, "
                 "e.g. 127.0.0.1:9751"},
    };
    size_t count = OQ_FLAGS_COUNT(flags);
    int rc = oq_flags_parse(S_PROGRAM, flags, count, argc, argv);
    if (rc < 0)
        return S_EXIT_USAGE;
    if (help) {
        s_usage(flags, count);
        return 0;
    }
    if (version) {
        printf(S_PROGRAM " %s\n", ONCEQ_VERSION);
        return 0;
    }
    oq_log_set_level(level);
    config.heartbeat_ms = (int)heartbeat_ms;
    config.liveness = (int)liveness;
    config.engine.max_jobs = (size_t)max_jobs;
    config.journal.fsync_interval_ms = fsync_interval_ms;
    oq_fsync_parse(fsyncs[fsync], &config.journal.fsync);
    config.max_conns = (size_t)max_conns;
    config.handshake_ms = (int)handshake_ms;
    config.max_handshakes_per_addr = (size_t)max_handshakes;
    config.max_producers = (size_t)max_producers;
    config.max_workers = (size_t)max_workers;
    config.max_admins = (size_t)max_admins;
    config.queues = queues.queues;
    if (config.metrics_addr && !config.metrics_addr[0])
        config.metrics_addr = NULL; /* ONCEQ_METRICS= (empty): off */
    config.queue_count = queues.count;
    if (config.keys_dir && config.insecure) {
        fprintf(stderr, S_PROGRAM ": --keys and --insecure exclude each other: with keys the "
                                  "broker speaks CURVE only\n");
        return S_EXIT_USAGE;
    }
    if (config.insecure_remote && !config.insecure) {
        fprintf(stderr, S_PROGRAM ": --insecure-remote applies only with --insecure\n");
        return S_EXIT_USAGE;
    }

    s_raise_nofile();
    char reason[1024];
    oq_broker_t *broker = oq_broker_new(&config, oq_clock_system(), reason, sizeof reason);
    if (!broker) {
        fprintf(stderr, S_PROGRAM ": refusing to start: %s\n", reason);
        return 1;
    }
    rc = oq_broker_run(broker);
    oq_broker_destroy(&broker);
    return rc == 0 ? 0 : 1;
}
