/*  cmd_dispatch.c: `onceq dispatch TYPE [options]`: queue one job and print
    its id. Options are checked here against the same limits the broker
    applies, so a typo is a usage error with the flag's name in it rather than
    a round trip and a broker message about a wire field. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mpjson.h"
#include "onceq/config.h"
#include "onceq/limits.h"

/* The payload sits two levels down in a dispatch (message map, job map), and
   the whole message may nest at most OQ_MAX_DEPTH deep. */
#define S_MAX_PAYLOAD_DEPTH (OQ_MAX_DEPTH - 2)

static void s_help(void)
{
    printf("Usage: onceq dispatch TYPE [options]\n"
           "\n"
           "Queue one job of handler TYPE and print its id on stdout.\n"
           "\n"
           "Options:\n"
           "  --payload JSON     handler arguments, a JSON object (default {});\n"
           "                     @FILE reads it from a file, @- from stdin\n"
           "  --queue Q          queue name (default %s)\n"
           "  --chain TYPE       a link after the job (repeat, in order, up to %d): on the\n"
           "                     job's ok the next link is dispatched, once; the chain\n"
           "                     stops on a final failure (docs/workflows.md)\n"
           "  --chain-payload J  the payload of the --chain just before it (default {})\n"
           "  --chain-catch TYPE dispatched once if a link ends in the failed store\n"
           "  --delay S          seconds before the job may run (default 0)\n"
           "  --max-tries N      deliveries before the job fails, 1 to %d\n"
           "                     (default: the queue's, %d)\n"
           "  --backoff LIST     seconds between tries, e.g. 10,60,300; the last repeats\n"
           "  --timeout S        seconds the handler may run (default: the queue's, %d);\n"
           "                     must be shorter than the queue's retry_after\n"
           "  --priority P       %d to %d, higher first (default 0)\n"
           "  --dispatch-id ID   this dispatch's id, 1 to %d printable characters without\n"
           "                     spaces (default: a new random one); the broker answers an\n"
           "                     id it has seen within its dedupe window with the same job\n"
           "  --unique-key K     queue nothing while a job with this key is queued, delayed\n"
           "                     or running (or within --unique-for of its dispatch): the\n"
           "                     answer is that job's id; 1 to %d printable characters\n"
           "                     without spaces\n"
           "  --unique-for S|done  keep the key S seconds from dispatch (%lld to %lld), even\n"
           "                     after the job is done; done (the default): until it is\n"
           "  --overlap-key K    never run two jobs with this key at once; the others wait\n"
           "                     without using tries\n"
           "  --retries N        send again, with the same dispatch id, up to N times when\n"
           "                     the broker does not answer in time, 0 to %d (default %d)\n"
           "  --wait             also wait until the job has ended (the wait travels with\n"
           "                     the dispatch; the id is printed once the job has ended, or\n"
           "                     after --timeout-ms at the latest), print \"job ID STATE\"\n"
           "                     (as 'onceq wait ID') and exit with its status (below)\n"
           "  --wait-timeout S   with --wait: give up after S seconds (default: wait until\n"
           "                     the job ends)\n"
           "  --broker ENDPOINT  broker front socket (env %s, default %s)\n"
           "  --timeout-ms N     how long to wait for each answer (env %s, default "
           "%d)\n" OQ_CLI_KEY_HELP "  -h, --help         show this help\n"
           "\n"
           "The id printed means the job is durable under the broker's fsync policy.\n"
           "A job id is new on every dispatch and is not an idempotency key: running\n"
           "the same command twice queues two jobs, unless both pass the same\n"
           "--dispatch-id. If the broker does not answer at all, the job may still\n"
           "have been queued: run the command again with the dispatch id it prints.\n"
           "Unique and overlap keys save work; they are not what keeps effects right\n"
           "(the handler's guard row is).\n"
           "\n"
           "Exit status 0 queued (with --wait: done), 1 refused, 2 bad command line,\n"
           "3 no answer in time. With --wait, as 'onceq wait':\n" OQ_CLI_WAIT_EXIT_HELP,
           OQ_DEFAULT_QUEUE, OQ_MAX_CHAIN_LINKS, OQ_MAX_TRIES_LIMIT, OQ_DEFAULT_MAX_TRIES,
           OQ_DEFAULT_TIMEOUT_MS / 1000, -OQ_MAX_PRIORITY, OQ_MAX_PRIORITY, OQ_MAX_DISPATCH_ID_LEN,
           OQ_MAX_JOB_KEY_LEN, OQ_MIN_UNIQUE_FOR_MS / 1000, OQ_MAX_UNIQUE_FOR_MS / 1000,
           OQ_MAX_CLIENT_RETRIES, OQ_DEFAULT_CLIENT_RETRIES, OQ_CLI_ENV_BROKER,
           OQ_DEFAULT_FRONT_ENDPOINT, OQ_CLI_ENV_TIMEOUT_MS, OQ_DEFAULT_CLIENT_TIMEOUT_MS);
}

enum {
    S_OPT_PAYLOAD = OQ_CLI_OPT_FIRST_FREE_,
    S_OPT_QUEUE,
    S_OPT_DELAY,
    S_OPT_MAX_TRIES,
    S_OPT_BACKOFF,
    S_OPT_TIMEOUT,
    S_OPT_PRIORITY,
    S_OPT_DISPATCH_ID,
    S_OPT_RETRIES,
    S_OPT_UNIQUE_KEY,
    S_OPT_UNIQUE_FOR,
    S_OPT_OVERLAP_KEY,
    S_OPT_WAIT,
    S_OPT_WAIT_TIMEOUT,
    S_OPT_CHAIN,
    S_OPT_CHAIN_PAYLOAD,
    S_OPT_CHAIN_CATCH,
};

/* Parse --payload into buf as a msgpack map. Returns an exit code. */
static int s_payload(oq_cli_t *cli, const char *text, msgpack_sbuffer *buf)
{
    /* A single command-line word is limited to 128 KiB on Linux, less than
       the payload limit: "@FILE" (and "@-" for stdin) lifts that. A JSON
       object never starts with '@', so the two cannot be confused. */
    json_error_t error;
    json_t *json;
    if (text[0] == '@' && strcmp(text, "@-") == 0)
        json = json_loadf(stdin, JSON_REJECT_DUPLICATES, &error);
    else if (text[0] == '@')
        json = json_load_file(text + 1, JSON_REJECT_DUPLICATES, &error);
    else
        json = json_loads(text, JSON_REJECT_DUPLICATES, &error);
    if (!json && json_error_code(&error) == json_error_cannot_open_file)
        return oq_cli_usage_error(cli, "--payload: %s", error.text);
    /* jansson keeps integers in a json_int_t (int64) and reals in a double;
       a number beyond those is valid JSON all the same, so say what the
       real limit is. */
    if (!json && json_error_code(&error) == json_error_numeric_overflow)
        return oq_cli_usage_error(cli,
                                  "--payload: number out of range at line %d, column %d "
                                  "(integers must be within -2^63 .. 2^63-1, reals within "
                                  "a double)",
                                  error.line, error.column);
    if (!json)
        return oq_cli_usage_error(cli, "--payload is not valid JSON: %s (line %d, column %d)",
                                  error.text, error.line, error.column);
    int rc = OQ_CLI_EXIT_OK;
    char why[128];
    if (!json_is_object(json)) {
        rc = oq_cli_usage_error(cli,
                                "--payload must be a JSON object, like {\"order_id\": 42}; "
                                "got %s",
                                oq_mpjson_kind(json));
    } else {
        msgpack_packer pk;
        msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
        if (oq_mpjson_pack(&pk, json, S_MAX_PAYLOAD_DEPTH, why, sizeof why) < 0)
            rc = oq_cli_usage_error(cli, "--payload: %s", why);
    }
    json_decref(json);
    return rc;
}

/* Dispatch job with its --chain links and --chain-catch: 0 sent (*id), -1
   refused or unanswered (the client says why), or an exit code above 0
   for a bad --chain-payload. */
static int s_send_chain(oq_cli_t *cli, oq_client_t *client, const oq_job_msg_t *job,
                        const char *const *types, const char *const *payloads, size_t count,
                        uint64_t *id)
{
    static const uint8_t empty_map = 0x80;
    oq_job_msg_t links[OQ_MAX_CHAIN_LINKS + 1];
    msgpack_sbuffer bufs[OQ_MAX_CHAIN_LINKS + 1];
    int rc = 0;
    size_t made = 0;
    for (size_t i = 0; i <= OQ_MAX_CHAIN_LINKS; i++) {
        if (i >= count && i != OQ_MAX_CHAIN_LINKS)
            continue;
        if (!types[i])
            continue;
        links[i] = (oq_job_msg_t){
            .type = oq_str(types[i]), .queue = job->queue, .payload = &empty_map, .payload_len = 1};
        msgpack_sbuffer_init(&bufs[i]);
        made |= (size_t)1 << i;
        if (payloads[i]) {
            int bad = s_payload(cli, payloads[i], &bufs[i]);
            if (bad != OQ_CLI_EXIT_OK) {
                rc = bad;
                break;
            }
            links[i].payload = (const uint8_t *)bufs[i].data;
            links[i].payload_len = bufs[i].size;
        }
    }
    if (rc == 0)
        rc = oq_client_dispatch_chain(client, job, links, count,
                                      types[OQ_MAX_CHAIN_LINKS] ? &links[OQ_MAX_CHAIN_LINKS] : NULL,
                                      cli->timeout, id);
    for (size_t i = 0; i <= OQ_MAX_CHAIN_LINKS; i++)
        if (made & ((size_t)1 << i))
            msgpack_sbuffer_destroy(&bufs[i]);
    return rc;
}

/* Fill the job's options from the command line. Returns an exit code. */
static int s_option(oq_cli_t *cli, int opt, const char *arg, oq_job_msg_t *job,
                    const char **payload)
{
    uint64_t u;
    int64_t i;
    switch (opt) {
    case S_OPT_PAYLOAD:
        *payload = arg;
        return OQ_CLI_EXIT_OK;
    case S_OPT_QUEUE:
        if (!oq_proto_name_valid(arg, strlen(arg)))
            return oq_cli_usage_error(
                cli, "--queue '%s' must be 1 to %d characters of A-Z a-z 0-9 _ . : -", arg,
                OQ_MAX_NAME_LEN);
        job->queue = oq_str(arg);
        return OQ_CLI_EXIT_OK;
    case S_OPT_DELAY:
        if (oq_config_seconds(arg, OQ_MAX_DELAY_MS, &job->delay_ms) < 0)
            return oq_cli_usage_error(cli, "--delay '%s' must be seconds from 0 to %lld", arg,
                                      OQ_MAX_DELAY_MS / 1000);
        job->has_delay = true;
        return OQ_CLI_EXIT_OK;
    case S_OPT_MAX_TRIES:
        if (oq_config_uint(arg, 1, OQ_MAX_TRIES_LIMIT, &u) < 0)
            return oq_cli_usage_error(cli, "--max-tries '%s' must be a whole number from 1 to %d",
                                      arg, OQ_MAX_TRIES_LIMIT);
        job->max_tries = (uint32_t)u;
        job->has_max_tries = true;
        return OQ_CLI_EXIT_OK;
    case S_OPT_BACKOFF:
        if (oq_config_backoff(arg, job->backoff_ms, OQ_MAX_BACKOFF_STEPS, &job->backoff_len) < 0)
            return oq_cli_usage_error(cli,
                                      "--backoff '%s' must be 1 to %d comma-separated numbers "
                                      "of seconds, each at most %lld, e.g. 10,60,300",
                                      arg, OQ_MAX_BACKOFF_STEPS, OQ_MAX_BACKOFF_MS / 1000);
        return OQ_CLI_EXIT_OK;
    case S_OPT_TIMEOUT:
        if (oq_config_seconds(arg, OQ_MAX_TIMEOUT_MS, &job->timeout_ms) < 0 || job->timeout_ms == 0)
            return oq_cli_usage_error(cli,
                                      "--timeout '%s' must be seconds, more than 0 and at "
                                      "most %lld",
                                      arg, OQ_MAX_TIMEOUT_MS / 1000);
        job->has_timeout = true;
        return OQ_CLI_EXIT_OK;
    case S_OPT_UNIQUE_KEY:
    case S_OPT_OVERLAP_KEY:
        if (!oq_proto_job_key_valid(arg, strlen(arg)))
            return oq_cli_usage_error(cli,
                                      "%s '%s' must be 1 to %d printable characters without "
                                      "spaces",
                                      opt == S_OPT_UNIQUE_KEY ? "--unique-key" : "--overlap-key",
                                      arg, OQ_MAX_JOB_KEY_LEN);
        if (opt == S_OPT_UNIQUE_KEY)
            job->unique_key = oq_str(arg);
        else
            job->overlap_key = oq_str(arg);
        return OQ_CLI_EXIT_OK;
    case S_OPT_UNIQUE_FOR:
        if (strcmp(arg, "done") == 0) {
            job->unique_for_ms = 0;
            return OQ_CLI_EXIT_OK;
        }
        if (oq_config_seconds(arg, OQ_MAX_UNIQUE_FOR_MS, &job->unique_for_ms) < 0 ||
            job->unique_for_ms < OQ_MIN_UNIQUE_FOR_MS)
            return oq_cli_usage_error(cli,
                                      "--unique-for '%s' must be seconds from %lld to %lld, or "
                                      "done",
                                      arg, OQ_MIN_UNIQUE_FOR_MS / 1000,
                                      OQ_MAX_UNIQUE_FOR_MS / 1000);
        return OQ_CLI_EXIT_OK;
    case S_OPT_PRIORITY:
        if (oq_cli_parse_int(arg, -OQ_MAX_PRIORITY, OQ_MAX_PRIORITY, &i) < 0)
            return oq_cli_usage_error(cli, "--priority '%s' must be a whole number from %d to %d",
                                      arg, -OQ_MAX_PRIORITY, OQ_MAX_PRIORITY);
        job->priority = (int32_t)i;
        job->has_priority = true;
        return OQ_CLI_EXIT_OK;
    default:
        return oq_cli_usage_error(cli, "unexpected option");
    }
}

int oq_cmd_dispatch(oq_cli_t *cli, int argc, char **argv)
{
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"payload", required_argument, NULL, S_OPT_PAYLOAD},
        {"queue", required_argument, NULL, S_OPT_QUEUE},
        {"delay", required_argument, NULL, S_OPT_DELAY},
        {"max-tries", required_argument, NULL, S_OPT_MAX_TRIES},
        {"backoff", required_argument, NULL, S_OPT_BACKOFF},
        {"timeout", required_argument, NULL, S_OPT_TIMEOUT},
        {"priority", required_argument, NULL, S_OPT_PRIORITY},
        {"dispatch-id", required_argument, NULL, S_OPT_DISPATCH_ID},
        {"retries", required_argument, NULL, S_OPT_RETRIES},
        {"unique-key", required_argument, NULL, S_OPT_UNIQUE_KEY},
        {"unique-for", required_argument, NULL, S_OPT_UNIQUE_FOR},
        {"overlap-key", required_argument, NULL, S_OPT_OVERLAP_KEY},
        {"wait", no_argument, NULL, S_OPT_WAIT},
        {"wait-timeout", required_argument, NULL, S_OPT_WAIT_TIMEOUT},
        {"chain", required_argument, NULL, S_OPT_CHAIN},
        {"chain-payload", required_argument, NULL, S_OPT_CHAIN_PAYLOAD},
        {"chain-catch", required_argument, NULL, S_OPT_CHAIN_CATCH},
        {NULL, 0, NULL, 0},
    };
    oq_job_msg_t job;
    memset(&job, 0, sizeof job);
    const char *payload = NULL;
    uint64_t retries = OQ_DEFAULT_CLIENT_RETRIES;
    bool wait = false;
    int64_t wait_ms = -1;
    char made_id[2 * OQ_DISPATCH_ID_RANDOM_BYTES + 1];
    /* --chain: the links' types and payloads (NULL: {}), then --chain-catch. */
    const char *chain_types[OQ_MAX_CHAIN_LINKS + 1] = {NULL},
                                                 *chain_payloads[OQ_MAX_CHAIN_LINKS + 1] = {NULL};
    size_t chain_count = 0;
    int opt, stop;
    while ((opt = oq_cli_next_option(cli, argc, argv, options, s_help, &stop)) != -1) {
        if (opt == OQ_CLI_OPT_STOP)
            return stop;
        if (opt == S_OPT_DISPATCH_ID) {
            if (!oq_proto_dispatch_id_valid(optarg, strlen(optarg)))
                return oq_cli_usage_error(cli,
                                          "--dispatch-id '%s' must be 1 to %d printable "
                                          "characters without spaces",
                                          optarg, OQ_MAX_DISPATCH_ID_LEN);
            job.dispatch_id = oq_str(optarg);
            continue;
        }
        if (opt == S_OPT_WAIT) {
            wait = true;
            continue;
        }
        if (opt == S_OPT_CHAIN || opt == S_OPT_CHAIN_CATCH) {
            if (!oq_proto_name_valid(optarg, strlen(optarg)))
                return oq_cli_usage_error(cli, "--%s '%s' is not a valid job type",
                                          opt == S_OPT_CHAIN ? "chain" : "chain-catch", optarg);
            if (opt == S_OPT_CHAIN && chain_count == OQ_MAX_CHAIN_LINKS)
                return oq_cli_usage_error(cli, "a chain holds at most %d links",
                                          OQ_MAX_CHAIN_LINKS);
            if (opt == S_OPT_CHAIN)
                chain_types[chain_count++] = optarg;
            else
                chain_types[OQ_MAX_CHAIN_LINKS] = optarg;
            continue;
        }
        if (opt == S_OPT_CHAIN_PAYLOAD) {
            if (chain_count == 0)
                return oq_cli_usage_error(cli, "--chain-payload follows the --chain it is for");
            chain_payloads[chain_count - 1] = optarg;
            continue;
        }
        if (opt == S_OPT_WAIT_TIMEOUT) {
            if (oq_config_seconds(optarg, OQ_MAX_DELAY_MS, &wait_ms) < 0)
                return oq_cli_usage_error(cli, "--wait-timeout '%s' must be seconds from 0 to %lld",
                                          optarg, OQ_MAX_DELAY_MS / 1000);
            continue;
        }
        if (opt == S_OPT_RETRIES) {
            if (oq_config_uint(optarg, 0, OQ_MAX_CLIENT_RETRIES, &retries) < 0)
                return oq_cli_usage_error(cli, "--retries '%s' must be a whole number from 0 to %d",
                                          optarg, OQ_MAX_CLIENT_RETRIES);
            continue;
        }
        int rc = s_option(cli, opt, optarg, &job, &payload);
        if (rc != OQ_CLI_EXIT_OK)
            return rc;
    }
    if (optind >= argc)
        return oq_cli_usage_error(cli, "dispatch needs a job TYPE, e.g. 'onceq dispatch noop'");
    if (optind + 1 < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s' after the job type",
                                  argv[optind + 1]);
    if (wait_ms >= 0 && !wait)
        return oq_cli_usage_error(cli, "--wait-timeout needs --wait");
    bool chained = chain_count || chain_types[OQ_MAX_CHAIN_LINKS];
    if (chained && (wait || job.unique_key.len))
        return oq_cli_usage_error(cli, "--chain takes neither --wait nor --unique-key");
    if (job.unique_for_ms && !job.unique_key.len)
        return oq_cli_usage_error(cli, "--unique-for needs --unique-key");
    const char *type = argv[optind];
    if (!oq_proto_name_valid(type, strlen(type)))
        return oq_cli_usage_error(cli,
                                  "job type '%s' must be 1 to %d characters of "
                                  "A-Z a-z 0-9 _ . : -",
                                  type, OQ_MAX_NAME_LEN);
    job.type = oq_str(type);
    /* Made here rather than in the client so that it can be shown if no
       answer comes: running again with it cannot queue a second job. */
    if (!job.dispatch_id.len) {
        if (oq_client_new_dispatch_id(made_id, sizeof made_id) < 0) {
            fprintf(stderr, "onceq: cannot make a dispatch id (no randomness)\n");
            return OQ_CLI_EXIT_REFUSED;
        }
        job.dispatch_id = oq_str(made_id);
    }

    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int rc = OQ_CLI_EXIT_OK;
    if (payload) {
        rc = s_payload(cli, payload, &buf);
        job.payload = (const uint8_t *)buf.data;
        job.payload_len = buf.size;
    }
    oq_client_t *client = NULL;
    if (rc == OQ_CLI_EXIT_OK)
        rc = oq_cli_connect(cli, &client);
    if (rc == OQ_CLI_EXIT_OK) {
        uint64_t id = 0;
        bool unique = false;
        oq_client_set_retries(client, (uint32_t)retries);
        /* With --wait the first wait travels with the dispatch, and lasts
           --timeout-ms at most: the id comes within that, and a broker that
           is down shows as soon as without --wait, give or take a timeout. */
        int64_t first_ms = wait_ms < 0 || wait_ms > cli->timeout ? cli->timeout : wait_ms;
        oq_wait_state_t state = OQ_WAIT_PENDING;
        char error[OQ_MAX_ERROR_LEN + 1] = "";
        int sent;
        if (chained) {
            sent = s_send_chain(cli, client, &job, chain_types, chain_payloads, chain_count, &id);
            if (sent > 0) { /* a bad --chain-payload: said already */
                rc = sent;
                goto done;
            }
        } else
            sent = wait ? oq_client_dispatch_wait(client, &job, first_ms, cli->timeout, &id,
                                                  &unique, &state, error, sizeof error)
                        : oq_client_dispatch_reply(client, &job, cli->timeout, &id, &unique);
        if (sent == 0) {
            printf("%" PRIu64 "\n", id);
            if (unique)
                fprintf(stderr,
                        "onceq: job %" PRIu64 " holds unique key %.*s: nothing new was queued\n",
                        id, (int)job.unique_key.len, job.unique_key.ptr);
            if (wait) {
                fflush(stdout);
                rc = oq_cli_wait_more(cli, client, id, wait_ms, first_ms, state, error);
            }
        } else {
            /* Queued, and only the wait for it failed (too many waits). */
            if (id)
                printf("%" PRIu64 "\n", id);
            rc = oq_cli_report(cli, client);
            if (rc == OQ_CLI_EXIT_NO_REPLY && !id)
                fprintf(stderr,
                        "onceq: the job may have been queued all the same; dispatching again "
                        "with --dispatch-id %.*s cannot queue it twice (within the broker's "
                        "dedupe window)\n",
                        (int)job.dispatch_id.len, job.dispatch_id.ptr);
        }
    }
done:
    oq_client_destroy(&client);
    msgpack_sbuffer_destroy(&buf);
    return rc;
}
