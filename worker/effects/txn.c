/*  txn.c: the transaction runner.

    Why re-run in place: 40001 and 40P01 are the server's way of saying "two
    transactions collided and I picked yours to roll back". Nothing was
    written, the connection is fine, and the same transaction run again a
    moment later will most likely pass. Going back to the broker for that
    would cost a backoff step of seconds and an attempt out of max_tries.

    Why a jittered pause: two workers whose transactions collided and who
    both retry at once collide again. Each pause is drawn from the upper
    half of an interval that doubles per re-run ("equal jitter"), so the
    retries spread out but never come back instantly. */
#include "onceq/effects.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "once.h"
#include "onceq/clock.h"
#include "onceq/log.h"

#define S_NS_PER_MS 1000000L
#define S_MS_PER_S  1000

struct oq_txn {
    const oq_txn_ops_t *ops;      /* begin, commit, rollback on db */
    void *db;                     /* borrowed */
    oq_txn_isolation_t isolation; /* of every transaction this runner begins */
    oq_txn_sleep_fn sleep;        /* between re-runs */
    void *sleep_ctx;
    uint64_t random;   /* xorshift64 state for the jitter; never 0 */
    uint32_t attempts; /* of the last run */
    bool active;       /* a body runs: the transaction is open */
};

/* BEGIN statements, indexed by oq_txn_isolation_t, and their names. */
static const struct {
    const char *name;
    const char *begin_sql;
} s_levels[] = {
    [OQ_TXN_READ_COMMITTED] = {"read-committed", "BEGIN ISOLATION LEVEL READ COMMITTED"},
    [OQ_TXN_REPEATABLE_READ] = {"repeatable-read", "BEGIN ISOLATION LEVEL REPEATABLE READ"},
    [OQ_TXN_SERIALIZABLE] = {"serializable", "BEGIN ISOLATION LEVEL SERIALIZABLE"},
};

#define S_LEVEL_COUNT (sizeof s_levels / sizeof s_levels[0])

static void s_sleep_ms(void *ctx, uint32_t ms)
{
    struct timespec pause = {.tv_sec = ms / S_MS_PER_S,
                             .tv_nsec = (long)(ms % S_MS_PER_S) * S_NS_PER_MS};
    while (nanosleep(&pause, &pause) < 0 && errno == EINTR)
        ;
}

oq_txn_t *oq_txn_new(const oq_txn_ops_t *ops, void *db, oq_txn_isolation_t isolation)
{
    assert(ops && ops->begin && ops->commit && ops->rollback);
    assert((size_t)isolation < S_LEVEL_COUNT);
    oq_txn_t *self = calloc(1, sizeof *self);
    assert(self);
    self->ops = ops;
    self->db = db;
    self->isolation = isolation;
    self->sleep = s_sleep_ms;
    /* Workers forked from one supervisor must not draw the same pauses. */
    self->random = ((uint64_t)getpid() << 32) ^ (uint64_t)oq_clock_mono_us();
    if (self->random == 0)
        self->random = 1;
    return self;
}

void oq_txn_destroy(oq_txn_t **self_p)
{
    assert(self_p);
    free(*self_p);
    *self_p = NULL;
}

void oq_txn_set_sleep(oq_txn_t *self, oq_txn_sleep_fn fn, void *ctx)
{
    assert(self && fn);
    self->sleep = fn;
    self->sleep_ctx = ctx;
}

static uint64_t s_random(oq_txn_t *self)
{
    uint64_t x = self->random;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    self->random = x;
    return x;
}

/* The pause before re-run number `rerun` (1 for the first). */
static uint32_t s_pause_ms(oq_txn_t *self, uint32_t rerun)
{
    uint32_t cap = OQ_TXN_BACKOFF_BASE_MS;
    for (uint32_t i = 1; i < rerun && cap < OQ_TXN_BACKOFF_MAX_MS; i++)
        cap *= 2;
    if (cap > OQ_TXN_BACKOFF_MAX_MS)
        cap = OQ_TXN_BACKOFF_MAX_MS;
    return cap / 2 + (uint32_t)(s_random(self) % (cap / 2 + 1));
}

int oq_txn_run(oq_txn_t *self, oq_txn_body_fn body, void *ctx, oq_pg_error_t *error)
{
    assert(self && body && error);
    self->attempts = 0;
    for (;;) {
        self->attempts++;
        oq_pg_errors_clear(error);
        int rc = self->ops->begin(self->db, self->isolation, error);
        if (rc == 0) {
            self->active = true;
            rc = body(self, ctx, error);
            self->active = false;
            if (rc == 0)
                rc = self->ops->commit(self->db, error);
            /* After a failed body, end the transaction; after a failed
               COMMIT the server has ended it already, unless COMMIT never
               left (then this ends it). */
            if (rc < 0)
                self->ops->rollback(self->db);
        }
        if (rc == 0)
            return 0;
        if (error->cls == OQ_PG_ERR_NONE) {
            /* A body that rolled back without saying why is a bug in the
               body; keep the job out of a retry loop. */
            oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                             "the transaction was rolled back without a reason");
        }
        if (error->cls != OQ_PG_ERR_RETRY_TXN)
            return -1;
        if (self->attempts > OQ_TXN_MAX_RETRIES) {
            /* A copy: oq_pg_errors_set writes where it would read. */
            oq_pg_error_t cause = *error;
            oq_pg_errors_set(error, OQ_PG_ERR_TRANSIENT, cause.sqlstate,
                             "%s (still failing after %u runs of the transaction)", cause.message,
                             self->attempts);
            return -1;
        }
        uint32_t pause_ms = s_pause_ms(self, self->attempts);
        /* Info, not debug: how often transactions collide is worth seeing
           when choosing an isolation level. */
        oq_info("transaction rolled back by the server (SQLSTATE %s: %s); running it again in "
                "%u ms (run %u of at most %d)",
                error->sqlstate, error->message, pause_ms, self->attempts + 1,
                OQ_TXN_MAX_RETRIES + 1);
        self->sleep(self->sleep_ctx, pause_ms);
    }
}

uint32_t oq_txn_attempts(const oq_txn_t *self)
{
    assert(self);
    return self->attempts;
}

bool oq_txn_active(const oq_txn_t *self)
{
    assert(self);
    return self->active;
}

oq_pg_t *oq_txn_pg(const oq_txn_t *self)
{
    assert(self);
    return self->ops == oq_txn_pg_ops() ? self->db : NULL;
}

int oq_once(oq_txn_t *txn, const char *scope, const char *key, uint64_t job_id, bool *applied,
            oq_pg_error_t *error)
{
    assert(txn && applied && error);
    oq_pg_errors_clear(error);
    *applied = false;
    /* Outside a transaction the row would commit on its own, apart from
       the effect it guards: the two must commit together or not at all. */
    if (!txn->active) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "the once-guard must be taken inside a transaction body (oq_txn_run)");
        return -1;
    }
    if (oq_once_check(scope, key, job_id, error) < 0)
        return -1;
    if (!txn->ops->once) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "this transaction's database has no once-guard (its oq_txn_ops_t has no "
                         "once)");
        return -1;
    }
    return txn->ops->once(txn->db, scope, key, job_id, applied, error);
}

int oq_txn_isolation_parse(const char *text, oq_txn_isolation_t *out)
{
    for (size_t i = 0; text && i < S_LEVEL_COUNT; i++) {
        if (strcmp(text, s_levels[i].name) == 0) {
            *out = (oq_txn_isolation_t)i;
            return 0;
        }
    }
    return -1;
}

const char *oq_txn_isolation_name(oq_txn_isolation_t isolation)
{
    assert((size_t)isolation < S_LEVEL_COUNT);
    return s_levels[isolation].name;
}

/* ---- the PostgreSQL ops ---------------------------------------------- */

static int s_pg_begin(void *db, oq_txn_isolation_t isolation, oq_pg_error_t *error)
{
    assert((size_t)isolation < S_LEVEL_COUNT);
    return oq_pg_begin(db, s_levels[isolation].begin_sql, error);
}

static int s_pg_commit(void *db, oq_pg_error_t *error)
{
    return oq_pg_commit(db, error);
}

static void s_pg_rollback(void *db)
{
    oq_pg_rollback(db);
}

const oq_txn_ops_t *oq_txn_pg_ops(void)
{
    static const oq_txn_ops_t ops = {
        .begin = s_pg_begin,
        .commit = s_pg_commit,
        .rollback = s_pg_rollback,
        .once = oq_once_pg,
    };
    return &ops;
}
