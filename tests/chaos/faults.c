/*  faults.c: faults fall due in schedule order and wait in a list until
    they can be done; each turn tries every waiting one. Victims are picked
    from a fresh stats reply (a worker that holds a job now, is a child of
    our supervisor and is not stopped), drawn from the victims stream of
    the seed. The broker lives in three states (up, down until its restart
    is due, starting until it answers a ping); everything that talks to it
    waits while it is not up. */
#include "faults.h"

#include <assert.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <zmq.h>

#include "chaos_limits.h"
#include "malformed.h"
#include "onceq/proto.h"
#include "rng.h"

#define S_MS_PER_S 1000.0

typedef enum { S_BROKER_UP = 0, S_BROKER_DOWN, S_BROKER_STARTING } s_broker_t;

typedef struct {
    pid_t pid;
    int64_t resume_ms; /* monotonic */
} s_paused_t;

typedef struct {
    const oq_fault_t *fault;
    int64_t since_ms; /* when it fell due (monotonic) */
} s_waiting_t;

struct oq_faults {
    const oq_chaos_config_t *config; /* all borrowed, down to verdict */
    const oq_schedule_t *schedule;
    oq_procs_t *procs; /* NULL in attach mode */
    oq_observe_t *observe;
    const oq_load_t *load;
    oq_verdict_t *verdict;
    const char *front, *back;      /* broker endpoints for the bursts; back may be NULL */
    const oq_curve_t *curve;       /* the keys the bursts speak with */
    oq_carrier_client_t *carrier;  /* NULL: no shipments in this run */
    oq_fault_kind_t carrier_fault; /* the carrier fault on now, or KIND_COUNT_ */
    int64_t carrier_until_ms;      /* when it ends (monotonic) */
    oq_rng_t victims, frames;      /* the seed's streams for victims and malformed frames */
    size_t next;                   /* the next fault of the schedule to fall due */
    s_waiting_t *waiting;          /* due and not done yet, in order of falling due */
    size_t waiting_count;
    s_paused_t *paused; /* stopped workers and when to resume them */
    size_t paused_count;
    s_broker_t broker;
    int64_t broker_ms;  /* DOWN: restart due; STARTING: give up */
    bool db_restarting; /* a pg.sh restart is running */
    int64_t start_ms;   /* the first tick, for the times printed */
    int64_t victim_ms;  /* the last look for a victim */
    int64_t *fired;     /* orders whose hook has fired */
    size_t fired_count, fired_cap;
    oq_kill_t *kills; /* every kill, for the redelivery times */
    size_t kill_count, kill_cap;
    oq_faults_counts_t counts;
    bool noted[OQ_FAULT_KIND_COUNT_]; /* a skip of this kind was explained */
};

oq_faults_t *oq_faults_new(const oq_chaos_config_t *config, const oq_schedule_t *schedule,
                           oq_procs_t *procs, oq_observe_t *observe, const oq_load_t *load,
                           oq_verdict_t *verdict, const char *front, const char *back,
                           const oq_curve_t *curve, oq_carrier_client_t *carrier)
{
    assert(config && schedule && observe && load && verdict && front);
    oq_faults_t *self = calloc(1, sizeof *self);
    assert(self);
    self->config = config;
    self->schedule = schedule;
    self->procs = procs;
    self->observe = observe;
    self->load = load;
    self->verdict = verdict;
    self->front = front;
    self->back = back;
    self->curve = curve;
    self->carrier = carrier;
    self->carrier_fault = OQ_FAULT_KIND_COUNT_;
    size_t n = oq_schedule_count(schedule);
    self->waiting = calloc(n ? n : 1, sizeof *self->waiting);
    self->paused = calloc(n ? n : 1, sizeof *self->paused);
    assert(self->waiting && self->paused);
    oq_rng_seed(&self->victims, config->seed, OQ_RNG_VICTIMS);
    oq_rng_seed(&self->frames, config->seed, OQ_RNG_FRAMES);
    return self;
}

void oq_faults_destroy(oq_faults_t **self_p)
{
    assert(self_p);
    oq_faults_t *self = *self_p;
    if (!self)
        return;
    free(self->waiting);
    free(self->paused);
    free(self->fired);
    free(self->kills);
    free(self);
    *self_p = NULL;
}

/* ---- bookkeeping ------------------------------------------------------ */

static int64_t s_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One line per fault as it happens, with the time since the first tick. */
static void s_say(const oq_faults_t *self, const char *what, pid_t pid)
{
    double at_s = (double)(s_mono_ms() - self->start_ms) / S_MS_PER_S;
    if (pid > 0)
        printf("  [%7.2f s] %s (pid %d)\n", at_s, what, (int)pid);
    else
        printf("  [%7.2f s] %s\n", at_s, what);
    fflush(stdout);
}

static void s_skip(oq_faults_t *self, oq_fault_kind_t kind, const char *why)
{
    self->counts.skipped[kind]++;
    if (!self->noted[kind]) {
        self->noted[kind] = true;
        oq_verdict_note(self->verdict, "skipped %s: %s", oq_schedule_kind_name(kind), why);
    }
}

static void s_record_kill(oq_faults_t *self, oq_fault_kind_t kind, pid_t pid, int64_t t_ms,
                          uint64_t job_id)
{
    if (self->kill_count == self->kill_cap) {
        size_t cap = self->kill_cap ? 2 * self->kill_cap : 64;
        oq_kill_t *grown = realloc(self->kills, cap * sizeof *grown);
        if (!grown)
            return;
        self->kills = grown;
        self->kill_cap = cap;
    }
    self->kills[self->kill_count++] = (oq_kill_t){kind, pid, t_ms, job_id};
}

static bool s_fired(const oq_faults_t *self, int64_t order_id)
{
    for (size_t i = 0; i < self->fired_count; i++)
        if (self->fired[i] == order_id)
            return true;
    return false;
}

static void s_mark_fired(oq_faults_t *self, int64_t order_id)
{
    if (self->fired_count == self->fired_cap) {
        size_t cap = self->fired_cap ? 2 * self->fired_cap : 64;
        int64_t *grown = realloc(self->fired, cap * sizeof *grown);
        if (!grown)
            return;
        self->fired = grown;
        self->fired_cap = cap;
    }
    self->fired[self->fired_count++] = order_id;
}

static bool s_is_paused(const oq_faults_t *self, pid_t pid)
{
    for (size_t i = 0; i < self->paused_count; i++)
        if (self->paused[i].pid == pid)
            return true;
    return false;
}

/* ---- victims ---------------------------------------------------------- */

/* A worker of ours holding a job now, drawn at random; 0 if none, or if
   the last look was too recent (several faults waiting for a victim share
   one stats request per OQ_CHAOS_VICTIM_POLL_MS). */
static pid_t s_victim(oq_faults_t *self)
{
    int64_t now_ms = s_mono_ms();
    if (now_ms - self->victim_ms < OQ_CHAOS_VICTIM_POLL_MS)
        return 0;
    self->victim_ms = now_ms;
    oq_observe_stats_t *stats = malloc(sizeof *stats);
    assert(stats);
    pid_t found = 0;
    if (oq_observe_stats(self->observe, stats) == 0) {
        pid_t candidates[OQ_CHAOS_MAX_WORKERS];
        size_t n = 0;
        for (size_t i = 0; i < stats->workers; i++) {
            pid_t pid = (pid_t)stats->worker[i].pid;
            if (stats->worker[i].leased > 0 && !s_is_paused(self, pid) &&
                oq_procs_owns_worker(self->procs, pid))
                candidates[n++] = pid;
        }
        if (n > 0)
            found = candidates[oq_rng_below(&self->victims, n)];
    }
    free(stats);
    return found;
}

/* ---- the injectors: 0 done (or skipped), 1 not yet ---------------------- */

static int s_kill(oq_faults_t *self)
{
    pid_t pid = s_victim(self);
    if (!pid)
        return 1;
    int64_t t_ms = oq_worklog_now_ms();
    if (oq_procs_signal_worker(self->procs, pid, SIGKILL) < 0)
        return 1; /* it went away between stats and kill: another one */
    s_record_kill(self, OQ_FAULT_KILL, pid, t_ms, 0);
    self->counts.injected[OQ_FAULT_KILL]++;
    s_say(self, "SIGKILL worker holding a job", pid);
    return 0;
}

static int s_pause(oq_faults_t *self, int64_t now_ms)
{
    pid_t pid = s_victim(self);
    if (!pid)
        return 1;
    if (oq_procs_signal_worker(self->procs, pid, SIGSTOP) < 0)
        return 1;
    uint32_t pause_ms = self->config->pause_ms;
    self->paused[self->paused_count++] = (s_paused_t){pid, now_ms + pause_ms};
    self->counts.injected[OQ_FAULT_PAUSE]++;
    char what[96];
    snprintf(what, sizeof what, "SIGSTOP worker holding a job, for %.1f s", pause_ms / S_MS_PER_S);
    s_say(self, what, pid);
    return 0;
}

static int s_broker_kill(oq_faults_t *self, int64_t now_ms)
{
    if (!oq_procs_broker_durable(self->procs)) {
        s_skip(self, OQ_FAULT_BROKER_KILL,
               "this onceq-broker has no journal (no --data-dir in its --help): a restart "
               "would lose its jobs by design");
        return 0;
    }
    if (self->broker != S_BROKER_UP)
        return 1;
    oq_procs_kill_broker(self->procs);
    self->broker = S_BROKER_DOWN;
    self->broker_ms = now_ms + self->config->broker_down_ms;
    self->counts.injected[OQ_FAULT_BROKER_KILL]++;
    s_say(self, "SIGKILL broker", 0);
    return 0;
}

static int s_db_restart(oq_faults_t *self, oq_fault_kind_t kind)
{
    if (self->config->database) {
        s_skip(self, kind, "the database is not ours (--database or ONCEQ_DATABASE_URL)");
        return 0;
    }
    if (self->db_restarting)
        return 1;
    bool immediate = kind == OQ_FAULT_DB_IMMEDIATE;
    if (oq_procs_restart_pg(self->procs, immediate) < 0)
        return 1;
    self->db_restarting = true;
    self->counts.injected[kind]++;
    s_say(self, immediate ? "restart PostgreSQL (immediate)" : "restart PostgreSQL (fast)", 0);
    return 0;
}

/* Send one malformed message on sock; 0 or -1. */
static int s_send_malformed(oq_faults_t *self, void *sock, oq_malformed_socket_t which,
                            msgpack_sbuffer *buf)
{
    size_t split;
    oq_malformed_make(&self->frames, which, buf, &split);
    if (split > 0) {
        if (zmq_send(sock, buf->data, split, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0)
            return -1;
        return zmq_send(sock, buf->data + split, buf->size - split, ZMQ_DONTWAIT) < 0 ? -1 : 0;
    }
    return zmq_send(sock, buf->data, buf->size, ZMQ_DONTWAIT) < 0 ? -1 : 0;
}

/* Read answers on the burst's sockets until `expected` came or
   OQ_CHAOS_CALL_MS passed; how many came. A message of several frames
   counts once. */
static uint32_t s_drain_answers(void *front, void *back, uint32_t expected)
{
    zmq_pollitem_t items[2] = {{front, 0, ZMQ_POLLIN, 0}, {back, 0, ZMQ_POLLIN, 0}};
    int count = back ? 2 : 1;
    uint32_t answered = 0;
    int64_t end_ms = s_mono_ms() + OQ_CHAOS_CALL_MS;
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    while (answered < expected) {
        int64_t left_ms = end_ms - s_mono_ms();
        if (left_ms <= 0 || zmq_poll(items, count, (long)left_ms) <= 0)
            break;
        for (int i = 0; i < count; i++) {
            while (zmq_msg_recv(&frame, items[i].socket, ZMQ_DONTWAIT) >= 0)
                answered += !zmq_msg_more(&frame);
        }
    }
    zmq_msg_close(&frame);
    return answered;
}

/* A DEALER to endpoint: with the run's keys (as=1 front, 2 back), with a
   key the broker never heard of (as=3), or plaintext (as=0). */
static void *s_dealer(oq_faults_t *self, void *ctx, const char *endpoint, int as)
{
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    int linger_ms = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    if (as == 1 || as == 2) {
        oq_curve_apply(self->curve, sock, as == 2);
    } else if (as == 3) {
        oq_keypair_t stranger;
        oq_keys_generate(&stranger);
        zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, self->curve->broker, OQ_KEY_Z85_LEN);
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, stranger.public_z85, OQ_KEY_Z85_LEN);
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, stranger.secret_z85, OQ_KEY_Z85_LEN);
    }
    zmq_connect(sock, endpoint);
    return sock;
}

/* With CURVE, a burst also sends a ping from a plaintext peer and from a
   key the broker does not know; neither may ever get an answer. Called
   after the burst's own ping came back, so that both pings had time to
   arrive. The count of answers that came. */
static uint32_t s_stranger_answers(void *strangers[2])
{
    uint32_t answers = 0;
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    for (int i = 0; i < 2; i++)
        while (zmq_msg_recv(&frame, strangers[i], ZMQ_DONTWAIT) >= 0)
            answers += !zmq_msg_more(&frame);
    zmq_msg_close(&frame);
    return answers;
}

static int s_burst(oq_faults_t *self)
{
    if (self->broker != S_BROKER_UP)
        return 1;
    void *ctx = zmq_ctx_new();
    void *front = s_dealer(self, ctx, self->front, 1);
    void *back = self->back ? s_dealer(self, ctx, self->back, 2) : NULL;
    void *strangers[2] = {NULL, NULL};
    if (self->curve->on) {
        msgpack_sbuffer ping;
        msgpack_sbuffer_init(&ping);
        oq_proto_encode_simple(&ping, OQ_CMD_PING, 1);
        for (int i = 0; i < 2; i++) {
            strangers[i] = s_dealer(self, ctx, self->front, i == 0 ? 0 : 3);
            zmq_send(strangers[i], ping.data, ping.size, ZMQ_DONTWAIT);
        }
        msgpack_sbuffer_destroy(&ping);
    }
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    uint32_t sent = 0;
    for (uint32_t i = 0; i < self->config->burst_frames; i++) {
        sent += s_send_malformed(self, front, OQ_MALFORMED_FRONT, &buf) == 0;
        if (back)
            sent += s_send_malformed(self, back, OQ_MALFORMED_BACK, &buf) == 0;
    }
    msgpack_sbuffer_destroy(&buf);
    /* The broker answers each of them (an error; a "reconnect" to a
       heartbeat from a stranger): reading the answers shows that the burst
       has arrived, so that the ping below comes after it, not before. */
    uint32_t answered = s_drain_answers(front, back, sent);
    int pong = oq_observe_ping(self->observe, OQ_CHAOS_CALL_MS);
    uint32_t stranger_answers = strangers[0] ? s_stranger_answers(strangers) : 0;
    zmq_close(front);
    if (back)
        zmq_close(back);
    for (int i = 0; i < 2; i++)
        if (strangers[i])
            zmq_close(strangers[i]);
    zmq_ctx_term(ctx);
    self->counts.injected[OQ_FAULT_BURST]++;
    self->counts.burst_frames += sent;
    self->counts.burst_answers += answered;
    self->counts.strangers += strangers[0] ? 2 : 0;
    self->counts.stranger_answers += stranger_answers;
    if (stranger_answers)
        oq_verdict_violation(self->verdict,
                             "a peer without an allowed key got %u answer(s) from the broker",
                             stranger_answers);
    char what[128];
    snprintf(what, sizeof what, "burst of %u malformed messages to %s, %u answered", sent,
             back ? "both sockets" : "the front socket (no --back)", answered);
    s_say(self, what, 0);
    if (pong < 0)
        oq_verdict_violation(self->verdict,
                             "the broker did not answer a ping within %d ms after a burst of %u "
                             "malformed frames",
                             OQ_CHAOS_CALL_MS, sent);
    return 0;
}

/* The carrier's fault settings all through the run, with a burst's
   changes. 0 or -1 (with a note). */
static int s_carrier_settings(oq_faults_t *self, double error_rate, uint32_t delay_ms)
{
    if (oq_carrier_client_set_faults(self->carrier, error_rate, self->config->carrier_drop_rate,
                                     delay_ms) == 0)
        return 0;
    oq_verdict_note(self->verdict, "the carrier's faults could not be set: %s",
                    oq_carrier_client_error(self->carrier));
    return -1;
}

static int s_carrier_fault(oq_faults_t *self, oq_fault_kind_t kind, int64_t now_ms)
{
    const oq_chaos_config_t *c = self->config;
    if (!self->carrier) {
        s_skip(self, kind,
               "no carrier in this run (--no-carrier, or attached without "
               "--carrier-url)");
        return 0;
    }
    if (kind == OQ_FAULT_CARRIER_DELAY && c->job_timeout_s <= 0) {
        s_skip(self, kind, "the jobs' timeout is their queue's default: give --job-timeout");
        return 0;
    }
    if (self->carrier_fault != OQ_FAULT_KIND_COUNT_ || self->broker != S_BROKER_UP)
        return 1;
    char what[128];
    if (kind == OQ_FAULT_CARRIER_STALL) {
        if (oq_procs_signal_carrier(self->procs, SIGSTOP) < 0)
            return 1;
        snprintf(what, sizeof what, "SIGSTOP the carrier for %.1f s",
                 c->carrier_fault_ms / S_MS_PER_S);
    } else if (kind == OQ_FAULT_CARRIER_ERRORS) {
        if (s_carrier_settings(self, 1.0, 0) < 0)
            return 1;
        snprintf(what, sizeof what, "the carrier answers every POST 503 for %.1f s",
                 c->carrier_fault_ms / S_MS_PER_S);
    } else {
        uint32_t delay_ms =
            (uint32_t)(c->job_timeout_s * S_MS_PER_S) + OQ_CHAOS_CARRIER_DELAY_BEYOND_MS;
        if (s_carrier_settings(self, c->carrier_error_rate, delay_ms) < 0)
            return 1;
        snprintf(what, sizeof what, "the carrier delays every reply %u ms, for %.1f s", delay_ms,
                 c->carrier_fault_ms / S_MS_PER_S);
    }
    self->carrier_fault = kind;
    self->carrier_until_ms = now_ms + c->carrier_fault_ms;
    self->counts.injected[kind]++;
    s_say(self, what, 0);
    return 0;
}

/* End the carrier fault that is on, when its time has come (or now). */
static void s_carrier_background(oq_faults_t *self, int64_t now_ms, bool now)
{
    if (self->procs && self->carrier && oq_procs_carrier_died(self->procs))
        oq_verdict_violation(self->verdict, "the carrier exited on its own (see carrier.log)");
    if (self->carrier_fault == OQ_FAULT_KIND_COUNT_ || (!now && now_ms < self->carrier_until_ms))
        return;
    if (self->carrier_fault == OQ_FAULT_CARRIER_STALL) {
        oq_procs_signal_carrier(self->procs, SIGCONT);
        s_say(self, "SIGCONT the carrier", 0);
    } else {
        s_carrier_settings(self, self->config->carrier_error_rate, 0);
        s_say(self, "the carrier's burst is over", 0);
    }
    self->carrier_fault = OQ_FAULT_KIND_COUNT_;
}

static int s_try(oq_faults_t *self, const oq_fault_t *fault, int64_t now_ms)
{
    bool process_fault = fault->kind != OQ_FAULT_BURST && fault->kind != OQ_FAULT_CARRIER_ERRORS &&
                         fault->kind != OQ_FAULT_CARRIER_DELAY;
    if (process_fault && !self->procs) {
        s_skip(self, fault->kind, "attach mode: the processes are not ours to kill or stop");
        return 0;
    }
    switch (fault->kind) {
    case OQ_FAULT_KILL:
        return self->broker == S_BROKER_UP ? s_kill(self) : 1;
    case OQ_FAULT_PAUSE:
        return self->broker == S_BROKER_UP ? s_pause(self, now_ms) : 1;
    case OQ_FAULT_BROKER_KILL:
        return s_broker_kill(self, now_ms);
    case OQ_FAULT_DB_FAST:
    case OQ_FAULT_DB_IMMEDIATE:
        return s_db_restart(self, fault->kind);
    case OQ_FAULT_BURST:
        return s_burst(self);
    case OQ_FAULT_CARRIER_STALL:
    case OQ_FAULT_CARRIER_ERRORS:
    case OQ_FAULT_CARRIER_DELAY:
        return s_carrier_fault(self, fault->kind, now_ms);
    case OQ_FAULT_COMMIT_KILL:
    case OQ_FAULT_SELF_KILL:
        return 0; /* carried by their orders; see oq_faults_on_log */
    case OQ_FAULT_KIND_COUNT_:
        break;
    }
    assert(false);
    return 0;
}

/* ---- the background --------------------------------------------------- */

static void s_resume(oq_faults_t *self, int64_t now_ms, bool all)
{
    for (size_t i = 0; i < self->paused_count;) {
        s_paused_t *p = &self->paused[i];
        if (all || now_ms >= p->resume_ms) {
            if (oq_procs_signal_worker(self->procs, p->pid, SIGCONT) == 0)
                s_say(self, "SIGCONT worker", p->pid);
            *p = self->paused[--self->paused_count];
            continue;
        }
        i++;
    }
}

static int s_broker_background(oq_faults_t *self, int64_t now_ms)
{
    int status;
    if (self->broker == S_BROKER_UP && oq_procs_broker_died(self->procs, &status)) {
        oq_verdict_violation(
            self->verdict, "the broker exited on its own (wait status %d); started again", status);
        self->broker = S_BROKER_DOWN;
        self->broker_ms = now_ms;
    }
    if (self->broker == S_BROKER_DOWN && now_ms >= self->broker_ms) {
        if (oq_procs_start_broker(self->procs) < 0)
            return -1;
        self->broker = S_BROKER_STARTING;
        self->broker_ms = now_ms + OQ_CHAOS_BROKER_UP_MS;
        s_say(self, "start the broker again on the same journal", 0);
    }
    if (self->broker == S_BROKER_STARTING) {
        if (oq_observe_ping(self->observe, OQ_CHAOS_PING_MS) == 0) {
            self->broker = S_BROKER_UP;
            s_say(self, "broker answers again", 0);
        } else if (oq_procs_broker_died(self->procs, &status) || now_ms >= self->broker_ms) {
            oq_verdict_violation(self->verdict,
                                 "the broker did not come back within %d ms after a restart on "
                                 "its journal (see broker.log)",
                                 OQ_CHAOS_BROKER_UP_MS);
            return -1;
        }
    }
    return 0;
}

static void s_db_background(oq_faults_t *self)
{
    int status = 0;
    if (!self->db_restarting || oq_procs_pg_restarting(self->procs, &status))
        return;
    self->db_restarting = false;
    if (status != 0)
        oq_verdict_note(self->verdict, "pg.sh restart ended with status %d (see pg.log)", status);
    s_say(self, "PostgreSQL is back", 0);
}

int oq_faults_tick(oq_faults_t *self, int64_t now_ms, uint32_t sent)
{
    if (!self->start_ms)
        self->start_ms = now_ms;
    if (self->procs) {
        s_resume(self, now_ms, false);
        if (s_broker_background(self, now_ms) < 0)
            return -1;
        s_db_background(self);
    }
    s_carrier_background(self, now_ms, false);
    size_t total = oq_schedule_count(self->schedule);
    while (self->next < total && oq_schedule_get(self->schedule, self->next)->at < sent) {
        self->waiting[self->waiting_count++] =
            (s_waiting_t){oq_schedule_get(self->schedule, self->next), now_ms};
        self->next++;
    }
    /* In order of falling due; one that is not possible yet keeps its place. */
    size_t kept = 0;
    for (size_t i = 0; i < self->waiting_count; i++) {
        s_waiting_t w = self->waiting[i];
        int rc = s_try(self, w.fault, now_ms);
        if (rc == 1 && (w.fault->kind == OQ_FAULT_KILL || w.fault->kind == OQ_FAULT_PAUSE) &&
            now_ms - w.since_ms > OQ_CHAOS_VICTIM_WAIT_MS) {
            s_skip(self, w.fault->kind, "no worker of ours held a job for a while");
            rc = 0;
        }
        if (rc == 1)
            self->waiting[kept++] = w;
    }
    self->waiting_count = kept;
    return 0;
}

void oq_faults_on_log(void *ctx, const oq_worklog_event_t *event)
{
    oq_faults_t *self = ctx;
    const oq_order_t *order = oq_load_find(self->load, event->order_id);
    if (!order || s_fired(self, event->order_id))
        return;
    if (event->kind == OQ_WORKLOG_PAUSED_AFTER_COMMIT && order->hook == OQ_FAULT_COMMIT_KILL) {
        if (!self->procs)
            return;
        int64_t t_ms = oq_worklog_now_ms();
        if (oq_procs_signal_worker(self->procs, event->pid, SIGKILL) < 0)
            return; /* gone already, or not ours: counted as missed at the end */
        s_mark_fired(self, event->order_id);
        s_record_kill(self, OQ_FAULT_COMMIT_KILL, event->pid, t_ms, event->job_id);
        self->counts.injected[OQ_FAULT_COMMIT_KILL]++;
        s_say(self, "SIGKILL worker between COMMIT and ack", event->pid);
    } else if (event->kind == OQ_WORKLOG_SELF_KILLED && order->hook == OQ_FAULT_SELF_KILL) {
        s_mark_fired(self, event->order_id);
        s_record_kill(self, OQ_FAULT_SELF_KILL, event->pid, event->t_ms, event->job_id);
        self->counts.injected[OQ_FAULT_SELF_KILL]++;
        s_say(self, "worker SIGKILLed itself after COMMIT (hook)", event->pid);
    }
}

bool oq_faults_busy(const oq_faults_t *self)
{
    return self->next < oq_schedule_count(self->schedule) || self->waiting_count > 0 ||
           self->paused_count > 0 || self->broker != S_BROKER_UP || self->db_restarting ||
           self->carrier_fault != OQ_FAULT_KIND_COUNT_;
}

bool oq_faults_broker_up(const oq_faults_t *self)
{
    return self->broker == S_BROKER_UP;
}

int oq_faults_close(oq_faults_t *self)
{
    int rc = 0;
    if (self->procs)
        s_resume(self, s_mono_ms(), true);
    s_carrier_background(self, s_mono_ms(), true);
    for (size_t i = 0; i < self->waiting_count; i++)
        s_skip(self, self->waiting[i].fault->kind, "the run ended before it could be done");
    self->waiting_count = 0;
    oq_fault_kind_t hooks[] = {OQ_FAULT_COMMIT_KILL, OQ_FAULT_SELF_KILL};
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        uint32_t planned = oq_schedule_count_of(self->schedule, hooks[i]);
        uint32_t done = self->counts.injected[hooks[i]] + self->counts.skipped[hooks[i]];
        self->counts.missed[hooks[i]] = planned > done ? planned - done : 0;
    }
    if (self->broker != S_BROKER_UP || self->db_restarting)
        rc = -1;
    return rc;
}

void oq_faults_counts(const oq_faults_t *self, oq_faults_counts_t *counts)
{
    *counts = self->counts;
}

size_t oq_faults_kills(const oq_faults_t *self, const oq_kill_t **kills)
{
    *kills = self->kills;
    return self->kill_count;
}
