/*  onceq_bench.c: onceq-bench, a producer that measures how fast onceq-broker
    and its workers get through noop jobs. It is a benchmark, not a test: it
    prints numbers and fails only when the system does not answer.

    The broker tells a producer when a job is queued ("dispatched"), and,
    when asked with "wait", when it is done; a worker never talks to the
    producer.

    - throughput: N jobs are dispatched through one DEALER with at most
      --window dispatches unanswered; the clock runs from the first dispatch
      until a stats reply shows the queue's done counter at baseline + N.
      Stats are polled every S_DRAIN_POLL_US only after the last dispatch
      was answered, so polling costs the broker nothing while it is busiest
      and adds at most that interval to a run of seconds.
    - latency, one job at a time, --latency-mode wait (the default): the job
      is dispatched with a wait in the same request (oq_client_dispatch_wait),
      which the broker answers once, when the worker's ok has made it done.
      The sample is the time from sending the dispatch to receiving that
      answer: it includes the broker's half hop back to us after the job
      was done, and nothing else after it.
    - latency, --latency-mode poll: the job is dispatched and stats are
      polled back to back until done moves; the sample is the time from
      sending the dispatch to receiving that stats reply. The job finished
      somewhere between the previous stats request and this reply, so a
      sample is an upper bound, too high by at most one stats round trip
      (printed as poll_rtt_us). The polling also takes the broker's CPU
      while the job is in flight.

    With --producers N the throughput phase is dispatched by N forked
    processes, each with its own connection and window, sharing the jobs;
    with --dispatch-ids each dispatch carries a random dispatch_id as the C
    client sends; --dispatch-only just queues the jobs (no workers) and
    reports the dispatch rate, for the memory and replay measurements of
    tests/bench/durable_run.sh.

    With --key and --broker-key (or ONCEQ_KEY and ONCEQ_BROKER_KEY) every
    connection speaks CURVE. --flood N is another mode: for --flood-s
    seconds it keeps N connections pinging the broker, and replaces each
    one that got no answer within S_FLOOD_PATIENCE_MS by a new connection,
    with our key or (--flood-unknown) a fresh key the broker does not know;
    tests/bench/curve_run.sh reads the broker's CPU meanwhile.

    tests/bench/README.md explains the method and beanstalk-bench, which
    measures beanstalkd the same way. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "bench_flags.h"
#include "onceq/client.h"
#include "onceq/clock.h"
#include "onceq/config.h"
#include "onceq/keys.h"
#include "onceq/limits.h"
#include "onceq/proto.h"
#include "payloads.h"
#include "samples.h"
#include "support.h"

/* The job: the built-in noop handler with a payload of exactly this many
   msgpack bytes, {"pad": "xxx…"}, the same size as beanstalk-bench's bodies. */
#define S_JOB_TYPE      "noop"
#define S_PAYLOAD_BYTES 100
/* fixmap(1) + fixstr "pad"(4) + str8 header(2) */
#define S_PAD_BYTES (S_PAYLOAD_BYTES - 7)

#define S_MAX_WORKERS   OQ_SUPERVISOR_MAX_PROCESSES
#define S_MAX_PRODUCERS OQ_BENCH_MAX_PRODUCERS

#define S_US_PER_S          1000000
#define S_DRAIN_POLL_US     1000   /* stats polling while the last jobs finish */
#define S_WORKER_POLL_US    50000  /* stats polling while waiting for workers */
#define S_REQUEST_MS        5000   /* one stats or dispatch round trip at most */
#define S_RECV_SLICE_MS     100    /* wake up this often to check the deadline */
#define S_MAX_RTT_SAMPLES   100000 /* stats round trips kept for poll_rtt_us */
#define S_MAX_FLOOD         10000  /* --flood connections at most */
#define S_MAX_FLOOD_S       3600
#define S_FLOOD_PATIENCE_MS 200 /* a flood connection unanswered this long is replaced */
#define S_FLOOD_SLICE_MS    10

typedef struct {
    const char *endpoint;     /* broker front */
    const char *queue;        /* queue the jobs go to */
    uint64_t jobs;            /* throughput phase */
    uint64_t window;          /* unanswered dispatches at most */
    uint64_t latency_jobs;    /* latency phase */
    uint64_t warmup_jobs;     /* run and discarded before measuring */
    uint64_t workers;         /* wait until this many workers are connected */
    uint64_t gap_us;          /* pause between two latency jobs */
    uint64_t grant_customers; /* >0: grant_points jobs over this many customers */
    uint64_t producers;       /* processes dispatching the throughput phase */
    bool dispatch_ids;        /* send a random dispatch_id with every dispatch */
    bool dispatch_only;       /* queue the jobs and stop: no workers, no waiting */
    int64_t deadline_us;      /* monotonic time by which everything must be over */
    uint64_t deadline_s;      /* the same, as given, for messages */
    const char *key;          /* our secret key file: CURVE (NULL: plaintext) */
    const char *broker_key;   /* the broker's public key file */
    uint64_t flood;           /* --flood: connections kept open; 0: the normal run */
    uint64_t flood_s;         /* how long */
    bool flood_unknown;       /* each flood connection with a fresh, unknown key */
    bool latency_poll;        /* latency read by polling stats instead of a wait */
} s_opts_t;

/* CURVE, when --key and --broker-key are given. */
static bool s_curve;
static oq_keypair_t s_pair;
static char s_broker[OQ_KEY_Z85_LEN + 1];

/* A DEALER to endpoint in ctx: linger 0, our keys (or pair, if not NULL)
   when CURVE is on. NULL on failure. */
static void *s_dealer(void *ctx, const char *endpoint, const oq_keypair_t *pair)
{
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    int linger_ms = 0;
    if (!sock)
        return NULL;
    if (!pair)
        pair = &s_pair;
    if (zmq_setsockopt(sock, ZMQ_LINGER, &linger_ms, sizeof linger_ms) < 0 ||
        (s_curve &&
         (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, s_broker, OQ_KEY_Z85_LEN) < 0 ||
          zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pair->public_z85, OQ_KEY_Z85_LEN) < 0 ||
          zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, pair->secret_z85, OQ_KEY_Z85_LEN) < 0)) ||
        zmq_connect(sock, endpoint) < 0) {
        zmq_close(sock);
        return NULL;
    }
    return sock;
}

static uint8_t s_payload[S_PAYLOAD_BYTES];

static void s_build_payload(void)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    char pad[S_PAD_BYTES];
    memset(pad, 'x', sizeof pad);
    msgpack_pack_map(&pk, 1);
    oq_proto_pack_cstr(&pk, "pad");
    msgpack_pack_str(&pk, sizeof pad);
    msgpack_pack_str_body(&pk, pad, sizeof pad);
    if (buf.size != S_PAYLOAD_BYTES) {
        fprintf(stderr, "onceq-bench: payload is %zu bytes, meant %d\n", buf.size, S_PAYLOAD_BYTES);
        exit(1);
    }
    memcpy(s_payload, buf.data, buf.size);
    msgpack_sbuffer_destroy(&buf);
}

/* With --grant, each job is a new order of the article's grant_points:
   {order_id, customer_id, points: 1}, order ids unique across runs (they
   start from the wall clock) and customers taken in turn. */
static msgpack_sbuffer s_grant_buf;
static uint64_t s_next_order;

static oq_job_msg_t s_job(const s_opts_t *opts)
{
    oq_job_msg_t job;
    memset(&job, 0, sizeof job);
    job.queue = oq_str(opts->queue);
    if (!opts->grant_customers) {
        job.type = oq_str(S_JOB_TYPE);
        job.payload = s_payload;
        job.payload_len = sizeof s_payload;
        return job;
    }
    if (!s_next_order)
        s_next_order = (uint64_t)time(NULL) * S_US_PER_S;
    uint64_t order = s_next_order++;
    oq_payload_grant(&s_grant_buf, order, 1 + order % opts->grant_customers, 1);
    job.type = oq_str("grant_points");
    job.payload = (const uint8_t *)s_grant_buf.data;
    job.payload_len = s_grant_buf.size;
    return job;
}

static int s_past_deadline(const s_opts_t *opts, const char *doing)
{
    if (oq_clock_mono_us() < opts->deadline_us)
        return 0;
    fprintf(stderr, "onceq-bench: %" PRIu64 " s deadline passed while %s\n", opts->deadline_s,
            doing);
    return -1;
}

/* One stats round trip: the queue's done counter (0 if the queue does not
   exist yet) and the number of connected workers. */
static int s_stats(oq_client_t *client, const char *queue, uint64_t *done, uint64_t *workers)
{
    oq_msg_t reply;
    if (oq_client_stats(client, S_REQUEST_MS, &reply) < 0) {
        fprintf(stderr, "onceq-bench: stats: %s\n", oq_client_error(client));
        return -1;
    }
    *done = 0;
    const msgpack_object *queues = oq_proto_map_get(&reply.root, "queues");
    for (uint32_t i = 0;
         queues && queues->type == MSGPACK_OBJECT_ARRAY && i < queues->via.array.size; i++) {
        const msgpack_object *q = &queues->via.array.ptr[i];
        const msgpack_object *name = oq_proto_map_get(q, "name");
        const msgpack_object *d = oq_proto_map_get(q, "done");
        if (name && name->type == MSGPACK_OBJECT_STR &&
            oq_str_eq((oq_str_t){name->via.str.ptr, name->via.str.size}, queue) && d &&
            d->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            *done = d->via.u64;
    }
    const msgpack_object *w = oq_proto_map_get(&reply.root, "workers");
    *workers = w && w->type == MSGPACK_OBJECT_ARRAY ? w->via.array.size : 0;
    oq_proto_msg_release(&reply);
    return 0;
}

/* Poll stats every interval_us until done reaches target. *at_us gets the
   time the reply that showed it arrived; *rtt (if given) each round trip. */
static int s_wait_done(const s_opts_t *opts, oq_client_t *client, uint64_t target,
                       uint64_t interval_us, int64_t *at_us, oq_samples_t *rtt)
{
    for (;;) {
        uint64_t done, workers;
        int64_t sent_us = oq_clock_mono_us();
        if (s_stats(client, opts->queue, &done, &workers) < 0)
            return -1;
        int64_t now_us = oq_clock_mono_us();
        if (rtt)
            oq_samples_add(rtt, now_us - sent_us);
        if (done >= target) {
            *at_us = now_us;
            return 0;
        }
        if (s_past_deadline(opts, "waiting for jobs to be done"))
            return -1;
        if (interval_us)
            oq_support_sleep_us(interval_us);
    }
}

static int s_wait_workers(const s_opts_t *opts, oq_client_t *client, uint64_t *done)
{
    for (;;) {
        uint64_t workers;
        if (s_stats(client, opts->queue, done, &workers) < 0)
            return -1;
        if (workers >= opts->workers)
            return 0;
        if (s_past_deadline(opts, "waiting for workers to connect"))
            return -1;
        oq_support_sleep_us(S_WORKER_POLL_US);
    }
}

/* Read every reply that is there; counts answered dispatches in *acked. */
static int s_drain_replies(void *sock, uint64_t *acked)
{
    for (;;) {
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&frame);
            return errno == EAGAIN ? 0 : -1;
        }
        oq_msg_t msg;
        oq_err_t code;
        char why[OQ_MAX_ERROR_LEN];
        int rc = oq_proto_decode(&msg, zmq_msg_data(&frame), zmq_msg_size(&frame), &code, why,
                                 sizeof why);
        if (rc == 0 && msg.cmd == OQ_CMD_DISPATCHED) {
            (*acked)++;
        } else {
            if (rc == 0 && msg.cmd == OQ_CMD_ERROR)
                fprintf(stderr, "onceq-bench: dispatch refused: %s: %.*s\n",
                        oq_proto_err_name(msg.err_code), (int)msg.err_text.len,
                        msg.err_text.ptr ? msg.err_text.ptr : "");
            else
                fprintf(stderr, "onceq-bench: unexpected reply (%s)\n",
                        rc == 0 ? oq_proto_cmd_name(msg.cmd) : why);
            rc = -1;
        }
        oq_proto_msg_release(&msg);
        zmq_msg_close(&frame);
        if (rc < 0)
            return -1;
    }
}

/* Dispatch n jobs through sock with at most opts->window unanswered. The
   broker answers one connection in order, so a count is all the matching
   this needs; request ids are still sent, as the protocol asks. */
static int s_pipeline(const s_opts_t *opts, void *sock, uint64_t n)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    uint64_t sent = 0, acked = 0;
    int rc = 0;
    char dispatch_id[2 * OQ_DISPATCH_ID_RANDOM_BYTES + 1];
    while (acked < n && rc == 0) {
        while (sent < n && sent - acked < opts->window) {
            oq_job_msg_t job = s_job(opts);
            if (opts->dispatch_ids) {
                if (oq_client_new_dispatch_id(dispatch_id, sizeof dispatch_id) < 0) {
                    fprintf(stderr, "onceq-bench: no random bytes for a dispatch id\n");
                    rc = -1;
                    break;
                }
                job.dispatch_id = oq_str(dispatch_id);
            }
            oq_proto_encode_dispatch(&buf, (int64_t)(sent + 1), &job);
            if (zmq_send(sock, buf.data, buf.size, 0) < 0) {
                fprintf(stderr, "onceq-bench: send: %s\n", zmq_strerror(errno));
                rc = -1;
                break;
            }
            msgpack_sbuffer_clear(&buf);
            sent++;
        }
        if (rc < 0 || (rc = s_past_deadline(opts, "dispatching")) < 0)
            break;
        zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, S_RECV_SLICE_MS) > 0)
            rc = s_drain_replies(sock, &acked);
    }
    msgpack_sbuffer_destroy(&buf);
    return rc;
}

/* One forked producer: its own context and connection, its share of the
   jobs. Returns the exit status. */
static int s_producer(const s_opts_t *opts, uint64_t n)
{
    void *ctx = zmq_ctx_new();
    void *sock = ctx ? s_dealer(ctx, opts->endpoint, NULL) : NULL;
    if (!sock)
        return 1;
    int rc = s_pipeline(opts, sock, n) < 0 ? 1 : 0;
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return rc;
}

/* Dispatch n jobs: through sock with one producer, else by opts->producers
   forked processes sharing them. Returns once every dispatch is answered. */
static int s_produce(const s_opts_t *opts, void *sock, uint64_t n)
{
    if (opts->producers <= 1)
        return s_pipeline(opts, sock, n);
    pid_t children[S_MAX_PRODUCERS];
    uint64_t started = 0;
    int rc = 0;
    fflush(stdout); /* nothing buffered may be printed twice */
    for (; started < opts->producers; started++) {
        uint64_t share = n / opts->producers + (started < n % opts->producers ? 1 : 0);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "onceq-bench: fork: %s\n", strerror(errno));
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

/* Throughput: n jobs from the first dispatch until all are done. */
static int s_throughput(const s_opts_t *opts, void *sock, oq_client_t *client, uint64_t *done,
                        double *seconds)
{
    int64_t start_us = oq_clock_mono_us();
    if (s_produce(opts, sock, opts->jobs) < 0)
        return -1;
    int64_t end_us;
    if (s_wait_done(opts, client, *done + opts->jobs, S_DRAIN_POLL_US, &end_us, NULL) < 0)
        return -1;
    *done += opts->jobs;
    *seconds = (double)(end_us - start_us) / S_US_PER_S;
    return 0;
}

/* Latency by wait: dispatch job and wait for it in one request until it
   is done; *at_us gets the time the answer came. */
static int s_dispatch_wait(oq_client_t *client, const oq_job_msg_t *job, int64_t *at_us)
{
    oq_wait_state_t state;
    char error[OQ_MAX_ERROR_LEN + 1];
    uint64_t id;
    if (oq_client_dispatch_wait(client, job, S_REQUEST_MS, S_REQUEST_MS, &id, NULL, &state, error,
                                sizeof error) < 0) {
        fprintf(stderr, "onceq-bench: dispatch and wait: %s\n", oq_client_error(client));
        return -1;
    }
    *at_us = oq_clock_mono_us();
    if (state != OQ_WAIT_DONE) {
        fprintf(stderr, "onceq-bench: job %" PRIu64 " is %s after %d ms, not done%s%s\n", id,
                oq_proto_wait_state_name(state), S_REQUEST_MS, error[0] ? ": " : "", error);
        return -1;
    }
    return 0;
}

static int s_latency(const s_opts_t *opts, oq_client_t *client, uint64_t *done,
                     oq_samples_t *latency, oq_samples_t *rtt)
{
    for (uint64_t i = 0; i < opts->latency_jobs; i++) {
        oq_job_msg_t job = s_job(opts);
        int64_t start_us = oq_clock_mono_us(), end_us;
        if (!opts->latency_poll) {
            if (s_dispatch_wait(client, &job, &end_us) < 0)
                return -1;
        } else {
            uint64_t id;
            if (oq_client_dispatch(client, &job, S_REQUEST_MS, &id) < 0) {
                fprintf(stderr, "onceq-bench: dispatch: %s\n", oq_client_error(client));
                return -1;
            }
            if (s_wait_done(opts, client, *done + 1, 0, &end_us, rtt) < 0)
                return -1;
        }
        (*done)++;
        oq_samples_add(latency, end_us - start_us);
        if (opts->gap_us)
            oq_support_sleep_us(opts->gap_us);
    }
    return 0;
}

/* One flood connection: its socket, and when it sent its ping. */
typedef struct {
    void *sock;
    int64_t since_ms;
    bool answered;
} s_flood_peer_t;

static void *s_flood_open(void *ctx, const s_opts_t *opts, s_flood_peer_t *peer,
                          msgpack_sbuffer *ping)
{
    oq_keypair_t fresh;
    if (opts->flood_unknown)
        oq_keys_generate(&fresh);
    peer->sock = s_dealer(ctx, opts->endpoint, opts->flood_unknown ? &fresh : NULL);
    peer->since_ms = oq_clock_mono_us() / 1000;
    peer->answered = false;
    if (peer->sock)
        zmq_send(peer->sock, ping->data, ping->size, ZMQ_DONTWAIT);
    return peer->sock;
}

/* --flood: keep opts->flood connections pinging for opts->flood_s seconds;
   one unanswered after S_FLOOD_PATIENCE_MS is closed and opened again. */
static int s_flood(const s_opts_t *opts)
{
    void *ctx = zmq_ctx_new();
    int max_sockets = (int)opts->flood * 2 + 64;
    zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, max_sockets);
    s_flood_peer_t *peers = calloc(opts->flood, sizeof *peers);
    zmq_pollitem_t *items = calloc(opts->flood, sizeof *items);
    msgpack_sbuffer ping;
    msgpack_sbuffer_init(&ping);
    oq_proto_encode_simple(&ping, OQ_CMD_PING, 1);
    uint64_t opened = 0, answered = 0;
    int64_t start_ms = oq_clock_mono_us() / 1000;
    int64_t end_ms = start_ms + (int64_t)opts->flood_s * 1000;
    for (uint64_t i = 0; i < opts->flood; i++)
        opened += s_flood_open(ctx, opts, &peers[i], &ping) != NULL;
    while (oq_clock_mono_us() / 1000 < end_ms) {
        for (uint64_t i = 0; i < opts->flood; i++)
            items[i] = (zmq_pollitem_t){peers[i].sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(items, (int)opts->flood, S_FLOOD_SLICE_MS);
        int64_t now_ms = oq_clock_mono_us() / 1000;
        for (uint64_t i = 0; i < opts->flood; i++) {
            s_flood_peer_t *p = &peers[i];
            if (!p->sock)
                continue;
            zmq_msg_t frame;
            zmq_msg_init(&frame);
            while (zmq_msg_recv(&frame, p->sock, ZMQ_DONTWAIT) >= 0) {
                if (!p->answered)
                    answered++;
                p->answered = true;
            }
            zmq_msg_close(&frame);
            if (!p->answered && now_ms - p->since_ms >= S_FLOOD_PATIENCE_MS) {
                zmq_close(p->sock);
                opened += s_flood_open(ctx, opts, p, &ping) != NULL;
            }
        }
    }
    double seconds = (double)(oq_clock_mono_us() / 1000 - start_ms) / 1000.0;
    printf("system=onceq mode=flood peers=%" PRIu64 " unknown_keys=%d seconds=%.3f "
           "connections=%" PRIu64 " answered=%" PRIu64 " connections_per_s=%.0f\n",
           opts->flood, opts->flood_unknown, seconds, opened, answered, (double)opened / seconds);
    for (uint64_t i = 0; i < opts->flood; i++)
        if (peers[i].sock)
            zmq_close(peers[i].sock);
    msgpack_sbuffer_destroy(&ping);
    free(peers);
    free(items);
    zmq_ctx_term(ctx);
    return 0;
}

#define S_PAYLOAD_TEXT OQ_BENCH_STR(S_PAYLOAD_BYTES)

static const char s_usage[] =
    "usage: onceq-bench [options]\n"
    "\n"
    "Dispatch noop jobs with a " S_PAYLOAD_TEXT "-byte payload to onceq-broker and measure\n"
    "throughput (pipelined; completion read from the broker's stats) and\n"
    "end-to-end latency (one job at a time; completion told by a wait). Workers\n"
    "must be running already.\n";

static const char s_epilogue[] = "Prints one line of key=value pairs (times in microseconds).\n";

static int s_parse_queue(const char *value, void *dest, char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    if (!oq_proto_name_valid(value, strlen(value)))
        return -1;
    *(const char **)dest = value;
    return 0;
}

static const char *const s_latency_modes[] = {"wait", "poll", NULL};

/* 0 to run, 1 after --help, -1 after a usage error. */
static int s_parse(int argc, char **argv, s_opts_t *opts)
{
    *opts = (s_opts_t){0};
    int latency_mode = 0;
    const oq_flag_t flags[] = {
        {.name = "broker",
         .kind = OQ_FLAG_ENDPOINT,
         .arg = "ENDPOINT",
         .def = OQ_DEFAULT_FRONT_ENDPOINT,
         .dest = &opts->endpoint,
         .help = "broker front socket"},
        {.name = "queue",
         .kind = OQ_FLAG_CUSTOM,
         .arg = "Q",
         .parse = s_parse_queue,
         .expected = "a queue name",
         .def = "bench",
         .dest = &opts->queue,
         .help = "queue to use"},
        OQ_BENCH_FLAG_JOBS(&opts->jobs),
        OQ_BENCH_FLAG_WINDOW(&opts->window, "unanswered dispatches at most"),
        OQ_BENCH_FLAG_LATENCY_JOBS(&opts->latency_jobs),
        OQ_BENCH_FLAG_WARMUP(&opts->warmup_jobs),
        OQ_BENCH_FLAG_GAP_US(&opts->gap_us),
        {.name = "latency-mode",
         .kind = OQ_FLAG_ENUM,
         .arg = "M",
         .words = s_latency_modes,
         .def = "wait",
         .dest = &latency_mode,
         .help = "wait: a latency sample ends when the broker answers a wait for the job, "
                 "done; poll: when a stats reply, polled back to back, shows the queue's "
                 "done moved"},
        OQ_BENCH_UINT("workers", "W", 0, S_MAX_WORKERS, 0, &opts->workers,
                      "wait until W workers are connected"),
        OQ_BENCH_FLAG_DEADLINE(&opts->deadline_s),
        {.name = "grant",
         .kind = OQ_FLAG_UINT,
         .arg = "C",
         .min = 1,
         .max = UINT32_MAX,
         .def_text = "noop jobs",
         .dest = &opts->grant_customers,
         .help = "grant_points jobs (new order each, customers 1..C) instead of noop: the "
                 "article's effect, for tests/bench/pg_run.sh"},
        OQ_BENCH_FLAG_PRODUCERS(
            &opts->producers,
            "processes dispatching the throughput phase, each with its "
            "own connection and window, at most " OQ_BENCH_STR(OQ_BENCH_MAX_PRODUCERS)),
        {.name = "dispatch-ids",
         .kind = OQ_FLAG_BOOL,
         .dest = &opts->dispatch_ids,
         .help = "send a random dispatch_id with every dispatch, as the C client does"},
        {.name = "dispatch-only",
         .kind = OQ_FLAG_BOOL,
         .dest = &opts->dispatch_only,
         .help = "only queue --jobs jobs (no workers needed) and print the dispatch rate"},
        {.name = "key",
         .env = "ONCEQ_KEY",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .def_text = "plaintext",
         .dest = &opts->key,
         .help = "our secret key file: speak CURVE"},
        {.name = "broker-key",
         .env = "ONCEQ_BROKER_KEY",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .dest = &opts->broker_key,
         .help = "the broker's public key file"},
        {.name = "flood",
         .kind = OQ_FLAG_UINT,
         .arg = "N",
         .min = 1,
         .max = S_MAX_FLOOD,
         .def_text = "no flood",
         .dest = &opts->flood,
         .help = "instead: keep N connections pinging the broker, each one unanswered "
                 "after " OQ_BENCH_STR(S_FLOOD_PATIENCE_MS) " ms replaced by a new one"},
        OQ_BENCH_UINT("flood-s", "S", 1, S_MAX_FLOOD_S, 10, &opts->flood_s, "flood for S seconds"),
        {.name = "flood-unknown",
         .kind = OQ_FLAG_BOOL,
         .dest = &opts->flood_unknown,
         .help = "each flood connection with a fresh key the broker does not know (needs "
                 "--broker-key)"},
    };
    int rc = oq_bench_flags_parse("onceq-bench", s_usage, s_epilogue, flags, OQ_FLAGS_COUNT(flags),
                                  argc, argv);
    if (rc != 0)
        return rc;
    opts->latency_poll = latency_mode == 1;
    opts->deadline_us = oq_clock_mono_us() + (int64_t)opts->deadline_s * S_US_PER_S;
    char why[1024];
    if (opts->broker_key && oq_keys_load_public(opts->broker_key, s_broker, why, sizeof why) < 0) {
        fprintf(stderr, "onceq-bench: %s\n", why);
        return -1;
    }
    if (opts->key && oq_keys_load_pair(opts->key, &s_pair, why, sizeof why) < 0) {
        fprintf(stderr, "onceq-bench: %s\n", why);
        return -1;
    }
    s_curve = opts->broker_key && (opts->key || opts->flood_unknown);
    if (!s_curve && (opts->key || opts->flood_unknown)) {
        fprintf(stderr, "onceq-bench: CURVE needs --broker-key too\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    s_opts_t opts;
    int parsed = s_parse(argc, argv, &opts);
    if (parsed != 0)
        return parsed < 0 ? OQ_BENCH_EXIT_USAGE : 0;
    if (opts.flood)
        return s_flood(&opts);
    s_build_payload();
    msgpack_sbuffer_init(&s_grant_buf);

    oq_client_t *client = oq_client_new(opts.endpoint);
    void *ctx = zmq_ctx_new();
    void *sock = ctx ? s_dealer(ctx, opts.endpoint, NULL) : NULL;
    if (client && s_curve && oq_client_set_curve(client, &s_pair, s_broker) < 0) {
        fprintf(stderr, "onceq-bench: %s\n", oq_client_error(client));
        return 1;
    }
    if (!client || !sock) {
        fprintf(stderr, "onceq-bench: cannot connect to '%s'\n", opts.endpoint);
        return 1;
    }
    oq_samples_t *latency = oq_samples_new(opts.latency_jobs);
    oq_samples_t *rtt = oq_samples_new(S_MAX_RTT_SAMPLES);
    if (!latency || !rtt) {
        fprintf(stderr, "onceq-bench: out of memory\n");
        return 1;
    }

    int rc = 0;
    uint64_t done = 0;
    double seconds = 0;
    int64_t at_us;
    if (opts.dispatch_only) {
        int64_t start_us = oq_clock_mono_us();
        rc = s_produce(&opts, sock, opts.jobs) < 0 ? 1 : 0;
        seconds = (double)(oq_clock_mono_us() - start_us) / S_US_PER_S;
        if (rc == 0)
            printf("system=onceq mode=dispatch_only producers=%" PRIu64 " jobs=%" PRIu64
                   " window=%" PRIu64 " dispatch_ids=%d seconds=%.3f jobs_per_s=%.0f\n",
                   opts.producers, opts.jobs, opts.window, opts.dispatch_ids, seconds,
                   (double)opts.jobs / seconds);
        opts.warmup_jobs = opts.latency_jobs = 0;
        opts.jobs = 0;
    } else if (s_wait_workers(&opts, client, &done) < 0) {
        rc = 1;
    }
    /* Warm-up: connections, allocations and caches, in both processes. */
    if (rc == 0 && opts.warmup_jobs > 0) {
        s_opts_t warm = opts;
        warm.jobs = opts.warmup_jobs;
        if (s_pipeline(&warm, sock, warm.jobs) < 0 ||
            s_wait_done(&opts, client, done + warm.jobs, S_DRAIN_POLL_US, &at_us, NULL) < 0)
            rc = 1;
        done += warm.jobs;
    }
    if (rc == 0 && opts.jobs && s_throughput(&opts, sock, client, &done, &seconds) < 0)
        rc = 1;
    if (rc == 0 && s_latency(&opts, client, &done, latency, rtt) < 0)
        rc = 1;
    if (rc == 0 && !opts.dispatch_only)
        printf("system=onceq producers=%" PRIu64 " workers=%" PRIu64 " jobs=%" PRIu64
               " window=%" PRIu64 " seconds=%.3f jobs_per_s=%.0f latency_jobs=%zu p50_us=%" PRId64
               " p99_us=%" PRId64 " max_us=%" PRId64 " poll_rtt_us=%" PRId64 " latency_mode=%s\n",
               opts.producers, opts.workers, opts.jobs, opts.window, seconds,
               (double)opts.jobs / seconds, oq_samples_count(latency),
               oq_samples_percentile(latency, 50), oq_samples_percentile(latency, 99),
               oq_samples_percentile(latency, 100), oq_samples_percentile(rtt, 50),
               opts.latency_poll ? "poll" : "wait");

    oq_samples_destroy(&latency);
    oq_samples_destroy(&rtt);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    oq_client_destroy(&client);
    return rc;
}
