/*  cmd_queue.c: `onceq queue clear Q`: cancel every job of queue Q that
    has not started (ready, delayed, or waiting for its overlap key), as
    `onceq job cancel` would each one, and print how many. Jobs a worker
    holds are left alone: their effect may be under way, so they finish or
    fail as usual. The broker cancels at most OQ_MAX_CLEAR_PER_CALL per
    request and says whether more wait; the tool asks again until none is
    left, so a queue of any size is cleared in bounded steps with the
    broker's other work between them. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "onceq/limits.h"
#include "onceq/proto.h"

static void s_help(void)
{
    printf("Usage: onceq queue clear QUEUE\n"
           "\n"
           "clear: cancel every job of QUEUE that has not started: ready, delayed (a\n"
           "delay or a retry's backoff) and waiting behind its overlap key. Each is\n"
           "cancelled as by 'onceq job cancel ID': journaled, so a restart does not bring\n"
           "it back, counted per queue in stats as \"cancelled\", and a wait on it ends\n"
           "\"cancelled\". Leased jobs (a worker holds them: their effect may be under\n"
           "way) are not cancelled; they finish or fail as usual. The broker cancels at\n"
           "most %d per request and the tool asks again until none is left, so jobs\n"
           "dispatched to QUEUE while it runs may be cancelled too. Prints how many were\n"
           "cancelled; a queue the broker does not know clears 0.\n"
           "\n"
           "Options:\n"
           "  --broker ENDPOINT  broker front socket (env %s, default %s)\n"
           "  --timeout-ms N     how long to wait for the broker (env %s, default "
           "%d)\n" OQ_CLI_KEY_HELP "  -h, --help         show this help\n"
           "\n"
           "Exit status 0 cleared, 1 refused (the reason is printed; those cancelled\n"
           "before stay cancelled), 2 bad command line, 3 no answer in time.\n",
           OQ_MAX_CLEAR_PER_CALL, OQ_CLI_ENV_BROKER, OQ_DEFAULT_FRONT_ENDPOINT,
           OQ_CLI_ENV_TIMEOUT_MS, OQ_DEFAULT_CLIENT_TIMEOUT_MS);
}

/* Each request makes progress or ends the loop (a reply of "more" with
   nothing cancelled is reported, not asked again). */
static int s_clear(oq_cli_t *cli, int argc, char **argv)
{
    static const struct option options[] = {OQ_CLI_GLOBAL_OPTIONS, {NULL, 0, NULL, 0}};
    int stop; /* only the global options: none comes back */
    if (oq_cli_next_option(cli, argc, argv, options, s_help, &stop) == OQ_CLI_OPT_STOP)
        return stop;
    if (optind + 1 != argc)
        return oq_cli_usage_error(cli, "queue clear needs exactly one queue name, e.g. "
                                       "'onceq queue clear emails'");
    const char *queue = argv[optind];
    if (!oq_proto_name_valid(queue, strlen(queue)))
        return oq_cli_usage_error(cli,
                                  "queue name '%s' must be 1 to %d characters of A-Z a-z 0-9 "
                                  "_ . : -",
                                  queue, OQ_MAX_NAME_LEN);
    oq_client_t *client = NULL;
    int rc = oq_cli_connect(cli, &client);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    uint64_t total = 0, count;
    bool more = true;
    while (more) {
        if (oq_client_clear(client, queue, 0, cli->timeout, &count, &more) < 0) {
            rc = oq_cli_report(cli, client);
            break;
        }
        total += count;
        if (more && count == 0) {
            fprintf(stderr, "onceq: the broker says more jobs wait but cancelled none\n");
            rc = OQ_CLI_EXIT_REFUSED;
            break;
        }
    }
    if (rc == OQ_CLI_EXIT_OK || total > 0)
        printf("%" PRIu64 " job(s) of queue %s cancelled%s\n", total, queue,
               rc == OQ_CLI_EXIT_OK ? "" : " before the error");
    oq_client_destroy(&client);
    return rc;
}

int oq_cmd_queue(oq_cli_t *cli, int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        s_help();
        return OQ_CLI_EXIT_OK;
    }
    if (argc < 2)
        return oq_cli_usage_error(cli, "queue needs a subcommand: 'onceq queue clear QUEUE'");
    if (strcmp(argv[1], "clear") != 0)
        return oq_cli_usage_error(cli, "unknown subcommand 'queue %s'; expected clear", argv[1]);
    cli->command = "queue clear";
    return s_clear(cli, argc - 1, argv + 1);
}
