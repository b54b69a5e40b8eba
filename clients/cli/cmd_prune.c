/*  cmd_prune.c: `onceq db prune --older-than DURATION`: delete guard rows
    older than a window: point grants, once-guard rows and finished
    shipment requests (if that table exists), through the effects SDK
    (onceq/retention.h).

    The floor. A guard row must outlive every duplicate of its job, or the
    duplicate finds no row and applies the effect again. A duplicate can
    arrive (a) as a producer's resend, which the broker folds into the first
    job only within its dispatch-id window, and (b) as a run of the job
    itself: its retries and redeliveries end at most max_tries x
    (retry_after + the largest backoff step) after its first run. The floor
    is the larger of (a) and the largest (b) over the broker's queues and
    the jobs they hold now, which the broker reports ("horizon"); a window
    under it is refused, naming it. Without the broker there is no floor to
    trust, so the prune is refused unless --floor-from-defaults says the
    broker runs with the built-in defaults.

    One job can hold the floor up: a job held with 1,000 tries and a 30-day
    backoff can still run 30,000 days from now, and its guard row must last
    that long. The broker names, per queue, the held job whose runs span
    longest; a refusal names each job that holds the floor above the window,
    with its budget, so an operator can see what to do about it (let it end,
    or cancel it if its effect is no longer wanted, and prune once a run of
    it still going has ended: within its queue's retry_after, which its
    timeout is shorter than). No flag prunes past it:
    the guard tables do not record which job wrote a row, so the rows such a
    job needs cannot be told from the others. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_db.h"
#include "duration.h"
#include "onceq/limits.h"
#include "onceq/retention.h"

/* The longest window taken: ten years. */
#define S_MAX_WINDOW_S (3650LL * 24 * 3600)
#define S_MIN_WINDOW_S 1
#define S_MS_PER_S     1000

/* Held jobs named in a refusal at most; the rest are counted. */
#define S_MAX_NAMED_JOBS 16

/* A held job whose own runs span longer than its queue's defaults allow. */
typedef struct {
    uint64_t id, max_tries, attempt;
    char type[OQ_MAX_NAME_LEN + 1];
    double backoff_s;
} s_job_t;

/* One term of the floor: max_tries x (retry_after + backoff), and the held
   job that set it (id 0: the defaults did). */
typedef struct {
    char name[OQ_MAX_NAME_LEN + 1];
    double retry_after_s, backoff_s;
    uint64_t max_tries;
    s_job_t job;
} s_term_t;

typedef struct {
    double dedupe_s;                 /* the dispatch-id window */
    double unique_s;                 /* the longest unique_for of a unique key the broker holds */
    s_term_t longest;                /* the queue whose runs span longest */
    s_term_t held[S_MAX_NAMED_JOBS]; /* queues whose term a held job set, longest first */
    size_t held_count;               /* of them (at most S_MAX_NAMED_JOBS) */
    size_t held_more;                /* such queues beyond those */
    int64_t floor_s;                 /* the larger of the two, rounded up */
    int64_t oldest_ms;               /* oldest failure in the failed store (0: none, or unknown) */
    bool from_defaults;              /* the broker was not asked */
} s_floor_t;

/* Seconds rounded up (without libm), for values from 0 to well below 2^62. */
static int64_t s_ceil(double seconds)
{
    if (seconds <= 0)
        return 0;
    int64_t whole = (int64_t)seconds;
    return (double)whole < seconds ? whole + 1 : whole;
}

static double s_term_s(const s_term_t *t)
{
    return (double)t->max_tries * (t->retry_after_s + t->backoff_s);
}

static void s_consider(s_floor_t *f, const s_term_t *t)
{
    if (s_term_s(t) > s_term_s(&f->longest))
        f->longest = *t;
    if (!t->job.id)
        return;
    /* Kept longest first; past the array's room the shortest is only counted. */
    size_t at = f->held_count;
    while (at > 0 && s_term_s(&f->held[at - 1]) < s_term_s(t))
        at--;
    if (at == S_MAX_NAMED_JOBS) {
        f->held_more++;
        return;
    }
    if (f->held_count == S_MAX_NAMED_JOBS)
        f->held_more++;
    else
        f->held_count++;
    memmove(&f->held[at + 1], &f->held[at], (f->held_count - 1 - at) * sizeof f->held[0]);
    f->held[at] = *t;
}

/* The span of a held job's own runs: its tries x (retry_after + its backoff). */
static double s_job_span_s(const s_term_t *t)
{
    return (double)t->job.max_tries * (t->retry_after_s + t->job.backoff_s);
}

static void s_finish(s_floor_t *f)
{
    double floor_s = f->dedupe_s > s_term_s(&f->longest) ? f->dedupe_s : s_term_s(&f->longest);
    if (f->unique_s > floor_s)
        floor_s = f->unique_s;
    f->floor_s = floor_s > (double)(INT64_MAX / 4) ? INT64_MAX / 4 : s_ceil(floor_s);
}

static void s_from_defaults(s_floor_t *f)
{
    memset(f, 0, sizeof *f);
    f->dedupe_s = OQ_DEFAULT_DEDUPE_WINDOW_MS / (double)S_MS_PER_S;
    s_term_t t = {.name = "*",
                  .retry_after_s = OQ_DEFAULT_RETRY_AFTER_MS / (double)S_MS_PER_S,
                  .backoff_s = OQ_DEFAULT_BACKOFF_MS / (double)S_MS_PER_S,
                  .max_tries = OQ_DEFAULT_MAX_TRIES};
    s_consider(f, &t);
    f->from_defaults = true;
    s_finish(f);
}

static double s_seconds(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    if (!o)
        return 0;
    if (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32)
        return o->via.f64;
    return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (double)o->via.u64 : 0;
}

static void s_read_term(const msgpack_object *map, s_term_t *t)
{
    const msgpack_object *name = oq_proto_map_get(map, "name");
    memset(t, 0, sizeof *t);
    if (name && name->type == MSGPACK_OBJECT_STR)
        oq_str_copy((oq_str_t){name->via.str.ptr, name->via.str.size}, t->name, sizeof t->name);
    t->retry_after_s = s_seconds(map, "retry_after");
    t->backoff_s = s_seconds(map, "backoff");
    oq_cli_get_uint(map, "max_tries", &t->max_tries);
    const msgpack_object *job = oq_proto_map_get(map, "job");
    if (!job || job->type != MSGPACK_OBJECT_MAP || oq_cli_get_uint(job, "id", &t->job.id) < 0)
        return;
    const msgpack_object *type = oq_proto_map_get(job, "type");
    if (type && type->type == MSGPACK_OBJECT_STR)
        oq_str_copy((oq_str_t){type->via.str.ptr, type->via.str.size}, t->job.type,
                    sizeof t->job.type);
    oq_cli_get_uint(job, "max_tries", &t->job.max_tries);
    oq_cli_get_uint(job, "attempt", &t->job.attempt);
    t->job.backoff_s = s_seconds(job, "backoff");
}

/* The floor from the broker's "horizon" reply. */
static void s_from_reply(s_floor_t *f, const msgpack_object *reply)
{
    memset(f, 0, sizeof *f);
    f->dedupe_s = s_seconds(reply, "dedupe_window");
    f->unique_s = s_seconds(reply, "unique_for");
    s_term_t t;
    s_read_term(oq_proto_map_get(reply, "defaults"), &t);
    s_consider(f, &t);
    const msgpack_object *queues = oq_proto_map_get(reply, "queues");
    for (uint32_t i = 0;
         queues && queues->type == MSGPACK_OBJECT_ARRAY && i < queues->via.array.size; i++) {
        s_read_term(&queues->via.array.ptr[i], &t);
        s_consider(f, &t);
    }
    uint64_t oldest = 0;
    oq_cli_get_uint(reply, "oldest_failed_at", &oldest);
    f->oldest_ms = (int64_t)oldest;
    s_finish(f);
}

static void s_print_floor(const s_floor_t *f)
{
    char total[OQ_CLI_DURATION_TEXT_LEN], dedupe[OQ_CLI_DURATION_TEXT_LEN];
    char retry[OQ_CLI_DURATION_TEXT_LEN], backoff[OQ_CLI_DURATION_TEXT_LEN];
    char span[OQ_CLI_DURATION_TEXT_LEN];
    oq_cli_duration_format(f->floor_s, total, sizeof total);
    oq_cli_duration_format(s_ceil(f->dedupe_s), dedupe, sizeof dedupe);
    oq_cli_duration_format(s_ceil(f->longest.retry_after_s), retry, sizeof retry);
    oq_cli_duration_format(s_ceil(f->longest.backoff_s), backoff, sizeof backoff);
    oq_cli_duration_format(s_ceil(s_term_s(&f->longest)), span, sizeof span);
    char who[2 * OQ_MAX_NAME_LEN + 64];
    if (strcmp(f->longest.name, "*") == 0)
        snprintf(who, sizeof who, "the defaults");
    else if (f->longest.job.id)
        snprintf(who, sizeof who, "queue \"%s\", set by job %" PRIu64 " (%s)", f->longest.name,
                 f->longest.job.id, f->longest.job.type);
    else
        snprintf(who, sizeof who, "queue \"%s\"", f->longest.name);
    char unique[OQ_CLI_DURATION_TEXT_LEN + 32] = "";
    if (f->unique_s > 0) {
        char window[OQ_CLI_DURATION_TEXT_LEN];
        oq_cli_duration_format(s_ceil(f->unique_s), window, sizeof window);
        snprintf(unique, sizeof unique, "; unique window %s", window);
    }
    printf("retention floor: %s (%s: dispatch-id window %s%s; longest runs, %s: %" PRIu64
           " tries x (%s retry_after + %s backoff) = %s)\n",
           total, f->from_defaults ? "from the built-in defaults" : "from the broker", dedupe,
           unique, who, f->longest.max_tries, retry, backoff, span);
}

/* Learn the floor from the broker, or from the defaults if allowed. An
   exit code. */
static int s_floor(oq_cli_t *cli, bool defaults_allowed, s_floor_t *f)
{
    oq_client_t *client = NULL;
    int rc = oq_cli_connect(cli, &client);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    oq_msg_t reply;
    if (oq_client_horizon(client, cli->timeout, &reply) == 0) {
        s_from_reply(f, &reply.root);
        oq_proto_msg_release(&reply);
        oq_client_destroy(&client);
        return OQ_CLI_EXIT_OK;
    }
    oq_err_t code = oq_client_error_code(client);
    fprintf(stderr, "onceq: cannot learn the retention floor from the broker at %s: %s%s%s\n",
            cli->endpoint, code ? oq_proto_err_name(code) : "", code ? ": " : "",
            oq_client_error(client));
    oq_client_destroy(&client);
    if (!defaults_allowed) {
        s_floor_t d;
        s_from_defaults(&d);
        char text[OQ_CLI_DURATION_TEXT_LEN];
        oq_cli_duration_format(d.floor_s, text, sizeof text);
        fprintf(stderr,
                "onceq: nothing was deleted: without the broker's dispatch-id window and queue "
                "settings the window cannot be checked. If the broker runs with the built-in "
                "defaults, --floor-from-defaults uses them (a floor of %s)\n",
                text);
        return code ? OQ_CLI_EXIT_REFUSED : OQ_CLI_EXIT_NO_REPLY;
    }
    fprintf(stderr, "onceq: --floor-from-defaults: using the built-in defaults\n");
    s_from_defaults(f);
    return OQ_CLI_EXIT_OK;
}

/* Each held job whose own runs outlast the window, with its budget and
   what an operator can do about it. */
static void s_name_holders(const s_floor_t *f, int64_t window_s)
{
    size_t named = 0;
    for (size_t i = 0; i < f->held_count; i++) {
        const s_term_t *t = &f->held[i];
        if (s_job_span_s(t) <= (double)window_s)
            continue;
        char span[OQ_CLI_DURATION_TEXT_LEN], backoff[OQ_CLI_DURATION_TEXT_LEN];
        char retry[OQ_CLI_DURATION_TEXT_LEN];
        oq_cli_duration_format(s_ceil(s_job_span_s(t)), span, sizeof span);
        oq_cli_duration_format(s_ceil(t->job.backoff_s), backoff, sizeof backoff);
        oq_cli_duration_format(s_ceil(t->retry_after_s), retry, sizeof retry);
        fprintf(stderr,
                "onceq: held back by job %" PRIu64 " (type %s, queue %s): %" PRIu64
                " tries (attempt %" PRIu64 " so far) x (%s retry_after + %s backoff) = %s\n",
                t->job.id, t->job.type, t->name, t->job.max_tries, t->job.attempt, retry, backoff,
                span);
        named++;
    }
    if (f->held_more)
        fprintf(stderr, "onceq: and the held jobs of %zu more queue(s)\n", f->held_more);
    if (named || f->held_more)
        fprintf(stderr,
                "onceq: a held job can still run that long, and its guard row must last until "
                "its last run: let it end, or cancel it ('onceq job cancel ID', not while it is "
                "leased) if its effect is no longer wanted, and prune again once its queue's "
                "retry_after has passed (a run of it still going ends within that)\n");
}

static void s_help(void)
{
    char max[OQ_CLI_DURATION_TEXT_LEN];
    oq_cli_duration_format(S_MAX_WINDOW_S, max, sizeof max);
    printf("Usage: onceq db prune --older-than DURATION [--floor-from-defaults] [--dry-run]\n"
           "\n"
           "Delete guard rows older than DURATION (30d, 12h, 90m, 45s; 1s to %s):\n"
           "point_grants by granted_at, onceq_once by created_at, and, if the table\n"
           "exists, shipment_requests in status confirmed or failed (never review or\n"
           "requested) by updated_at (else created_at). Prints the rows deleted per\n"
           "table. Deletes in batches of %d rows, each its own transaction.\n"
           "\n"
           "A guard row must outlive every duplicate of its job. The window is refused\n"
           "if it is shorter than the floor the broker reports: the larger of its\n"
           "dispatch-id window (--dedupe-window) and, over its queues and the jobs they\n"
           "hold, max_tries x (retry_after + the largest backoff step). The floor is\n"
           "printed; a refusal names each held job whose own runs outlast the window\n"
           "(id, type, tries, backoff). Without an answer from the broker nothing is\n"
           "deleted.\n"
           "\n"
           "Options:\n"
           "  --older-than DURATION  delete rows older than this (required)\n"
           "  --floor-from-defaults  if the broker does not answer, check the window\n"
           "                         against the built-in defaults instead (only right if\n"
           "                         the broker runs with them)\n"
           "  --dry-run              count the rows, delete nothing\n"
           "  --broker ENDPOINT      broker front socket, asked for the floor (env %s)\n"
           "  --timeout-ms N         how long to wait for the broker (env %s)\n"
           "  --key FILE             our secret key file, an admin's (env " OQ_CLI_ENV_KEY ")\n"
           "  --broker-key FILE      the broker's public key file (env " OQ_CLI_ENV_BROKER_KEY ")\n"
           "  --database URL         libpq conninfo or URI (env %s)\n"
           "  -h, --help             show this help\n"
           "\n"
           "Exit status 0 pruned, 1 refused (a window under the floor, a database\n"
           "error), 2 bad command line, 3 no answer from the broker or the database.\n",
           max, OQ_PRUNE_BATCH_ROWS, OQ_CLI_ENV_BROKER, OQ_CLI_ENV_TIMEOUT_MS, OQ_CLI_ENV_DATABASE);
}

/* The tables pruned, in order. */
static const char *const s_grant_columns[] = {"granted_at", NULL};
static const char *const s_shipment_columns[] = {"updated_at", "created_at", NULL};
static const char *const s_shipment_finished[] = {"confirmed", "failed", NULL};
static const oq_prune_table_t s_grants = {"point_grants", s_grant_columns, NULL, NULL, false};
static const oq_prune_table_t s_shipments = {"shipment_requests", s_shipment_columns, "status",
                                             s_shipment_finished, true};

static void s_warn_failed(const s_floor_t *f, int64_t window_s)
{
    int64_t now_ms = (int64_t)time(NULL) * S_MS_PER_S;
    if (f->oldest_ms <= 0 || now_ms - f->oldest_ms <= window_s * S_MS_PER_S)
        return;
    char at[64];
    oq_cli_format_time(f->oldest_ms, at, sizeof at);
    fprintf(stderr,
            "onceq: warning: the failed store holds jobs that failed before the cutoff (the "
            "oldest at %s); their guard rows may go now, so 'onceq failed retry' of such a job "
            "could apply its effect a second time\n",
            at);
}

int oq_cmd_db_prune(oq_cli_t *cli, int argc, char **argv)
{
    enum { S_OPT_OLDER = OQ_CLI_OPT_FIRST_FREE_, S_OPT_DEFAULTS, S_OPT_DRY };
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"older-than", required_argument, NULL, S_OPT_OLDER},
        {"floor-from-defaults", no_argument, NULL, S_OPT_DEFAULTS},
        {"dry-run", no_argument, NULL, S_OPT_DRY},
        {NULL, 0, NULL, 0},
    };
    cli->command = "db prune";
    const char *older = NULL;
    bool defaults = false, dry = false;
    int opt, stop;
    while ((opt = oq_cli_next_option(cli, argc, argv, options, s_help, &stop)) != -1) {
        switch (opt) {
        case OQ_CLI_OPT_STOP:
            return stop;
        case S_OPT_OLDER:
            older = optarg;
            break;
        case S_OPT_DEFAULTS:
            defaults = true;
            break;
        case S_OPT_DRY:
            dry = true;
            break;
        }
    }
    /* argv[optind] is "prune" itself. */
    if (optind < argc && strcmp(argv[optind], "prune") == 0)
        optind++;
    if (optind < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind]);
    if (!older)
        return oq_cli_usage_error(cli, "db prune needs --older-than DURATION, e.g. 30d");
    int64_t window_s;
    char why[256];
    if (oq_cli_duration_parse(older, S_MIN_WINDOW_S, S_MAX_WINDOW_S, &window_s, why, sizeof why) <
        0)
        return oq_cli_usage_error(cli, "--older-than %s", why);

    s_floor_t floor;
    int rc = s_floor(cli, defaults, &floor);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    s_print_floor(&floor);
    char window[OQ_CLI_DURATION_TEXT_LEN], least[OQ_CLI_DURATION_TEXT_LEN];
    oq_cli_duration_format(window_s, window, sizeof window);
    oq_cli_duration_format(floor.floor_s, least, sizeof least);
    if (window_s < floor.floor_s) {
        fprintf(stderr,
                "onceq: refused: --older-than %s is shorter than the retention floor of %s: a "
                "duplicate of a job can still arrive that long after its effect, and would find "
                "no guard row; nothing was deleted (use --older-than %s or more)\n",
                window, least, least);
        s_name_holders(&floor, window_s);
        return OQ_CLI_EXIT_REFUSED;
    }
    s_warn_failed(&floor, window_s);

    oq_pg_t *pg = NULL;
    if ((rc = oq_cli_db_open(cli, OQ_CLI_DB_TIMEOUT_MS, &pg)) != OQ_CLI_EXIT_OK)
        return rc;
    const oq_prune_table_t *tables[] = {&s_grants, oq_prune_once_table(), &s_shipments};
    for (size_t i = 0; rc == OQ_CLI_EXIT_OK && i < sizeof tables / sizeof tables[0]; i++) {
        oq_prune_result_t r;
        oq_pg_error_t error;
        if (oq_prune(pg, tables[i], window_s, dry, &r, &error) < 0) {
            if (r.rows)
                printf("%s: %" PRIu64 " row(s) deleted before the error\n", tables[i]->table,
                       r.rows);
            char what[128];
            snprintf(what, sizeof what, "pruning %s", tables[i]->table);
            rc = oq_cli_db_report(cli, what, &error);
        } else if (r.skipped) {
            printf("%s: skipped: %s\n", tables[i]->table, r.reason);
        } else {
            printf("%s: %" PRIu64 " row(s) %s (%s older than %s)\n", tables[i]->table, r.rows,
                   dry ? "would be deleted" : "deleted", r.time_column, window);
        }
        fflush(stdout);
    }
    oq_pg_destroy(&pg);
    return rc;
}
