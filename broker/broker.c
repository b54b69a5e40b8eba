/*  broker.c: the event loop around the engine, and the broker's setup.

    The walk of a message. Everything a peer sends passes the same parts,
    in this order:

      gate      gate.c: read whole without blocking; judged by its shape,
                its sender's key and role (the keys of gate_keys.c), its
                command's row, its fields; anything wrong is answered with
                an error on the socket it came from
      commands  commands.c: the row names the handler, and whether the
                answer waits for the journal (durable rows: refused
                "unavailable" first if the journal cannot take them)
      handler   front.c (producers), front_admin.c (the operator's
                stores), waits.c (waits) on the front; back.c (workers,
                with deliveries and heartbeats) on the back
      engine    engine.h: the change, reported to its observer
      journal   journal.h: the observer buffers the change's record
                (waits.c sits in front of it to answer waits on an end)
      outbox    outbox.h: the reply, held until its record is durable,
                sent "before sleep" (below) through the gate

    A dispatch walks gate -> commands -> front.c -> engine_dispatch.c ->
    journal -> outbox, and leaves in this file's s_before_sleep.

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
    their record ends at (front.c). At the end of the turn ("before sleep")
    the journal writes the turn's records in one write and, under --fsync
    always, makes them durable with one fsync; then the outbox sends every
    reply whose records are durable. However many producers dispatched in
    the turn, they share that fsync. Jobs are handed to workers before their
    record is durable: a job lost with an unwritten record was never
    confirmed.

    Lease tokens. Every delivery carries a token the worker's ack and
    touches must echo (fenced acks, engine_acks.c), bound to the CURVE key
    the worker's connection authenticated with: each message's key (its
    User-Id) goes to the engine with it, so a token replayed from another
    key proves nothing, and a worker that reconnects with its own key, or
    acks after a restart, is still itself. The broker's key is 128 random bits
    kept in the data dir (lease_key.h: OQ_LEASE_KEY_FILE, created 0600 and
    fsynced on the first start), so that a worker's late ack after a broker
    restart still counts; with --no-journal it is random per start.

    Authentication. With --keys both sockets are CURVE servers and the ZAP
    handler (auth.h) answers handshakes in this loop: a known key gets in,
    and libzmq stamps each of its messages with the key as User-Id. The
    gate judges every message at once by the keys in force now (keystore.h)
    and the roles column of the command table, so a key revoked by SIGHUP
    is refused from its next message on; a refused command is answered
    "forbidden". The first message of a connection also binds it to its
    role for the per-role connection limits (peers.h).

    Disk errors. While the journal cannot write, dispatches are refused with
    "unavailable" (naming the OS error), replies waiting in the outbox are
    answered "unavailable" at once (their records are not durable), and
    workers are served as usual: their acks only add records, which wait in
    memory until a write succeeds. On a full disk the journal frees its
    reserve and a compaction may run whatever its thresholds; dispatches are
    accepted again once the reserve is back, with no operator action.

    Waits. A producer may wait for a job to end ("wait", waits.c): the
    observer this file installs in front of the journal's answers a job's
    waiters once the journal has taken the record of its end, through the
    outbox like a dispatch, so an answer never says more than a restart
    would keep. */
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include <sys/random.h>

#include "broker_internal.h"
#include "lease_key.h"
#include "onceq/flags.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "replay.h"
#include "siphash.h"

/* front, back, a compaction's child while one runs, 2 monitors, the ZAP handler */
#define S_POLL_ITEMS 6

/* ---- setup ------------------------------------------------------------------------ */

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

/* ---- what the connections and the outbox tell the loop ------------------------------ */

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

/* ---- new and destroy ------------------------------------------------------------------ */

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
               oq_lease_key_load(config->journal.dir, lease_key, reason, reason_len) < 0) {
        oq_broker_destroy(&self);
        return NULL;
    }
    oq_engine_set_lease_key(self->engine, lease_key);
    /* After replay: the journal's observer, then the waits (waits.c). */
    oq_engine_hooks_t hooks = {.changed = oq_waits_changed,
                               .ctx = self,
                               .batch = oq_waits_batch_changed,
                               .chain = oq_waits_chain_changed};
    oq_engine_set_hooks(self->engine, &hooks);
    /* Callbacks that became due before the stop and were not dispatched
       yet: under their dispatch ids, so one that was is not again. */
    oq_engine_batches_settle(self->engine);
    oq_engine_chains_settle(self->engine);
    if (oq_gate_keys_start(self, reason, reason_len) < 0 ||
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

/* ---- before sleep: the journal, then the replies that waited on it ---------------- */

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
    oq_gate_send(self, self->front, identity, identity_len, -1, delimiter);
}

/* Replies kept for full pipes go again, at once while they go and less
   often while none does (libzmq says nothing when a pipe has room). */
static void s_retry_kept(oq_broker_t *self)
{
    if (!oq_outbox_stats(self->outbox).kept)
        return;
    int64_t now = oq_clock_now_ms(self->clock);
    size_t sent = oq_outbox_retry(self->outbox, oq_gate_outbox_send, self);
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
    oq_outbox_flush(self->outbox, durable, oq_gate_outbox_send, self);
    if (failing && oq_outbox_count(self->outbox)) {
        size_t n = oq_outbox_reject(self->outbox, s_outbox_reject, self);
        oq_warn("answered %zu waiting request(s) \"unavailable\": %s", n,
                oq_journal_error(self->journal));
    }
}

/* ---- the loop ---------------------------------------------------------------------- */

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
        oq_gate_drain(self, self->back);
    if (items[0].ready)
        oq_gate_drain(self, self->front);
    if (compact_at >= 0 && items[compact_at].ready)
        oq_compact_poll(self->compact);
    oq_engine_tick(self->engine);
    oq_waits_expire(self);
    int64_t now = oq_clock_now_ms(self->clock);
    if (now >= self->next_heartbeat_ms) {
        oq_back_beat(self);
        self->next_heartbeat_ms = now + self->config.heartbeat_ms;
    }
    if (s_may_deliver(self))
        oq_engine_pump_many(self->engine, oq_back_deliver, self);
    s_before_sleep(self);
    oq_report_publish_metrics(self, oq_clock_now_ms(self->clock));
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
        oq_outbox_flush(self->outbox, oq_journal_durable(self->journal), oq_gate_outbox_send, self);
    else
        oq_outbox_flush(self->outbox, UINT64_MAX, oq_gate_outbox_send, self);
    oq_info("stopping: %zu job(s) held, %zu worker(s) connected", oq_engine_job_count(self->engine),
            oq_engine_worker_count(self->engine));
    return rc;
}
