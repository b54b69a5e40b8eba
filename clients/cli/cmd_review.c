/*  cmd_review.c: `onceq review list`: the jobs waiting for a person (their
    handlers could not know the outcome), with the reason each handler gave;
    `onceq review show ID`: one of them, or one resolved earlier, with its
    payload and resolution; `onceq review resolve ID --done|--retry|--fail
    [--note TEXT]`: a person's decision, kept by the broker with the note and
    the handler's reason. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "onceq/config.h"
#include "onceq/limits.h"
#include "store_page.h"
#include "table.h"

#define S_CELL_LEN 128

static void s_help(void)
{
    printf("Usage: onceq review list [--queue Q] [--limit N] [--after CURSOR] [--json]\n"
           "       onceq review show ID [--json]\n"
           "       onceq review resolve ID --done|--retry|--fail [--note TEXT]\n"
           "\n"
           "Jobs whose handler could not know the outcome (an external call that may or\n"
           "may not have taken effect) wait in the broker's review store, using no try\n"
           "and never retried on their own, until a person resolves them.\n"
           "\n"
           "list: the jobs in review, the longest waiting first: ID, TYPE, QUEUE, ATTEMPT\n"
           "(of MAX_TRIES), REVIEW_AT (UTC) and the REASON the handler gave. A page holds\n"
           "at most %d; the next page starts after the cursor printed under the table\n"
           "(--after ID@REVIEW_AT_MS).\n"
           "show: one job in review, or resolved earlier: its reason, payload and the\n"
           "resolution (the broker remembers the last %d resolutions).\n"
           "resolve: the decision, made durable by the broker with the note and the\n"
           "handler's reason:\n"
           "  --done    the effect is there (or not needed): the job is complete\n"
           "  --retry   run it again: ready, with attempt 0 and its full retry budget\n"
           "  --fail    give up: to the failed store, with the note\n"
           "A job not in review, or resolved already, is refused with what its last\n"
           "resolution decided.\n"
           "\n"
           "Options:\n"
           "  --queue Q          list: only jobs of this queue\n"
           "  --limit N          list: at most N jobs, 1 to %d (default %d)\n"
           "  --after CURSOR     list: only jobs after CURSOR: ID@REVIEW_AT_MS as printed\n"
           "                     under a page (or a job ID still in review)\n"
           "  --note TEXT        resolve: why, for the record (at most %d bytes)\n"
           "  --json             list, show: the broker's reply as one line of JSON, with\n"
           "                     payloads; times are Unix time in milliseconds\n"
           "  --broker ENDPOINT  broker front socket (env %s, default %s)\n"
           "  --timeout-ms N     how long to wait for the broker (env %s, default "
           "%d)\n" OQ_CLI_KEY_HELP "  -h, --help         show this help\n",
           OQ_MAX_FAILED_LIST, OQ_MAX_REVIEW_RESOLVED, OQ_MAX_FAILED_LIST, OQ_DEFAULT_FAILED_LIST,
           OQ_MAX_REVIEW_NOTE_LEN, OQ_CLI_ENV_BROKER, OQ_DEFAULT_FRONT_ENDPOINT,
           OQ_CLI_ENV_TIMEOUT_MS, OQ_DEFAULT_CLIENT_TIMEOUT_MS);
}

static void s_time(const msgpack_object *map, const char *key, char *out, size_t out_len)
{
    uint64_t ms;
    if (oq_cli_get_uint(map, key, &ms) == 0 && ms > 0)
        oq_cli_format_time((int64_t)ms, out, out_len);
    else
        snprintf(out, out_len, "-");
}

static int s_print_show(const msgpack_object *reply)
{
    const msgpack_object *job = oq_proto_map_get(reply, "job");
    if (!job || job->type != MSGPACK_OBJECT_MAP) {
        fprintf(stderr, "onceq: the broker's answer holds no job\n");
        return OQ_CLI_EXIT_REFUSED;
    }
    static const char *fields[] = {"id", "type", "queue", "state", "attempt", "max_tries"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char cell[S_CELL_LEN];
        const msgpack_object *o = oq_proto_map_get(job, fields[i]);
        if (!o)
            continue;
        oq_cli_format_value(o, cell, sizeof cell);
        printf("%-11s%s\n", fields[i], cell);
    }
    char at[S_CELL_LEN], text[OQ_MAX_REVIEW_NOTE_LEN + OQ_MAX_ERROR_LEN + 1];
    s_time(job, "review_at", at, sizeof at);
    printf("%-11s%s\n", "review_at", at);
    oq_cli_format_value(oq_proto_map_get(job, "reason"), text, sizeof text);
    printf("%-11s%s\n", "reason", text);
    const msgpack_object *payload = oq_proto_map_get(job, "payload");
    if (payload) {
        printf("%-11s", "payload");
        fflush(stdout);
        oq_cli_print_json(payload);
    }
    const msgpack_object *r = oq_proto_map_get(job, "resolution");
    if (r && r->type == MSGPACK_OBJECT_MAP) {
        char action[S_CELL_LEN];
        oq_cli_format_value(oq_proto_map_get(r, "action"), action, sizeof action);
        s_time(r, "resolved_at", at, sizeof at);
        oq_cli_format_value(oq_proto_map_get(r, "note"), text, sizeof text);
        printf("%-11s%s at %s%s%s\n", "resolved", action, at,
               strcmp(text, "-") && text[0] ? ": " : "", strcmp(text, "-") ? text : "");
    }
    return OQ_CLI_EXIT_OK;
}

/* The job ID argument of show and resolve. 0, or a usage error. */
static int s_job_id(oq_cli_t *cli, const char *text, uint64_t *id)
{
    if (oq_config_uint(text, 1, UINT64_MAX, id) < 0)
        return oq_cli_usage_error(cli, "job ID '%s' must be a whole number from 1", text);
    return 0;
}

int oq_cmd_review(oq_cli_t *cli, int argc, char **argv)
{
    enum {
        S_OPT_QUEUE = OQ_CLI_OPT_FIRST_FREE_,
        S_OPT_LIMIT,
        S_OPT_AFTER,
        S_OPT_JSON,
        S_OPT_DONE,
        S_OPT_RETRY,
        S_OPT_FAIL,
        S_OPT_NOTE
    };
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"queue", required_argument, NULL, S_OPT_QUEUE},
        {"limit", required_argument, NULL, S_OPT_LIMIT},
        {"after", required_argument, NULL, S_OPT_AFTER},
        {"json", no_argument, NULL, S_OPT_JSON},
        {"done", no_argument, NULL, S_OPT_DONE},
        {"retry", no_argument, NULL, S_OPT_RETRY},
        {"fail", no_argument, NULL, S_OPT_FAIL},
        {"note", required_argument, NULL, S_OPT_NOTE},
        {NULL, 0, NULL, 0},
    };
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        s_help();
        return OQ_CLI_EXIT_OK;
    }
    if (argc < 2)
        return oq_cli_usage_error(cli, "review needs a subcommand: 'onceq review list', 'onceq "
                                       "review show ID' or 'onceq review resolve ID --done'");
    const char *sub = argv[1];
    if (strcmp(sub, "list") == 0)
        cli->command = "review list";
    else if (strcmp(sub, "show") == 0)
        cli->command = "review show";
    else if (strcmp(sub, "resolve") == 0)
        cli->command = "review resolve";
    else
        return oq_cli_usage_error(cli,
                                  "unknown subcommand 'review %s'; try 'onceq review list', "
                                  "'show' or 'resolve'",
                                  sub);
    argc--;
    argv++;

    const char *queue = NULL, *note = NULL;
    uint32_t limit = OQ_DEFAULT_FAILED_LIST;
    uint64_t after = 0;
    int64_t after_at = -1;
    bool json = false;
    oq_review_action_t action = 0;
    int actions = 0;
    int opt, stop;
    while ((opt = oq_cli_next_option(cli, argc, argv, options, s_help, &stop)) != -1) {
        uint64_t u;
        switch (opt) {
        case OQ_CLI_OPT_STOP:
            return stop;
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
            if (oq_cli_parse_cursor(optarg, &after, &after_at) < 0)
                return oq_cli_usage_error(cli,
                                          "--after '%s' must be a cursor as printed under a page "
                                          "(ID@REVIEW_AT_MS, or a job ID)",
                                          optarg);
            break;
        case S_OPT_JSON:
            json = true;
            break;
        case S_OPT_DONE:
        case S_OPT_RETRY:
        case S_OPT_FAIL:
            action = opt == S_OPT_DONE    ? OQ_REVIEW_DONE
                     : opt == S_OPT_RETRY ? OQ_REVIEW_RETRY
                                          : OQ_REVIEW_FAIL;
            actions++;
            break;
        case S_OPT_NOTE:
            if (strlen(optarg) > OQ_MAX_REVIEW_NOTE_LEN)
                return oq_cli_usage_error(cli, "--note is %zu bytes, at most %d", strlen(optarg),
                                          OQ_MAX_REVIEW_NOTE_LEN);
            note = optarg;
            break;
        }
    }
    bool list = strcmp(sub, "list") == 0, resolve = strcmp(sub, "resolve") == 0;
    if (!list && (queue || after || limit != OQ_DEFAULT_FAILED_LIST))
        return oq_cli_usage_error(cli, "--queue, --limit and --after go with 'review list'");
    if (!resolve && (actions || note))
        return oq_cli_usage_error(cli, "--done, --retry, --fail and --note go with 'review "
                                       "resolve'");
    if (resolve && actions != 1)
        return oq_cli_usage_error(cli, "review resolve needs exactly one of --done, --retry, "
                                       "--fail");
    if (resolve && json)
        return oq_cli_usage_error(cli, "--json goes with 'review list' and 'review show'");
    uint64_t id = 0;
    if (list && optind < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind]);
    if (!list) {
        if (optind + 1 != argc)
            return oq_cli_usage_error(cli, "%s needs exactly one job ID, e.g. 'onceq %s 42%s'",
                                      cli->command, cli->command, resolve ? " --done" : "");
        int rc = s_job_id(cli, argv[optind], &id);
        if (rc != 0)
            return rc;
    }

    oq_client_t *client = NULL;
    int rc = oq_cli_connect(cli, &client);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    oq_msg_t reply;
    if (resolve) {
        if (oq_client_resolve(client, id, action, note, cli->timeout) < 0)
            rc = oq_cli_report(cli, client);
        else
            printf("job %" PRIu64 " resolved: %s\n", id, oq_proto_review_action_name(action));
    } else if ((list ? oq_client_review_page(client, queue, after_at, after, limit, cli->timeout,
                                             &reply)
                     : oq_client_review_show(client, id, cli->timeout, &reply)) < 0) {
        rc = oq_cli_report(cli, client);
    } else {
        rc = json   ? oq_cli_print_json(&reply.root)
             : list ? oq_cli_print_store_page(&reply.root,
                                              &(oq_cli_store_page_t){.noun = "jobs in review",
                                                                     .time_key = "review_at",
                                                                     .time_header = "REVIEW_AT",
                                                                     .text_key = "reason",
                                                                     .text_header = "REASON"})
                    : s_print_show(&reply.root);
        oq_proto_msg_release(&reply);
    }
    oq_client_destroy(&client);
    return rc;
}
