/*  chain_rtt.c: chain-rtt, the floor the transport sets under one onceq job.
    A job alone in the system travels four hops in a row: producer ->
    broker (dispatch), broker -> worker (delivery), worker -> broker (ack),
    broker -> producer (the answer). This program times exactly that chain
    of one small message (100 bytes by default) across three processes on
    loopback, with nothing done at any stop but passing it on:

        producer -> relay -> echo -> relay -> producer

    - tcp:     plain TCP sockets, TCP_NODELAY; the relay waits on both of
               its connections with one poll(2), as beanstalkd's loop does,
               producer and echo block in read(2);
    - zmq-tcp: libzmq over tcp://: the relay binds two ROUTER sockets
               (front for the producer, back for the echo) and waits on
               both with zmq_poll, as onceq-broker does; producer and echo
               are DEALERs, as onceq's client and worker are;
    - zmq-curve: the same with CURVE, what onceq speaks by default.

    The producer (this process) forks the relay and the echo for every run.
    Each run does --warmup chains unmeasured, then --chains timed ones, one
    at a time, with --gap-us of pause after each (1 ms by default, as
    onceq-bench and beanstalk-bench pause between two latency jobs: the
    processes then wake from sleep for each chain, as they do there; 0
    runs the chains back to back, with everything kept warm). Besides p50, p99 and max it counts,
   with getrusage over the timed chains, each process's context switches and CPU time per chain,
    every thread included (libzmq's I/O threads too). Runs take the modes in
    turn, so that the machine's drift hits every mode alike; the summary
    gives the median over --runs of each figure and each ZeroMQ mode's ratio
    to tcp. tests/bench/README.md ("The floor of a job's path") reads it. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
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
#include "support.h"

#define S_PROGRAM "chain-rtt"

#define S_DEFAULT_CHAINS   5000
#define S_DEFAULT_WARMUP   500
#define S_DEFAULT_GAP_US   1000 /* as onceq-bench's and beanstalk-bench's latency runs */
#define S_MAX_GAP_US       1000000
#define S_MAX_CHAINS       10000000
#define S_MAX_RUNS         OQ_BENCH_MAX_RUNS
#define S_RECV_TIMEOUT_MS  10000 /* one chain may take this long at most */
#define S_LINGER_MS        1000  /* a closing ZeroMQ socket flushes this long at most */
#define S_CHILD_DEADLINE_S 600   /* relay and echo exit after this long, whatever happens */
#define S_ENDPOINT_MAX     256
#define S_US_PER_S         1000000
#define S_KEY_Z85          41 /* 40 characters and the NUL */
#define S_HELLO            "hello"

typedef enum { S_TCP, S_ZMQ_TCP, S_ZMQ_CURVE, S_MODES } s_mode_t;

static const char *const s_mode_names[S_MODES] = {"tcp", "zmq-tcp", "zmq-curve"};

typedef struct {
    bool modes[S_MODES];
    uint64_t chains; /* timed, per run */
    uint64_t warmup; /* untimed, per run */
    uint64_t runs;   /* per mode */
    uint64_t bytes;  /* message size */
    uint64_t gap_us; /* pause after each timed chain */
} s_opts_t;

/* What one process spent over the timed chains. */
typedef struct {
    int64_t cs;     /* context switches, voluntary and not */
    int64_t cpu_us; /* user + system, every thread */
} s_usage_t;

/* The figures of one run; switches and CPU are per chain. */
#define S_FIGURES 9
typedef struct {
    double v[S_FIGURES];
} s_result_t;

enum { F_P50, F_P99, F_MAX, F_RATE, F_PRODUCER_CS, F_RELAY_CS, F_ECHO_CS, F_CPU_ALL, F_CS_ALL };

static const char *const s_figure_names[S_FIGURES] = {"p50_us",       "p99_us",      "max_us",
                                                      "chains_per_s", "producer_cs", "relay_cs",
                                                      "echo_cs",      "cpu_us",      "cs"};

static void s_usage_now(s_usage_t *u)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    u->cs = ru.ru_nvcsw + ru.ru_nivcsw;
    u->cpu_us = (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * S_US_PER_S +
                ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

static s_usage_t s_usage_since(const s_usage_t *from)
{
    s_usage_t now;
    s_usage_now(&now);
    return (s_usage_t){now.cs - from->cs, now.cpu_us - from->cpu_us};
}

/* ---- plain TCP ------------------------------------------------------------ */

static int s_tcp_accept(int listener)
{
    int fd = accept(listener, NULL, NULL);
    close(listener);
    if (fd >= 0 && oq_loopback_tune(fd, S_RECV_TIMEOUT_MS) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The relay: one poll(2) over both connections, each message passed on
   whole. A message is small enough to arrive in one piece on loopback, and
   oq_loopback_full reads the rest if it does not. */
static int s_tcp_relay(int front_listener, int back_listener, const s_opts_t *opts,
                       s_usage_t *spent)
{
    int back = s_tcp_accept(back_listener);
    int front = s_tcp_accept(front_listener);
    uint8_t *buf = malloc(opts->bytes);
    int rc = back >= 0 && front >= 0 && buf ? 0 : -1;
    s_usage_t from = {0};
    uint64_t passed = 0, total = 2 * (opts->warmup + opts->chains);
    while (rc == 0 && passed < total) {
        if (passed == 2 * opts->warmup)
            s_usage_now(&from);
        struct pollfd fds[2] = {{.fd = front, .events = POLLIN}, {.fd = back, .events = POLLIN}};
        int n = poll(fds, 2, S_RECV_TIMEOUT_MS);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = -1;
        for (int i = 0; rc == 0 && i < 2; i++) {
            if (!fds[i].revents)
                continue;
            int in = i == 0 ? front : back, out = i == 0 ? back : front;
            rc = oq_loopback_full(in, buf, opts->bytes, true) < 0 ||
                         oq_loopback_full(out, buf, opts->bytes, false) < 0
                     ? -1
                     : 0;
            passed++;
        }
    }
    *spent = s_usage_since(&from);
    free(buf);
    if (front >= 0)
        close(front);
    if (back >= 0)
        close(back);
    return rc;
}

static int s_tcp_echo(uint16_t port, const s_opts_t *opts, s_usage_t *spent)
{
    int fd = oq_loopback_connect(port, S_RECV_TIMEOUT_MS);
    uint8_t *buf = malloc(opts->bytes);
    int rc = fd >= 0 && buf ? 0 : -1;
    s_usage_t from = {0};
    for (uint64_t i = 0; rc == 0 && i < opts->warmup + opts->chains; i++) {
        if (i == opts->warmup)
            s_usage_now(&from);
        rc = oq_loopback_full(fd, buf, opts->bytes, true) < 0 ||
                     oq_loopback_full(fd, buf, opts->bytes, false) < 0
                 ? -1
                 : 0;
    }
    *spent = s_usage_since(&from);
    free(buf);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* ---- ZeroMQ --------------------------------------------------------------- */

static char s_relay_public[S_KEY_Z85], s_relay_secret[S_KEY_Z85];
static char s_peer_public[S_KEY_Z85], s_peer_secret[S_KEY_Z85];

static void *s_zmq_socket(void *ctx, int type, s_mode_t mode)
{
    void *sock = zmq_socket(ctx, type);
    int linger = S_LINGER_MS, timeout = S_RECV_TIMEOUT_MS, one = 1;
    if (!sock)
        return NULL;
    bool bad = zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger) < 0 ||
               zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout) < 0;
    if (!bad && mode == S_ZMQ_CURVE && type == ZMQ_ROUTER)
        bad = zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) < 0 ||
              zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, s_relay_secret, 40) < 0;
    else if (!bad && mode == S_ZMQ_CURVE)
        bad = zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, s_relay_public, 40) < 0 ||
              zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, s_peer_public, 40) < 0 ||
              zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, s_peer_secret, 40) < 0;
    if (bad) {
        zmq_close(sock);
        return NULL;
    }
    return sock;
}

/* A ROUTER bound to a port the kernel picks; its endpoint in out. */
static void *s_zmq_bind(void *ctx, s_mode_t mode, char out[S_ENDPOINT_MAX])
{
    void *sock = s_zmq_socket(ctx, ZMQ_ROUTER, mode);
    size_t len = S_ENDPOINT_MAX;
    if (sock && (zmq_bind(sock, "tcp://127.0.0.1:*") < 0 ||
                 zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, out, &len) < 0)) {
        zmq_close(sock);
        return NULL;
    }
    return sock;
}

/* Receive [identity, body] from a ROUTER. */
static int s_zmq_recv2(void *sock, zmq_msg_t *id, zmq_msg_t *body)
{
    return zmq_msg_recv(id, sock, 0) < 0 || !zmq_msg_more(id) || zmq_msg_recv(body, sock, 0) < 0
               ? -1
               : 0;
}

/* The relay: one zmq_poll over both ROUTERs; the echo says hello first so
   that the relay knows its identity, and the producer's is learnt from
   its first message. Endpoints go to report: front, then back. */
static int s_zmq_relay(s_mode_t mode, const s_opts_t *opts, int report, s_usage_t *spent)
{
    void *ctx = zmq_ctx_new();
    char front_at[S_ENDPOINT_MAX] = "", back_at[S_ENDPOINT_MAX] = "";
    void *front = ctx ? s_zmq_bind(ctx, mode, front_at) : NULL;
    void *back = ctx ? s_zmq_bind(ctx, mode, back_at) : NULL;
    int rc = front && back && oq_loopback_full(report, front_at, sizeof front_at, false) == 0 &&
                     oq_loopback_full(report, back_at, sizeof back_at, false) == 0
                 ? 0
                 : -1;
    zmq_msg_t echo_id, producer_id, id, body;
    zmq_msg_init(&echo_id);
    zmq_msg_init(&producer_id);
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    if (rc == 0 && s_zmq_recv2(back, &echo_id, &body) < 0)
        rc = -1;
    s_usage_t from = {0};
    uint64_t passed = 0, total = 2 * (opts->warmup + opts->chains);
    while (rc == 0 && passed < total) {
        if (passed == 2 * opts->warmup)
            s_usage_now(&from);
        zmq_pollitem_t items[2] = {{front, 0, ZMQ_POLLIN, 0}, {back, 0, ZMQ_POLLIN, 0}};
        int n = zmq_poll(items, 2, S_RECV_TIMEOUT_MS);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = -1;
        if (rc == 0 && (items[0].revents & ZMQ_POLLIN)) {
            /* producer -> echo */
            zmq_msg_t to;
            zmq_msg_init(&to);
            rc = s_zmq_recv2(front, &producer_id, &body) < 0 || zmq_msg_copy(&to, &echo_id) < 0 ||
                         zmq_msg_send(&to, back, ZMQ_SNDMORE) < 0 ||
                         zmq_msg_send(&body, back, 0) < 0
                     ? -1
                     : 0;
            zmq_msg_close(&to);
            passed++;
        }
        if (rc == 0 && (items[1].revents & ZMQ_POLLIN)) {
            /* echo -> producer */
            zmq_msg_t to;
            zmq_msg_init(&to);
            rc = s_zmq_recv2(back, &id, &body) < 0 || zmq_msg_copy(&to, &producer_id) < 0 ||
                         zmq_msg_send(&to, front, ZMQ_SNDMORE) < 0 ||
                         zmq_msg_send(&body, front, 0) < 0
                     ? -1
                     : 0;
            zmq_msg_close(&to);
            passed++;
        }
    }
    *spent = s_usage_since(&from);
    zmq_msg_close(&echo_id);
    zmq_msg_close(&producer_id);
    zmq_msg_close(&id);
    zmq_msg_close(&body);
    if (front)
        zmq_close(front);
    if (back)
        zmq_close(back);
    if (ctx)
        zmq_ctx_term(ctx);
    return rc;
}

static int s_zmq_echo(s_mode_t mode, const char *endpoint, const s_opts_t *opts, s_usage_t *spent)
{
    void *ctx = zmq_ctx_new();
    void *sock = ctx ? s_zmq_socket(ctx, ZMQ_DEALER, mode) : NULL;
    uint8_t *buf = malloc(opts->bytes);
    int rc = sock && buf && zmq_connect(sock, endpoint) == 0 &&
                     zmq_send(sock, S_HELLO, sizeof S_HELLO - 1, 0) >= 0
                 ? 0
                 : -1;
    s_usage_t from = {0};
    for (uint64_t i = 0; rc == 0 && i < opts->warmup + opts->chains; i++) {
        if (i == opts->warmup)
            s_usage_now(&from);
        rc = zmq_recv(sock, buf, opts->bytes, 0) == (int)opts->bytes &&
                     zmq_send(sock, buf, opts->bytes, 0) == (int)opts->bytes
                 ? 0
                 : -1;
    }
    *spent = s_usage_since(&from);
    free(buf);
    if (sock)
        zmq_close(sock);
    if (ctx)
        zmq_ctx_term(ctx);
    return rc;
}

/* ---- one run -------------------------------------------------------------- */

/* A child that runs part(arg) and exits 0 if it returned 0. */
static pid_t s_fork(int (*part)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    alarm(S_CHILD_DEADLINE_S);
    _exit(part(arg) == 0 ? 0 : 1);
}

typedef struct {
    s_mode_t mode;
    const s_opts_t *opts;
    int report;                    /* the pipe to the producer */
    int front, back;               /* tcp: the relay's listeners */
    uint16_t port;                 /* tcp: the relay's back port, for the echo */
    char endpoint[S_ENDPOINT_MAX]; /* zmq: the relay's back endpoint, for the echo */
} s_part_t;

static int s_relay_part(void *arg)
{
    s_part_t *p = arg;
    s_usage_t spent = {0};
    int rc = p->mode == S_TCP ? s_tcp_relay(p->front, p->back, p->opts, &spent)
                              : s_zmq_relay(p->mode, p->opts, p->report, &spent);
    return rc == 0 && oq_loopback_full(p->report, &spent, sizeof spent, false) == 0 ? 0 : -1;
}

static int s_echo_part(void *arg)
{
    s_part_t *p = arg;
    s_usage_t spent = {0};
    int rc = p->mode == S_TCP ? s_tcp_echo(p->port, p->opts, &spent)
                              : s_zmq_echo(p->mode, p->endpoint, p->opts, &spent);
    return rc == 0 && oq_loopback_full(p->report, &spent, sizeof spent, false) == 0 ? 0 : -1;
}

/* The producer: a TCP fd or a DEALER. */
typedef struct {
    int fd;
    void *sock;
} s_producer_t;

static int s_chain(s_producer_t *p, uint8_t *buf, size_t len)
{
    if (p->sock)
        return zmq_send(p->sock, buf, len, 0) == (int)len &&
                       zmq_recv(p->sock, buf, len, 0) == (int)len
                   ? 0
                   : -1;
    return oq_loopback_full(p->fd, buf, len, false) < 0 ||
                   oq_loopback_full(p->fd, buf, len, true) < 0
               ? -1
               : 0;
}

static int s_measure(s_producer_t *p, const s_opts_t *opts, s_result_t *r, s_usage_t *spent)
{
    uint8_t *buf = malloc(opts->bytes);
    oq_samples_t *samples = oq_samples_new(opts->chains);
    int rc = buf && samples ? 0 : -1;
    if (buf)
        memset(buf, 'x', opts->bytes);
    for (uint64_t i = 0; rc == 0 && i < opts->warmup; i++)
        rc = s_chain(p, buf, opts->bytes);
    s_usage_t from;
    s_usage_now(&from);
    int64_t busy_us = 0, max_us = 0; /* the chains' own time, pauses left out */
    for (uint64_t i = 0; rc == 0 && i < opts->chains; i++) {
        int64_t t0 = oq_clock_mono_us();
        rc = s_chain(p, buf, opts->bytes);
        int64_t took = oq_clock_mono_us() - t0;
        busy_us += took;
        oq_samples_add(samples, took);
        if (took > max_us)
            max_us = took;
        if (opts->gap_us)
            oq_support_sleep_us(opts->gap_us);
    }
    *spent = s_usage_since(&from);
    if (rc == 0) {
        r->v[F_P50] = (double)oq_samples_percentile(samples, 50);
        r->v[F_P99] = (double)oq_samples_percentile(samples, 99);
        r->v[F_MAX] = (double)max_us;
        r->v[F_RATE] = busy_us > 0 ? (double)opts->chains * S_US_PER_S / (double)busy_us : 0;
    }
    oq_samples_destroy(&samples);
    free(buf);
    return rc;
}

static int s_run(s_mode_t mode, const s_opts_t *opts, s_result_t *r)
{
    int relay_pipe[2], echo_pipe[2];
    if (pipe(relay_pipe) < 0 || pipe(echo_pipe) < 0) {
        perror(S_PROGRAM ": pipe");
        return -1;
    }
    s_part_t relay = {.mode = mode, .opts = opts, .report = relay_pipe[1], .front = -1, .back = -1};
    uint16_t front_port = 0;
    int rc = 0;
    if (mode == S_TCP && ((relay.front = oq_loopback_listen(&front_port)) < 0 ||
                          (relay.back = oq_loopback_listen(&relay.port)) < 0)) {
        perror(S_PROGRAM ": listen");
        rc = -1;
    }
    pid_t relay_pid = rc == 0 ? s_fork(s_relay_part, &relay) : -1;
    pid_t echo_pid = -1;
    s_producer_t producer = {.fd = -1, .sock = NULL};
    void *ctx = NULL;
    char front_at[S_ENDPOINT_MAX] = "";
    s_part_t echo = relay;
    echo.report = echo_pipe[1];
    if (relay_pid < 0)
        rc = -1;
    if (rc == 0 && mode != S_TCP &&
        (oq_loopback_full(relay_pipe[0], front_at, sizeof front_at, true) < 0 ||
         oq_loopback_full(relay_pipe[0], echo.endpoint, sizeof echo.endpoint, true) < 0))
        rc = -1;
    front_at[S_ENDPOINT_MAX - 1] = echo.endpoint[S_ENDPOINT_MAX - 1] = '\0';
    if (rc == 0)
        echo_pid = s_fork(s_echo_part, &echo);
    if (echo_pid < 0)
        rc = -1;
    if (relay.front >= 0)
        close(relay.front);
    if (relay.back >= 0)
        close(relay.back);
    close(relay_pipe[1]);
    close(echo_pipe[1]);
    if (rc == 0 && mode == S_TCP) {
        /* The relay accepts the echo first: give it the time to connect. */
        producer.fd = oq_loopback_connect(front_port, S_RECV_TIMEOUT_MS);
        rc = producer.fd < 0 ? -1 : 0;
    } else if (rc == 0) {
        ctx = zmq_ctx_new();
        producer.sock = ctx ? s_zmq_socket(ctx, ZMQ_DEALER, mode) : NULL;
        rc = producer.sock && zmq_connect(producer.sock, front_at) == 0 ? 0 : -1;
    }
    s_usage_t mine = {0}, relay_spent = {0}, echo_spent = {0};
    if (rc == 0)
        rc = s_measure(&producer, opts, r, &mine);
    if (rc == 0 && (oq_loopback_full(relay_pipe[0], &relay_spent, sizeof relay_spent, true) < 0 ||
                    oq_loopback_full(echo_pipe[0], &echo_spent, sizeof echo_spent, true) < 0))
        rc = -1;
    if (producer.fd >= 0)
        close(producer.fd);
    if (producer.sock)
        zmq_close(producer.sock);
    if (ctx)
        zmq_ctx_term(ctx);
    close(relay_pipe[0]);
    close(echo_pipe[0]);
    pid_t pids[2] = {relay_pid, echo_pid};
    for (int i = 0; i < 2; i++) {
        if (pids[i] <= 0)
            continue;
        if (rc < 0)
            kill(pids[i], SIGTERM);
        int status = 0;
        while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            rc = -1;
    }
    if (rc < 0) {
        fprintf(stderr, S_PROGRAM ": %s: the run failed (no answer within %d ms?)\n",
                s_mode_names[mode], S_RECV_TIMEOUT_MS);
        return -1;
    }
    double n = (double)opts->chains;
    r->v[F_PRODUCER_CS] = (double)mine.cs / n;
    r->v[F_RELAY_CS] = (double)relay_spent.cs / n;
    r->v[F_ECHO_CS] = (double)echo_spent.cs / n;
    r->v[F_CS_ALL] = r->v[F_PRODUCER_CS] + r->v[F_RELAY_CS] + r->v[F_ECHO_CS];
    r->v[F_CPU_ALL] = (double)(mine.cpu_us + relay_spent.cpu_us + echo_spent.cpu_us) / n;
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
                v[r] = results[m][r].v[f];
            med[m][f] = oq_samples_median(v, opts->runs);
        }
    printf("chains of 4 hops (producer -> relay -> echo -> relay -> producer) of %" PRIu64
           " bytes,\none at a time, %" PRIu64 " us apart, on loopback: median of %" PRIu64
           " runs of %" PRIu64 " (after %" PRIu64 " unmeasured)\n\n",
           opts->bytes, opts->gap_us, opts->runs, opts->chains, opts->warmup);
    printf("%-10s %8s %8s %8s %9s  %9s %9s %9s %9s  %9s\n", "mode", "p50 us", "p99 us", "max us",
           "chains/s", "prod cs", "relay cs", "echo cs", "all cs", "cpu us");
    for (int m = 0; m < S_MODES; m++) {
        if (!opts->modes[m])
            continue;
        printf("%-10s %8.0f %8.0f %8.0f %9.0f  %9.2f %9.2f %9.2f %9.2f  %9.1f\n", s_mode_names[m],
               med[m][F_P50], med[m][F_P99], med[m][F_MAX], med[m][F_RATE], med[m][F_PRODUCER_CS],
               med[m][F_RELAY_CS], med[m][F_ECHO_CS], med[m][F_CS_ALL], med[m][F_CPU_ALL]);
    }
    printf("\ncs: context switches per chain, every thread of each process; cpu: user +\n"
           "system us per chain, the three processes together\n");
    if (!opts->modes[S_TCP])
        return;
    printf("\n%-10s %10s %10s %12s\n", "vs tcp", "p50 x", "p99 x", "switches x");
    for (int m = S_ZMQ_TCP; m < S_MODES; m++) {
        if (!opts->modes[m])
            continue;
        printf("%-10s %10.2f %10.2f %12.2f\n", s_mode_names[m], med[m][F_P50] / med[S_TCP][F_P50],
               med[m][F_P99] / med[S_TCP][F_P99],
               med[S_TCP][F_CS_ALL] > 0 ? med[m][F_CS_ALL] / med[S_TCP][F_CS_ALL] : 0);
    }
}

/* ---- options -------------------------------------------------------------- */

static const char s_usage[] =
    "usage: " S_PROGRAM " [options]\n"
    "\n"
    "Time the 4-hop chain of one message, one at a time, across three processes\n"
    "on loopback: producer -> relay -> echo -> relay -> producer, the path of one\n"
    "onceq job (dispatch, delivery, ack, answer) with nothing done at the stops.\n"
    "Over plain TCP (the relay polls both connections) and over libzmq (the relay\n"
    "polls two ROUTER sockets; producer and echo are DEALERs), with and without\n"
    "CURVE. Prints, per mode, the medians over the runs of p50, p99 and max (us),\n"
    "chains a second (the pauses left out), each process's context switches and\n"
    "the CPU time per chain; then each ZeroMQ mode against tcp. One result line\n"
    "per run goes to stderr.\n";

/* 0 to run, 1 after --help, -1 after a usage error. */
static int s_parse(int argc, char **argv, s_opts_t *opts)
{
    *opts = (s_opts_t){0};
    oq_bench_modes_t modes = {s_mode_names, S_MODES, opts->modes, false};
    const oq_flag_t flags[] = {
        OQ_BENCH_FLAG_MODE(&modes, "tcp, zmq-tcp, zmq-curve or all"),
        OQ_BENCH_UINT("chains", "N", 1, S_MAX_CHAINS, S_DEFAULT_CHAINS, &opts->chains,
                      "timed chains per run"),
        OQ_BENCH_UINT("warmup", "N", 0, S_MAX_CHAINS, S_DEFAULT_WARMUP, &opts->warmup,
                      "unmeasured chains before them"),
        OQ_BENCH_FLAG_RUNS(&opts->runs),
        OQ_BENCH_FLAG_BYTES(&opts->bytes),
        OQ_BENCH_UINT("gap-us", "U", 0, S_MAX_GAP_US, S_DEFAULT_GAP_US, &opts->gap_us,
                      "microseconds of pause after each timed chain, 0 to " OQ_BENCH_STR(
                          S_MAX_GAP_US) ", as the latency runs of onceq-bench and beanstalk-bench"),
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
    if (opts.modes[S_ZMQ_CURVE] && (zmq_curve_keypair(s_relay_public, s_relay_secret) < 0 ||
                                    zmq_curve_keypair(s_peer_public, s_peer_secret) < 0)) {
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
                fprintf(stderr, " %s=%.2f", s_figure_names[f], res->v[f]);
            fprintf(stderr, "\n");
        }
    s_summary(&opts, results);
    return 0;
}
