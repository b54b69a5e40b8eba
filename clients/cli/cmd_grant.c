/*  cmd_grant.c: `onceq grant --order O --customer C --points P`: grant an
    order's points by hand, through the very use case the grant_points job
    runs (points/grant.h). A grant made here and a job for the same order
    meet at the same UNIQUE (order_id, reason): whichever comes second finds
    the first and does nothing. */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"
#include "cli_db.h"
#include "onceq/config.h"
#include "onceq/effects.h"
#include "points/grant.h"
#include "points/ledger_pg.h"
#include "points/points_limits.h"

#define S_ENV_ISOLATION "ONCEQ_DB_ISOLATION"

static void s_help(void)
{
    printf("Usage: onceq grant --order O --customer C --points P\n"
           "\n"
           "Grant P points to customer C for order O, once: the grant is recorded with\n"
           "UNIQUE (order_id, reason '%s') in the same transaction that adds the\n"
           "points to the balance, exactly as the grant_points job does it. Prints\n"
           "\"granted P points to customer C for order O\", or \"already granted for\n"
           "order O\" if that grant is on record (by a job or by hand).\n"
           "\n"
           "Options:\n"
           "  --order O          the order, a positive integer\n"
           "  --customer C       the customer, who must have a balance row (onceq\n"
           "                     customer add C)\n"
           "  --points P         1 to %d\n"
           "  --database URL     libpq conninfo or URI (env %s, default: libpq's\n"
           "                     defaults)\n"
           "  -h, --help         show this help\n"
           "\n"
           "The transaction's isolation level is the worker's: env %s,\n"
           "read-committed (default), repeatable-read or serializable.\n"
           "\n"
           "Exit status 0 granted or already granted, 1 refused (unknown customer, the\n"
           "order granted with other values, a database error), 2 bad command line,\n"
           "3 no connection, or the connection was lost during COMMIT (run the same\n"
           "command again to learn the outcome: it cannot grant twice).\n",
           OQ_GRANT_REASON_ORDER, OQ_MAX_POINTS, OQ_CLI_ENV_DATABASE, S_ENV_ISOLATION);
}

/* Print the outcome of a grant; returns the exit code. */
static int s_print(const oq_cli_t *cli, int64_t order_id, int64_t customer_id, int64_t points,
                   const oq_grant_result_t *result)
{
    switch (result->status) {
    case OQ_GRANT_GRANTED:
        printf("granted %" PRId64 " points to customer %" PRId64 " for order %" PRId64 "\n", points,
               customer_id, order_id);
        return OQ_CLI_EXIT_OK;
    case OQ_GRANT_ALREADY_GRANTED:
        printf("already granted for order %" PRId64 "\n", order_id);
        return OQ_CLI_EXIT_OK;
    case OQ_GRANT_UNKNOWN_CUSTOMER:
    case OQ_GRANT_CONFLICT:
        fprintf(stderr, "onceq: %s\n", result->error.message);
        return OQ_CLI_EXIT_REFUSED;
    case OQ_GRANT_INVALID:
        return oq_cli_usage_error(cli, "%s", result->error.message);
    case OQ_GRANT_ERROR:
        if (result->error.cls == OQ_PG_ERR_UNKNOWN) {
            fprintf(stderr,
                    "onceq: the connection was lost during COMMIT, so the grant may or may "
                    "not be recorded (%s); run the same command again to find out: it cannot "
                    "grant twice\n",
                    result->error.message);
            return OQ_CLI_EXIT_NO_REPLY;
        }
        return oq_cli_db_report(cli, "grant", &result->error);
    }
    return OQ_CLI_EXIT_REFUSED;
}

int oq_cmd_grant(oq_cli_t *cli, int argc, char **argv)
{
    enum { S_OPT_ORDER = OQ_CLI_OPT_FIRST_FREE_, S_OPT_CUSTOMER, S_OPT_POINTS };
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"order", required_argument, NULL, S_OPT_ORDER},
        {"customer", required_argument, NULL, S_OPT_CUSTOMER},
        {"points", required_argument, NULL, S_OPT_POINTS},
        {NULL, 0, NULL, 0},
    };
    const char *order_text = NULL, *customer_text = NULL, *points_text = NULL;
    int opt, stop;
    while ((opt = oq_cli_next_option(cli, argc, argv, options, s_help, &stop)) != -1) {
        if (opt == OQ_CLI_OPT_STOP)
            return stop;
        if (opt == S_OPT_ORDER)
            order_text = optarg;
        else if (opt == S_OPT_CUSTOMER)
            customer_text = optarg;
        else if (opt == S_OPT_POINTS)
            points_text = optarg;
    }
    if (optind < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind]);
    if (!order_text || !customer_text || !points_text)
        return oq_cli_usage_error(cli, "--order, --customer and --points are all required");
    int64_t order_id, customer_id, points;
    if (oq_cli_db_parse_id(order_text, &order_id) < 0)
        return oq_cli_usage_error(cli, "--order '%s' must be a positive integer", order_text);
    if (oq_cli_db_parse_id(customer_text, &customer_id) < 0)
        return oq_cli_usage_error(cli, "--customer '%s' must be a positive integer", customer_text);
    if (oq_cli_parse_int(points_text, 1, OQ_MAX_POINTS, &points) < 0)
        return oq_cli_usage_error(cli, "--points '%s' must be an integer from 1 to %d", points_text,
                                  OQ_MAX_POINTS);
    oq_txn_isolation_t isolation = OQ_TXN_READ_COMMITTED;
    const char *level = oq_config_str(NULL, S_ENV_ISOLATION, NULL);
    if (level && oq_txn_isolation_parse(level, &isolation) < 0)
        return oq_cli_usage_error(cli,
                                  "%s '%s' must be read-committed, repeatable-read or "
                                  "serializable",
                                  S_ENV_ISOLATION, level);

    oq_pg_t *pg = NULL;
    int rc = oq_cli_db_open(cli, OQ_CLI_DB_TIMEOUT_MS, &pg);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    oq_ledger_t *ledger = oq_ledger_pg_new(pg);
    oq_txn_t *txn = oq_txn_new(oq_txn_pg_ops(), pg, isolation);
    oq_grant_result_t result;
    oq_grant_order_points(ledger, txn, order_id, customer_id, points, NULL, &result);
    rc = s_print(cli, order_id, customer_id, points, &result);
    oq_txn_destroy(&txn);
    oq_ledger_destroy(&ledger);
    oq_pg_destroy(&pg);
    return rc;
}
