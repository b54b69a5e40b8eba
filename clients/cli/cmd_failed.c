/*  cmd_failed.c: `onceq failed list`: the jobs in the failed store, oldest
    first, with the error that ended each of them; `onceq failed retry ID`:
    one of them back to ready with a fresh retry budget. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "onceq/config.h"
#include "onceq/limits.h"
#include "table.h"

/* Room for a type or queue name and for an ISO-8601 time. */
#define S_CELL_LEN 128

static void s_help(void)
{
    printf("Usage: onceq failed list [--queue Q] [--limit N] [--after ID] [--json]\n"
           "       onceq failed retry ID\n"
           "\n"
           "list: failed jobs in job ID order: ID, TYPE, QUEUE, ATTEMPT (of MAX_TRIES),\n"
           "FAILED_AT (UTC) and the ERROR that ended the job. A page holds at most %d;\n"
           "the next page starts after the last ID shown (--after ID).\n"
           "retry: put failed job ID back to ready, with attempt 0 and its full retry\n"
           "budget; done once the broker has made it durable.\n"
           "\n"
           "Options:\n"
           "  --queue Q          only jobs of this queue\n"
           "  --limit N          at most N jobs, 1 to %d (default %d)\n"
           "  --after ID         only jobs with an ID above ID: the next page\n"
           "  --json             print the broker's reply as one line of JSON, with each\n"
           "                     job's payload; failed_at is Unix time in milliseconds\n"
           "  --broker ENDPOINT  broker front socket (env %s, default %s)\n"
           "  --timeout-ms N     how long to wait for the broker (env %s, default "
           "%d)\n" OQ_CLI_KEY_HELP "  -h, --help         show this help\n",
           OQ_MAX_FAILED_LIST, OQ_MAX_FAILED_LIST, OQ_DEFAULT_FAILED_LIST, OQ_CLI_ENV_BROKER,
           OQ_DEFAULT_FRONT_ENDPOINT, OQ_CLI_ENV_TIMEOUT_MS, OQ_DEFAULT_CLIENT_TIMEOUT_MS);
}

static int s_add_jobs(oq_table_t *table, const msgpack_object *jobs)
{
    int rc = 0;
    for (uint32_t i = 0; i < jobs->via.array.size; i++) {
        const msgpack_object *job = &jobs->via.array.ptr[i];
        char id[S_CELL_LEN], type[S_CELL_LEN], queue[S_CELL_LEN], attempt[S_CELL_LEN];
        char max_tries[S_CELL_LEN], failed_at[S_CELL_LEN], error[OQ_MAX_ERROR_LEN + 1];
        oq_cli_format_value(oq_proto_map_get(job, "id"), id, sizeof id);
        oq_cli_format_value(oq_proto_map_get(job, "type"), type, sizeof type);
        oq_cli_format_value(oq_proto_map_get(job, "queue"), queue, sizeof queue);
        oq_cli_format_value(oq_proto_map_get(job, "attempt"), attempt, sizeof attempt);
        oq_cli_format_value(oq_proto_map_get(job, "max_tries"), max_tries, sizeof max_tries);
        oq_cli_format_value(oq_proto_map_get(job, "error"), error, sizeof error);
        uint64_t ms;
        if (oq_cli_get_uint(job, "failed_at", &ms) == 0)
            oq_cli_format_time((int64_t)ms, failed_at, sizeof failed_at);
        else
            snprintf(failed_at, sizeof failed_at, "-");
        rc |= oq_table_add(table, id);
        rc |= oq_table_add(table, type);
        rc |= oq_table_add(table, queue);
        rc |= oq_table_addf(table, "%s/%s", attempt, max_tries);
        rc |= oq_table_add(table, failed_at);
        rc |= oq_table_add(table, error);
    }
    return rc;
}

static int s_print_table(const msgpack_object *reply)
{
    const msgpack_object *jobs = oq_proto_map_get(reply, "jobs");
    uint32_t shown = jobs && jobs->type == MSGPACK_OBJECT_ARRAY ? jobs->via.array.size : 0;
    uint64_t total = shown;
    oq_cli_get_uint(reply, "total", &total);
    if (shown == 0) {
        printf(total ? "no failed jobs on this page (%" PRIu64 " in all)\n" : "no failed jobs\n",
               total);
        return OQ_CLI_EXIT_OK;
    }
    static const char *headers[] = {"ID", "TYPE", "QUEUE", "ATTEMPT", "FAILED_AT", "ERROR"};
    const size_t columns = sizeof headers / sizeof headers[0];
    oq_table_t *table = oq_table_new(columns);
    int rc = table ? 0 : -1;
    for (size_t c = 0; rc == 0 && c < columns; c++)
        rc |= oq_table_add(table, headers[c]);
    if (rc == 0) {
        oq_table_align_right(table, 0);
        oq_table_align_right(table, 3);
        rc |= s_add_jobs(table, jobs);
    }
    if (rc == 0)
        oq_table_print(table, stdout);
    oq_table_destroy(&table);
    if (rc != 0) {
        fprintf(stderr, "onceq: out of memory\n");
        return OQ_CLI_EXIT_REFUSED;
    }
    uint64_t next;
    if (oq_cli_get_uint(reply, "next", &next) == 0)
        printf("\n%" PRIu32 " of %" PRIu64 " failed jobs shown; the next page: --after %" PRIu64
               "\n",
               shown, total, next);
    else if (total > shown)
        printf("\n%" PRIu32 " of %" PRIu64 " failed jobs shown (the last page)\n", shown, total);
    return OQ_CLI_EXIT_OK;
}

/* `onceq failed retry ID`. Returns an exit code. */
static int s_retry(oq_cli_t *cli, int argc, char **argv)
{
    static const struct option options[] = {OQ_CLI_GLOBAL_OPTIONS, {NULL, 0, NULL, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if (opt == 'h') {
            s_help();
            return OQ_CLI_EXIT_OK;
        }
        if (opt == '?' || opt == ':')
            return oq_cli_option_error(cli, opt, argv);
        oq_cli_global_option(cli, opt, optarg);
    }
    if (optind + 1 != argc)
        return oq_cli_usage_error(cli, "failed retry needs exactly one job ID, e.g. "
                                       "'onceq failed retry 42'");
    uint64_t id;
    if (oq_config_uint(argv[optind], 1, UINT64_MAX, &id) < 0)
        return oq_cli_usage_error(cli, "job ID '%s' must be a whole number from 1", argv[optind]);
    oq_client_t *client = NULL;
    int rc = oq_cli_connect(cli, &client);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    if (oq_client_requeue(client, id, cli->timeout) < 0)
        rc = oq_cli_report(cli, client);
    else
        printf("job %" PRIu64 " is ready again\n", id);
    oq_client_destroy(&client);
    return rc;
}

int oq_cmd_failed(oq_cli_t *cli, int argc, char **argv)
{
    enum { S_OPT_QUEUE = OQ_CLI_OPT_FIRST_FREE_, S_OPT_LIMIT, S_OPT_AFTER, S_OPT_JSON };
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"queue", required_argument, NULL, S_OPT_QUEUE},
        {"limit", required_argument, NULL, S_OPT_LIMIT},
        {"after", required_argument, NULL, S_OPT_AFTER},
        {"json", no_argument, NULL, S_OPT_JSON},
        {NULL, 0, NULL, 0},
    };
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        s_help();
        return OQ_CLI_EXIT_OK;
    }
    if (argc < 2)
        return oq_cli_usage_error(
            cli, "failed needs a subcommand: 'onceq failed list' or 'onceq failed retry ID'");
    if (strcmp(argv[1], "retry") == 0) {
        cli->command = "failed retry";
        return s_retry(cli, argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "list") != 0)
        return oq_cli_usage_error(
            cli, "unknown subcommand 'failed %s'; try 'onceq failed list' or 'onceq failed retry'",
            argv[1]);
    cli->command = "failed list";
    argc--;
    argv++;

    const char *queue = NULL;
    uint32_t limit = OQ_DEFAULT_FAILED_LIST;
    uint64_t after = 0;
    bool json = false;
    int opt;
    while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        uint64_t u;
        switch (opt) {
        case 'h':
            s_help();
            return OQ_CLI_EXIT_OK;
        case '?':
        case ':':
            return oq_cli_option_error(cli, opt, argv);
        case S_OPT_QUEUE:
            if (!oq_proto_name_valid(optarg, strlen(optarg)))
                return oq_cli_usage_error(
                    cli, "--queue '%s' must be 1 to %d characters of A-Z a-z 0-9 _ . : -", optarg,
                    OQ_MAX_NAME_LEN);
            queue = optarg;
            break;
        case S_OPT_LIMIT:
            if (oq_config_uint(optarg, 1, OQ_MAX_FAILED_LIST, &u) < 0)
                return oq_cli_usage_error(cli, "--limit '%s' must be a whole number from 1 to %d",
                                          optarg, OQ_MAX_FAILED_LIST);
            limit = (uint32_t)u;
            break;
        case S_OPT_AFTER:
            if (oq_config_uint(optarg, 0, UINT64_MAX, &after) < 0)
                return oq_cli_usage_error(cli, "--after '%s' must be a job ID (a whole number)",
                                          optarg);
            break;
        case S_OPT_JSON:
            json = true;
            break;
        default:
            oq_cli_global_option(cli, opt, optarg);
            break;
        }
    }
    if (optind < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind]);

    oq_client_t *client = NULL;
    int rc = oq_cli_connect(cli, &client);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    oq_msg_t reply;
    if (oq_client_failed_page(client, queue, after, limit, cli->timeout, &reply) < 0) {
        rc = oq_cli_report(cli, client);
    } else {
        rc = json ? oq_cli_print_json(&reply.root) : s_print_table(&reply.root);
        oq_proto_msg_release(&reply);
    }
    oq_client_destroy(&client);
    return rc;
}
