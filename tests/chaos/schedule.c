/*  schedule.c: faults drawn from the schedule stream of the seed, each at a
    uniformly random dispatch position in the middle part of the run, then
    sorted. Database restarts alternate immediate and fast, immediate first:
    a bounded run with one restart gets the harsher one.

    Order hooks are placed last, each on a position of its own and outside
    the shadow of a broker kill or a database restart (the dispatches of
    the next OQ_CHAOS_HOOK_SHADOW_MS): a hook acts on its job's first
    attempt, and an attempt that the database restart or the broker kill
    ends early never reaches its COMMIT, so the hook would never fire. A
    position is drawn again a bounded number of times; after that a hook
    takes any free position, and one with none is dropped. */
#include "schedule.h"

#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "chaos_limits.h"
#include "rng.h"

/* Draws of a position for an order hook before it settles for less. */
#define S_HOOK_DRAWS 64
#define S_MS_PER_S   1000
/* Without a rate, the shadow is this share of the run (per mille). */
#define S_UNPACED_SHADOW_PERMILLE 10

struct oq_schedule {
    oq_fault_t *faults; /* sorted by at */
    size_t count;
    uint8_t *hooks; /* per dispatch position: an oq_fault_kind_t, or KIND_COUNT_ */
    uint32_t jobs;
    uint32_t shadow; /* positions after a broker kill or database restart kept free of hooks */
    uint32_t counts[OQ_FAULT_KIND_COUNT_];
};

static const char *s_names[OQ_FAULT_KIND_COUNT_] = {
    [OQ_FAULT_KILL] = "worker SIGKILL mid-job",
    [OQ_FAULT_COMMIT_KILL] = "worker SIGKILL after COMMIT, before ack",
    [OQ_FAULT_SELF_KILL] = "worker self-SIGKILL after COMMIT (hook)",
    [OQ_FAULT_PAUSE] = "worker SIGSTOP past retry_after",
    [OQ_FAULT_BROKER_KILL] = "broker SIGKILL + restart on its journal",
    [OQ_FAULT_DB_FAST] = "PostgreSQL restart (fast)",
    [OQ_FAULT_DB_IMMEDIATE] = "PostgreSQL restart (immediate)",
    [OQ_FAULT_BURST] = "malformed frame burst (both sockets)",
    [OQ_FAULT_CARRIER_STALL] = "carrier SIGSTOP, then SIGCONT",
    [OQ_FAULT_CARRIER_ERRORS] = "carrier burst: every POST answered 503",
    [OQ_FAULT_CARRIER_DELAY] = "carrier burst: replies after the timeout",
};

const char *oq_schedule_kind_name(oq_fault_kind_t kind)
{
    return kind < OQ_FAULT_KIND_COUNT_ ? s_names[kind] : "none";
}

static int s_by_position(const void *a, const void *b)
{
    const oq_fault_t *x = a, *y = b;
    if (x->at != y->at)
        return x->at < y->at ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static uint32_t s_position(oq_rng_t *rng, uint32_t from, uint32_t to)
{
    return from + (uint32_t)oq_rng_below(rng, (uint64_t)(to - from) + 1);
}

/* True if a hook at `at` would fall in the shadow of a broker kill or a
   database restart placed so far. */
static bool s_shadowed(const oq_schedule_t *self, uint32_t at)
{
    for (size_t i = 0; i < self->count; i++) {
        oq_fault_kind_t k = self->faults[i].kind;
        bool casts =
            k == OQ_FAULT_BROKER_KILL || k == OQ_FAULT_DB_FAST || k == OQ_FAULT_DB_IMMEDIATE;
        if (casts && at >= self->faults[i].at && at - self->faults[i].at <= self->shadow)
            return true;
    }
    return false;
}

static uint32_t s_hook_position(oq_schedule_t *self, oq_rng_t *rng, uint32_t from, uint32_t to)
{
    uint32_t at = s_position(rng, from, to);
    for (int draw = 0; draw < S_HOOK_DRAWS; draw++) {
        if (self->hooks[at] == OQ_FAULT_KIND_COUNT_ && !s_shadowed(self, at))
            return at;
        at = s_position(rng, from, to);
    }
    for (int draw = 0; draw < S_HOOK_DRAWS && self->hooks[at] != OQ_FAULT_KIND_COUNT_; draw++)
        at = s_position(rng, from, to);
    return at;
}

static void s_add(oq_schedule_t *self, oq_rng_t *rng, oq_fault_kind_t kind, uint32_t n,
                  uint32_t from, uint32_t to)
{
    bool hook = kind == OQ_FAULT_COMMIT_KILL || kind == OQ_FAULT_SELF_KILL;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t at = hook ? s_hook_position(self, rng, from, to) : s_position(rng, from, to);
        if (hook) {
            if (self->hooks[at] != OQ_FAULT_KIND_COUNT_)
                continue; /* more hooks than free positions: fewer are made */
            self->hooks[at] = (uint8_t)kind;
        }
        oq_fault_kind_t actual = kind;
        if (kind == OQ_FAULT_DB_IMMEDIATE && i % 2 == 1)
            actual = OQ_FAULT_DB_FAST;
        self->faults[self->count++] = (oq_fault_t){actual, at, self->counts[actual]++};
    }
}

oq_schedule_t *oq_schedule_new(const oq_chaos_config_t *config)
{
    assert(config && config->jobs > 0);
    oq_schedule_t *self = calloc(1, sizeof *self);
    assert(self);
    self->jobs = config->jobs;
    self->hooks = malloc(config->jobs);
    assert(self->hooks);
    memset(self->hooks, OQ_FAULT_KIND_COUNT_, config->jobs);
    size_t total = (size_t)config->kills + config->commit_kills + config->self_kills +
                   config->pauses + config->broker_kills + config->db_restarts + config->bursts +
                   config->carrier_stalls + config->carrier_error_bursts +
                   config->carrier_delay_bursts;
    self->faults = calloc(total ? total : 1, sizeof *self->faults);
    assert(self->faults);

    uint32_t from = (uint32_t)((uint64_t)config->jobs * OQ_CHAOS_FAULTS_FROM_PCT / 100);
    uint32_t to = (uint32_t)((uint64_t)config->jobs * OQ_CHAOS_FAULTS_TO_PCT / 100);
    if (to >= config->jobs)
        to = config->jobs - 1;
    if (to < from)
        to = from;
    self->shadow = config->rate > 0
                       ? (uint32_t)(config->rate * OQ_CHAOS_HOOK_SHADOW_MS / S_MS_PER_S)
                       : (uint32_t)((uint64_t)config->jobs * S_UNPACED_SHADOW_PERMILLE / 1000);
    oq_rng_t rng;
    oq_rng_seed(&rng, config->seed, OQ_RNG_SCHEDULE);
    /* A fixed order of kinds: the positions of one kind depend on the seed
       and on the counts of the kinds before it only; hooks come last, as
       they avoid the shadows of the kinds before. */
    s_add(self, &rng, OQ_FAULT_KILL, config->kills, from, to);
    s_add(self, &rng, OQ_FAULT_PAUSE, config->pauses, from, to);
    s_add(self, &rng, OQ_FAULT_BROKER_KILL, config->broker_kills, from, to);
    s_add(self, &rng, OQ_FAULT_DB_IMMEDIATE, config->db_restarts, from, to);
    s_add(self, &rng, OQ_FAULT_BURST, config->bursts, from, to);
    s_add(self, &rng, OQ_FAULT_COMMIT_KILL, config->commit_kills, from, to);
    s_add(self, &rng, OQ_FAULT_SELF_KILL, config->self_kills, from, to);
    s_add(self, &rng, OQ_FAULT_CARRIER_STALL, config->carrier_stalls, from, to);
    s_add(self, &rng, OQ_FAULT_CARRIER_ERRORS, config->carrier_error_bursts, from, to);
    s_add(self, &rng, OQ_FAULT_CARRIER_DELAY, config->carrier_delay_bursts, from, to);
    qsort(self->faults, self->count, sizeof *self->faults, s_by_position);
    return self;
}

void oq_schedule_destroy(oq_schedule_t **self_p)
{
    assert(self_p);
    oq_schedule_t *self = *self_p;
    if (!self)
        return;
    free(self->faults);
    free(self->hooks);
    free(self);
    *self_p = NULL;
}

size_t oq_schedule_count(const oq_schedule_t *self)
{
    return self->count;
}

const oq_fault_t *oq_schedule_get(const oq_schedule_t *self, size_t index)
{
    assert(index < self->count);
    return &self->faults[index];
}

oq_fault_kind_t oq_schedule_hook_at(const oq_schedule_t *self, uint32_t at)
{
    return at < self->jobs ? (oq_fault_kind_t)self->hooks[at] : OQ_FAULT_KIND_COUNT_;
}

uint32_t oq_schedule_count_of(const oq_schedule_t *self, oq_fault_kind_t kind)
{
    assert(kind < OQ_FAULT_KIND_COUNT_);
    return self->counts[kind];
}

int oq_schedule_print(const oq_schedule_t *self, FILE *out, const char *path)
{
    for (int kind = 0; kind < OQ_FAULT_KIND_COUNT_; kind++) {
        if (!self->counts[kind])
            continue;
        fprintf(out, "  %3u x %-40s at dispatch", self->counts[kind], s_names[kind]);
        uint32_t shown = 0;
        for (size_t i = 0; i < self->count; i++) {
            if (self->faults[i].kind != (oq_fault_kind_t)kind)
                continue;
            if (shown++ == OQ_CHAOS_SCHEDULE_SHOWN) {
                fprintf(out, " ...");
                break;
            }
            fprintf(out, " %u", self->faults[i].at);
        }
        fprintf(out, "\n");
    }
    if (!path)
        return 0;
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    for (size_t i = 0; i < self->count; i++)
        fprintf(f, "%u %s #%u\n", self->faults[i].at, s_names[self->faults[i].kind],
                self->faults[i].seq);
    return fclose(f) == 0 ? 0 : -1;
}
