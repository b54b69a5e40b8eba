/*  cli.c: helpers shared by the subcommands of the onceq tool. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpjson.h"
#include "onceq/config.h"
#include "onceq/limits.h"

int oq_cli_global_option(oq_cli_t *cli, int opt, const char *arg)
{
    switch (opt) {
    case OQ_CLI_OPT_BROKER:
        cli->broker = arg;
        return 0;
    case OQ_CLI_OPT_TIMEOUT_MS:
        cli->timeout_ms = arg;
        return 0;
    case OQ_CLI_OPT_DATABASE:
        cli->database = arg;
        return 0;
    case OQ_CLI_OPT_KEY:
        cli->key = arg;
        return 0;
    case OQ_CLI_OPT_BROKER_KEY:
        cli->broker_key = arg;
        return 0;
    default:
        return -1;
    }
}

int oq_cli_usage_error(const oq_cli_t *cli, const char *format, ...)
{
    char text[1024];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    fprintf(stderr, "onceq: %s\n", text);
    if (cli->command)
        fprintf(stderr, "Try 'onceq %s --help'.\n", cli->command);
    else
        fprintf(stderr, "Try 'onceq --help'.\n");
    return OQ_CLI_EXIT_USAGE;
}

int oq_cli_option_error(const oq_cli_t *cli, int opt, char **argv)
{
    /* getopt_long leaves optind past the offending word, and optopt holds
       the letter of a short option (0 for a long one). */
    const char *word = optind > 0 ? argv[optind - 1] : "?";
    if (opt == ':')
        return oq_cli_usage_error(cli, "option '%s' needs a value", word);
    if (optopt && strncmp(word, "--", 2) != 0)
        return oq_cli_usage_error(cli, "unknown option '-%c'", optopt);
    return oq_cli_usage_error(cli, "unknown option '%s'", word);
}

int oq_cli_next_option(oq_cli_t *cli, int argc, char **argv, const struct option *options,
                       void (*help)(void), int *exit_code)
{
    for (;;) {
        int opt = getopt_long(argc, argv, ":h", options, NULL);
        if (opt == 'h') {
            help();
            *exit_code = OQ_CLI_EXIT_OK;
            return OQ_CLI_OPT_STOP;
        }
        if (opt == '?' || opt == ':') {
            *exit_code = oq_cli_option_error(cli, opt, argv);
            return OQ_CLI_OPT_STOP;
        }
        if (opt == -1 || oq_cli_global_option(cli, opt, optarg) < 0)
            return opt;
    }
}

int oq_cli_connect(oq_cli_t *cli, oq_client_t **client)
{
    cli->endpoint = oq_config_str(cli->broker, OQ_CLI_ENV_BROKER, OQ_DEFAULT_FRONT_ENDPOINT);
    const char *timeout_text = oq_config_str(cli->timeout_ms, OQ_CLI_ENV_TIMEOUT_MS, NULL);
    cli->timeout = OQ_DEFAULT_CLIENT_TIMEOUT_MS;
    if (timeout_text) {
        uint64_t ms;
        if (oq_config_uint(timeout_text, 1, OQ_CLI_MAX_TIMEOUT_MS, &ms) < 0)
            return oq_cli_usage_error(cli, "%s '%s' must be a number of milliseconds, 1 to %d",
                                      cli->timeout_ms ? "--timeout-ms" : OQ_CLI_ENV_TIMEOUT_MS,
                                      timeout_text, OQ_CLI_MAX_TIMEOUT_MS);
        cli->timeout = (int)ms;
    }
    const char *key = oq_config_str(cli->key, OQ_CLI_ENV_KEY, NULL);
    const char *broker_key = oq_config_str(cli->broker_key, OQ_CLI_ENV_BROKER_KEY, NULL);
    if (!key != !broker_key)
        return oq_cli_usage_error(cli,
                                  "CURVE needs both --key (env %s) and --broker-key (env %s); "
                                  "only %s is set",
                                  OQ_CLI_ENV_KEY, OQ_CLI_ENV_BROKER_KEY,
                                  key ? "the key" : "the broker key");
    *client = oq_client_new(cli->endpoint);
    if (!*client)
        return oq_cli_usage_error(cli, "cannot use broker endpoint '%s' (%s)", cli->endpoint,
                                  "expected e.g. tcp://127.0.0.1:7750");
    if (key && oq_client_set_curve_files(*client, key, broker_key) < 0) {
        int rc = oq_cli_usage_error(cli, "%s", oq_client_error(*client));
        oq_client_destroy(client);
        return rc;
    }
    return OQ_CLI_EXIT_OK;
}

int oq_cli_report(const oq_cli_t *cli, const oq_client_t *client)
{
    oq_err_t code = oq_client_error_code(client);
    if (code != OQ_ERR_NONE) {
        fprintf(stderr, "onceq: %s: %s\n", oq_proto_err_name(code), oq_client_error(client));
        return OQ_CLI_EXIT_REFUSED;
    }
    fprintf(stderr, "onceq: %s\n", oq_client_error(client));
    return OQ_CLI_EXIT_NO_REPLY;
}

int oq_cli_parse_int(const char *text, int64_t min, int64_t max, int64_t *out)
{
    if (!text || !*text)
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

void oq_cli_format_time(int64_t unix_ms, char *out, size_t out_len)
{
    time_t seconds = (time_t)(unix_ms / 1000);
    struct tm tm;
    if (unix_ms < 0 || !gmtime_r(&seconds, &tm)) {
        snprintf(out, out_len, "-");
        return;
    }
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, out_len, "%s.%03dZ", stamp, (int)(unix_ms % 1000));
}

void oq_cli_format_value(const msgpack_object *o, char *out, size_t out_len)
{
    if (!o) {
        snprintf(out, out_len, "-");
        return;
    }
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        snprintf(out, out_len, "%" PRIu64, o->via.u64);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        snprintf(out, out_len, "%" PRId64, o->via.i64);
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        snprintf(out, out_len, "%g", o->via.f64);
        break;
    case MSGPACK_OBJECT_STR:
        snprintf(out, out_len, "%.*s", (int)o->via.str.size, o->via.str.ptr);
        break;
    case MSGPACK_OBJECT_BOOLEAN:
        snprintf(out, out_len, "%s", o->via.boolean ? "true" : "false");
        break;
    default:
        snprintf(out, out_len, "-");
        break;
    }
}

int oq_cli_get_uint(const msgpack_object *map, const char *key, uint64_t *out)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return -1;
    *out = o->via.u64;
    return 0;
}

int oq_cli_print_json(const msgpack_object *reply)
{
    json_t *json = oq_mpjson_from_object(reply);
    if (!json) {
        fprintf(stderr, "onceq: out of memory\n");
        return OQ_CLI_EXIT_REFUSED;
    }
    /* The envelope says how the answer travelled, not what it is. */
    json_object_del(json, "v");
    json_object_del(json, "cmd");
    json_object_del(json, "req");
    int rc = json_dumpf(json, stdout, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(json);
    if (rc < 0 || fputc('\n', stdout) == EOF) {
        fprintf(stderr, "onceq: cannot write the output\n");
        return OQ_CLI_EXIT_REFUSED;
    }
    return OQ_CLI_EXIT_OK;
}

int oq_cli_parse_cursor(const char *text, uint64_t *id, int64_t *at)
{
    char copy[64];
    if (strlen(text) >= sizeof copy)
        return -1;
    snprintf(copy, sizeof copy, "%s", text);
    char *sep = strchr(copy, '@');
    uint64_t ms;
    *at = -1;
    if (sep) {
        *sep = 0;
        if (oq_config_uint(sep + 1, 0, INT64_MAX, &ms) < 0)
            return -1;
        *at = (int64_t)ms;
    }
    return oq_config_uint(copy, 0, UINT64_MAX, id);
}
