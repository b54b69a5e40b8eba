/*  cli_db.c: helpers of the onceq tool's database subcommands. */
#include "cli_db.h"

#include <stdio.h>

#include "onceq/config.h"

/* What pg_stat_activity shows for the tool's sessions. */
#define S_APPLICATION_NAME "onceq"

int oq_cli_db_open(const oq_cli_t *cli, int64_t timeout_ms, oq_pg_t **pg)
{
    const char *url = oq_config_str(cli->database, OQ_CLI_ENV_DATABASE, "");
    *pg = oq_pg_new(url, S_APPLICATION_NAME);
    oq_pg_set_timeout(*pg, timeout_ms);
    oq_pg_error_t error;
    if (oq_pg_connect(*pg, &error) == 0)
        return OQ_CLI_EXIT_OK;
    fprintf(stderr, "onceq: %s\n", error.message);
    if (!cli->database && !url[0])
        fprintf(stderr, "onceq: (no --database and no %s: libpq's defaults were used)\n",
                OQ_CLI_ENV_DATABASE);
    oq_pg_destroy(pg);
    return OQ_CLI_EXIT_NO_REPLY;
}

int oq_cli_db_report(const oq_cli_t *cli, const char *what, const oq_pg_error_t *error)
{
    if (error->sqlstate[0])
        fprintf(stderr, "onceq: %s: %s (SQLSTATE %s)\n", what, error->message, error->sqlstate);
    else
        fprintf(stderr, "onceq: %s: %s\n", what, error->message);
    const char *hint = oq_pg_errors_hint(error);
    if (hint)
        fprintf(stderr, "onceq: %s\n", hint);
    return error->cls == OQ_PG_ERR_CONNECTION || error->cls == OQ_PG_ERR_UNKNOWN
               ? OQ_CLI_EXIT_NO_REPLY
               : OQ_CLI_EXIT_REFUSED;
}

int oq_cli_db_parse_id(const char *text, int64_t *out)
{
    return oq_cli_parse_int(text, 1, INT64_MAX, out);
}
