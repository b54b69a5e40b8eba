/*  once.c: the once-guard over the table onceq_once (scope, key, job_id,
    created_at, PRIMARY KEY (scope, key)) of deploy/sql/0002_once.sql.

    Why an INSERT and not a SELECT first: the row is the lock on the effect.
    INSERT ... ON CONFLICT DO NOTHING either takes the key, and this
    transaction owns the effect, or finds it taken. Under READ COMMITTED an
    INSERT that meets another transaction's uncommitted row with the same
    key waits for that transaction and then reports 0 rows if it committed
    (or inserts, if it rolled back); under REPEATABLE READ and SERIALIZABLE
    a conflict with a row the snapshot cannot see is a serialization
    failure, which the runner re-runs with a fresh snapshot. A
    check-then-insert would leave a window in which two runs both see "not
    yet". */
#include "once.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A job id as text: at most 19 digits. */
#define S_ID_TEXT_LEN 24
/* Bytes of an over-long value quoted in the error. */
#define S_QUOTE_LEN 32

#define S_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* 0 if value is 1 to max bytes, else -1 with the error naming it. */
static int s_check_text(const char *what, const char *value, size_t max, oq_pg_error_t *error)
{
    if (!value || !value[0]) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "once-guard %s is empty: it must be 1 to %zu "
                         "bytes",
                         what, max);
        return -1;
    }
    size_t len = strlen(value);
    if (len > max) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "once-guard %s \"%.*s...\" is %zu bytes: it must be 1 to %zu bytes", what,
                         S_QUOTE_LEN, value, len, max);
        return -1;
    }
    return 0;
}

int oq_once_check(const char *scope, const char *key, uint64_t job_id, oq_pg_error_t *error)
{
    if (s_check_text("scope", scope, OQ_ONCE_MAX_SCOPE_LEN, error) < 0 ||
        s_check_text("key", key, OQ_ONCE_MAX_KEY_LEN, error) < 0)
        return -1;
    if (job_id > (uint64_t)INT64_MAX) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "once-guard job id %" PRIu64 " does not fit a bigint", job_id);
        return -1;
    }
    return 0;
}

int oq_once_pg(void *db, const char *scope, const char *key, uint64_t job_id, bool *applied,
               oq_pg_error_t *error)
{
    assert(db);
    char id[S_ID_TEXT_LEN];
    snprintf(id, sizeof id, "%" PRIu64, job_id);
    const char *params[] = {scope, key, job_id ? id : NULL};
    PGresult *res;
    if (oq_pg_exec(db,
                   "INSERT INTO onceq_once (scope, key, job_id) VALUES ($1, $2, $3) "
                   "ON CONFLICT (scope, key) DO NOTHING",
                   S_COUNT(params), params, &res, error) < 0)
        return -1;
    *applied = strtol(PQcmdTuples(res), NULL, 10) == 1;
    PQclear(res);
    return 0;
}
