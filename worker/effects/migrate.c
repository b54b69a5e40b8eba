/*  migrate.c: apply deploy/sql/NNNN_name.sql in order, once.

    The order of a run: list and check the files first (a malformed name or
    a duplicate version stops everything before the database is touched),
    take the advisory lock, make sure the bookkeeping table exists, read
    what is recorded, then apply each missing file in its own transaction
    with its record. The lock is taken before CREATE TABLE IF NOT EXISTS
    because two sessions creating the same table at once can still collide
    on the catalog's unique index. */
#include "onceq/effects.h"

#include <assert.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects_limits.h"
#include "onceq/log.h"

/* The advisory lock every migrator takes: "onceq" in ASCII, as a bigint. */
#define S_LOCK_KEY "478593377649"
/* NNNN_: the version's digits and the underscore. */
#define S_VERSION_DIGITS 4
#define S_SUFFIX         ".sql"
/* A version number as text. */
#define S_VERSION_TEXT_LEN 12

#define S_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct {
    uint32_t version;
    char file[NAME_MAX + 1]; /* NNNN_name.sql */
    char name[NAME_MAX + 1]; /* name: what onceq_migrations records */
} s_file_t;

typedef struct {
    uint32_t version;
    char *name; /* from the database */
} s_record_t;

/* The body's inputs: one migration. */
typedef struct {
    oq_pg_t *pg;
    const s_file_t *file;
    const char *sql;
} s_apply_t;

/* A migration file name: NNNN_ then lower-case letters, digits and
   underscores, then .sql. Fills file->version and file->name. */
static bool s_parse_name(const char *entry, s_file_t *file)
{
    size_t len = strlen(entry), suffix = strlen(S_SUFFIX);
    if (len <= S_VERSION_DIGITS + 1 + suffix || len > NAME_MAX)
        return false;
    if (strcmp(entry + len - suffix, S_SUFFIX) != 0 || entry[S_VERSION_DIGITS] != '_')
        return false;
    uint32_t version = 0;
    for (size_t i = 0; i < S_VERSION_DIGITS; i++) {
        if (!isdigit((unsigned char)entry[i]))
            return false;
        version = version * 10 + (uint32_t)(entry[i] - '0');
    }
    size_t name_len = len - suffix - S_VERSION_DIGITS - 1;
    const char *name = entry + S_VERSION_DIGITS + 1;
    for (size_t i = 0; i < name_len; i++)
        if (!islower((unsigned char)name[i]) && !isdigit((unsigned char)name[i]) && name[i] != '_')
            return false;
    if (version < 1 || version > OQ_MIGRATE_MAX_VERSION)
        return false;
    file->version = version;
    snprintf(file->file, sizeof file->file, "%s", entry);
    snprintf(file->name, sizeof file->name, "%.*s", (int)name_len, name);
    return true;
}

static int s_by_version(const void *a, const void *b)
{
    const s_file_t *x = a, *y = b;
    return x->version < y->version ? -1 : x->version > y->version;
}

/* The migration files of dir, sorted by version. 0 with *files (caller
   frees) and *count, or -1 with error. */
static int s_list(const char *dir, s_file_t **files, size_t *count, oq_pg_error_t *error)
{
    DIR *d = opendir(dir);
    if (!d) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL, "cannot open the migrations directory %s: %s",
                         dir, strerror(errno));
        return -1;
    }
    s_file_t *list = calloc(OQ_MIGRATE_MAX_FILES, sizeof *list);
    assert(list);
    size_t n = 0;
    int rc = 0;
    struct dirent *entry;
    while (rc == 0 && (entry = readdir(d))) {
        const char *e = entry->d_name;
        size_t len = strlen(e);
        /* Only .sql files are migrations; editor backups and READMEs are
           not. But a .sql file with a bad name is a mistake to report, not
           a file to skip: skipping it would leave the schema behind. */
        if (e[0] == '.' || len < strlen(S_SUFFIX) ||
            strcmp(e + len - strlen(S_SUFFIX), S_SUFFIX) != 0)
            continue;
        if (n == OQ_MIGRATE_MAX_FILES) {
            oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL, "%s holds more than %d migrations", dir,
                             OQ_MIGRATE_MAX_FILES);
            rc = -1;
        } else if (!s_parse_name(e, &list[n])) {
            oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                             "%s/%s: a migration is named NNNN_name.sql (version 0001 to %d; "
                             "name of a-z, 0-9 and _)",
                             dir, e, OQ_MIGRATE_MAX_VERSION);
            rc = -1;
        } else {
            n++;
        }
    }
    closedir(d);
    if (rc == 0) {
        qsort(list, n, sizeof *list, s_by_version);
        for (size_t i = 1; i < n; i++) {
            if (list[i].version == list[i - 1].version) {
                oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL, "%s: %s and %s have one version", dir,
                                 list[i - 1].file, list[i].file);
                rc = -1;
                break;
            }
        }
    }
    if (rc < 0) {
        free(list);
        return -1;
    }
    *files = list;
    *count = n;
    return 0;
}

/* The whole file as a string (caller frees), or NULL with error. */
static char *s_read(const char *dir, const char *file, oq_pg_error_t *error)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    if (!f) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = malloc(OQ_MIGRATE_MAX_FILE_BYTES + 1);
    assert(text);
    size_t n = fread(text, 1, OQ_MIGRATE_MAX_FILE_BYTES + 1, f);
    bool failed = ferror(f) != 0;
    fclose(f);
    if (failed || n > OQ_MIGRATE_MAX_FILE_BYTES || memchr(text, 0, n)) {
        oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL, "cannot read %s: %s", path,
                         failed                          ? "read error"
                         : n > OQ_MIGRATE_MAX_FILE_BYTES ? "larger than 1 MiB"
                                                         : "not a text file");
        free(text);
        return NULL;
    }
    text[n] = 0;
    return text;
}

/* Run a statement that returns nothing of interest. */
static int s_exec(oq_pg_t *pg, const char *sql, int nparams, const char *const *params,
                  oq_pg_error_t *error)
{
    return oq_pg_exec(pg, sql, nparams, params, NULL, error);
}

/* What onceq_migrations records, sorted by version. */
static int s_recorded(oq_pg_t *pg, s_record_t **records, size_t *count, oq_pg_error_t *error)
{
    PGresult *res;
    if (oq_pg_exec(pg, "SELECT version, name FROM onceq_migrations ORDER BY version", 0, NULL, &res,
                   error) < 0)
        return -1;
    size_t n = (size_t)PQntuples(res);
    s_record_t *list = calloc(n + 1, sizeof *list);
    assert(list);
    for (size_t i = 0; i < n; i++) {
        list[i].version = (uint32_t)strtoul(PQgetvalue(res, (int)i, 0), NULL, 10);
        list[i].name = strdup(PQgetvalue(res, (int)i, 1));
        assert(list[i].name);
    }
    PQclear(res);
    *records = list;
    *count = n;
    return 0;
}

static void s_records_free(s_record_t *records, size_t count)
{
    for (size_t i = 0; records && i < count; i++)
        free(records[i].name);
    free(records);
}

static const s_record_t *s_find(const s_record_t *records, size_t count, uint32_t version)
{
    for (size_t i = 0; i < count; i++)
        if (records[i].version == version)
            return &records[i];
    return NULL;
}

/* The transaction body: the file's statements and its record. */
static int s_apply(oq_txn_t *txn, void *arg, oq_pg_error_t *error)
{
    s_apply_t *apply = arg;
    if (oq_pg_exec_script(apply->pg, apply->sql, error) < 0) {
        /* Copies: oq_pg_errors_set writes where they are read from. */
        oq_pg_error_t cause = *error;
        oq_pg_errors_set(error, cause.cls, cause.sqlstate, "%s: %s", apply->file->file,
                         cause.message);
        return -1;
    }
    char version[S_VERSION_TEXT_LEN];
    snprintf(version, sizeof version, "%" PRIu32, apply->file->version);
    const char *params[] = {version, apply->file->name};
    return s_exec(apply->pg, "INSERT INTO onceq_migrations (version, name) VALUES ($1, $2)",
                  S_COUNT(params), params, error);
}

/* Apply what is missing, under the lock. */
static int s_migrate(oq_pg_t *pg, const char *dir, const s_file_t *files, size_t count,
                     oq_migrate_report_fn report, void *ctx, uint32_t *applied, uint32_t *latest,
                     oq_pg_error_t *error)
{
    if (s_exec(pg,
               "CREATE TABLE IF NOT EXISTS onceq_migrations ("
               "version integer PRIMARY KEY, "
               "name text NOT NULL, "
               "applied_at timestamptz NOT NULL DEFAULT now())",
               0, NULL, error) < 0)
        return -1;
    s_record_t *records = NULL;
    size_t record_count = 0;
    if (s_recorded(pg, &records, &record_count, error) < 0)
        return -1;
    if (record_count > 0)
        *latest = records[record_count - 1].version;

    oq_txn_t *txn = oq_txn_new(oq_txn_pg_ops(), pg, OQ_TXN_READ_COMMITTED);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < count; i++) {
        const s_file_t *file = &files[i];
        const s_record_t *record = s_find(records, record_count, file->version);
        if (record) {
            /* A version recorded under another name means the files were
               renumbered after the database was migrated: stop rather than
               guess which schema this is. */
            if (strcmp(record->name, file->name) != 0) {
                oq_pg_errors_set(error, OQ_PG_ERR_FAIL, NULL,
                                 "migration %04" PRIu32
                                 " is recorded as \"%s\" but the file is %s/%s",
                                 file->version, record->name, dir, file->file);
                rc = -1;
            }
            continue;
        }
        char *sql = s_read(dir, file->file, error);
        if (!sql) {
            rc = -1;
            break;
        }
        s_apply_t apply = {pg, file, sql};
        rc = oq_txn_run(txn, s_apply, &apply, error);
        free(sql);
        if (rc == 0) {
            oq_debug("applied migration %s", file->file);
            (*applied)++;
            if (file->version > *latest)
                *latest = file->version;
            if (report)
                report(ctx, file->version, file->name);
        }
    }
    oq_txn_destroy(&txn);
    s_records_free(records, record_count);
    return rc;
}

int oq_migrate_run(oq_pg_t *pg, const char *dir, oq_migrate_report_fn report, void *ctx,
                   uint32_t *applied, uint32_t *latest, oq_pg_error_t *error)
{
    assert(pg && dir && applied && latest && error);
    oq_pg_errors_clear(error);
    *applied = 0;
    *latest = 0;
    s_file_t *files;
    size_t count;
    if (s_list(dir, &files, &count, error) < 0)
        return -1;
    const char *key[] = {S_LOCK_KEY};
    int rc = s_exec(pg, "SELECT pg_advisory_lock($1::bigint)", S_COUNT(key), key, error);
    if (rc == 0) {
        rc = s_migrate(pg, dir, files, count, report, ctx, applied, latest, error);
        /* Session locks end with the session too; unlocking keeps a
           long-lived connection (tests) from holding it. */
        oq_pg_error_t unlock_error;
        if (oq_pg_connected(pg) && s_exec(pg, "SELECT pg_advisory_unlock($1::bigint)", S_COUNT(key),
                                          key, &unlock_error) < 0)
            oq_warn("cannot release the migration lock: %s", unlock_error.message);
    }
    free(files);
    return rc;
}
