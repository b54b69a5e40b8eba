/*  cmd_job.c: `onceq job cancel ID`: withdraw a job that is waiting (ready,
    or delayed until its time comes), so that it never runs. A job that a
    worker holds is refused: its effect may be under way, and cancelling
    could not take it back. `onceq job show ID`: the job's place in its
    chain (docs/workflows.md, "Chains"). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "onceq/config.h"
#include "onceq/limits.h"
#include "onceq/proto.h"

static void s_help(void)
{
    printf("Usage: onceq job cancel ID\n"
           "       onceq job show ID\n"
           "\n"
           "show: job ID's place in its chain: its place and the chain's length, the first\n"
           "job, what is due, the types of the links after it and of the chain_catch.\n"
           "Refused for a job that holds no chain (not chained, or its chain has moved on\n"
           "to the next link or ended).\n"
           "\n"
           "cancel: withdraw job ID while it waits (ready, or delayed: a delay or a retry's\n"
           "backoff); it is never delivered again. Done once the broker has made it\n"
           "durable; counted per queue in stats as \"cancelled\". Refused, naming the\n"
           "state: a leased job (a worker runs it: its effect may be under way; wait for\n"
           "its outcome), a failed one ('onceq failed forget ID' deletes those), and one\n"
           "the broker does not hold (done, or never dispatched).\n"
           "\n"
           "Options:\n"
           "  --broker ENDPOINT  broker front socket (env %s, default %s)\n"
           "  --timeout-ms N     how long to wait for the broker (env %s, default "
           "%d)\n" OQ_CLI_KEY_HELP "  -h, --help         show this help\n"
           "\n"
           "Exit status 0 cancelled, 1 refused (the reason is printed), 2 bad command\n"
           "line, 3 no answer in time.\n",
           OQ_CLI_ENV_BROKER, OQ_DEFAULT_FRONT_ENDPOINT, OQ_CLI_ENV_TIMEOUT_MS,
           OQ_DEFAULT_CLIENT_TIMEOUT_MS);
}

static int s_cancel(oq_cli_t *cli, int argc, char **argv)
{
    static const struct option options[] = {OQ_CLI_GLOBAL_OPTIONS, {NULL, 0, NULL, 0}};
    int stop; /* only the global options: none comes back */
    if (oq_cli_next_option(cli, argc, argv, options, s_help, &stop) == OQ_CLI_OPT_STOP)
        return stop;
    if (optind + 1 != argc)
        return oq_cli_usage_error(cli, "job cancel needs exactly one job ID, e.g. "
                                       "'onceq job cancel 42'");
    uint64_t id;
    if (oq_config_uint(argv[optind], 1, UINT64_MAX, &id) < 0)
        return oq_cli_usage_error(cli, "job ID '%s' must be a whole number from 1", argv[optind]);
    oq_client_t *client = NULL;
    int rc = oq_cli_connect(cli, &client);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    if (oq_client_cancel(client, id, cli->timeout) < 0)
        rc = oq_cli_report(cli, client);
    else
        printf("job %" PRIu64 " cancelled\n", id);
    oq_client_destroy(&client);
    return rc;
}

static void s_print_types(const msgpack_object *o)
{
    for (uint32_t i = 0; o && o->type == MSGPACK_OBJECT_ARRAY && i < o->via.array.size; i++) {
        const msgpack_object *t = &o->via.array.ptr[i];
        if (t->type == MSGPACK_OBJECT_STR)
            printf("%s%.*s", i ? ", " : "", (int)t->via.str.size, t->via.str.ptr);
    }
}

static int s_show(oq_cli_t *cli, int argc, char **argv)
{
    static const struct option options[] = {OQ_CLI_GLOBAL_OPTIONS, {NULL, 0, NULL, 0}};
    int stop;
    if (oq_cli_next_option(cli, argc, argv, options, s_help, &stop) == OQ_CLI_OPT_STOP)
        return stop;
    if (optind + 1 != argc)
        return oq_cli_usage_error(cli, "job show needs exactly one job ID, e.g. "
                                       "'onceq job show 42'");
    uint64_t id;
    if (oq_config_uint(argv[optind], 1, UINT64_MAX, &id) < 0)
        return oq_cli_usage_error(cli, "job ID '%s' must be a whole number from 1", argv[optind]);
    oq_client_t *client = NULL;
    int rc = oq_cli_connect(cli, &client);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    oq_msg_t reply;
    if (oq_client_chain(client, id, cli->timeout, &reply) < 0) {
        rc = oq_cli_report(cli, client);
        oq_client_destroy(&client);
        return rc;
    }
    uint64_t root = 0, place = 0, total = 0;
    oq_cli_get_uint(&reply.root, "root", &root);
    oq_cli_get_uint(&reply.root, "place", &place);
    oq_cli_get_uint(&reply.root, "total", &total);
    const msgpack_object *due = oq_proto_map_get(&reply.root, "due");
    printf(
        "job %" PRIu64 ": link %" PRIu64 " of %" PRIu64 " in the chain of job %" PRIu64 " (%.*s)\n",
        id, place, total, root, due && due->type == MSGPACK_OBJECT_STR ? (int)due->via.str.size : 0,
        due && due->type == MSGPACK_OBJECT_STR ? due->via.str.ptr : "");
    printf("  next:        ");
    s_print_types(oq_proto_map_get(&reply.root, "links"));
    const msgpack_object *c = oq_proto_map_get(&reply.root, "chain_catch");
    printf("\n  chain_catch: %.*s\n", c && c->type == MSGPACK_OBJECT_STR ? (int)c->via.str.size : 4,
           c && c->type == MSGPACK_OBJECT_STR ? c->via.str.ptr : "none");
    oq_proto_msg_release(&reply);
    oq_client_destroy(&client);
    return rc;
}

int oq_cmd_job(oq_cli_t *cli, int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        s_help();
        return OQ_CLI_EXIT_OK;
    }
    if (argc < 2)
        return oq_cli_usage_error(cli, "job needs a subcommand: 'onceq job cancel ID' or "
                                       "'onceq job show ID'");
    if (strcmp(argv[1], "show") == 0) {
        cli->command = "job show";
        return s_show(cli, argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "cancel") != 0)
        return oq_cli_usage_error(cli, "unknown subcommand 'job %s'; expected cancel or show",
                                  argv[1]);
    cli->command = "job cancel";
    return s_cancel(cli, argc - 1, argv + 1);
}
