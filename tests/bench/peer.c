/*  peer.c: one driver for the peer benchmarks (see peer.h). The method is
    tests/bench/README.md's:
    - W consumers are forked processes, each with its own connection,
      taking one job at a time;
    - one producer connection (or --producers N forked ones) puts with at
      most --window puts unanswered;
    - completion is read from the server's own counter of acknowledged
      jobs: throughput is N jobs from the first put until the counter is
      baseline + N (polled every S_DRAIN_POLL_US once every put was
      answered), and latency is one job at a time, from sending the put to
      the stats reply that shows it acknowledged, polled back to back. */
#include "peer.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_flags.h"
#include "onceq/clock.h"
#include "onceq/config.h"
#include "samples.h"
#include "support.h"

#define S_DEFAULT_HOST  "127.0.0.1"
#define S_MAX_CONSUMERS 256
#define S_MAX_PRODUCERS OQ_BENCH_MAX_PRODUCERS
#define S_MAX_PORT      65535
#define S_HELP_LEN      512 /* one row's help or default, built at run time */

#define S_US_PER_S        1000000
#define S_DRAIN_POLL_US   1000  /* stats polling while the last jobs finish */
#define S_WORKER_POLL_US  50000 /* stats polling while waiting for consumers */
#define S_MAX_RTT_SAMPLES 100000

static int s_wait_acked(const oq_peer_t *peer, void *conn, const oq_peer_opts_t *opts,
                        uint64_t target, uint64_t interval_us, int64_t *at_us, oq_samples_t *rtt)
{
    for (;;) {
        uint64_t acked, ready;
        int64_t sent_us = oq_clock_mono_us();
        if (peer->stats(conn, opts, &acked, &ready) < 0)
            return -1;
        int64_t now_us = oq_clock_mono_us();
        if (rtt)
            oq_samples_add(rtt, now_us - sent_us);
        if (acked >= target) {
            *at_us = now_us;
            return 0;
        }
        if (now_us > opts->deadline_us) {
            fprintf(stderr, "%s: deadline passed waiting for jobs to be done\n", peer->program);
            return -1;
        }
        if (interval_us)
            oq_support_sleep_us(interval_us);
    }
}

/* A consumer process: take and acknowledge jobs until its deadline or its
   parent is gone. Returns the exit status. */
static int s_consumer(const oq_peer_t *peer, const oq_peer_opts_t *opts, pid_t parent)
{
    void *conn = peer->connect(opts);
    if (!conn)
        return 1;
    int rc = peer->consumer_start ? peer->consumer_start(conn, opts) : 0;
    while (rc == 0 && oq_clock_mono_us() < opts->deadline_us && getppid() == parent)
        rc = peer->consume_one(conn, opts);
    peer->disconnect(conn);
    return rc == 0 ? 0 : 1;
}

/* One forked producer: its own connection, its share of the jobs. */
static int s_producer(const oq_peer_t *peer, const oq_peer_opts_t *opts, uint64_t n)
{
    void *conn = peer->connect(opts);
    if (!conn)
        return 1;
    int rc = peer->use ? peer->use(conn, opts) : 0;
    if (rc == 0)
        rc = peer->pipeline(conn, opts, n);
    peer->disconnect(conn);
    return rc == 0 ? 0 : 1;
}

/* Put n jobs: on conn with one producer, else by opts->producers forked
   processes sharing them. Returns once every put is answered. */
static int s_produce(const oq_peer_t *peer, void *conn, const oq_peer_opts_t *opts, uint64_t n)
{
    if (opts->producers <= 1)
        return peer->pipeline(conn, opts, n);
    pid_t children[S_MAX_PRODUCERS];
    uint64_t started = 0;
    int rc = 0;
    fflush(stdout);
    for (; started < opts->producers; started++) {
        uint64_t share = n / opts->producers + (started < n % opts->producers ? 1 : 0);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "%s: fork: %s\n", peer->program, strerror(errno));
            rc = -1;
            break;
        }
        if (pid == 0)
            _exit(s_producer(peer, opts, share));
        children[started] = pid;
    }
    for (uint64_t i = 0; i < started; i++) {
        int status = 0;
        while (waitpid(children[i], &status, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            rc = -1;
    }
    return rc;
}

static int s_latency(const oq_peer_t *peer, void *conn, const oq_peer_opts_t *opts, uint64_t *acked,
                     oq_samples_t *latency, oq_samples_t *rtt)
{
    oq_peer_opts_t one = *opts;
    one.window = 1;
    for (uint64_t i = 0; i < opts->latency_jobs; i++) {
        int64_t start_us = oq_clock_mono_us();
        int64_t end_us;
        if (peer->pipeline(conn, &one, 1) < 0 ||
            s_wait_acked(peer, conn, opts, *acked + 1, 0, &end_us, rtt) < 0)
            return -1;
        (*acked)++;
        oq_samples_add(latency, end_us - start_us);
        if (opts->gap_us)
            oq_support_sleep_us(opts->gap_us);
    }
    return 0;
}

/* The tube or queue option's value: checked against the peer's rules. */
typedef struct {
    const oq_peer_t *peer;
    oq_peer_opts_t *opts;
} s_name_dest_t;

static int s_parse_name(const char *value, void *dest, char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    const s_name_dest_t *d = dest;
    size_t len = strlen(value);
    if (len == 0 || len > d->peer->name_max || (d->peer->name_ok && !d->peer->name_ok(value)))
        return -1;
    snprintf(d->opts->name, sizeof d->opts->name, "%s", value);
    return 0;
}

/* 0 to run, 1 after --help, -1 after a usage error. */
static int s_parse(const oq_peer_t *peer, int argc, char **argv, oq_peer_opts_t *opts)
{
    *opts = (oq_peer_opts_t){0};
    snprintf(opts->name, sizeof opts->name, "bench-%ld", (long)getpid());
    s_name_dest_t name = {peer, opts};
    char port_def[S_HELP_LEN], window_help[S_HELP_LEN], producers_help[S_HELP_LEN];
    char usage[S_HELP_LEN * 4], epilogue[S_HELP_LEN * 2];
    snprintf(port_def, sizeof port_def, "%" PRIu64, peer->default_port);
    snprintf(window_help, sizeof window_help, "unanswered %s at most", peer->verbs);
    snprintf(producers_help, sizeof producers_help,
             "processes that %s the throughput phase, each with its own connection and "
             "window, at most %d",
             peer->verb, S_MAX_PRODUCERS);
    snprintf(usage, sizeof usage, "usage: %s [options]\n\n%s", peer->program, peer->help_intro);
    snprintf(epilogue, sizeof epilogue,
             "%sPrints one line of key=value pairs (times in microseconds).\n", peer->help_note);
    oq_flag_t flags[] = {
        {.name = "host",
         .kind = OQ_FLAG_STRING,
         .arg = "ADDR",
         .def = S_DEFAULT_HOST,
         .dest = &opts->host,
         .help = peer->help_host},
        {.name = "port",
         .kind = OQ_FLAG_UINT,
         .arg = "P",
         .min = 1,
         .max = S_MAX_PORT,
         .def = port_def,
         .dest = &opts->port,
         .help = peer->help_port},
        {.name = peer->name_option,
         .kind = OQ_FLAG_CUSTOM,
         .arg = peer->name_arg,
         .parse = s_parse_name,
         .expected = peer->name_expected,
         .def_text = "bench-PID",
         .dest = &name,
         .help = peer->help_name},
        OQ_BENCH_UINT("consumers", "W", 1, S_MAX_CONSUMERS, 1, &opts->consumers,
                      "consumer processes"),
        OQ_BENCH_FLAG_JOBS(&opts->jobs),
        OQ_BENCH_FLAG_WINDOW(&opts->window, window_help),
        OQ_BENCH_FLAG_LATENCY_JOBS(&opts->latency_jobs),
        OQ_BENCH_FLAG_WARMUP(&opts->warmup_jobs),
        OQ_BENCH_FLAG_GAP_US(&opts->gap_us),
        OQ_BENCH_FLAG_DEADLINE(&opts->deadline_s),
        OQ_BENCH_FLAG_PRODUCERS(&opts->producers, producers_help),
        /* Last, so that a peer without it leaves it out by the count. */
        {.name = "put-only",
         .kind = OQ_FLAG_BOOL,
         .dest = &opts->put_only,
         .help = "only put --jobs jobs (no consumers) and print the put rate"},
    };
    size_t count = OQ_FLAGS_COUNT(flags) - (peer->put_only ? 0 : 1);
    int rc = oq_bench_flags_parse(peer->program, usage, epilogue, flags, count, argc, argv);
    if (rc != 0)
        return rc;
    opts->deadline_us = oq_clock_mono_us() + (int64_t)opts->deadline_s * S_US_PER_S;
    return 0;
}

/* Only put the jobs, and print the put rate. */
static int s_put_only(const oq_peer_t *peer, void *conn, const oq_peer_opts_t *opts)
{
    int64_t start_us = oq_clock_mono_us();
    if (s_produce(peer, conn, opts, opts->jobs) < 0)
        return -1;
    double seconds = (double)(oq_clock_mono_us() - start_us) / S_US_PER_S;
    printf("system=%s mode=put_only producers=%" PRIu64 " jobs=%" PRIu64 " window=%" PRIu64
           " seconds=%.3f jobs_per_s=%.0f\n",
           peer->system, opts->producers, opts->jobs, opts->window, seconds,
           (double)opts->jobs / seconds);
    return 0;
}

/* The measured part, in the parent, once the consumers run. */
static int s_run(const oq_peer_t *peer, void *conn, const oq_peer_opts_t *opts)
{
    if (peer->use && peer->use(conn, opts) < 0)
        return -1;
    if (opts->put_only)
        return s_put_only(peer, conn, opts);
    uint64_t acked = 0, ready = 0;
    while (ready < opts->consumers) {
        if (peer->stats(conn, opts, &acked, &ready) < 0)
            return -1;
        if (oq_clock_mono_us() > opts->deadline_us) {
            fprintf(stderr, "%s: deadline passed waiting for consumers\n", peer->program);
            return -1;
        }
        if (ready < opts->consumers)
            oq_support_sleep_us(S_WORKER_POLL_US);
    }
    int64_t at_us;
    if (opts->warmup_jobs > 0) {
        if (peer->pipeline(conn, opts, opts->warmup_jobs) < 0 ||
            s_wait_acked(peer, conn, opts, acked + opts->warmup_jobs, S_DRAIN_POLL_US, &at_us,
                         NULL) < 0)
            return -1;
        acked += opts->warmup_jobs;
    }

    int64_t start_us = oq_clock_mono_us();
    if (s_produce(peer, conn, opts, opts->jobs) < 0 ||
        s_wait_acked(peer, conn, opts, acked + opts->jobs, S_DRAIN_POLL_US, &at_us, NULL) < 0)
        return -1;
    acked += opts->jobs;
    double seconds = (double)(at_us - start_us) / S_US_PER_S;

    oq_samples_t *latency = oq_samples_new(opts->latency_jobs);
    oq_samples_t *rtt = oq_samples_new(S_MAX_RTT_SAMPLES);
    int rc = latency && rtt ? s_latency(peer, conn, opts, &acked, latency, rtt) : -1;
    if (rc == 0)
        printf("system=%s producers=%" PRIu64 " workers=%" PRIu64 " jobs=%" PRIu64
               " window=%" PRIu64 " seconds=%.3f jobs_per_s=%.0f latency_jobs=%zu p50_us=%" PRId64
               " p99_us=%" PRId64 " max_us=%" PRId64 " poll_rtt_us=%" PRId64 "\n",
               peer->system, opts->producers, opts->consumers, opts->jobs, opts->window, seconds,
               (double)opts->jobs / seconds, oq_samples_count(latency),
               oq_samples_percentile(latency, 50), oq_samples_percentile(latency, 99),
               oq_samples_percentile(latency, 100), oq_samples_percentile(rtt, 50));
    oq_samples_destroy(&latency);
    oq_samples_destroy(&rtt);
    return rc;
}

int oq_peer_main(const oq_peer_t *peer, int argc, char **argv)
{
    oq_peer_opts_t opts;
    int parsed = s_parse(peer, argc, argv, &opts);
    if (parsed != 0)
        return parsed < 0 ? OQ_BENCH_EXIT_USAGE : 0;
    /* Output must not be duplicated into the children's buffers. */
    fflush(stdout);

    pid_t parent = getpid();
    pid_t children[S_MAX_CONSUMERS];
    uint64_t started = 0;
    int rc = 0;
    for (; !opts.put_only && started < opts.consumers; started++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "%s: fork: %s\n", peer->program, strerror(errno));
            rc = 1;
            break;
        }
        if (pid == 0)
            _exit(s_consumer(peer, &opts, parent));
        children[started] = pid;
    }

    void *conn = rc == 0 ? peer->connect(&opts) : NULL;
    if (rc == 0 && (!conn || s_run(peer, conn, &opts) < 0))
        rc = 1;
    if (conn) {
        if (peer->cleanup)
            peer->cleanup(conn, &opts);
        peer->disconnect(conn);
    }

    /* Consumers wait for a job a second at most and hold none between jobs,
       so SIGTERM loses nothing. */
    for (uint64_t i = 0; i < started; i++)
        kill(children[i], SIGTERM);
    for (uint64_t i = 0; i < started; i++)
        while (waitpid(children[i], NULL, 0) < 0 && errno == EINTR)
            ;
    return rc;
}
