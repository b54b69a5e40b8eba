/*  peer.h: the driver that beanstalk-bench and redis-bench share. A peer
    system (beanstalkd, Redis) differs from the other only in how it
    connects, puts, consumes and counts finished jobs; everything else
    (options and --help, forked consumers and producers, waiting for the
    consumers, warm-up, the timed burst, the latency run and the result
    line) is here, so that both are measured exactly the same way. */
#ifndef ONCEQ_BENCH_PEER_H
#define ONCEQ_BENCH_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OQ_PEER_BODY_BYTES 100 /* the same size as onceq-bench's msgpack payload */
#define OQ_PEER_NAME_MAX   200 /* room for the longest tube or queue name */

/* The options, parsed by oq_peer_main and read by the peer's operations. */
typedef struct {
    const char *host;
    uint64_t port;
    char name[OQ_PEER_NAME_MAX + 1]; /* tube or queue (default bench-PID) */
    uint64_t jobs, window, latency_jobs, warmup_jobs, consumers, gap_us, deadline_s;
    uint64_t producers;  /* processes putting the throughput phase */
    bool put_only;       /* put the jobs and stop: no consumers, no waiting */
    int64_t deadline_us; /* monotonic time by which everything must be over */
} oq_peer_opts_t;

/* What one peer system is: its names, its --help texts and its operations
   on a connection (void *, the peer's own type). Operations return 0 or
   -1 after printing why; the optional ones may be NULL. */
typedef struct {
    const char *program; /* in messages and --help: "beanstalk-bench" */
    const char *system;  /* the result line's system= */
    uint64_t default_port;
    const char *name_option; /* long option naming the tube or queue */
    size_t name_max;         /* longest name accepted, at most OQ_PEER_NAME_MAX */
    bool (*name_ok)(const char *name);
    bool put_only;             /* whether --put-only exists */
    const char *verb;          /* "put" or "push", in --help */
    const char *verbs;         /* "puts" or "pushes", in --help */
    const char *help_intro;    /* paragraph after the usage line */
    const char *help_host;     /* --host's description */
    const char *help_port;     /* --port's description */
    const char *name_arg;      /* the name option's value in --help ("T") */
    const char *name_expected; /* what a valid name is, for errors */
    const char *help_name;     /* what the name option names */
    const char *help_note;     /* text after the options in --help, before the last line, or "" */

    /* A new connection, or NULL. */
    void *(*connect)(const oq_peer_opts_t *opts);
    /* Close it and free it. */
    void (*disconnect)(void *conn);
    /* Optional: make the connection ready to put (beanstalkd's use). */
    int (*use)(void *conn, const oq_peer_opts_t *opts);
    /* Optional: make the connection ready to consume (beanstalkd's watch). */
    int (*consumer_start)(void *conn, const oq_peer_opts_t *opts);
    /* Take one job and acknowledge it, or time out (after a second at most:
       both return 0). */
    int (*consume_one)(void *conn, const oq_peer_opts_t *opts);
    /* Put n jobs with at most opts->window unanswered. */
    int (*pipeline)(void *conn, const oq_peer_opts_t *opts, uint64_t n);
    /* The server's count of acknowledged jobs and of ready consumers. */
    int (*stats)(void *conn, const oq_peer_opts_t *opts, uint64_t *acked, uint64_t *ready);
    /* Optional: remove what the run left on the server, on the main
       connection before it closes. */
    void (*cleanup)(void *conn, const oq_peer_opts_t *opts);
} oq_peer_t;

/* Parse the options and run the benchmark; returns the exit status (0 ok,
   1 failed, 2 bad options). */
int oq_peer_main(const oq_peer_t *peer, int argc, char **argv);

#endif
