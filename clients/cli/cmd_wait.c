/*  cmd_wait.c: `onceq wait ID [--timeout S]`: wait until a job has ended
    (done, failed, in review, cancelled) and say how, in words and in the
    exit code, so that a script can dispatch a job and act on its outcome. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "onceq/config.h"
#include "onceq/limits.h"

static void s_help(void)
{
    printf("Usage: onceq wait ID [options]\n"
           "\n"
           "Wait until job ID has ended and print \"job ID STATE\": done, failed (with its\n"
           "error), review (with the handler's reason) or cancelled; or pending if it\n"
           "had not ended when --timeout ran out. A job the broker no longer holds has\n"
           "ended: it is done, unless the broker remembers it cancelled or deleted from\n"
           "the failed store (failed).\n"
           "\n"
           "Options:\n"
           "  --timeout S        give up after S seconds (e.g. 30, 0.5; 0: only ask);\n"
           "                     default: wait until the job ends\n"
           "  --broker ENDPOINT  broker front socket (env %s, default %s)\n"
           "  --timeout-ms N     how long to wait for the broker on top of the wait (env %s,\n"
           "                     default %d)\n" OQ_CLI_KEY_HELP
           "  -h, --help         show this help\n"
           "\n" OQ_CLI_WAIT_EXIT_HELP,
           OQ_CLI_ENV_BROKER, OQ_DEFAULT_FRONT_ENDPOINT, OQ_CLI_ENV_TIMEOUT_MS,
           OQ_DEFAULT_CLIENT_TIMEOUT_MS);
}

static int s_exit_of(oq_wait_state_t state)
{
    switch (state) {
    case OQ_WAIT_DONE:
        return OQ_CLI_EXIT_OK;
    case OQ_WAIT_FAILED:
        return OQ_CLI_EXIT_FAILED;
    case OQ_WAIT_REVIEW:
        return OQ_CLI_EXIT_REVIEW;
    case OQ_WAIT_CANCELLED:
        return OQ_CLI_EXIT_CANCELLED;
    default:
        return OQ_CLI_EXIT_PENDING;
    }
}

/* Wait again while the job is pending and time is left; then print. */
static int s_wait(const oq_cli_t *cli, oq_client_t *client, uint64_t id, int64_t wait_ms,
                  bool asked, oq_wait_state_t state, char *error, size_t error_len)
{
    /* One wait lasts OQ_MAX_WAIT_MS at most: a longer one is several. */
    while (!asked || (state == OQ_WAIT_PENDING && wait_ms != 0)) {
        int64_t slice = wait_ms < 0 || wait_ms > OQ_MAX_WAIT_MS ? OQ_MAX_WAIT_MS : wait_ms;
        if (oq_client_wait(client, id, slice, cli->timeout, &state, error, error_len) < 0)
            return oq_cli_report(cli, client);
        asked = true;
        if (wait_ms > 0)
            wait_ms -= slice;
    }
    printf("job %" PRIu64 " %s%s%s\n", id, oq_proto_wait_state_name(state), error[0] ? ": " : "",
           error);
    return s_exit_of(state);
}

int oq_cli_wait_job(const oq_cli_t *cli, oq_client_t *client, uint64_t id, int64_t wait_ms)
{
    char error[OQ_MAX_ERROR_LEN + 1] = "";
    return s_wait(cli, client, id, wait_ms, false, OQ_WAIT_PENDING, error, sizeof error);
}

int oq_cli_wait_more(const oq_cli_t *cli, oq_client_t *client, uint64_t id, int64_t wait_ms,
                     int64_t waited_ms, oq_wait_state_t state, const char *error)
{
    char text[OQ_MAX_ERROR_LEN + 1];
    snprintf(text, sizeof text, "%s", error);
    if (wait_ms > 0)
        wait_ms = wait_ms > waited_ms ? wait_ms - waited_ms : 0;
    return s_wait(cli, client, id, wait_ms, true, state, text, sizeof text);
}

int oq_cmd_wait(oq_cli_t *cli, int argc, char **argv)
{
    enum { S_OPT_TIMEOUT = OQ_CLI_OPT_FIRST_FREE_ };
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"timeout", required_argument, NULL, S_OPT_TIMEOUT},
        {NULL, 0, NULL, 0},
    };
    int64_t wait_ms = -1;
    int opt, stop;
    while ((opt = oq_cli_next_option(cli, argc, argv, options, s_help, &stop)) != -1) {
        if (opt == OQ_CLI_OPT_STOP)
            return stop;
        if (oq_config_seconds(optarg, OQ_MAX_DELAY_MS, &wait_ms) < 0)
            return oq_cli_usage_error(cli, "--timeout '%s' must be seconds from 0 to %lld", optarg,
                                      OQ_MAX_DELAY_MS / 1000);
    }
    if (optind + 1 != argc)
        return oq_cli_usage_error(cli, "wait needs exactly one job ID, e.g. 'onceq wait 42'");
    uint64_t id;
    if (oq_config_uint(argv[optind], 1, UINT64_MAX, &id) < 0)
        return oq_cli_usage_error(cli, "job ID '%s' must be a whole number from 1", argv[optind]);
    oq_client_t *client = NULL;
    int rc = oq_cli_connect(cli, &client);
    if (rc == OQ_CLI_EXIT_OK)
        rc = oq_cli_wait_job(cli, client, id, wait_ms);
    oq_client_destroy(&client);
    return rc;
}
