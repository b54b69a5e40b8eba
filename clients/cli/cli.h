/*  cli.h: what the subcommands of the onceq tool share: the global options
    (--broker, --timeout-ms, --database, --key, --broker-key), the exit codes, connecting,
    reporting a failed request, and a few parsers and formatters. Each
    subcommand lives in its own cmd_*.c and returns an exit code; the
    database ones share cli_db.h too. */
#ifndef ONCEQ_CLI_H
#define ONCEQ_CLI_H

#include <getopt.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "onceq/client.h"

/* Exit codes. Scripts rely on them; docs in --help. */
enum {
    OQ_CLI_EXIT_OK = 0,
    OQ_CLI_EXIT_REFUSED = 1,  /* the broker or the database answered with an error */
    OQ_CLI_EXIT_USAGE = 2,    /* bad command line */
    OQ_CLI_EXIT_NO_REPLY = 3, /* no (readable) answer in time, or no connection */
    /* wait, dispatch --wait: how the job ended (done is OQ_CLI_EXIT_OK) */
    OQ_CLI_EXIT_FAILED = 4,    /* in the failed store (or deleted from it) */
    OQ_CLI_EXIT_REVIEW = 5,    /* in the review store: a person decides */
    OQ_CLI_EXIT_CANCELLED = 6, /* withdrawn before it ran */
    OQ_CLI_EXIT_PENDING = 7,   /* not ended within the wait's --timeout */
};

/* The exit codes of wait, as --help shows them. */
#define OQ_CLI_WAIT_EXIT_HELP                                                                      \
    "Exit status 0 done, 4 failed, 5 in review, 6 cancelled, 7 still pending at the\n"             \
    "end of the timeout; 1 refused (the reason is printed: e.g. an id the broker never\n"          \
    "issued), 2 bad command line, 3 no answer in time.\n"

/* Environment fallbacks of the global options. */
#define OQ_CLI_ENV_BROKER     "ONCEQ_BROKER"
#define OQ_CLI_ENV_TIMEOUT_MS "ONCEQ_CLIENT_TIMEOUT_MS"
#define OQ_CLI_ENV_DATABASE   "ONCEQ_DATABASE_URL"
#define OQ_CLI_ENV_KEY        "ONCEQ_KEY"
#define OQ_CLI_ENV_BROKER_KEY "ONCEQ_BROKER_KEY"
/* Longest request timeout accepted: one hour. */
#define OQ_CLI_MAX_TIMEOUT_MS (3600 * 1000)

/* getopt_long values of the options every subcommand accepts. */
enum {
    OQ_CLI_OPT_BROKER = 0x100,
    OQ_CLI_OPT_TIMEOUT_MS,
    OQ_CLI_OPT_DATABASE,
    OQ_CLI_OPT_KEY,
    OQ_CLI_OPT_BROKER_KEY,
    OQ_CLI_OPT_FIRST_FREE_
};

/* clang-format off */
#define OQ_CLI_GLOBAL_OPTIONS                                          \
    {"broker", required_argument, NULL, OQ_CLI_OPT_BROKER},            \
    {"timeout-ms", required_argument, NULL, OQ_CLI_OPT_TIMEOUT_MS},    \
    {"database", required_argument, NULL, OQ_CLI_OPT_DATABASE},        \
    {"key", required_argument, NULL, OQ_CLI_OPT_KEY},                  \
    {"broker-key", required_argument, NULL, OQ_CLI_OPT_BROKER_KEY},    \
    {"help", no_argument, NULL, 'h'}
/* clang-format on */

/* The lines of the CURVE options in each broker command's --help. */
#define OQ_CLI_KEY_HELP                                                                            \
    "  --key FILE         our secret key file, NAME.key_secret (env " OQ_CLI_ENV_KEY ")\n"         \
    "  --broker-key FILE  the broker's public key file, broker.key (env " OQ_CLI_ENV_BROKER_KEY    \
    ")\n"

typedef struct {
    const char *broker;     /* --broker as given, or NULL */
    const char *timeout_ms; /* --timeout-ms as given, or NULL */
    const char *database;   /* --database as given, or NULL */
    const char *key;        /* --key as given, or NULL */
    const char *broker_key; /* --broker-key as given, or NULL */
    const char *command;    /* subcommand being run, for messages */
    /* set by oq_cli_connect */
    const char *endpoint;
    int timeout;
} oq_cli_t;

/* Subcommands: argv[0] is the subcommand's name. Each returns an exit code. */
int oq_cmd_dispatch(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_stats(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_failed(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_review(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_ping(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_db(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_customer(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_grant(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_balance(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_job(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_queue(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_batch(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_wait(oq_cli_t *cli, int argc, char **argv);

/* Wait for job id to end, for at most wait_ms (< 0: until it ends), in
   waits of at most OQ_MAX_WAIT_MS; print "job ID STATE[: ERROR]" and
   return the exit code of its state (or of the failure). */
int oq_cli_wait_job(const oq_cli_t *cli, oq_client_t *client, uint64_t id, int64_t wait_ms);
/* oq_cli_wait_job after a first answer, state and error, that came
   after waited_ms of the wait_ms (a dispatch that waited). */
int oq_cli_wait_more(const oq_cli_t *cli, oq_client_t *client, uint64_t id, int64_t wait_ms,
                     int64_t waited_ms, oq_wait_state_t state, const char *error);
/* `db prune`, reached through oq_cmd_db (argv as it got it). */
int oq_cmd_db_prune(oq_cli_t *cli, int argc, char **argv);
int oq_cmd_keygen(oq_cli_t *cli, int argc, char **argv);

/* Handle one getopt_long result that is a global option; 0 if it was one
   (recorded in cli), -1 otherwise. */
int oq_cli_global_option(oq_cli_t *cli, int opt, const char *arg);

/* Report a getopt_long error ('?' or ':') for argv; returns OQ_CLI_EXIT_USAGE. */
int oq_cli_option_error(const oq_cli_t *cli, int opt, char **argv);

/* What oq_cli_next_option returns when the subcommand must end at once. */
#define OQ_CLI_OPT_STOP (-2)

/* The next of a subcommand's own options in argv, by getopt_long over
   options: a global option is recorded in cli and skipped, -h and --help
   print help, and a bad option or one without its value is reported.
   Returns the option (its value in optarg), -1 after the last one, or
   OQ_CLI_OPT_STOP with *exit_code set: OQ_CLI_EXIT_OK after the help,
   OQ_CLI_EXIT_USAGE after an error. */
int oq_cli_next_option(oq_cli_t *cli, int argc, char **argv, const struct option *options,
                       void (*help)(void), int *exit_code);

/* Print "onceq: <message>" and a hint to --help to stderr; returns
   OQ_CLI_EXIT_USAGE. */
int oq_cli_usage_error(const oq_cli_t *cli, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Resolve endpoint, timeout and keys (flag, environment, default) and
   connect, with CURVE when a key and the broker's key are given. Returns
   OQ_CLI_EXIT_OK with *client, or OQ_CLI_EXIT_USAGE after printing why. */
int oq_cli_connect(oq_cli_t *cli, oq_client_t **client);

/* Print the client's last error to stderr ("onceq: <code>: <message>" for a
   broker error) and return the matching exit code. */
int oq_cli_report(const oq_cli_t *cli, const oq_client_t *client);

/* Parse a signed integer in [min, max]; 0 or -1. */
int oq_cli_parse_int(const char *text, int64_t min, int64_t max, int64_t *out);

/* Unix milliseconds as ISO-8601 UTC, "2024-05-01T12:00:00.123Z". */
void oq_cli_format_time(int64_t unix_ms, char *out, size_t out_len);

/* A scalar msgpack value as text for a table cell: integers in decimal,
   floats with %g, strings as they are; "-" if o is NULL or not a scalar. */
void oq_cli_format_value(const msgpack_object *o, char *out, size_t out_len);

/* Read an integer field of a map; 0 with *out, or -1 if missing or not a
   non-negative integer. */
int oq_cli_get_uint(const msgpack_object *map, const char *key, uint64_t *out);

/* Parse a page cursor as printed under a page of the failed or the review
   store: "ID@AT_MS", or "ID" alone (*at = -1: the broker looks the time up).
   0 or -1. */
int oq_cli_parse_cursor(const char *text, uint64_t *id, int64_t *at);

/* Print a reply as one line of JSON, without the envelope (v, cmd, req).
   Returns an exit code. */
int oq_cli_print_json(const msgpack_object *reply);

#endif
