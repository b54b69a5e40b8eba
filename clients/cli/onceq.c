/*  onceq.c: the onceq command line tool. Global options may come before or
    after the subcommand (`onceq --broker X stats` and `onceq stats --broker X`
    are the same); each subcommand parses its own options in its cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "onceq/limits.h"

typedef struct {
    const char *name;
    int (*run)(oq_cli_t *cli, int argc, char **argv);
    const char *summary;
} s_command_t;

static const s_command_t s_commands[] = {
    {"dispatch", oq_cmd_dispatch, "queue a job and print its id"},
    {"stats", oq_cmd_stats, "show queues, counters and connected workers"},
    {"failed", oq_cmd_failed, "failed jobs: list, retry, forget, flush, prune"},
    {"review", oq_cmd_review, "'review list|show|resolve': jobs whose outcome a person decides"},
    {"job", oq_cmd_job, "'job cancel ID': withdraw a job that waits; 'job show ID': its chain"},
    {"batch", oq_cmd_batch, "'batch dispatch|show|list|cancel': jobs with then/catch/finally"},
    {"queue", oq_cmd_queue, "'queue clear Q': cancel every job of Q that has not started"},
    {"wait", oq_cmd_wait, "wait until a job has ended: done, failed, review or cancelled"},
    {"ping", oq_cmd_ping, "check that the broker answers"},
    {"db", oq_cmd_db, "'db migrate': apply the migrations; 'db prune': delete old guard rows"},
    {"customer", oq_cmd_customer, "'customer add ID': give a customer a balance row"},
    {"grant", oq_cmd_grant, "grant an order's points once, through the same guard as the jobs"},
    {"balance", oq_cmd_balance, "print a customer's point balance"},
    {"keygen", oq_cmd_keygen, "'keygen [--dir DIR] NAME': make a CURVE key pair"},
};

#define S_COMMAND_COUNT (sizeof s_commands / sizeof s_commands[0])

static void s_help(void)
{
    printf("Usage: onceq [--broker ENDPOINT] [--key FILE --broker-key FILE] [--timeout-ms N]\n"
           "             [--database URL] COMMAND [options]\n"
           "\n"
           "Producer and admin tool for onceq-broker and its PostgreSQL database.\n"
           "\n"
           "Commands:\n");
    for (size_t i = 0; i < S_COMMAND_COUNT; i++)
        printf("  %-10s %s\n", s_commands[i].name, s_commands[i].summary);
    printf("\n"
           "Options (also accepted after the command):\n"
           "  --broker ENDPOINT  broker front socket (env %s, default %s)\n"
           "  --timeout-ms N     how long to wait for the broker's answer, in ms\n"
           "                     (env %s, default %d)\n"
           "  --key FILE         our secret key file (NAME.key_secret, onceq keygen): speak\n"
           "                     CURVE to the broker with it (env %s)\n"
           "  --broker-key FILE  the broker's public key file, broker.key (env %s); both\n"
           "                     or neither: without them the broker must run --insecure\n"
           "  --database URL     PostgreSQL for db, customer, grant and balance: a libpq\n"
           "                     conninfo or URI (env %s, default: libpq's defaults)\n"
           "  -h, --help         show this help; 'onceq COMMAND --help' for a command\n"
           "\n"
           "Exit status: %d ok, %d the broker or the database refused the request (the\n"
           "reason is printed), %d bad command line, %d no answer in time or no\n"
           "connection.\n",
           OQ_CLI_ENV_BROKER, OQ_DEFAULT_FRONT_ENDPOINT, OQ_CLI_ENV_TIMEOUT_MS,
           OQ_DEFAULT_CLIENT_TIMEOUT_MS, OQ_CLI_ENV_KEY, OQ_CLI_ENV_BROKER_KEY, OQ_CLI_ENV_DATABASE,
           OQ_CLI_EXIT_OK, OQ_CLI_EXIT_REFUSED, OQ_CLI_EXIT_USAGE, OQ_CLI_EXIT_NO_REPLY);
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    oq_cli_t cli;
    memset(&cli, 0, sizeof cli);
    /* Errors are reported by us, with the command's name and a hint. */
    opterr = 0;
    int opt;
    /* "+": stop at the first word that is not an option, the command. */
    while ((opt = getopt_long(argc, argv, "+:h", options, NULL)) != -1) {
        if (opt == 'h') {
            s_help();
            return OQ_CLI_EXIT_OK;
        }
        if (oq_cli_global_option(&cli, opt, optarg) < 0)
            return oq_cli_option_error(&cli, opt, argv);
    }
    if (optind >= argc)
        return oq_cli_usage_error(&cli, "no command given");
    const char *name = argv[optind];
    if (strcmp(name, "help") == 0) {
        s_help();
        return OQ_CLI_EXIT_OK;
    }
    for (size_t i = 0; i < S_COMMAND_COUNT; i++) {
        if (strcmp(name, s_commands[i].name) == 0) {
            cli.command = name;
            int sub_argc = argc - optind;
            char **sub_argv = argv + optind;
            /* 0, not 1: GNU getopt then also forgets its internal state. */
            optind = 0;
            return s_commands[i].run(&cli, sub_argc, sub_argv);
        }
    }
    return oq_cli_usage_error(&cli, "unknown command '%s'", name);
}
