/*  cmd_balance.c: `onceq balance CUSTOMER`: a customer's point balance, as a
    bare number on stdout so that scripts can read it. */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"
#include "cli_db.h"
#include "points/ledger_pg.h"

static void s_help(void)
{
    printf("Usage: onceq balance CUSTOMER\n"
           "\n"
           "Print customer CUSTOMER's point balance (a number alone on its line).\n"
           "\n"
           "Options:\n"
           "  --database URL     libpq conninfo or URI (env %s, default: libpq's\n"
           "                     defaults)\n"
           "  -h, --help         show this help\n"
           "\n"
           "Exit status 0 printed, 1 no such customer or the database refused, 2 bad\n"
           "command line, 3 no connection to the database.\n",
           OQ_CLI_ENV_DATABASE);
}

int oq_cmd_balance(oq_cli_t *cli, int argc, char **argv)
{
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    int stop; /* only the global options: none comes back */
    if (oq_cli_next_option(cli, argc, argv, options, s_help, &stop) == OQ_CLI_OPT_STOP)
        return stop;
    if (optind >= argc)
        return oq_cli_usage_error(cli, "no customer given");
    if (optind + 1 < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind + 1]);
    int64_t customer_id;
    if (oq_cli_db_parse_id(argv[optind], &customer_id) < 0)
        return oq_cli_usage_error(cli, "customer '%s' must be a positive integer", argv[optind]);

    oq_pg_t *pg = NULL;
    int rc = oq_cli_db_open(cli, OQ_CLI_DB_TIMEOUT_MS, &pg);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    oq_ledger_t *ledger = oq_ledger_pg_new(pg);
    oq_pg_error_t error;
    bool found;
    int64_t balance;
    if (oq_ledger_get_balance(ledger, customer_id, &balance, &found, &error) < 0) {
        rc = oq_cli_db_report(cli, "balance", &error);
    } else if (!found) {
        fprintf(stderr,
                "onceq: customer %" PRId64 " has no balance row (add it with: onceq customer add "
                "%" PRId64 ")\n",
                customer_id, customer_id);
        rc = OQ_CLI_EXIT_REFUSED;
    } else {
        printf("%" PRId64 "\n", balance);
    }
    oq_ledger_destroy(&ledger);
    oq_pg_destroy(&pg);
    return rc;
}
