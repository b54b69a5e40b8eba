/*  cmd_customer.c: `onceq customer add ID [--balance N]`: give a customer
    the balance row that grants need. A customer's row exists from
    registration on; grants never create one. Adding a customer that exists
    is not an error (so a setup script can run twice): it is reported, and
    the existing balance is left alone. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_db.h"
#include "points/ledger_pg.h"

static void s_help(void)
{
    printf("Usage: onceq customer add ID [--balance N]\n"
           "\n"
           "Create customer ID's point balance row, with balance N (default 0). A\n"
           "customer who has one already keeps it unchanged; that is reported, and is\n"
           "not an error.\n"
           "\n"
           "Options:\n"
           "  --balance N        the opening balance, 0 or more (default 0)\n"
           "  --database URL     libpq conninfo or URI (env %s, default: libpq's\n"
           "                     defaults)\n"
           "  -h, --help         show this help\n"
           "\n"
           "Exit status 0 added or present, 1 the database refused, 2 bad command line,\n"
           "3 no connection to the database.\n",
           OQ_CLI_ENV_DATABASE);
}

int oq_cmd_customer(oq_cli_t *cli, int argc, char **argv)
{
    enum { S_OPT_BALANCE = OQ_CLI_OPT_FIRST_FREE_ };
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"balance", required_argument, NULL, S_OPT_BALANCE},
        {NULL, 0, NULL, 0},
    };
    const char *balance_text = NULL;
    int opt, stop;
    while ((opt = oq_cli_next_option(cli, argc, argv, options, s_help, &stop)) != -1) {
        if (opt == OQ_CLI_OPT_STOP)
            return stop;
        if (opt == S_OPT_BALANCE)
            balance_text = optarg;
    }
    if (optind >= argc)
        return oq_cli_usage_error(cli, "no action given (expected: add ID)");
    if (strcmp(argv[optind], "add") != 0)
        return oq_cli_usage_error(cli, "unknown action '%s' (expected: add ID)", argv[optind]);
    if (optind + 1 >= argc)
        return oq_cli_usage_error(cli, "customer add: no customer ID given");
    if (optind + 2 < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind + 2]);
    int64_t customer_id, balance = 0;
    if (oq_cli_db_parse_id(argv[optind + 1], &customer_id) < 0)
        return oq_cli_usage_error(cli, "customer ID '%s' must be a positive integer",
                                  argv[optind + 1]);
    if (balance_text && oq_cli_parse_int(balance_text, 0, INT64_MAX, &balance) < 0)
        return oq_cli_usage_error(cli, "--balance '%s' must be an integer, 0 or more",
                                  balance_text);

    oq_pg_t *pg = NULL;
    int rc = oq_cli_db_open(cli, OQ_CLI_DB_TIMEOUT_MS, &pg);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    oq_ledger_t *ledger = oq_ledger_pg_new(pg);
    oq_pg_error_t error;
    bool created, found = false;
    int64_t existing = 0;
    if (oq_ledger_add_customer(ledger, customer_id, balance, &created, &error) < 0 ||
        (!created && oq_ledger_get_balance(ledger, customer_id, &existing, &found, &error) < 0)) {
        rc = oq_cli_db_report(cli, "customer add", &error);
    } else if (created) {
        printf("added customer %" PRId64 " with balance %" PRId64 "\n", customer_id, balance);
    } else {
        printf("customer %" PRId64 " exists already, balance %" PRId64 " (unchanged)\n",
               customer_id, existing);
    }
    oq_ledger_destroy(&ledger);
    oq_pg_destroy(&pg);
    return rc;
}
