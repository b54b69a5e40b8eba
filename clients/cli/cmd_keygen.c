/*  cmd_keygen.c: `onceq keygen [--dir DIR] [--force] NAME`: a new CURVE key
    pair in two files (onceq/keys.h), for the broker (NAME broker, in its
    --keys directory) or for a producer, worker or admin. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "onceq/keys.h"

#define S_PATH_LEN 4096

static void s_help(void)
{
    printf("Usage: onceq keygen [--dir DIR] [--force] NAME\n"
           "\n"
           "Make a CURVE key pair: DIR/NAME.key, the public key, to hand out, and\n"
           "DIR/NAME.key_secret, both keys, mode 0600, for its owner only. The files\n"
           "are in czmq's zcert format. Prints the public key.\n"
           "\n"
           "A broker started with --keys KEYS reads its own pair from KEYS/broker.key_secret\n"
           "and admits the public keys in KEYS/producers, KEYS/workers and KEYS/admins:\n"
           "\n"
           "  onceq keygen --dir KEYS broker            the broker's pair\n"
           "  onceq keygen --dir ~/.onceq orders-app    a producer's pair, then allow it:\n"
           "  cp ~/.onceq/orders-app.key KEYS/producers/ && kill -HUP <broker pid>\n"
           "\n"
           "Clients then use --key ~/.onceq/orders-app.key_secret --broker-key KEYS/broker.key\n"
           "(docs/operations.md).\n"
           "\n"
           "Options:\n"
           "  --dir DIR   where to write the two files (created if missing; default .)\n"
           "  --force     replace the files of an existing NAME\n"
           "  -h, --help  show this help\n");
}

/* mkdir -p, each new directory OQ_KEY_DIR_MODE. */
static int s_make_dirs(const char *dir)
{
    char path[S_PATH_LEN];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(path, OQ_KEY_DIR_MODE) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(path, OQ_KEY_DIR_MODE) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

int oq_cmd_keygen(oq_cli_t *cli, int argc, char **argv)
{
    enum { S_OPT_DIR = OQ_CLI_OPT_FIRST_FREE_, S_OPT_FORCE };
    static const struct option options[] = {
        {"dir", required_argument, NULL, S_OPT_DIR},
        {"force", no_argument, NULL, S_OPT_FORCE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *dir = ".";
    bool force = false;
    int opt, stop;
    while ((opt = oq_cli_next_option(cli, argc, argv, options, s_help, &stop)) != -1) {
        if (opt == OQ_CLI_OPT_STOP)
            return stop;
        if (opt == S_OPT_DIR)
            dir = optarg;
        else if (opt == S_OPT_FORCE)
            force = true;
    }
    if (optind >= argc)
        return oq_cli_usage_error(cli, "no NAME given (the files are DIR/NAME.key and "
                                       "DIR/NAME.key_secret)");
    if (optind + 1 < argc)
        return oq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind + 1]);
    const char *name = argv[optind];
    if (!oq_keys_name_valid(name))
        return oq_cli_usage_error(cli,
                                  "invalid NAME '%s': 1 to %d characters of A-Z a-z 0-9 _ . -, "
                                  "not starting with a dot",
                                  name, OQ_KEY_NAME_MAX);
    if (s_make_dirs(dir) < 0) {
        fprintf(stderr, "onceq: cannot create %s: %s\n", dir, strerror(errno));
        return OQ_CLI_EXIT_REFUSED;
    }
    oq_keypair_t pair;
    if (oq_keys_generate(&pair) < 0) {
        fprintf(stderr, "onceq: cannot make a key pair: this libzmq lacks CURVE\n");
        return OQ_CLI_EXIT_REFUSED;
    }
    char reason[S_PATH_LEN + 256];
    int rc = oq_keys_save(&pair, dir, name, force, reason, sizeof reason);
    memset(pair.secret_z85, 0, sizeof pair.secret_z85);
    if (rc < 0) {
        fprintf(stderr, "onceq: %s\n", reason);
        return OQ_CLI_EXIT_REFUSED;
    }
    printf("%s\n", pair.public_z85);
    fprintf(stderr, "onceq: wrote %s/%s%s (public) and %s/%s%s (secret, mode 0600)\n", dir, name,
            OQ_KEY_PUBLIC_EXT, dir, name, OQ_KEY_SECRET_EXT);
    return OQ_CLI_EXIT_OK;
}
