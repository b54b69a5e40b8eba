/*  cli_db.h: what the database subcommands of the onceq tool (db, customer,
    grant, balance) share: opening the connection named by --database or
    ONCEQ_DATABASE_URL, and reporting a database error with the exit code of
    its class. They run the same calls the worker runs: the effects SDK
    (onceq/effects.h) and the points library. */
#ifndef ONCEQ_CLI_DB_H
#define ONCEQ_CLI_DB_H

#include <stdint.h>

#include "cli.h"
#include "onceq/effects.h"

/* How long the grant, customer and balance commands wait for the
   database. */
#define OQ_CLI_DB_TIMEOUT_MS 30000

/* Connect to the database now, so that a wrong URL is the first thing
   said. timeout_ms bounds every statement that follows (0: no bound).
   OQ_CLI_EXIT_OK with *pg (caller destroys it), or OQ_CLI_EXIT_NO_REPLY
   after printing why. */
int oq_cli_db_open(const oq_cli_t *cli, int64_t timeout_ms, oq_pg_t **pg);

/* Print "onceq: <what>: <message>" and return the exit code for the
   error's class: OQ_CLI_EXIT_NO_REPLY when the connection failed or was
   lost, OQ_CLI_EXIT_REFUSED otherwise. */
int oq_cli_db_report(const oq_cli_t *cli, const char *what, const oq_pg_error_t *error);

/* Parse an id (customer, order): an integer from 1 to INT64_MAX. 0 or -1. */
int oq_cli_db_parse_id(const char *text, int64_t *out);

#endif
