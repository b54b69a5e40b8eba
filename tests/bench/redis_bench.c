/*  redis_bench.c: redis-bench, the same benchmark as onceq-bench and
    beanstalk-bench, run against a Redis reliable queue (hiredis), the
    second well-known reference for onceq's numbers.

    The queue is the pattern Redis documents for reliability: a producer
    LPUSHes a job onto the queue list; a consumer takes it with BLMOVE
    queue processing RIGHT LEFT, which moves it atomically onto a
    processing list (where a crashed consumer's job stays to be found), and
    acknowledges it with LREM processing 1 job once it is done. Jobs are
    100-byte bodies, each unique (LREM finds a job by its value).

    The shape matches beanstalk-bench on purpose:
    - W consumers are forked processes, each with its own connection,
      taking one job at a time: BLMOVE, then LREM;
    - one producer connection (or --producers N forked ones) pushes with at
      most --window pushes unanswered, written in bursts;
    - completion is read from the server's own counter, the calls of LREM in
      INFO commandstats, as beanstalk-bench reads cmd-delete: throughput is
      N jobs from the first push until the count is baseline + N (polled
      every S_DRAIN_POLL_US once every push was answered), and latency is
      one job at a time, from sending the push to the INFO reply that shows
      it acknowledged, polled back to back. Consumers are counted ready
      when INFO clients shows W connections blocked (in BLMOVE).

    tests/bench/README.md explains the method. */
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "onceq/clock.h"
#include "onceq/config.h"
#include "samples.h"
#include "support.h"

#define S_BODY_BYTES 100 /* the same size as onceq-bench's msgpack payload */

#define S_DEFAULT_HOST         "127.0.0.1"
#define S_DEFAULT_PORT         6379
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
#define S_DRAIN_POLL_US   1000  /* INFO polling while the last jobs finish */
#define S_WORKER_POLL_US  50000 /* INFO polling while waiting for consumers */
#define S_BLOCK_WAIT_S    "1"   /* a consumer rechecks its deadline this often */
#define S_MAX_RTT_SAMPLES 100000
#define S_NAME_MAX        64 /* of the queue's name */
#define S_SUFFIX          ":processing"

typedef struct {
    const char *host;
    uint64_t port;
    char queue[S_NAME_MAX + 1], processing[S_NAME_MAX + sizeof S_SUFFIX];
    uint64_t jobs, window, latency_jobs, warmup_jobs, consumers, gap_us, deadline_s;
    uint64_t producers;  /* processes pushing the throughput phase */
    int64_t deadline_us; /* monotonic time by which everything must be over */
} s_opts_t;

/* Jobs pushed so far by this process, for unique bodies. */
static uint64_t s_pushed;

static redisContext *s_connect(const s_opts_t *opts)
{
    int64_t left_us = opts->deadline_us - oq_clock_mono_us();
    struct timeval timeout = {.tv_sec = left_us > 0 ? left_us / S_US_PER_S : 0,
                              .tv_usec = left_us > 0 ? left_us % S_US_PER_S : 1};
    redisContext *c = redisConnectWithTimeout(opts->host, (int)opts->port, timeout);
    if (!c || c->err) {
        fprintf(stderr, "redis-bench: cannot connect to %s:%" PRIu64 ": %s\n", opts->host,
                opts->port, c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    /* Replies must come before the deadline too. */
    redisSetTimeout(c, timeout);
    return c;
}

/* A reply of the expected type, or -1 with a message. Frees the reply. */
static int s_check(redisContext *c, redisReply *reply, int type, const char *what)
{
    if (!reply) {
        fprintf(stderr, "redis-bench: %s: %s\n", what, c->errstr);
        return -1;
    }
    int rc = reply->type == type ? 0 : -1;
    if (rc < 0)
        fprintf(stderr, "redis-bench: %s: unexpected reply%s%s\n", what,
                reply->type == REDIS_REPLY_ERROR ? ": " : "",
                reply->type == REDIS_REPLY_ERROR ? reply->str : "");
    freeReplyObject(reply);
    return rc;
}

/* The value of "key:" in an INFO reply, or -1. */
static int64_t s_info_field(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

/* LREM's calls since the server started (0 before the first), and the
   connections blocked in a command. */
static int s_stats(redisContext *c, uint64_t *acked, uint64_t *blocked)
{
    redisReply *reply = redisCommand(c, "INFO clients commandstats");
    if (!reply || reply->type != REDIS_REPLY_STRING) {
        s_check(c, reply, REDIS_REPLY_STRING, "INFO");
        return -1;
    }
    int64_t calls = s_info_field(reply->str, "\ncmdstat_lrem:calls=");
    int64_t waiting = s_info_field(reply->str, "\nblocked_clients:");
    freeReplyObject(reply);
    if (waiting < 0) {
        fprintf(stderr, "redis-bench: INFO without blocked_clients\n");
        return -1;
    }
    *acked = calls < 0 ? 0 : (uint64_t)calls;
    *blocked = (uint64_t)waiting;
    return 0;
}

static int s_wait_acked(redisContext *c, const s_opts_t *opts, uint64_t target,
                        uint64_t interval_us, int64_t *at_us, oq_samples_t *rtt)
{
    for (;;) {
        uint64_t acked, blocked;
        int64_t sent_us = oq_clock_mono_us();
        if (s_stats(c, &acked, &blocked) < 0)
            return -1;
        int64_t now_us = oq_clock_mono_us();
        if (rtt)
            oq_samples_add(rtt, now_us - sent_us);
        if (acked >= target) {
            *at_us = now_us;
            return 0;
        }
        if (now_us > opts->deadline_us) {
            fprintf(stderr, "redis-bench: deadline passed waiting for jobs to be done\n");
            return -1;
        }
        if (interval_us)
            oq_support_sleep_us(interval_us);
    }
}

/* A consumer process: BLMOVE, LREM, until its deadline or its parent is
   gone. Returns the exit status. */
static int s_consumer(const s_opts_t *opts, pid_t parent)
{
    redisContext *c = s_connect(opts);
    if (!c)
        return 1;
    while (oq_clock_mono_us() < opts->deadline_us && getppid() == parent) {
        redisReply *job = redisCommand(c, "BLMOVE %s %s RIGHT LEFT " S_BLOCK_WAIT_S, opts->queue,
                                       opts->processing);
        if (!job) {
            fprintf(stderr, "redis-bench: BLMOVE: %s\n", c->errstr);
            redisFree(c);
            return 1;
        }
        if (job->type == REDIS_REPLY_NIL) {
            freeReplyObject(job);
            continue;
        }
        if (job->type != REDIS_REPLY_STRING) {
            s_check(c, job, REDIS_REPLY_STRING, "BLMOVE");
            redisFree(c);
            return 1;
        }
        /* The job is done (a noop): acknowledge it. */
        redisReply *ack = redisCommand(c, "LREM %s 1 %b", opts->processing, job->str, job->len);
        freeReplyObject(job);
        if (s_check(c, ack, REDIS_REPLY_INTEGER, "LREM") < 0) {
            redisFree(c);
            return 1;
        }
    }
    redisFree(c);
    return 0;
}

/* Queue one LPUSH of a fresh, unique 100-byte body. */
static int s_append_push(redisContext *c, const s_opts_t *opts)
{
    char body[S_BODY_BYTES];
    memset(body, 'x', sizeof body);
    char id[48];
    int len = snprintf(id, sizeof id, "%ld-%" PRIu64 "-", (long)getpid(), s_pushed++);
    memcpy(body, id, (size_t)len);
    return redisAppendCommand(c, "LPUSH %s %b", opts->queue, body, sizeof body) == REDIS_OK ? 0
                                                                                            : -1;
}

/* A reply already read and parsed, without waiting: 1 with it, 0 if none
   is buffered, -1 on an error. */
static int s_buffered_reply(redisContext *c, redisReply **reply)
{
    void *r = NULL;
    if (redisReaderGetReply(c->reader, &r) != REDIS_OK)
        return -1;
    *reply = r;
    return r ? 1 : 0;
}

/* Push n jobs with at most opts->window unanswered. Pushes are collected
   and written together before each read, as beanstalk-bench does. */
static int s_pipeline(redisContext *c, const s_opts_t *opts, uint64_t n)
{
    uint64_t sent = 0, acked = 0;
    while (acked < n) {
        while (sent < n && sent - acked < opts->window) {
            if (s_append_push(c, opts) < 0)
                return -1;
            sent++;
        }
        void *reply = NULL;
        if (redisGetReply(c, &reply) != REDIS_OK ||
            s_check(c, reply, REDIS_REPLY_INTEGER, "LPUSH") < 0)
            return -1;
        acked++;
        /* Take every answer already read before refilling the window, so
           that pushes go out in bursts rather than one write per answer. */
        redisReply *more;
        int got;
        while (acked < sent && (got = s_buffered_reply(c, &more)) != 0) {
            if (got < 0 || s_check(c, more, REDIS_REPLY_INTEGER, "LPUSH") < 0)
                return -1;
            acked++;
        }
    }
    return 0;
}

/* One forked producer: its own connection, its share of the jobs. */
static int s_producer(const s_opts_t *opts, uint64_t n)
{
    redisContext *c = s_connect(opts);
    if (!c)
        return 1;
    int rc = s_pipeline(c, opts, n);
    redisFree(c);
    return rc == 0 ? 0 : 1;
}

/* Push n jobs: on c with one producer, else by opts->producers forked
   processes sharing them. Returns once every push is answered. */
static int s_produce(redisContext *c, const s_opts_t *opts, uint64_t n)
{
    if (opts->producers <= 1)
        return s_pipeline(c, opts, n);
    pid_t children[S_MAX_PRODUCERS];
    uint64_t started = 0;
    int rc = 0;
    fflush(stdout);
    for (; started < opts->producers; started++) {
        uint64_t share = n / opts->producers + (started < n % opts->producers ? 1 : 0);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "redis-bench: fork: %s\n", strerror(errno));
            rc = -1;
            break;
        }
        if (pid == 0)
            _exit(s_producer(opts, share));
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

static int s_latency(redisContext *c, const s_opts_t *opts, uint64_t *acked, oq_samples_t *latency,
                     oq_samples_t *rtt)
{
    s_opts_t one = *opts;
    one.window = 1;
    for (uint64_t i = 0; i < opts->latency_jobs; i++) {
        int64_t start_us = oq_clock_mono_us();
        int64_t end_us;
        if (s_pipeline(c, &one, 1) < 0 || s_wait_acked(c, opts, *acked + 1, 0, &end_us, rtt) < 0)
            return -1;
        (*acked)++;
        oq_samples_add(latency, end_us - start_us);
        if (opts->gap_us)
            oq_support_sleep_us(opts->gap_us);
    }
    return 0;
}

static void s_help(void)
{
    printf("Usage: redis-bench [options]\n"
           "\n"
           "Push %d-byte jobs onto a Redis list, consume them with forked consumers\n"
           "(BLMOVE to a processing list, then LREM) and measure throughput (pipelined\n"
           "pushes) and end-to-end latency (one job at a time), reading completion from\n"
           "LREM's calls in INFO commandstats.\n"
           "\n"
           "  --host ADDR         Redis address (default %s)\n"
           "  --port P            Redis port (default %d)\n"
           "  --queue NAME        the lists NAME and NAME:processing (default bench-PID)\n"
           "  --consumers W       consumer processes (default 1)\n"
           "  --jobs N            jobs in the throughput phase (default %d)\n"
           "  --window W          unanswered pushes at most (default %d)\n"
           "  --latency-jobs M    jobs in the latency phase, 0 to skip (default %d)\n"
           "  --warmup N          jobs run first and not measured (default %d)\n"
           "  --gap-us U          pause between two latency jobs (default %d)\n"
           "  --deadline S        give up after S seconds in all (default %d)\n"
           "  --producers N       N processes push the throughput phase, each with its own\n"
           "                      connection and window (default 1, at most %d)\n"
           "\n"
           "The server must count only this run's LREM calls (a fresh redis-server).\n"
           "Prints one line of key=value pairs (times in microseconds).\n",
           S_BODY_BYTES, S_DEFAULT_HOST, S_DEFAULT_PORT, S_DEFAULT_JOBS, S_DEFAULT_WINDOW,
           S_DEFAULT_LATENCY_JOBS, S_DEFAULT_WARMUP_JOBS, S_DEFAULT_GAP_US, S_DEFAULT_DEADLINE_S,
           S_MAX_PRODUCERS);
}

static int s_parse(int argc, char **argv, s_opts_t *opts)
{
    enum {
        O_HOST = 0x100,
        O_PORT,
        O_QUEUE,
        O_CONSUMERS,
        O_JOBS,
        O_WINDOW,
        O_LATENCY,
        O_WARMUP,
        O_GAP,
        O_DEADLINE,
        O_PRODUCERS,
    };
    static const struct option options[] = {
        {"host", required_argument, NULL, O_HOST},
        {"port", required_argument, NULL, O_PORT},
        {"queue", required_argument, NULL, O_QUEUE},
        {"consumers", required_argument, NULL, O_CONSUMERS},
        {"jobs", required_argument, NULL, O_JOBS},
        {"window", required_argument, NULL, O_WINDOW},
        {"latency-jobs", required_argument, NULL, O_LATENCY},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"gap-us", required_argument, NULL, O_GAP},
        {"deadline", required_argument, NULL, O_DEADLINE},
        {"producers", required_argument, NULL, O_PRODUCERS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *opts = (s_opts_t){
        .host = S_DEFAULT_HOST,
        .port = S_DEFAULT_PORT,
        .jobs = S_DEFAULT_JOBS,
        .window = S_DEFAULT_WINDOW,
        .latency_jobs = S_DEFAULT_LATENCY_JOBS,
        .warmup_jobs = S_DEFAULT_WARMUP_JOBS,
        .consumers = 1,
        .gap_us = S_DEFAULT_GAP_US,
        .deadline_s = S_DEFAULT_DEADLINE_S,
        .producers = 1,
    };
    char name[S_NAME_MAX + 1];
    snprintf(name, sizeof name, "bench-%ld", (long)getpid());
    int opt, bad = 0;
    while (!bad && (opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'h':
            s_help();
            exit(0);
        case O_HOST:
            opts->host = optarg;
            break;
        case O_PORT:
            bad = oq_config_uint(optarg, 1, S_MAX_PORT, &opts->port);
            break;
        case O_QUEUE:
            bad = strlen(optarg) == 0 || strlen(optarg) > S_NAME_MAX;
            snprintf(name, sizeof name, "%s", optarg);
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
        default:
            bad = 1;
            break;
        }
        if (bad && opt != '?')
            fprintf(stderr, "redis-bench: bad value '%s' for %s\n", optarg, argv[optind - 1]);
    }
    if (!bad && optind < argc) {
        fprintf(stderr, "redis-bench: unexpected argument '%s'\n", argv[optind]);
        bad = 1;
    }
    if (bad) {
        fprintf(stderr, "Try 'redis-bench --help'.\n");
        return -1;
    }
    snprintf(opts->queue, sizeof opts->queue, "%s", name);
    snprintf(opts->processing, sizeof opts->processing, "%s" S_SUFFIX, name);
    opts->deadline_us = oq_clock_mono_us() + (int64_t)opts->deadline_s * S_US_PER_S;
    return 0;
}

/* The measured part, in the parent, once the consumers run. */
static int s_run(const s_opts_t *opts, redisContext *c)
{
    uint64_t acked = 0, blocked = 0;
    while (blocked < opts->consumers) {
        if (s_stats(c, &acked, &blocked) < 0)
            return -1;
        if (oq_clock_mono_us() > opts->deadline_us) {
            fprintf(stderr, "redis-bench: deadline passed waiting for consumers\n");
            return -1;
        }
        if (blocked < opts->consumers)
            oq_support_sleep_us(S_WORKER_POLL_US);
    }
    int64_t at_us;
    if (opts->warmup_jobs > 0) {
        if (s_pipeline(c, opts, opts->warmup_jobs) < 0 ||
            s_wait_acked(c, opts, acked + opts->warmup_jobs, S_DRAIN_POLL_US, &at_us, NULL) < 0)
            return -1;
        acked += opts->warmup_jobs;
    }

    int64_t start_us = oq_clock_mono_us();
    if (s_produce(c, opts, opts->jobs) < 0 ||
        s_wait_acked(c, opts, acked + opts->jobs, S_DRAIN_POLL_US, &at_us, NULL) < 0)
        return -1;
    acked += opts->jobs;
    double seconds = (double)(at_us - start_us) / S_US_PER_S;

    oq_samples_t *latency = oq_samples_new(opts->latency_jobs);
    oq_samples_t *rtt = oq_samples_new(S_MAX_RTT_SAMPLES);
    int rc = latency && rtt ? s_latency(c, opts, &acked, latency, rtt) : -1;
    if (rc == 0)
        printf("system=redis producers=%" PRIu64 " workers=%" PRIu64 " jobs=%" PRIu64
               " window=%" PRIu64 " seconds=%.3f jobs_per_s=%.0f latency_jobs=%zu p50_us=%" PRId64
               " p99_us=%" PRId64 " max_us=%" PRId64 " poll_rtt_us=%" PRId64 "\n",
               opts->producers, opts->consumers, opts->jobs, opts->window, seconds,
               (double)opts->jobs / seconds, oq_samples_count(latency),
               oq_samples_percentile(latency, 50), oq_samples_percentile(latency, 99),
               oq_samples_percentile(latency, 100), oq_samples_percentile(rtt, 50));
    oq_samples_destroy(&latency);
    oq_samples_destroy(&rtt);
    return rc;
}

int main(int argc, char **argv)
{
    s_opts_t opts;
    if (s_parse(argc, argv, &opts) < 0)
        return 2;
    /* Output must not be duplicated into the children's buffers. */
    fflush(stdout);

    pid_t parent = getpid();
    pid_t children[S_MAX_CONSUMERS];
    uint64_t started = 0;
    int rc = 0;
    for (; started < opts.consumers; started++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "redis-bench: fork: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        if (pid == 0)
            _exit(s_consumer(&opts, parent));
        children[started] = pid;
    }

    redisContext *c = rc == 0 ? s_connect(&opts) : NULL;
    if (rc == 0 && (!c || s_run(&opts, c) < 0))
        rc = 1;
    if (c) {
        /* Leave nothing behind on a server that may be shared. */
        redisReply *reply = redisCommand(c, "DEL %s %s", opts.queue, opts.processing);
        if (reply)
            freeReplyObject(reply);
        redisFree(c);
    }

    /* Consumers block in BLMOVE for a second at most; they hold no job
       between jobs, so SIGTERM loses nothing. */
    for (uint64_t i = 0; i < started; i++)
        kill(children[i], SIGTERM);
    for (uint64_t i = 0; i < started; i++)
        while (waitpid(children[i], NULL, 0) < 0 && errno == EINTR)
            ;
    return rc;
}
