/*  engine_memory.c: what the engine holds against --max-bytes, and how a
    dispatch makes room.

    The limit counts everything that grows with what peers send, not the
    jobs alone: each job (oq_engine_job_cost), each unique and each overlap
    key (OQ_JOB_KEY_COST_BYTES), the dispatch-id table as allocated
    (dedupe.h), each connected worker (OQ_WORKER_COST_BYTES), and what the
    broker holds beside the engine for waits and connections
    (oq_engine_set_outside_bytes). A dispatch is refused ("full") before
    anything is made when its job and its keys would not fit
    (engine_dispatch.c), so the sum never passes the limit by what peers
    send; only a replay may leave it above (a job once accepted is kept).

    What stays after the jobs are done, the unique windows and the
    dispatch ids, holds no job: it only saves work. So it yields: a
    dispatch that needs room takes it from there, the oldest dispatch ids
    first (the table gives back half of itself at a time, oldest ids
    first), then the unique windows that end first. A dispatch is refused
    only when the live jobs, their keys and the connections leave no room
    even with all of that forgotten; then nothing is forgotten.

    Forgetting early shrinks the window a resent dispatch is recognised
    in. That is never silent: every id and window forgotten early is
    counted (dedupe_evicted, unique_evicted), the window the dispatch-id
    table still holds is in stats and metrics (dedupe_window_held_ms), and
    a warning says it at most once per OQ_MEMORY_LOG_INTERVAL_MS. */
#include "engine_memory.h"

#include "onceq/limits.h"
#include "onceq/log.h"

#define S_LOG_SLOTS 2 /* the two things said: dispatch ids, unique windows */

/* A worker's cost covers its entry, the copy of its hex key and the hash
   item in engine->workers, its type bitmap, and type and queue lists of
   S_WORKER_LIST_NAMES each. */
#define S_WORKER_LIST_NAMES 64
_Static_assert(sizeof(oq_worker_t) + 2 * 256 + 1 + 64 + OQ_ENG_TYPE_WORDS * sizeof(uint64_t) +
                       2 * S_WORKER_LIST_NAMES * sizeof(void *) <=
                   OQ_WORKER_COST_BYTES,
               "a worker costs more than --max-bytes counts");

uint64_t oq_eng_held_bytes(const oq_engine_t *self)
{
    uint64_t keys = (uint64_t)oq_unique_count(self->unique) + oq_overlap_jobs(self->overlap);
    return self->bytes + keys * OQ_JOB_KEY_COST_BYTES + oq_dedupe_bytes(self->dispatch_ids) +
           (uint64_t)zhashx_size(self->workers) * OQ_WORKER_COST_BYTES + self->outside_bytes +
           self->batch_bytes;
}

uint64_t oq_eng_room_left(const oq_engine_t *self)
{
    uint64_t held = oq_eng_held_bytes(self);
    return held < self->config.max_bytes ? self->config.max_bytes - held : 0;
}

/* Bytes forgetting everything remembered would give back: the dispatch
   table down to its smallest (each halving gives back half of what is
   left), and every unique window. */
static uint64_t s_reclaimable(const oq_engine_t *self)
{
    uint64_t windows = oq_unique_count(self->unique) - oq_unique_live_count(self->unique);
    return oq_dedupe_bytes(self->dispatch_ids) + windows * OQ_JOB_KEY_COST_BYTES;
}

bool oq_eng_fits(const oq_engine_t *self, uint64_t need)
{
    return oq_eng_held_bytes(self) - s_reclaimable(self) + need <= self->config.max_bytes;
}

int oq_eng_make_room(oq_engine_t *self, uint64_t need)
{
    uint64_t max = self->config.max_bytes, held = oq_eng_held_bytes(self);
    if (held + need <= max)
        return 0;
    if (!oq_eng_fits(self, need))
        return -1;
    while (held + need > max) {
        if (oq_dedupe_shrink(self->dispatch_ids) == 0 && oq_unique_evict(self->unique) < 0)
            break; /* memory ran out shrinking; the caller refuses */
        held = oq_eng_held_bytes(self);
    }
    oq_eng_memory_note(self);
    return held + need <= max ? 0 : -1;
}

void oq_eng_memory_note(oq_engine_t *self)
{
    int64_t now_ms = oq_clock_wall_ms(self->clock);
    uint64_t ids = oq_dedupe_evicted(self->dispatch_ids);
    if (ids != self->dedupe_evicted_seen) {
        self->dedupe_shrunk_ms = now_ms;
        if (oq_throttle_allow(self->memory_log, "dedupe", 6, now_ms))
            oq_warn("dispatch ids: %llu forgotten before their window ended since start (the "
                    "table is bounded by --max-bytes %llu); the window now held is %.0f s of "
                    "--dedupe-window %.0f s, so a dispatch resent later than that queues a "
                    "second job; raise --max-bytes or lower --dedupe-window",
                    (unsigned long long)ids, (unsigned long long)self->config.max_bytes,
                    oq_engine_dedupe_window_held_ms(self) / 1000.0,
                    self->config.dedupe_window_ms / 1000.0);
        self->dedupe_evicted_seen = ids;
    }
    uint64_t windows = oq_unique_evicted(self->unique);
    if (windows != self->unique_evicted_seen) {
        if (oq_throttle_allow(self->memory_log, "unique", 6, now_ms))
            oq_warn("unique keys: %llu windows forgotten before their end since start, to make "
                    "room under --max-bytes %llu: a dispatch with such a key queues a job again",
                    (unsigned long long)windows, (unsigned long long)self->config.max_bytes);
        self->unique_evicted_seen = windows;
    }
}

/* The window is whole again once no id was forgotten early for a window's
   length: every id sent since is still held. Until then it is the age of
   the oldest id still held (or, with none held, the time since the last
   one was forgotten). */
int64_t oq_engine_dedupe_window_held_ms(const oq_engine_t *self)
{
    int64_t window = self->config.dedupe_window_ms, now_ms = oq_clock_wall_ms(self->clock);
    if (!self->dedupe_shrunk_ms || now_ms - self->dedupe_shrunk_ms >= window)
        return window;
    int64_t oldest = oq_dedupe_oldest_expires(self->dispatch_ids);
    int64_t held = oldest ? now_ms - (oldest - window) : now_ms - self->dedupe_shrunk_ms;
    return held < 0 ? 0 : held > window ? window : held;
}

uint64_t oq_engine_held_bytes(const oq_engine_t *self)
{
    return oq_eng_held_bytes(self);
}

void oq_engine_set_outside_bytes(oq_engine_t *self, uint64_t bytes)
{
    self->outside_bytes = bytes;
}

int oq_eng_memory_init(oq_engine_t *self)
{
    self->memory_log = oq_throttle_new(S_LOG_SLOTS, OQ_MEMORY_LOG_INTERVAL_MS);
    return self->memory_log ? 0 : -1;
}
