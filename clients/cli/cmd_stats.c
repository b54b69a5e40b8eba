/*  cmd_stats.c: `onceq stats [--workers N] [--after CURSOR] [--json]`: the
    broker's queues and workers. The broker lists its workers a page at a
    time; the table shows one page and the cursor of the next. The table
    reads the reply by field name and shows "-" for a field the broker did
    not send, so an older or newer broker still prints. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "onceq/config.h"
#include "onceq/limits.h"
#include "table.h"

/* Longest text of one table cell. */
#define S_CELL_LEN 128

typedef struct {
    const char *key;    /* field in the reply */
    const char *header; /* column title */
    const char *unit;   /* appended to the value, e.g. "s" for seconds */
    bool text;          /* left-aligned; numbers are right-aligned */
} s_column_t;

/* What people look at first (jobs waiting, done, failed, redelivered), then
   the other counters since the broker started, then the queue's settings. */
static const s_column_t s_queue_columns[] = {
    {"name", "QUEUE", "", true},
    {"ready", "READY", "", false},
    {"delayed", "DELAYED", "", false},
    {"leased", "LEASED", "", false},
    {"waiting", "WAITING", "", false},
    {"done", "DONE", "", false},
    {"failed", "FAILED", "", false},
    {"review", "REVIEW", "", false},
    {"redelivered", "REDELIVERED", "", false},
    {"returned", "RETURNED", "", false},
    {"dispatched", "DISPATCHED", "", false},
    {"retried", "RETRIED", "", false},
    {"late_acks", "LATE_ACKS", "", false},
    {"ignored_acks", "IGNORED_ACKS", "", false},
    {"duplicates", "DUPLICATES", "", false},
    {"cancelled", "CANCELLED", "", false},
    {"retry_after", "RETRY_AFTER", "s", false},
    {"timeout", "TIMEOUT", "s", false},
};

static const s_column_t s_worker_columns[] = {
    {"id", "ID", "", true},
    {"name", "NAME", "", true},
    {"pid", "PID", "", false},
    {"state", "STATE", "", true},
    {"credit", "CREDIT", "", false},
    {"leased", "LEASED", "", false},
    {"idle_ms", "IDLE_MS", "", false},
    /* Lists, comma-separated; "*" for an empty one: every queue or type. */
    {"queues", "QUEUES", "", true},
    {"types", "TYPES", "", true},
};

/* The workers by name, printed when the page does not list every worker. */
static const s_column_t s_name_columns[] = {
    {"name", "NAME", "", true},
    {"workers", "WORKERS", "", false},
    {"unavailable", "PAUSED", "", false},
};

#define S_COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void s_help(void)
{
    printf("Usage: onceq stats [--workers N] [--after CURSOR] [--json]\n"
           "\n"
           "Show the broker's queues and connected workers.\n"
           "\n"
           "Per queue: jobs READY, DELAYED, LEASED, FAILED and in REVIEW (waiting for a\n"
           "person: onceq review list) now; WAITING: ready, but another job with its\n"
           "overlap key is running (they wait using no try); DONE, DISPATCHED,\n"
           "RETRIED (retry and timeout outcomes), REDELIVERED (after a lease ran out or\n"
           "a worker died), RETURNED (handed back unrun, using no try: a worker whose\n"
           "database was down, or one without a handler for the type), LATE_ACKS,\n"
           "IGNORED_ACKS and DUPLICATES (acks that found the effect already applied)\n"
           "and CANCELLED ('onceq job cancel') since the broker started; the queue's\n"
           "RETRY_AFTER and default TIMEOUT.\n"
           "\n"
           "A line \"no worker handles type X (N waiting)\" for each job type with ready\n"
           "jobs that no connected worker takes: they wait, using no try, until one\n"
           "does. Per worker: its STATE (ready, or unavailable: paused because what its\n"
           "jobs need, its database, is down; it takes no job until a probe connects),\n"
           "the QUEUES it serves in priority order and the TYPES it handles (* for\n"
           "every one). Each paused worker listed gets a line saying for how long and\n"
           "why.\n"
           "The broker lists its workers a page at a time, in the order they\n"
           "registered: at most --workers of them, fewer when their types and queues\n"
           "are long; below a page that is not the last, the cursor of the next one\n"
           "(--after). When the page does not list every worker, a table counts\n"
           "them by NAME (the first 100 names), with those PAUSED.\n"
           "\n"
           "The journal line: the fsync policy, the journal's size next to what its live\n"
           "jobs take, compactions, and the dispatch ids remembered; or the error while\n"
           "the broker cannot write it (dispatches are refused until it can).\n"
           "\n"
           "The keys line, once a unique or overlap key was used: unique keys held\n"
           "now and dispatches answered with a key's holder since start; overlap keys\n"
           "held by a running job and jobs waiting for theirs.\n"
           "\n"
           "The auth line: CURVE or plaintext; the keys allowed, the connections now and\n"
           "their limits per role; handshakes refused (unknown key, over a role's limit)\n"
           "and commands refused (forbidden for the key's role).\n"
           "\n"
           "The worker messages line, since the broker started: the job messages sent\n"
           "(one delivery each) and the jobs messages with the deliveries they carried;\n"
           "the ack messages received (one ack each) and the acks messages with the\n"
           "acks they carried. Deliveries or acks per message above 1 is the batching\n"
           "of --prefetch and --batch.\n"
           "\n"
           "The waits line: the waits for a job to end ('onceq wait', 'onceq dispatch\n"
           "--wait') the broker holds now, until their job ends or they time out, and\n"
           "how many it holds at most, in all, from one connection and from all the\n"
           "connections of one key (past any of them a wait is refused).\n"
           "\n"
           "Options:\n"
           "  --workers N        list at most N workers, 0 to %d (default %d; 0: none)\n"
           "  --after CURSOR     list the workers after this cursor, as printed below\n"
           "                     the previous page\n"
           "  --json             print the broker's reply as one line of JSON\n"
           "  --broker ENDPOINT  broker front socket (env %s, default %s)\n"
           "  --timeout-ms N     how long to wait for the broker (env %s, default "
           "%d)\n" OQ_CLI_KEY_HELP "  -h, --help         show this help\n",
           OQ_MAX_STATS_WORKERS, OQ_DEFAULT_STATS_WORKERS, OQ_CLI_ENV_BROKER,
           OQ_DEFAULT_FRONT_ENDPOINT, OQ_CLI_ENV_TIMEOUT_MS, OQ_DEFAULT_CLIENT_TIMEOUT_MS);
}

/* An array of strings as "a,b,c" (cut to fit), or empty when it is empty. */
static void s_format_list(const msgpack_object *list, const char *empty, char *out, size_t out_len)
{
    size_t used = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < list->via.array.size && used + 1 < out_len; i++) {
        const msgpack_object *o = &list->via.array.ptr[i];
        if (o->type != MSGPACK_OBJECT_STR)
            continue;
        int n = snprintf(out + used, out_len - used, "%s%.*s", used ? "," : "",
                         (int)o->via.str.size, o->via.str.ptr);
        if (n < 0)
            break;
        used += (size_t)n < out_len - used ? (size_t)n : out_len - used - 1;
    }
    if (used == 0)
        snprintf(out, out_len, "%s", empty);
}

/* One table from an array of maps. Returns 0 or -1 (out of memory). */
static int s_print_rows(const msgpack_object *rows, const s_column_t *columns, size_t count)
{
    oq_table_t *table = oq_table_new(count);
    if (!table)
        return -1;
    int rc = 0;
    for (size_t c = 0; c < count; c++) {
        rc |= oq_table_add(table, columns[c].header);
        if (!columns[c].text)
            oq_table_align_right(table, c);
    }
    for (uint32_t r = 0; r < rows->via.array.size; r++) {
        const msgpack_object *row = &rows->via.array.ptr[r];
        for (size_t c = 0; c < count; c++) {
            const msgpack_object *value = oq_proto_map_get(row, columns[c].key);
            char cell[S_CELL_LEN];
            if (value && value->type == MSGPACK_OBJECT_ARRAY)
                s_format_list(value, "*", cell, sizeof cell);
            else
                oq_cli_format_value(value, cell, sizeof cell);
            rc |= value ? oq_table_addf(table, "%s%s", cell, columns[c].unit)
                        : oq_table_add(table, cell);
        }
    }
    if (rc == 0)
        oq_table_print(table, stdout);
    oq_table_destroy(&table);
    return rc;
}

/* "1h02m03s" from milliseconds. */
static void s_format_uptime(uint64_t ms, char *out, size_t out_len)
{
    uint64_t s = ms / 1000;
    if (s < 60)
        snprintf(out, out_len, "%" PRIu64 ".%01" PRIu64 "s", s, ms % 1000 / 100);
    else if (s < 3600)
        snprintf(out, out_len, "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
    else
        snprintf(out, out_len, "%" PRIu64 "h%02" PRIu64 "m%02" PRIu64 "s", s / 3600, s / 60 % 60,
                 s % 60);
}

/* The "journal" map in one line; nothing from a broker that sends none. */
static void s_print_journal(const msgpack_object *reply)
{
    const msgpack_object *j = oq_proto_map_get(reply, "journal");
    const msgpack_object *enabled = oq_proto_map_get(j, "enabled");
    if (!j || !enabled || enabled->type != MSGPACK_OBJECT_BOOLEAN)
        return;
    if (!enabled->via.boolean) {
        printf("journal off (--no-journal): a restart loses every job\n");
        return;
    }
    char fsync[S_CELL_LEN], error[OQ_MAX_ERROR_LEN + 1] = "";
    oq_cli_format_value(oq_proto_map_get(j, "fsync"), fsync, sizeof fsync);
    const msgpack_object *e = oq_proto_map_get(j, "error");
    if (e && e->type == MSGPACK_OBJECT_STR)
        oq_str_copy((oq_str_t){e->via.str.ptr, e->via.str.size}, error, sizeof error);
    uint64_t bytes = 0, live = 0, compactions = 0, ids = 0;
    oq_cli_get_uint(j, "bytes", &bytes);
    oq_cli_get_uint(j, "live_bytes", &live);
    oq_cli_get_uint(j, "compactions", &compactions);
    oq_cli_get_uint(j, "dispatch_ids", &ids);
    printf("journal fsync %s  %" PRIu64 " bytes (live %" PRIu64 ")  compactions %" PRIu64
           "  dispatch ids %" PRIu64 "\n",
           fsync, bytes, live, compactions, ids);
    if (error[0])
        printf("journal CANNOT WRITE: %s\n", error);
}

/* The "keys" map in one line, once a key was ever used; nothing otherwise
   (or from a broker that sends none). */
static void s_print_keys(const msgpack_object *reply)
{
    const msgpack_object *k = oq_proto_map_get(reply, "keys");
    uint64_t unique = 0, hits = 0, held = 0, waiting = 0;
    if (!k || oq_cli_get_uint(k, "unique_keys", &unique) < 0)
        return;
    oq_cli_get_uint(k, "unique_hits", &hits);
    oq_cli_get_uint(k, "overlap_held", &held);
    oq_cli_get_uint(k, "overlap_waiting", &waiting);
    if (unique + hits + held + waiting == 0)
        return;
    printf("keys: unique %" PRIu64 " held, %" PRIu64
           " dispatches answered by a holder  overlap %" PRIu64 " held, %" PRIu64 " jobs waiting\n",
           unique, hits, held, waiting);
}

/* The "messages" map in one line: the messages to workers that carried
   deliveries and those from them that carried acks, each kind with what
   it carried; nothing from a broker that sends none. */
static void s_print_messages(const msgpack_object *reply)
{
    const msgpack_object *m = oq_proto_map_get(reply, "messages");
    uint64_t job = 0, jobs = 0, deliveries = 0, ack = 0, acks = 0, entries = 0;
    if (!m || oq_cli_get_uint(m, "job_sent", &job) < 0)
        return;
    oq_cli_get_uint(m, "jobs_sent", &jobs);
    oq_cli_get_uint(m, "jobs_entries", &deliveries);
    oq_cli_get_uint(m, "ack_received", &ack);
    oq_cli_get_uint(m, "acks_received", &acks);
    oq_cli_get_uint(m, "acks_entries", &entries);
    printf("worker messages: sent %" PRIu64 " job, %" PRIu64 " jobs (%" PRIu64
           " deliveries)  received %" PRIu64 " ack, %" PRIu64 " acks (%" PRIu64 " acks)\n",
           job, jobs, deliveries, ack, acks, entries);
}

/* The "waits" map in one line: the waits held now and the limits; nothing
   from a broker that sends none. */
static void s_print_waits(const msgpack_object *reply)
{
    const msgpack_object *w = oq_proto_map_get(reply, "waits");
    uint64_t held = 0, max = 0, per_peer = 0, per_key = 0;
    if (!w || oq_cli_get_uint(w, "held", &held) < 0)
        return;
    oq_cli_get_uint(w, "max", &max);
    oq_cli_get_uint(w, "max_per_peer", &per_peer);
    char key[64] = "";
    if (oq_cli_get_uint(w, "max_per_key", &per_key) == 0)
        snprintf(key, sizeof key, ", %" PRIu64 " from one key", per_key);
    printf("waits: %" PRIu64 " held (at most %" PRIu64 ", %" PRIu64 " from one connection%s)\n",
           held, max, per_peer, key);
}

/* One line per paused worker: who, for how long, and the error that paused it. */
static void s_print_paused(const msgpack_object *workers)
{
    for (uint32_t i = 0;
         workers && workers->type == MSGPACK_OBJECT_ARRAY && i < workers->via.array.size; i++) {
        const msgpack_object *w = &workers->via.array.ptr[i];
        const msgpack_object *state = oq_proto_map_get(w, "state");
        if (!state || state->type != MSGPACK_OBJECT_STR ||
            !oq_str_eq((oq_str_t){state->via.str.ptr, state->via.str.size}, "unavailable"))
            continue;
        char name[S_CELL_LEN], error[OQ_MAX_ERROR_LEN + 1] = "", since[S_CELL_LEN] = "?";
        oq_cli_format_value(oq_proto_map_get(w, "name"), name, sizeof name);
        const msgpack_object *e = oq_proto_map_get(w, "error");
        if (e && e->type == MSGPACK_OBJECT_STR)
            oq_str_copy((oq_str_t){e->via.str.ptr, e->via.str.size}, error, sizeof error);
        uint64_t pid = 0, ms = 0;
        oq_cli_get_uint(w, "pid", &pid);
        if (oq_cli_get_uint(w, "state_ms", &ms) == 0)
            s_format_uptime(ms, since, sizeof since);
        printf("worker %" PRIu64 " (%s) paused for %s: %s\n", pid, name, since,
               error[0] ? error : "no reason given");
    }
}

/* A {producers, workers, admins} map as "P/W/A". */
static void s_roles(const msgpack_object *map, const char *key, char *out, size_t out_len)
{
    const msgpack_object *m = oq_proto_map_get(map, key);
    uint64_t p = 0, w = 0, a = 0;
    oq_cli_get_uint(m, "producers", &p);
    oq_cli_get_uint(m, "workers", &w);
    oq_cli_get_uint(m, "admins", &a);
    snprintf(out, out_len, "%" PRIu64 "/%" PRIu64 "/%" PRIu64, p, w, a);
}

/* The "auth" map in one line; nothing from a broker that sends none. */
static void s_print_auth(const msgpack_object *reply)
{
    const msgpack_object *a = oq_proto_map_get(reply, "auth");
    const msgpack_object *curve = oq_proto_map_get(a, "curve");
    if (!a || !curve || curve->type != MSGPACK_OBJECT_BOOLEAN)
        return;
    if (!curve->via.boolean) {
        printf("auth PLAINTEXT (--insecure): no keys, every peer may send every command\n");
        return;
    }
    char keys[S_CELL_LEN], connected[S_CELL_LEN], max[S_CELL_LEN];
    s_roles(a, "keys", keys, sizeof keys);
    s_roles(a, "connected", connected, sizeof connected);
    s_roles(a, "max", max, sizeof max);
    uint64_t forbidden = 0, unknown = 0, full = 0;
    oq_cli_get_uint(a, "forbidden", &forbidden);
    oq_cli_get_uint(a, "unknown_keys", &unknown);
    oq_cli_get_uint(a, "refused_full", &full);
    printf("auth CURVE  keys %s  connected %s of %s (producers/workers/admins)  refused: %" PRIu64
           " unknown keys, %" PRIu64 " over a limit, %" PRIu64 " forbidden commands\n",
           keys, connected, max, unknown, full, forbidden);
}

static int s_print_table(const oq_cli_t *cli, const msgpack_object *reply)
{
    const msgpack_object *broker = oq_proto_map_get(reply, "broker");
    char version[S_CELL_LEN];
    oq_cli_format_value(oq_proto_map_get(broker, "version"), version, sizeof version);
    printf("broker %s  version %s", cli->endpoint, version);
    uint64_t n;
    if (oq_cli_get_uint(broker, "uptime_ms", &n) == 0) {
        char uptime[S_CELL_LEN];
        s_format_uptime(n, uptime, sizeof uptime);
        printf("  up %s", uptime);
    }
    if (oq_cli_get_uint(broker, "jobs", &n) == 0)
        printf("  live jobs %" PRIu64, n);
    printf("\n");
    s_print_journal(reply);
    s_print_keys(reply);
    s_print_auth(reply);
    s_print_messages(reply);
    s_print_waits(reply);
    printf("\n");

    int rc = 0;
    const msgpack_object *queues = oq_proto_map_get(reply, "queues");
    if (!queues || queues->type != MSGPACK_OBJECT_ARRAY || queues->via.array.size == 0)
        printf("no queues yet\n");
    else
        rc |= s_print_rows(queues, s_queue_columns, S_COUNT(s_queue_columns));

    /* Jobs that wait because no connected worker takes their type (a
       rolling deploy that has not reached any worker yet). */
    const msgpack_object *types = oq_proto_map_get(reply, "types");
    for (uint32_t i = 0; types && types->type == MSGPACK_OBJECT_ARRAY && i < types->via.array.size;
         i++) {
        const msgpack_object *t = &types->via.array.ptr[i];
        const msgpack_object *name = oq_proto_map_get(t, "name");
        uint64_t unhandled = 0;
        if (name && name->type == MSGPACK_OBJECT_STR &&
            oq_cli_get_uint(t, "unhandled", &unhandled) == 0 && unhandled > 0)
            printf("no worker handles type %.*s (%" PRIu64 " waiting)\n", (int)name->via.str.size,
                   name->via.str.ptr, unhandled);
    }

    const msgpack_object *workers = oq_proto_map_get(reply, "workers");
    uint32_t count = workers && workers->type == MSGPACK_OBJECT_ARRAY ? workers->via.array.size : 0;
    /* The connected count is the broker's; the array is one page of them
       (all of them from a broker that does not page). */
    uint64_t connected = count;
    oq_cli_get_uint(broker, "workers", &connected);
    printf("\nworkers: %" PRIu64 " connected", connected);
    if (oq_cli_get_uint(broker, "workers_unavailable", &n) == 0 && n > 0)
        printf(", %" PRIu64 " paused (unavailable)", n);
    if (count < connected)
        printf(", %" PRIu32 " listed", count);
    printf("\n");
    const msgpack_object *names = oq_proto_map_get(reply, "worker_names");
    if (count < connected && names && names->type == MSGPACK_OBJECT_ARRAY &&
        names->via.array.size > 0) {
        rc |= s_print_rows(names, s_name_columns, S_COUNT(s_name_columns));
        if (oq_cli_get_uint(broker, "worker_names", &n) == 0 && n > names->via.array.size)
            printf("(%" PRIu64 " more names)\n", n - names->via.array.size);
        printf("\n");
    }
    if (count > 0)
        rc |= s_print_rows(workers, s_worker_columns, S_COUNT(s_worker_columns));
    s_print_paused(workers);
    if (oq_cli_get_uint(reply, "workers_next", &n) == 0)
        printf("more workers: onceq stats --after %" PRIu64 "\n", n);
    if (rc != 0) {
        fprintf(stderr, "onceq: out of memory\n");
        return OQ_CLI_EXIT_REFUSED;
    }
    return OQ_CLI_EXIT_OK;
}

int oq_cmd_stats(oq_cli_t *cli, int argc, char **argv)
{
    enum { S_OPT_JSON = OQ_CLI_OPT_FIRST_FREE_, S_OPT_WORKERS, S_OPT_AFTER };
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"json", no_argument, NULL, S_OPT_JSON},
        {"workers", required_argument, NULL, S_OPT_WORKERS},
        {"after", required_argument, NULL, S_OPT_AFTER},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    uint64_t limit = OQ_DEFAULT_STATS_WORKERS, after = 0;
    int opt, stop;
    while ((opt = oq_cli_next_option(cli, argc, argv, options, s_help, &stop)) != -1) {
        if (opt == OQ_CLI_OPT_STOP)
            return stop;
        if (opt == S_OPT_JSON)
            json = true;
        if (opt == S_OPT_WORKERS && oq_config_uint(optarg, 0, OQ_MAX_STATS_WORKERS, &limit) < 0)
            return oq_cli_usage_error(cli, "--workers '%s' must be a whole number from 0 to %d",
                                      optarg, OQ_MAX_STATS_WORKERS);
        if (opt == S_OPT_AFTER && oq_config_uint(optarg, 1, UINT64_MAX, &after) < 0)
            return oq_cli_usage_error(
                cli, "--after '%s' must be a cursor as printed under a page of workers", optarg);
    }
    if (optind < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind]);

    oq_client_t *client = NULL;
    int rc = oq_cli_connect(cli, &client);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    oq_msg_t reply;
    if (oq_client_stats_page(client, after, (uint32_t)limit, cli->timeout, &reply) < 0) {
        rc = oq_cli_report(cli, client);
    } else {
        rc = json ? oq_cli_print_json(&reply.root) : s_print_table(cli, &reply.root);
        oq_proto_msg_release(&reply);
    }
    oq_client_destroy(&client);
    return rc;
}
