/*  main.c: onceq-broker's command line. Flags fall back to environment
    variables, then to the defaults in onceq/limits.h. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "broker.h"
#include "onceq/config.h"
#include "onceq/limits.h"
#include "onceq/log.h"

#define S_MAX_QUEUE_FLAGS       64
#define S_MAX_JOBS_LIMIT        1000000000
#define S_MAX_COMPACT_MIN_BYTES (1LL << 50)
#define S_MS_PER_S              1000
#define S_STR_(x)               #x
#define S_STR(x)                S_STR_(x)

static void s_usage(FILE *out)
{
    fprintf(
        out,
        "usage: onceq-broker [options]\n"
        "\n"
        "The onceq broker: takes jobs from producers, leases each to one worker, and\n"
        "hands it out again when its lease runs out or its worker dies.\n"
        "\n"
        "options (environment variable in brackets):\n"
        "  --front ENDPOINT       producers and admin [ONCEQ_FRONT] (default %s)\n"
        "  --back ENDPOINT        workers [ONCEQ_BACK] (default %s)\n"
        "  --retry-after S        lease length of every queue [ONCEQ_RETRY_AFTER] (default %d)\n"
        "  --timeout S            default job timeout [ONCEQ_TIMEOUT] (default %d)\n"
        "  --timeout-margin S     a timeout must be shorter than retry_after by this\n"
        "                         [ONCEQ_TIMEOUT_MARGIN] (default %d)\n"
        "  --queue NAME:RETRY_AFTER[:TIMEOUT]\n"
        "                         lease length and default timeout of one queue, in\n"
        "                         seconds; repeatable\n"
        "  --max-tries N          default retry budget [ONCEQ_MAX_TRIES] (default %d)\n"
        "  --backoff S            default wait before a retry [ONCEQ_BACKOFF] (default %d)\n"
        "  --heartbeat-ms N       heartbeat interval [ONCEQ_HEARTBEAT_MS] (default %d)\n"
        "  --liveness N           missed heartbeats before a worker is dead\n"
        "                         [ONCEQ_LIVENESS] (default %d)\n"
        "  --max-jobs N           live jobs held at most [ONCEQ_MAX_JOBS] (default %d)\n"
        "  --max-bytes N          bytes of live jobs held at most: each job's payload\n"
        "                         plus %d bytes [ONCEQ_MAX_BYTES] (default a quarter of\n"
        "                         the memory, here %llu)\n"
        "  --log-level LEVEL      debug, info, warn or error [ONCEQ_LOG_LEVEL] (default info)\n"
        "  --help                 this text\n"
        "  --version              the version\n"
        "\n"
        "durability (docs/journal.md):\n"
        "  --data-dir DIR         where the journal lives; created if missing\n"
        "                         [ONCEQ_DATA_DIR] (default %s)\n"
        "  --fsync POLICY         always: a dispatch is confirmed only once its record is\n"
        "                         fsynced (one fsync per loop turn for all of its writes);\n"
        "                         batch: fsync at most every --fsync-interval-ms, replies\n"
        "                         wait for it; off: confirmed once written, the OS flushes\n"
        "                         when it likes (a machine crash can lose confirmed jobs)\n"
        "                         [ONCEQ_FSYNC] (default always)\n"
        "  --fsync-interval-ms N  batch: longest wait for an fsync; always: for records no\n"
        "                         reply waits on [ONCEQ_FSYNC_INTERVAL_MS] (default %d)\n"
        "  --repair               start even if the journal is damaged: keep every record\n"
        "                         that verifies, save the damaged bytes to a side file\n"
        "                         and report what was skipped\n"
        "  --compact-min-bytes N  never compact a journal smaller than this\n"
        "                         [ONCEQ_COMPACT_MIN_BYTES] (default %lld)\n"
        "  --compact-ratio R      compact when the journal is over R x the live jobs\n"
        "                         [ONCEQ_COMPACT_RATIO] (default %d)\n"
        "  --disk-reserve-bytes N space kept free in the data dir (file DIR/reserve): on a\n"
        "                         full disk it is released so that the journal and a\n"
        "                         compaction fit, and dispatches resume by themselves once\n"
        "                         it can be allocated again; 0: none\n"
        "                         [ONCEQ_DISK_RESERVE_BYTES] (default %lld)\n"
        "  --dedupe-window S      a dispatch_id sent again within S seconds gets the first\n"
        "                         job's id [ONCEQ_DEDUPE_WINDOW] (default %lld)\n"
        "  --no-journal           keep jobs in memory only: a restart LOSES every job\n"
        "\n"
        "Seconds may have decimals (0.5). SIGINT or SIGTERM stops the broker.\n",
        OQ_DEFAULT_FRONT_ENDPOINT, OQ_DEFAULT_BACK_ENDPOINT, OQ_DEFAULT_RETRY_AFTER_MS / 1000,
        OQ_DEFAULT_TIMEOUT_MS / 1000, OQ_DEFAULT_MARGIN_MS / 1000, OQ_DEFAULT_MAX_TRIES,
        OQ_DEFAULT_BACKOFF_MS / 1000, OQ_DEFAULT_HEARTBEAT_MS, OQ_DEFAULT_LIVENESS,
        OQ_DEFAULT_MAX_JOBS, OQ_JOB_OVERHEAD_BYTES,
        (unsigned long long)oq_engine_default_max_bytes(), OQ_DEFAULT_DATA_DIR,
        OQ_DEFAULT_FSYNC_INTERVAL_MS, (long long)OQ_DEFAULT_COMPACT_MIN_BYTES,
        OQ_DEFAULT_COMPACT_RATIO, (long long)OQ_DEFAULT_DISK_RESERVE_BYTES,
        (long long)(OQ_DEFAULT_DEDUPE_WINDOW_MS / S_MS_PER_S));
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

static int s_bad(const char *flag, const char *value, const char *expected)
{
    fprintf(stderr, "onceq-broker: invalid %s \"%s\": expected %s\n", flag, value, expected);
    return 2;
}

int main(int argc, char **argv)
{
    oq_log_init("onceq-broker");
    enum {
        O_FRONT = 1000,
        O_BACK,
        O_RETRY_AFTER,
        O_TIMEOUT,
        O_MARGIN,
        O_QUEUE,
        O_MAX_TRIES,
        O_BACKOFF,
        O_HEARTBEAT,
        O_LIVENESS,
        O_MAX_JOBS,
        O_MAX_BYTES,
        O_LOG_LEVEL,
        O_DATA_DIR,
        O_FSYNC,
        O_FSYNC_INTERVAL,
        O_REPAIR,
        O_COMPACT_MIN,
        O_COMPACT_RATIO,
        O_DEDUPE_WINDOW,
        O_DISK_RESERVE,
        O_NO_JOURNAL,
        O_HELP,
        O_VERSION
    };
    static const struct option options[] = {
        {"front", required_argument, 0, O_FRONT},
        {"back", required_argument, 0, O_BACK},
        {"retry-after", required_argument, 0, O_RETRY_AFTER},
        {"timeout", required_argument, 0, O_TIMEOUT},
        {"timeout-margin", required_argument, 0, O_MARGIN},
        {"queue", required_argument, 0, O_QUEUE},
        {"max-tries", required_argument, 0, O_MAX_TRIES},
        {"backoff", required_argument, 0, O_BACKOFF},
        {"heartbeat-ms", required_argument, 0, O_HEARTBEAT},
        {"liveness", required_argument, 0, O_LIVENESS},
        {"max-jobs", required_argument, 0, O_MAX_JOBS},
        {"max-bytes", required_argument, 0, O_MAX_BYTES},
        {"log-level", required_argument, 0, O_LOG_LEVEL},
        {"data-dir", required_argument, 0, O_DATA_DIR},
        {"fsync", required_argument, 0, O_FSYNC},
        {"fsync-interval-ms", required_argument, 0, O_FSYNC_INTERVAL},
        {"repair", no_argument, 0, O_REPAIR},
        {"compact-min-bytes", required_argument, 0, O_COMPACT_MIN},
        {"compact-ratio", required_argument, 0, O_COMPACT_RATIO},
        {"dedupe-window", required_argument, 0, O_DEDUPE_WINDOW},
        {"disk-reserve-bytes", required_argument, 0, O_DISK_RESERVE},
        {"no-journal", no_argument, 0, O_NO_JOURNAL},
        {"help", no_argument, 0, O_HELP},
        {"version", no_argument, 0, O_VERSION},
        {0, 0, 0, 0},
    };
    const char *front = NULL, *back = NULL, *retry_after = NULL, *timeout = NULL, *margin = NULL,
               *max_tries = NULL, *backoff = NULL, *heartbeat = NULL, *liveness = NULL,
               *max_jobs = NULL, *max_bytes = NULL, *log_level = NULL, *data_dir = NULL,
               *fsync = NULL, *fsync_interval = NULL, *compact_min = NULL, *compact_ratio = NULL,
               *dedupe_window = NULL, *disk_reserve = NULL;
    bool repair = false, no_journal = false;
    const char *queues[S_MAX_QUEUE_FLAGS];
    int queue_count = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case O_FRONT:
            front = optarg;
            break;
        case O_BACK:
            back = optarg;
            break;
        case O_RETRY_AFTER:
            retry_after = optarg;
            break;
        case O_TIMEOUT:
            timeout = optarg;
            break;
        case O_MARGIN:
            margin = optarg;
            break;
        case O_QUEUE:
            if (queue_count == S_MAX_QUEUE_FLAGS) {
                fprintf(stderr, "onceq-broker: at most %d --queue flags\n", S_MAX_QUEUE_FLAGS);
                return 2;
            }
            queues[queue_count++] = optarg;
            break;
        case O_MAX_TRIES:
            max_tries = optarg;
            break;
        case O_BACKOFF:
            backoff = optarg;
            break;
        case O_HEARTBEAT:
            heartbeat = optarg;
            break;
        case O_LIVENESS:
            liveness = optarg;
            break;
        case O_MAX_JOBS:
            max_jobs = optarg;
            break;
        case O_MAX_BYTES:
            max_bytes = optarg;
            break;
        case O_LOG_LEVEL:
            log_level = optarg;
            break;
        case O_DATA_DIR:
            data_dir = optarg;
            break;
        case O_FSYNC:
            fsync = optarg;
            break;
        case O_FSYNC_INTERVAL:
            fsync_interval = optarg;
            break;
        case O_REPAIR:
            repair = true;
            break;
        case O_COMPACT_MIN:
            compact_min = optarg;
            break;
        case O_COMPACT_RATIO:
            compact_ratio = optarg;
            break;
        case O_DEDUPE_WINDOW:
            dedupe_window = optarg;
            break;
        case O_DISK_RESERVE:
            disk_reserve = optarg;
            break;
        case O_NO_JOURNAL:
            no_journal = true;
            break;
        case O_HELP:
            s_usage(stdout);
            return 0;
        case O_VERSION:
            printf("onceq-broker %s\n", ONCEQ_VERSION);
            return 0;
        default:
            s_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "onceq-broker: unexpected argument \"%s\" (see --help)\n", argv[optind]);
        return 2;
    }

    oq_broker_config_t config = oq_broker_config_default();
    config.front_endpoint = oq_config_str(front, "ONCEQ_FRONT", OQ_DEFAULT_FRONT_ENDPOINT);
    config.back_endpoint = oq_config_str(back, "ONCEQ_BACK", OQ_DEFAULT_BACK_ENDPOINT);
    uint64_t u;
    const char *v;
    if ((v = oq_config_str(log_level, "ONCEQ_LOG_LEVEL", NULL))) {
        oq_log_level_t level;
        if (oq_log_parse_level(v, &level) < 0)
            return s_bad("--log-level", v, "debug, info, warn or error");
        oq_log_set_level(level);
    }
    if ((v = oq_config_str(retry_after, "ONCEQ_RETRY_AFTER", NULL)) &&
        (oq_config_seconds(v, OQ_MAX_TIMEOUT_MS * 2, &config.engine.retry_after_ms) < 0 ||
         config.engine.retry_after_ms == 0))
        return s_bad("--retry-after", v, "seconds, more than 0");
    if ((v = oq_config_str(timeout, "ONCEQ_TIMEOUT", NULL)) &&
        (oq_config_seconds(v, OQ_MAX_TIMEOUT_MS, &config.engine.timeout_ms) < 0 ||
         config.engine.timeout_ms == 0))
        return s_bad("--timeout", v, "seconds, more than 0 and at most 86400");
    if ((v = oq_config_str(margin, "ONCEQ_TIMEOUT_MARGIN", NULL)) &&
        oq_config_seconds(v, OQ_MAX_TIMEOUT_MS, &config.engine.margin_ms) < 0)
        return s_bad("--timeout-margin", v, "seconds");
    if ((v = oq_config_str(max_tries, "ONCEQ_MAX_TRIES", NULL))) {
        if (oq_config_uint(v, 1, OQ_MAX_TRIES_LIMIT, &u) < 0)
            return s_bad("--max-tries", v, "1 to " S_STR(OQ_MAX_TRIES_LIMIT));
        config.engine.max_tries = (uint32_t)u;
    }
    if ((v = oq_config_str(backoff, "ONCEQ_BACKOFF", NULL)) &&
        oq_config_seconds(v, OQ_MAX_BACKOFF_MS, &config.engine.backoff_ms) < 0)
        return s_bad("--backoff", v, "seconds");
    if ((v = oq_config_str(heartbeat, "ONCEQ_HEARTBEAT_MS", NULL))) {
        if (oq_config_uint(v, OQ_MIN_HEARTBEAT_MS, OQ_MAX_HEARTBEAT_MS, &u) < 0)
            return s_bad("--heartbeat-ms", v, "10 to 60000");
        config.heartbeat_ms = (int)u;
    }
    if ((v = oq_config_str(liveness, "ONCEQ_LIVENESS", NULL))) {
        if (oq_config_uint(v, 1, OQ_MAX_LIVENESS, &u) < 0)
            return s_bad("--liveness", v, "1 to " S_STR(OQ_MAX_LIVENESS));
        config.liveness = (int)u;
    }
    if ((v = oq_config_str(max_jobs, "ONCEQ_MAX_JOBS", NULL))) {
        if (oq_config_uint(v, 1, S_MAX_JOBS_LIMIT, &u) < 0)
            return s_bad("--max-jobs", v, "1 to " S_STR(S_MAX_JOBS_LIMIT));
        config.engine.max_jobs = (size_t)u;
    }
    if ((v = oq_config_str(max_bytes, "ONCEQ_MAX_BYTES", NULL))) {
        if (oq_config_uint(v, OQ_MIN_MAX_BYTES, OQ_MAX_MAX_BYTES, &u) < 0)
            return s_bad("--max-bytes", v, "a number of bytes from 1048576 to 2^50");
        config.engine.max_bytes = u;
    }
    config.no_journal = no_journal;
    config.repair = repair;
    config.journal.dir = oq_config_str(data_dir, "ONCEQ_DATA_DIR", OQ_DEFAULT_DATA_DIR);
    if ((v = oq_config_str(fsync, "ONCEQ_FSYNC", NULL)) &&
        oq_fsync_parse(v, &config.journal.fsync) < 0)
        return s_bad("--fsync", v, "always, batch or off");
    if ((v = oq_config_str(fsync_interval, "ONCEQ_FSYNC_INTERVAL_MS", NULL))) {
        if (oq_config_uint(v, 1, OQ_MAX_FSYNC_INTERVAL_MS, &u) < 0)
            return s_bad("--fsync-interval-ms", v, "1 to " S_STR(OQ_MAX_FSYNC_INTERVAL_MS));
        config.journal.fsync_interval_ms = (int64_t)u;
    }
    if ((v = oq_config_str(compact_min, "ONCEQ_COMPACT_MIN_BYTES", NULL))) {
        if (oq_config_uint(v, 0, S_MAX_COMPACT_MIN_BYTES, &u) < 0)
            return s_bad("--compact-min-bytes", v, "a number of bytes");
        config.compact.min_bytes = u;
    }
    if ((v = oq_config_str(compact_ratio, "ONCEQ_COMPACT_RATIO", NULL))) {
        if (oq_config_uint(v, 2, OQ_MAX_COMPACT_RATIO, &u) < 0)
            return s_bad("--compact-ratio", v, "2 to " S_STR(OQ_MAX_COMPACT_RATIO));
        config.compact.ratio = (uint32_t)u;
    }
    if ((v = oq_config_str(disk_reserve, "ONCEQ_DISK_RESERVE_BYTES", NULL))) {
        if (oq_config_uint(v, 0, OQ_MAX_DISK_RESERVE_BYTES, &u) < 0)
            return s_bad("--disk-reserve-bytes", v, "a number of bytes (0: no reserve)");
        config.journal.reserve_bytes = u;
    }
    if ((v = oq_config_str(dedupe_window, "ONCEQ_DEDUPE_WINDOW", NULL)) &&
        (oq_config_seconds(v, OQ_MAX_DEDUPE_WINDOW_MS, &config.dedupe_window_ms) < 0 ||
         config.dedupe_window_ms == 0))
        return s_bad("--dedupe-window", v, "seconds, more than 0 and at most 7 days");

    static char queue_names[S_MAX_QUEUE_FLAGS][OQ_MAX_NAME_LEN + 2];
    oq_broker_queue_t queue_config[S_MAX_QUEUE_FLAGS];
    for (int i = 0; i < queue_count; i++) {
        char *name = queue_names[i];
        char ra[32] = "", to[32] = "";
        int64_t ra_ms, to_ms = 0;
        if (sscanf(queues[i], "%65[^:]:%31[^:]:%31s", name, ra, to) < 2 ||
            oq_config_seconds(ra, OQ_MAX_TIMEOUT_MS * 2, &ra_ms) < 0 || ra_ms == 0 ||
            (to[0] && (oq_config_seconds(to, OQ_MAX_TIMEOUT_MS, &to_ms) < 0 || to_ms == 0)))
            return s_bad("--queue", queues[i], "NAME:RETRY_AFTER[:TIMEOUT] in seconds");
        queue_config[i] = (oq_broker_queue_t){name, ra_ms, to_ms};
    }
    config.queues = queue_config;
    config.queue_count = (size_t)queue_count;

    s_raise_nofile();
    char reason[512];
    oq_broker_t *broker = oq_broker_new(&config, oq_clock_system(), reason, sizeof reason);
    if (!broker) {
        fprintf(stderr, "onceq-broker: refusing to start: %s\n", reason);
        return 1;
    }
    int rc = oq_broker_run(broker);
    oq_broker_destroy(&broker);
    return rc == 0 ? 0 : 1;
}
