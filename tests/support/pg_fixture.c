/*  pg_fixture.c: one PostgreSQL cluster a test program, started with
    deploy/pg.sh. */
#include "pg_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "support.h"

#ifndef ONCEQ_SOURCE_DIR
#error "ONCEQ_SOURCE_DIR must name the source tree"
#endif
#ifndef ONCEQ_CLI
#error "ONCEQ_CLI must name the onceq binary"
#endif

#define S_PORT_BASE   20000
#define S_PORT_RANGE  30000
#define S_START_TRIES 3
#define S_TEXT_LEN    1024

static char s_dir[256];  /* the cluster's directory */
static int s_port;       /* its port */
static char s_url[512];  /* conninfo of database onceq */
static oq_pg_t *s_admin; /* the test's own connection, for checks */

/* deploy/pg.sh ACTION on our cluster, its output appended to DIR.log. */
static int s_pg_sh(const char *action)
{
    char cmd[S_TEXT_LEN];
    snprintf(cmd, sizeof cmd,
             "ONCEQ_BIN='%s' ONCEQ_PG_PORT=%d bash '%s/deploy/pg.sh' %s '%s' >>'%s.log' 2>&1",
             ONCEQ_CLI, s_port, ONCEQ_SOURCE_DIR, action, s_dir, s_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int oq_pg_fixture_group_setup(void **state)
{
    (void)state;
    const char *name = program_invocation_short_name;
    /* Under /tmp whatever TMPDIR says: the server's socket lives in the
       directory, and a socket's path has a short limit. */
    snprintf(s_dir, sizeof s_dir, "/tmp/onceq-%s-XXXXXX", name);
    if (!mkdtemp(s_dir)) {
        fprintf(stderr, "%s: no temp dir for the cluster\n", name);
        return -1;
    }
    srand((unsigned)(getpid() ^ time(NULL)));
    for (int i = 0; i < S_START_TRIES; i++) {
        s_port = S_PORT_BASE + rand() % S_PORT_RANGE;
        if (s_pg_sh("start") == 0) {
            oq_support_pg_url(s_dir, s_port, s_url, sizeof s_url);
            s_admin = oq_pg_new(s_url, name);
            oq_pg_error_t error;
            if (!s_admin || oq_pg_connect(s_admin, &error) < 0) {
                fprintf(stderr, "%s: %s\n", name, s_admin ? error.message : "out of memory");
                return -1;
            }
            return 0;
        }
        s_pg_sh("stop");
    }
    fprintf(stderr, "%s: could not start a cluster; see %s.log\n", name, s_dir);
    return -1;
}

int oq_pg_fixture_group_teardown(void **state)
{
    (void)state;
    oq_pg_destroy(&s_admin);
    s_pg_sh("stop");
    char log[sizeof s_dir + 8];
    snprintf(log, sizeof log, "%s.log", s_dir);
    int rc = oq_support_remove_tree(s_dir);
    if (unlink(log) < 0)
        rc = -1;
    return rc;
}

oq_pg_t *oq_pg_fixture_admin(void)
{
    return s_admin;
}

const char *oq_pg_fixture_url(void)
{
    return s_url;
}

void oq_pg_fixture_url_as(const char *db, const char *user, char *out, size_t len)
{
    snprintf(out, len, "host=%s port=%d dbname=%s user=%s", s_dir, s_port, db, user);
}

void oq_pg_fixture_sql(const char *sql)
{
    oq_pg_error_t error;
    if (oq_pg_exec(s_admin, sql, 0, NULL, NULL, &error) < 0)
        fail_msg("%s: %s", sql, error.message);
}

int64_t oq_pg_fixture_sql_int(const char *sql)
{
    oq_pg_error_t error;
    PGresult *res;
    if (oq_pg_exec(s_admin, sql, 0, NULL, &res, &error) < 0)
        fail_msg("%s: %s", sql, error.message);
    int64_t v = PQgetisnull(res, 0, 0) ? 0 : strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return v;
}
