/*  broker.c: sockets and the event loop around the engine.

    One loop turn: poll both sockets until the nearest deadline; read up to
    OQ_BROKER_BATCH_MSGS messages from each socket without blocking; process
    due deadlines; send heartbeats and reap silent workers when the heartbeat
    timer is due; then pump ready jobs to workers with credit. Reading in
    batches before pumping lets one turn's acks return credit that the same
    turn's pump uses.

    Nothing a peer sends can stop the loop: every message is decoded under
    the limits of the protocol, and anything wrong is answered with an error
    on the socket it came from. Sends never block (ZMQ_DONTWAIT); with
    ROUTER_MANDATORY a send to a worker that has gone fails at once, and the
    worker's leases are given back.

    Full pipes. libzmq holds about a thousand messages for one peer; a
    reply to a producer whose pipe is full (it keeps more requests in
    flight than that, or reads slower than the broker answers) fails with
    EAGAIN though the peer is there. Such a reply, and every later one to
    the same peer, is kept in the outbox and sent again each loop turn, in
    order, until the pipe takes it (outbox.h). A peer that never reads is
    cut off at the outbox's bound: logged, counted, its connection shut
    down. Only a peer the socket no longer knows (EHOSTUNREACH) loses a
    reply, and nobody is there to read it.

    Group commit. The engine reports every change to the journal, which
    buffers the records. Replies that promise something a restart must keep
    (dispatched, requeued) go to the outbox, tagged with the journal position
    their record ends at. At the end of the turn ("before sleep") the journal
    writes the turn's records in one write and, under --fsync always, makes
    them durable with one fsync; then the outbox sends every reply whose
    records are durable. However many producers dispatched in the turn, they
    share that fsync. Jobs are handed to workers before their record is
    durable: a job lost with an unwritten record was never confirmed.

    Lease tokens. Every delivery carries a token the worker's ack and
    touches must echo (fenced acks, engine_acks.c), bound to the CURVE key
    the worker's connection authenticated with: each message's key (its
    User-Id) goes to the engine with it, so a token replayed from another
    key proves nothing, and a worker that reconnects with its own key, or
    acks after a restart, is still itself. The broker's key is 128 random bits
    kept in the data dir (OQ_LEASE_KEY_FILE, created 0600 and fsynced on
    the first start), so that a worker's late ack after a broker restart
    still counts; with --no-journal it is random per start.

    Authentication. With --keys both sockets are CURVE servers and the ZAP
    handler (auth.h) answers handshakes in this loop: a known key gets in,
    and libzmq stamps each of its messages with the key as User-Id. Every
    message is judged at once by the keys in force now (keystore.h) and the
    command -> roles table (roles.h), so a key revoked by SIGHUP is refused
    from its next message on; a refused command is answered "forbidden".
    The first message of a connection also binds it to its role for the
    per-role connection limits (peers.h).

    Disk errors. While the journal cannot write, dispatches are refused with
    "unavailable" (naming the OS error), replies waiting in the outbox are
    answered "unavailable" at once (their records are not durable), and
    workers are served as usual: their acks only add records, which wait in
    memory until a write succeeds. On a full disk the journal frees its
    reserve and a compaction may run whatever its thresholds; dispatches are
    accepted again once the reserve is back, with no operator action.

    Waits. A producer may wait for a job to end ("wait", waiters.h). The
    broker hears of every end through the engine's observer, which it
    installs in front of the journal's: once the journal has taken a
    record of a job's end (done, failed, review, cancelled), that job's
    waiters are answered through the outbox like a dispatch, so an answer
    never says more than a restart would keep. A wait whose timeout passes
    is answered "pending" at once. */
#include "broker.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include <sys/random.h>
#include <unistd.h>

#include "auth.h"
#include "batch_reply.h"
#include "conns.h"
#include "keystore.h"
#include "metrics.h"
#include "metrics_http.h"
#include "onceq/flags.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "onceq/proto.h"
#include "onceq/zpoll.h"
#include "outbox.h"
#include "peers.h"
#include "replay.h"
#include "roles.h"
#include "siphash.h"
#include "stats.h"
#include "throttle.h"
#include "waiters.h"

#define S_MAX_IDENTITY 255
/* front, back, a compaction's child while one runs, 2 monitors, the ZAP handler */
#define S_POLL_ITEMS 6

struct oq_broker {
    oq_broker_config_t config;
    const oq_clock_t *clock;
    void *ctx;
    void *front;
    void *back;
    oq_zsock_t front_wait; /* the sockets as the loop waits on them (onceq/zpoll.h) */
    oq_zsock_t back_wait;
    oq_engine_t *engine;
    oq_journal_t *journal; /* NULL with --no-journal */
    oq_compact_t *compact; /* NULL with --no-journal */
    oq_outbox_t *outbox;
    oq_conns_t *conns;            /* connections against the open-file limit; NULL if unwatched */
    oq_keystore_t *keys;          /* allowed keys; NULL: plaintext (--insecure) */
    oq_auth_t *auth;              /* the ZAP handler, with keys */
    oq_peers_t *peers;            /* connections per role, with keys and conns */
    oq_throttle_t *forbidden_log; /* a refused command is logged once a minute per key */
    uint64_t forbidden;           /* commands refused for the sender's key or role */
    oq_stats_messages_t messages; /* deliveries sent and acks received, per message */
    bool paused;                  /* deliveries paused: too many records wait for the disk */
    msgpack_sbuffer out;          /* reused encoding buffer */
    size_t stats_turn_bytes;      /* stats replies encoded in this loop turn */
    int64_t started_ms;
    int64_t next_heartbeat_ms;
    oq_metrics_http_t *metrics;      /* serving GET /metrics; NULL without --metrics */
    int64_t next_metrics_ms;         /* when the loop renders the metrics next */
    oq_waiters_t *waiters;           /* producers waiting for a job to end */
    oq_engine_hooks_t journal_hooks; /* the journal's observer; changed NULL without one */
    msgpack_sbuffer wait_out;        /* encoding buffer of answers to waits (see s_changed) */
    int64_t kept_retry_ms;           /* wait before retrying replies kept for full pipes */
    int64_t next_kept_retry_ms;      /* when the loop retries them next */
};

oq_broker_config_t oq_broker_config_default(void)
{
    oq_broker_config_t c = {
        .front_endpoint = OQ_DEFAULT_FRONT_ENDPOINT,
        .back_endpoint = OQ_DEFAULT_BACK_ENDPOINT,
        .heartbeat_ms = OQ_DEFAULT_HEARTBEAT_MS,
        .liveness = OQ_DEFAULT_LIVENESS,
        .handshake_ms = OQ_DEFAULT_HANDSHAKE_MS,
        .max_handshakes_per_addr = OQ_DEFAULT_HANDSHAKES_PER_ADDR,
        .engine = oq_engine_config_default(),
        .journal = {.dir = OQ_DEFAULT_DATA_DIR,
                    .fsync = OQ_FSYNC_ALWAYS,
                    .fsync_interval_ms = OQ_DEFAULT_FSYNC_INTERVAL_MS,
                    .reserve_bytes = OQ_DEFAULT_DISK_RESERVE_BYTES},
        .compact = {.min_bytes = OQ_DEFAULT_COMPACT_MIN_BYTES, .ratio = OQ_DEFAULT_COMPACT_RATIO},
    };
    return c;
}

/* Where a message came from and how to answer it. */
typedef struct {
    uint8_t identity[S_MAX_IDENTITY];
    size_t identity_len;
    int fd;                    /* the connection's descriptor (ZMQ_SRCFD), -1 if unknown */
    bool delimiter;            /* a REQ peer: answer behind an empty frame */
    uint8_t key[OQ_KEY_BYTES]; /* the CURVE key libzmq stamped on the message (User-Id) */
    bool has_key;              /* false under --insecure */
} s_envelope_t;

/* The sender's key for the engine: lease tokens are bound to it. */
static const uint8_t *s_key_of(const s_envelope_t *env)
{
    return env->has_key ? env->key : NULL;
}

static volatile sig_atomic_t s_stop = 0;
static volatile sig_atomic_t s_reload = 0;

static void s_on_signal(int sig)
{
    if (sig == SIGHUP)
        s_reload = 1;
    else
        s_stop = 1;
}

/* A ROUTER socket bound to endpoint; a CURVE server with the broker's
   pair if keys is not NULL, its handshakes sent to ZAP as domain. A peer
   that has not finished its handshake within handshake_ms is dropped
   (conns.h). */
static void *s_bind(void *ctx, const char *endpoint, const oq_keystore_t *keys, const char *domain,
                    int handshake_ms, char *reason, size_t reason_len)
{
    void *sock = zmq_socket(ctx, ZMQ_ROUTER);
    int one = 1, zero = 0;
    int64_t max_size = OQ_MAX_WIRE_MSG_BYTES;
    if (!sock)
        goto fail;
    zmq_setsockopt(sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max_size, sizeof max_size);
    if (zmq_setsockopt(sock, ZMQ_HANDSHAKE_IVL, &handshake_ms, sizeof handshake_ms) < 0)
        goto fail;
    if (keys) {
        const char *secret = oq_keystore_broker(keys)->secret_z85;
        if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) < 0 ||
            zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret, OQ_KEY_Z85_LEN) < 0 ||
            zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, domain, strlen(domain)) < 0)
            goto fail;
    }
    if (zmq_bind(sock, endpoint) < 0)
        goto fail;
    return sock;
fail:
    snprintf(reason, reason_len, "cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
    if (sock)
        zmq_close(sock);
    return NULL;
}

/* The lease key from DIR/OQ_LEASE_KEY_FILE, made on the first start. */
static int s_lease_key(const char *dir, uint8_t key[OQ_LEASE_KEY_BYTES], char *reason,
                       size_t reason_len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, OQ_LEASE_KEY_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, key, OQ_LEASE_KEY_BYTES);
        close(fd);
        if (n == OQ_LEASE_KEY_BYTES)
            return 0;
        snprintf(reason, reason_len,
                 "lease key %s is %zd bytes, expected %d (remove it to make a new one; acks of "
                 "jobs delivered before will then be ignored)",
                 path, n, OQ_LEASE_KEY_BYTES);
        return -1;
    }
    if (errno != ENOENT)
        goto fail;
    if (getrandom(key, OQ_LEASE_KEY_BYTES, 0) != OQ_LEASE_KEY_BYTES)
        goto fail;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, OQ_JOURNAL_FILE_MODE);
    if (fd < 0)
        goto fail;
    if (write(fd, key, OQ_LEASE_KEY_BYTES) != OQ_LEASE_KEY_BYTES || fsync(fd) < 0) {
        close(fd);
        goto fail;
    }
    close(fd);
    if (rename(tmp, path) < 0)
        goto fail;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
fail:
    snprintf(reason, reason_len, "cannot keep the lease key in %s: %s", path, strerror(errno));
    return -1;
}

/* Open the journal and read it back into the engine, then let the journal
   see every change from now on. */
static int s_open_journal(oq_broker_t *self, char *reason, size_t reason_len)
{
    const oq_broker_config_t *c = &self->config;
    oq_journal_config_t jc = c->journal;
    jc.repair = c->repair; /* a damaged header too */
    self->journal = oq_journal_new(&jc, self->clock, reason, reason_len);
    if (!self->journal)
        return -1;
    oq_replay_report_t r;
    if (oq_replay_run(self->journal, self->engine, self->clock, c->repair, &r, reason, reason_len) <
        0)
        return -1;
    oq_info("journal %s: replayed %llu records (%llu bytes) in %lld ms: %zu ready, %zu delayed, "
            "%zu failed, %zu in review, %zu dispatch ids; fsync %s",
            oq_journal_path(self->journal), (unsigned long long)r.records,
            (unsigned long long)r.bytes, (long long)r.elapsed_ms, r.ready, r.delayed, r.failed,
            r.review, r.dispatch_ids, oq_fsync_name(c->journal.fsync));
    if (r.ignored)
        oq_warn("journal: %llu records named jobs it did not hold; they were skipped",
                (unsigned long long)r.ignored);
    oq_engine_restore_report(self->engine);
    /* Jobs once confirmed are kept whatever the limits say now; new ones
       are refused until enough are done. */
    uint64_t bytes = oq_engine_bytes(self->engine);
    if (bytes > oq_engine_max_bytes(self->engine))
        oq_warn("journal: the restored jobs hold %llu bytes, over --max-bytes %llu; every one is "
                "kept, dispatches are refused (full) until workers bring it below the limit",
                (unsigned long long)bytes, (unsigned long long)oq_engine_max_bytes(self->engine));
    if (oq_engine_job_count(self->engine) > c->engine.max_jobs)
        oq_warn("journal: %zu jobs restored, over --max-jobs %zu; every one is kept, dispatches "
                "are refused (full) until workers bring it below the limit",
                oq_engine_job_count(self->engine), c->engine.max_jobs);
    self->journal_hooks = oq_journal_hooks(self->journal);
    self->compact = oq_compact_new(&c->compact, self->journal, self->engine, self->clock);
    if (!self->compact) {
        snprintf(reason, reason_len, "out of memory");
        return -1;
    }
    return 0;
}

/* Plaintext only when asked for, and then only on this machine unless
   asked for that too. */
static int s_check_security(const oq_broker_config_t *c, char *reason, size_t reason_len)
{
    if (c->keys_dir)
        return 0;
    if (!c->insecure) {
        snprintf(reason, reason_len,
                 "no keys: give --keys DIR (make them with `onceq keygen`, docs/operations.md), "
                 "or --insecure to run without authentication or encryption on this machine");
        return -1;
    }
    const char *endpoints[] = {c->front_endpoint, c->back_endpoint};
    for (int i = 0; i < 2 && !c->insecure_remote; i++) {
        if (!oq_flags_endpoint_local(endpoints[i])) {
            snprintf(reason, reason_len,
                     "--insecure binds only loopback addresses and ipc:// endpoints, and %s is "
                     "neither: use --keys DIR, or add --insecure-remote to let anyone who can "
                     "reach it send and read jobs",
                     endpoints[i]);
            return -1;
        }
    }
    oq_warn("running --insecure%s: no authentication and no encryption; any process that can "
            "reach %s and %s can dispatch, read and complete jobs",
            c->insecure_remote ? " --insecure-remote" : "", c->front_endpoint, c->back_endpoint);
    return 0;
}

static void s_log_keys(const oq_keystore_t *keys, const char *dir, const char *what)
{
    oq_info("keys %s from %s: %zu producer(s), %zu worker(s), %zu admin(s); broker key %s", what,
            dir, oq_keystore_count(keys, OQ_ROLE_PRODUCER), oq_keystore_count(keys, OQ_ROLE_WORKER),
            oq_keystore_count(keys, OQ_ROLE_ADMIN), oq_keystore_broker(keys)->public_z85);
    if (!oq_keystore_count(keys, OQ_ROLE_PRODUCER) && !oq_keystore_count(keys, OQ_ROLE_WORKER) &&
        !oq_keystore_count(keys, OQ_ROLE_ADMIN))
        oq_warn("no public keys in %s/producers, %s/workers or %s/admins: every peer is refused",
                dir, dir, dir);
}

/* With --keys: read them and start the ZAP handler, which must be bound
   before the sockets it guards. */
static int s_auth_start(oq_broker_t *self, char *reason, size_t reason_len)
{
    const char *dir = self->config.keys_dir;
    if (!dir)
        return 0;
    char why[1024];
    self->keys = oq_keystore_load(dir, why, sizeof why);
    if (!self->keys) {
        snprintf(reason, reason_len, "cannot read the keys in %s: %s", dir, why);
        return -1;
    }
    s_log_keys(self->keys, dir, "read");
    self->forbidden_log = oq_throttle_new(OQ_AUTH_LOG_KEYS, OQ_AUTH_LOG_INTERVAL_MS);
    if (!self->forbidden_log) {
        snprintf(reason, reason_len, "out of memory");
        return -1;
    }
    self->auth = oq_auth_new(self->ctx, self->keys, self->clock, reason, reason_len);
    return self->auth ? 0 : -1;
}

static int s_changed(void *ctx, oq_job_event_t event, const oq_job_view_t *job,
                     const oq_job_msg_t *dispatch);
static int s_batch_changed(void *ctx, oq_batch_event_t event, const oq_batch_view_t *batch,
                           oq_batch_callback_t which);
static int s_chain_changed(void *ctx, oq_chain_event_t event, const oq_chain_view_t *chain);

/* conns.h: a descriptor opened or closed; its binding is stale, and the
   replies kept and the waits held for a connection that closed have
   nobody to read them. */
static void s_forget_fd(void *ctx, int fd, bool open)
{
    oq_broker_t *self = ctx;
    if (self->peers)
        oq_peers_forget(self->peers, fd);
    if (!open) {
        oq_outbox_forget_fd(self->outbox, fd);
        oq_waiters_drop_fd(self->waiters, fd);
    }
}

static void s_cut_peer(void *ctx, const void *identity, size_t identity_len, int fd, size_t replies,
                       size_t bytes);

oq_broker_t *oq_broker_new(const oq_broker_config_t *config, const oq_clock_t *clock, char *reason,
                           size_t reason_len)
{
    oq_broker_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(reason, reason_len, "out of memory");
        return NULL;
    }
    self->config = *config;
    self->clock = clock;
    msgpack_sbuffer_init(&self->out);
    msgpack_sbuffer_init(&self->wait_out);
    self->engine = oq_engine_new(&config->engine, clock);
    self->outbox = oq_outbox_new(OQ_MAX_OUTBOX_REPLIES, s_cut_peer, self);
    self->kept_retry_ms = OQ_KEPT_RETRY_MIN_MS;
    self->waiters =
        oq_waiters_new(OQ_MAX_WAITERS, OQ_MAX_WAITERS_PER_PEER, OQ_MAX_WAITERS_PER_KEY, clock);
    self->ctx = zmq_ctx_new();
    if (!self->engine || !self->outbox || !self->waiters || !self->ctx) {
        snprintf(reason, reason_len, "out of memory");
        oq_broker_destroy(&self);
        return NULL;
    }
    if (oq_io_cpus_apply(self->ctx, &config->io_cpus) < 0) {
        snprintf(reason, reason_len, "cannot pin libzmq's I/O thread (--io-cpus): %s",
                 zmq_strerror(zmq_errno()));
        oq_broker_destroy(&self);
        return NULL;
    }
    if (oq_engine_check_defaults(self->engine, reason, reason_len) < 0 ||
        s_check_security(config, reason, reason_len) < 0) {
        oq_broker_destroy(&self);
        return NULL;
    }
    /* Before replay, so that restored jobs meet the queues as configured now. */
    for (size_t i = 0; i < config->queue_count; i++) {
        const oq_broker_queue_t *q = &config->queues[i];
        if (oq_engine_queue_config(self->engine, q->name, q->retry_after_ms, q->timeout_ms, reason,
                                   reason_len) < 0) {
            oq_broker_destroy(&self);
            return NULL;
        }
    }
    /* Replay before binding: a producer that can connect finds the jobs. */
    uint8_t lease_key[OQ_LEASE_KEY_BYTES];
    if (config->no_journal) {
        oq_warn("running without a journal (--no-journal): a restart loses every job");
        uint8_t dispatch_key[OQ_SIPHASH_KEY_BYTES];
        if (getrandom(dispatch_key, sizeof dispatch_key, 0) == (ssize_t)sizeof dispatch_key)
            oq_engine_set_dispatch_key(self->engine, dispatch_key);
        else
            oq_warn("no random bytes for the dispatch id key: %s", strerror(errno));
        if (getrandom(lease_key, sizeof lease_key, 0) != (ssize_t)sizeof lease_key) {
            snprintf(reason, reason_len, "no random bytes for the lease key: %s", strerror(errno));
            oq_broker_destroy(&self);
            return NULL;
        }
    } else if (s_open_journal(self, reason, reason_len) < 0 ||
               s_lease_key(config->journal.dir, lease_key, reason, reason_len) < 0) {
        oq_broker_destroy(&self);
        return NULL;
    }
    oq_engine_set_lease_key(self->engine, lease_key);
    /* After replay: the journal's observer, then the waits (s_changed). */
    oq_engine_hooks_t hooks = {
        .changed = s_changed, .ctx = self, .batch = s_batch_changed, .chain = s_chain_changed};
    oq_engine_set_hooks(self->engine, &hooks);
    /* Callbacks that became due before the stop and were not dispatched
       yet: under their dispatch ids, so one that was is not again. */
    oq_engine_batches_settle(self->engine);
    oq_engine_chains_settle(self->engine);
    if (s_auth_start(self, reason, reason_len) < 0 ||
        !(self->front = s_bind(self->ctx, config->front_endpoint, self->keys, "front",
                               config->handshake_ms, reason, reason_len)) ||
        !(self->back = s_bind(self->ctx, config->back_endpoint, self->keys, "back",
                              config->handshake_ms, reason, reason_len))) {
        oq_broker_destroy(&self);
        return NULL;
    }
    if (oq_zsock_init(&self->front_wait, self->front) < 0 ||
        oq_zsock_init(&self->back_wait, self->back) < 0) {
        snprintf(reason, reason_len, "cannot wait on the sockets: %s", zmq_strerror(zmq_errno()));
        oq_broker_destroy(&self);
        return NULL;
    }
    void *const listening[] = {self->front, self->back};
    oq_conns_config_t conns = {.max_conns = config->max_conns,
                               .max_handshakes_per_addr = config->max_handshakes_per_addr,
                               .handshake_ms = config->handshake_ms};
    self->conns = oq_conns_new(self->ctx, listening, 2, &conns, clock);
    if (self->conns)
        oq_conns_watch(self->conns, s_forget_fd, self);
    else
        oq_warn("connections are not counted: new peers are not refused before the open-file "
                "limit");
    if (self->keys && self->conns) {
        size_t max[OQ_ROLE_COUNT_] = {0};
        max[OQ_ROLE_PRODUCER] = config->max_producers;
        max[OQ_ROLE_WORKER] = config->max_workers;
        max[OQ_ROLE_ADMIN] = config->max_admins;
        self->peers = oq_peers_new(max);
        if (!self->peers) {
            snprintf(reason, reason_len, "out of memory");
            oq_broker_destroy(&self);
            return NULL;
        }
        oq_auth_set_peers(self->auth, self->peers);
    } else if (self->keys) {
        oq_warn("connections per role are not counted: --max-producers, --max-workers and "
                "--max-admins do not apply");
    }
    if (config->metrics_addr) {
        self->metrics = oq_metrics_http_new(config->metrics_addr, reason, reason_len);
        if (!self->metrics) {
            oq_broker_destroy(&self);
            return NULL;
        }
        oq_info("metrics: GET http://%s/metrics (port %u)", config->metrics_addr,
                (unsigned)oq_metrics_http_port(self->metrics));
    }
    self->started_ms = oq_clock_now_ms(clock);
    self->next_heartbeat_ms = self->started_ms + config->heartbeat_ms;
    self->next_metrics_ms = self->started_ms;
    return self;
}

void oq_broker_destroy(oq_broker_t **self_p)
{
    assert(self_p);
    oq_broker_t *self = *self_p;
    if (!self)
        return;
    oq_conns_destroy(&self->conns);
    if (self->front)
        zmq_close(self->front);
    if (self->back)
        zmq_close(self->back);
    oq_metrics_http_destroy(&self->metrics);
    oq_auth_destroy(&self->auth);
    oq_peers_destroy(&self->peers);
    oq_keystore_destroy(&self->keys);
    oq_throttle_destroy(&self->forbidden_log);
    if (self->ctx)
        zmq_ctx_term(self->ctx);
    oq_compact_destroy(&self->compact);
    if (self->engine)
        oq_engine_set_hooks(self->engine, NULL);
    oq_journal_destroy(&self->journal);
    oq_engine_destroy(&self->engine);
    oq_outbox_destroy(&self->outbox);
    oq_waiters_destroy(&self->waiters);
    msgpack_sbuffer_destroy(&self->out);
    msgpack_sbuffer_destroy(&self->wait_out);
    free(self);
    *self_p = NULL;
}

oq_engine_t *oq_broker_engine(oq_broker_t *self)
{
    return self->engine;
}

/* ---- sending ---------------------------------------------------------------- */

static oq_zsock_t *s_wait_of(oq_broker_t *self, void *sock)
{
    return sock == self->front ? &self->front_wait : &self->back_wait;
}

/* One message to a peer on sock, without blocking: 0, or -1 with errno
   (EAGAIN: its pipe is full; EHOSTUNREACH: the socket knows no such peer). */
static int s_send_raw(oq_broker_t *self, void *sock, const void *identity, size_t identity_len,
                      bool delimiter, const void *body, size_t body_len)
{
    /* A send may take in the socket's news: the loop looks before it waits. */
    oq_zsock_used(s_wait_of(self, sock));
    int rc = zmq_send(sock, identity, identity_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    if (rc >= 0 && delimiter)
        rc = zmq_send(sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    if (rc >= 0)
        rc = zmq_send(sock, body, body_len, ZMQ_DONTWAIT);
    return rc < 0 ? -1 : 0;
}

/* oq_outbox_send_fn for the front socket. */
static int s_outbox_send(void *ctx, const void *identity, size_t identity_len, bool delimiter,
                         const void *body, size_t body_len)
{
    oq_broker_t *self = ctx;
    return s_send_raw(self, self->front, identity, identity_len, delimiter, body, body_len);
}

/* Send self->out to a peer on sock, then clear the buffer. On the front a
   reply that meets a full pipe is kept and sent later, in order
   (outbox.h). 0 if it went out (or is kept), -1 if the peer is
   unreachable. */
static int s_send(oq_broker_t *self, void *sock, const void *identity, size_t identity_len, int fd,
                  bool delimiter)
{
    int rc = sock == self->front
                 ? oq_outbox_send(self->outbox, identity, identity_len, fd, delimiter,
                                  self->out.data, self->out.size, s_outbox_send, self)
                 : s_send_raw(self, sock, identity, identity_len, delimiter, self->out.data,
                              self->out.size);
    msgpack_sbuffer_clear(&self->out);
    return rc;
}

static int s_reply(oq_broker_t *self, void *sock, const s_envelope_t *env)
{
    return s_send(self, sock, env->identity, env->identity_len, env->fd, env->delimiter);
}

static void s_reply_error(oq_broker_t *self, void *sock, const s_envelope_t *env, int64_t req,
                          oq_err_t code, const char *text)
{
    oq_debug("error to peer on %s socket: %s: %s", sock == self->front ? "front" : "back",
             oq_proto_err_name(code), text);
    oq_proto_encode_error(&self->out, req, code, text);
    s_reply(self, sock, env);
}

/* ---- receiving ---------------------------------------------------------------- */

/* Read one whole message (all its frames) from a ROUTER socket. Returns 1
   with the body in *body and the envelope filled, 0 if nothing is waiting,
   -1 after a message of the wrong shape (answered already). */
static int s_recv(oq_broker_t *self, void *sock, s_envelope_t *env, zmq_msg_t *body)
{
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, sock, ZMQ_DONTWAIT) < 0) {
        oq_zsock_recv_failed(s_wait_of(self, sock), errno);
        zmq_msg_close(&frame);
        return 0;
    }
    /* The first frame is the identity the ROUTER socket put there. */
    env->identity_len = zmq_msg_size(&frame);
    env->fd = -1;
    env->has_key = false;
    if (env->identity_len > S_MAX_IDENTITY)
        env->identity_len = S_MAX_IDENTITY;
    memcpy(env->identity, zmq_msg_data(&frame), env->identity_len);
    env->delimiter = false;

    size_t parts = 0;
    bool first_empty = false;
    while (zmq_msg_more(&frame)) {
        zmq_msg_close(&frame);
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, sock, 0) < 0)
            break;
        if (++parts == 1)
            first_empty = zmq_msg_size(&frame) == 0;
    }
    /* Valid: [body] from a DEALER, or ["", body] from a REQ. */
    bool ok = parts == 1 || (parts == 2 && first_empty);
    if (!ok || zmq_msg_size(&frame) == 0) {
        env->delimiter = parts >= 2 && first_empty;
        zmq_msg_close(&frame);
        char text[128];
        snprintf(text, sizeof text,
                 "expected one body frame (after an optional empty delimiter), got %zu frame(s)",
                 parts);
        s_reply_error(self, sock, env, -1, OQ_ERR_MALFORMED, parts == 1 ? "empty frame" : text);
        return -1;
    }
    env->delimiter = parts == 2;
    env->fd = zmq_msg_get(&frame, ZMQ_SRCFD);
    zmq_msg_move(body, &frame);
    zmq_msg_close(&frame);
    return 1;
}

/* ---- front socket: producers and admin ------------------------------------------ */

/* The position a reply's records end at in the journal (0 without one). */
static uint64_t s_appended(const oq_broker_t *self)
{
    return self->journal ? oq_journal_appended(self->journal) : 0;
}

/* Before taking anything a restart must keep: can the journal take it? */
static bool s_can_promise(oq_broker_t *self, const s_envelope_t *env, int64_t req)
{
    char reason[OQ_MAX_ERROR_LEN];
    if (self->journal && !oq_journal_healthy(self->journal)) {
        snprintf(reason, sizeof reason,
                 "the broker cannot make jobs durable (%s); nothing was queued, try again later",
                 oq_journal_error(self->journal));
    } else if (oq_outbox_count(self->outbox) >= OQ_MAX_OUTBOX_REPLIES) {
        snprintf(reason, sizeof reason,
                 "%d replies are waiting for the journal already; try again later",
                 OQ_MAX_OUTBOX_REPLIES);
    } else {
        return true;
    }
    s_reply_error(self, self->front, env, req, OQ_ERR_UNAVAILABLE, reason);
    return false;
}

/* Put the encoded reply in self->out into the outbox, to leave once the
   journal is durable up to needs. */
static void s_promise(oq_broker_t *self, const s_envelope_t *env, int64_t req, uint64_t needs)
{
    int rc = oq_outbox_add(self->outbox, needs, req, env->identity, env->identity_len, env->fd,
                           env->delimiter, self->out.data, self->out.size);
    msgpack_sbuffer_clear(&self->out);
    if (rc < 0)
        s_reply_error(self, self->front, env, req, OQ_ERR_INTERNAL,
                      "out of memory keeping the reply; the request was carried out");
}

static int s_wait_for(oq_broker_t *self, const s_envelope_t *env, int64_t req, uint64_t id,
                      int64_t wait_ms, bool confirms);

/* A dispatch with "wait" is answered by its wait (s_wait_for): once the
   job has ended, or "pending" at the timeout, through the outbox like a
   "dispatched". One whose unique key an earlier job holds, or whose wait
   cannot be held, is answered "dispatched" as without "wait". */
static void s_dispatch(oq_broker_t *self, const s_envelope_t *env, int64_t req,
                       const oq_job_msg_t *job, bool wait, int64_t wait_ms)
{
    if (!s_can_promise(self, env, req))
        return;
    /* The waits and connections held count against --max-bytes too. */
    size_t conns = self->conns ? oq_conns_count(self->conns) : 0;
    oq_engine_set_outside_bytes(self->engine,
                                (uint64_t)oq_waiters_count(self->waiters) * OQ_WAIT_COST_BYTES +
                                    (uint64_t)conns * OQ_PEER_COST_BYTES);
    char reason[512];
    oq_err_t code;
    uint64_t id = 0;
    /* Refused with nothing queued if the journal cannot hold the job's
       record. A resend of a dispatch_id gets the first dispatch's answer,
       which waits like it for its record to be durable if it still has to;
       so does the answer naming a unique key's holder (rc 1). */
    int rc = oq_engine_dispatch(self->engine, job, &id, &code, reason, sizeof reason);
    if (rc < 0) {
        s_reply_error(self, self->front, env, req, code, reason);
        return;
    }
    bool unique = rc == 1;
    if (wait && !unique && s_wait_for(self, env, req, id, wait_ms, true) == 0)
        return;
    if (unique)
        oq_proto_encode_dispatched_unique(&self->out, req, id);
    else
        oq_proto_encode_dispatched(&self->out, req, id);
    s_promise(self, env, req, s_appended(self));
}

static void s_requeue(oq_broker_t *self, const s_envelope_t *env, int64_t req, uint64_t id)
{
    char reason[256];
    oq_refusal_t why;
    if (!s_can_promise(self, env, req))
        return;
    if (oq_engine_requeue(self->engine, id, &why, reason, sizeof reason) < 0) {
        s_reply_error(self, self->front, env, req,
                      why == OQ_REFUSED_UNRECORDED ? OQ_ERR_UNAVAILABLE : OQ_ERR_BAD_REQUEST,
                      reason);
        return;
    }
    oq_info("job %llu requeued from the failed store", (unsigned long long)id);
    oq_proto_encode_requeue(&self->out, OQ_CMD_REQUEUED, req, id);
    s_promise(self, env, req, s_appended(self));
}

/* ---- admin commands on the failed store and waiting jobs ---------------------
   Like requeue, each change is journaled, and its reply waits in the outbox
   until its records are durable: an operator told "forgotten" or
   "cancelled" must not see the job again after a restart. */

static bool s_store_command(oq_cmd_t cmd)
{
    return cmd == OQ_CMD_FORGET || cmd == OQ_CMD_FLUSH || cmd == OQ_CMD_REQUEUE_ALL ||
           cmd == OQ_CMD_CANCEL || cmd == OQ_CMD_HORIZON || cmd == OQ_CMD_PRUNE_FAILED;
}

static oq_err_t s_refusal_code(oq_refusal_t why)
{
    if (why == OQ_REFUSED_UNRECORDED)
        return OQ_ERR_UNAVAILABLE;
    return why == OQ_REFUSED_UNKNOWN ? OQ_ERR_NOT_FOUND : OQ_ERR_WRONG_STATE;
}

static void s_forget(oq_broker_t *self, const s_envelope_t *env, int64_t req, uint64_t id)
{
    char reason[512];
    oq_refusal_t why;
    if (!s_can_promise(self, env, req))
        return;
    if (oq_engine_forget(self->engine, id, &why, reason, sizeof reason) < 0) {
        s_reply_error(self, self->front, env, req, s_refusal_code(why), reason);
        return;
    }
    oq_info("job %llu forgotten: deleted from the failed store", (unsigned long long)id);
    oq_proto_encode_job_id(&self->out, OQ_CMD_FORGOTTEN, req, id);
    s_promise(self, env, req, s_appended(self));
}

static void s_cancel(oq_broker_t *self, const s_envelope_t *env, int64_t req, uint64_t id)
{
    char reason[512];
    oq_refusal_t why;
    if (!s_can_promise(self, env, req))
        return;
    if (oq_engine_cancel(self->engine, id, &why, reason, sizeof reason) < 0) {
        s_reply_error(self, self->front, env, req, s_refusal_code(why), reason);
        return;
    }
    oq_info("job %llu cancelled", (unsigned long long)id);
    oq_proto_encode_job_id(&self->out, OQ_CMD_CANCELLED, req, id);
    s_promise(self, env, req, s_appended(self));
}

/* flush or requeue_all: every failed job of one queue, or of all. */
static void s_failed_all(oq_broker_t *self, const s_envelope_t *env, int64_t req, oq_cmd_t cmd,
                         oq_str_t queue_name)
{
    if (!s_can_promise(self, env, req))
        return;
    char name[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(queue_name, name, sizeof name);
    const char *queue = queue_name.ptr ? name : NULL;
    bool flush = cmd == OQ_CMD_FLUSH;
    uint64_t count = 0;
    int rc = flush ? oq_engine_flush_failed(self->engine, queue, &count)
                   : oq_engine_requeue_all(self->engine, queue, &count);
    oq_info("%s %llu failed job(s)%s%s", flush ? "flushed" : "requeued", (unsigned long long)count,
            queue ? " of queue " : "", queue ? queue : "");
    if (rc < 0) {
        /* Those done are journaled; the rest stay failed. */
        char reason[256];
        snprintf(reason, sizeof reason,
                 "%s %llu failed job(s), then the journal could not keep the next record (out "
                 "of memory); the rest stay failed, try again later",
                 flush ? "flushed" : "requeued", (unsigned long long)count);
        s_reply_error(self, self->front, env, req, OQ_ERR_UNAVAILABLE, reason);
        return;
    }
    oq_proto_encode_count(&self->out, flush ? OQ_CMD_FLUSHED : OQ_CMD_REQUEUED_ALL, req, count);
    s_promise(self, env, req, s_appended(self));
}

/* prune_failed: the failed jobs older than the age given, at most limit
   of them per request (the loop serves everyone else between two), each
   journaled as a forget, so that a restart does not bring them back. The
   reply says "more" while others of that age remain; the tool asks
   again. */
static void s_prune_failed(oq_broker_t *self, const s_envelope_t *env, int64_t req,
                           const oq_msg_t *msg)
{
    if (!s_can_promise(self, env, req))
        return;
    char name[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(msg->name, name, sizeof name);
    const char *queue = msg->name.ptr ? name : NULL;
    uint64_t count = 0;
    bool more = false;
    int rc = oq_engine_prune_failed(self->engine, queue, msg->wait_ms, msg->limit, &count, &more);
    if (count)
        oq_info("pruned %llu failed job(s)%s%s that failed more than %lld s ago",
                (unsigned long long)count, queue ? " of queue " : "", queue ? queue : "",
                (long long)(msg->wait_ms / 1000));
    if (rc < 0) {
        char reason[256];
        snprintf(reason, sizeof reason,
                 "pruned %llu failed job(s), then the journal could not keep the next record "
                 "(out of memory); the rest stay failed, try again later",
                 (unsigned long long)count);
        s_reply_error(self, self->front, env, req, OQ_ERR_UNAVAILABLE, reason);
        return;
    }
    oq_proto_encode_pruned_failed(&self->out, req, count, more);
    s_promise(self, env, req, s_appended(self));
}

/* The cursor of a page of the failed or the review store: (after_at,
   after) as given, or the time of job after looked up. 0, or -1 after
   answering with an error. */
static int s_store_cursor(oq_broker_t *self, const s_envelope_t *env, int64_t req,
                          const oq_msg_t *msg, oq_failed_cursor_t *cursor)
{
    if (msg->has_after_at) {
        *cursor = (oq_failed_cursor_t){msg->after_at, msg->after};
        return 0;
    }
    if (oq_engine_failed_cursor(self->engine, msg->after, cursor) == 0)
        return 0;
    char reason[256];
    snprintf(reason, sizeof reason,
             "job %llu, the page's cursor, is no longer in the %s store: give its time too "
             "(\"after_at\", the previous page's \"next_at\")",
             (unsigned long long)msg->after, msg->cmd == OQ_CMD_REVIEW ? "review" : "failed");
    s_reply_error(self, self->front, env, req, OQ_ERR_NOT_FOUND, reason);
    return -1;
}

/* `resolve`: answered, like a requeue, once the resolution is durable. */
static void s_resolve(oq_broker_t *self, const s_envelope_t *env, int64_t req, const oq_msg_t *msg)
{
    oq_review_action_t action;
    oq_str_t note_str;
    char reason[OQ_MAX_ERROR_LEN + 1], note[OQ_MAX_REVIEW_NOTE_LEN + 1];
    if (oq_proto_resolve_get(msg, &action, &note_str) < 0) {
        s_reply_error(self, self->front, env, req, OQ_ERR_BAD_REQUEST, "a resolve needs an action");
        return;
    }
    if (!s_can_promise(self, env, req))
        return;
    oq_str_copy(note_str, note, sizeof note);
    oq_refusal_t why;
    if (oq_engine_review_resolve(self->engine, msg->id, action, note, &why, reason, sizeof reason) <
        0) {
        s_reply_error(self, self->front, env, req, s_refusal_code(why), reason);
        return;
    }
    oq_proto_encode_resolve(&self->out, OQ_CMD_RESOLVED, req, msg->id, action, note);
    s_promise(self, env, req, s_appended(self));
}

/* ---- waits: a producer waiting for a job to end ------------------------------------ */

/* Send the answer in self->wait_out to waiter w once the journal is
   durable up to where it is now (the record of the end it reports), as a
   dispatch's answer waits; with the outbox full, at once, unless it
   confirms a dispatch: that one is answered "unavailable", and the
   producer's resend with the same dispatch_id finds the job. */
static void s_wait_answer(oq_broker_t *self, const oq_waiter_view_t *w)
{
    if (oq_outbox_add(self->outbox, s_appended(self), w->req, w->identity, w->identity_len, w->fd,
                      w->delimiter, self->wait_out.data, self->wait_out.size) < 0) {
        if (w->confirms) {
            s_envelope_t env = {
                .identity_len = w->identity_len, .fd = w->fd, .delimiter = w->delimiter};
            memcpy(env.identity, w->identity, w->identity_len);
            s_reply_error(self, self->front, &env, w->req, OQ_ERR_UNAVAILABLE,
                          "too many replies wait for the journal to confirm the job's dispatch; "
                          "send it again with the same dispatch_id");
        } else {
            oq_outbox_send(self->outbox, w->identity, w->identity_len, w->fd, w->delimiter,
                           self->wait_out.data, self->wait_out.size, s_outbox_send, self);
        }
    }
    msgpack_sbuffer_clear(&self->wait_out);
}

typedef struct {
    oq_broker_t *broker;
    oq_wait_state_t state;
    const char *error; /* the failed job's error, the reviewed job's reason; or NULL */
} s_ended_t;

static void s_answer_ended(void *ctx, const oq_waiter_view_t *w)
{
    s_ended_t *ended = ctx;
    oq_proto_encode_waited(&ended->broker->wait_out, w->req, w->job_id, ended->state, ended->error);
    s_wait_answer(ended->broker, w);
}

/* "pending" promises nothing and leaves at once, unless it answers a
   dispatch: then it confirms the job as "dispatched" would, and waits for
   the journal like one. */
static void s_answer_pending(void *ctx, const oq_waiter_view_t *w)
{
    oq_broker_t *self = ctx;
    oq_proto_encode_waited(&self->wait_out, w->req, w->job_id, OQ_WAIT_PENDING, NULL);
    if (w->confirms) {
        s_wait_answer(self, w);
        return;
    }
    if (oq_outbox_send(self->outbox, w->identity, w->identity_len, w->fd, w->delimiter,
                       self->wait_out.data, self->wait_out.size, s_outbox_send, self) < 0)
        oq_debug("a waiter for job %llu went away before its timeout",
                 (unsigned long long)w->job_id);
    msgpack_sbuffer_clear(&self->wait_out);
}

/* The engine's observer: the journal records the change first (and may
   refuse an asked one), then the waiters of a job that ended are
   answered. Called inside engine calls: it touches only the waiters, the
   outbox and its own buffer. */
/* The batches' observer: the journal's. */
static int s_batch_changed(void *ctx, oq_batch_event_t event, const oq_batch_view_t *batch,
                           oq_batch_callback_t which)
{
    oq_broker_t *self = ctx;
    const oq_engine_hooks_t *journal = &self->journal_hooks;
    return journal->batch ? journal->batch(journal->ctx, event, batch, which) : 0;
}

/* The chains' observer: the journal's. */
static int s_chain_changed(void *ctx, oq_chain_event_t event, const oq_chain_view_t *chain)
{
    oq_broker_t *self = ctx;
    const oq_engine_hooks_t *journal = &self->journal_hooks;
    return journal->chain ? journal->chain(journal->ctx, event, chain) : 0;
}

static int s_changed(void *ctx, oq_job_event_t event, const oq_job_view_t *job,
                     const oq_job_msg_t *dispatch)
{
    oq_broker_t *self = ctx;
    const oq_engine_hooks_t *journal = &self->journal_hooks;
    int rc = journal->changed ? journal->changed(journal->ctx, event, job, dispatch) : 0;
    /* An asked change the journal cannot keep is not made; any other has
       happened already, and its waiters hear of it (their answers then
       wait for the journal, and are answered "unavailable" if it fails). */
    if (rc < 0 &&
        (event == OQ_EVENT_CANCELLED || event == OQ_EVENT_FORGOTTEN ||
         event == OQ_EVENT_DISPATCHED || event == OQ_EVENT_REQUEUED || event == OQ_EVENT_RESOLVED))
        return -1;
    s_ended_t ended = {self, OQ_WAIT_DONE, NULL};
    switch (event) {
    case OQ_EVENT_DONE:
        break;
    case OQ_EVENT_FAILED:
        ended = (s_ended_t){self, OQ_WAIT_FAILED, job->error};
        break;
    case OQ_EVENT_REVIEW:
        ended = (s_ended_t){self, OQ_WAIT_REVIEW, job->error};
        break;
    case OQ_EVENT_CANCELLED:
        ended.state = OQ_WAIT_CANCELLED;
        oq_waiters_remember_end(self->waiters, job->id, OQ_WAIT_CANCELLED);
        break;
    case OQ_EVENT_FORGOTTEN:
        /* A failed job: its waiters were answered when it failed. */
        oq_waiters_remember_end(self->waiters, job->id, OQ_WAIT_FAILED);
        return rc;
    default:
        return rc;
    }
    oq_waiters_end(self->waiters, job->id, s_answer_ended, &ended);
    return rc;
}

/* `wait`: a job that has ended (or is in the failed or review store) is
   answered at once, one that is live is waited for, an id the broker never
   issued is refused. A job the broker no longer holds has ended: ids only
   grow, and the journal keeps the next one, so below it an id not held is
   a job that completed, unless it is remembered as cancelled or deleted
   from the failed store. confirms: the wait of a dispatch (s_dispatch),
   whose every answer goes through the outbox. A wait read after its
   connection closed is not held: nobody is there to answer (its
   connection's other waits went at the close, s_forget_fd). 0 once
   answered or held, -1 if not (answered with an error, unless
   confirms). */
static int s_wait_for(oq_broker_t *self, const s_envelope_t *env, int64_t req, uint64_t id,
                      int64_t wait_ms, bool confirms)
{
    char reason[256];
    oq_job_view_t view;
    s_ended_t ended = {self, OQ_WAIT_DONE, NULL};
    oq_waiter_view_t now = {id,      req, env->identity, env->identity_len, env->fd, env->delimiter,
                            confirms};
    oq_waiter_owner_t owner = {env->identity, env->identity_len, env->fd,
                               env->has_key ? env->key : NULL, env->delimiter};
    if (oq_engine_job_view(self->engine, id, &view) == 0) {
        if (view.state == OQ_STATE_FAILED || view.state == OQ_STATE_REVIEW) {
            ended.state = view.state == OQ_STATE_FAILED ? OQ_WAIT_FAILED : OQ_WAIT_REVIEW;
            ended.error = view.error;
        } else if (wait_ms == 0) {
            s_answer_pending(self, &now);
            return 0;
        } else if (self->conns && oq_conns_closed(self->conns, env->fd)) {
            oq_debug("a wait for job %llu came from a connection that has closed: not held",
                     (unsigned long long)id);
            return 0;
        } else {
            if (oq_waiters_add(self->waiters, id, wait_ms, &owner, confirms, req, reason,
                               sizeof reason) == 0)
                return 0;
            /* A dispatch is answered "dispatched" instead: the job is queued. */
            if (!confirms)
                s_reply_error(self, self->front, env, req, OQ_ERR_FULL, reason);
            return -1;
        }
    } else if (id >= oq_engine_next_id(self->engine)) {
        snprintf(reason, sizeof reason,
                 "job %llu was never issued: this broker's newest job id is %llu",
                 (unsigned long long)id, (unsigned long long)(oq_engine_next_id(self->engine) - 1));
        s_reply_error(self, self->front, env, req, OQ_ERR_NOT_FOUND, reason);
        return -1;
    } else {
        oq_waiters_recall_end(self->waiters, id, &ended.state);
    }
    s_answer_ended(&ended, &now);
    return 0;
}

static void s_wait(oq_broker_t *self, const s_envelope_t *env, int64_t req, const oq_msg_t *msg)
{
    s_wait_for(self, env, req, msg->id, msg->wait_ms, false);
}

/* The journal's, auth's and the waits' numbers, for "stats" and the
   metrics. */
static void s_gather(oq_broker_t *self, oq_stats_journal_t *journal, oq_stats_auth_t *auth,
                     oq_stats_waits_t *waits)
{
    oq_stats_journal_t j = {
        .enabled = self->journal != NULL,
        .dispatch_ids = oq_engine_dispatch_ids(self->engine),
        .dedupe_hits = oq_engine_dedupe_hits(self->engine),
        .dedupe_evicted = oq_engine_dedupe_evicted(self->engine),
        .dedupe_window_held_ms = (uint64_t)oq_engine_dedupe_window_held_ms(self->engine),
        .error = "",
        .fsync = "none",
    };
    if (self->journal) {
        j.fsync = oq_fsync_name(oq_journal_policy(self->journal));
        j.bytes = oq_journal_file_bytes(self->journal);
        j.live_bytes = oq_compact_live_bytes(self->compact);
        j.fsyncs = oq_journal_fsyncs(self->journal);
        j.failures = oq_journal_failures(self->journal);
        j.backlog_bytes = oq_journal_backlog_bytes(self->journal);
        j.compactions = oq_compact_count(self->compact);
        j.error = oq_journal_error(self->journal);
    }
    oq_stats_auth_t a = {.curve = self->keys != NULL, .forbidden = self->forbidden};
    if (self->auth) {
        a.handshakes = oq_auth_accepted(self->auth);
        a.unknown_keys = oq_auth_refused_unknown(self->auth);
    }
    for (int role = OQ_ROLE_NONE + 1; self->keys && role < OQ_ROLE_COUNT_; role++) {
        a.keys[role] = oq_keystore_count(self->keys, (oq_role_t)role);
        if (self->peers) {
            a.connected[role] = oq_peers_count(self->peers, (oq_role_t)role);
            a.max[role] = oq_peers_max(self->peers, (oq_role_t)role);
            /* At the handshake or at the first message. */
            a.refused_full += oq_peers_refused(self->peers, (oq_role_t)role);
        }
    }
    *journal = j;
    *auth = a;
    *waits = (oq_stats_waits_t){
        .held = oq_waiters_count(self->waiters),
        .max = oq_waiters_max(self->waiters),
        .max_per_peer = oq_waiters_max_per_peer(self->waiters),
        .max_per_key = oq_waiters_max_per_key(self->waiters),
        .closed = oq_waiters_closed(self->waiters),
    };
}

/* The outbox's replies kept for full pipes, for "stats" and the metrics. */
static oq_stats_replies_t s_replies(const oq_broker_t *self)
{
    oq_outbox_stats_t o = oq_outbox_stats(self->outbox);
    return (oq_stats_replies_t){.kept = o.kept,
                                .kept_bytes = o.kept_bytes,
                                .kept_peers = o.kept_peers,
                                .full_pipes = o.full_pipes,
                                .peers_cut = o.peers_cut,
                                .cut_replies = o.cut_replies};
}

/* `stats`, with the page of workers the request asked for. Its bytes count
   against the turn's stats budget (s_drain_socket). */
static void s_stats(oq_broker_t *self, int64_t req, const oq_msg_t *msg)
{
    oq_stats_journal_t j;
    oq_stats_auth_t a;
    oq_stats_waits_t w;
    s_gather(self, &j, &a, &w);
    oq_stats_replies_t r = s_replies(self);
    size_t before = self->out.size;
    oq_stats_encode(&self->out, req, self->engine, oq_clock_now_ms(self->clock) - self->started_ms,
                    &j, &a, &self->messages, &w, &r, msg->after, msg->limit);
    self->stats_turn_bytes += self->out.size - before;
}

/* The review store's commands (docs/protocol.md, "review"). */
static void s_handle_review(oq_broker_t *self, const s_envelope_t *env, int64_t req,
                            const oq_msg_t *msg)
{
    if (msg->cmd == OQ_CMD_RESOLVE) {
        s_resolve(self, env, req, msg);
        return;
    }
    if (msg->cmd == OQ_CMD_REVIEW) {
        char queue[OQ_MAX_NAME_LEN + 1];
        oq_str_copy(msg->name, queue, sizeof queue);
        oq_failed_cursor_t cursor;
        bool paged = msg->after || msg->has_after_at;
        if (paged && s_store_cursor(self, env, req, msg, &cursor) < 0)
            return;
        oq_stats_encode_review(&self->out, req, self->engine, msg->name.ptr ? queue : NULL,
                               paged ? &cursor : NULL,
                               msg->limit ? msg->limit : OQ_DEFAULT_FAILED_LIST);
    } else if (oq_stats_encode_review_show(&self->out, req, self->engine, msg->id) < 0) {
        char text[128];
        snprintf(text, sizeof text, "job %llu is not in review and has no resolution on record",
                 (unsigned long long)msg->id);
        s_reply_error(self, self->front, env, req, OQ_ERR_NOT_FOUND, text);
        return;
    }
    if (s_reply(self, self->front, env) < 0)
        oq_debug("admin went away before its reply");
}

/* Batches (the end of this file): one handler per command. */
static void s_dispatch_batch(oq_broker_t *self, const s_envelope_t *env, int64_t req,
                             const oq_msg_t *msg);
static void s_batch(oq_broker_t *self, const s_envelope_t *env, int64_t req, const oq_msg_t *msg);
static void s_dispatch_chain(oq_broker_t *self, const s_envelope_t *env, int64_t req,
                             const oq_msg_t *msg);
static void s_chain(oq_broker_t *self, const s_envelope_t *env, int64_t req, const oq_msg_t *msg);

static void s_handle_front(oq_broker_t *self, const s_envelope_t *env, oq_msg_t *msg)
{
    int64_t req = msg->has_req ? (int64_t)msg->req : -1;
    switch (msg->cmd) {
    case OQ_CMD_DISPATCH:
        if (msg->chain || msg->chain_catch)
            s_dispatch_chain(self, env, req, msg);
        else
            s_dispatch(self, env, req, &msg->job, msg->has_wait, msg->wait_ms);
        return;
    case OQ_CMD_REQUEUE:
        s_requeue(self, env, req, msg->id);
        return;
    case OQ_CMD_STATS:
        s_stats(self, req, msg);
        break;
    case OQ_CMD_FAILED: {
        char queue[OQ_MAX_NAME_LEN + 1];
        oq_str_copy(msg->name, queue, sizeof queue);
        uint32_t limit = msg->limit ? msg->limit : OQ_DEFAULT_FAILED_LIST;
        oq_failed_cursor_t cursor;
        bool paged = msg->after || msg->has_after_at;
        if (paged && s_store_cursor(self, env, req, msg, &cursor) < 0)
            return;
        oq_stats_encode_failed(&self->out, req, self->engine, msg->name.ptr ? queue : NULL,
                               paged ? &cursor : NULL, limit);
        break;
    }
    case OQ_CMD_FORGET:
        s_forget(self, env, req, msg->id);
        return;
    case OQ_CMD_CANCEL:
        s_cancel(self, env, req, msg->id);
        return;
    case OQ_CMD_FLUSH:
    case OQ_CMD_REQUEUE_ALL:
        s_failed_all(self, env, req, msg->cmd, msg->name);
        return;
    case OQ_CMD_PRUNE_FAILED:
        s_prune_failed(self, env, req, msg);
        return;
    case OQ_CMD_HORIZON:
        oq_stats_encode_horizon(&self->out, req, self->engine,
                                self->config.engine.dedupe_window_ms);
        break;
    case OQ_CMD_PING:
        oq_proto_encode_simple(&self->out, OQ_CMD_PONG, req);
        break;
    case OQ_CMD_WAIT:
        s_wait(self, env, req, msg);
        return;
    case OQ_CMD_REVIEW:
    case OQ_CMD_REVIEW_SHOW:
    case OQ_CMD_RESOLVE:
        s_handle_review(self, env, req, msg);
        return;
    case OQ_CMD_DISPATCH_BATCH:
        s_dispatch_batch(self, env, req, msg);
        return;
    case OQ_CMD_BATCH:
        s_batch(self, env, req, msg);
        return;
    case OQ_CMD_CHAIN:
        s_chain(self, env, req, msg);
        return;
    default:
        assert(!"s_valid_on admits only front commands");
        return;
    }
    if (s_reply(self, self->front, env) < 0)
        oq_debug("producer went away before its reply");
}

/* ---- back socket: workers ------------------------------------------------------ */

static void s_send_reconnect(oq_broker_t *self, const s_envelope_t *env, const char *why)
{
    oq_proto_encode_reconnect(&self->out, why);
    s_reply(self, self->back, env);
}

static void s_ack(oq_broker_t *self, const s_envelope_t *env, oq_worker_t *w,
                  const oq_ack_msg_t *ack)
{
    oq_ack_effect_t effect = oq_engine_ack(self->engine, w, s_key_of(env), ack);
    if (effect != OQ_ACK_APPLIED)
        oq_debug("ack for job %llu attempt %u: %s", (unsigned long long)ack->id, ack->attempt,
                 effect == OQ_ACK_LATE     ? "late, completed the job"
                 : effect == OQ_ACK_FENCED ? "fenced: no valid lease token, ignored"
                                           : "ignored");
}

/* Each entry of an "acks" message as if it had come alone: an entry that
   does not decode gets its own error, naming its place in the list (and
   its job, if that can be read), and the others are applied all the same. */
static void s_acks(oq_broker_t *self, const s_envelope_t *env, oq_worker_t *w, const oq_msg_t *msg)
{
    uint32_t count = oq_proto_entry_count(msg);
    self->messages.acks_received++;
    self->messages.acks_entries += count;
    for (uint32_t i = 0; i < count; i++) {
        oq_msg_t entry;
        oq_err_t code;
        char reason[256];
        if (oq_proto_decode_entry(msg, i, &entry, &code, reason, sizeof reason) == 0) {
            s_ack(self, env, w, &entry.ack);
        } else {
            uint64_t id = 0, lease;
            uint32_t attempt = 0;
            bool has_lease;
            char text[384], job[64] = "";
            if (oq_proto_entry_ids(msg, i, &id, &attempt, &has_lease, &lease) == 0)
                snprintf(job, sizeof job, " (job %llu attempt %u)", (unsigned long long)id,
                         attempt);
            snprintf(text, sizeof text, "acks entry %u of %u%s refused, the others applied: %s", i,
                     count, job, reason);
            s_reply_error(self, self->back, env, -1, code, text);
        }
        oq_proto_msg_release(&entry);
    }
}

static void s_handle_back(oq_broker_t *self, const s_envelope_t *env, oq_msg_t *msg)
{
    oq_worker_t *w = oq_engine_worker_find(self->engine, env->identity, env->identity_len);
    switch (msg->cmd) {
    case OQ_CMD_READY:
        if (!w) {
            w = oq_engine_worker_add(self->engine, env->identity, env->identity_len, msg->name,
                                     msg->pid, s_key_of(env));
            if (!w) {
                s_reply_error(self, self->back, env, -1, OQ_ERR_FULL,
                              "the broker cannot register more workers");
                return;
            }
            char why[256];
            if (oq_engine_worker_route(self->engine, w, msg->types, msg->queues, why, sizeof why) <
                0) {
                oq_engine_worker_remove(self->engine, &w, "refused");
                s_reply_error(self, self->back, env, -1, OQ_ERR_FULL, why);
                return;
            }
            oq_info("worker registered: pid %u name \"%.*s\" credit %u, %u type(s), %u "
                    "queue(s) (0: every one)",
                    msg->pid, (int)msg->name.len, msg->name.ptr ? msg->name.ptr : "", msg->credit,
                    oq_proto_list_size(msg->types), oq_proto_list_size(msg->queues));
            oq_proto_encode_welcome_acks(&self->out, (uint32_t)self->config.heartbeat_ms,
                                         (uint32_t)self->config.liveness, OQ_MAX_ACKS_PER_MSG);
            if (s_reply(self, self->back, env) < 0) {
                oq_engine_worker_remove(self->engine, &w, "unreachable");
                return;
            }
        }
        oq_engine_worker_seen(self->engine, w);
        oq_engine_worker_jobs_per_msg(self->engine, w, msg->jobs_per_msg);
        /* A ready after a drain ends it (a stop that was cancelled). */
        oq_engine_worker_resume(self->engine, w);
        oq_engine_worker_credit(self->engine, w, msg->credit);
        break;
    case OQ_CMD_HEARTBEAT:
        if (w)
            oq_engine_worker_seen(self->engine, w);
        else
            s_send_reconnect(self, env, "unknown worker: send ready");
        break;
    case OQ_CMD_ACK:
        self->messages.ack_received++;
        s_ack(self, env, w, &msg->ack);
        if (!w)
            s_send_reconnect(self, env, "unknown worker: ack applied, send ready");
        break;
    case OQ_CMD_ACKS:
        s_acks(self, env, w, msg);
        if (!w)
            s_send_reconnect(self, env, "unknown worker: acks applied, send ready");
        break;
    case OQ_CMD_TOUCH:
        if (oq_engine_touch(self->engine, w, s_key_of(env), &msg->ack) < 0)
            oq_debug("touch for job %llu attempt %u changed nothing",
                     (unsigned long long)msg->ack.id, msg->ack.attempt);
        if (!w)
            s_send_reconnect(self, env, "unknown worker: send ready");
        break;
    case OQ_CMD_DRAIN:
        if (w)
            oq_engine_worker_drain(self->engine, w);
        else
            s_send_reconnect(self, env, "unknown worker: send ready");
        break;
    case OQ_CMD_DISCONNECT:
        if (w)
            oq_engine_worker_remove(self->engine, &w, "disconnected");
        break;
    case OQ_CMD_STATUS:
        if (w) {
            oq_engine_worker_seen(self->engine, w);
            oq_engine_worker_status(self->engine, w, msg->status, msg->status_ms, msg->err_text);
        } else {
            s_send_reconnect(self, env, "unknown worker: send ready");
        }
        break;
    default:
        assert(!"s_valid_on admits only back commands");
    }
}

/* Commands a peer may send on each socket (docs/protocol.md, sections 5, 6). */
static bool s_valid_on(const oq_broker_t *self, void *sock, oq_cmd_t cmd)
{
    if (sock == self->front)
        return cmd == OQ_CMD_DISPATCH || cmd == OQ_CMD_STATS || cmd == OQ_CMD_FAILED ||
               cmd == OQ_CMD_PING || cmd == OQ_CMD_REQUEUE || s_store_command(cmd) ||
               cmd == OQ_CMD_REVIEW || cmd == OQ_CMD_REVIEW_SHOW || cmd == OQ_CMD_RESOLVE ||
               cmd == OQ_CMD_WAIT || cmd == OQ_CMD_DISPATCH_BATCH || cmd == OQ_CMD_BATCH ||
               cmd == OQ_CMD_CHAIN;
    return cmd == OQ_CMD_READY || cmd == OQ_CMD_HEARTBEAT || cmd == OQ_CMD_ACK ||
           cmd == OQ_CMD_ACKS || cmd == OQ_CMD_DRAIN || cmd == OQ_CMD_DISCONNECT ||
           cmd == OQ_CMD_TOUCH || cmd == OQ_CMD_STATUS;
}

/* ---- who may send what -------------------------------------------------------- */

/* The role of a message's sender: the role of the key libzmq put in its
   User-Id, in the keys in force now. *key gets the key. */
static oq_role_t s_sender_role(const oq_broker_t *self, zmq_msg_t *body, uint8_t key[OQ_KEY_BYTES],
                               const char **name)
{
    const char *user = zmq_msg_gets(body, "User-Id");
    *name = "";
    if (!user || oq_keys_decode(user, key) < 0)
        return OQ_ROLE_NONE;
    return oq_keystore_role(self->keys, key, name);
}

/* The first message of a connection binds it to its role; one that would
   take the role past its limit is shut down. false if it was. */
static bool s_admit(oq_broker_t *self, zmq_msg_t *body, oq_side_t side, oq_role_t role,
                    const uint8_t key[OQ_KEY_BYTES], const s_envelope_t *env)
{
    int fd = self->peers ? zmq_msg_get(body, ZMQ_SRCFD) : -1;
    if (fd < 0 ||
        oq_peers_bind(self->peers, fd, side, role, key, env->identity, env->identity_len) == 0)
        return true;
    oq_peers_refusing(self->peers, role);
    oq_conns_shutdown(self->conns, fd);
    return false;
}

/* Answer "forbidden", count it, and say so in the log once a minute per key. */
static void s_forbid(oq_broker_t *self, void *sock, const s_envelope_t *env, int64_t req,
                     const uint8_t key[OQ_KEY_BYTES], const char *text)
{
    self->forbidden++;
    if (oq_throttle_allow(self->forbidden_log, key, OQ_KEY_BYTES, oq_clock_now_ms(self->clock))) {
        char z85[OQ_KEY_Z85_LEN + 1], more[96] = "";
        oq_keys_encode(key, z85);
        uint64_t quiet = oq_throttle_take_suppressed(self->forbidden_log);
        if (quiet)
            snprintf(more, sizeof more, "; %llu other refusals not logged since the last line",
                     (unsigned long long)quiet);
        oq_warn("forbidden on the %s socket: %s (key %s; logged once a minute per key%s)",
                sock == self->front ? "front" : "back", text, z85, more);
    }
    s_reply_error(self, sock, env, req, OQ_ERR_FORBIDDEN, text);
}

/* A message from a key that lost its role: refused, and a worker of that
   key is dropped now (its leases go back) instead of at its silence. */
static void s_revoked(oq_broker_t *self, void *sock, const s_envelope_t *env, int64_t req,
                      const uint8_t key[OQ_KEY_BYTES])
{
    if (sock == self->back) {
        oq_worker_t *w = oq_engine_worker_find(self->engine, env->identity, env->identity_len);
        if (w)
            oq_engine_worker_remove(self->engine, &w, "key revoked");
    }
    s_forbid(self, sock, env, req, key,
             "this key is not allowed (any more): it is in none of the broker's key "
             "directories");
}

/* Read and handle messages from sock until it is empty, or up to one
   batch of them. */
static void s_drain_socket(oq_broker_t *self, void *sock)
{
    oq_side_t side = sock == self->front ? OQ_SIDE_FRONT : OQ_SIDE_BACK;
    for (int n = 0; n < OQ_BROKER_BATCH_MSGS; n++) {
        s_envelope_t env;
        zmq_msg_t body;
        zmq_msg_init(&body);
        int got = s_recv(self, sock, &env, &body);
        if (got == 0) {
            zmq_msg_close(&body);
            return;
        }
        if (got < 0) {
            zmq_msg_close(&body);
            continue;
        }
        if (self->conns) /* its handshake is over (conns.h) */
            oq_conns_spoke(self->conns, zmq_msg_get(&body, ZMQ_SRCFD));
        uint8_t key[OQ_KEY_BYTES] = {0};
        const char *key_name = "";
        oq_role_t role = OQ_ROLE_NONE;
        env.has_key = false;
        if (self->keys) {
            role = s_sender_role(self, &body, key, &key_name);
            memcpy(env.key, key, OQ_KEY_BYTES);
            env.has_key = role != OQ_ROLE_NONE;
            if (role != OQ_ROLE_NONE && !s_admit(self, &body, side, role, key, &env)) {
                zmq_msg_close(&body);
                continue;
            }
        }
        oq_msg_t msg;
        oq_err_t code;
        char reason[256];
        int rc = oq_proto_decode(&msg, zmq_msg_data(&body), zmq_msg_size(&body), &code, reason,
                                 sizeof reason);
        int64_t req = msg.has_req ? (int64_t)msg.req : -1;
        if (self->keys && role == OQ_ROLE_NONE) {
            s_revoked(self, sock, &env, req, key);
        } else if (msg.cmd != OQ_CMD_UNKNOWN && !s_valid_on(self, sock, msg.cmd)) {
            /* The command is the first thing wrong, whatever its fields. */
            snprintf(reason, sizeof reason, "command \"%s\" is not valid on the %s socket",
                     oq_proto_cmd_name(msg.cmd), sock == self->front ? "front" : "back");
            s_reply_error(self, sock, &env, req, OQ_ERR_UNKNOWN_COMMAND, reason);
        } else if (self->keys && msg.cmd != OQ_CMD_UNKNOWN &&
                   !oq_roles_allow(role, side, msg.cmd)) {
            snprintf(reason, sizeof reason, "a %s key (\"%s\") may not send \"%s\"",
                     oq_role_name(role), key_name, oq_proto_cmd_name(msg.cmd));
            s_forbid(self, sock, &env, req, key, reason);
        } else if (rc < 0) {
            s_reply_error(self, sock, &env, req, code, reason);
        } else if (sock == self->front) {
            s_handle_front(self, &env, &msg);
        } else {
            s_handle_back(self, &env, &msg);
        }
        oq_proto_msg_release(&msg);
        zmq_msg_close(&body);
        /* Admins asking for stats in a tight loop wait for the next turn
           once this one's stats took their budget: the pump comes first. */
        if (side == OQ_SIDE_FRONT && self->stats_turn_bytes >= OQ_STATS_TURN_BYTES)
            break;
    }
    /* The turn's share is read; more may wait, unsignalled. */
    oq_zsock_used(s_wait_of(self, sock));
}

/* ---- keys: SIGHUP ---------------------------------------------------------------- */

typedef struct {
    oq_broker_t *broker;
    size_t lost; /* connections whose key lost the role they spoke with */
} s_sweep_t;

static void s_sweep_one(void *ctx, const oq_peer_view_t *peer)
{
    s_sweep_t *sweep = ctx;
    oq_broker_t *self = sweep->broker;
    if (oq_keystore_role(self->keys, peer->key, NULL) == peer->role)
        return;
    sweep->lost++;
    if (peer->side != OQ_SIDE_BACK)
        return;
    oq_worker_t *w = oq_engine_worker_find(self->engine, peer->identity, peer->identity_len);
    if (w)
        oq_engine_worker_remove(self->engine, &w, "key revoked");
}

int oq_broker_reload_keys(oq_broker_t *self)
{
    const char *dir = self->config.keys_dir;
    if (!self->keys) {
        oq_info("no keys to read again: running --insecure");
        return 0;
    }
    char why[1024];
    oq_keystore_t *fresh = oq_keystore_load(dir, why, sizeof why);
    if (!fresh) {
        oq_error("keys not read again, the ones in force stay: %s", why);
        return -1;
    }
    if (strcmp(oq_keystore_broker(fresh)->public_z85, oq_keystore_broker(self->keys)->public_z85))
        oq_warn("%s/%s%s holds a new pair: the sockets keep the broker's key %s until a restart",
                dir, OQ_KEY_BROKER_NAME, OQ_KEY_SECRET_EXT,
                oq_keystore_broker(self->keys)->public_z85);
    oq_keystore_t *old = self->keys;
    self->keys = fresh;
    oq_auth_set_store(self->auth, fresh);
    oq_keystore_destroy(&old);
    s_log_keys(fresh, dir, "read again");
    if (self->peers) {
        s_sweep_t sweep = {self, 0};
        oq_peers_each(self->peers, s_sweep_one, &sweep);
        if (sweep.lost)
            oq_info("%zu connected peer(s) lost their role: their commands are refused from now "
                    "on",
                    sweep.lost);
    }
    return 0;
}

/* ---- deliveries and heartbeats ------------------------------------------------------ */

static void s_job_msg(const oq_job_view_t *job, oq_job_msg_t *out)
{
    oq_job_msg_t msg = {
        .id = job->id,
        .type = oq_str(job->type),
        .queue = oq_str(job->queue),
        .payload = job->payload,
        .payload_len = job->payload_len,
        .attempt = job->attempt,
        .max_tries = job->max_tries,
        .timeout_ms = job->timeout_ms,
        .has_timeout = true,
        .lease = job->lease,
        .has_lease = true,
    };
    if (job->backoff_ms) {
        memcpy(msg.backoff_ms, job->backoff_ms, job->backoff_len * sizeof *job->backoff_ms);
        msg.backoff_len = job->backoff_len;
    }
    *out = msg;
}

/* One "job" message, or one "jobs" message for several (the engine keeps
   them within the worker's jobs_per_msg and the frame's budget). */
static int s_deliver(void *ctx, const oq_worker_view_t *worker, const oq_job_view_t *jobs,
                     size_t count)
{
    oq_broker_t *self = ctx;
    oq_job_msg_t msgs[OQ_MAX_JOBS_PER_MSG];
    assert(count >= 1 && count <= OQ_MAX_JOBS_PER_MSG);
    for (size_t i = 0; i < count; i++)
        s_job_msg(&jobs[i], &msgs[i]);
    if (count == 1)
        oq_proto_encode_job(&self->out, &msgs[0]);
    else
        oq_proto_encode_jobs(&self->out, msgs, count);
    if (s_send(self, self->back, worker->identity, worker->identity_len, -1, false) < 0) {
        oq_warn("cannot deliver job %llu%s to worker pid %u: %s", (unsigned long long)jobs[0].id,
                count > 1 ? " and the jobs sent with it" : "", worker->pid,
                zmq_strerror(zmq_errno()));
        return -1;
    }
    bool several = count > 1;
    self->messages.job_sent += !several;
    self->messages.jobs_sent += several;
    self->messages.jobs_entries += several ? count : 0;
    return 0;
}

typedef struct {
    oq_broker_t *broker;
    uint8_t (*gone)[S_MAX_IDENTITY + 1]; /* identities that could not be reached */
    size_t gone_count;
} s_beat_t;

static void s_beat_one(void *ctx, const oq_worker_view_t *w)
{
    s_beat_t *beat = ctx;
    oq_proto_encode_simple(&beat->broker->out, OQ_CMD_HEARTBEAT, -1);
    if (s_send(beat->broker, beat->broker->back, w->identity, w->identity_len, -1, false) < 0 &&
        beat->gone) {
        beat->gone[beat->gone_count][0] = (uint8_t)w->identity_len;
        memcpy(&beat->gone[beat->gone_count][1], w->identity, w->identity_len);
        beat->gone_count++;
    }
}

/* Heartbeat every worker; a worker the socket says is gone dies now, one
   silent for `liveness` intervals dies by the reaper. */
static void s_heartbeat(oq_broker_t *self)
{
    s_beat_t beat = {self, NULL, 0};
    size_t workers = oq_engine_worker_count(self->engine);
    if (workers)
        beat.gone = malloc(workers * sizeof *beat.gone);
    oq_engine_worker_each(self->engine, s_beat_one, &beat);
    for (size_t i = 0; i < beat.gone_count; i++) {
        oq_worker_t *w = oq_engine_worker_find(self->engine, &beat.gone[i][1], beat.gone[i][0]);
        oq_engine_worker_remove(self->engine, &w, "disconnected");
    }
    free(beat.gone);
    oq_engine_reap_workers(self->engine,
                           (int64_t)self->config.heartbeat_ms * self->config.liveness);
}

/* ---- before sleep: the journal, then the replies that waited on it ---------------- */

/* The outbox's bound: a peer that reads none of its replies. Its
   connection is shut down (libzmq then closes it), so the peer sees it end
   and reconnects, instead of waiting for answers that were dropped. */
static void s_cut_peer(void *ctx, const void *identity, size_t identity_len, int fd, size_t replies,
                       size_t bytes)
{
    oq_broker_t *self = ctx;
    char hex[2 * 8 + 1] = "";
    const uint8_t *b = identity;
    for (size_t i = 0; i < identity_len && i < 8; i++)
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
    bool shut = fd >= 0 && self->conns;
    oq_warn("a producer (connection %s%s) reads none of its replies: %zu of them (%zu bytes) "
            "waited for its full pipe, the most kept for one peer; they are dropped and the "
            "connection is treated as gone%s",
            hex, identity_len > 8 ? "..." : "", replies, bytes,
            shut ? " (shut down)" : " (its descriptor is unknown: not shut down)");
    if (shut)
        oq_conns_shutdown(self->conns, fd);
}

/* A reply that waited for a record the journal cannot write. */
static void s_outbox_reject(void *ctx, const void *identity, size_t identity_len, bool delimiter,
                            int64_t req)
{
    oq_broker_t *self = ctx;
    char text[OQ_MAX_ERROR_LEN];
    snprintf(text, sizeof text,
             "the broker could not make this request durable (%s): it is not confirmed and "
             "may be lost on a restart; send it again (with the same dispatch_id) once "
             "dispatches are accepted",
             oq_journal_error(self->journal));
    oq_proto_encode_error(&self->out, req, OQ_ERR_UNAVAILABLE, text);
    s_send(self, self->front, identity, identity_len, -1, delimiter);
}

/* Replies kept for full pipes go again, at once while they go and less
   often while none does (libzmq says nothing when a pipe has room). */
static void s_retry_kept(oq_broker_t *self)
{
    if (!oq_outbox_stats(self->outbox).kept)
        return;
    int64_t now = oq_clock_now_ms(self->clock);
    size_t sent = oq_outbox_retry(self->outbox, s_outbox_send, self);
    if (sent)
        self->kept_retry_ms = OQ_KEPT_RETRY_MIN_MS;
    else if (self->kept_retry_ms < OQ_KEPT_RETRY_MAX_MS)
        self->kept_retry_ms *= 2;
    if (self->kept_retry_ms > OQ_KEPT_RETRY_MAX_MS)
        self->kept_retry_ms = OQ_KEPT_RETRY_MAX_MS;
    self->next_kept_retry_ms = now + self->kept_retry_ms;
}

/* Once per turn, for everything the turn did: start a compaction if one is
   due (on a full disk, whenever it would shrink the file), write (and under
   the policy fsync) the turn's records, then send the replies whose records
   are durable; if the write failed, answer the others "unavailable" now. */
static void s_before_sleep(oq_broker_t *self)
{
    uint64_t durable = UINT64_MAX;
    bool failing = false;
    if (self->journal) {
        if (oq_journal_healthy(self->journal) ? oq_compact_due(self->compact)
                                              : oq_compact_reclaim_due(self->compact))
            oq_compact_start(self->compact);
        failing = oq_journal_flush(self->journal, oq_outbox_needs(self->outbox)) < 0;
        durable = oq_journal_durable(self->journal);
    }
    s_retry_kept(self);
    oq_outbox_flush(self->outbox, durable, s_outbox_send, self);
    if (failing && oq_outbox_count(self->outbox)) {
        size_t n = oq_outbox_reject(self->outbox, s_outbox_reject, self);
        oq_warn("answered %zu waiting request(s) \"unavailable\": %s", n,
                oq_journal_error(self->journal));
    }
}

/* Render the metrics for the HTTP thread, at most every
   OQ_METRICS_RENDER_MS (metrics_http.h): a scrape never waits for the
   loop, and the loop never waits for a scrape. Rendering grows with the
   queues and types (some 6 us each), so the next one waits at least
   OQ_METRICS_RENDER_SPACING times as long as this one took: the loop
   spends at most 1 / OQ_METRICS_RENDER_SPACING of its time on it. */
static void s_publish_metrics(oq_broker_t *self, int64_t now)
{
    if (!self->metrics || now < self->next_metrics_ms)
        return;
    struct timespec started, ended;
    clock_gettime(CLOCK_MONOTONIC, &started);
    oq_stats_journal_t j;
    oq_stats_auth_t a;
    oq_stats_waits_t w;
    s_gather(self, &j, &a, &w);
    oq_stats_replies_t r = s_replies(self);
    oq_metrics_source_t source = {
        .engine = self->engine,
        .journal = &j,
        .auth = &a,
        .messages = &self->messages,
        .waits = &w,
        .replies = &r,
        .fsync_latency = self->journal ? oq_journal_fsync_latency(self->journal) : NULL,
        .uptime_ms = now - self->started_ms,
    };
    size_t len = 0;
    char *text = oq_metrics_render(&source, &len);
    clock_gettime(CLOCK_MONOTONIC, &ended);
    int64_t took_ms =
        (ended.tv_sec - started.tv_sec) * 1000 + (ended.tv_nsec - started.tv_nsec) / 1000000;
    int64_t wait_ms = took_ms * OQ_METRICS_RENDER_SPACING;
    self->next_metrics_ms = now + (wait_ms > OQ_METRICS_RENDER_MS ? wait_ms : OQ_METRICS_RENDER_MS);
    if (!text) {
        oq_warn("metrics: out of memory rendering them; the previous text is served");
        return;
    }
    oq_metrics_http_publish(self->metrics, &text, len);
}

/* Deliveries add records; stop adding while too many wait for the disk. */
static bool s_may_deliver(oq_broker_t *self)
{
    bool over = self->journal &&
                oq_journal_backlog_bytes(self->journal) > (uint64_t)OQ_JOURNAL_MAX_BACKLOG_BYTES;
    if (over != self->paused)
        oq_warn(over ? "deliveries paused: %llu journal bytes wait for the disk"
                     : "deliveries resume: %llu journal bytes wait for the disk",
                (unsigned long long)oq_journal_backlog_bytes(self->journal));
    self->paused = over;
    return !over;
}

int oq_broker_turn(oq_broker_t *self, long timeout_ms)
{
    /* A peer that reads tells the socket by a command, which an ask for
       ZMQ_EVENTS takes in without a sign (oq_zpoll asks one used since it
       was found empty): take it in here, then send what now fits, so that
       the loop does not sleep beside a pipe with room. */
    if (oq_outbox_stats(self->outbox).kept) {
        int events = 0;
        size_t len = sizeof events;
        zmq_getsockopt(self->front, ZMQ_EVENTS, &events, &len);
        s_retry_kept(self);
        int64_t wait_ms = self->next_kept_retry_ms - oq_clock_now_ms(self->clock);
        if (oq_outbox_stats(self->outbox).kept && (timeout_ms < 0 || wait_ms < timeout_ms))
            timeout_ms = wait_ms > 0 ? (long)wait_ms : 0;
    }
    /* One poll(2) over the sockets' descriptors and the compaction's pipe;
       a socket is asked for ZMQ_EVENTS only if it was used since it was
       last found empty (onceq/zpoll.h). */
    oq_zpoll_item_t items[S_POLL_ITEMS] = {{.sock = &self->front_wait}, {.sock = &self->back_wait}};
    size_t count = 2;
    int compact_fd = self->compact ? oq_compact_fd(self->compact) : -1;
    int compact_at = -1, monitors_at = -1;
    if (compact_fd >= 0) {
        compact_at = (int)count;
        items[count++] = (oq_zpoll_item_t){.fd = compact_fd};
    }
    size_t monitors = 0;
    if (self->conns) {
        oq_zsock_t *pollers = oq_conns_pollers(self->conns, &monitors);
        monitors_at = (int)count;
        for (size_t i = 0; i < monitors && count < S_POLL_ITEMS - 1; i++)
            items[count++] = (oq_zpoll_item_t){.sock = &pollers[i]};
    }
    int monitors_end = (int)count;
    int auth_at = -1;
    if (self->auth) {
        auth_at = (int)count;
        items[count++] = (oq_zpoll_item_t){.sock = oq_auth_socket(self->auth)};
    }
    if (oq_zpoll(items, count, timeout_ms) < 0) {
        if (errno == EINTR)
            return 0;
        oq_error("poll failed: %s", strerror(errno));
        return -1;
    }
    /* Closes first: a descriptor closed and reused is forgotten before the
       new connection's first message binds it, and a role's room seen by
       the handshakes below is up to date. */
    bool monitor_events = false;
    for (int i = monitors_at; i >= 0 && i < monitors_end; i++)
        monitor_events |= items[i].ready;
    if (monitor_events)
        oq_conns_poll(self->conns);
    if (auth_at >= 0 && items[auth_at].ready)
        oq_auth_poll(self->auth, OQ_BROKER_BATCH_MSGS);
    self->stats_turn_bytes = 0;
    if (items[1].ready)
        s_drain_socket(self, self->back);
    if (items[0].ready)
        s_drain_socket(self, self->front);
    if (compact_at >= 0 && items[compact_at].ready)
        oq_compact_poll(self->compact);
    oq_engine_tick(self->engine);
    oq_waiters_expire(self->waiters, s_answer_pending, self);
    int64_t now = oq_clock_now_ms(self->clock);
    if (now >= self->next_heartbeat_ms) {
        s_heartbeat(self);
        self->next_heartbeat_ms = now + self->config.heartbeat_ms;
    }
    if (s_may_deliver(self))
        oq_engine_pump_many(self->engine, s_deliver, self);
    s_before_sleep(self);
    s_publish_metrics(self, oq_clock_now_ms(self->clock));
    return 0;
}

/* Sleep until the nearest of: a job deadline, the next heartbeat, the
   journal's next batch fsync or retry, the next rendering of the metrics,
   a wait's timeout, the next retry of replies kept for full pipes. */
static long s_timeout_ms(const oq_broker_t *self)
{
    int64_t now = oq_clock_now_ms(self->clock);
    int64_t wake = self->next_heartbeat_ms;
    int64_t deadline = oq_engine_next_deadline(self->engine);
    if (deadline >= 0 && deadline < wake)
        wake = deadline;
    deadline = self->journal ? oq_journal_next_deadline(self->journal) : -1;
    if (deadline >= 0 && deadline < wake)
        wake = deadline;
    if (self->metrics && self->next_metrics_ms < wake)
        wake = self->next_metrics_ms;
    deadline = oq_waiters_next_deadline(self->waiters);
    if (deadline >= 0 && deadline < wake)
        wake = deadline;
    if (oq_outbox_stats(self->outbox).kept && self->next_kept_retry_ms < wake)
        wake = self->next_kept_retry_ms;
    return wake > now ? (long)(wake - now) : 0;
}

int oq_broker_run(oq_broker_t *self)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    oq_info("serving: front %s, back %s, heartbeat %d ms x %d, %s", self->config.front_endpoint,
            self->config.back_endpoint, self->config.heartbeat_ms, self->config.liveness,
            self->keys ? "CURVE" : "PLAINTEXT (--insecure)");
    int rc = 0;
    while (!s_stop && rc == 0) {
        if (s_reload) {
            s_reload = 0;
            oq_broker_reload_keys(self);
        }
        rc = oq_broker_turn(self, s_timeout_ms(self));
    }
    if (self->journal && oq_journal_sync(self->journal) < 0)
        oq_error("stopping with journal records not durable: %s", oq_journal_error(self->journal));
    if (self->journal)
        oq_outbox_flush(self->outbox, oq_journal_durable(self->journal), s_outbox_send, self);
    else
        oq_outbox_flush(self->outbox, UINT64_MAX, s_outbox_send, self);
    oq_info("stopping: %zu job(s) held, %zu worker(s) connected", oq_engine_job_count(self->engine),
            oq_engine_worker_count(self->engine));
    return rc;
}

/* ---- batches ---------------------------------------------------------------------
   dispatch_batch is a dispatch of many: every job is decoded and checked
   before the engine sees any, the engine queues all or none, and the reply
   waits in the outbox until the batch's records are durable. batch is the
   admin's view (show, list) and cancel, journaled like cancel. */

static void s_dispatch_batch(oq_broker_t *self, const s_envelope_t *env, int64_t req,
                             const oq_msg_t *msg)
{
    if (!s_can_promise(self, env, req))
        return;
    size_t conns = self->conns ? oq_conns_count(self->conns) : 0;
    oq_engine_set_outside_bytes(self->engine,
                                (uint64_t)oq_waiters_count(self->waiters) * OQ_WAIT_COST_BYTES +
                                    (uint64_t)conns * OQ_PEER_COST_BYTES);
    uint32_t n = oq_proto_entry_count(msg);
    oq_job_msg_t *jobs = calloc(n + OQ_BATCH_CALLBACKS, sizeof *jobs);
    msgpack_sbuffer *payloads = calloc(n + OQ_BATCH_CALLBACKS, sizeof *payloads);
    char reason[512], why[400];
    oq_err_t code = OQ_ERR_INTERNAL;
    int rc = -1;
    uint32_t decoded = 0;
    snprintf(reason, sizeof reason, "out of memory decoding the batch");
    if (!jobs || !payloads)
        goto done;
    oq_batch_msg_t batch = {.jobs = jobs,
                            .count = n,
                            .allow_failures = msg->allow_failures,
                            .dispatch_id = msg->job.dispatch_id};
    static const char *const names[OQ_BATCH_CALLBACKS] = {"then", "catch", "finally"};
    for (; decoded < n + OQ_BATCH_CALLBACKS; decoded++) {
        bool callback = decoded >= n;
        const msgpack_object *map =
            callback ? msg->callbacks[decoded - n] : &msg->entries->via.array.ptr[decoded];
        if (!map)
            continue;
        if (oq_proto_decode_job_object(map, &jobs[decoded], &payloads[decoded], &code, why,
                                       sizeof why) < 0) {
            if (callback)
                snprintf(reason, sizeof reason, "the %s callback: %s", names[decoded - n], why);
            else
                snprintf(reason, sizeof reason, "job %u of the batch: %s", decoded, why);
            decoded++; /* its payload buffer is to be freed too */
            goto done;
        }
        if (callback)
            batch.callbacks[decoded - n] = &jobs[decoded];
    }
    uint64_t id = 0, first = 0;
    rc = oq_engine_dispatch_batch(self->engine, &batch, &id, &first, &code, reason, sizeof reason);
    if (rc == 0) {
        oq_proto_encode_batch_dispatched(&self->out, req, id, first, n);
        s_promise(self, env, req, s_appended(self));
    }
done:
    for (uint32_t i = 0; payloads && i < decoded; i++)
        msgpack_sbuffer_destroy(&payloads[i]);
    free(payloads);
    free(jobs);
    if (rc < 0)
        s_reply_error(self, self->front, env, req, code, reason);
}

static void s_batch(oq_broker_t *self, const s_envelope_t *env, int64_t req, const oq_msg_t *msg)
{
    char reason[256];
    oq_batch_view_t view;
    if (oq_str_eq(msg->name, "list")) {
        oq_batch_reply_list(&self->out, req, self->engine);
    } else if (oq_str_eq(msg->name, "show")) {
        if (oq_engine_batch_view(self->engine, msg->id, &view) < 0) {
            snprintf(reason, sizeof reason,
                     "batch %llu is not known: never dispatched, or settled and forgotten "
                     "(settled batches are remembered until %d newer ones settle, and not "
                     "across a restart)",
                     (unsigned long long)msg->id, OQ_RECENT_BATCHES);
            s_reply_error(self, self->front, env, req, OQ_ERR_NOT_FOUND, reason);
            return;
        }
        oq_batch_reply_one(&self->out, req, "show", &view, 0);
    } else {
        if (!s_can_promise(self, env, req))
            return;
        uint64_t withdrawn = 0;
        oq_refusal_t why;
        if (oq_engine_batch_cancel(self->engine, msg->id, &withdrawn, &why, reason, sizeof reason) <
            0) {
            s_reply_error(self, self->front, env, req, s_refusal_code(why), reason);
            return;
        }
        oq_engine_batch_view(self->engine, msg->id, &view);
        oq_batch_reply_one(&self->out, req, "cancel", &view, withdrawn);
        s_promise(self, env, req, s_appended(self));
        return;
    }
    if (s_reply(self, self->front, env) < 0)
        oq_debug("admin went away before its reply");
}

/* A dispatch with a chain: its links decoded and checked before the engine
   sees any; answered "dispatched" once durable (a chained dispatch takes
   no "wait"). */
static void s_dispatch_chain(oq_broker_t *self, const s_envelope_t *env, int64_t req,
                             const oq_msg_t *msg)
{
    if (!s_can_promise(self, env, req))
        return;
    uint32_t n = msg->chain ? msg->chain->via.array.size : 0;
    oq_job_msg_t links[OQ_MAX_CHAIN_LINKS + 1];
    msgpack_sbuffer payloads[OQ_MAX_CHAIN_LINKS + 1];
    char reason[512], why[400];
    oq_err_t code = OQ_ERR_INTERNAL;
    uint32_t decoded = 0;
    int rc = 0;
    for (; rc == 0 && decoded <= n; decoded++) {
        const msgpack_object *map =
            decoded < n ? &msg->chain->via.array.ptr[decoded] : msg->chain_catch;
        if (!map) {
            memset(&links[decoded], 0, sizeof links[decoded]);
            msgpack_sbuffer_init(&payloads[decoded]);
            continue;
        }
        rc = oq_proto_decode_job_object(map, &links[decoded], &payloads[decoded], &code, why,
                                        sizeof why);
        if (rc < 0 && decoded < n)
            snprintf(reason, sizeof reason, "link %u of the chain: %s", decoded + 1, why);
        else if (rc < 0)
            snprintf(reason, sizeof reason, "chain_catch: %s", why);
    }
    uint64_t id = 0;
    if (rc == 0)
        rc = oq_engine_dispatch_chain(self->engine, &msg->job, links, n,
                                      msg->chain_catch ? &links[n] : NULL, &id, &code, reason,
                                      sizeof reason);
    for (uint32_t i = 0; i < decoded; i++)
        msgpack_sbuffer_destroy(&payloads[i]);
    if (rc < 0) {
        s_reply_error(self, self->front, env, req, code, reason);
        return;
    }
    oq_proto_encode_dispatched(&self->out, req, id);
    s_promise(self, env, req, s_appended(self));
}

static void s_chain(oq_broker_t *self, const s_envelope_t *env, int64_t req, const oq_msg_t *msg)
{
    oq_chain_view_t view;
    if (oq_engine_chain_view(self->engine, msg->id, &view) < 0) {
        char reason[160];
        snprintf(reason, sizeof reason,
                 "job %llu holds no chain: not a chained job, or its chain has moved on or ended",
                 (unsigned long long)msg->id);
        s_reply_error(self, self->front, env, req, OQ_ERR_NOT_FOUND, reason);
        return;
    }
    oq_batch_reply_chain(&self->out, req, &view);
    if (s_reply(self, self->front, env) < 0)
        oq_debug("admin went away before its reply");
}
