/*  transport_rtt.c: transport-rtt, the floor under every onceq hop. It times
    the round trip of one small message (100 bytes by default), one at a
    time, between two processes on loopback, over each transport a onceq
    cycle could ride on:

    - tcp:       a plain TCP socket, blocking send and recv, TCP_NODELAY
                 (what beanstalkd's and Redis' clients do);
    - zmq-tcp:   a libzmq DEALER to a ROUTER over tcp:// (what onceq does
                 with --insecure);
    - zmq-curve: the same with CURVE (what onceq does by default);
    - zmq-ipc:   the same over ipc:// (a Unix domain socket);
    - zmq-inproc: the same over inproc:// between two threads of one
                 process, with no I/O thread (what onceq-worker's main
                 thread and its job thread do for every job).

    The client (this process) forks an echo server for every run, so both
    ends are fresh processes with their own libzmq context and I/O thread
    (zmq-inproc: a thread, and the figures are each thread's own).
    Each run does --warmup round trips that are not measured, then
    --round-trips timed ones. Besides the percentiles it counts, with
    getrusage over the timed round trips only, each side's context switches
    (a thread that blocks and is woken costs one; the voluntary ones apart)
    and CPU time, every thread of the process included. That is the figure
    that says how many wake-ups a hop costs: a plain socket's round trip
    wakes each side once, a ZeroMQ round trip also wakes both I/O threads.

    Runs take the modes in turn (run 1 of each mode, then run 2, ...) so
    that the machine's drift hits every mode alike; the summary gives the
    median over --runs of each figure, and each ZeroMQ mode's ratio to tcp.
    tests/bench/README.md explains how to read it. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "onceq/clock.h"
#include "bench_flags.h"
#include "loopback.h"
#include "samples.h"

#define S_PROGRAM "transport-rtt"

#define S_DEFAULT_ROUND_TRIPS 5000
#define S_DEFAULT_WARMUP      500
#define S_MAX_ROUND_TRIPS     10000000
#define S_MAX_RUNS            OQ_BENCH_MAX_RUNS
#define S_RECV_TIMEOUT_MS     10000 /* one round trip may take this long at most */
#define S_LINGER_MS           1000  /* a closing ZeroMQ socket flushes this long at most */
#define S_CHILD_DEADLINE_S    600   /* the echo server exits after this long, whatever happens */
#define S_ENDPOINT_MAX        256
#define S_US_PER_S            1000000
#define S_CURVE_KEY_Z85       41 /* 40 characters and the NUL */

typedef enum { S_TCP, S_ZMQ_TCP, S_ZMQ_CURVE, S_ZMQ_IPC, S_ZMQ_INPROC, S_MODES } s_mode_t;

static const char *const s_mode_names[S_MODES] = {"tcp", "zmq-tcp", "zmq-curve", "zmq-ipc",
                                                  "zmq-inproc"};

#define S_INPROC_ENDPOINT "inproc://transport-rtt"

typedef struct {
    bool modes[S_MODES];  /* which modes to run */
    uint64_t round_trips; /* timed, per run */
    uint64_t warmup;      /* untimed, per run, before the timed ones */
    uint64_t runs;        /* per mode */
    uint64_t bytes;       /* message size */
} s_opts_t;

/* What one side spent over the timed round trips. */
typedef struct {
    int64_t voluntary_cs;   /* blocked and woken again */
    int64_t involuntary_cs; /* preempted */
    int64_t cpu_us;         /* user + system, every thread */
} s_usage_t;

/* The figures of one run; the context switches are per round trip. */
typedef struct {
    double p50_us, p99_us, max_us;
    double rt_per_s;
    double client_cs, server_cs;         /* all context switches, every thread */
    double client_cpu_us, server_cpu_us; /* user + system, every thread */
    double client_vcs, server_vcs;       /* of the switches, the voluntary ones */
} s_result_t;

/* The figures in the order of s_figure, named as in the per-run lines. */
#define S_FIGURES 10
static const char *const s_figure_names[S_FIGURES] = {
    "p50_us",    "p99_us",        "max_us",        "rt_per_s",   "client_cs",
    "server_cs", "client_cpu_us", "server_cpu_us", "client_vcs", "server_vcs",
};

static double s_figure(const s_result_t *r, int i)
{
    const double all[S_FIGURES] = {r->p50_us,     r->p99_us,    r->max_us,        r->rt_per_s,
                                   r->client_cs,  r->server_cs, r->client_cpu_us, r->server_cpu_us,
                                   r->client_vcs, r->server_vcs};
    return all[i];
}

/* What the process (every thread) has spent so far; the calling thread
   alone in zmq-inproc, where both ends are threads of this process. */
static int s_usage_who = RUSAGE_SELF;

static void s_usage_now(s_usage_t *u)
{
    struct rusage ru;
    getrusage(s_usage_who, &ru);
    u->voluntary_cs = ru.ru_nvcsw;
    u->involuntary_cs = ru.ru_nivcsw;
    u->cpu_us = (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * S_US_PER_S +
                ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

static s_usage_t s_usage_since(const s_usage_t *from)
{
    s_usage_t now;
    s_usage_now(&now);
    return (s_usage_t){now.voluntary_cs - from->voluntary_cs,
                       now.involuntary_cs - from->involuntary_cs, now.cpu_us - from->cpu_us};
}

/* ---- plain TCP ------------------------------------------------------------ */

/* The echo server's side: warmup + round_trips echoes, with the usage of
   the timed ones written to report. */
static int s_tcp_serve(int listener, const s_opts_t *opts, int report)
{
    int fd = accept(listener, NULL, NULL);
    close(listener);
    if (fd < 0 || oq_loopback_tune(fd, S_RECV_TIMEOUT_MS) < 0)
        return -1;
    uint8_t *buf = malloc(opts->bytes);
    s_usage_t from = {0}, spent;
    int rc = buf ? 0 : -1;
    for (uint64_t i = 0; rc == 0 && i < opts->warmup + opts->round_trips; i++) {
        if (i == opts->warmup)
            s_usage_now(&from);
        rc = oq_loopback_full(fd, buf, opts->bytes, true) < 0 ||
                     oq_loopback_full(fd, buf, opts->bytes, false) < 0
                 ? -1
                 : 0;
    }
    spent = s_usage_since(&from);
    if (rc == 0 && oq_loopback_full(report, &spent, sizeof spent, false) < 0)
        rc = -1;
    free(buf);
    close(fd);
    return rc;
}

/* ---- ZeroMQ --------------------------------------------------------------- */

/* Keys for CURVE, made once: the server's pair and the client's pair. */
static char s_server_public[S_CURVE_KEY_Z85], s_server_secret[S_CURVE_KEY_Z85];
static char s_client_public[S_CURVE_KEY_Z85], s_client_secret[S_CURVE_KEY_Z85];

static int s_zmq_common(void *sock)
{
    int linger = S_LINGER_MS, timeout = S_RECV_TIMEOUT_MS;
    return zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger) < 0 ||
                   zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout) < 0
               ? -1
               : 0;
}

/* The echo server's side over ZeroMQ: a ROUTER bound to bind_to, its real
   endpoint written to report, then warmup + round_trips echoes, then the
   usage of the timed ones written to report. In shared (zmq-inproc) if not
   NULL, else in a context of its own. */
static int s_zmq_serve(s_mode_t mode, const char *bind_to, const s_opts_t *opts, int report,
                       void *shared)
{
    void *ctx = shared ? shared : zmq_ctx_new();
    void *sock = ctx ? zmq_socket(ctx, ZMQ_ROUTER) : NULL;
    int rc = sock ? s_zmq_common(sock) : -1;
    if (rc == 0 && mode == S_ZMQ_CURVE) {
        int server = 1;
        rc = zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &server, sizeof server) < 0 ||
                     zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, s_server_secret, 40) < 0
                 ? -1
                 : 0;
    }
    char endpoint[S_ENDPOINT_MAX] = "";
    size_t endpoint_len = sizeof endpoint;
    if (rc == 0 && (zmq_bind(sock, bind_to) < 0 ||
                    zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, endpoint, &endpoint_len) < 0 ||
                    oq_loopback_full(report, endpoint, sizeof endpoint, false) < 0))
        rc = -1;
    s_usage_t from = {0}, spent;
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    for (uint64_t i = 0; rc == 0 && i < opts->warmup + opts->round_trips; i++) {
        if (i == opts->warmup)
            s_usage_now(&from);
        if (zmq_msg_recv(&id, sock, 0) < 0 || zmq_msg_recv(&body, sock, 0) < 0 ||
            zmq_msg_send(&id, sock, ZMQ_SNDMORE) < 0 || zmq_msg_send(&body, sock, 0) < 0)
            rc = -1;
    }
    spent = s_usage_since(&from);
    if (rc == 0 && oq_loopback_full(report, &spent, sizeof spent, false) < 0)
        rc = -1;
    zmq_msg_close(&id);
    zmq_msg_close(&body);
    if (sock)
        zmq_close(sock);
    if (ctx && !shared)
        zmq_ctx_term(ctx);
    return rc;
}

/* zmq-inproc: the echo server as a thread of this process. */
typedef struct {
    const s_opts_t *opts;
    void *ctx; /* shared with the client: inproc:// works within one context */
    int report;
    int rc;
} s_thread_serve_t;

static void *s_thread_serve(void *arg)
{
    s_thread_serve_t *t = arg;
    t->rc = s_zmq_serve(S_ZMQ_INPROC, S_INPROC_ENDPOINT, t->opts, t->report, t->ctx);
    return NULL;
}

static void *s_zmq_connect(void *ctx, s_mode_t mode, const char *endpoint)
{
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    if (!sock)
        return NULL;
    if (s_zmq_common(sock) < 0 ||
        (mode == S_ZMQ_CURVE &&
         (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, s_server_public, 40) < 0 ||
          zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, s_client_public, 40) < 0 ||
          zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, s_client_secret, 40) < 0)) ||
        zmq_connect(sock, endpoint) < 0) {
        zmq_close(sock);
        return NULL;
    }
    return sock;
}

/* ---- one run -------------------------------------------------------------- */

/* A connection of the client: a TCP fd or a ZeroMQ socket. */
typedef struct {
    int fd;
    void *sock;
} s_client_t;

static int s_round_trip(s_client_t *c, uint8_t *buf, size_t len)
{
    if (c->sock)
        return zmq_send(c->sock, buf, len, 0) == (int)len &&
                       zmq_recv(c->sock, buf, len, 0) == (int)len
                   ? 0
                   : -1;
    return oq_loopback_full(c->fd, buf, len, false) < 0 ||
                   oq_loopback_full(c->fd, buf, len, true) < 0
               ? -1
               : 0;
}

/* Read exactly len bytes from the server's report pipe. */
static int s_read_report(int fd, void *out, size_t len)
{
    return oq_loopback_full(fd, out, len, true);
}

/* The timed part, on a connected client; fills r except the server's figures. */
static int s_measure(s_client_t *c, const s_opts_t *opts, s_result_t *r)
{
    uint8_t *buf = malloc(opts->bytes);
    oq_samples_t *samples = oq_samples_new(opts->round_trips);
    int rc = buf && samples ? 0 : -1;
    if (buf)
        memset(buf, 'x', opts->bytes);
    for (uint64_t i = 0; rc == 0 && i < opts->warmup; i++)
        rc = s_round_trip(c, buf, opts->bytes);
    s_usage_t from;
    s_usage_now(&from);
    int64_t start_us = oq_clock_mono_us(), max_us = 0;
    for (uint64_t i = 0; rc == 0 && i < opts->round_trips; i++) {
        int64_t t0 = oq_clock_mono_us();
        rc = s_round_trip(c, buf, opts->bytes);
        int64_t took = oq_clock_mono_us() - t0;
        oq_samples_add(samples, took);
        if (took > max_us)
            max_us = took;
    }
    int64_t elapsed_us = oq_clock_mono_us() - start_us;
    s_usage_t spent = s_usage_since(&from);
    if (rc == 0) {
        double n = (double)opts->round_trips;
        r->p50_us = (double)oq_samples_percentile(samples, 50);
        r->p99_us = (double)oq_samples_percentile(samples, 99);
        r->max_us = (double)max_us;
        r->rt_per_s = elapsed_us > 0 ? n * S_US_PER_S / (double)elapsed_us : 0;
        r->client_vcs = (double)spent.voluntary_cs / n;
        r->client_cs = (double)(spent.voluntary_cs + spent.involuntary_cs) / n;
        r->client_cpu_us = (double)spent.cpu_us / n;
    }
    oq_samples_destroy(&samples);
    free(buf);
    return rc;
}

static void s_server_figures(const s_usage_t *server, const s_opts_t *opts, s_result_t *r)
{
    double n = (double)opts->round_trips;
    r->server_vcs = (double)server->voluntary_cs / n;
    r->server_cs = (double)(server->voluntary_cs + server->involuntary_cs) / n;
    r->server_cpu_us = (double)server->cpu_us / n;
}

/* One run of zmq-inproc: the echo server on a thread, one context. */
static int s_run_inproc(const s_opts_t *opts, s_result_t *r)
{
    int pipe_fds[2];
    if (pipe(pipe_fds) < 0) {
        perror(S_PROGRAM ": pipe");
        return -1;
    }
    s_thread_serve_t serve = {.opts = opts, .ctx = zmq_ctx_new(), .report = pipe_fds[1]};
    pthread_t thread;
    int rc = serve.ctx && pthread_create(&thread, NULL, s_thread_serve, &serve) == 0 ? 0 : -1;
    bool started = rc == 0;
    s_client_t client = {.fd = -1, .sock = NULL};
    char endpoint[S_ENDPOINT_MAX];
    s_usage_t server;
    s_usage_who = RUSAGE_THREAD;
    if (rc == 0 && s_read_report(pipe_fds[0], endpoint, sizeof endpoint) == 0) {
        endpoint[sizeof endpoint - 1] = '\0';
        client.sock = s_zmq_connect(serve.ctx, S_ZMQ_INPROC, endpoint);
    }
    rc = client.sock ? s_measure(&client, opts, r) : -1;
    if (rc == 0 && s_read_report(pipe_fds[0], &server, sizeof server) < 0)
        rc = -1;
    if (client.sock)
        zmq_close(client.sock);
    /* A server still waiting for a message gives up after S_RECV_TIMEOUT_MS. */
    if (started) {
        pthread_join(thread, NULL);
        rc = serve.rc < 0 ? -1 : rc;
    }
    s_usage_who = RUSAGE_SELF;
    if (serve.ctx)
        zmq_ctx_term(serve.ctx);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    if (rc < 0) {
        fprintf(stderr, S_PROGRAM ": zmq-inproc: the run failed\n");
        return -1;
    }
    s_server_figures(&server, opts, r);
    return 0;
}

/* One run of one mode: fork the echo server, measure, collect its figures. */
static int s_run(s_mode_t mode, const s_opts_t *opts, s_result_t *r)
{
    if (mode == S_ZMQ_INPROC)
        return s_run_inproc(opts, r);
    int pipe_fds[2];
    uint16_t port = 0;
    int listener = -1;
    char ipc_dir[] = "/tmp/transport-rtt.XXXXXX";
    char bind_to[S_ENDPOINT_MAX] = "tcp://127.0.0.1:*";
    if (mode == S_TCP && (listener = oq_loopback_listen(&port)) < 0) {
        perror(S_PROGRAM ": listen");
        return -1;
    }
    if (mode == S_ZMQ_IPC) {
        if (!mkdtemp(ipc_dir)) {
            perror(S_PROGRAM ": mkdtemp");
            return -1;
        }
        snprintf(bind_to, sizeof bind_to, "ipc://%s/rtt.sock", ipc_dir);
    }
    if (pipe(pipe_fds) < 0) {
        perror(S_PROGRAM ": pipe");
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror(S_PROGRAM ": fork");
        return -1;
    }
    if (pid == 0) {
        /* The echo server: nothing of the parent's but the listener and the pipe. */
        close(pipe_fds[0]);
        alarm(S_CHILD_DEADLINE_S);
        int rc = mode == S_TCP ? s_tcp_serve(listener, opts, pipe_fds[1])
                               : s_zmq_serve(mode, bind_to, opts, pipe_fds[1], NULL);
        _exit(rc == 0 ? 0 : 1);
    }
    close(pipe_fds[1]);
    int rc = 0;
    s_client_t client = {.fd = -1, .sock = NULL};
    void *ctx = NULL;
    if (mode == S_TCP) {
        close(listener);
        client.fd = oq_loopback_connect(port, S_RECV_TIMEOUT_MS);
        rc = client.fd < 0 ? -1 : 0;
    } else {
        char endpoint[S_ENDPOINT_MAX];
        rc = s_read_report(pipe_fds[0], endpoint, sizeof endpoint);
        endpoint[sizeof endpoint - 1] = '\0';
        ctx = rc == 0 ? zmq_ctx_new() : NULL;
        client.sock = ctx ? s_zmq_connect(ctx, mode, endpoint) : NULL;
        rc = client.sock ? 0 : -1;
    }
    if (rc == 0)
        rc = s_measure(&client, opts, r);
    s_usage_t server;
    if (rc == 0 && s_read_report(pipe_fds[0], &server, sizeof server) < 0)
        rc = -1;
    if (client.fd >= 0)
        close(client.fd);
    if (client.sock)
        zmq_close(client.sock);
    if (ctx)
        zmq_ctx_term(ctx);
    close(pipe_fds[0]);
    if (rc < 0)
        kill(pid, SIGTERM);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (mode == S_ZMQ_IPC) {
        char path[S_ENDPOINT_MAX + 16];
        snprintf(path, sizeof path, "%s/rtt.sock", ipc_dir);
        unlink(path);
        rmdir(ipc_dir);
    }
    if (rc < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, S_PROGRAM ": %s: the run failed (no answer within %d ms?)\n",
                s_mode_names[mode], S_RECV_TIMEOUT_MS);
        return -1;
    }
    s_server_figures(&server, opts, r);
    return 0;
}

/* ---- summary -------------------------------------------------------------- */

static void s_summary(const s_opts_t *opts, s_result_t results[S_MODES][S_MAX_RUNS])
{
    double med[S_MODES][S_FIGURES];
    double v[S_MAX_RUNS];
    for (int m = 0; m < S_MODES; m++)
        for (int f = 0; f < S_FIGURES && opts->modes[m]; f++) {
            for (uint64_t r = 0; r < opts->runs; r++)
                v[r] = s_figure(&results[m][r], f);
            med[m][f] = oq_samples_median(v, opts->runs);
        }
    printf("round trips of %" PRIu64 " bytes, one at a time, on loopback: median of %" PRIu64
           " runs of %" PRIu64 " (after %" PRIu64 " unmeasured)\n\n",
           opts->bytes, opts->runs, opts->round_trips, opts->warmup);
    printf("%-10s %8s %8s %8s %10s  %11s %11s  %11s %11s\n", "mode", "p50 us", "p99 us", "max us",
           "rt/s", "client cs", "server cs", "client cpu", "server cpu");
    for (int m = 0; m < S_MODES; m++) {
        if (!opts->modes[m])
            continue;
        printf("%-10s %8.0f %8.0f %8.0f %10.0f  %11.2f %11.2f  %11.1f %11.1f\n", s_mode_names[m],
               med[m][0], med[m][1], med[m][2], med[m][3], med[m][4], med[m][5], med[m][6],
               med[m][7]);
    }
    printf("\ncs: context switches per round trip, every thread of the process (a\n"
           "thread that blocks and is woken costs one; the per-run lines on stderr\n"
           "give the voluntary ones, vcs, apart); cpu: user + system us per round\n"
           "trip, every thread; for zmq-inproc, where both ends are threads of one\n"
           "process, each end's thread alone\n");
    if (!opts->modes[S_TCP])
        return;
    printf("\n%-10s %10s %10s %10s %12s\n", "vs tcp", "p50 x", "p99 x", "rt/s x", "switches x");
    for (int m = S_ZMQ_TCP; m < S_MODES; m++) {
        if (!opts->modes[m])
            continue;
        double cs = med[m][4] + med[m][5], tcp_cs = med[S_TCP][4] + med[S_TCP][5];
        printf("%-10s %10.2f %10.2f %10.2f %12.2f\n", s_mode_names[m], med[m][0] / med[S_TCP][0],
               med[m][1] / med[S_TCP][1], med[m][3] / med[S_TCP][3], tcp_cs > 0 ? cs / tcp_cs : 0);
    }
    printf("\na round trip is two hops, so the p50 ratio is also what one ZeroMQ hop\n"
           "costs against one socket hop here\n");
}

/* ---- options -------------------------------------------------------------- */

static const char s_usage[] =
    "usage: " S_PROGRAM " [options]\n"
    "\n"
    "Time the round trip of one message, one at a time, between two processes\n"
    "on loopback: plain TCP, libzmq DEALER->ROUTER over tcp://, the same with\n"
    "CURVE, over ipc://, and over inproc:// between two threads. Prints, per\n"
    "mode, the medians over the runs of p50, p99 and max (us), round trips a\n"
    "second, and each side's context switches and CPU time per round trip;\n"
    "then each ZeroMQ mode against tcp. One result line per run goes to stderr.\n";

/* 0 to run, 1 after --help, -1 after a usage error. */
static int s_parse(int argc, char **argv, s_opts_t *opts)
{
    *opts = (s_opts_t){0};
    oq_bench_modes_t modes = {s_mode_names, S_MODES, opts->modes, false};
    const oq_flag_t flags[] = {
        OQ_BENCH_FLAG_MODE(&modes, "tcp, zmq-tcp, zmq-curve, zmq-ipc, zmq-inproc or all"),
        OQ_BENCH_UINT("round-trips", "N", 1, S_MAX_ROUND_TRIPS, S_DEFAULT_ROUND_TRIPS,
                      &opts->round_trips, "timed round trips per run"),
        OQ_BENCH_UINT("warmup", "N", 0, S_MAX_ROUND_TRIPS, S_DEFAULT_WARMUP, &opts->warmup,
                      "unmeasured round trips before them"),
        OQ_BENCH_FLAG_RUNS(&opts->runs),
        OQ_BENCH_FLAG_BYTES(&opts->bytes),
    };
    int rc =
        oq_bench_flags_parse(S_PROGRAM, s_usage, NULL, flags, OQ_FLAGS_COUNT(flags), argc, argv);
    if (rc == 0)
        oq_bench_modes_settle(&modes);
    return rc;
}

int main(int argc, char **argv)
{
    s_opts_t opts;
    int parsed = s_parse(argc, argv, &opts);
    if (parsed != 0)
        return parsed < 0 ? OQ_BENCH_EXIT_USAGE : 0;
    signal(SIGPIPE, SIG_IGN);
    if (opts.modes[S_ZMQ_CURVE] && (zmq_curve_keypair(s_server_public, s_server_secret) < 0 ||
                                    zmq_curve_keypair(s_client_public, s_client_secret) < 0)) {
        fprintf(stderr, S_PROGRAM ": no CURVE in this libzmq: %s\n", zmq_strerror(errno));
        return 1;
    }
    static s_result_t results[S_MODES][S_MAX_RUNS];
    for (uint64_t r = 0; r < opts.runs; r++)
        for (int m = 0; m < S_MODES; m++) {
            if (!opts.modes[m])
                continue;
            s_result_t *res = &results[m][r];
            if (s_run((s_mode_t)m, &opts, res) < 0)
                return 1;
            fprintf(stderr, "mode=%s run=%" PRIu64, s_mode_names[m], r + 1);
            for (int f = 0; f < S_FIGURES; f++)
                fprintf(stderr, " %s=%.2f", s_figure_names[f], s_figure(res, f));
            fprintf(stderr, "\n");
        }
    s_summary(&opts, results);
    return 0;
}
