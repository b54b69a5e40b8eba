/*  worker_main.c: oq_worker_main, the whole worker program over a user's
    registry: the flag table (onceq/flags.h; flags fall back to environment
    variables, then to the defaults in onceq/limits.h), then a single worker
    or, with --processes, a supervisor of that many. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onceq/flags.h"
#include "onceq/iocpus.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "onceq/worker.h"
#include "registry.h"
#include "supervisor.h"
#include "worker.h"
#include "worker_limits.h"

#define S_EXIT_USAGE   2
#define S_PROGRAM_LEN  64
#define S_DEFAULT_LEN  32
#define S_LOG_NAME_LEN (S_PROGRAM_LEN + 24)

/* What each worker process runs with. */
typedef struct {
    oq_worker_config_t worker;
    oq_registry_t *registry; /* each process's own copy after a fork */
} s_run_t;

static char s_program[S_PROGRAM_LEN] = "onceq-worker";
static oq_worker_settings_t s_settings;
static bool s_settings_ready;

const oq_worker_settings_t *oq_worker_settings(void)
{
    return s_settings_ready ? &s_settings : NULL;
}

static int s_parse_name(const char *value, void *dest, char *why, size_t why_len)
{
    if (!oq_proto_name_valid(value, strlen(value)))
        return -1;
    *(const char **)dest = value;
    return 0;
}

/* --queue high,default: the worker's queues, highest priority first. */
static int s_parse_queues(const char *value, void *dest, char *why, size_t why_len)
{
    return oq_worker_parse_queues(dest, value, why, why_len);
}

/* --prefetch auto, or a fixed N (1 ... OQ_WORKER_PREFETCH_MAX). With auto
   the worker may hold up to OQ_WORKER_PREFETCH_AUTO_CAP as its handlers'
   run times allow (prefetch.h), raised for a type that takes batches
   (oq_session_set_batch). */
static int s_parse_prefetch(const char *value, void *dest, char *why, size_t why_len)
{
    oq_worker_config_t *worker = dest;
    if (strcmp(value, "auto") == 0) {
        worker->prefetch = OQ_WORKER_PREFETCH_AUTO_CAP;
        worker->prefetch_auto = true;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long n = strtoul(value, &end, 10);
    if (errno || end == value || *end || value[0] == '-' || value[0] == '+' || n < 1 ||
        n > OQ_WORKER_PREFETCH_MAX)
        return -1; /* the error says the flag's expected */
    worker->prefetch = (uint32_t)n;
    worker->prefetch_auto = false;
    return 0;
}

/* --key and --broker-key: both or neither; each file is read here, so a
   bad one stops the worker before it starts. 0, or -1 after saying why. */
static int s_load_keys(oq_worker_config_t *worker, const char *key, const char *broker_key)
{
    if (!key && !broker_key)
        return 0;
    if (!key || !broker_key) {
        fprintf(stderr,
                "%s: CURVE needs both --key (ONCEQ_WORKER_KEY) and --broker-key "
                "(ONCEQ_BROKER_KEY); only %s is set\n",
                s_program, key ? "--key" : "--broker-key");
        return -1;
    }
    char why[1024];
    if (oq_keys_load_pair(key, &worker->pair, why, sizeof why) < 0 ||
        oq_keys_load_public(broker_key, worker->broker_key, why, sizeof why) < 0) {
        fprintf(stderr, "%s: %s\n", s_program, why);
        return -1;
    }
    worker->curve = true;
    return 0;
}

/* The host name, if it is a valid worker name. */
static const char *s_default_name(void)
{
    static char host[OQ_MAX_NAME_LEN + 2];
    if (gethostname(host, sizeof host) < 0)
        return NULL;
    host[sizeof host - 1] = 0;
    return oq_proto_name_valid(host, strlen(host)) ? host : NULL;
}

static void s_usage(const oq_flag_t *flags, size_t count, const oq_registry_t *registry)
{
    printf("usage: %s [options]\n"
           "\n"
           "An onceq worker: takes jobs from the broker, runs them one at a time with the\n"
           "handler registered for each job's type, and acks each outcome.\n"
           "\n"
           "options (environment variable in brackets):\n",
           s_program);
    oq_flags_help(flags, count, stdout);
    size_t n = registry ? oq_registry_count(registry) : 0;
    printf("\nJob types this worker handles (%zu):\n ", n);
    int col = 1;
    for (size_t i = 0; i < n; i++) {
        const char *type = oq_registry_type(registry, i);
        int len = (int)strlen(type) + (i + 1 < n ? 1 : 0);
        if (col + 1 + len > 79) {
            printf("\n ");
            col = 1;
        }
        col += printf(" %s%s", type, i + 1 < n ? "," : "");
    }
    printf("%s\n"
           "\n"
           "SIGTERM or SIGINT: take no new job, finish the current one, ack it, exit 0.\n"
           "Exit status: 0 after a graceful stop, %d on a usage error, %d after a handler\n"
           "ran past its job's timeout, %d if the worker could not start.\n",
           n ? "" : " none", S_EXIT_USAGE, OQ_EXIT_TIMEOUT, OQ_EXIT_BROKEN);
}

/* The worker's own flags followed by the handlers' (oq_registry_add_flag)
   under a heading of their own, into all (OQ_FLAGS_MAX entries); *count is
   the worker's on entry and the total on return. 0, or -1 after saying
   why a handler's flag cannot be taken. */
static int s_with_handler_flags(const oq_flag_t *own, size_t own_count,
                                const oq_registry_t *registry, oq_flag_t *all, size_t *count)
{
    size_t extra = 0;
    const oq_flag_t *theirs = registry ? oq_registry_flags(registry, &extra) : NULL;
    if (own_count + (extra ? 1 + extra : 0) > OQ_FLAGS_MAX) {
        fprintf(stderr, "%s: too many flags (the handlers added %zu)\n", s_program, extra);
        return -1;
    }
    memcpy(all, own, own_count * sizeof *own);
    size_t n = own_count;
    if (extra)
        all[n++] = (oq_flag_t){.kind = OQ_FLAG_SECTION, .help = "options of the handlers:"};
    for (size_t i = 0; i < extra; i++) {
        for (size_t k = 0; k < own_count; k++) {
            if (own[k].name && strcmp(own[k].name, theirs[i].name) == 0) {
                fprintf(stderr, "%s: a handler's flag --%s clashes with the worker's own\n",
                        s_program, theirs[i].name);
                return -1;
            }
        }
        all[n++] = theirs[i];
    }
    *count = n;
    return 0;
}

/* One worker process: the body of the process itself or of each child. */
static int s_run_worker(void *arg)
{
    s_run_t *run = arg;
    /* Each process's lines carry its pid, so that a supervisor's children
       can be told apart in one log. */
    static char log_name[S_LOG_NAME_LEN];
    snprintf(log_name, sizeof log_name, "%s[%d]", s_program, (int)getpid());
    oq_log_init(log_name);
    return oq_worker_run(&run->worker, &run->registry);
}

int oq_worker_main(int argc, char **argv, oq_registry_t *handlers)
{
    oq_registry_t *registry = handlers;
    if (argc > 0 && argv[0] && argv[0][0]) {
        char path[S_PROGRAM_LEN * 4];
        snprintf(path, sizeof path, "%s", argv[0]);
        snprintf(s_program, sizeof s_program, "%s", basename(path));
    }
    oq_log_init(s_program);

    static const char *const isolations[] = {"read-committed", "repeatable-read", "serializable",
                                             NULL};
    s_run_t run = {.worker = {.endpoint = OQ_DEFAULT_BACK_ENDPOINT,
                              .heartbeat_ms = OQ_DEFAULT_HEARTBEAT_MS,
                              .idle_release_ms = OQ_WORKER_IDLE_RELEASE_MS}};
    oq_supervisor_config_t supervisor = {0, OQ_SUPERVISOR_STOP_MS};
    oq_log_level_t level = OQ_LOG_INFO;
    const char *database = NULL, *key = NULL, *broker_key = NULL;
    int isolation = 0;
    int64_t db_timeout_ms = 0;
    bool help = false, version = false;
    oq_flag_src_t stop_src = OQ_FLAG_SRC_NONE;
    char heartbeat_def[S_DEFAULT_LEN], stop_def[S_DEFAULT_LEN], max_name[S_DEFAULT_LEN * 4];
    char idle_def[S_DEFAULT_LEN], prefetch_expected[S_DEFAULT_LEN * 2];
    snprintf(prefetch_expected, sizeof prefetch_expected, "auto or a number from 1 to %d",
             OQ_WORKER_PREFETCH_MAX);
    char prefetch_help[768];
    snprintf(prefetch_help, sizeof prefetch_help,
             "jobs the worker may hold at once, the running one included: the next ones wait "
             "here leased (handed back unrun if they wait half their timeout) so no round trip "
             "to the broker comes between two jobs. auto: as many as fit %d ms of work at its "
             "handlers' average run time, from 1 up to %d (short jobs hold %d, jobs of more "
             "than %d ms run one at a time; a type with a batch function lets it hold a full "
             "batch behind the running job, up to %d); N: always N; 1: one job at a time",
             OQ_WORKER_PREFETCH_BUDGET_US / 1000, OQ_WORKER_PREFETCH_AUTO_CAP,
             OQ_WORKER_PREFETCH_AUTO_CAP, OQ_WORKER_PREFETCH_BUDGET_US / 1000,
             OQ_WORKER_PREFETCH_AUTO_BATCH_CAP);
    char batch_def[S_DEFAULT_LEN];
    snprintf(batch_def, sizeof batch_def, "%d", OQ_WORKER_MAX_BATCH);
    snprintf(idle_def, sizeof idle_def, "%d", OQ_WORKER_IDLE_RELEASE_MS / 1000);
    snprintf(heartbeat_def, sizeof heartbeat_def, "%d", OQ_DEFAULT_HEARTBEAT_MS);
    snprintf(stop_def, sizeof stop_def, "%d", OQ_SUPERVISOR_STOP_MS / 1000);
    snprintf(max_name, sizeof max_name, "1 to %d characters of A-Z a-z 0-9 _ . : -",
             OQ_MAX_NAME_LEN);
    const oq_flag_t flags[] = {
        {.name = "broker",
         .env = "ONCEQ_WORKER_BROKER",
         .kind = OQ_FLAG_ENDPOINT,
         .arg = "ENDPOINT",
         .def = OQ_DEFAULT_BACK_ENDPOINT,
         .dest = &run.worker.endpoint,
         .help = "the broker's worker socket, tcp://HOST:PORT or ipc://PATH"},
        {.name = "key",
         .env = "ONCEQ_WORKER_KEY",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .dest = &key,
         .def_text = "none: plaintext, for a broker run --insecure",
         .help = "this worker's secret key file, NAME.key_secret (onceq keygen): speak CURVE "
                 "to the broker; its NAME.key must be in the broker's workers/ directory"},
        {.name = "broker-key",
         .env = "ONCEQ_BROKER_KEY",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .dest = &broker_key,
         .def_text = "none",
         .help = "the broker's public key file (broker.key), with --key"},
        {.name = "name",
         .env = "ONCEQ_WORKER_NAME",
         .kind = OQ_FLAG_CUSTOM,
         .arg = "NAME",
         .parse = s_parse_name,
         .expected = max_name,
         .def_text = "the host name",
         .dest = &run.worker.name,
         .help = "shown in the broker's stats"},
        {.name = "queue",
         .env = "ONCEQ_WORKER_QUEUES",
         .kind = OQ_FLAG_CUSTOM,
         .arg = "LIST",
         .parse = s_parse_queues,
         .expected = "a comma-separated list of queue names",
         .def_text = "every queue",
         .dest = &run.worker,
         .help = "the queues to serve, highest priority first, comma-separated "
                 "(high,default): a job of a later queue is taken only while the earlier "
                 "ones have none ready"},
        {.name = "heartbeat-ms",
         .env = "ONCEQ_HEARTBEAT_MS",
         .kind = OQ_FLAG_MS,
         .arg = "N",
         .min = OQ_MIN_HEARTBEAT_MS,
         .max = OQ_MAX_HEARTBEAT_MS,
         .def = heartbeat_def,
         .dest = &run.worker.heartbeat_ms,
         .help = "heartbeat interval until the broker's welcome sets its own"},
        {.name = "prefetch",
         .env = "ONCEQ_PREFETCH",
         .kind = OQ_FLAG_CUSTOM,
         .arg = "auto|N",
         .parse = s_parse_prefetch,
         .expected = prefetch_expected,
         .def = "auto",
         .dest = &run.worker,
         .help = prefetch_help},
        {.name = "batch",
         .env = "ONCEQ_BATCH",
         .kind = OQ_FLAG_U32,
         .arg = "N",
         .min = 1,
         .max = OQ_WORKER_MAX_BATCH,
         .def = batch_def,
         .def_text = "the type's own most",
         .dest = &run.worker.batch,
         .help = "the most held jobs of one type handed to its batch function in one call "
                 "(a type that declared one, oq_registry_set_batch); each is still acked on "
                 "its own; 1: no batches. Batches form only from jobs held: --prefetch "
                 "auto or above 2"},
        {.name = "processes",
         .env = "ONCEQ_WORKER_PROCESSES",
         .kind = OQ_FLAG_U32,
         .arg = "N",
         .min = 1,
         .max = OQ_SUPERVISOR_MAX_PROCESSES,
         .dest = &supervisor.processes,
         .def_text = "one worker, no supervisor",
         .help = "supervise N worker processes and restart any that dies"},
        {.name = "stop-timeout",
         .env = "ONCEQ_WORKER_STOP_TIMEOUT",
         .kind = OQ_FLAG_SECONDS,
         .arg = "S",
         .max = (uint64_t)OQ_MAX_TIMEOUT_MS,
         .def = stop_def,
         .dest = &supervisor.stop_timeout_ms,
         .src = &stop_src,
         .help = "with --processes: how long workers get to finish their jobs after "
                 "SIGTERM before they are killed"},
        OQ_FLAG_IO_CPUS(&run.worker.io_cpus),
        OQ_FLAG_LOG_LEVEL(&level),
        {.name = "database",
         .env = "ONCEQ_DATABASE_URL",
         .kind = OQ_FLAG_STRING,
         .arg = "URL",
         .dest = &database,
         .def_text = "libpq's defaults, PGHOST, PGDATABASE, ...",
         .help = "PostgreSQL for the handlers that use one, a libpq conninfo or URI; "
                 "handlers connect on their first job"},
        {.name = "isolation",
         .env = "ONCEQ_DB_ISOLATION",
         .kind = OQ_FLAG_ENUM,
         .arg = "LEVEL",
         .words = isolations,
         .def = isolations[0],
         .dest = &isolation,
         .help = "the transaction isolation level for those handlers: read-committed, "
                 "repeatable-read or serializable"},
        {.name = "db-timeout",
         .env = "ONCEQ_DB_TIMEOUT",
         .kind = OQ_FLAG_SECONDS,
         .arg = "S",
         .max = (uint64_t)OQ_MAX_TIMEOUT_MS,
         .def = "0",
         .dest = &db_timeout_ms,
         .help = "the longest those handlers' database work may wait on the server per job, "
                 "when shorter than the job's timeout: statements then end at it less a "
                 "margin, and a server that answers nothing hands the job back (no try used) "
                 "after it rather than near the job's timeout; 0: the job's timeout"},
        {.name = "idle-release",
         .env = "ONCEQ_WORKER_IDLE_RELEASE",
         .kind = OQ_FLAG_SECONDS,
         .arg = "S",
         .max = (uint64_t)OQ_MAX_TIMEOUT_MS,
         .def = idle_def,
         .dest = &run.worker.idle_release_ms,
         .help = "after S seconds without a job, handlers close their database "
                 "connections (the next job opens one again); 0: keep them"},
        {.name = "help", .kind = OQ_FLAG_BOOL, .stop = true, .dest = &help, .help = "this text"},
        {.name = "version",
         .kind = OQ_FLAG_BOOL,
         .stop = true,
         .dest = &version,
         .help = "the version"},
    };
    size_t count = OQ_FLAGS_COUNT(flags);
    oq_flag_t all[OQ_FLAGS_MAX];
    int rc = s_with_handler_flags(flags, count, registry, all, &count);
    if (rc == 0)
        rc = oq_flags_parse(s_program, all, count, argc, argv);
    if (rc < 0 || help || version) {
        if (help)
            s_usage(all, count, registry);
        else if (version && strcmp(s_program, "onceq-worker") == 0)
            printf("%s %s\n", s_program, ONCEQ_VERSION);
        else if (version)
            printf("%s (libonceq-worker %s)\n", s_program, ONCEQ_VERSION);
        oq_registry_destroy(&registry);
        return rc < 0 ? S_EXIT_USAGE : 0;
    }
    oq_log_set_level(level);
    if (!registry || oq_registry_count(registry) == 0) {
        fprintf(stderr,
                "%s: no job handlers registered: a worker needs at least one "
                "(oq_registry_add before oq_worker_main)\n",
                s_program);
        oq_registry_destroy(&registry);
        return S_EXIT_USAGE;
    }
    if (stop_src == OQ_FLAG_SRC_ARG && supervisor.processes == 0) {
        fprintf(stderr, "%s: --stop-timeout applies only with --processes\n", s_program);
        oq_registry_destroy(&registry);
        return S_EXIT_USAGE;
    }
    if (s_load_keys(&run.worker, key, broker_key) < 0) {
        oq_registry_destroy(&registry);
        return S_EXIT_USAGE;
    }
    if (!run.worker.name)
        run.worker.name = s_default_name();

    /* The URL is not checked here: the handler's database client says what
       is wrong with it on the first job, and the other handlers still run. */
    s_settings.database_url = strdup(database ? database : "");
    s_settings.isolation = isolations[isolation];
    s_settings.db_timeout_ms = db_timeout_ms;
    s_settings_ready = true;

    run.registry = registry;
    if (supervisor.processes == 0)
        return s_run_worker(&run);
    /* Each child runs on its own copy of the registry; this one is the
       supervisor's, which runs no job. */
    int status = oq_supervisor_run(&supervisor, s_run_worker, &run) == 0 ? 0 : OQ_EXIT_BROKEN;
    oq_registry_destroy(&registry);
    return status;
}
