/*  pg_fixture.h: a PostgreSQL cluster of a test program's own, for the unit
    tests that need a real server (test_pg, test_once, test_retention,
    test_batch_pg): deploy/pg.sh starts it in a fresh temp dir on a random
    port, which also applies the migrations with the onceq tool of the
    build, and the fixture keeps one admin connection to it for the test's
    own checks. One cluster a process: the fixture's state is file-local.
    cmocka is its framework: a failed query fails the test. */
#ifndef ONCEQ_TEST_PG_FIXTURE_H
#define ONCEQ_TEST_PG_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "onceq/effects.h"

/* A cmocka group setup: start the cluster in /tmp/onceq-NAME-XXXXXX, NAME
   the test program's (a few ports are tried), and connect with NAME as the
   application name. 0, or -1 with a message on stderr naming the
   cluster's log. */
int oq_pg_fixture_group_setup(void **state);

/* A cmocka group teardown: close the connection, stop the cluster and
   remove its directory and log. 0 or -1. */
int oq_pg_fixture_group_teardown(void **state);

/* The admin connection (borrowed). */
oq_pg_t *oq_pg_fixture_admin(void);

/* The conninfo of database onceq as user onceq (borrowed). */
const char *oq_pg_fixture_url(void);

/* The conninfo of database db as user user into out. */
void oq_pg_fixture_url_as(const char *db, const char *user, char *out, size_t len);

/* Run sql on the admin connection; fails the test on an error. */
void oq_pg_fixture_sql(const char *sql);

/* The integer in the first row and column of sql's result (NULL as 0);
   fails the test on an error. */
int64_t oq_pg_fixture_sql_int(const char *sql);

#endif
