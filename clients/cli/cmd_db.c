/*  cmd_db.c: `onceq db migrate [--sql-dir DIR]`: bring the database schema
    up to date with the versioned SQL files (pg/migrate.h). `onceq db prune`
    is in cmd_prune.c. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_db.h"
#include "onceq/config.h"
#include "onceq/effects.h"
#include "onceq/paths.h"

#define S_ENV_SQL_DIR "ONCEQ_SQL_DIR"

static void s_help(void)
{
    printf("Usage: onceq db migrate [--sql-dir DIR]\n"
           "       onceq db prune --older-than DURATION (see 'onceq db prune --help')\n"
           "\n"
           "Apply the migrations (DIR/NNNN_name.sql) the database does not record yet,\n"
           "in version order, each in one transaction with its row in onceq_migrations.\n"
           "Prints each migration applied, or \"up to date\"; running it again changes\n"
           "nothing. Two migrators started at once take turns (advisory lock).\n"
           "\n"
           "Options:\n"
           "  --sql-dir DIR      the migrations (env %s; default %s,\n"
           "                     next to this binary)\n"
           "  --database URL     libpq conninfo or URI (env %s, default: libpq's\n"
           "                     defaults)\n"
           "  -h, --help         show this help\n"
           "\n"
           "Exit status 0 applied or up to date, 1 a migration failed (nothing of it\n"
           "was kept), 2 bad command line, 3 no connection to the database.\n",
           S_ENV_SQL_DIR, "../share/onceq/sql", OQ_CLI_ENV_DATABASE);
}

/* The default migrations directory: PREFIX/share/onceq/sql for a binary in
   PREFIX/bin; from the build tree, the build's link to the checkout's
   deploy/sql (onceq/paths.h). NULL if this binary's path is unknown. */
static const char *s_default_sql_dir(void)
{
    static char dir[PATH_MAX];
    return oq_paths_data("sql", dir, sizeof dir) == 0 ? dir : NULL;
}

static void s_applied(void *ctx, uint32_t version, const char *name)
{
    printf("applied %04" PRIu32 "_%s\n", version, name);
    fflush(stdout);
}

/* The action word: the first argument that is not an option or an
   option's value (the global options' values, --sql-dir's and db prune's
   --older-than's). NULL if there is none. */
static const char *s_action(int argc, char **argv)
{
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"sql-dir", required_argument, NULL, 0},
        {"older-than", required_argument, NULL, 0},
        {NULL, 0, NULL, 0},
    };
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-')
            return argv[i];
        for (const struct option *o = options; o->name; o++) {
            /* "--name VALUE": skip the value ("--name=VALUE" is one word) */
            if (o->has_arg == required_argument && strncmp(argv[i], "--", 2) == 0 &&
                strcmp(argv[i] + 2, o->name) == 0) {
                i++;
                break;
            }
        }
    }
    return NULL;
}

int oq_cmd_db(oq_cli_t *cli, int argc, char **argv)
{
    const char *action = s_action(argc, argv);
    if (action && strcmp(action, "prune") == 0)
        return oq_cmd_db_prune(cli, argc, argv);
    enum { S_OPT_SQL_DIR = OQ_CLI_OPT_FIRST_FREE_ };
    static const struct option options[] = {
        OQ_CLI_GLOBAL_OPTIONS,
        {"sql-dir", required_argument, NULL, S_OPT_SQL_DIR},
        {NULL, 0, NULL, 0},
    };
    const char *sql_dir = NULL;
    int opt, stop;
    while ((opt = oq_cli_next_option(cli, argc, argv, options, s_help, &stop)) != -1) {
        if (opt == OQ_CLI_OPT_STOP)
            return stop;
        if (opt == S_OPT_SQL_DIR)
            sql_dir = optarg;
    }
    if (optind >= argc)
        return oq_cli_usage_error(cli, "no action given (expected: migrate or prune)");
    if (strcmp(argv[optind], "migrate") != 0)
        return oq_cli_usage_error(cli, "unknown action '%s' (expected: migrate or prune)",
                                  argv[optind]);
    if (optind + 1 < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind + 1]);
    const char *dir = oq_config_str(sql_dir, S_ENV_SQL_DIR, NULL);
    if (!dir)
        dir = s_default_sql_dir();
    if (!dir)
        return oq_cli_usage_error(cli, "cannot find the migrations next to this binary; pass "
                                       "--sql-dir DIR");

    /* No time bound: a migration may rewrite a large table, and waiting
       for another migrator's lock is the point of the lock. */
    oq_pg_t *pg = NULL;
    int rc = oq_cli_db_open(cli, 0, &pg);
    if (rc != OQ_CLI_EXIT_OK)
        return rc;
    uint32_t applied, latest;
    oq_pg_error_t error;
    if (oq_migrate_run(pg, dir, s_applied, NULL, &applied, &latest, &error) < 0) {
        rc = oq_cli_db_report(cli, "migration failed", &error);
    } else if (applied == 0) {
        if (latest)
            printf("up to date (latest migration %04" PRIu32 ", from %s)\n", latest, dir);
        else
            printf("up to date (no migrations in %s)\n", dir);
    }
    oq_pg_destroy(&pg);
    return rc;
}
