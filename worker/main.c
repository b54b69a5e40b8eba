/*  main.c: onceq-worker's command line. Flags fall back to environment
    variables, then to the defaults in onceq/limits.h. Without --processes the
    process is a single worker; with it, a supervisor of that many. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onceq/config.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "onceq/effects.h"
#include "onceq/worker.h"
#include "points/handler.h"
#include "points/points_limits.h"
#include "points_hooks.h"
#include "supervisor.h"
#include "worker.h"
#include "worker_limits.h"

#define S_PROGRAM    "onceq-worker"
#define S_EXIT_USAGE 2
#define S_MAX_PORT   65535

/* What each worker process needs: its own settings and those of the
   handlers that keep per-process state. */
typedef struct {
    oq_worker_config_t worker;
    oq_points_config_t points;
    bool test_hooks; /* grant_points with its test hooks, and the unguarded twin */
} s_config_t;

static void s_usage(FILE *out)
{
    fprintf(out,
            "usage: " S_PROGRAM " [options]\n"
            "\n"
            "An onceq worker: takes jobs from the broker one at a time, runs the handler\n"
            "registered for each job's type, and acks the outcome.\n"
            "\n"
            "options (environment variable in brackets):\n"
            "  --broker ENDPOINT      the broker's worker socket, tcp://HOST:PORT or\n"
            "                         ipc://PATH [ONCEQ_WORKER_BROKER]\n"
            "                         (default %s)\n"
            "  --name NAME            shown in the broker's stats; 1 to %d of\n"
            "                         A-Z a-z 0-9 _ . : - [ONCEQ_WORKER_NAME] (default: the\n"
            "                         host name)\n"
            "  --heartbeat-ms N       heartbeat interval until the broker's welcome sets\n"
            "                         its own, %d to %d [ONCEQ_HEARTBEAT_MS] (default %d)\n"
            "  --processes N          supervise N worker processes (1 to %d) and restart\n"
            "                         any that dies [ONCEQ_WORKER_PROCESSES] (default: this\n"
            "                         process is the one worker)\n"
            "  --stop-timeout S       with --processes: how long workers get to finish\n"
            "                         their jobs after SIGTERM before they are killed\n"
            "                         [ONCEQ_WORKER_STOP_TIMEOUT] (default %d)\n"
            "  --log-level LEVEL      debug, info, warn or error [ONCEQ_LOG_LEVEL]\n"
            "                         (default info)\n"
            "  --database URL         PostgreSQL for grant_points, a libpq conninfo or URI\n"
            "                         [ONCEQ_DATABASE_URL] (default: libpq's defaults,\n"
            "                         PGHOST, PGDATABASE, ...); connected on the first job\n"
            "  --isolation LEVEL      read-committed, repeatable-read or serializable\n"
            "                         [ONCEQ_DB_ISOLATION] (default read-committed)\n"
            "  --help                 this text\n"
            "  --version              the version\n"
            "\n"
            "Built-in job types and their payloads:\n"
            "  noop  {}                                      ok\n"
            "  sleep {ms: uint}                              sleeps ms, then ok\n"
            "  fail  {permanent?: bool, message?: str}       retry, or fail if permanent\n"
            "  crash {}                                      aborts the process mid-job\n"
            "\n"
            "Database job types:\n"
            "  grant_points {order_id: uint, customer_id: uint, points: 1..%d}\n"
            "      grants an order's points once: ok applied, or ok already_applied if\n"
            "      the order was granted before; fail for an unknown customer\n"
            "\n"
            "SIGTERM or SIGINT: take no new job, finish the current one, ack it, exit 0.\n"
            "Exit status: 0 after a graceful stop, %d on a usage error, %d after a handler\n"
            "ran past its job's timeout, %d if the worker could not start.\n",
            OQ_DEFAULT_BACK_ENDPOINT, OQ_MAX_NAME_LEN, OQ_MIN_HEARTBEAT_MS, OQ_MAX_HEARTBEAT_MS,
            OQ_DEFAULT_HEARTBEAT_MS, OQ_SUPERVISOR_MAX_PROCESSES, OQ_SUPERVISOR_STOP_MS / 1000,
            OQ_MAX_POINTS, S_EXIT_USAGE, OQ_EXIT_TIMEOUT, OQ_EXIT_BROKEN);
}

/* A value from its flag, else from its environment variable; *origin names
   where it came from, for the error message. */
static const char *s_value(const char *flag_value, const char *flag, const char *env,
                           const char **origin)
{
    *origin = flag_value ? flag : env;
    return oq_config_str(flag_value, env, NULL);
}

static int s_bad(const char *origin, const char *value, const char *expected)
{
    fprintf(stderr, S_PROGRAM ": invalid %s \"%s\": expected %s\n", origin, value, expected);
    return S_EXIT_USAGE;
}

/* tcp://HOST:PORT or ipc://PATH. libzmq would refuse others at connect time,
   in a child process and in a log line; checking here says it at once. */
static bool s_endpoint_valid(const char *endpoint)
{
    if (strncmp(endpoint, "ipc://", 6) == 0)
        return endpoint[6] != 0;
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return false;
    const char *host = endpoint + 6;
    const char *colon = strrchr(host, ':');
    uint64_t port;
    return colon && colon > host && oq_config_uint(colon + 1, 1, S_MAX_PORT, &port) == 0;
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

/* One worker process: the body of the process itself or of each child. */
static int s_run_worker(void *arg)
{
    const s_config_t *config = arg;
    /* Each process's lines carry its pid, so that a supervisor's children
       can be told apart in one log. */
    static char log_name[sizeof S_PROGRAM + 24];
    snprintf(log_name, sizeof log_name, S_PROGRAM "[%d]", (int)getpid());
    oq_log_init(log_name);
    oq_registry_t *registry = oq_registry_new();
    oq_builtin_register(registry);
    /* Made here, in the process that runs the jobs: a database connection
       must not cross a fork. It connects on the first job. */
    oq_points_handler_t *points = oq_points_handler_new(&config->points);
    int registered = config->test_hooks ? oq_points_test_register(registry, points)
                                        : oq_points_handler_register(points, registry);
    if (registered < 0)
        oq_error("the %s handler is not available", OQ_POINTS_JOB_TYPE);
    int status = oq_worker_run(&config->worker, &registry);
    oq_registry_destroy(&registry);
    /* After oq_worker_run, which has stopped the job thread. */
    oq_points_handler_destroy(&points);
    return status;
}

int main(int argc, char **argv)
{
    oq_log_init(S_PROGRAM);
    enum {
        O_BROKER = 1000,
        O_NAME,
        O_HEARTBEAT,
        O_PROCESSES,
        O_STOP,
        O_LOG_LEVEL,
        O_DATABASE,
        O_ISOLATION,
        O_HELP,
        O_VERSION
    };
    static const struct option options[] = {
        {"broker", required_argument, 0, O_BROKER},
        {"name", required_argument, 0, O_NAME},
        {"heartbeat-ms", required_argument, 0, O_HEARTBEAT},
        {"processes", required_argument, 0, O_PROCESSES},
        {"stop-timeout", required_argument, 0, O_STOP},
        {"log-level", required_argument, 0, O_LOG_LEVEL},
        {"database", required_argument, 0, O_DATABASE},
        {"isolation", required_argument, 0, O_ISOLATION},
        {"help", no_argument, 0, O_HELP},
        {"version", no_argument, 0, O_VERSION},
        {0, 0, 0, 0},
    };
    const char *broker = NULL, *name = NULL, *heartbeat = NULL, *processes = NULL, *stop = NULL,
               *log_level = NULL, *database = NULL, *isolation = NULL;
    int opt;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case O_BROKER:
            broker = optarg;
            break;
        case O_NAME:
            name = optarg;
            break;
        case O_HEARTBEAT:
            heartbeat = optarg;
            break;
        case O_PROCESSES:
            processes = optarg;
            break;
        case O_STOP:
            stop = optarg;
            break;
        case O_LOG_LEVEL:
            log_level = optarg;
            break;
        case O_DATABASE:
            database = optarg;
            break;
        case O_ISOLATION:
            isolation = optarg;
            break;
        case O_HELP:
            s_usage(stdout);
            return 0;
        case O_VERSION:
            printf(S_PROGRAM " %s\n", ONCEQ_VERSION);
            return 0;
        default: /* getopt has said what was wrong */
            fprintf(stderr, S_PROGRAM ": see --help\n");
            return S_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, S_PROGRAM ": unexpected argument \"%s\" (see --help)\n", argv[optind]);
        return S_EXIT_USAGE;
    }

    const char *origin, *v;
    uint64_t u;
    if ((v = s_value(log_level, "--log-level", "ONCEQ_LOG_LEVEL", &origin))) {
        oq_log_level_t level;
        if (oq_log_parse_level(v, &level) < 0)
            return s_bad(origin, v, "debug, info, warn or error");
        oq_log_set_level(level);
    }

    s_config_t all = {
        .worker = {.endpoint = OQ_DEFAULT_BACK_ENDPOINT, .heartbeat_ms = OQ_DEFAULT_HEARTBEAT_MS},
        .points = {.isolation = OQ_TXN_READ_COMMITTED},
    };
    oq_worker_config_t *config = &all.worker;
    if ((v = s_value(broker, "--broker", "ONCEQ_WORKER_BROKER", &origin))) {
        if (!s_endpoint_valid(v))
            return s_bad(origin, v, "tcp://HOST:PORT or ipc://PATH");
        config->endpoint = v;
    }
    if ((v = s_value(name, "--name", "ONCEQ_WORKER_NAME", &origin))) {
        if (!oq_proto_name_valid(v, strlen(v)))
            return s_bad(origin, v, "1 to 64 characters of A-Z a-z 0-9 _ . : -");
        config->name = v;
    } else {
        config->name = s_default_name();
    }
    if ((v = s_value(heartbeat, "--heartbeat-ms", "ONCEQ_HEARTBEAT_MS", &origin))) {
        if (oq_config_uint(v, OQ_MIN_HEARTBEAT_MS, OQ_MAX_HEARTBEAT_MS, &u) < 0)
            return s_bad(origin, v, "milliseconds from 10 to 60000");
        config->heartbeat_ms = (uint32_t)u;
    }

    /* The URL is not checked here: libpq says what is wrong with it on the
       first job, and a worker without a database still runs the others. */
    all.points.database_url = oq_config_str(database, "ONCEQ_DATABASE_URL", "");
    if ((v = s_value(isolation, "--isolation", "ONCEQ_DB_ISOLATION", &origin))) {
        if (oq_txn_isolation_parse(v, &all.points.isolation) < 0)
            return s_bad(origin, v, "read-committed, repeatable-read or serializable");
    }
    all.test_hooks = oq_points_test_hooks_wanted();

    oq_supervisor_config_t supervisor = {0, OQ_SUPERVISOR_STOP_MS};
    if ((v = s_value(processes, "--processes", "ONCEQ_WORKER_PROCESSES", &origin))) {
        if (oq_config_uint(v, 1, OQ_SUPERVISOR_MAX_PROCESSES, &u) < 0)
            return s_bad(origin, v, "a number of processes from 1 to 256");
        supervisor.processes = (uint32_t)u;
    }
    if ((v = s_value(stop, "--stop-timeout", "ONCEQ_WORKER_STOP_TIMEOUT", &origin))) {
        if (oq_config_seconds(v, OQ_MAX_TIMEOUT_MS, &supervisor.stop_timeout_ms) < 0)
            return s_bad(origin, v, "seconds from 0 to 86400");
        if (stop && supervisor.processes == 0) {
            fprintf(stderr, S_PROGRAM ": --stop-timeout applies only with --processes\n");
            return S_EXIT_USAGE;
        }
    }

    if (supervisor.processes == 0)
        return s_run_worker(&all);
    return oq_supervisor_run(&supervisor, s_run_worker, &all) == 0 ? 0 : OQ_EXIT_BROKEN;
}
