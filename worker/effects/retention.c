/*  retention.c: deleting old guard rows in batches.

    The cutoff is read from the database once (now() - the window), so
    every batch deletes against the same instant and a long prune does not
    chase rows that age while it runs. A batch is one DELETE of at most
    OQ_PRUNE_BATCH_ROWS rows picked by ctid, on its own: its row locks are
    held for one short statement, never for the whole prune, and a prune
    stopped half way has done part of the work and nothing wrong.

    Names go into the SQL text (they cannot be bound parameters), so they
    are checked to be plain identifiers first; values and the window are
    bound parameters. */
#include "onceq/retention.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest table or column name taken (PostgreSQL's NAMEDATALEN - 1). */
#define S_MAX_NAME_LEN 63
/* Filter values at most (a status list). */
#define S_MAX_VALUES 8
/* Room for one statement with its names and placeholders. */
#define S_SQL_LEN 1024
/* A timestamp as text (the cutoff). */
#define S_TIME_TEXT_LEN 64

static const char *const s_once_columns[] = {"created_at", NULL};
static const oq_prune_table_t s_once_table = {"onceq_once", s_once_columns, NULL, NULL, false};

const oq_prune_table_t *oq_prune_once_table(void)
{
    return &s_once_table;
}

static bool s_identifier(const char *name)
{
    if (!name || !name[0] || strlen(name) > S_MAX_NAME_LEN)
        return false;
    if (!((name[0] >= 'a' && name[0] <= 'z') || name[0] == '_'))
        return false;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return false;
    return true;
}

static int s_check_spec(const oq_prune_table_t *t, oq_pg_error_t *error)
{
    bool ok = s_identifier(t->table) && t->time_columns && t->time_columns[0] &&
              (!t->filter || (s_identifier(t->filter) && t->values && t->values[0]));
    for (int i = 0; ok && t->time_columns[i]; i++)
        ok = s_identifier(t->time_columns[i]);
    int values = 0;
    while (ok && t->filter && t->values[values])
        values++;
    if (!ok || values > S_MAX_VALUES) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "prune: table \"%s\": its table and column names must be plain "
                         "lower-case identifiers, with at least one time column and at most "
                         "%d filter values",
                         t->table ? t->table : "", S_MAX_VALUES);
        return -1;
    }
    return 0;
}

/* Run a query whose answer is one text value into out. 0 or -1. */
static int s_query_text(oq_pg_t *pg, const char *sql, int nparams, const char *const *params,
                        char *out, size_t out_len, oq_pg_error_t *error)
{
    PGresult *res;
    if (oq_pg_exec(pg, sql, nparams, params, &res, error) < 0)
        return -1;
    bool ok = PQntuples(res) == 1 && PQnfields(res) == 1;
    snprintf(out, out_len, "%s", ok && !PQgetisnull(res, 0, 0) ? PQgetvalue(res, 0, 0) : "");
    PQclear(res);
    if (!ok) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL, "prune: unexpected answer to \"%s\"", sql);
        return -1;
    }
    return 0;
}

/* Does the table exist (*exists), and has it the column (NULL: not asked)? */
static int s_has(oq_pg_t *pg, const char *table, const char *column, bool *yes,
                 oq_pg_error_t *error)
{
    char answer[8];
    int rc;
    if (!column) {
        const char *params[] = {table};
        rc = s_query_text(pg, "SELECT to_regclass($1) IS NOT NULL", 1, params, answer,
                          sizeof answer, error);
    } else {
        const char *params[] = {table, column};
        rc = s_query_text(pg,
                          "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "
                          "to_regclass($1) AND attname = $2 AND attnum > 0 AND NOT attisdropped)",
                          2, params, answer, sizeof answer, error);
    }
    *yes = rc == 0 && strcmp(answer, "t") == 0;
    return rc;
}

static void s_skip(oq_prune_result_t *result, const char *format, const char *a, const char *b)
    __attribute__((format(printf, 2, 0)));
static void s_skip(oq_prune_result_t *result, const char *format, const char *a, const char *b)
{
    result->skipped = true;
    snprintf(result->reason, sizeof result->reason, format, a, b);
}

/* Pick the time column, check the filter column: 0 and result->skipped
   unset if the prune can go on. */
static int s_columns(oq_pg_t *pg, const oq_prune_table_t *t, oq_prune_result_t *result,
                     oq_pg_error_t *error)
{
    bool yes;
    if (s_has(pg, t->table, NULL, &yes, error) < 0)
        return -1;
    if (!yes) {
        if (t->optional) {
            s_skip(result, "no table %s in this database%s", t->table, "");
            return 0;
        }
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "prune: table %s does not exist (are the migrations applied? 'onceq db "
                         "migrate')",
                         t->table);
        return -1;
    }
    for (int i = 0; t->time_columns[i]; i++) {
        if (s_has(pg, t->table, t->time_columns[i], &yes, error) < 0)
            return -1;
        if (yes) {
            result->time_column = t->time_columns[i];
            break;
        }
    }
    if (!result->time_column) {
        s_skip(result, "table %s has no time column (looked for %s and the others listed)",
               t->table, t->time_columns[0]);
        return 0;
    }
    if (t->filter) {
        if (s_has(pg, t->table, t->filter, &yes, error) < 0)
            return -1;
        if (!yes)
            s_skip(result, "table %s has no column %s", t->table, t->filter);
    }
    return 0;
}

/* The WHERE condition: time column before $1, filter column in $2 ... */
static int s_condition(const oq_prune_table_t *t, const char *column, char *out, size_t out_len)
{
    int n = snprintf(out, out_len, "%s < $1::timestamptz", column);
    int params = 1;
    if (t->filter) {
        n += snprintf(out + n, out_len - (size_t)n, " AND %s IN (", t->filter);
        for (int i = 0; t->values[i]; i++)
            n += snprintf(out + n, out_len - (size_t)n, "%s$%d", i ? ", " : "", ++params);
        n += snprintf(out + n, out_len - (size_t)n, ")");
    }
    return params;
}

int oq_prune(oq_pg_t *pg, const oq_prune_table_t *table, int64_t older_than_s, bool dry_run,
             oq_prune_result_t *result, oq_pg_error_t *error)
{
    assert(pg && table && result && error);
    memset(result, 0, sizeof *result);
    oq_pg_errors_clear(error);
    if (s_check_spec(table, error) < 0)
        return -1;
    if (older_than_s < 1) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                         "prune: the window must be at least 1 second, not %" PRId64, older_than_s);
        return -1;
    }
    if (s_columns(pg, table, result, error) < 0 || result->skipped)
        return result->skipped ? 0 : -1;

    char seconds[32], cutoff[S_TIME_TEXT_LEN];
    snprintf(seconds, sizeof seconds, "%" PRId64, older_than_s);
    const char *window[] = {seconds};
    if (s_query_text(pg, "SELECT (now() - make_interval(secs => $1::double precision))::text", 1,
                     window, cutoff, sizeof cutoff, error) < 0)
        return -1;

    const char *params[1 + S_MAX_VALUES] = {cutoff};
    char condition[S_SQL_LEN / 2];
    int nparams = s_condition(table, result->time_column, condition, sizeof condition);
    for (int i = 1; i < nparams; i++)
        params[i] = table->values[i - 1];
    char sql[S_SQL_LEN];
    PGresult *res;
    if (dry_run) {
        snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE %s", table->table, condition);
        if (oq_pg_exec(pg, sql, nparams, params, &res, error) < 0)
            return -1;
        result->rows = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        return 0;
    }
    snprintf(sql, sizeof sql,
             "DELETE FROM %s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %s WHERE %s LIMIT %d))",
             table->table, table->table, condition, OQ_PRUNE_BATCH_ROWS);
    for (;;) {
        if (oq_pg_exec(pg, sql, nparams, params, &res, error) < 0)
            return -1;
        uint64_t deleted = strtoull(PQcmdTuples(res), NULL, 10);
        PQclear(res);
        result->rows += deleted;
        if (deleted < OQ_PRUNE_BATCH_ROWS)
            return 0;
    }
}
