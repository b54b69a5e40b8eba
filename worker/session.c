/*  session.c: the worker's protocol state machine (see session.h). Events
    change the state through s_set_link and s_set_job only, and queue actions
    for the worker loop to carry out. Nothing here blocks, reads the clock or
    does I/O beyond logging. */
#include "session.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/limits.h"
#include "onceq/log.h"
#include "prefetch.h"
#include "worker_limits.h"

/* Acks one session may owe at once: one per job it held or ran, and as
   many again for deliveries refused (a broker that sent more than the
   credit) before the broker was heard from. */
#define S_ACKS_MAX (2 * OQ_WORKER_PREFETCH_MAX + 2)

/* Actions one event can queue: a connect that resends every ack owed, or a
   job that ends and hands back each held job (an ack and a drop each),
   plus the few sends around them; the rest is headroom. */
#define S_ACTIONS_MAX (16 + 2 * S_ACKS_MAX)

typedef enum {
    S_JOB_IDLE,    /* no job: credit 1 is out (unless stopping or paused) */
    S_JOB_RUNNING, /* one job (or batch) in its handler */
    S_JOB_PROBING, /* paused: a probe of what the handler needs runs */
} s_job_t;

typedef enum {
    S_ACK_NONE, /* nothing owed */
    S_ACK_OWED, /* made but not sent on the current link */
    S_ACK_SENT, /* sent, but the broker has not been heard from since */
} s_ack_t;

/* One ack owed to the broker. */
typedef struct {
    s_ack_t state;
    bool returns_credit; /* false for a delivery refused, a held job handed back
                            while stopping or paused, or a credit kept back
                            because the limit shrank */
    oq_ack_msg_t ack;    /* credit is filled in when it is sent */
    char error[OQ_MAX_ERROR_LEN + 1];
} s_owed_t;

/* A delivery held while another job runs, or running: what it takes to
   start it, ack it, or hand it back, and the job itself, the worker's. */
typedef struct {
    oq_runner_job_t *job; /* given back in START_JOB or DROP_HELD; never read here */
    uint64_t id;
    uint32_t attempt;
    uint64_t lease;
    bool has_lease;
    char type[OQ_MAX_NAME_LEN + 1];
    int64_t timeout_ms;
    int64_t delivered_ms; /* its lease runs from here */
} s_held_t;

struct oq_session {
    oq_link_state_t link;
    s_job_t job;
    uint32_t heartbeat_ms; /* ours until welcome, then the broker's */
    uint32_t liveness;     /* likewise */
    int64_t heard_ms;      /* last message from the broker, or the link's start */
    int64_t sent_ms;       /* last message to the broker */
    int64_t reconnect_ms;  /* link down: when to open the next socket */
    int64_t backoff_ms;    /* delay before the reconnect after the next loss */
    bool draining;         /* stopping: take no job, offer no credit */
    bool exiting;          /* exit queued: every later event is ignored */

    /* Paused: a handler reported unavailable (its database is down). */
    bool unavailable;
    int64_t state_since_ms;                       /* when the worker became ready or unavailable */
    char unavailable_error[OQ_MAX_ERROR_LEN + 1]; /* the report, then the last probe's */
    char probe_type[OQ_MAX_NAME_LEN + 1];         /* whose resource to probe */
    int64_t probe_pause_ms;                       /* before jitter, for the next probe */
    int64_t probe_at_ms;                          /* when the next probe is due */
    uint32_t probes;                              /* failed probes in this outage */
    uint64_t random;                              /* xorshift64 state for the jitter */

    /* Idle release: resources are let go once per idle period. */
    int64_t idle_release_ms; /* 0: never */
    int64_t idle_since_ms;   /* the last job (or probe) ended */
    bool released;           /* nothing was opened since the last release */

    /* The jobs in the handler, as the watchdog, acks and the log need
       them: one, or a batch of one type (each with its token, echoed in
       its ack and touches), until the last of them is reported. */
    s_held_t run[OQ_WORKER_PREFETCH_MAX];
    size_t run_count;
    oq_runner_job_t *started[OQ_WORKER_PREFETCH_MAX]; /* START_JOB's jobs, in order */
    int64_t touched_ms;                               /* last touch sent for them */
    int64_t job_timeout_ms;                           /* the smallest timeout among them */
    int64_t job_started_ms;
    int64_t job_deadline_ms; /* moved on by stalls */

    /* Batches: the types with a batch function and the most jobs each
       takes per call, already capped by --batch. */
    struct {
        char type[OQ_MAX_NAME_LEN + 1];
        size_t max_jobs;
    } batch[OQ_MAX_WORKER_TYPES];
    size_t batch_types;
    uint32_t batch_cap; /* --batch: 1 is off */

    /* Held deliveries, oldest first, each with its job: the worker's only
       store of them (START_JOB held and DROP_HELD take the oldest). */
    uint32_t prefetch;        /* running + held never exceeds it */
    oq_prefetch_t *estimator; /* --prefetch auto: the limit; NULL: the limit is prefetch */
    /* The credit the broker holds for this worker, as far as it knows:
       what its ready and acks gave on this link, less what was delivered
       since (none after a registration, a pause or a drain, which the
       broker clears). The jobs running, held and owed acks that give
       credit back, and this, are the credit in circulation, which the
       acks and readies keep at the limit. */
    uint32_t credit_out;
    s_held_t held[OQ_WORKER_PREFETCH_MAX];
    size_t held_head, held_count;

    /* The acks owed, in no order (acks are matched by id and lease). */
    s_owed_t acks[S_ACKS_MAX];

    oq_action_t actions[S_ACTIONS_MAX]; /* ring of queued actions */
    size_t action_head, action_count;
};

static int64_t s_min(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* ---- state transitions -------------------------------------------------- */

/* Every change of the link goes through here: DOWN -> REGISTERING (a new
   socket), REGISTERING -> UP (welcome), UP -> REGISTERING (the broker asked
   for a new ready), REGISTERING or UP -> DOWN (lost). */
static void s_set_link(oq_session_t *self, oq_link_state_t to)
{
    switch (to) {
    case OQ_LINK_DOWN:
        assert(self->link != OQ_LINK_DOWN);
        break;
    case OQ_LINK_REGISTERING:
        assert(self->link != OQ_LINK_REGISTERING);
        break;
    case OQ_LINK_UP:
        assert(self->link == OQ_LINK_REGISTERING);
        break;
    }
    self->link = to;
}

/* IDLE -> RUNNING on a delivery, RUNNING -> IDLE on the handler's report;
   IDLE -> PROBING when a paused worker's probe is due, PROBING -> IDLE on
   its answer. (A job that overran is never idle again: the process exits.) */
static void s_set_job(oq_session_t *self, s_job_t to)
{
    switch (to) {
    case S_JOB_IDLE:
        assert(self->job != S_JOB_IDLE);
        break;
    case S_JOB_RUNNING:
    case S_JOB_PROBING:
        assert(self->job == S_JOB_IDLE);
        break;
    }
    self->job = to;
}

/* ---- actions ------------------------------------------------------------ */

static oq_action_t *s_push(oq_session_t *self, oq_action_kind_t kind)
{
    assert(self->action_count < S_ACTIONS_MAX);
    oq_action_t *action =
        &self->actions[(self->action_head + self->action_count++) % S_ACTIONS_MAX];
    memset(action, 0, sizeof *action);
    action->kind = kind;
    return action;
}

static void s_send(oq_session_t *self, oq_cmd_t cmd, int64_t now_ms)
{
    s_push(self, OQ_ACTION_SEND)->cmd = cmd;
    self->sent_ms = now_ms;
}

/* Jobs the worker may have at once now: the prefetch, or what the
   estimator allows. */
static uint32_t s_limit(const oq_session_t *self)
{
    return self->estimator ? oq_prefetch_limit(self->estimator) : self->prefetch;
}

/* The worker's own part of the credit in circulation: jobs running (each
   of a batch) and held, and acks owed that will give credit back. */
static size_t s_used(const oq_session_t *self)
{
    size_t used = (self->job == S_JOB_RUNNING ? self->run_count : 0) + self->held_count;
    for (size_t i = 0; i < S_ACKS_MAX; i++)
        used += self->acks[i].state == S_ACK_OWED && self->acks[i].returns_credit;
    return used;
}

/* Whether a slot the worker gives up (a job acked, a held job handed back)
   may have its credit given back: only while the rest in circulation is
   below the limit. So a limit that shrank takes effect as slots free up. */
static bool s_credit_back(const oq_session_t *self)
{
    return s_used(self) + self->credit_out < s_limit(self);
}

/* The credit a ready offers: the jobs of the limit the worker neither
   runs nor holds, nor will get back from an ack still to be sent; none
   while stopping or paused (or probing, which only a paused worker does).
   Only where the broker holds no credit for it (a new registration, after
   a pause). */
static uint32_t s_free_credit(const oq_session_t *self)
{
    if (self->draining || self->unavailable || self->job == S_JOB_PROBING)
        return 0;
    size_t used = s_used(self);
    return used < s_limit(self) ? (uint32_t)(s_limit(self) - used) : 0;
}

static void s_send_ready_credit(oq_session_t *self, uint32_t credit, int64_t now_ms)
{
    oq_action_t *action = s_push(self, OQ_ACTION_SEND);
    action->cmd = OQ_CMD_READY;
    action->credit = credit;
    self->credit_out += credit;
    self->sent_ms = now_ms;
}

static void s_send_ready(oq_session_t *self, int64_t now_ms)
{
    s_send_ready_credit(self, s_free_credit(self), now_ms);
}

/* After a job ends: the credit that brings the circulation up to the limit
   (a limit that grew, credits kept back behind a long job), if any. */
static void s_top_up(oq_session_t *self, int64_t now_ms)
{
    if (self->link != OQ_LINK_UP || self->draining || self->unavailable)
        return;
    size_t circulating = s_used(self) + self->credit_out;
    if (circulating < s_limit(self))
        s_send_ready_credit(self, (uint32_t)(s_limit(self) - circulating), now_ms);
}

static void s_send_ack(oq_session_t *self, s_owed_t *owed, int64_t now_ms)
{
    assert(owed->state != S_ACK_NONE);
    oq_action_t *action = s_push(self, OQ_ACTION_SEND);
    action->cmd = OQ_CMD_ACK;
    action->ack = owed->ack;
    action->ack.credit = owed->returns_credit && !self->draining && !self->unavailable ? 1 : 0;
    self->credit_out += action->ack.credit;
    action->ack.error = oq_str(owed->error);
    owed->state = S_ACK_SENT;
    self->sent_ms = now_ms;
}

/* Send every ack still owed (on a link that just opened). */
static void s_send_owed(oq_session_t *self, int64_t now_ms)
{
    for (size_t i = 0; i < S_ACKS_MAX; i++)
        if (self->acks[i].state == S_ACK_OWED)
            s_send_ack(self, &self->acks[i], now_ms);
}

/* Record the ack of one delivery and send it if there is a link; if there is
   none it goes out on the next one. */
static void s_owe_ack_held(oq_session_t *self, uint64_t id, uint32_t attempt, bool has_lease,
                           uint64_t lease, oq_outcome_t outcome, oq_result_t result,
                           const char *error, int64_t delay_ms, bool returns_credit, bool held,
                           int64_t now_ms)
{
    s_owed_t *owed = NULL;
    for (size_t i = 0; i < S_ACKS_MAX && !owed; i++)
        if (self->acks[i].state == S_ACK_NONE)
            owed = &self->acks[i];
    if (!owed) {
        /* More unsettled acks than deliveries can explain: the broker sent
           far beyond the credit and has been silent since. The job's lease
           runs out and it runs again, as at-least-once allows. */
        oq_warn("job %llu: %d acks wait for the broker already; this one is not kept",
                (unsigned long long)id, S_ACKS_MAX);
        return;
    }
    memset(owed, 0, sizeof *owed);
    owed->ack.id = id;
    owed->ack.attempt = attempt;
    owed->ack.lease = lease;
    owed->ack.has_lease = has_lease;
    /* retry with a delay is a release; return with one, a hand-back for later */
    owed->ack.has_delay =
        delay_ms >= 0 && (outcome == OQ_OUTCOME_RETRY || outcome == OQ_OUTCOME_RETURN ||
                          outcome == OQ_OUTCOME_UNAVAILABLE);
    owed->ack.delay_ms = owed->ack.has_delay ? delay_ms : 0;
    owed->ack.outcome = outcome;
    owed->ack.result = result;
    snprintf(owed->error, sizeof owed->error, "%s", error ? error : "");
    owed->ack.held = held;
    owed->returns_credit = returns_credit;
    owed->state = S_ACK_OWED;
    if (self->link != OQ_LINK_DOWN)
        s_send_ack(self, owed, now_ms);
}

static void s_owe_ack(oq_session_t *self, uint64_t id, uint32_t attempt, bool has_lease,
                      uint64_t lease, oq_outcome_t outcome, oq_result_t result, const char *error,
                      int64_t delay_ms, bool returns_credit, int64_t now_ms)
{
    s_owe_ack_held(self, id, attempt, has_lease, lease, outcome, result, error, delay_ms,
                   returns_credit, false, now_ms);
}

/* ---- held jobs ------------------------------------------------------------ */

static s_held_t *s_held_oldest(oq_session_t *self)
{
    assert(self->held_count > 0);
    return &self->held[self->held_head];
}

static void s_held_pop(oq_session_t *self)
{
    assert(self->held_count > 0);
    self->held_head = (self->held_head + 1) % OQ_WORKER_PREFETCH_MAX;
    self->held_count--;
}

/* Hand the oldest held job back unrun: a return marked held uses no try,
   and the broker keeps sending this worker its type. */
static void s_hand_back_oldest(oq_session_t *self, const char *why, bool returns_credit,
                               int64_t now_ms)
{
    s_held_t h = *s_held_oldest(self);
    s_held_pop(self);
    s_owe_ack_held(self, h.id, h.attempt, h.has_lease, h.lease, OQ_OUTCOME_RETURN, OQ_RESULT_NONE,
                   why, -1, returns_credit && s_credit_back(self), true, now_ms);
    s_push(self, OQ_ACTION_DROP_HELD)->job = h.job;
}

/* Forget every held job without a word: the link is gone, or the broker
   forgot this worker; either way it has given their leases back. */
static void s_drop_held(oq_session_t *self)
{
    if (self->held_count)
        oq_info("dropping %zu held job(s): the broker gives their leases back", self->held_count);
    while (self->held_count) {
        s_push(self, OQ_ACTION_DROP_HELD)->job = s_held_oldest(self)->job;
        s_held_pop(self);
    }
}

/* Tell the broker whether the worker takes jobs, and if not why. */
static void s_send_status(oq_session_t *self, int64_t now_ms)
{
    oq_action_t *action = s_push(self, OQ_ACTION_SEND);
    action->cmd = OQ_CMD_STATUS;
    action->state = self->unavailable ? OQ_STATUS_UNAVAILABLE : OQ_STATUS_READY;
    action->state_ms = now_ms - self->state_since_ms;
    action->error = self->unavailable ? self->unavailable_error : "";
    if (self->unavailable)
        self->credit_out = 0; /* the broker clears a paused worker's credit */
    self->sent_ms = now_ms;
}

/* ready, and for a broker that does not know we are paused (a fresh
   socket, a broker that forgot us), the status that says so. */
static void s_register(oq_session_t *self, int64_t now_ms)
{
    self->credit_out = 0; /* a fresh registration offers what is free */
    s_send_ready(self, now_ms);
    if (self->unavailable)
        s_send_status(self, now_ms);
}

/* A fresh socket: a new identity the broker has never seen, so ready comes
   first, then whatever ack is still owed. */
static void s_connect(oq_session_t *self, int64_t now_ms)
{
    s_push(self, OQ_ACTION_CONNECT);
    s_set_link(self, OQ_LINK_REGISTERING);
    self->heard_ms = now_ms; /* the broker gets a full liveness period to answer */
    s_register(self, now_ms);
    s_send_owed(self, now_ms);
}

static uint64_t s_random(oq_session_t *self)
{
    uint64_t x = self->random;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    self->random = x;
    return x;
}

/* The next probe: after the current pause, drawn from its upper half so
   that workers that paused together spread out. */
static void s_schedule_probe(oq_session_t *self, int64_t now_ms)
{
    int64_t half = self->probe_pause_ms / 2;
    self->probe_at_ms = now_ms + half + (int64_t)(s_random(self) % (uint64_t)(half + 1));
}

/* A handler reported unavailable: take no job until a probe answers. */
static void s_pause(oq_session_t *self, const char *type, const char *error, int64_t now_ms)
{
    if (!self->unavailable) {
        self->unavailable = true;
        self->state_since_ms = now_ms;
        self->probes = 0;
        self->probe_pause_ms = OQ_WORKER_PROBE_MIN_MS;
        oq_warn("pausing: the %s handler's job could not run (%s); taking no job until it "
                "answers a probe",
                type, error);
    }
    snprintf(self->unavailable_error, sizeof self->unavailable_error, "%s", error);
    snprintf(self->probe_type, sizeof self->probe_type, "%s", type);
    s_schedule_probe(self, now_ms);
    if (self->link != OQ_LINK_DOWN)
        s_send_status(self, now_ms);
    /* The jobs held would meet the same outage: others may run them now. */
    char why[OQ_MAX_ERROR_LEN + 1];
    snprintf(why, sizeof why, "held, and the worker paused: %.*s", OQ_MAX_ERROR_LEN - 40, error);
    while (self->held_count)
        s_hand_back_oldest(self, why, false, now_ms);
}

static void s_lose_link(oq_session_t *self, const char *why, int64_t now_ms)
{
    s_push(self, OQ_ACTION_CLOSE);
    s_set_link(self, OQ_LINK_DOWN);
    /* The close drops what the socket still held: an ack not yet confirmed
       may be among it. */
    for (size_t i = 0; i < S_ACKS_MAX; i++)
        if (self->acks[i].state == S_ACK_SENT)
            self->acks[i].state = S_ACK_OWED;
    /* The broker gives a vanished worker's leases back: held jobs go to
       others, and this worker's new socket is a stranger to them. Its
       credit goes with it. */
    s_drop_held(self);
    self->credit_out = 0;
    self->reconnect_ms = now_ms + self->backoff_ms;
    oq_warn("%s; reconnecting in %lld ms", why, (long long)self->backoff_ms);
    self->backoff_ms *= 2;
    if (self->backoff_ms > OQ_RECONNECT_MAX_MS)
        self->backoff_ms = OQ_RECONNECT_MAX_MS;
}

/* Leave: deliver what is owed as well as can be done within the socket's
   linger, tell the broker, and queue the exit. */
static void s_exit(oq_session_t *self, int status, int64_t now_ms)
{
    while (self->held_count)
        s_hand_back_oldest(self, "held, and the worker is stopping", false, now_ms);
    bool owed = false;
    for (size_t i = 0; i < S_ACKS_MAX; i++)
        owed |= self->acks[i].state == S_ACK_OWED;
    if (self->link == OQ_LINK_DOWN && owed)
        s_connect(self, now_ms);
    if (self->link != OQ_LINK_DOWN)
        s_send(self, OQ_CMD_DISCONNECT, now_ms);
    s_push(self, OQ_ACTION_EXIT)->status = status;
    self->exiting = true;
}

/* ---- events ------------------------------------------------------------- */

oq_session_t *oq_session_new(const oq_session_config_t *config, int64_t now_ms)
{
    assert(config);
    assert(config->heartbeat_ms > 0 && config->liveness > 0);
    oq_session_t *self = calloc(1, sizeof *self);
    assert(self);
    self->link = OQ_LINK_DOWN;
    self->job = S_JOB_IDLE;
    self->heartbeat_ms = config->heartbeat_ms;
    self->liveness = config->liveness;
    self->reconnect_ms = now_ms; /* connect on the first tick */
    self->backoff_ms = OQ_RECONNECT_MIN_MS;
    self->state_since_ms = now_ms;
    self->idle_release_ms = config->idle_release_ms > 0 ? config->idle_release_ms : 0;
    self->idle_since_ms = now_ms;
    self->released = true; /* nothing is opened before the first job */
    self->random = config->seed ? config->seed : 1;
    self->prefetch = config->prefetch ? config->prefetch : 1;
    assert(self->prefetch <= OQ_WORKER_PREFETCH_MAX);
    if (config->prefetch_auto)
        self->estimator = oq_prefetch_new(self->prefetch, OQ_WORKER_PREFETCH_BUDGET_US);
    self->batch_cap = config->batch ? config->batch : 1;
    return self;
}

void oq_session_destroy(oq_session_t **self_p)
{
    assert(self_p);
    if (*self_p)
        oq_prefetch_destroy(&(*self_p)->estimator);
    free(*self_p);
    *self_p = NULL;
}

/* Any message proves the broker alive. It also settles an ack sent before
   it: not a proof that the ack was read (the two can cross on the wire),
   but a broker that dies in that instant gives the lease back and the job
   runs again, which at-least-once allows. Waiting for proof instead would
   resend every ack after every reconnect. */
static void s_heard(oq_session_t *self, int64_t now_ms)
{
    self->heard_ms = now_ms;
    for (size_t i = 0; i < S_ACKS_MAX; i++)
        if (self->acks[i].state == S_ACK_SENT)
            self->acks[i].state = S_ACK_NONE;
}

/* Jobs running or held: what a delivery counts against prefetch. */
static size_t s_taken(const oq_session_t *self)
{
    return (self->job == S_JOB_RUNNING ? 1 : 0) + self->held_count;
}

/* A delivery the worker will not take: it holds as many jobs as it may
   already, or is stopping or paused. The broker never sends more than the
   credit, so the first is its bug or a doubled credit; a retry ack hands
   the job back without keeping the credit. */
static void s_refuse(oq_session_t *self, uint64_t id, uint32_t attempt, bool has_lease,
                     uint64_t lease, int64_t now_ms)
{
    char why[OQ_MAX_ERROR_LEN + 1];
    oq_outcome_t outcome = OQ_OUTCOME_RETRY;
    if (self->job == S_JOB_RUNNING) {
        snprintf(why, sizeof why,
                 "worker is busy with job %llu: the broker sent more jobs than "
                 "its credit",
                 (unsigned long long)self->run[0].id);
    } else if (self->unavailable) {
        /* Paused: handed back like the job that paused it, using no try. */
        outcome = OQ_OUTCOME_UNAVAILABLE;
        snprintf(why, sizeof why, "worker is paused: %.*s", OQ_MAX_ERROR_LEN - 32,
                 self->unavailable_error);
    } else {
        snprintf(why, sizeof why, "worker is stopping");
    }
    oq_warn("refusing delivery id=%llu: %s", (unsigned long long)id, why);
    s_owe_ack(self, id, attempt, has_lease, lease, outcome, OQ_RESULT_NONE, why, -1, false, now_ms);
}

/* Whether a delivery may be taken now: with room in prefetch, not while
   stopping or paused, nor while probing. */
static bool s_may_take(const oq_session_t *self)
{
    return self->job != S_JOB_PROBING && !self->draining && !self->unavailable &&
           s_taken(self) < self->prefetch;
}

/* IDLE -> RUNNING with count jobs (more than one: a batch of one type):
   the watchdog starts now, at the smallest of their timeouts. */
static void s_start(oq_session_t *self, const s_held_t *jobs, size_t count, bool held,
                    int64_t now_ms)
{
    assert(count >= 1 && count <= OQ_WORKER_PREFETCH_MAX);
    s_set_job(self, S_JOB_RUNNING);
    memcpy(self->run, jobs, count * sizeof *jobs);
    self->run_count = count;
    for (size_t i = 0; i < count; i++)
        self->started[i] = jobs[i].job;
    self->touched_ms = now_ms;
    self->job_timeout_ms = jobs[0].timeout_ms;
    for (size_t i = 1; i < count; i++)
        self->job_timeout_ms = s_min(self->job_timeout_ms, jobs[i].timeout_ms);
    self->job_started_ms = now_ms;
    self->job_deadline_ms = now_ms + self->job_timeout_ms;
    self->released = false; /* the handler may open a connection */
    oq_action_t *start = s_push(self, OQ_ACTION_START_JOB);
    start->held = held;
    start->count = (uint32_t)count;
    start->jobs = self->started;
}

/* Touch every job running (one, or each of a batch). */
static void s_send_touch(oq_session_t *self, int64_t now_ms)
{
    for (size_t i = 0; i < self->run_count; i++) {
        oq_action_t *action = s_push(self, OQ_ACTION_SEND);
        action->cmd = OQ_CMD_TOUCH;
        action->ack.id = self->run[i].id;
        action->ack.attempt = self->run[i].attempt;
        action->ack.lease = self->run[i].lease;
        action->ack.has_lease = self->run[i].has_lease;
    }
    self->sent_ms = now_ms;
    self->touched_ms = now_ms;
}

/* The most jobs of type one call may take: 1 without a batch function. */
static size_t s_batch_max(const oq_session_t *self, const char *type)
{
    for (size_t i = 0; i < self->batch_types; i++)
        if (strcmp(self->batch[i].type, type) == 0)
            return self->batch[i].max_jobs;
    return 1;
}

/* No handler runs: start the oldest held job. Its lease ran from
   its delivery, and the broker's timeout rule makes a lease at least the
   job's timeout plus the margin long; so one that waited half its timeout
   or more is handed back for a fresh lease rather than started (the worker
   does not know retry_after, only that it is longer than the timeout), and
   one that waited less is started with a touch that restarts its lease at
   now + retry_after if it waited long enough for that to matter. */
/* Whether a held job waited too long to start (see s_start_held). */
static bool s_stale(const s_held_t *h, int64_t now_ms)
{
    return now_ms - h->delivered_ms >= h->timeout_ms / 2;
}

/* Whether the oldest held job waited too long to start; if so it is
   handed back. */
static bool s_hand_back_if_stale(oq_session_t *self, int64_t now_ms)
{
    const s_held_t *h = s_held_oldest(self);
    int64_t waited_ms = now_ms - h->delivered_ms;
    if (!s_stale(h, now_ms))
        return false;
    char why[OQ_MAX_ERROR_LEN + 1];
    snprintf(why, sizeof why,
             "held %lld ms behind other jobs, half its timeout or more: handed back "
             "unrun for a fresh lease",
             (long long)waited_ms);
    oq_info("job %llu: %s", (unsigned long long)h->id, why);
    s_hand_back_oldest(self, why, true, now_ms);
    return true;
}

/* The oldest held jobs go to the handler: the oldest alone, or, if its
   type has a batch function, with the held jobs of its type right behind
   it, as one batch (up to its most, capped by --batch). */
static void s_start_held(oq_session_t *self, int64_t now_ms)
{
    while (self->held_count && self->job == S_JOB_IDLE) {
        if (s_hand_back_if_stale(self, now_ms))
            continue;
        s_held_t jobs[OQ_WORKER_PREFETCH_MAX];
        size_t count = 0;
        size_t most = s_batch_max(self, s_held_oldest(self)->type);
        int64_t waited_ms = now_ms - s_held_oldest(self)->delivered_ms;
        do {
            jobs[count++] = *s_held_oldest(self);
            s_held_pop(self);
        } while (count < most && self->held_count &&
                 strcmp(s_held_oldest(self)->type, jobs[0].type) == 0 &&
                 !s_stale(s_held_oldest(self), now_ms));
        /* A stale job ends the batch there, and is handed back when the
           thread is free again (first thing, above), in delivery order. */
        s_start(self, jobs, count, true, now_ms);
        if (waited_ms >= OQ_WORKER_TOUCH_MIN_MS && self->link == OQ_LINK_UP)
            s_send_touch(self, now_ms);
    }
}

/* A delivery used one of the credits the broker held. */
static void s_delivered(oq_session_t *self)
{
    if (self->credit_out > 0)
        self->credit_out--;
}

bool oq_session_on_job(oq_session_t *self, const oq_job_msg_t *envelope, oq_runner_job_t *job,
                       int64_t now_ms)
{
    assert(self && envelope && job);
    if (self->exiting || self->link == OQ_LINK_DOWN)
        return false;
    s_heard(self, now_ms);
    s_delivered(self);
    if (!s_may_take(self)) {
        s_refuse(self, envelope->id, envelope->attempt, envelope->has_lease, envelope->lease,
                 now_ms);
        return false;
    }
    s_held_t taken = {
        .job = job,
        .id = envelope->id,
        .attempt = envelope->attempt,
        .lease = envelope->lease,
        .has_lease = envelope->has_lease,
        .timeout_ms = envelope->has_timeout ? envelope->timeout_ms : OQ_DEFAULT_TIMEOUT_MS,
        .delivered_ms = now_ms,
    };
    oq_str_copy(envelope->type, taken.type, sizeof taken.type);
    if (self->job == S_JOB_IDLE) {
        assert(self->held_count == 0); /* held jobs start as soon as the thread is free */
        s_start(self, &taken, 1, false, now_ms);
        return true;
    }
    self->held[(self->held_head + self->held_count) % OQ_WORKER_PREFETCH_MAX] = taken;
    self->held_count++;
    return true;
}

void oq_session_on_message(oq_session_t *self, const oq_msg_t *msg, int64_t now_ms)
{
    assert(self);
    assert(msg);
    if (self->exiting || self->link == OQ_LINK_DOWN)
        return;
    s_heard(self, now_ms);
    switch (msg->cmd) {
    case OQ_CMD_WELCOME:
        self->heartbeat_ms = msg->heartbeat_ms;
        self->liveness = msg->liveness;
        self->backoff_ms = OQ_RECONNECT_MIN_MS;
        if (self->link == OQ_LINK_REGISTERING) {
            s_set_link(self, OQ_LINK_UP);
            oq_info("registered with the broker (heartbeat %u ms, liveness %u)", self->heartbeat_ms,
                    self->liveness);
        }
        break;
    case OQ_CMD_HEARTBEAT:
        break;
    case OQ_CMD_RECONNECT:
        /* Before welcome a reconnect answers something sent before our
           ready (a heartbeat, an ack): the ready is already on its way, and
           a second one would add a second credit. */
        if (self->link == OQ_LINK_REGISTERING) {
            oq_debug("ignoring a reconnect sent before our ready");
            break;
        }
        oq_info("the broker asked us to register again (%.*s)", (int)msg->err_text.len,
                msg->err_text.ptr ? msg->err_text.ptr : "");
        /* It forgot us, and with us the leases of the jobs held. */
        s_drop_held(self);
        s_set_link(self, OQ_LINK_REGISTERING);
        s_register(self, now_ms);
        break;
    case OQ_CMD_ERROR:
        oq_warn("broker error %s: %.*s", oq_proto_err_name(msg->err_code), (int)msg->err_text.len,
                msg->err_text.ptr ? msg->err_text.ptr : "");
        break;
    default:
        oq_warn("ignoring an unexpected \"%s\" from the broker", oq_proto_cmd_name(msg->cmd));
        break;
    }
}

void oq_session_on_garbage(oq_session_t *self, int64_t now_ms)
{
    assert(self);
    if (!self->exiting && self->link != OQ_LINK_DOWN)
        s_heard(self, now_ms);
}

void oq_session_on_bad_job(oq_session_t *self, uint64_t id, uint32_t attempt, const char *reason,
                           int64_t now_ms)
{
    oq_session_on_bad_job_leased(self, id, attempt, false, 0, reason, now_ms);
}

void oq_session_on_bad_job_leased(oq_session_t *self, uint64_t id, uint32_t attempt, bool has_lease,
                                  uint64_t lease, const char *reason, int64_t now_ms)
{
    assert(self);
    if (self->exiting || self->link == OQ_LINK_DOWN)
        return;
    s_heard(self, now_ms);
    s_delivered(self);
    if (!s_may_take(self)) {
        s_refuse(self, id, attempt, has_lease, lease, now_ms);
        return;
    }
    char error[OQ_MAX_ERROR_LEN + 1];
    snprintf(error, sizeof error, "the worker could not decode the job: %s", reason);
    oq_warn("job %llu failed: %s", (unsigned long long)id, error);
    s_owe_ack(self, id, attempt, has_lease, lease, OQ_OUTCOME_FAIL, OQ_RESULT_NONE, error, -1,
              s_credit_back(self), now_ms);
}

/* With auto: the estimator learns from a job's run. A held job of its
   type is charged its share of a full batch: its call's time over as many
   jobs as its batch function takes and the limit can hold behind the
   running one (prefetch.h). */
static void s_observe(oq_session_t *self, const oq_job_done_t *done, const char *type)
{
    size_t room = self->prefetch > 1 ? self->prefetch - 1 : 1; /* behind the running one */
    size_t most = s_batch_max(self, type);
    if (most > room)
        most = room;
    uint32_t was = oq_prefetch_limit(self->estimator);
    uint32_t limit = oq_prefetch_observe(self->estimator, done->call_us, (uint32_t)most);
    if (limit != was)
        oq_debug("prefetch auto: holding up to %u job(s), a held job adds %lld us on average",
                 limit, (long long)oq_prefetch_average_us(self->estimator));
}

void oq_session_on_done(oq_session_t *self, const oq_job_done_t *done, int64_t now_ms)
{
    assert(self);
    assert(done);
    if (self->exiting)
        return;
    assert(self->job == S_JOB_RUNNING);
    size_t at = 0;
    while (at < self->run_count && self->run[at].id != done->id)
        at++;
    assert(at < self->run_count); /* the runner reports only what it was given */
    s_held_t job = self->run[at];
    self->run[at] = self->run[--self->run_count];
    if (self->run_count == 0) {
        s_set_job(self, S_JOB_IDLE);
        self->idle_since_ms = now_ms;
    }
    const oq_report_t *report = &done->report;
    /* Paused before the ack goes: it then gives no credit back. */
    if (report->outcome == OQ_OUTCOME_UNAVAILABLE)
        s_pause(self, job.type, report->error, now_ms);
    if (self->estimator)
        s_observe(self, done, job.type);
    s_owe_ack(self, done->id, done->attempt, job.has_lease, job.lease, report->outcome,
              report->result, report->error, report->has_delay ? report->delay_ms : -1,
              s_credit_back(self), now_ms);
    if (self->job == S_JOB_RUNNING)
        return; /* the rest of a batch is still to be reported */
    if (self->draining) {
        s_exit(self, 0, now_ms);
        return;
    }
    s_start_held(self, now_ms);
    /* What the limit grew by, or was kept back behind a long job. */
    s_top_up(self, now_ms);
}

void oq_session_on_probed(oq_session_t *self, const oq_probe_done_t *probed, int64_t now_ms)
{
    assert(self && probed);
    if (self->exiting)
        return;
    assert(self->job == S_JOB_PROBING);
    s_set_job(self, S_JOB_IDLE);
    /* A probe that answered keeps its connection for the next job: from
       now on that is what an idle worker would release. */
    self->idle_since_ms = now_ms;
    self->released = false;
    if (probed->result < 0) {
        self->probes++;
        snprintf(self->unavailable_error, sizeof self->unavailable_error, "%s", probed->reason);
        self->probe_pause_ms *= 2;
        if (self->probe_pause_ms > OQ_WORKER_PROBE_MAX_MS)
            self->probe_pause_ms = OQ_WORKER_PROBE_MAX_MS;
        s_schedule_probe(self, now_ms);
        oq_info("still paused after %lld ms (probe %u: %s); next probe in %lld ms",
                (long long)(now_ms - self->state_since_ms), self->probes, probed->reason,
                (long long)(self->probe_at_ms - now_ms));
        if (self->link != OQ_LINK_DOWN)
            s_send_status(self, now_ms);
    } else {
        oq_info("the %s handler's %s after %lld ms paused (%u failed probe(s)); taking jobs "
                "again",
                self->probe_type,
                probed->result == 0 ? "resource answers" : "pause is over (it declared no probe)",
                (long long)(now_ms - self->state_since_ms), self->probes);
        self->unavailable = false;
        self->unavailable_error[0] = 0;
        self->state_since_ms = now_ms;
        if (self->link != OQ_LINK_DOWN) {
            s_send_status(self, now_ms);
            /* The credit the pause held back; on a link that is down, the
               next ready gives it. */
            if (s_free_credit(self) > 0)
                s_send_ready(self, now_ms);
        }
    }
    if (self->draining)
        s_exit(self, 0, now_ms);
}

bool oq_session_on_touch(oq_session_t *self, uint64_t id, int64_t now_ms)
{
    assert(self);
    bool running = false;
    for (size_t i = 0; i < self->run_count && self->job == S_JOB_RUNNING; i++)
        running |= self->run[i].id == id;
    if (self->exiting || !running || self->link != OQ_LINK_UP ||
        now_ms - self->touched_ms < OQ_WORKER_TOUCH_MIN_MS)
        return false;
    s_send_touch(self, now_ms);
    self->job_deadline_ms = now_ms + self->job_timeout_ms;
    oq_debug("job %llu: touched; the watchdog restarts at %lld ms", (unsigned long long)id,
             (long long)self->job_timeout_ms);
    return true;
}

void oq_session_on_signal(oq_session_t *self, int64_t now_ms)
{
    assert(self);
    if (self->exiting)
        return;
    if (self->draining) {
        oq_info("already stopping; waiting for job %llu", (unsigned long long)self->run[0].id);
        return;
    }
    self->draining = true;
    if (self->job == S_JOB_RUNNING)
        oq_info("stopping after job %llu", (unsigned long long)self->run[0].id);
    else
        oq_info("stopping");
    if (self->link != OQ_LINK_DOWN)
        s_send(self, OQ_CMD_DRAIN, now_ms);
    self->credit_out = 0; /* drain clears it */
    /* The jobs held go back now, to run elsewhere while this one ends. */
    while (self->held_count)
        s_hand_back_oldest(self, "held, and the worker is stopping", false, now_ms);
    /* A probe running finishes first (it is bounded), like a job. */
    if (self->job == S_JOB_IDLE)
        s_exit(self, 0, now_ms);
}

void oq_session_on_send_error(oq_session_t *self, int64_t now_ms)
{
    assert(self);
    if (!self->exiting && self->link != OQ_LINK_DOWN)
        s_lose_link(self, "cannot send to the broker", now_ms);
}

void oq_session_on_stall(oq_session_t *self, int64_t stalled_ms, int64_t now_ms)
{
    assert(self);
    assert(stalled_ms >= 0);
    /* Short stalls happen on a busy machine; only one that could have cost
       the link is worth an operator's attention. */
    oq_log(stalled_ms >= self->heartbeat_ms ? OQ_LOG_INFO : OQ_LOG_DEBUG,
           "the process did not run for up to %lld ms (stopped or starved); deadlines move on "
           "by as much",
           (long long)stalled_ms);
    /* Never further than a fresh start now: a message or a job that came
       in after the stall was not stalled. */
    self->heard_ms = s_min(self->heard_ms + stalled_ms, now_ms);
    if (self->job == S_JOB_RUNNING)
        self->job_deadline_ms =
            s_min(self->job_deadline_ms + stalled_ms, now_ms + self->job_timeout_ms);
}

/* How long held jobs wait behind a running one before they go back: with
   auto, a job that runs this long was not what the average promised. */
static int64_t s_hold_max_ms(const oq_session_t *self)
{
    return self->estimator ? OQ_WORKER_PREFETCH_AUTO_HOLD_MS : OQ_WORKER_HOLD_MAX_MS;
}

/* The handler overran: report it and leave. The handler's thread cannot be
   cancelled safely, so the process exits and its supervisor starts a fresh
   one. */
static void s_watchdog(oq_session_t *self, int64_t now_ms)
{
    double timeout_s = (double)self->job_timeout_ms / 1000.0;
    char error[OQ_MAX_ERROR_LEN + 1];
    snprintf(error, sizeof error, "handler ran past its timeout of %g s", timeout_s);
    self->draining = true;
    /* A batch's jobs share its watchdog: each is reported timed out. */
    for (size_t i = 0; i < self->run_count; i++) {
        const s_held_t *job = &self->run[i];
        oq_info("job %llu type=%s attempt=%u outcome=timeout ms=%lld", (unsigned long long)job->id,
                job->type, job->attempt, (long long)(now_ms - self->job_started_ms));
        oq_error("job %llu: the %s handler ran past its timeout of %g s; exiting with status %d",
                 (unsigned long long)job->id, job->type, timeout_s, OQ_EXIT_TIMEOUT);
        s_owe_ack(self, job->id, job->attempt, job->has_lease, job->lease, OQ_OUTCOME_TIMEOUT,
                  OQ_RESULT_NONE, error, -1, false, now_ms);
    }
    s_exit(self, OQ_EXIT_TIMEOUT, now_ms);
}

void oq_session_on_tick(oq_session_t *self, int64_t now_ms)
{
    assert(self);
    if (self->exiting)
        return;
    if (self->job == S_JOB_RUNNING && now_ms >= self->job_deadline_ms) {
        s_watchdog(self, now_ms);
        return;
    }
    if (self->job == S_JOB_RUNNING && self->held_count &&
        now_ms - self->job_started_ms >= s_hold_max_ms(self)) {
        /* A long job: what waits behind it may run on a free worker now.
           Their credits stay back until it ends (s_top_up), or they would
           only come back to wait here again. */
        oq_info("job %llu has run %lld ms: handing back %zu held job(s) for other workers",
                (unsigned long long)self->run[0].id, (long long)(now_ms - self->job_started_ms),
                self->held_count);
        while (self->held_count)
            s_hand_back_oldest(self, "held behind a long job: handed back unrun for a free worker",
                               false, now_ms);
    }
    if (self->job == S_JOB_IDLE && !self->draining) {
        if (self->unavailable && now_ms >= self->probe_at_ms) {
            s_set_job(self, S_JOB_PROBING);
            oq_action_t *probe = s_push(self, OQ_ACTION_PROBE);
            snprintf(probe->type, sizeof probe->type, "%s", self->probe_type);
        } else if (!self->released && self->idle_release_ms > 0 &&
                   now_ms - self->idle_since_ms >= self->idle_release_ms) {
            oq_info("no job for %lld ms: releasing the handlers' connections",
                    (long long)(now_ms - self->idle_since_ms));
            s_push(self, OQ_ACTION_RELEASE);
            self->released = true;
        }
    }
    int64_t silence_ms = (int64_t)self->liveness * self->heartbeat_ms;
    switch (self->link) {
    case OQ_LINK_DOWN:
        if (now_ms >= self->reconnect_ms)
            s_connect(self, now_ms);
        break;
    case OQ_LINK_REGISTERING:
    case OQ_LINK_UP:
        if (now_ms - self->heard_ms >= silence_ms) {
            char why[96];
            snprintf(why, sizeof why, "the broker has been silent for %lld ms",
                     (long long)(now_ms - self->heard_ms));
            s_lose_link(self, why, now_ms);
        } else if (self->link == OQ_LINK_UP && now_ms - self->sent_ms >= self->heartbeat_ms) {
            /* Before welcome the broker does not know us yet: a heartbeat
               would only earn a reconnect. */
            s_send(self, OQ_CMD_HEARTBEAT, now_ms);
        }
        break;
    }
}

oq_runner_job_t *oq_session_take_held(oq_session_t *self)
{
    assert(self);
    if (self->held_count == 0)
        return NULL;
    oq_runner_job_t *job = s_held_oldest(self)->job;
    s_held_pop(self);
    return job;
}

int oq_session_next(oq_session_t *self, oq_action_t *action)
{
    assert(self);
    if (self->action_count == 0)
        return -1;
    *action = self->actions[self->action_head];
    self->action_head = (self->action_head + 1) % S_ACTIONS_MAX;
    self->action_count--;
    return 0;
}

int64_t oq_session_deadline(const oq_session_t *self)
{
    assert(self);
    int64_t deadline = INT64_MAX;
    if (self->exiting)
        return deadline;
    if (self->job == S_JOB_RUNNING)
        deadline = self->job_deadline_ms;
    if (self->job == S_JOB_RUNNING && self->held_count)
        deadline = s_min(deadline, self->job_started_ms + s_hold_max_ms(self));
    if (self->job == S_JOB_IDLE && !self->draining) {
        if (self->unavailable)
            deadline = s_min(deadline, self->probe_at_ms);
        else if (!self->released && self->idle_release_ms > 0)
            deadline = s_min(deadline, self->idle_since_ms + self->idle_release_ms);
    }
    int64_t silence_ms = (int64_t)self->liveness * self->heartbeat_ms;
    switch (self->link) {
    case OQ_LINK_DOWN:
        deadline = s_min(deadline, self->reconnect_ms);
        break;
    case OQ_LINK_REGISTERING:
        deadline = s_min(deadline, self->heard_ms + silence_ms);
        break;
    case OQ_LINK_UP:
        deadline = s_min(deadline, self->heard_ms + silence_ms);
        deadline = s_min(deadline, self->sent_ms + self->heartbeat_ms);
        break;
    }
    return deadline;
}

oq_link_state_t oq_session_link(const oq_session_t *self)
{
    assert(self);
    return self->link;
}

bool oq_session_busy(const oq_session_t *self)
{
    assert(self);
    return self->job == S_JOB_RUNNING;
}

void oq_session_set_batch(oq_session_t *self, const char *type, size_t max_jobs)
{
    assert(self && type);
    if (max_jobs > self->batch_cap)
        max_jobs = self->batch_cap;
    if (max_jobs < 2 || self->batch_types == OQ_MAX_WORKER_TYPES)
        return;
    snprintf(self->batch[self->batch_types].type, sizeof self->batch[0].type, "%s", type);
    self->batch[self->batch_types].max_jobs = max_jobs;
    self->batch_types++;
    if (self->estimator) {
        /* Room for one full batch held behind the running job. */
        size_t want = max_jobs + 1 < OQ_WORKER_PREFETCH_AUTO_BATCH_CAP
                          ? max_jobs + 1
                          : OQ_WORKER_PREFETCH_AUTO_BATCH_CAP;
        if (want > self->prefetch) {
            self->prefetch = (uint32_t)want;
            oq_prefetch_raise_cap(self->estimator, self->prefetch);
        }
    }
}

size_t oq_session_held(const oq_session_t *self)
{
    assert(self);
    return self->held_count;
}

uint32_t oq_session_limit(const oq_session_t *self)
{
    assert(self);
    return s_limit(self);
}

uint32_t oq_session_prefetch(const oq_session_t *self)
{
    assert(self);
    return self->prefetch;
}

bool oq_session_unavailable(const oq_session_t *self)
{
    assert(self);
    return self->unavailable;
}

bool oq_session_exiting(const oq_session_t *self)
{
    assert(self);
    return self->exiting;
}

uint32_t oq_session_heartbeat_ms(const oq_session_t *self)
{
    assert(self);
    return self->heartbeat_ms;
}
