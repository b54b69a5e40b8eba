/*  cmd_batch.c: `onceq batch dispatch|show|list|cancel`: batches of jobs
    with then / catch / finally callbacks (docs/workflows.md). dispatch
    queues COUNT jobs of one type and payload with the callbacks named;
    show and list print each batch's counts (total, pending, done, failed,
    cancelled) and the job each callback was dispatched as; cancel
    withdraws the jobs that wait, so that only finally runs. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mpjson.h"
#include "onceq/config.h"
#include "onceq/limits.h"
#include "onceq/proto.h"

#define S_MAX_PAYLOAD_DEPTH 32 /* as onceq dispatch */

static const char *const s_names[3] = {"then", "catch", "finally"};

static void s_help(void)
{
    printf("Usage: onceq batch dispatch --type T --count N [--payload JSON] [--then TYPE]\n"
           "                            [--then-payload JSON] [--catch TYPE] [--finally TYPE]\n"
           "                            [--allow-failures] [--queue Q] [--dispatch-id ID]\n"
           "       onceq batch show ID\n"
           "       onceq batch list\n"
           "       onceq batch cancel ID\n"
           "\n"
           "dispatch: queue N jobs (1 to %d) of type T as one batch and print the batch id\n"
           "and its job ids. --then runs once every job is done, --catch on the first\n"
           "failure (unless --allow-failures: then runs once all have settled), --finally\n"
           "once all have settled. Each callback is dispatched exactly once.\n"
           "show: the batch's counts (total, pending, done, failed, cancelled) and the\n"
           "job each callback was dispatched as. list: every batch held, then the settled\n"
           "ones remembered. cancel: withdraw the batch's waiting jobs; then and catch\n"
           "never run, finally runs once the jobs still running have settled.\n"
           "\n"
           "Options:\n"
           "  --broker ENDPOINT  broker front socket (env %s, default %s)\n"
           "  --timeout-ms N     how long to wait for the broker (env %s, default "
           "%d)\n" OQ_CLI_KEY_HELP "  -h, --help         show this help\n"
           "\n"
           "Exit status 0 done, 1 refused (the reason is printed), 2 bad command line,\n"
           "3 no answer in time.\n",
           OQ_MAX_BATCH_JOBS, OQ_CLI_ENV_BROKER, OQ_DEFAULT_FRONT_ENDPOINT, OQ_CLI_ENV_TIMEOUT_MS,
           OQ_DEFAULT_CLIENT_TIMEOUT_MS);
}

/* A JSON object into buf as a msgpack map. Returns an exit code. */
static int s_payload(oq_cli_t *cli, const char *what, const char *text, msgpack_sbuffer *buf)
{
    json_error_t error;
    json_t *json = json_loads(text, JSON_REJECT_DUPLICATES, &error);
    if (!json || !json_is_object(json)) {
        json_decref(json);
        return oq_cli_usage_error(cli, "%s must be a JSON object, like {\"order_id\": 42}", what);
    }
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    char why[128];
    int rc = OQ_CLI_EXIT_OK;
    if (oq_mpjson_pack(&pk, json, S_MAX_PAYLOAD_DEPTH, why, sizeof why) < 0)
        rc = oq_cli_usage_error(cli, "%s: %s", what, why);
    json_decref(json);
    return rc;
}

static bool s_type_ok(const char *t)
{
    return t && oq_proto_name_valid(t, strlen(t));
}

static int s_dispatch(oq_cli_t *cli, int argc, char **argv)
{
    enum {
        O_TYPE = OQ_CLI_OPT_FIRST_FREE_,
        O_COUNT,
        O_PAYLOAD,
        O_THEN,
        O_THEN_PAYLOAD,
        O_CATCH,
        O_FINALLY,
        O_ALLOW,
        O_QUEUE,
        O_DISPATCH_ID
    };
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"type", required_argument, NULL, O_TYPE},
        {"count", required_argument, NULL, O_COUNT},
        {"payload", required_argument, NULL, O_PAYLOAD},
        {"then", required_argument, NULL, O_THEN},
        {"then-payload", required_argument, NULL, O_THEN_PAYLOAD},
        {"catch", required_argument, NULL, O_CATCH},
        {"finally", required_argument, NULL, O_FINALLY},
        {"allow-failures", no_argument, NULL, O_ALLOW},
        {"queue", required_argument, NULL, O_QUEUE},
        {"dispatch-id", required_argument, NULL, O_DISPATCH_ID},
        {NULL, 0, NULL, 0}};
    const char *type = NULL, *payload = "{}", *then_payload = "{}", *queue = OQ_DEFAULT_QUEUE,
               *dispatch_id = NULL, *cb_types[3] = {NULL, NULL, NULL};
    int64_t count = 0;
    bool allow = false;
    int opt, stop;
    while ((opt = oq_cli_next_option(cli, argc, argv, options, s_help, &stop)) != -1) {
        if (opt == OQ_CLI_OPT_STOP)
            return stop;
        switch (opt) {
        case O_TYPE:
            type = optarg;
            break;
        case O_COUNT:
            if (oq_cli_parse_int(optarg, 1, OQ_MAX_BATCH_JOBS, &count) < 0)
                return oq_cli_usage_error(cli, "--count must be 1 to %d", OQ_MAX_BATCH_JOBS);
            break;
        case O_PAYLOAD:
            payload = optarg;
            break;
        case O_THEN:
            cb_types[0] = optarg;
            break;
        case O_THEN_PAYLOAD:
            then_payload = optarg;
            break;
        case O_CATCH:
            cb_types[1] = optarg;
            break;
        case O_FINALLY:
            cb_types[2] = optarg;
            break;
        case O_ALLOW:
            allow = true;
            break;
        case O_QUEUE:
            queue = optarg;
            break;
        case O_DISPATCH_ID:
            dispatch_id = optarg;
            break;
        default:
            return oq_cli_option_error(cli, opt, argv);
        }
    }
    if (!s_type_ok(type) || count == 0)
        return oq_cli_usage_error(cli, "batch dispatch needs --type T and --count N");
    if (!oq_proto_name_valid(queue, strlen(queue)))
        return oq_cli_usage_error(cli, "--queue '%s' is not a valid queue name", queue);
    for (int i = 0; i < 3; i++)
        if (cb_types[i] && !s_type_ok(cb_types[i]))
            return oq_cli_usage_error(cli, "--%s '%s' is not a valid job type", s_names[i],
                                      cb_types[i]);
    msgpack_sbuffer body, then_body;
    msgpack_sbuffer_init(&body);
    msgpack_sbuffer_init(&then_body);
    oq_job_msg_t *jobs = NULL;
    int rc = s_payload(cli, "--payload", payload, &body);
    if (rc == OQ_CLI_EXIT_OK)
        rc = s_payload(cli, "--then-payload", then_payload, &then_body);
    if (rc != OQ_CLI_EXIT_OK)
        goto done;
    jobs = calloc((size_t)count, sizeof *jobs);
    if (!jobs) {
        rc = oq_cli_usage_error(cli, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < count; i++)
        jobs[i] = (oq_job_msg_t){.type = oq_str(type),
                                 .queue = oq_str(queue),
                                 .payload = (const uint8_t *)body.data,
                                 .payload_len = body.size};
    oq_job_msg_t cbs[3];
    const oq_job_msg_t *callbacks[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        if (!cb_types[i])
            continue;
        static const uint8_t empty_map = 0x80;
        cbs[i] = (oq_job_msg_t){.type = oq_str(cb_types[i]),
                                .queue = oq_str(queue),
                                .payload = i == 0 ? (const uint8_t *)then_body.data : &empty_map,
                                .payload_len = i == 0 ? then_body.size : 1};
        callbacks[i] = &cbs[i];
    }
    oq_client_t *client = NULL;
    rc = oq_cli_connect(cli, &client);
    if (rc != OQ_CLI_EXIT_OK)
        goto done;
    uint64_t batch = 0, first = 0;
    if (oq_client_dispatch_batch(client, jobs, (size_t)count, callbacks, allow, dispatch_id,
                                 cli->timeout, &batch, &first) < 0)
        rc = oq_cli_report(cli, client);
    else
        printf("batch %" PRIu64 ": jobs %" PRIu64 " to %" PRIu64 "\n", batch, first,
               first + (uint64_t)count - 1);
    oq_client_destroy(&client);
done:
    free(jobs);
    msgpack_sbuffer_destroy(&body);
    msgpack_sbuffer_destroy(&then_body);
    return rc;
}

static uint64_t s_uint(const msgpack_object *map, const char *key)
{
    uint64_t v = 0;
    oq_cli_get_uint(map, key, &v);
    return v;
}

static void s_print(const msgpack_object *b)
{
    char state[32] = "";
    const msgpack_object *s = oq_proto_map_get(b, "state");
    if (s && s->type == MSGPACK_OBJECT_STR)
        snprintf(state, sizeof state, "%.*s", (int)s->via.str.size, s->via.str.ptr);
    printf("batch %" PRIu64 ": %s, total %" PRIu64 ", pending %" PRIu64 ", done %" PRIu64
           ", failed %" PRIu64 ", cancelled %" PRIu64 "\n",
           s_uint(b, "id"), state, s_uint(b, "total"), s_uint(b, "pending"), s_uint(b, "done"),
           s_uint(b, "failed"), s_uint(b, "cancelled"));
    const msgpack_object *c = oq_proto_map_get(b, "callbacks");
    for (int i = 0; c && c->type == MSGPACK_OBJECT_MAP && i < 3; i++) {
        if (!oq_proto_map_get(c, s_names[i]))
            continue;
        uint64_t id = s_uint(c, s_names[i]);
        if (id)
            printf("  %-7s job %" PRIu64 "\n", s_names[i], id);
        else
            printf("  %-7s not dispatched\n", s_names[i]);
    }
}

static int s_admin(oq_cli_t *cli, const char *op, int argc, char **argv)
{
    static const struct option options[] = {OQ_CLI_GLOBAL_OPTIONS, {NULL, 0, NULL, 0}};
    int stop;
    if (oq_cli_next_option(cli, argc, argv, options, s_help, &stop) == OQ_CLI_OPT_STOP)
        return stop;
    bool list = strcmp(op, "list") == 0;
    uint64_t id = 0;
    if (list ? optind != argc : optind + 1 != argc)
        return oq_cli_usage_error(
            cli, list ? "batch list takes no argument" : "batch %s needs exactly one batch ID", op);
    if (!list && oq_config_uint(argv[optind], 1, UINT64_MAX, &id) < 0)
        return oq_cli_usage_error(cli, "batch ID '%s' must be a whole number from 1", argv[optind]);
    oq_client_t *client = NULL;
    int rc = oq_cli_connect(cli, &client);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    oq_msg_t reply;
    if (oq_client_batch(client, op, id, cli->timeout, &reply) < 0) {
        rc = oq_cli_report(cli, client);
        oq_client_destroy(&client);
        return rc;
    }
    if (list) {
        const msgpack_object *all = oq_proto_map_get(&reply.root, "batches");
        for (uint32_t i = 0; all && all->type == MSGPACK_OBJECT_ARRAY && i < all->via.array.size;
             i++)
            s_print(&all->via.array.ptr[i]);
        uint64_t total = s_uint(&reply.root, "total");
        if (total == 0)
            printf("no batches\n");
    } else {
        const msgpack_object *b = oq_proto_map_get(&reply.root, "batch");
        if (b)
            s_print(b);
        if (op[0] == 'c')
            printf("withdrawn %" PRIu64 " waiting job(s)\n", s_uint(&reply.root, "withdrawn"));
    }
    oq_proto_msg_release(&reply);
    oq_client_destroy(&client);
    return rc;
}

int oq_cmd_batch(oq_cli_t *cli, int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        s_help();
        return OQ_CLI_EXIT_OK;
    }
    if (argc < 2)
        return oq_cli_usage_error(cli, "batch needs a subcommand: dispatch, show, list or cancel");
    const char *sub = argv[1];
    if (strcmp(sub, "dispatch") == 0) {
        cli->command = "batch dispatch";
        return s_dispatch(cli, argc - 1, argv + 1);
    }
    if (strcmp(sub, "show") == 0 || strcmp(sub, "list") == 0 || strcmp(sub, "cancel") == 0) {
        cli->command = strcmp(sub, "show") == 0   ? "batch show"
                       : strcmp(sub, "list") == 0 ? "batch list"
                                                  : "batch cancel";
        return s_admin(cli, sub, argc - 1, argv + 1);
    }
    return oq_cli_usage_error(cli,
                              "unknown subcommand 'batch %s'; expected dispatch, show, list or "
                              "cancel",
                              sub);
}
