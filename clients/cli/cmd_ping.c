/*  cmd_ping.c: `onceq ping`: is the broker there, and how far away. */
#include <stdio.h>

#include "cli.h"
#include "onceq/clock.h"
#include "onceq/limits.h"

/* Microseconds per millisecond, for printing the round trip. */
#define S_US_PER_MS 1000.0

static void s_help(void)
{
    printf("Usage: onceq ping\n"
           "\n"
           "Send one ping to the broker and print how long the answer took (this\n"
           "includes connecting).\n"
           "Exit status 0 if it answered, 3 if it did not answer in time.\n"
           "\n"
           "Options:\n"
           "  --broker ENDPOINT  broker front socket (env %s, default %s)\n"
           "  --timeout-ms N     how long to wait for the broker (env %s, default "
           "%d)\n" OQ_CLI_KEY_HELP "  -h, --help         show this help\n",
           OQ_CLI_ENV_BROKER, OQ_DEFAULT_FRONT_ENDPOINT, OQ_CLI_ENV_TIMEOUT_MS,
           OQ_DEFAULT_CLIENT_TIMEOUT_MS);
}

int oq_cmd_ping(oq_cli_t *cli, int argc, char **argv)
{
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    int stop; /* only the global options: none comes back */
    if (oq_cli_next_option(cli, argc, argv, options, s_help, &stop) == OQ_CLI_OPT_STOP)
        return stop;
    if (optind < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind]);

    oq_client_t *client = NULL;
    int rc = oq_cli_connect(cli, &client);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    int64_t start_us = oq_clock_mono_us();
    if (oq_client_ping(client, cli->timeout) == 0)
        printf("pong from %s in %.3f ms\n", cli->endpoint,
               (double)(oq_clock_mono_us() - start_us) / S_US_PER_MS);
    else
        rc = oq_cli_report(cli, client);
    oq_client_destroy(&client);
    return rc;
}
