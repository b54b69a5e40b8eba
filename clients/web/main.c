/*  main.c: onceq-web, the dashboard. It serves the broker's queues,
    workers, failed and review jobs as web pages, with the actions an
    operator takes on them (retry, forget, flush, resolve, cancel), to the
    users of its users file. It connects to the broker as an admin, over
    CURVE with its own key, and binds loopback unless told otherwise: off
    loopback it needs TLS (--tls-cert, --tls-key) or --insecure-remote.

    One thread: the loop serves HTTP (web_server.c) and, every
    OQ_WEB_SAMPLE_MS, samples the broker's counters for the charts. A page
    waits for the broker's answer (at most --timeout-ms), so a broker that
    does not answer holds the other requests that long: the pages are for
    people, a few at a time, and the dashboard never holds the broker. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "onceq/flags.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "web.h"
#include "web_server.h"

#define S_PROGRAM        "onceq-web"
#define S_EXIT_USAGE     2
#define S_EXIT_FAILED    1
#define S_DEFAULT_LISTEN "127.0.0.1:7790"
/* The loop wakes at least this often to see a signal. */
#define S_MAX_WAIT_MS 1000

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

static int64_t s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* True if addr (IP:PORT) is on loopback. */
static bool s_loopback(const char *addr)
{
    return strncmp(addr, "127.", 4) == 0 || strncmp(addr, "[::1]:", 6) == 0 ||
           strncmp(addr, "localhost:", 10) == 0;
}

static void s_usage(const oq_flag_t *flags, size_t count)
{
    printf("Usage: " S_PROGRAM " --users FILE [OPTIONS]\n"
           "\n"
           "The onceq dashboard: queues, workers, failed and review jobs in the browser,\n"
           "with the actions on them, served over HTTP on --listen (loopback by default).\n"
           "It speaks to the broker as an admin: give it an admin key (--key, made by\n"
           "'onceq keygen NAME' and its public half put in the broker's keys/admins).\n"
           "\n"
           "Every request needs a login: HTTP basic, a user of the --users file, one\n"
           "line \"NAME ROLE HASH\" each, ROLE admin (pages and actions) or viewer (pages\n"
           "only), HASH from 'openssl passwd -6'. The file must be readable by its owner\n"
           "only. Actions carry a CSRF token of the user and are logged with the user's\n"
           "name. Off loopback, serve TLS (--tls-cert, --tls-key) or say\n"
           "--insecure-remote.\n"
           "\n"
           "Options:\n");
    oq_flags_help(flags, count, stdout);
    printf("\nSee docs/operations.md, \"The dashboard\".\n");
}

int main(int argc, char **argv)
{
    oq_log_init(S_PROGRAM);
    const char *listen = NULL, *users_path = NULL, *broker = NULL, *key = NULL, *broker_key = NULL,
               *tls_cert = NULL, *tls_key = NULL;
    uint32_t timeout_ms = 0;
    bool insecure_remote = false, help = false, version = false;
    oq_log_level_t level = OQ_LOG_INFO;
    const oq_flag_t flags[] = {
        {.name = "listen",
         .env = "ONCEQ_WEB_LISTEN",
         .kind = OQ_FLAG_STRING,
         .arg = "IP:PORT",
         .def = S_DEFAULT_LISTEN,
         .dest = &listen,
         .help = "serve HTTP on IP:PORT"},
        {.name = "users",
         .env = "ONCEQ_WEB_USERS",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .dest = &users_path,
         .def_text = "none: required",
         .help = "the users file: NAME ROLE HASH a line (ROLE admin or viewer)"},
        {.name = "broker",
         .env = "ONCEQ_BROKER",
         .kind = OQ_FLAG_STRING,
         .arg = "ENDPOINTS",
         .def = OQ_DEFAULT_FRONT_ENDPOINT,
         .dest = &broker,
         .help = "the broker's front socket; several, comma-separated, are tried in order "
                 "when one gives no answer"},
        {.name = "key",
         .env = "ONCEQ_KEY",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .dest = &key,
         .def_text = "none: plaintext",
         .help = "our secret key file, NAME.key_secret (an admin key)"},
        {.name = "broker-key",
         .env = "ONCEQ_BROKER_KEY",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .dest = &broker_key,
         .def_text = "none",
         .help = "the broker's public key file, broker.key"},
        {.name = "timeout-ms",
         .env = "ONCEQ_CLIENT_TIMEOUT_MS",
         .kind = OQ_FLAG_MS,
         .arg = "N",
         .min = 100,
         .max = 60000,
         .def = "3000",
         .dest = &timeout_ms,
         .help = "how long a page waits for the broker"},
        {.name = "tls-cert",
         .env = "ONCEQ_WEB_TLS_CERT",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .dest = &tls_cert,
         .def_text = "none: plain HTTP",
         .help = "serve HTTPS with this PEM certificate (with --tls-key)"},
        {.name = "tls-key",
         .env = "ONCEQ_WEB_TLS_KEY",
         .kind = OQ_FLAG_STRING,
         .arg = "FILE",
         .dest = &tls_key,
         .def_text = "none",
         .help = "the certificate's PEM private key"},
        {.name = "insecure-remote",
         .env = "ONCEQ_WEB_INSECURE_REMOTE",
         .kind = OQ_FLAG_BOOL,
         .dest = &insecure_remote,
         .help = "allow --listen off loopback without TLS (passwords then cross the network "
                 "in the clear)"},
        OQ_FLAG_LOG_LEVEL(&level),
        {.name = "help", .kind = OQ_FLAG_BOOL, .stop = true, .dest = &help, .help = "this text"},
        {.name = "version",
         .kind = OQ_FLAG_BOOL,
         .stop = true,
         .dest = &version,
         .help = "the version"},
    };
    size_t count = OQ_FLAGS_COUNT(flags);
    int rc = oq_flags_parse(S_PROGRAM, flags, count, argc, argv);
    if (rc < 0)
        return S_EXIT_USAGE;
    if (help) {
        s_usage(flags, count);
        return 0;
    }
    if (version) {
        printf(S_PROGRAM " %s\n", ONCEQ_VERSION);
        return 0;
    }
    oq_log_set_level(level);
    if (!users_path || !*users_path) {
        fprintf(stderr, S_PROGRAM ": --users FILE is required: every request needs a login\n");
        return S_EXIT_USAGE;
    }
    if (!tls_cert != !tls_key) {
        fprintf(stderr, S_PROGRAM ": TLS needs both --tls-cert and --tls-key\n");
        return S_EXIT_USAGE;
    }
    if (!s_loopback(listen) && !tls_cert && !insecure_remote) {
        fprintf(stderr,
                S_PROGRAM ": --listen %s is not loopback: serve TLS (--tls-cert, --tls-key) or "
                          "say --insecure-remote\n",
                listen);
        return S_EXIT_USAGE;
    }
    char reason[512];
    static oq_web_t web; /* the history is large: not on the stack */
    web.timeout_ms = (int)timeout_ms;
    web.users = oq_web_users_load(users_path, reason, sizeof reason);
    if (!web.users) {
        fprintf(stderr, S_PROGRAM ": %s\n", reason);
        return S_EXIT_USAGE;
    }
    web.broker = oq_web_broker_new(broker, key, broker_key, reason, sizeof reason);
    if (!web.broker) {
        fprintf(stderr, S_PROGRAM ": %s\n", reason);
        oq_web_users_destroy(&web.users);
        return S_EXIT_USAGE;
    }
    oq_web_server_t *server =
        oq_web_server_new(&web, listen, tls_cert, tls_key, reason, sizeof reason);
    if (!server) {
        fprintf(stderr, S_PROGRAM ": %s\n", reason);
        oq_web_broker_destroy(&web.broker);
        oq_web_users_destroy(&web.users);
        return S_EXIT_FAILED;
    }
    struct sigaction sa = {.sa_handler = s_on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    oq_info("serving %s://%s (port %u), broker %s", tls_cert ? "https" : "http", listen,
            (unsigned)oq_web_server_port(server), oq_web_broker_endpoint(web.broker));
    int64_t next_sample = s_now_ms();
    rc = 0;
    while (!s_stop) {
        int64_t now = s_now_ms();
        if (now >= next_sample) {
            oq_web_sample(&web);
            next_sample = now + OQ_WEB_SAMPLE_MS;
        }
        int64_t wait = next_sample - now;
        if (oq_web_server_run(server, wait < S_MAX_WAIT_MS ? (int)wait : S_MAX_WAIT_MS) < 0) {
            oq_error("the HTTP server failed");
            rc = S_EXIT_FAILED;
            break;
        }
    }
    oq_info("stopping");
    oq_web_server_destroy(&server);
    oq_web_broker_destroy(&web.broker);
    oq_web_users_destroy(&web.users);
    return rc;
}
