/*  chaos_main.c: onceq-chaos, the chaos harness. It starts (or attaches to)
    a broker, a worker pool and PostgreSQL; registers customers; dispatches
    order-point grants at a rate, some of them again; meanwhile breaks
    things on a seeded schedule (kills workers mid-job and between COMMIT
    and ack, stops them past retry_after, kills the broker, restarts the
    database, sends malformed frames); then judges from the database and
    the broker whether every effect happened exactly once (verdict.h).

    It is its own binary, never part of the everyday onceq tool: it sends
    signals to processes, relies on the workers' test hooks, and starts a
    database cluster. docs/chaos.md is its manual.

    Exit status: 0 no violation, 1 violations, 2 a usage error or a run that
    could not be carried out (a process did not start), 130 interrupted. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <libpq-fe.h>

#include "carrier_client.h"
#include "chaos_config.h"
#include "chaos_limits.h"
#include "curve.h"
#include "faults.h"
#include "load.h"
#include "observe.h"
#include "onceq/flags.h"
#include "onceq/limits.h"
#include "procs.h"
#include "rng.h"
#include "schedule.h"
#include "support.h"
#include "verdict.h"
#include "worklog.h"

#define S_EXIT_PASS        0
#define S_EXIT_VIOLATIONS  1
#define S_EXIT_USAGE       2
#define S_EXIT_INTERRUPTED 130
#define S_MS_PER_S         1000.0
#define S_PATH_LEN         4096
#define S_FILE_LEN         32 /* a file name in the run directory */
#define S_ERR_LEN          1024
/* Ids of a run against a database that is not ours start above the time
   of the run times this: runs a second apart never share an id. */
#define S_ID_BASE_PER_S 10000000LL

static volatile sig_atomic_t s_interrupted;

static void s_on_signal(int signo)
{
    s_interrupted = 1;
}

/* ---- flags ------------------------------------------------------------ */

static void s_defaults(oq_chaos_config_t *c, bool is_long)
{
    *c = (oq_chaos_config_t){
        .jobs = is_long ? OQ_CHAOS_LONG_JOBS : OQ_CHAOS_DEFAULT_JOBS,
        .customers = OQ_CHAOS_DEFAULT_CUSTOMERS,
        .rate = is_long ? OQ_CHAOS_LONG_RATE : OQ_CHAOS_DEFAULT_RATE,
        .redispatch_pct = OQ_CHAOS_DEFAULT_REDISPATCH_PCT,
        .job_type = OQ_CHAOS_DEFAULT_JOB_TYPE,
        .queue = OQ_CHAOS_DEFAULT_QUEUE,
        .workers = OQ_CHAOS_DEFAULT_WORKERS,
        .heartbeat_ms = OQ_CHAOS_DEFAULT_HEARTBEAT_MS,
        .liveness = OQ_CHAOS_DEFAULT_LIVENESS,
        .retry_after_s = OQ_CHAOS_DEFAULT_RETRY_AFTER_S,
        .job_timeout_s = OQ_CHAOS_DEFAULT_JOB_TIMEOUT_S,
        .max_tries = OQ_CHAOS_DEFAULT_MAX_TRIES,
        .backoff_s = OQ_CHAOS_DEFAULT_BACKOFF_S,
        .hold_ms = OQ_CHAOS_DEFAULT_HOLD_MS,
        .commit_pause_ms = OQ_CHAOS_DEFAULT_COMMIT_PAUSE_MS,
        .kills = is_long ? OQ_CHAOS_LONG_KILLS : OQ_CHAOS_DEFAULT_KILLS,
        .commit_kills = is_long ? OQ_CHAOS_LONG_COMMIT_KILLS : OQ_CHAOS_DEFAULT_COMMIT_KILLS,
        .self_kills = is_long ? OQ_CHAOS_LONG_SELF_KILLS : OQ_CHAOS_DEFAULT_SELF_KILLS,
        .pauses = is_long ? OQ_CHAOS_LONG_PAUSES : OQ_CHAOS_DEFAULT_PAUSES,
        .broker_kills = is_long ? OQ_CHAOS_LONG_BROKER_KILLS : OQ_CHAOS_DEFAULT_BROKER_KILLS,
        .db_restarts = is_long ? OQ_CHAOS_LONG_DB_RESTARTS : OQ_CHAOS_DEFAULT_DB_RESTARTS,
        .bursts = is_long ? OQ_CHAOS_LONG_BURSTS : OQ_CHAOS_DEFAULT_BURSTS,
        .burst_frames = OQ_CHAOS_DEFAULT_BURST_FRAMES,
        .broker_down_ms = OQ_CHAOS_BROKER_DOWN_MS,
        .ship_type = OQ_CHAOS_DEFAULT_SHIP_TYPE,
        .ship_queue = OQ_CHAOS_DEFAULT_SHIP_QUEUE,
        .ship_tries = OQ_CHAOS_DEFAULT_MAX_TRIES,
        .carrier_error_rate = OQ_CHAOS_DEFAULT_CARRIER_ERROR_RATE,
        .carrier_drop_rate = OQ_CHAOS_DEFAULT_CARRIER_DROP_RATE,
        .carrier_stalls = is_long ? OQ_CHAOS_LONG_CARRIER_FAULTS : OQ_CHAOS_DEFAULT_CARRIER_STALLS,
        .carrier_error_bursts =
            is_long ? OQ_CHAOS_LONG_CARRIER_FAULTS : OQ_CHAOS_DEFAULT_CARRIER_ERRORS,
        .carrier_delay_bursts =
            is_long ? OQ_CHAOS_LONG_CARRIER_FAULTS : OQ_CHAOS_DEFAULT_CARRIER_DELAYS,
        .carrier_fault_ms = OQ_CHAOS_DEFAULT_CARRIER_FAULT_MS,
        .settle_s = OQ_CHAOS_DEFAULT_SETTLE_S,
    };
}

/* Rules between flags, with the numbers in the message. 0 or -1. */
static int s_check(const oq_chaos_config_t *c)
{
    double margin_s = OQ_DEFAULT_MARGIN_MS / S_MS_PER_S;
    if (!c->attach && c->job_timeout_s <= 0) {
        fprintf(stderr, "onceq-chaos: --job-timeout must be more than 0 with our own broker\n");
        return -1;
    }
    if (!c->attach && c->job_timeout_s > c->retry_after_s - margin_s) {
        fprintf(stderr,
                "onceq-chaos: --job-timeout %g must be shorter than --retry-after %g by the "
                "broker's margin of %g s\n",
                c->job_timeout_s, c->retry_after_s, margin_s);
        return -1;
    }
    double timeout_ms = c->job_timeout_s * S_MS_PER_S;
    if (c->hooks && (c->commit_pause_ms >= timeout_ms || c->hold_ms >= timeout_ms)) {
        fprintf(stderr,
                "onceq-chaos: --commit-pause-ms %u and --hold-ms %u must be shorter than the "
                "job timeout of %g ms, or the worker's watchdog ends the job first\n",
                c->commit_pause_ms, c->hold_ms, timeout_ms);
        return -1;
    }
    if (c->attach && !c->key != !c->broker_key) {
        fprintf(stderr, "onceq-chaos: attached with CURVE, give both --key and --broker-key\n");
        return -1;
    }
    if (c->attach && c->insecure) {
        fprintf(stderr, "onceq-chaos: --insecure applies to our own broker; attached, leave out "
                        "--key for plaintext\n");
        return -1;
    }
    if (c->attach && !c->database) {
        fprintf(stderr, "onceq-chaos: attach mode (--broker) needs --database or "
                        "ONCEQ_DATABASE_URL\n");
        return -1;
    }
    if (!c->attach && c->carrier_url) {
        fprintf(stderr, "onceq-chaos: --carrier-url names the carrier of a deployment (with "
                        "--broker); our own run starts its own carrier\n");
        return -1;
    }
    if (c->carrier && strcmp(c->ship_queue, c->queue) == 0) {
        fprintf(stderr,
                "onceq-chaos: --ship-queue must differ from --queue (%s): the verdict "
                "reads each queue's stores apart\n",
                c->queue);
        return -1;
    }
    if (c->jobs > OQ_CHAOS_MAX_JOBS || c->customers > OQ_CHAOS_MAX_CUSTOMERS) {
        fprintf(stderr, "onceq-chaos: at most %d jobs and %d customers\n", OQ_CHAOS_MAX_JOBS,
                OQ_CHAOS_MAX_CUSTOMERS);
        return -1;
    }
    return 0;
}

#define S_STR_(x) #x
#define S_STR(x)  S_STR_(x)
#define S_FAULTS(flag, field, text, def)                                                           \
    {                                                                                              \
        .name = flag, .kind = OQ_FLAG_U32, .arg = "N", .max = OQ_CHAOS_MAX_FAULTS,                 \
        .dest = &c->field, .def_text = S_STR(def), .help = text                                    \
    }

/* --worker-arg, in the order given. */
static const char *s_worker_args[OQ_CHAOS_MAX_WORKER_ARGS];
static size_t s_worker_arg_count;

static int s_parse_worker_arg(const char *value, void *dest, char *why, size_t why_len)
{
    if (s_worker_arg_count == OQ_CHAOS_MAX_WORKER_ARGS) {
        snprintf(why, why_len, "at most %d of them", OQ_CHAOS_MAX_WORKER_ARGS);
        return -1;
    }
    ((const char **)dest)[s_worker_arg_count++] = value;
    return 0;
}

static void s_usage(const oq_flag_t *flags, size_t count)
{
    printf("usage: onceq-chaos [options]\n"
           "\n"
           "Proves exactly-once effects while it breaks things: starts a broker, a worker\n"
           "pool, PostgreSQL and a mock carrier on loopback in a temp dir (or attaches to a\n"
           "deployment), confirms orders (each dispatches grant_points and\n"
           "request_shipment), kills and stops workers, kills the broker, restarts the\n"
           "database, sends malformed frames and stalls the carrier on a seeded schedule,\n"
           "then checks from the database, the broker and the carrier that every order\n"
           "was granted exactly once, every balance is exact and every order has exactly\n"
           "one shipment (or waits in review). See docs/chaos.md.\n"
           "\n");
    oq_flags_help(flags, count, stdout);
    printf("\n"
           "Exit status: 0 no violation, 1 violations, 2 usage error or a run that could\n"
           "not be carried out, 130 interrupted.\n");
}

/* 0 to run, 1 after --help, -1 on a usage error. */
static int s_parse(int argc, char **argv, oq_chaos_config_t *c)
{
    bool is_long = false;
    for (int i = 1; i < argc; i++)
        is_long |= strcmp(argv[i], "--long") == 0;
    s_defaults(c, is_long);
    oq_flag_src_t seed_src, pause_src, broker_src, id_base_src;
    bool long_given = false, no_faults = false, help = false, no_carrier = false;
    uint64_t id_base = 0;
    char long_text[S_ERR_LEN], pause_text[S_ERR_LEN];
    snprintf(long_text, sizeof long_text,
             "the long run: %d dispatches (a grant and a shipment each) at %d/s, hundreds of "
             "faults",
             OQ_CHAOS_LONG_JOBS, OQ_CHAOS_LONG_RATE);
    snprintf(pause_text, sizeof pause_text, "retry_after + %d", OQ_CHAOS_PAUSE_BEYOND_MS);
    const char *seconds_expected = "seconds from 0 to 86400";
    const oq_flag_t flags[] = {
        {.kind = OQ_FLAG_SECTION, .help = "run:"},
        {.name = "seed",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .max = UINT64_MAX,
         .dest = &c->seed,
         .src = &seed_src,
         .def_text = "random, printed at start",
         .help = "reproduce a run"},
        {.name = "long", .kind = OQ_FLAG_BOOL, .dest = &long_given, .help = long_text},
        {.name = "jobs",
         .kind = OQ_FLAG_U32,
         .arg = "N",
         .min = 1,
         .max = OQ_CHAOS_MAX_JOBS,
         .dest = &c->jobs,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_JOBS),
         .help = "dispatches in all"},
        {.name = "rate",
         .kind = OQ_FLAG_DOUBLE,
         .arg = "R",
         .dmax = 1e6,
         .dest = &c->rate,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_RATE),
         .help = "dispatches per second, 0 unpaced"},
        {.name = "customers",
         .kind = OQ_FLAG_U32,
         .arg = "N",
         .min = 1,
         .max = OQ_CHAOS_MAX_CUSTOMERS,
         .dest = &c->customers,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_CUSTOMERS),
         .help = "customers, each with a balance row"},
        {.name = "redispatch",
         .kind = OQ_FLAG_U32,
         .arg = "PCT",
         .max = 100,
         .dest = &c->redispatch_pct,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_REDISPATCH_PCT),
         .help = "share of dispatches repeating an earlier order"},
        {.name = "job-type",
         .kind = OQ_FLAG_STRING,
         .arg = "TYPE",
         .dest = &c->job_type,
         .def_text = OQ_CHAOS_DEFAULT_JOB_TYPE,
         .help = "grant_points, or grant_points_unguarded to watch the verdict catch double "
                 "grants"},
        {.name = "queue",
         .kind = OQ_FLAG_STRING,
         .arg = "NAME",
         .dest = &c->queue,
         .def_text = OQ_CHAOS_DEFAULT_QUEUE,
         .help = "the run's queue"},
        {.name = "no-carrier",
         .kind = OQ_FLAG_BOOL,
         .dest = &no_carrier,
         .help = "grants only: no carrier, no request_shipment jobs"},
        {.name = "ship-type",
         .kind = OQ_FLAG_STRING,
         .arg = "TYPE",
         .dest = &c->ship_type,
         .def_text = OQ_CHAOS_DEFAULT_SHIP_TYPE,
         .help = "request_shipment, or request_shipment_unkeyed (keyed by the job id) to watch "
                 "the verdict catch two shipments for one order"},
        {.name = "ship-queue",
         .kind = OQ_FLAG_STRING,
         .arg = "NAME",
         .dest = &c->ship_queue,
         .def_text = OQ_CHAOS_DEFAULT_SHIP_QUEUE,
         .help = "the shipments' queue"},
        {.name = "ship-tries",
         .kind = OQ_FLAG_U32,
         .arg = "N",
         .min = 1,
         .max = OQ_MAX_TRIES_LIMIT,
         .dest = &c->ship_tries,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_MAX_TRIES),
         .help = "each shipment job's retry budget (a call whose outcome is still unknown "
                 "on the last try goes to review)"},
        {.name = "settle",
         .kind = OQ_FLAG_U32,
         .arg = "S",
         .max = UINT32_MAX / 1000,
         .dest = &c->settle_s,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_SETTLE_S),
         .help = "wait this long for the jobs to settle"},
        {.kind = OQ_FLAG_SECTION, .help = "faults (defaults: the bounded run of the test suite):"},
        S_FAULTS("kills", kills, "SIGKILL a worker holding a job", OQ_CHAOS_DEFAULT_KILLS),
        S_FAULTS("commit-kills", commit_kills, "SIGKILL a worker between COMMIT and ack",
                 OQ_CHAOS_DEFAULT_COMMIT_KILLS),
        S_FAULTS("self-kills", self_kills, "a worker SIGKILLs itself after COMMIT",
                 OQ_CHAOS_DEFAULT_SELF_KILLS),
        S_FAULTS("pauses", pauses, "SIGSTOP a worker past retry_after, then SIGCONT",
                 OQ_CHAOS_DEFAULT_PAUSES),
        S_FAULTS("broker-kills", broker_kills, "SIGKILL the broker, restart it on its journal",
                 OQ_CHAOS_DEFAULT_BROKER_KILLS),
        S_FAULTS("db-restarts", db_restarts, "restart PostgreSQL, immediate then fast",
                 OQ_CHAOS_DEFAULT_DB_RESTARTS),
        S_FAULTS("bursts", bursts, "bursts of malformed frames to both sockets",
                 OQ_CHAOS_DEFAULT_BURSTS),
        {.name = "burst-frames",
         .kind = OQ_FLAG_U32,
         .arg = "N",
         .max = OQ_CHAOS_MAX_BURST_FRAMES,
         .dest = &c->burst_frames,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_BURST_FRAMES),
         .help = "frames per socket in a burst"},
        S_FAULTS("carrier-stalls", carrier_stalls, "SIGSTOP the carrier, then SIGCONT",
                 OQ_CHAOS_DEFAULT_CARRIER_STALLS),
        S_FAULTS("carrier-errors", carrier_error_bursts, "bursts of 503s from the carrier",
                 OQ_CHAOS_DEFAULT_CARRIER_ERRORS),
        S_FAULTS("carrier-delays", carrier_delay_bursts,
                 "bursts of carrier replies later than the job's timeout",
                 OQ_CHAOS_DEFAULT_CARRIER_DELAYS),
        {.name = "carrier-fault-ms",
         .kind = OQ_FLAG_MS,
         .arg = "N",
         .max = (uint64_t)OQ_MAX_TIMEOUT_MS,
         .dest = &c->carrier_fault_ms,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_CARRIER_FAULT_MS),
         .help = "how long a carrier stall or burst lasts"},
        {.name = "carrier-error-rate",
         .kind = OQ_FLAG_DOUBLE,
         .arg = "R",
         .dmax = 1,
         .dest = &c->carrier_error_rate,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_CARRIER_ERROR_RATE),
         .help = "share of the carrier's POSTs answered 503, all through the run"},
        {.name = "carrier-drop-rate",
         .kind = OQ_FLAG_DOUBLE,
         .arg = "R",
         .dmax = 1,
         .dest = &c->carrier_drop_rate,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_CARRIER_DROP_RATE),
         .help = "share of the carrier's POSTs processed with the reply dropped, all through"},
        {.name = "no-faults",
         .kind = OQ_FLAG_BOOL,
         .dest = &no_faults,
         .help = "none of the above, whatever their flags say: the baseline to compare with"},
        {.name = "pause-ms",
         .kind = OQ_FLAG_MS,
         .arg = "N",
         .max = (uint64_t)OQ_MAX_TIMEOUT_MS,
         .dest = &c->pause_ms,
         .src = &pause_src,
         .def_text = pause_text,
         .help = "how long a worker stays stopped"},
        {.name = "broker-down-ms",
         .kind = OQ_FLAG_MS,
         .arg = "N",
         .max = (uint64_t)OQ_MAX_TIMEOUT_MS,
         .dest = &c->broker_down_ms,
         .def_text = S_STR(OQ_CHAOS_BROKER_DOWN_MS),
         .help = "how long a killed broker stays down"},
        {.kind = OQ_FLAG_SECTION, .help = "own deployment (the default):"},
        {.name = "workers",
         .kind = OQ_FLAG_U32,
         .arg = "N",
         .min = 1,
         .max = OQ_SUPERVISOR_MAX_PROCESSES,
         .dest = &c->workers,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_WORKERS),
         .help = "worker processes"},
        {.name = "heartbeat-ms",
         .kind = OQ_FLAG_MS,
         .arg = "N",
         .min = OQ_MIN_HEARTBEAT_MS,
         .max = OQ_MAX_HEARTBEAT_MS,
         .dest = &c->heartbeat_ms,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_HEARTBEAT_MS),
         .help = "heartbeat interval"},
        {.name = "liveness",
         .kind = OQ_FLAG_U32,
         .arg = "N",
         .min = 1,
         .max = OQ_MAX_LIVENESS,
         .dest = &c->liveness,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_LIVENESS),
         .help = "missed heartbeats before a worker is dead"},
        {.name = "retry-after",
         .kind = OQ_FLAG_DOUBLE,
         .arg = "S",
         .dmax = (double)OQ_MAX_TIMEOUT_MS / S_MS_PER_S,
         .expected = seconds_expected,
         .dest = &c->retry_after_s,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_RETRY_AFTER_S),
         .help = "lease length"},
        {.name = "job-timeout",
         .kind = OQ_FLAG_DOUBLE,
         .arg = "S",
         .dmax = (double)OQ_MAX_TIMEOUT_MS / S_MS_PER_S,
         .expected = seconds_expected,
         .dest = &c->job_timeout_s,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_JOB_TIMEOUT_S),
         .help = "each job's timeout"},
        {.name = "max-tries",
         .kind = OQ_FLAG_U32,
         .arg = "N",
         .min = 1,
         .max = OQ_MAX_TRIES_LIMIT,
         .dest = &c->max_tries,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_MAX_TRIES),
         .help = "each job's retry budget"},
        {.name = "backoff",
         .kind = OQ_FLAG_U32,
         .arg = "S",
         .max = OQ_MAX_BACKOFF_MS / 1000,
         .dest = &c->backoff_s,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_BACKOFF_S),
         .help = "each job's wait before a retry, in seconds"},
        {.name = "hold-ms",
         .kind = OQ_FLAG_MS,
         .arg = "N",
         .max = (uint64_t)OQ_MAX_TIMEOUT_MS,
         .dest = &c->hold_ms,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_HOLD_MS),
         .help = "each grant holds its transaction this long"},
        {.name = "commit-pause-ms",
         .kind = OQ_FLAG_MS,
         .arg = "N",
         .max = (uint64_t)OQ_MAX_TIMEOUT_MS,
         .dest = &c->commit_pause_ms,
         .def_text = S_STR(OQ_CHAOS_DEFAULT_COMMIT_PAUSE_MS),
         .help = "the COMMIT-to-ack window of commit-kill orders"},
        {.name = "worker-arg",
         .kind = OQ_FLAG_CUSTOM,
         .arg = "ARG",
         .parse = s_parse_worker_arg,
         .dest = s_worker_args,
         .repeat = true,
         .expected = "one argument for the workers",
         .def_text = "none",
         .help = "one more argument for every worker, after ours (repeat it: --worker-arg "
                 "--prefetch --worker-arg 4); the environment is passed on too"},
        {.name = "bin-dir",
         .kind = OQ_FLAG_STRING,
         .arg = "DIR",
         .dest = &c->bin_dir,
         .def_text = "next to this",
         .help = "onceq-broker, onceq-test-worker, onceq, onceq-carrier"},
        {.name = "pg-script",
         .kind = OQ_FLAG_STRING,
         .arg = "PATH",
         .dest = &c->pg_script,
         .env = "ONCEQ_PG_SCRIPT",
         .def_text = "share/onceq/pg.sh next to this",
         .help = "deploy/pg.sh"},
        {.name = "dir",
         .kind = OQ_FLAG_STRING,
         .arg = "DIR",
         .dest = &c->dir,
         .def_text = "a new one in $TMPDIR",
         .help = "the run directory"},
        {.name = "keep",
         .kind = OQ_FLAG_BOOL,
         .dest = &c->keep,
         .help = "keep the run directory after a clean run too"},
        {.name = "insecure",
         .kind = OQ_FLAG_BOOL,
         .dest = &c->insecure,
         .help = "plaintext: our broker runs --insecure and nobody gets keys (by default the "
                 "run makes keys in RUN/keys and everything speaks CURVE)"},
        {.kind = OQ_FLAG_SECTION, .help = "attach to a deployment (process faults are skipped):"},
        {.name = "broker",
         .kind = OQ_FLAG_ENDPOINT,
         .arg = "ENDPOINT",
         .dest = &c->front,
         .src = &broker_src,
         .help = "its front socket; starts nothing"},
        {.name = "back",
         .kind = OQ_FLAG_ENDPOINT,
         .arg = "ENDPOINT",
         .dest = &c->back,
         .help = "its worker socket, for the malformed bursts"},
        {.name = "key",
         .env = "ONCEQ_KEY",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .dest = &c->key,
         .def_text = "none: plaintext",
         .help = "our secret key file for its front socket; an admin's, since the verdict "
                 "reads the failed store"},
        {.name = "worker-key",
         .env = "ONCEQ_WORKER_KEY",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .dest = &c->worker_key,
         .def_text = "--key",
         .help = "a worker's secret key file, for the bursts to its worker socket"},
        {.name = "broker-key",
         .env = "ONCEQ_BROKER_KEY",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .dest = &c->broker_key,
         .def_text = "none",
         .help = "its public key file, with --key"},
        {.name = "carrier-url",
         .kind = OQ_FLAG_STRING,
         .arg = "URL",
         .dest = &c->carrier_url,
         .def_text = "none: no shipments",
         .help = "its carrier's base URL (an onceq-carrier: the verdict reads its GET "
                 "/shipments, the bursts use its PUT /faults)"},
        {.name = "database",
         .env = "ONCEQ_DATABASE_URL",
         .kind = OQ_FLAG_STRING,
         .arg = "URL",
         .dest = &c->database,
         .help = "its PostgreSQL; with our own broker and workers, the database restarts are "
                 "skipped"},
        {.name = "id-base",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .max = (uint64_t)INT64_MAX / 2,
         .dest = &id_base,
         .src = &id_base_src,
         .def_text = "0 on our own cluster, else from the clock",
         .help = "customer and order ids start above N"},
        {.name = "help", .kind = OQ_FLAG_BOOL, .stop = true, .dest = &help, .help = "this text"},
    };
    int rc = oq_flags_parse("onceq-chaos", flags, OQ_FLAGS_COUNT(flags), argc, argv);
    if (rc != 0) {
        if (help)
            s_usage(flags, OQ_FLAGS_COUNT(flags));
        return rc;
    }
    if (no_faults) {
        c->kills = c->commit_kills = c->self_kills = c->pauses = 0;
        c->broker_kills = c->db_restarts = c->bursts = 0;
        c->carrier_stalls = c->carrier_error_bursts = c->carrier_delay_bursts = 0;
        c->carrier_error_rate = c->carrier_drop_rate = 0;
    }
    c->attach = broker_src != OQ_FLAG_SRC_NONE;
    c->carrier = !no_carrier && (!c->attach || c->carrier_url);
    c->worker_args = s_worker_args;
    c->worker_arg_count = s_worker_arg_count;
    c->id_base_set = id_base_src != OQ_FLAG_SRC_NONE;
    c->id_base = (int64_t)id_base;
    c->hooks = !c->attach;
    if (pause_src == OQ_FLAG_SRC_NONE)
        c->pause_ms = (uint32_t)(c->retry_after_s * S_MS_PER_S) + OQ_CHAOS_PAUSE_BEYOND_MS;
    if (c->attach && c->job_timeout_s == OQ_CHAOS_DEFAULT_JOB_TIMEOUT_S)
        c->job_timeout_s = 0; /* their queue's own default */
    if (seed_src == OQ_FLAG_SRC_NONE && oq_rng_os_seed(&c->seed) < 0) {
        fprintf(stderr, "onceq-chaos: no randomness for a seed; pass --seed\n");
        return -1;
    }
    if (!c->id_base_set)
        c->id_base = c->database ? (int64_t)time(NULL) * S_ID_BASE_PER_S : 0;
    return s_check(c);
}

/* ---- the run ---------------------------------------------------------- */

typedef struct {
    oq_chaos_config_t *config;         /* as parsed */
    char dir[S_PATH_LEN];              /* the run directory */
    const char *front, *back, *db_url; /* what the run talks to; borrowed */
    oq_curve_t curve;                  /* the keys everything speaks with */
    oq_schedule_t *schedule;
    oq_procs_t *procs; /* NULL in attach mode */
    oq_observe_t *observe;
    oq_worklog_t *worklog; /* NULL in attach mode */
    oq_load_t *load;
    oq_faults_t *faults;
    oq_verdict_t *verdict;
    oq_carrier_client_t *carrier; /* NULL without shipments */
    bool settled;                 /* nothing ready, delayed or leased before the deadline */
    int64_t settled_ms;           /* when (or when the deadline passed) */
} s_run_t;

static int s_make_dir(s_run_t *run)
{
    if (run->config->dir) {
        snprintf(run->dir, sizeof run->dir, "%s", run->config->dir);
        if (mkdir(run->dir, 0755) < 0 && errno != EEXIST) {
            fprintf(stderr, "onceq-chaos: cannot create %s: %s\n", run->dir, strerror(errno));
            return -1;
        }
        return 0;
    }
    if (oq_support_temp_dir("onceq-chaos", run->dir, sizeof run->dir) < 0) {
        fprintf(stderr, "onceq-chaos: cannot create a run directory: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

/* Ping the broker until it answers; -1 if it does not within the bound or
   the process we started exits. */
static oq_observe_t *s_observe_new(const s_run_t *run)
{
    const oq_chaos_config_t *c = run->config;
    return oq_observe_new(run->front, &run->curve, c->queue, c->job_type,
                          c->carrier ? c->ship_queue : NULL, c->carrier ? c->ship_type : NULL);
}

static int s_wait_broker(s_run_t *run)
{
    int64_t end = oq_support_now_ms() + OQ_CHAOS_BROKER_UP_MS;
    while (oq_support_now_ms() < end && !s_interrupted) {
        if (oq_observe_ping(run->observe, OQ_CHAOS_PING_MS) == 0)
            return 0;
        int status;
        if (run->procs && oq_procs_broker_died(run->procs, &status)) {
            fprintf(stderr, "onceq-chaos: the broker exited at start (see %s/broker.log)\n",
                    run->dir);
            return -1;
        }
    }
    fprintf(stderr, "onceq-chaos: the broker at %s did not answer within %d ms\n", run->front,
            OQ_CHAOS_BROKER_UP_MS);
    return -1;
}

static int s_wait_workers(s_run_t *run)
{
    oq_observe_stats_t *stats = malloc(sizeof *stats);
    int64_t end = oq_support_now_ms() + OQ_CHAOS_WORKERS_UP_MS;
    int rc = -1;
    while (oq_support_now_ms() < end && !s_interrupted) {
        if (oq_observe_stats(run->observe, stats) == 0 && stats->workers >= run->config->workers) {
            rc = 0;
            break;
        }
        if (oq_procs_workers_died(run->procs))
            break;
        oq_support_sleep_ms(OQ_CHAOS_LOOP_MS);
    }
    free(stats);
    if (rc < 0)
        fprintf(stderr,
                "onceq-chaos: the %u workers did not register within %d ms (see "
                "%s/workers.log)\n",
                run->config->workers, OQ_CHAOS_WORKERS_UP_MS, run->dir);
    return rc;
}

static int s_setup_own(s_run_t *run)
{
    oq_chaos_config_t *c = run->config;
    if (!c->insecure && oq_curve_make(&run->curve, run->dir) < 0)
        return -1;
    run->procs = oq_procs_new(c, &run->curve, run->dir);
    if (!run->procs)
        return -1;
    if (!c->database) {
        printf("== starting PostgreSQL in %s/pg\n", run->dir);
        fflush(stdout);
        if (oq_procs_start_pg(run->procs) < 0)
            return -1;
        run->db_url = oq_procs_database_url(run->procs);
    } else {
        run->db_url = c->database;
    }
    run->front = oq_procs_front(run->procs);
    run->back = oq_procs_back(run->procs);
    bool durable = oq_procs_broker_durable(run->procs);
    printf("== broker on %s (workers: %s)%s; %s\n", run->front, run->back,
           durable ? ", journal in broker-data, --fsync always"
                   : ": no journal support (no --data-dir in its --help), broker kills skipped",
           run->curve.on ? "CURVE, keys in keys/" : "plaintext (--insecure)");
    fflush(stdout);
    run->observe = s_observe_new(run);
    if (!run->observe || oq_procs_start_broker(run->procs) < 0 || s_wait_broker(run) < 0)
        return -1;
    if (c->carrier) {
        if (oq_procs_start_carrier(run->procs) < 0)
            return -1;
        const char *url = oq_procs_carrier_url(run->procs);
        run->carrier = oq_carrier_client_new(url);
        printf("== carrier on %s (%g of POSTs answered 503, %g with the reply dropped; log in "
               "carrier.log)\n",
               url, c->carrier_error_rate, c->carrier_drop_rate);
        fflush(stdout);
    }
    if (oq_procs_start_workers(run->procs) < 0 || s_wait_workers(run) < 0)
        return -1;
    printf("== %u workers registered (ONCEQ_TEST_HOOKS=1; log in workers.log)\n", c->workers);
    run->worklog = oq_worklog_new(oq_procs_worker_log(run->procs));
    return 0;
}

static int s_setup_attached(s_run_t *run)
{
    oq_chaos_config_t *c = run->config;
    run->front = c->front;
    run->back = c->back;
    run->db_url = c->database;
    if (c->key && oq_curve_load(&run->curve, c->key, c->worker_key, c->broker_key) < 0)
        return -1;
    run->observe = s_observe_new(run);
    if (!run->observe || s_wait_broker(run) < 0)
        return -1;
    printf("== attached to the broker at %s; process faults are skipped\n", run->front);
    if (c->carrier) {
        /* Their carrier gets the run's faults, as ours would at start. */
        run->carrier = oq_carrier_client_new(c->carrier_url);
        if (oq_carrier_client_set_faults(run->carrier, c->carrier_error_rate, c->carrier_drop_rate,
                                         0) < 0) {
            fprintf(stderr, "onceq-chaos: the carrier at %s: %s\n", c->carrier_url,
                    oq_carrier_client_error(run->carrier));
            return -1;
        }
        printf("== the carrier at %s: %g of POSTs answered 503, %g with the reply dropped\n",
               c->carrier_url, c->carrier_error_rate, c->carrier_drop_rate);
    }
    return 0;
}

static int s_prepare_db(s_run_t *run)
{
    PGconn *db = PQconnectdb(run->db_url);
    char err[S_ERR_LEN];
    int rc = -1;
    if (PQstatus(db) != CONNECTION_OK)
        snprintf(err, sizeof err, "%s", PQerrorMessage(db));
    else
        rc = oq_load_prepare_db(run->load, db, err, sizeof err);
    PQfinish(db);
    if (rc < 0)
        fprintf(stderr, "onceq-chaos: the database: %s\n", err);
    return rc;
}

static void s_poll_log(s_run_t *run)
{
    if (run->worklog && oq_worklog_poll(run->worklog, oq_faults_on_log, run->faults) < 0)
        oq_verdict_note(run->verdict, "the worker log could not be read");
}

/* The loop: dispatch, answer, read the log, inject, until every dispatch is
   resolved, every fault is over and the queue is idle, or the settle
   deadline passes. 0, -1 if the run cannot go on. */
static int s_loop(s_run_t *run)
{
    oq_observe_stats_t *stats = calloc(1, sizeof *stats);
    int64_t last_stats_ms = 0, settle_end_ms = 0;
    int rc = 0;
    bool announced = false;
    while (!s_interrupted) {
        int64_t now = oq_support_now_ms();
        oq_load_pump(run->load, now);
        long wait_ms = (long)(oq_load_next_ms(run->load, now) - now);
        zmq_pollitem_t item = {oq_load_socket(run->load), 0, ZMQ_POLLIN, 0};
        zmq_poll(&item, 1,
                 wait_ms < 0                  ? 0
                 : wait_ms > OQ_CHAOS_LOOP_MS ? OQ_CHAOS_LOOP_MS
                                              : wait_ms);
        now = oq_support_now_ms();
        oq_load_receive(run->load, now);
        s_poll_log(run);
        oq_load_counts_t lc;
        oq_load_counts(run->load, &lc);
        if (oq_faults_tick(run->faults, now, lc.sent) < 0) {
            rc = -1;
            break;
        }
        if (run->procs && oq_procs_workers_died(run->procs)) {
            oq_verdict_violation(run->verdict, "the worker supervisor exited during the run");
            rc = -1;
            break;
        }
        bool fresh = false;
        if (now - last_stats_ms >= OQ_CHAOS_STATS_EVERY_MS && oq_faults_broker_up(run->faults)) {
            fresh = oq_observe_stats(run->observe, stats) == 0;
            last_stats_ms = now;
        }
        if (!oq_load_done(run->load) || oq_faults_busy(run->faults))
            continue;
        if (!announced) {
            announced = true;
            settle_end_ms = now + (int64_t)run->config->settle_s * 1000;
            printf("== all %u dispatches answered (%u confirmed) and the faults over; waiting "
                   "up to %u s for the jobs to settle\n",
                   lc.sent, lc.confirmed, run->config->settle_s);
            fflush(stdout);
        }
        uint64_t waiting = stats->ready + stats->delayed + stats->leased + stats->ship_ready +
                           stats->ship_delayed + stats->ship_leased;
        if (fresh && waiting == 0) {
            run->settled = true;
            run->settled_ms = now;
            break;
        }
        if (now >= settle_end_ms) {
            run->settled_ms = now;
            oq_verdict_violation(run->verdict,
                                 "the jobs did not settle within %u s: %" PRIu64 " ready, %" PRIu64
                                 " delayed, %" PRIu64 " leased (shipments: %" PRIu64
                                 " ready, %" PRIu64 " delayed, %" PRIu64 " leased)",
                                 run->config->settle_s, stats->ready, stats->delayed, stats->leased,
                                 stats->ship_ready, stats->ship_delayed, stats->ship_leased);
            break;
        }
    }
    free(stats);
    return rc;
}

static void s_verdict(s_run_t *run)
{
    if (run->procs && oq_procs_stop_workers(run->procs) < 0)
        oq_verdict_note(run->verdict, "the worker pool had to be killed at the end");
    /* Every line the pool wrote, now that it has stopped writing. */
    if (run->worklog) {
        while (oq_worklog_poll(run->worklog, oq_faults_on_log, run->faults) > 0)
            ;
        oq_worklog_finish(run->worklog);
    }
    const oq_chaos_config_t *c = run->config;
    oq_verdict_check_broker(run->verdict, run->observe, run->load, run->settled, c->queue,
                            c->carrier ? c->ship_queue : NULL);
    oq_observe_totals_t totals;
    oq_observe_totals(run->observe, &totals);
    PGconn *db = PQconnectdb(run->db_url);
    if (PQstatus(db) != CONNECTION_OK)
        oq_verdict_violation(run->verdict, "cannot connect to the database for the verdict: %s",
                             PQerrorMessage(db));
    else
        oq_verdict_check_db(run->verdict, db, run->load,
                            run->config->attach ? UINT64_MAX : totals.type_applied);
    if (run->carrier)
        oq_verdict_check_carrier(run->verdict, run->carrier,
                                 PQstatus(db) == CONNECTION_OK ? db : NULL, run->load);
    PQfinish(db);
    oq_load_counts_t lc;
    oq_load_counts(run->load, &lc);
    char kills_path[S_PATH_LEN + S_FILE_LEN];
    snprintf(kills_path, sizeof kills_path, "%s/kills.txt", run->dir);
    oq_verdict_report_t report = {
        .config = run->config,
        .schedule = run->schedule,
        .load = run->load,
        .totals = &totals,
        .worklog = run->worklog,
        .faults = run->faults,
        .kills_path = kills_path,
        .heartbeat_window_s = run->config->heartbeat_ms * run->config->liveness / S_MS_PER_S,
        .retry_after_s = run->config->retry_after_s,
        .run_s = lc.first_sent_ms ? (double)(run->settled_ms - lc.first_sent_ms) / S_MS_PER_S : 0,
        .settled = run->settled,
    };
    oq_verdict_print(run->verdict, stdout, &report);
}

static void s_print_plan(const s_run_t *run)
{
    const oq_chaos_config_t *c = run->config;
    printf("onceq-chaos: seed %" PRIu64 " (run it again with --seed %" PRIu64 ")\n", c->seed,
           c->seed);
    printf("  run directory %s (kept if anything fails)\n", run->dir);
    printf("  %u dispatches at %g/s, %u customers, %u%% re-dispatches, job type %s, queue %s\n",
           c->jobs, c->rate, c->customers, c->redispatch_pct, c->job_type, c->queue);
    if (c->carrier)
        printf("  each dispatch also requests its shipment: %s on queue %s, %u tries\n",
               c->ship_type, c->ship_queue, c->ship_tries);
    for (size_t i = 0; i < c->worker_arg_count; i++)
        printf("%s%s%s", i == 0 ? "  workers also get:" : "", " ", c->worker_args[i]);
    if (c->worker_arg_count)
        printf("\n");
    if (!c->attach)
        printf("  %u workers; heartbeat %u ms x %u; retry_after %g s; job timeout %g s; "
               "hold %u ms\n",
               c->workers, c->heartbeat_ms, c->liveness, c->retry_after_s, c->job_timeout_s,
               c->hold_ms);
    printf("schedule:\n");
    char path[S_PATH_LEN + S_FILE_LEN];
    snprintf(path, sizeof path, "%s/schedule.txt", run->dir);
    if (oq_schedule_count(run->schedule) == 0)
        printf("  no faults\n");
    oq_schedule_print(run->schedule, stdout, path);
    fflush(stdout);
}

static void s_teardown(s_run_t *run, bool remove_dir)
{
    oq_faults_destroy(&run->faults);
    oq_load_destroy(&run->load);
    oq_worklog_destroy(&run->worklog);
    oq_observe_destroy(&run->observe);
    oq_carrier_client_destroy(&run->carrier);
    oq_procs_destroy(&run->procs); /* stops the pool, the broker, the cluster */
    oq_verdict_destroy(&run->verdict);
    oq_schedule_destroy(&run->schedule);
    if (remove_dir) {
        if (oq_support_remove_tree(run->dir) < 0)
            fprintf(stderr, "onceq-chaos: could not remove %s\n", run->dir);
    } else {
        printf("run directory kept: %s\n", run->dir);
    }
}

int main(int argc, char **argv)
{
    oq_chaos_config_t config;
    int parsed = s_parse(argc, argv, &config);
    if (parsed != 0)
        return parsed > 0 ? S_EXIT_PASS : S_EXIT_USAGE;
    struct sigaction sa = {.sa_handler = s_on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    s_run_t run = {.config = &config};
    if (s_make_dir(&run) < 0)
        return S_EXIT_USAGE;
    run.schedule = oq_schedule_new(&config);
    run.verdict = oq_verdict_new();
    s_print_plan(&run);

    int status = S_EXIT_USAGE;
    if ((config.attach ? s_setup_attached(&run) : s_setup_own(&run)) < 0)
        goto done;
    run.load = oq_load_new(&config, run.schedule, config.id_base);
    if (s_prepare_db(&run) < 0 || oq_load_connect(run.load, run.front, &run.curve) < 0)
        goto done;
    run.faults = oq_faults_new(&config, run.schedule, run.procs, run.observe, run.load, run.verdict,
                               run.front, run.back, &run.curve, run.carrier);
    printf("== dispatching\n");
    fflush(stdout);
    int rc = s_loop(&run);
    if (oq_faults_close(run.faults) < 0 && rc == 0)
        oq_verdict_note(run.verdict, "the broker or the database was not back at the end");
    if (s_interrupted) {
        printf("\ninterrupted\n");
        status = S_EXIT_INTERRUPTED;
        goto done;
    }
    s_verdict(&run);
    status = rc < 0                          ? S_EXIT_USAGE
             : oq_verdict_count(run.verdict) ? S_EXIT_VIOLATIONS
                                             : S_EXIT_PASS;
done:
    if (s_interrupted)
        status = S_EXIT_INTERRUPTED;
    fflush(stdout);
    s_teardown(&run, status == S_EXIT_PASS && !config.keep);
    return status;
}
