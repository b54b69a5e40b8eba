/*  beanstalk_bench.c: beanstalk-bench, the same benchmark as onceq-bench run
    against beanstalkd, so that onceq's numbers have a well-known reference.
    Plain sockets and beanstalkd's text protocol; nothing else. The driver
    (peer.c) is shared with redis-bench; this file is what is beanstalkd's:

    - a consumer takes one job at a time: reserve, then delete
      (onceq-worker --processes W runs W processes with one job each);
    - the producer puts 100-byte bodies with at most --window puts
      unanswered (onceq-bench pipelines dispatches with the same window);
    - completion is read from the server's own counter, the tube's
      cmd-delete in stats-tube, just as onceq-bench reads a queue's done
      from stats; consumers are ready when the tube's current-watching
      shows them.

    --put-only just puts the jobs (no consumers) and reports the put rate,
    for the memory and replay measurements of tests/bench/durable_run.sh.

    tests/bench/README.md explains the method. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "onceq/clock.h"
#include "peer.h"

#define S_BODY_BYTES OQ_PEER_BODY_BYTES
#define S_PRIORITY   0
#define S_TTR_S      60 /* time to run: a lease far longer than a noop takes */

#define S_DEFAULT_PORT 11300

#define S_US_PER_MS      1000
#define S_RESERVE_WAIT_S 1     /* a consumer rechecks its deadline this often */
#define S_READ_BUF       65536 /* per connection */
#define S_LINE_MAX       512   /* longest reply line we expect */
#define S_STATS_MAX      8192  /* longest stats-tube body we accept */
#define S_NAME_MAX       200   /* beanstalkd's tube name limit */

#define S_XSTR(x) #x
#define S_STR(x)  S_XSTR(x)

/* One connection with a read buffer: replies are lines, some followed by a
   body of a length the line gives. */
typedef struct {
    int fd;
    char buf[S_READ_BUF];
    size_t start, end; /* unread bytes are buf[start..end) */
    int64_t deadline_us;
} s_conn_t;

static int s_connect(s_conn_t *c, const oq_peer_opts_t *opts)
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
static int s_stats(void *conn, const oq_peer_opts_t *opts, uint64_t *deleted, uint64_t *watching)
{
    s_conn_t *c = conn;
    const char *tube = opts->name;
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

/* Put n jobs with at most opts->window unanswered. Puts are collected and
   written together before each read, as a ZeroMQ socket batches them. */
static int s_pipeline(void *conn, const oq_peer_opts_t *opts, uint64_t n)
{
    s_conn_t *c = conn;
    char body[S_BODY_BYTES];
    memset(body, 'x', sizeof body);
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
            memcpy(out + len + header_len, body, S_BODY_BYTES);
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

static void *s_open(const oq_peer_opts_t *opts)
{
    s_conn_t *c = malloc(sizeof *c);
    if (c && s_connect(c, opts) == 0)
        return c;
    free(c);
    return NULL;
}

static void s_close(void *conn)
{
    s_conn_t *c = conn;
    close(c->fd);
    free(c);
}

/* Put into the run's tube from now on. */
static int s_use(void *conn, const oq_peer_opts_t *opts)
{
    char request[S_NAME_MAX + 32];
    snprintf(request, sizeof request, "use %s\r\n", opts->name);
    return s_send(conn, request, strlen(request)) < 0 ? -1 : s_expect(conn, "USING");
}

/* Reserve from the run's tube only. */
static int s_watch(void *conn, const oq_peer_opts_t *opts)
{
    char request[S_NAME_MAX + 32];
    snprintf(request, sizeof request, "watch %s\r\nignore default\r\n", opts->name);
    if (s_send(conn, request, strlen(request)) < 0 || s_expect(conn, "WATCHING") < 0 ||
        s_expect(conn, "WATCHING") < 0)
        return -1;
    return 0;
}

/* Reserve one job and delete it, or time out. */
static int s_consume_one(void *conn, const oq_peer_opts_t *opts)
{
    (void)opts;
    s_conn_t *c = conn;
    static const char reserve[] = "reserve-with-timeout " S_STR(S_RESERVE_WAIT_S) "\r\n";
    char request[S_NAME_MAX + 32], line[S_LINE_MAX];
    if (s_send(c, reserve, sizeof reserve - 1) < 0 || s_read_line(c, line) < 0)
        return -1;
    if (strcmp(line, "TIMED_OUT") == 0 || strcmp(line, "DEADLINE_SOON") == 0)
        return 0;
    unsigned long long id;
    unsigned long bytes;
    if (sscanf(line, "RESERVED %llu %lu", &id, &bytes) != 2 || bytes > S_READ_BUF / 2) {
        fprintf(stderr, "beanstalk-bench: reserve: \"%s\"\n", line);
        return -1;
    }
    if (s_read_body(c, NULL, bytes) < 0)
        return -1;
    snprintf(request, sizeof request, "delete %llu\r\n", id);
    if (s_send(c, request, strlen(request)) < 0 || s_expect(c, "DELETED") < 0)
        return -1;
    return 0;
}

/* beanstalkd's tube names: letters, digits and -+/;.$_(), not starting
   with a hyphen. */
static bool s_tube_ok(const char *name)
{
    return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                        "0123456789-+/;.$_()") == strlen(name) &&
           name[0] != '-';
}

static const oq_peer_t s_beanstalkd = {
    .program = "beanstalk-bench",
    .system = "beanstalkd",
    .default_port = S_DEFAULT_PORT,
    .name_option = "tube",
    .name_max = S_NAME_MAX,
    .name_ok = s_tube_ok,
    .put_only = true,
    .verb = "put",
    .verbs = "puts",
    .help_intro = "Put " S_STR(
        S_BODY_BYTES) "-byte jobs into beanstalkd, consume them with forked consumers\n"
                      "(reserve, delete) and measure throughput (pipelined puts) and end-to-end\n"
                      "latency (one job at a time), reading completion from stats-tube.\n",
    .help_host = "beanstalkd IPv4 address",
    .help_port = "beanstalkd port",
    .name_arg = "T",
    .name_expected = "1 to " S_STR(S_NAME_MAX) " of letters, digits and -+/;.$_(), not starting "
                                               "with a hyphen",
    .help_name = "tube to use",
    .help_note = "",
    .connect = s_open,
    .disconnect = s_close,
    .use = s_use,
    .consumer_start = s_watch,
    .consume_one = s_consume_one,
    .pipeline = s_pipeline,
    .stats = s_stats,
};

int main(int argc, char **argv)
{
    return oq_peer_main(&s_beanstalkd, argc, argv);
}
