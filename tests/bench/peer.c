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
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "onceq/clock.h"
#include "onceq/config.h"
#include "samples.h"
#include "support.h"

#define S_DEFAULT_HOST         "127.0.0.1"
#define S_DEFAULT_JOBS         20000
#define S_DEFAULT_WINDOW       64
#define S_DEFAULT_LATENCY_JOBS 500
#define S_DEFAULT_WARMUP_JOBS  200
#define S_DEFAULT_GAP_US       1000
#define S_DEFAULT_DEADLINE_S   300
#define S_MAX_JOBS             10000000
#define S_MAX_WINDOW           10000
#define S_MAX_CONSUMERS        256
#define S_MAX_PRODUCERS        64
#define S_MAX_DEADLINE_S       3600
#define S_MAX_GAP_US           1000000
#define S_MAX_PORT             65535

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

static void s_help(const oq_peer_t *peer)
{
    printf("Usage: %s [options]\n"
           "\n"
           "%s"
           "\n"
           "  --host ADDR         %s (default %s)\n"
           "  --port P            %s (default %" PRIu64 ")\n"
           "  %s\n"
           "  --consumers W       consumer processes (default 1)\n"
           "  --jobs N            jobs in the throughput phase (default %d)\n"
           "  --window W          unanswered %s at most (default %d)\n"
           "  --latency-jobs M    jobs in the latency phase, 0 to skip (default %d)\n"
           "  --warmup N          jobs run first and not measured (default %d)\n"
           "  --gap-us U          pause between two latency jobs (default %d)\n"
           "  --deadline S        give up after S seconds in all (default %d)\n"
           "  --producers N       N processes %s the throughput phase, each with its own\n"
           "                      connection and window (default 1, at most %d)\n"
           "%s"
           "\n"
           "%s"
           "Prints one line of key=value pairs (times in microseconds).\n",
           peer->program, peer->help_intro, peer->help_host, S_DEFAULT_HOST, peer->help_port,
           peer->default_port, peer->help_name, S_DEFAULT_JOBS, peer->verbs, S_DEFAULT_WINDOW,
           S_DEFAULT_LATENCY_JOBS, S_DEFAULT_WARMUP_JOBS, S_DEFAULT_GAP_US, S_DEFAULT_DEADLINE_S,
           peer->verb, S_MAX_PRODUCERS,
           peer->put_only ? "  --put-only          only put --jobs jobs (no consumers) and print "
                            "the put rate\n"
                          : "",
           peer->help_note);
}

static int s_parse(const oq_peer_t *peer, int argc, char **argv, oq_peer_opts_t *opts)
{
    enum {
        O_HOST = 0x100,
        O_PORT,
        O_NAME,
        O_CONSUMERS,
        O_JOBS,
        O_WINDOW,
        O_LATENCY,
        O_WARMUP,
        O_GAP,
        O_DEADLINE,
        O_PRODUCERS,
        O_PUT_ONLY
    };
    /* --put-only is there only for the peers that have it. */
    const struct option options[] = {
        {"host", required_argument, NULL, O_HOST},
        {"port", required_argument, NULL, O_PORT},
        {peer->name_option, required_argument, NULL, O_NAME},
        {"consumers", required_argument, NULL, O_CONSUMERS},
        {"jobs", required_argument, NULL, O_JOBS},
        {"window", required_argument, NULL, O_WINDOW},
        {"latency-jobs", required_argument, NULL, O_LATENCY},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"gap-us", required_argument, NULL, O_GAP},
        {"deadline", required_argument, NULL, O_DEADLINE},
        {"producers", required_argument, NULL, O_PRODUCERS},
        {"help", no_argument, NULL, 'h'},
        peer->put_only ? (struct option){"put-only", no_argument, NULL, O_PUT_ONLY}
                       : (struct option){NULL, 0, NULL, 0},
        {NULL, 0, NULL, 0},
    };
    *opts = (oq_peer_opts_t){
        .host = S_DEFAULT_HOST,
        .port = peer->default_port,
        .jobs = S_DEFAULT_JOBS,
        .window = S_DEFAULT_WINDOW,
        .latency_jobs = S_DEFAULT_LATENCY_JOBS,
        .warmup_jobs = S_DEFAULT_WARMUP_JOBS,
        .consumers = 1,
        .gap_us = S_DEFAULT_GAP_US,
        .deadline_s = S_DEFAULT_DEADLINE_S,
        .producers = 1,
    };
    snprintf(opts->name, sizeof opts->name, "bench-%ld", (long)getpid());
    int opt, bad = 0;
    while (!bad && (opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'h':
            s_help(peer);
            exit(0);
        case O_HOST:
            opts->host = optarg;
            break;
        case O_PORT:
            bad = oq_config_uint(optarg, 1, S_MAX_PORT, &opts->port);
            break;
        case O_NAME:
            bad = strlen(optarg) == 0 || strlen(optarg) > peer->name_max ||
                  (peer->name_ok && !peer->name_ok(optarg));
            snprintf(opts->name, sizeof opts->name, "%s", optarg);
            break;
        case O_CONSUMERS:
            bad = oq_config_uint(optarg, 1, S_MAX_CONSUMERS, &opts->consumers);
            break;
        case O_JOBS:
            bad = oq_config_uint(optarg, 1, S_MAX_JOBS, &opts->jobs);
            break;
        case O_WINDOW:
            bad = oq_config_uint(optarg, 1, S_MAX_WINDOW, &opts->window);
            break;
        case O_LATENCY:
            bad = oq_config_uint(optarg, 0, S_MAX_JOBS, &opts->latency_jobs);
            break;
        case O_WARMUP:
            bad = oq_config_uint(optarg, 0, S_MAX_JOBS, &opts->warmup_jobs);
            break;
        case O_GAP:
            bad = oq_config_uint(optarg, 0, S_MAX_GAP_US, &opts->gap_us);
            break;
        case O_DEADLINE:
            bad = oq_config_uint(optarg, 1, S_MAX_DEADLINE_S, &opts->deadline_s);
            break;
        case O_PRODUCERS:
            bad = oq_config_uint(optarg, 1, S_MAX_PRODUCERS, &opts->producers);
            break;
        case O_PUT_ONLY:
            opts->put_only = true;
            break;
        default:
            bad = 1;
            break;
        }
        if (bad && opt != '?')
            fprintf(stderr, "%s: bad value '%s' for %s\n", peer->program, optarg, argv[optind - 1]);
    }
    if (!bad && optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", peer->program, argv[optind]);
        bad = 1;
    }
    if (bad) {
        fprintf(stderr, "Try '%s --help'.\n", peer->program);
        return -1;
    }
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
    if (s_parse(peer, argc, argv, &opts) < 0)
        return 2;
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
