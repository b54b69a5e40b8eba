/*  redis_bench.c: redis-bench, the same benchmark as onceq-bench and
    beanstalk-bench, run against a Redis reliable queue (hiredis), the
    second well-known reference for onceq's numbers. The driver (peer.c) is
    shared with beanstalk-bench; this file is what is Redis's.

    The queue is the pattern Redis documents for reliability: a producer
    LPUSHes a job onto the queue list; a consumer takes it with BLMOVE
    queue processing RIGHT LEFT, which moves it atomically onto a
    processing list (where a crashed consumer's job stays to be found), and
    acknowledges it with LREM processing 1 job once it is done. Jobs are
    100-byte bodies, each unique (LREM finds a job by its value).

    Completion is read from the server's own counter, the calls of LREM in
    INFO commandstats, as beanstalk-bench reads cmd-delete. Consumers are
    counted ready when INFO clients shows W connections blocked (in
    BLMOVE).

    tests/bench/README.md explains the method. */
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onceq/clock.h"
#include "peer.h"

#define S_BODY_BYTES OQ_PEER_BODY_BYTES

#define S_DEFAULT_PORT 6379

#define S_US_PER_S     1000000
#define S_BLOCK_WAIT_S "1" /* a consumer rechecks its deadline this often */
#define S_NAME_MAX     64  /* of the queue's name */
#define S_SUFFIX       ":processing"

#define S_XSTR(x) #x
#define S_STR(x)  S_XSTR(x)

/* Jobs pushed so far by this process, for unique bodies. */
static uint64_t s_pushed;

static void *s_connect(const oq_peer_opts_t *opts)
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
static int s_stats(void *conn, const oq_peer_opts_t *opts, uint64_t *acked, uint64_t *blocked)
{
    (void)opts;
    redisContext *c = conn;
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

static void s_disconnect(void *conn)
{
    redisFree(conn);
}

/* BLMOVE one job onto the processing list and LREM it, or time out. */
static int s_consume_one(void *conn, const oq_peer_opts_t *opts)
{
    redisContext *c = conn;
    redisReply *job = redisCommand(c, "BLMOVE %s %s" S_SUFFIX " RIGHT LEFT " S_BLOCK_WAIT_S,
                                   opts->name, opts->name);
    if (!job) {
        fprintf(stderr, "redis-bench: BLMOVE: %s\n", c->errstr);
        return -1;
    }
    if (job->type == REDIS_REPLY_NIL) {
        freeReplyObject(job);
        return 0;
    }
    if (job->type != REDIS_REPLY_STRING) {
        s_check(c, job, REDIS_REPLY_STRING, "BLMOVE");
        return -1;
    }
    /* The job is done (a noop): acknowledge it. */
    redisReply *ack = redisCommand(c, "LREM %s" S_SUFFIX " 1 %b", opts->name, job->str, job->len);
    freeReplyObject(job);
    return s_check(c, ack, REDIS_REPLY_INTEGER, "LREM");
}

/* Queue one LPUSH of a fresh, unique 100-byte body. */
static int s_append_push(redisContext *c, const oq_peer_opts_t *opts)
{
    char body[S_BODY_BYTES];
    memset(body, 'x', sizeof body);
    char id[48];
    int len = snprintf(id, sizeof id, "%ld-%" PRIu64 "-", (long)getpid(), s_pushed++);
    memcpy(body, id, (size_t)len);
    return redisAppendCommand(c, "LPUSH %s %b", opts->name, body, sizeof body) == REDIS_OK ? 0 : -1;
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
static int s_pipeline(void *conn, const oq_peer_opts_t *opts, uint64_t n)
{
    redisContext *c = conn;
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

/* Leave nothing behind on a server that may be shared. */
static void s_cleanup(void *conn, const oq_peer_opts_t *opts)
{
    redisReply *reply = redisCommand(conn, "DEL %s %s" S_SUFFIX, opts->name, opts->name);
    if (reply)
        freeReplyObject(reply);
}

static const oq_peer_t s_redis = {
    .program = "redis-bench",
    .system = "redis",
    .default_port = S_DEFAULT_PORT,
    .name_option = "queue",
    .name_max = S_NAME_MAX,
    .verb = "push",
    .verbs = "pushes",
    .help_intro = "Push " S_STR(
        S_BODY_BYTES) "-byte jobs onto a Redis list, consume them with forked consumers\n"
                      "(BLMOVE to a processing list, then LREM) and measure throughput (pipelined\n"
                      "pushes) and end-to-end latency (one job at a time), reading completion "
                      "from\n"
                      "LREM's calls in INFO commandstats.\n",
    .help_host = "Redis address",
    .help_port = "Redis port",
    .name_arg = "NAME",
    .name_expected = "a name of 1 to " S_STR(S_NAME_MAX) " characters",
    .help_name = "the lists NAME and NAME:processing",
    .help_note = "The server must count only this run's LREM calls (a fresh redis-server).\n",
    .connect = s_connect,
    .disconnect = s_disconnect,
    .consume_one = s_consume_one,
    .pipeline = s_pipeline,
    .stats = s_stats,
    .cleanup = s_cleanup,
};

int main(int argc, char **argv)
{
    return oq_peer_main(&s_redis, argc, argv);
}
