/*  beanstalk_bench.c: beanstalk-bench, the same benchmark as onceq-bench run
    against beanstalkd, so that onceq's numbers have a well-known reference.
    Plain sockets and beanstalkd's text protocol; nothing else.

    The shape matches onceq-bench on purpose:
    - W consumers are forked processes, each with its own connection, taking
      one job at a time: reserve, then delete (onceq-worker --processes W
      runs W processes with one job each);
    - one producer connection puts 100-byte bodies with at most --window puts
      unanswered (onceq-bench pipelines dispatches with the same window);
    - completion is read from the server's own counter, the tube's cmd-delete
      in stats-tube, just as onceq-bench reads a queue's done from stats:
      throughput is N jobs from the first put until cmd-delete == baseline + N
      (polled every S_DRAIN_POLL_US once every put was answered), and latency
      is one job at a time, from sending the put to the stats-tube reply that
      shows it deleted, polled back to back.

    With --producers N the throughput phase is put by N forked processes,
    each with its own connection and window, as onceq-bench does; --put-only
    just puts the jobs (no consumers) and reports the put rate, for the
    memory and replay measurements of tests/bench/durable_run.sh.

    tests/bench/README.md explains the method. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "onceq/clock.h"
#include "onceq/config.h"
#include "samples.h"
#include "support.h"

#define S_BODY_BYTES 100 /* the same size as onceq-bench's msgpack payload */
#define S_PRIORITY   0
#define S_TTR_S      60 /* time to run: a lease far longer than a noop takes */

#define S_DEFAULT_HOST         "127.0.0.1"
#define S_DEFAULT_PORT         11300
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
#define S_US_PER_MS       1000
#define S_DRAIN_POLL_US   1000  /* stats polling while the last jobs finish */
#define S_WORKER_POLL_US  50000 /* stats polling while waiting for consumers */
#define S_RESERVE_WAIT_S  1     /* a consumer rechecks its deadline this often */
#define S_MAX_RTT_SAMPLES 100000
#define S_READ_BUF        65536 /* per connection */
#define S_LINE_MAX        512   /* longest reply line we expect */
#define S_STATS_MAX       8192  /* longest stats-tube body we accept */
#define S_NAME_MAX        200   /* beanstalkd's tube name limit */

#define S_XSTR(x) #x
#define S_STR(x)  S_XSTR(x)

typedef struct {
    const char *host;
    uint64_t port;
    char tube[S_NAME_MAX + 1];
    uint64_t jobs, window, latency_jobs, warmup_jobs, consumers, gap_us, deadline_s;
    uint64_t producers;  /* processes putting the throughput phase */
    bool put_only;       /* put the jobs and stop: no consumers, no waiting */
    int64_t deadline_us; /* monotonic time by which everything must be over */
} s_opts_t;

/* One connection with a read buffer: replies are lines, some followed by a
   body of a length the line gives. */
typedef struct {
    int fd;
    char buf[S_READ_BUF];
    size_t start, end; /* unread bytes are buf[start..end) */
    int64_t deadline_us;
} s_conn_t;

static char s_body[S_BODY_BYTES];

static int s_connect(s_conn_t *c, const s_opts_t *opts)
{
    memset(c, 0, sizeof *c);
    c->deadline_us = opts->deadline_us;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0)
        return -1;
    /* Requests are small and pipelined; Nagle would hold them back. */
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opts->port)};
    if (inet_pton(AF_INET, opts->host, &addr.sin_addr) != 1 ||
        connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        fprintf(stderr, "beanstalk-bench: cannot connect to %s:%" PRIu64 ": %s\n", opts->host,
                opts->port, strerror(errno));
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    return 0;
}

static int s_send(s_conn_t *c, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fprintf(stderr, "beanstalk-bench: send: %s\n", strerror(errno));
            return -1;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read more bytes into the buffer, waiting until the deadline at most. */
static int s_fill(s_conn_t *c)
{
    if (c->start > 0) {
        memmove(c->buf, c->buf + c->start, c->end - c->start);
        c->end -= c->start;
        c->start = 0;
    }
    if (c->end == sizeof c->buf) {
        fprintf(stderr, "beanstalk-bench: reply too long\n");
        return -1;
    }
    for (;;) {
        int64_t left_us = c->deadline_us - oq_clock_mono_us();
        if (left_us <= 0) {
            fprintf(stderr, "beanstalk-bench: deadline passed waiting for beanstalkd\n");
            return -1;
        }
        struct pollfd p = {c->fd, POLLIN, 0};
        int ready = poll(&p, 1, (int)(left_us / S_US_PER_MS) + 1);
        if (ready < 0 && errno != EINTR)
            return -1;
        if (ready <= 0)
            continue;
        ssize_t n = recv(c->fd, c->buf + c->end, sizeof c->buf - c->end, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "beanstalk-bench: beanstalkd closed the connection\n");
            return -1;
        }
        c->end += (size_t)n;
        return 0;
    }
}

/* One reply line without its CRLF, into line[S_LINE_MAX]. */
static int s_read_line(s_conn_t *c, char *line)
{
    for (;;) {
        char *nl = memchr(c->buf + c->start, '\n', c->end - c->start);
        if (nl) {
            size_t len = (size_t)(nl - (c->buf + c->start)) + 1;
            size_t keep = len >= 2 ? len - 2 : 0; /* drop "\r\n" */
            if (keep >= S_LINE_MAX) {
                fprintf(stderr, "beanstalk-bench: reply line too long\n");
                return -1;
            }
            memcpy(line, c->buf + c->start, keep);
            line[keep] = 0;
            c->start += len;
            return 0;
        }
        if (s_fill(c) < 0)
            return -1;
    }
}

/* n bytes of body and its CRLF; copied to out (room for n + 1) if not NULL. */
static int s_read_body(s_conn_t *c, char *out, size_t n)
{
    size_t want = n + 2;
    while (c->end - c->start < want)
        if (s_fill(c) < 0)
            return -1;
    if (out) {
        memcpy(out, c->buf + c->start, n);
        out[n] = 0;
    }
    c->start += want;
    return 0;
}

/* True if a whole reply line is already buffered. */
static bool s_has_line(const s_conn_t *c)
{
    return memchr(c->buf + c->start, '\n', c->end - c->start) != NULL;
}

static int s_expect(s_conn_t *c, const char *prefix)
{
    char line[S_LINE_MAX];
    if (s_read_line(c, line) < 0)
        return -1;
    if (strncmp(line, prefix, strlen(prefix)) != 0) {
        fprintf(stderr, "beanstalk-bench: expected %s, got \"%s\"\n", prefix, line);
        return -1;
    }
    return 0;
}

/* The tube's cmd-delete counter and watching connections (0 if the tube does
   not exist). */
static int s_stats(s_conn_t *c, const char *tube, uint64_t *deleted, uint64_t *watching)
{
    char request[S_NAME_MAX + 32], line[S_LINE_MAX], body[S_STATS_MAX + 1];
    snprintf(request, sizeof request, "stats-tube %s\r\n", tube);
    if (s_send(c, request, strlen(request)) < 0 || s_read_line(c, line) < 0)
        return -1;
    *deleted = *watching = 0;
    if (strcmp(line, "NOT_FOUND") == 0)
        return 0;
    unsigned long bytes;
    if (sscanf(line, "OK %lu", &bytes) != 1 || bytes > S_STATS_MAX) {
        fprintf(stderr, "beanstalk-bench: stats-tube: \"%s\"\n", line);
        return -1;
    }
    if (s_read_body(c, body, bytes) < 0)
        return -1;
    const char *p = strstr(body, "\ncmd-delete: ");
    const char *w = strstr(body, "\ncurrent-watching: ");
    if (!p || !w) {
        fprintf(stderr, "beanstalk-bench: stats-tube without cmd-delete\n");
        return -1;
    }
    *deleted = strtoull(p + strlen("\ncmd-delete: "), NULL, 10);
    *watching = strtoull(w + strlen("\ncurrent-watching: "), NULL, 10);
    return 0;
}

static int s_wait_deleted(s_conn_t *c, const s_opts_t *opts, uint64_t target, uint64_t interval_us,
                          int64_t *at_us, oq_samples_t *rtt)
{
    for (;;) {
        uint64_t deleted, watching;
        int64_t sent_us = oq_clock_mono_us();
        if (s_stats(c, opts->tube, &deleted, &watching) < 0)
            return -1;
        int64_t now_us = oq_clock_mono_us();
        if (rtt)
            oq_samples_add(rtt, now_us - sent_us);
        if (deleted >= target) {
            *at_us = now_us;
            return 0;
        }
        if (now_us > opts->deadline_us) {
            fprintf(stderr, "beanstalk-bench: deadline passed waiting for jobs to be done\n");
            return -1;
        }
        if (interval_us)
            oq_support_sleep_us(interval_us);
    }
}

/* A consumer process: reserve, delete, until its deadline or its parent is
   gone. Returns the exit status. */
static int s_consumer(const s_opts_t *opts, pid_t parent)
{
    s_conn_t *c = malloc(sizeof *c);
    if (!c || s_connect(c, opts) < 0)
        return 1;
    char request[S_NAME_MAX + 32], line[S_LINE_MAX];
    snprintf(request, sizeof request, "watch %s\r\nignore default\r\n", opts->tube);
    if (s_send(c, request, strlen(request)) < 0 || s_expect(c, "WATCHING") < 0 ||
        s_expect(c, "WATCHING") < 0)
        return 1;
    static const char reserve[] = "reserve-with-timeout " S_STR(S_RESERVE_WAIT_S) "\r\n";
    while (oq_clock_mono_us() < opts->deadline_us && getppid() == parent) {
        if (s_send(c, reserve, sizeof reserve - 1) < 0 || s_read_line(c, line) < 0)
            return 1;
        if (strcmp(line, "TIMED_OUT") == 0 || strcmp(line, "DEADLINE_SOON") == 0)
            continue;
        unsigned long long id;
        unsigned long bytes;
        if (sscanf(line, "RESERVED %llu %lu", &id, &bytes) != 2 || bytes > S_READ_BUF / 2) {
            fprintf(stderr, "beanstalk-bench: reserve: \"%s\"\n", line);
            return 1;
        }
        if (s_read_body(c, NULL, bytes) < 0)
            return 1;
        snprintf(request, sizeof request, "delete %llu\r\n", id);
        if (s_send(c, request, strlen(request)) < 0 || s_expect(c, "DELETED") < 0)
            return 1;
    }
    close(c->fd);
    free(c);
    return 0;
}

/* Put n jobs with at most opts->window unanswered. Puts are collected and
   written together before each read, as a ZeroMQ socket batches them. */
static int s_pipeline(s_conn_t *c, const s_opts_t *opts, uint64_t n)
{
    char header[64];
    int header_len =
        snprintf(header, sizeof header, "put %d 0 %d %d\r\n", S_PRIORITY, S_TTR_S, S_BODY_BYTES);
    size_t put_len = (size_t)header_len + S_BODY_BYTES + 2;
    char *out = malloc(put_len * opts->window);
    if (!out)
        return -1;
    uint64_t sent = 0, acked = 0;
    int rc = 0;
    while (acked < n && rc == 0) {
        size_t len = 0;
        while (sent < n && sent - acked < opts->window) {
            memcpy(out + len, header, (size_t)header_len);
            memcpy(out + len + header_len, s_body, S_BODY_BYTES);
            memcpy(out + len + header_len + S_BODY_BYTES, "\r\n", 2);
            len += put_len;
            sent++;
        }
        if (len > 0 && s_send(c, out, len) < 0)
            rc = -1;
        else
            rc = s_expect(c, "INSERTED");
        if (rc == 0)
            acked++;
        /* Take every answer already read before refilling the window, so
           that puts go out in bursts rather than one write per answer. */
        while (rc == 0 && acked < sent && s_has_line(c)) {
            rc = s_expect(c, "INSERTED");
            if (rc == 0)
                acked++;
        }
    }
    free(out);
    return rc;
}

/* One forked producer: its own connection, its share of the jobs. */
static int s_producer(const s_opts_t *opts, uint64_t n)
{
    s_conn_t *c = malloc(sizeof *c);
    char request[S_NAME_MAX + 32];
    snprintf(request, sizeof request, "use %s\r\n", opts->tube);
    if (!c || s_connect(c, opts) < 0 || s_send(c, request, strlen(request)) < 0 ||
        s_expect(c, "USING") < 0 || s_pipeline(c, opts, n) < 0)
        return 1;
    close(c->fd);
    free(c);
    return 0;
}

/* Put n jobs: on c with one producer, else by opts->producers forked
   processes sharing them. Returns once every put is answered. */
static int s_produce(s_conn_t *c, const s_opts_t *opts, uint64_t n)
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
            fprintf(stderr, "beanstalk-bench: fork: %s\n", strerror(errno));
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

static int s_latency(s_conn_t *c, const s_opts_t *opts, uint64_t *deleted, oq_samples_t *latency,
                     oq_samples_t *rtt)
{
    for (uint64_t i = 0; i < opts->latency_jobs; i++) {
        int64_t start_us = oq_clock_mono_us();
        s_opts_t one = *opts;
        one.window = 1;
        int64_t end_us;
        if (s_pipeline(c, &one, 1) < 0 ||
            s_wait_deleted(c, opts, *deleted + 1, 0, &end_us, rtt) < 0)
            return -1;
        (*deleted)++;
        oq_samples_add(latency, end_us - start_us);
        if (opts->gap_us)
            oq_support_sleep_us(opts->gap_us);
    }
    return 0;
}

static void s_help(void)
{
    printf("Usage: beanstalk-bench [options]\n"
           "\n"
           "Put %d-byte jobs into beanstalkd, consume them with forked consumers\n"
           "(reserve, delete) and measure throughput (pipelined puts) and end-to-end\n"
           "latency (one job at a time), reading completion from stats-tube.\n"
           "\n"
           "  --host ADDR         beanstalkd IPv4 address (default %s)\n"
           "  --port P            beanstalkd port (default %d)\n"
           "  --tube T            tube to use (default bench-PID)\n"
           "  --consumers W       consumer processes (default 1)\n"
           "  --jobs N            jobs in the throughput phase (default %d)\n"
           "  --window W          unanswered puts at most (default %d)\n"
           "  --latency-jobs M    jobs in the latency phase, 0 to skip (default %d)\n"
           "  --warmup N          jobs run first and not measured (default %d)\n"
           "  --gap-us U          pause between two latency jobs (default %d)\n"
           "  --deadline S        give up after S seconds in all (default %d)\n"
           "  --producers N       N processes put the throughput phase, each with its own\n"
           "                      connection and window (default 1, at most %d)\n"
           "  --put-only          only put --jobs jobs (no consumers) and print the put rate\n"
           "\n"
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
        O_TUBE,
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
    static const struct option options[] = {
        {"host", required_argument, NULL, O_HOST},
        {"port", required_argument, NULL, O_PORT},
        {"tube", required_argument, NULL, O_TUBE},
        {"consumers", required_argument, NULL, O_CONSUMERS},
        {"jobs", required_argument, NULL, O_JOBS},
        {"window", required_argument, NULL, O_WINDOW},
        {"latency-jobs", required_argument, NULL, O_LATENCY},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"gap-us", required_argument, NULL, O_GAP},
        {"deadline", required_argument, NULL, O_DEADLINE},
        {"producers", required_argument, NULL, O_PRODUCERS},
        {"put-only", no_argument, NULL, O_PUT_ONLY},
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
    snprintf(opts->tube, sizeof opts->tube, "bench-%ld", (long)getpid());
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
        case O_TUBE:
            bad = strlen(optarg) == 0 || strlen(optarg) > S_NAME_MAX ||
                  strspn(optarg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                 "0123456789-+/;.$_()") != strlen(optarg) ||
                  optarg[0] == '-';
            snprintf(opts->tube, sizeof opts->tube, "%s", optarg);
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
            fprintf(stderr, "beanstalk-bench: bad value '%s' for %s\n", optarg, argv[optind - 1]);
    }
    if (!bad && optind < argc) {
        fprintf(stderr, "beanstalk-bench: unexpected argument '%s'\n", argv[optind]);
        bad = 1;
    }
    if (bad) {
        fprintf(stderr, "Try 'beanstalk-bench --help'.\n");
        return -1;
    }
    opts->deadline_us = oq_clock_mono_us() + (int64_t)opts->deadline_s * S_US_PER_S;
    return 0;
}

/* The measured part, in the parent, once the consumers run. */
static int s_run(const s_opts_t *opts, s_conn_t *c)
{
    char request[S_NAME_MAX + 32];
    snprintf(request, sizeof request, "use %s\r\n", opts->tube);
    if (s_send(c, request, strlen(request)) < 0 || s_expect(c, "USING") < 0)
        return -1;
    if (opts->put_only) {
        int64_t start_us = oq_clock_mono_us();
        if (s_produce(c, opts, opts->jobs) < 0)
            return -1;
        double seconds = (double)(oq_clock_mono_us() - start_us) / S_US_PER_S;
        printf("system=beanstalkd mode=put_only producers=%" PRIu64 " jobs=%" PRIu64
               " window=%" PRIu64 " seconds=%.3f jobs_per_s=%.0f\n",
               opts->producers, opts->jobs, opts->window, seconds, (double)opts->jobs / seconds);
        return 0;
    }
    uint64_t deleted = 0, watching = 0;
    while (watching < opts->consumers) {
        if (s_stats(c, opts->tube, &deleted, &watching) < 0)
            return -1;
        if (oq_clock_mono_us() > opts->deadline_us) {
            fprintf(stderr, "beanstalk-bench: deadline passed waiting for consumers\n");
            return -1;
        }
        if (watching < opts->consumers)
            oq_support_sleep_us(S_WORKER_POLL_US);
    }
    int64_t at_us;
    if (opts->warmup_jobs > 0) {
        if (s_pipeline(c, opts, opts->warmup_jobs) < 0 ||
            s_wait_deleted(c, opts, deleted + opts->warmup_jobs, S_DRAIN_POLL_US, &at_us, NULL) < 0)
            return -1;
        deleted += opts->warmup_jobs;
    }

    int64_t start_us = oq_clock_mono_us();
    if (s_produce(c, opts, opts->jobs) < 0 ||
        s_wait_deleted(c, opts, deleted + opts->jobs, S_DRAIN_POLL_US, &at_us, NULL) < 0)
        return -1;
    deleted += opts->jobs;
    double seconds = (double)(at_us - start_us) / S_US_PER_S;

    oq_samples_t *latency = oq_samples_new(opts->latency_jobs);
    oq_samples_t *rtt = oq_samples_new(S_MAX_RTT_SAMPLES);
    int rc = latency && rtt ? s_latency(c, opts, &deleted, latency, rtt) : -1;
    if (rc == 0)
        printf("system=beanstalkd producers=%" PRIu64 " workers=%" PRIu64 " jobs=%" PRIu64
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
    memset(s_body, 'x', sizeof s_body);
    /* Output must not be duplicated into the children's buffers. */
    fflush(stdout);

    pid_t parent = getpid();
    pid_t children[S_MAX_CONSUMERS];
    uint64_t started = 0;
    int rc = 0;
    for (; !opts.put_only && started < opts.consumers; started++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "beanstalk-bench: fork: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        if (pid == 0)
            _exit(s_consumer(&opts, parent));
        children[started] = pid;
    }

    s_conn_t *c = malloc(sizeof *c);
    if (rc == 0 && (!c || s_connect(c, &opts) < 0 || s_run(&opts, c) < 0))
        rc = 1;
    if (c && c->fd >= 0)
        close(c->fd);
    free(c);

    /* Consumers block in reserve-with-timeout; they hold no job between
       jobs, so SIGTERM loses nothing. */
    for (uint64_t i = 0; i < started; i++)
        kill(children[i], SIGTERM);
    for (uint64_t i = 0; i < started; i++)
        while (waitpid(children[i], NULL, 0) < 0 && errno == EINTR)
            ;
    return rc;
}
