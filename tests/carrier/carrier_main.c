/*  carrier_main.c: onceq-carrier, a mock carrier API for the shipment
    requests of the reference domain (docs/carrier.md). It honours the
    Idempotency-Key header the way real payment and shipping APIs do, and
    misbehaves on request (an injected 503, a reply dropped after the work
    was done, a slow reply), drawn from a seed, so that the demo, the chaos
    harness, the tests and users' own trials can check that a shipment is
    requested once per order whatever goes wrong on the way.

    It prints "listening on ADDRESS:PORT" on stdout once it accepts
    connections, logs one line per request on stderr, and exits 0 on SIGINT
    or SIGTERM, 2 on a usage error, 1 if it cannot listen. Shipments live in
    memory only: a restart forgets them. */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "carrier_limits.h"
#include "fault_plan.h"
#include "http.h"
#include "onceq/config.h"
#include "onceq/log.h"

#define S_EXIT_OK    0
#define S_EXIT_FAIL  1
#define S_EXIT_USAGE 2
#define S_PROGRAM    "onceq-carrier"

static void s_usage(FILE *out)
{
    fprintf(out,
            "usage: " S_PROGRAM " [options]\n"
            "\n"
            "A mock carrier API: POST /shipments with an Idempotency-Key header creates a\n"
            "shipment at most once per key; GET /shipments lists them with the requests each\n"
            "key received. Faults on request, drawn from a seed. State is in memory only:\n"
            "a restart forgets every shipment. See docs/carrier.md.\n"
            "\n"
            "options:\n"
            "  --bind ADDRESS         IPv4 or IPv6 address to listen on (default %s)\n"
            "  --port N               port; 0 lets the system pick one (default %d)\n"
            "  --error-rate R         share of POST /shipments answered 503 before any\n"
            "                         processing, 0 to 1 (default 0)\n"
            "  --drop-reply-rate R    share of POST /shipments processed and then closed\n"
            "                         without a reply, 0 to 1 (default 0)\n"
            "  --delay-ms N           every POST /shipments reply waits N ms after the\n"
            "                         processing; other requests go on meanwhile (default 0,\n"
            "                         at most %d)\n"
            "  --seed N               seed of the fault draws (default: one from the system,\n"
            "                         logged at start)\n"
            "  --max-shipments N      shipments held at most; a new key beyond gets 507\n"
            "                         (default %d, at most %d)\n"
            "  --first-reference N    counter of the first shipment's reference, SHP-N\n"
            "                         (default %d)\n"
            "  --log-level LEVEL      debug (adds the GET requests), info, warn or error\n"
            "                         (default info)\n"
            "  --help                 this text\n"
            "  --version              the version\n"
            "\n"
            "Prints \"listening on ADDRESS:PORT\" on stdout once ready. SIGINT or SIGTERM\n"
            "stops it (replies still waiting out a delay are sent first).\n",
            OQ_CARRIER_DEFAULT_BIND, OQ_CARRIER_DEFAULT_PORT, OQ_CARRIER_MAX_DELAY_MS,
            OQ_CARRIER_DEFAULT_MAX_SHIPMENTS, OQ_CARRIER_MAX_SHIPMENTS_LIMIT,
            OQ_CARRIER_DEFAULT_FIRST_REF);
}

static int s_bad(const char *flag, const char *value, const char *expected)
{
    fprintf(stderr, S_PROGRAM ": invalid %s \"%s\": expected %s\n", flag, value, expected);
    return S_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    oq_log_init(S_PROGRAM);
    enum {
        O_BIND = 1000,
        O_PORT,
        O_ERROR_RATE,
        O_DROP_RATE,
        O_DELAY,
        O_SEED,
        O_MAX_SHIPMENTS,
        O_FIRST_REF,
        O_LOG_LEVEL,
        O_HELP,
        O_VERSION
    };
    static const struct option options[] = {
        {"bind", required_argument, 0, O_BIND},
        {"port", required_argument, 0, O_PORT},
        {"error-rate", required_argument, 0, O_ERROR_RATE},
        {"drop-reply-rate", required_argument, 0, O_DROP_RATE},
        {"delay-ms", required_argument, 0, O_DELAY},
        {"seed", required_argument, 0, O_SEED},
        {"max-shipments", required_argument, 0, O_MAX_SHIPMENTS},
        {"first-reference", required_argument, 0, O_FIRST_REF},
        {"log-level", required_argument, 0, O_LOG_LEVEL},
        {"help", no_argument, 0, O_HELP},
        {"version", no_argument, 0, O_VERSION},
        {0, 0, 0, 0},
    };
    oq_http_config_t config = {
        .bind = OQ_CARRIER_DEFAULT_BIND,
        .port = OQ_CARRIER_DEFAULT_PORT,
        .max_shipments = OQ_CARRIER_DEFAULT_MAX_SHIPMENTS,
        .first_ref = OQ_CARRIER_DEFAULT_FIRST_REF,
    };
    bool seeded = false;
    uint64_t v;
    int opt;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case O_BIND:
            config.bind = optarg;
            break;
        case O_PORT:
            if (oq_config_uint(optarg, 0, OQ_CARRIER_MAX_PORT, &v) < 0)
                return s_bad("--port", optarg, "a port from 0 to 65535");
            config.port = (uint16_t)v;
            break;
        case O_ERROR_RATE:
            if (oq_fault_plan_parse_rate(optarg, &config.faults.error_rate) < 0)
                return s_bad("--error-rate", optarg, "a rate from 0 to 1, such as 0.2");
            break;
        case O_DROP_RATE:
            if (oq_fault_plan_parse_rate(optarg, &config.faults.drop_reply_rate) < 0)
                return s_bad("--drop-reply-rate", optarg, "a rate from 0 to 1, such as 0.2");
            break;
        case O_DELAY:
            if (oq_config_uint(optarg, 0, OQ_CARRIER_MAX_DELAY_MS, &v) < 0)
                return s_bad("--delay-ms", optarg, "milliseconds from 0 to 600000");
            config.faults.delay_ms = (uint32_t)v;
            break;
        case O_SEED:
            if (oq_config_uint(optarg, 0, UINT64_MAX, &config.seed) < 0)
                return s_bad("--seed", optarg, "an unsigned 64-bit integer");
            seeded = true;
            break;
        case O_MAX_SHIPMENTS:
            if (oq_config_uint(optarg, 1, OQ_CARRIER_MAX_SHIPMENTS_LIMIT, &config.max_shipments) <
                0)
                return s_bad("--max-shipments", optarg, "a count from 1 to 10000000");
            break;
        case O_FIRST_REF:
            if (oq_config_uint(optarg, 0, OQ_CARRIER_MAX_FIRST_REF, &config.first_ref) < 0)
                return s_bad("--first-reference", optarg, "a counter from 0 to 1000000000000");
            break;
        case O_LOG_LEVEL: {
            oq_log_level_t level;
            if (oq_log_parse_level(optarg, &level) < 0)
                return s_bad("--log-level", optarg, "debug, info, warn or error");
            oq_log_set_level(level);
            break;
        }
        case O_HELP:
            s_usage(stdout);
            return S_EXIT_OK;
        case O_VERSION:
            printf(S_PROGRAM " %s\n", ONCEQ_VERSION);
            return S_EXIT_OK;
        default:
            s_usage(stderr);
            return S_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, S_PROGRAM ": unexpected argument \"%s\"\n", argv[optind]);
        return S_EXIT_USAGE;
    }
    if (!seeded) {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&config.seed, sizeof config.seed, 1, f) != 1) {
            fprintf(stderr, S_PROGRAM ": cannot read a seed from /dev/urandom; pass --seed\n");
            if (f)
                fclose(f);
            return S_EXIT_FAIL;
        }
        fclose(f);
    }

    /* SIGINT and SIGTERM arrive on a descriptor the event loop polls, so a
       stop is handled between requests, never inside one. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    if (sigprocmask(SIG_BLOCK, &stop, NULL) < 0) {
        perror(S_PROGRAM ": sigprocmask");
        return S_EXIT_FAIL;
    }
    int stop_fd = signalfd(-1, &stop, SFD_CLOEXEC);
    if (stop_fd < 0) {
        perror(S_PROGRAM ": signalfd");
        return S_EXIT_FAIL;
    }
    signal(SIGPIPE, SIG_IGN);

    oq_http_t *http = oq_http_new(&config);
    if (!http) {
        close(stop_fd);
        return S_EXIT_FAIL;
    }
    oq_info("seed %" PRIu64 ", error_rate %g, drop_reply_rate %g, delay_ms %u, max_shipments "
            "%" PRIu64,
            config.seed, config.faults.error_rate, config.faults.drop_reply_rate,
            config.faults.delay_ms, config.max_shipments);
    printf("listening on %s\n", oq_http_address(http));
    fflush(stdout);
    int rc = oq_http_run(http, stop_fd);
    oq_info("stopping");
    oq_http_destroy(&http);
    close(stop_fd);
    return rc == 0 ? S_EXIT_OK : S_EXIT_FAIL;
}
