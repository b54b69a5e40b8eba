/*  cmd_failed.c: the failed store. `onceq failed list`: the failed jobs,
    oldest failure first across queues, with the error that ended each;
    `failed retry ID` / `failed retry --all`: back to ready with a fresh
    retry budget; `failed forget ID`: delete one for good; `failed flush`:
    delete them all (or one queue's); `failed prune --older-than D`: delete
    those that failed more than D ago (of one queue, or all), asking the
    broker again while it says more are due, since it deletes a bounded
    number per request. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "duration.h"
#include "onceq/config.h"
#include "onceq/limits.h"
#include "store_page.h"

/* The longest --older-than of prune, in the days the help states. */
#define S_MAX_PRUNE_AGE_DAYS (OQ_MAX_PRUNE_AGE_MS / (24LL * 3600 * 1000))

static void s_help(void)
{
    printf("Usage: onceq failed list [--queue Q] [--limit N] [--after CURSOR] [--json]\n"
           "       onceq failed retry ID\n"
           "       onceq failed retry --all [--queue Q]\n"
           "       onceq failed forget ID\n"
           "       onceq failed flush [--queue Q]\n"
           "       onceq failed prune --older-than DURATION [--queue Q]\n"
           "\n"
           "list: failed jobs, oldest failure first across queues (ties by ID): ID, TYPE,\n"
           "QUEUE, ATTEMPT (of MAX_TRIES), FAILED_AT (UTC) and the ERROR that ended the\n"
           "job. A page holds at most %d, so --limit N shows the oldest N; the next page\n"
           "starts after the cursor printed under the table (--after ID@FAILED_AT_MS).\n"
           "retry ID: put failed job ID back to ready, with attempt 0 and its full retry\n"
           "budget. retry --all: every failed job (of queue Q); prints how many.\n"
           "forget ID: delete failed job ID for good. flush: delete every failed job (of\n"
           "queue Q); prints how many. prune: delete every failed job (of queue Q) that\n"
           "failed more than DURATION ago (30d, 48h, 30m, 3600s; 1s to %lldd), by the\n"
           "time the broker recorded; prints how many. Each is done once the broker has\n"
           "made it durable; prune asks for at most %d at a time until none is left.\n"
           "A job that is not in the failed store is refused, naming its state.\n"
           "\n"
           "Options:\n"
           "  --queue Q          only jobs of this queue\n"
           "  --limit N          list at most N jobs, 1 to %d (default %d)\n"
           "  --after CURSOR     list only jobs after CURSOR: ID@FAILED_AT_MS as printed\n"
           "                     under a page, or a failed job's ID alone\n"
           "  --all              retry every failed job (of --queue Q)\n"
           "  --older-than DURATION  prune: delete jobs that failed more than this ago\n"
           "  --json             print the broker's reply as one line of JSON, with each\n"
           "                     job's payload; failed_at is Unix time in milliseconds\n"
           "  --broker ENDPOINT  broker front socket (env %s, default %s)\n"
           "  --timeout-ms N     how long to wait for the broker (env %s, default "
           "%d)\n" OQ_CLI_KEY_HELP "  -h, --help         show this help\n",
           OQ_MAX_FAILED_LIST, S_MAX_PRUNE_AGE_DAYS, OQ_MAX_PRUNE_PER_CALL, OQ_MAX_FAILED_LIST,
           OQ_DEFAULT_FAILED_LIST, OQ_CLI_ENV_BROKER, OQ_DEFAULT_FRONT_ENDPOINT,
           OQ_CLI_ENV_TIMEOUT_MS, OQ_DEFAULT_CLIENT_TIMEOUT_MS);
}

enum {
    S_OPT_QUEUE = OQ_CLI_OPT_FIRST_FREE_,
    S_OPT_LIMIT,
    S_OPT_AFTER,
    S_OPT_JSON,
    S_OPT_ALL,
    S_OPT_OLDER,
};

/* What the subcommands take. */
typedef struct {
    const char *queue;
    uint32_t limit;
    uint64_t after;
    int64_t after_at; /* -1: not given */
    bool json, all;
    const char *older; /* --older-than, as given */
    const char *id;    /* the one argument, if any */
} s_args_t;

/* Parse the options of subcommand `failed NAME`, which takes the options
   allowed (a set of S_OPT_*) and up to one argument. An exit code: OK to go
   on, anything else to return (help shown, or an error printed). */
static int s_parse(oq_cli_t *cli, int argc, char **argv, unsigned allowed, s_args_t *a, bool *done)
{
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"queue", required_argument, NULL, S_OPT_QUEUE},
        {"limit", required_argument, NULL, S_OPT_LIMIT},
        {"after", required_argument, NULL, S_OPT_AFTER},
        {"json", no_argument, NULL, S_OPT_JSON},
        {"all", no_argument, NULL, S_OPT_ALL},
        {"older-than", required_argument, NULL, S_OPT_OLDER},
        {NULL, 0, NULL, 0},
    };
    *a = (s_args_t){.limit = OQ_DEFAULT_FAILED_LIST, .after_at = -1};
    *done = false;
    int opt, stop;
    while ((opt = oq_cli_next_option(cli, argc, argv, options, s_help, &stop)) != -1) {
        uint64_t u;
        if (opt == OQ_CLI_OPT_STOP) {
            *done = true; /* after --help, or a bad option */
            return stop;
        }
        if (opt >= S_OPT_QUEUE && !(allowed & (1u << (opt - S_OPT_QUEUE))))
            return oq_cli_usage_error(cli, "option '%s' does not go with '%s'", argv[optind - 1],
                                      cli->command);
        switch (opt) {
        case S_OPT_QUEUE:
            if (!oq_proto_name_valid(optarg, strlen(optarg)))
                return oq_cli_usage_error(
                    cli, "--queue '%s' must be 1 to %d characters of A-Z a-z 0-9 _ . : -", optarg,
                    OQ_MAX_NAME_LEN);
            a->queue = optarg;
            break;
        case S_OPT_LIMIT:
            if (oq_config_uint(optarg, 1, OQ_MAX_FAILED_LIST, &u) < 0)
                return oq_cli_usage_error(cli, "--limit '%s' must be a whole number from 1 to %d",
                                          optarg, OQ_MAX_FAILED_LIST);
            a->limit = (uint32_t)u;
            break;
        case S_OPT_AFTER:
            if (oq_cli_parse_cursor(optarg, &a->after, &a->after_at) < 0)
                return oq_cli_usage_error(cli,
                                          "--after '%s' must be a cursor as printed under a page "
                                          "(ID@FAILED_AT_MS, e.g. 42@1717171717123) or a job ID",
                                          optarg);
            break;
        case S_OPT_JSON:
            a->json = true;
            break;
        case S_OPT_ALL:
            a->all = true;
            break;
        case S_OPT_OLDER:
            a->older = optarg;
            break;
        }
    }
    if (optind < argc)
        a->id = argv[optind++];
    if (optind < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind]);
    return OQ_CLI_EXIT_OK;
}

#define S_ALLOW(opt) (1u << ((opt)-S_OPT_QUEUE))

/* The job ID argument of `failed retry|forget ID`. */
static int s_job_id(oq_cli_t *cli, const char *text, uint64_t *id)
{
    if (!text)
        return oq_cli_usage_error(cli, "%s needs a job ID, e.g. 'onceq %s 42'", cli->command,
                                  cli->command);
    if (oq_config_uint(text, 1, UINT64_MAX, id) < 0)
        return oq_cli_usage_error(cli, "job ID '%s' must be a whole number from 1", text);
    return OQ_CLI_EXIT_OK;
}

/* `onceq failed retry ID` and `onceq failed retry --all [--queue Q]`. */
static int s_retry(oq_cli_t *cli, int argc, char **argv)
{
    s_args_t a;
    bool done;
    int rc = s_parse(cli, argc, argv, S_ALLOW(S_OPT_ALL) | S_ALLOW(S_OPT_QUEUE), &a, &done);
    if (rc != OQ_CLI_EXIT_OK || done)
        return rc;
    uint64_t id = 0;
    if (a.all && a.id)
        return oq_cli_usage_error(cli, "failed retry takes a job ID or --all, not both");
    if (!a.all && a.queue)
        return oq_cli_usage_error(cli, "--queue goes with --all: 'onceq failed retry --all "
                                       "--queue Q'");
    if (!a.all && (rc = s_job_id(cli, a.id, &id)) != OQ_CLI_EXIT_OK)
        return rc;
    oq_client_t *client = NULL;
    if ((rc = oq_cli_connect(cli, &client)) != OQ_CLI_EXIT_OK)
        return rc;
    uint64_t count;
    if (a.all ? oq_client_requeue_all(client, a.queue, cli->timeout, &count) < 0
              : oq_client_requeue(client, id, cli->timeout) < 0)
        rc = oq_cli_report(cli, client);
    else if (a.all)
        printf("%" PRIu64 " failed job(s)%s%s ready again\n", count, a.queue ? " of queue " : "",
               a.queue ? a.queue : "");
    else
        printf("job %" PRIu64 " is ready again\n", id);
    oq_client_destroy(&client);
    return rc;
}

/* `onceq failed forget ID`. */
static int s_forget(oq_cli_t *cli, int argc, char **argv)
{
    s_args_t a;
    bool done;
    int rc = s_parse(cli, argc, argv, 0, &a, &done);
    if (rc != OQ_CLI_EXIT_OK || done)
        return rc;
    uint64_t id;
    if ((rc = s_job_id(cli, a.id, &id)) != OQ_CLI_EXIT_OK)
        return rc;
    oq_client_t *client = NULL;
    if ((rc = oq_cli_connect(cli, &client)) != OQ_CLI_EXIT_OK)
        return rc;
    if (oq_client_forget(client, id, cli->timeout) < 0)
        rc = oq_cli_report(cli, client);
    else
        printf("job %" PRIu64 " deleted from the failed store\n", id);
    oq_client_destroy(&client);
    return rc;
}

/* `onceq failed flush [--queue Q]`. */
static int s_flush(oq_cli_t *cli, int argc, char **argv)
{
    s_args_t a;
    bool done;
    int rc = s_parse(cli, argc, argv, S_ALLOW(S_OPT_QUEUE), &a, &done);
    if (rc != OQ_CLI_EXIT_OK || done)
        return rc;
    if (a.id)
        return oq_cli_usage_error(cli,
                                  "unexpected argument '%s' (flush takes no job ID; "
                                  "'onceq failed forget ID' deletes one)",
                                  a.id);
    oq_client_t *client = NULL;
    if ((rc = oq_cli_connect(cli, &client)) != OQ_CLI_EXIT_OK)
        return rc;
    uint64_t count;
    if (oq_client_flush(client, a.queue, cli->timeout, &count) < 0)
        rc = oq_cli_report(cli, client);
    else
        printf("%" PRIu64 " failed job(s)%s%s deleted\n", count, a.queue ? " of queue " : "",
               a.queue ? a.queue : "");
    oq_client_destroy(&client);
    return rc;
}

/* `onceq failed prune --older-than D [--queue Q]`. The broker deletes at
   most OQ_MAX_PRUNE_PER_CALL per request and says whether more are due;
   each request makes progress or ends the loop, so it ends once none of
   that age is left. */
static int s_prune(oq_cli_t *cli, int argc, char **argv)
{
    s_args_t a;
    bool done;
    int rc = s_parse(cli, argc, argv, S_ALLOW(S_OPT_QUEUE) | S_ALLOW(S_OPT_OLDER), &a, &done);
    if (rc != OQ_CLI_EXIT_OK || done)
        return rc;
    if (a.id)
        return oq_cli_usage_error(cli, "unexpected argument '%s' (prune takes no job ID)", a.id);
    if (!a.older)
        return oq_cli_usage_error(cli, "failed prune needs --older-than DURATION, e.g. 7d");
    int64_t age_s;
    char why[256];
    if (oq_cli_duration_parse(a.older, OQ_MIN_PRUNE_AGE_MS / 1000, OQ_MAX_PRUNE_AGE_MS / 1000,
                              &age_s, why, sizeof why) < 0)
        return oq_cli_usage_error(cli, "--older-than %s", why);
    char age[OQ_CLI_DURATION_TEXT_LEN];
    oq_cli_duration_format(age_s, age, sizeof age);
    oq_client_t *client = NULL;
    if ((rc = oq_cli_connect(cli, &client)) != OQ_CLI_EXIT_OK)
        return rc;
    uint64_t total = 0, count;
    bool more = true;
    while (more) {
        if (oq_client_prune_failed(client, a.queue, age_s * 1000, 0, cli->timeout, &count, &more) <
            0) {
            rc = oq_cli_report(cli, client);
            break;
        }
        total += count;
        if (more && count == 0) {
            fprintf(stderr, "onceq: the broker says more failed jobs are due but deleted none\n");
            rc = OQ_CLI_EXIT_REFUSED;
            break;
        }
    }
    if (rc == OQ_CLI_EXIT_OK || total > 0)
        printf("%" PRIu64 " failed job(s)%s%s that failed more than %s ago deleted%s\n", total,
               a.queue ? " of queue " : "", a.queue ? a.queue : "", age,
               rc == OQ_CLI_EXIT_OK ? "" : " before the error");
    oq_client_destroy(&client);
    return rc;
}

/* `onceq failed list`. */
static int s_list(oq_cli_t *cli, int argc, char **argv)
{
    s_args_t a;
    bool done;
    int rc = s_parse(cli, argc, argv,
                     S_ALLOW(S_OPT_QUEUE) | S_ALLOW(S_OPT_LIMIT) | S_ALLOW(S_OPT_AFTER) |
                         S_ALLOW(S_OPT_JSON),
                     &a, &done);
    if (rc != OQ_CLI_EXIT_OK || done)
        return rc;
    if (a.id)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", a.id);
    oq_client_t *client = NULL;
    if ((rc = oq_cli_connect(cli, &client)) != OQ_CLI_EXIT_OK)
        return rc;
    oq_msg_t reply;
    if (oq_client_failed_cursor(client, a.queue, a.after_at, a.after, a.limit, cli->timeout,
                                &reply) < 0) {
        rc = oq_cli_report(cli, client);
    } else {
        rc = a.json ? oq_cli_print_json(&reply.root)
                    : oq_cli_print_store_page(&reply.root,
                                              &(oq_cli_store_page_t){.noun = "failed jobs",
                                                                     .time_key = "failed_at",
                                                                     .time_header = "FAILED_AT",
                                                                     .text_key = "error",
                                                                     .text_header = "ERROR"});
        oq_proto_msg_release(&reply);
    }
    oq_client_destroy(&client);
    return rc;
}

int oq_cmd_failed(oq_cli_t *cli, int argc, char **argv)
{
    static const struct {
        const char *name, *command;
        int (*run)(oq_cli_t *cli, int argc, char **argv);
    } subs[] = {
        {"list", "failed list", s_list},       {"retry", "failed retry", s_retry},
        {"forget", "failed forget", s_forget}, {"flush", "failed flush", s_flush},
        {"prune", "failed prune", s_prune},
    };
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        s_help();
        return OQ_CLI_EXIT_OK;
    }
    if (argc < 2)
        return oq_cli_usage_error(cli,
                                  "failed needs a subcommand: list, retry, forget, flush or prune");
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        if (strcmp(argv[1], subs[i].name) == 0) {
            cli->command = subs[i].command;
            return subs[i].run(cli, argc - 1, argv + 1);
        }
    }
    return oq_cli_usage_error(
        cli, "unknown subcommand 'failed %s'; expected list, retry, forget, flush or prune",
        argv[1]);
}
