/*  grant_batch_bench.c: grant-batch-bench, the throughput of grant_points'
    batch function (oq_points_grant_batch) on PostgreSQL, without a broker:
    what batched effects can give before the runtime's prefetch has to feed
    them. tests/bench/pg_run.sh sets it beside pgbench running the single
    grant transaction with the same number of connections.

    W forked processes, each with its own connection (a worker process's
    one), share N grant_points jobs of new orders (random order ids, as
    pgbench's script draws them; customers 1..C at random; 1 point) and
    call the batch function with B of them at a time, exactly as a worker
    would with --batch B: decode, one transaction per batch, a report per
    job. Every report must be ok/applied, else the run fails. The clock
    runs from the moment every process has connected and run one warm-up
    batch until the last one is done; jobs/s = N / that time. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_flags.h"
#include "onceq/clock.h"
#include "onceq/effects.h"
#include "onceq/log.h"
#include "onceq/worker.h"
#include "payloads.h"
#include "points/handler.h"

#define S_DEFAULT_JOBS      5000
#define S_DEFAULT_BATCH     32
#define S_DEFAULT_CUSTOMERS 1000
#define S_DEFAULT_WORKERS   1
#define S_MAX_JOBS          10000000
#define S_MAX_WORKERS       64
#define S_JOB_TIMEOUT_MS    60000
#define S_US_PER_S          1000000.0
/* Orders are drawn from 1 .. this, as pgbench's random(1, 9e18). */
#define S_MAX_ORDER 9000000000000000000ULL

typedef struct {
    const char *database;
    uint64_t jobs, batch, customers, workers;
} s_opts_t;

typedef struct {
    msgpack_sbuffer buf;
    msgpack_unpacked unpacked;
    oq_job_t job;
} s_payload_t;

static uint64_t s_random(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static void s_make_job(s_payload_t *p, uint64_t id, uint64_t order, uint64_t customer)
{
    oq_payload_grant(&p->buf, order, customer, 1);
    size_t off = 0;
    msgpack_unpacked_destroy(&p->unpacked);
    msgpack_unpacked_init(&p->unpacked);
    msgpack_unpack_next(&p->unpacked, p->buf.data, p->buf.size, &off);
    p->job = (oq_job_t){.id = id,
                        .type = "grant_points",
                        .queue = "default",
                        .attempt = 1,
                        .max_tries = 3,
                        .timeout_ms = S_JOB_TIMEOUT_MS,
                        .payload = &p->unpacked.data};
}

/* Run `count` jobs in batches; 0 if every one was applied. */
static int s_run(oq_points_handler_t *handler, const s_opts_t *opts, uint64_t count,
                 uint64_t *random, s_payload_t *payloads, const oq_job_t **jobs,
                 oq_report_t *reports)
{
    for (uint64_t done = 0; done < count;) {
        size_t n = (size_t)(count - done < opts->batch ? count - done : opts->batch);
        for (size_t i = 0; i < n; i++) {
            s_make_job(&payloads[i], done + i + 1, 1 + s_random(random) % S_MAX_ORDER,
                       1 + s_random(random) % opts->customers);
            jobs[i] = &payloads[i].job;
        }
        memset(reports, 0, n * sizeof *reports);
        /* A batch of one runs the single grant transaction. */
        oq_points_grant_batch(jobs, n, handler, reports);
        for (size_t i = 0; i < n; i++) {
            if (reports[i].outcome != OQ_OUTCOME_OK || reports[i].result != OQ_RESULT_APPLIED) {
                fprintf(stderr, "grant-batch-bench: job not applied: %s\n", reports[i].error);
                return -1;
            }
        }
        done += n;
    }
    return 0;
}

/* One worker process: connect and warm up, say so on ready, wait for go
   to close, run its share. Returns the exit status. */
static int s_worker(const s_opts_t *opts, uint64_t share, int ready, int go)
{
    oq_points_config_t config = {.database_url = opts->database,
                                 .isolation = OQ_TXN_READ_COMMITTED};
    oq_points_handler_t *handler = oq_points_handler_new(&config);
    s_payload_t *payloads = calloc(opts->batch, sizeof *payloads);
    const oq_job_t **jobs = calloc(opts->batch, sizeof *jobs);
    oq_report_t *reports = calloc(opts->batch, sizeof *reports);
    if (!payloads || !jobs || !reports)
        return 1;
    for (uint64_t i = 0; i < opts->batch; i++) {
        msgpack_sbuffer_init(&payloads[i].buf);
        msgpack_unpacked_init(&payloads[i].unpacked);
    }
    uint64_t random = ((uint64_t)getpid() << 32) ^ (uint64_t)oq_clock_mono_us();
    if (random == 0)
        random = 1;
    int rc = s_run(handler, opts, opts->batch, &random, payloads, jobs, reports);
    char byte = rc == 0 ? 'r' : 'x';
    if (write(ready, &byte, 1) != 1)
        rc = -1;
    ssize_t got;
    while ((got = read(go, &byte, 1)) < 0 && errno == EINTR)
        ;
    if (rc == 0)
        rc = s_run(handler, opts, share, &random, payloads, jobs, reports);
    for (uint64_t i = 0; i < opts->batch; i++) {
        msgpack_unpacked_destroy(&payloads[i].unpacked);
        msgpack_sbuffer_destroy(&payloads[i].buf);
    }
    free(reports);
    free(jobs);
    free(payloads);
    oq_points_handler_destroy(&handler);
    return rc == 0 ? 0 : 1;
}

static const char s_usage[] =
    "usage: grant-batch-bench --database URL [options]\n"
    "\n"
    "Run grant_points jobs of new orders through the batch function of the\n"
    "points handler (oq_points_grant_batch), B jobs per transaction, in W\n"
    "processes with a connection each, and print the jobs per second.\n";

/* 0 to run, 1 after --help, -1 after a usage error. */
static int s_parse(int argc, char **argv, s_opts_t *opts)
{
    *opts = (s_opts_t){0};
    const oq_flag_t flags[] = {
        {.name = "database",
         .kind = OQ_FLAG_STRING,
         .arg = "URL",
         .dest = &opts->database,
         .help =
             "required: the libpq conninfo or URI of a migrated database whose point_balances has "
             "customers 1..C"},
        OQ_BENCH_UINT("workers", "W", 1, S_MAX_WORKERS, S_DEFAULT_WORKERS, &opts->workers,
                      "processes, one connection each, at most " OQ_BENCH_STR(S_MAX_WORKERS)),
        OQ_BENCH_UINT("jobs", "N", 1, S_MAX_JOBS, S_DEFAULT_JOBS, &opts->jobs,
                      "jobs in all, shared by the processes"),
        OQ_BENCH_UINT("batch", "B", 1, OQ_WORKER_MAX_BATCH, S_DEFAULT_BATCH, &opts->batch,
                      "jobs per batch, 1 to " OQ_BENCH_STR(
                          OQ_WORKER_MAX_BATCH) "; 1 runs the handler's single transaction"),
        OQ_BENCH_UINT("customers", "C", 1, INT32_MAX, S_DEFAULT_CUSTOMERS, &opts->customers,
                      "customers drawn from 1..C"),
    };
    int rc =
        oq_bench_flags_parse("grant-batch-bench", s_usage, "Prints one line of key=value pairs.\n",
                             flags, OQ_FLAGS_COUNT(flags), argc, argv);
    if (rc == 0 && !opts->database) {
        fprintf(stderr, "grant-batch-bench: --database is required (see --help)\n");
        rc = -1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    s_opts_t opts;
    int parsed = s_parse(argc, argv, &opts);
    if (parsed != 0)
        return parsed < 0 ? OQ_BENCH_EXIT_USAGE : 0;
    oq_log_set_level(OQ_LOG_WARN);
    int ready[2], go[2];
    if (pipe(ready) < 0 || pipe(go) < 0) {
        fprintf(stderr, "grant-batch-bench: pipe: %s\n", strerror(errno));
        return 1;
    }
    fflush(stdout);
    pid_t children[S_MAX_WORKERS];
    uint64_t started = 0;
    int rc = 0;
    for (; started < opts.workers; started++) {
        uint64_t share = opts.jobs / opts.workers + (started < opts.jobs % opts.workers ? 1 : 0);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "grant-batch-bench: fork: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        if (pid == 0) {
            close(ready[0]);
            close(go[1]);
            _exit(s_worker(&opts, share, ready[1], go[0]));
        }
        children[started] = pid;
    }
    close(ready[1]);
    close(go[0]);
    /* Every process connected and warmed up (or gone): then go. */
    for (uint64_t i = 0; i < started; i++) {
        char byte = 0;
        ssize_t got;
        while ((got = read(ready[0], &byte, 1)) < 0 && errno == EINTR)
            ;
        if (got != 1 || byte != 'r')
            rc = 1;
    }
    int64_t start_us = oq_clock_mono_us();
    close(go[1]);
    for (uint64_t i = 0; i < started; i++) {
        int status = 0;
        while (waitpid(children[i], &status, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            rc = 1;
    }
    double seconds = (double)(oq_clock_mono_us() - start_us) / S_US_PER_S;
    if (rc == 0)
        printf("system=onceq-batch workers=%" PRIu64 " batch=%" PRIu64 " jobs=%" PRIu64
               " seconds=%.3f jobs_per_s=%.0f\n",
               opts.workers, opts.batch, opts.jobs, seconds, (double)opts.jobs / seconds);
    else
        fprintf(stderr, "grant-batch-bench: a worker process failed\n");
    return rc;
}
