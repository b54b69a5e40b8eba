/*  test_flags.c: the flag table (onceq/flags.h): values from flags, from
    the environment and from defaults, the flag beating its variable,
    bounds and kind errors naming the source, unknown flags, repeatable
    custom flags, and the --help text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "onceq/flags.h"

#define S_ERR_LEN    4096
#define S_MAX_QUEUES 4

typedef struct {
    const char *broker;
    uint64_t jobs;
    uint32_t workers;
    uint32_t heartbeat_ms;
    int64_t stop_ms;
    double rate;
    bool keep, help;
    int isolation;
    const char *queues[S_MAX_QUEUES];
    size_t queue_count;
    oq_flag_src_t workers_src;
} s_values_t;

static s_values_t s_v;
static const char *const s_isolations[] = {"read-committed", "repeatable-read", "serializable",
                                           NULL};

/* NAME:SECONDS, repeatable, like the broker's --queue. */
static int s_queue(const char *value, void *dest, char *why, size_t why_len)
{
    s_values_t *v = dest;
    const char *colon = strchr(value, ':');
    if (!colon || colon == value) {
        snprintf(why, why_len, "NAME:SECONDS, with a name before the colon");
        return -1;
    }
    if (v->queue_count == S_MAX_QUEUES)
        return -1;
    v->queues[v->queue_count++] = value;
    return 0;
}

static const oq_flag_t s_flags[] = {
    {.kind = OQ_FLAG_SECTION, .help = "connection:"},
    {.name = "broker",
     .env = "T_FLAGS_BROKER",
     .kind = OQ_FLAG_ENDPOINT,
     .arg = "ENDPOINT",
     .def = "tcp://127.0.0.1:7751",
     .dest = &s_v.broker,
     .help = "the broker"},
    {.name = "jobs",
     .env = "T_FLAGS_JOBS",
     .kind = OQ_FLAG_UINT,
     .arg = "N",
     .min = 1,
     .max = 1000,
     .def = "10",
     .dest = &s_v.jobs,
     .help = "how many jobs"},
    {.name = "workers",
     .env = "T_FLAGS_WORKERS",
     .kind = OQ_FLAG_U32,
     .arg = "N",
     .min = 1,
     .max = 256,
     .dest = &s_v.workers,
     .def_text = "one",
     .src = &s_v.workers_src,
     .help = "worker processes"},
    {.name = "heartbeat-ms",
     .env = "T_FLAGS_HEARTBEAT_MS",
     .kind = OQ_FLAG_MS,
     .arg = "N",
     .min = 10,
     .max = 60000,
     .def = "1000",
     .dest = &s_v.heartbeat_ms,
     .help = "heartbeat"},
    {.kind = OQ_FLAG_SECTION, .help = "more:"},
    {.name = "stop-timeout",
     .kind = OQ_FLAG_SECONDS,
     .arg = "S",
     .max = 86400000,
     .def = "75",
     .dest = &s_v.stop_ms,
     .help = "grace after SIGTERM"},
    {.name = "rate",
     .kind = OQ_FLAG_DOUBLE,
     .arg = "R",
     .dmin = 0,
     .dmax = 1e6,
     .def = "100",
     .dest = &s_v.rate,
     .help = "dispatches per second"},
    {.name = "keep",
     .env = "T_FLAGS_KEEP",
     .kind = OQ_FLAG_BOOL,
     .dest = &s_v.keep,
     .help = "keep the directory"},
    {.name = "isolation",
     .env = "T_FLAGS_ISOLATION",
     .kind = OQ_FLAG_ENUM,
     .arg = "LEVEL",
     .words = s_isolations,
     .def = "read-committed",
     .dest = &s_v.isolation,
     .help = "isolation level"},
    {.name = "queue",
     .kind = OQ_FLAG_CUSTOM,
     .arg = "NAME:S",
     .parse = s_queue,
     .expected = "NAME:SECONDS",
     .repeat = true,
     .dest = &s_v,
     .help = "a queue; repeatable"},
    {.name = "help", .kind = OQ_FLAG_BOOL, .stop = true, .dest = &s_v.help, .help = "this text"},
};

/* Parse argv (NULL-terminated) with stderr captured into err. */
static int s_parse(const char *const *args, char *err)
{
    memset(&s_v, 0, sizeof s_v);
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"prog";
    for (; *args; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    fflush(stderr);
    FILE *capture = tmpfile();
    assert_non_null(capture);
    int saved = dup(STDERR_FILENO);
    dup2(fileno(capture), STDERR_FILENO);
    int rc = oq_flags_parse("prog", s_flags, OQ_FLAGS_COUNT(s_flags), argc, argv);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(capture);
    size_t n = fread(err, 1, S_ERR_LEN - 1, capture);
    err[n] = 0;
    fclose(capture);
    return rc;
}

static int s_setup(void **state)
{
    unsetenv("T_FLAGS_BROKER");
    unsetenv("T_FLAGS_JOBS");
    unsetenv("T_FLAGS_WORKERS");
    unsetenv("T_FLAGS_HEARTBEAT_MS");
    unsetenv("T_FLAGS_KEEP");
    unsetenv("T_FLAGS_ISOLATION");
    return 0;
}

static void test_defaults(void **state)
{
    char err[S_ERR_LEN];
    const char *args[] = {NULL};
    assert_int_equal(s_parse(args, err), 0);
    assert_string_equal(err, "");
    assert_string_equal(s_v.broker, "tcp://127.0.0.1:7751");
    assert_int_equal(s_v.jobs, 10);
    assert_int_equal(s_v.workers, 0); /* no default: untouched */
    assert_int_equal(s_v.workers_src, OQ_FLAG_SRC_NONE);
    assert_int_equal(s_v.heartbeat_ms, 1000);
    assert_int_equal(s_v.stop_ms, 75000);
    assert_true(s_v.rate == 100.0);
    assert_false(s_v.keep);
    assert_int_equal(s_v.isolation, 0);
    assert_int_equal(s_v.queue_count, 0);
}

static void test_flags_parsed(void **state)
{
    char err[S_ERR_LEN];
    const char *args[] = {"--broker",    "ipc:///tmp/b",   "--jobs",  "1000",
                          "--workers=4", "--heartbeat-ms", "10",      "--stop-timeout",
                          "0.25",        "--rate",         "2.5",     "--keep",
                          "--isolation", "serializable",   "--queue", "high:30",
                          "--queue",     "low:60",         NULL};
    assert_int_equal(s_parse(args, err), 0);
    assert_string_equal(err, "");
    assert_string_equal(s_v.broker, "ipc:///tmp/b");
    assert_int_equal(s_v.jobs, 1000);
    assert_int_equal(s_v.workers, 4);
    assert_int_equal(s_v.workers_src, OQ_FLAG_SRC_ARG);
    assert_int_equal(s_v.heartbeat_ms, 10);
    assert_int_equal(s_v.stop_ms, 250);
    assert_true(s_v.rate == 2.5);
    assert_true(s_v.keep);
    assert_int_equal(s_v.isolation, 2);
    assert_int_equal(s_v.queue_count, 2);
    assert_string_equal(s_v.queues[0], "high:30");
    assert_string_equal(s_v.queues[1], "low:60");
}

static void test_env_fallback(void **state)
{
    char err[S_ERR_LEN];
    setenv("T_FLAGS_JOBS", "7", 1);
    setenv("T_FLAGS_WORKERS", "3", 1);
    setenv("T_FLAGS_KEEP", "yes", 1);
    setenv("T_FLAGS_ISOLATION", "repeatable-read", 1);
    setenv("T_FLAGS_BROKER", "", 1); /* empty: as if unset */
    const char *args[] = {NULL};
    assert_int_equal(s_parse(args, err), 0);
    assert_int_equal(s_v.jobs, 7);
    assert_int_equal(s_v.workers, 3);
    assert_int_equal(s_v.workers_src, OQ_FLAG_SRC_ENV);
    assert_true(s_v.keep);
    assert_int_equal(s_v.isolation, 1);
    assert_string_equal(s_v.broker, "tcp://127.0.0.1:7751");
}

static void test_flag_beats_env(void **state)
{
    char err[S_ERR_LEN];
    setenv("T_FLAGS_JOBS", "7", 1);
    /* A bad variable is not even looked at when the flag is given. */
    setenv("T_FLAGS_HEARTBEAT_MS", "junk", 1);
    const char *args[] = {"--jobs", "9", "--heartbeat-ms", "20", NULL};
    assert_int_equal(s_parse(args, err), 0);
    assert_int_equal(s_v.jobs, 9);
    assert_int_equal(s_v.heartbeat_ms, 20);
    /* The last of a repeated plain flag wins. */
    unsetenv("T_FLAGS_HEARTBEAT_MS");
    const char *again[] = {"--jobs", "9", "--jobs", "11", NULL};
    assert_int_equal(s_parse(again, err), 0);
    assert_int_equal(s_v.jobs, 11);
}

static void test_bounds_errors(void **state)
{
    char err[S_ERR_LEN];
    const char *low[] = {"--heartbeat-ms", "5", NULL};
    assert_int_equal(s_parse(low, err), -1);
    assert_string_equal(err, "prog: invalid --heartbeat-ms \"5\": expected milliseconds from 10 to "
                             "60000\n");
    const char *high[] = {"--jobs", "1001", NULL};
    assert_int_equal(s_parse(high, err), -1);
    assert_string_equal(err,
                        "prog: invalid --jobs \"1001\": expected a whole number from 1 to 1000\n");
    const char *neg[] = {"--jobs", "-1", NULL};
    assert_int_equal(s_parse(neg, err), -1);
    assert_non_null(strstr(err, "invalid --jobs \"-1\""));
    const char *secs[] = {"--stop-timeout", "86401", NULL};
    assert_int_equal(s_parse(secs, err), -1);
    assert_string_equal(
        err, "prog: invalid --stop-timeout \"86401\": expected seconds from 0 to 86400\n");
    const char *rate[] = {"--rate", "nan", NULL};
    assert_int_equal(s_parse(rate, err), -1);
    assert_non_null(strstr(err, "expected a number from 0 to 1e+06"));
    const char *word[] = {"--isolation", "snapshot", NULL};
    assert_int_equal(s_parse(word, err), -1);
    assert_string_equal(err, "prog: invalid --isolation \"snapshot\": expected read-committed, "
                             "repeatable-read or serializable\n");
    const char *endpoint[] = {"--broker", "tcp://host", NULL};
    assert_int_equal(s_parse(endpoint, err), -1);
    assert_non_null(strstr(err, "expected tcp://HOST:PORT or ipc://PATH"));
    const char *queue[] = {"--queue", ":30", NULL};
    assert_int_equal(s_parse(queue, err), -1);
    assert_string_equal(err, "prog: invalid --queue \":30\": expected NAME:SECONDS, with a name "
                             "before the colon\n");
}

static void test_env_error_names_variable(void **state)
{
    char err[S_ERR_LEN];
    setenv("T_FLAGS_WORKERS", "300", 1);
    const char *args[] = {NULL};
    assert_int_equal(s_parse(args, err), -1);
    assert_string_equal(
        err, "prog: invalid T_FLAGS_WORKERS \"300\": expected a whole number from 1 to 256\n");
    setenv("T_FLAGS_WORKERS", "2", 1);
    setenv("T_FLAGS_KEEP", "maybe", 1);
    assert_int_equal(s_parse(args, err), -1);
    assert_string_equal(
        err, "prog: invalid T_FLAGS_KEEP \"maybe\": expected 1, 0, true, false, yes or no\n");
}

static void test_unknown_and_misused(void **state)
{
    char err[S_ERR_LEN];
    const char *unknown[] = {"--jobz", "3", NULL};
    assert_int_equal(s_parse(unknown, err), -1);
    assert_string_equal(err, "prog: unknown flag \"--jobz\" (see --help)\n");
    const char *missing[] = {"--jobs", NULL};
    assert_int_equal(s_parse(missing, err), -1);
    assert_string_equal(err, "prog: --jobs needs a value (see --help)\n");
    const char *extra[] = {"--keep", "stray", NULL};
    assert_int_equal(s_parse(extra, err), -1);
    assert_string_equal(err, "prog: unexpected argument \"stray\" (see --help)\n");
}

static void test_stop_flag(void **state)
{
    char err[S_ERR_LEN];
    /* --help stops before values are converted: a bad one does not hide it. */
    const char *args[] = {"--jobs", "0", "--help", NULL};
    assert_int_equal(s_parse(args, err), 1);
    assert_true(s_v.help);
    assert_string_equal(err, "");
}

static void test_help_text(void **state)
{
    FILE *out = tmpfile();
    assert_non_null(out);
    oq_flags_help(s_flags, OQ_FLAGS_COUNT(s_flags), out);
    rewind(out);
    char text[S_ERR_LEN * 2];
    size_t n = fread(text, 1, sizeof text - 1, out);
    text[n] = 0;
    fclose(out);
    for (size_t i = 0; i < OQ_FLAGS_COUNT(s_flags); i++) {
        const oq_flag_t *f = &s_flags[i];
        char needle[128];
        if (f->kind == OQ_FLAG_SECTION) {
            assert_non_null(strstr(text, f->help));
            continue;
        }
        snprintf(needle, sizeof needle, "  --%s", f->name);
        if (!strstr(text, needle))
            fail_msg("--help has no %s:\n%s", needle, text);
        if (f->env) {
            snprintf(needle, sizeof needle, "[%s]", f->env);
            if (!strstr(text, needle))
                fail_msg("--help has no %s:\n%s", needle, text);
        }
    }
    if (!strstr(text, "  --broker ENDPOINT      the broker [T_FLAGS_BROKER] (default\n"
                      "                         tcp://127.0.0.1:7751)\n"))
        fail_msg("--broker is not laid out as expected:\n%s", text);
    assert_non_null(strstr(text, "(default one)"));
    /* No line runs past 79 columns. */
    for (char *line = text; *line;) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > 79)
            fail_msg("help line of %zu columns: %.*s", len, (int)len, line);
        line += len + (end ? 1 : 0);
    }
}

static void test_endpoint_valid(void **state)
{
    assert_true(oq_flags_endpoint_valid("tcp://127.0.0.1:1"));
    assert_true(oq_flags_endpoint_valid("ipc:///run/onceq.sock"));
    assert_false(oq_flags_endpoint_valid("tcp://:80"));
    assert_false(oq_flags_endpoint_valid("tcp://host:65536"));
    assert_false(oq_flags_endpoint_valid("ipc://"));
    assert_false(oq_flags_endpoint_valid("udp://host:1"));
    assert_false(oq_flags_endpoint_valid(NULL));
}

/* What --insecure may bind without --insecure-remote. */
static void test_endpoint_local(void **state)
{
    (void)state;
    assert_true(oq_flags_endpoint_local("tcp://127.0.0.1:7750"));
    assert_true(oq_flags_endpoint_local("tcp://127.1.2.3:7750"));
    assert_true(oq_flags_endpoint_local("tcp://localhost:7750"));
    assert_true(oq_flags_endpoint_local("tcp://[::1]:7750"));
    assert_true(oq_flags_endpoint_local("ipc:///run/onceq.sock"));
    assert_true(oq_flags_endpoint_local("inproc://x"));
    assert_false(oq_flags_endpoint_local("tcp://0.0.0.0:7750"));
    assert_false(oq_flags_endpoint_local("tcp://*:7750"));
    assert_false(oq_flags_endpoint_local("tcp://10.0.0.1:7750"));
    assert_false(oq_flags_endpoint_local("tcp://128.0.0.1:7750"));
    assert_false(oq_flags_endpoint_local("tcp://127.0.0.256:7750"));
    assert_false(oq_flags_endpoint_local("tcp://127.0.0.1.evil.com:7750"));
    assert_false(oq_flags_endpoint_local("tcp://eth0:7750"));
    assert_false(oq_flags_endpoint_local("tcp://[::]:7750"));
    assert_false(oq_flags_endpoint_local("tcp://127.0.0.1"));
    assert_false(oq_flags_endpoint_local(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, s_setup),
        cmocka_unit_test_setup(test_flags_parsed, s_setup),
        cmocka_unit_test_setup(test_env_fallback, s_setup),
        cmocka_unit_test_setup(test_flag_beats_env, s_setup),
        cmocka_unit_test_setup(test_bounds_errors, s_setup),
        cmocka_unit_test_setup(test_env_error_names_variable, s_setup),
        cmocka_unit_test_setup(test_unknown_and_misused, s_setup),
        cmocka_unit_test_setup(test_stop_flag, s_setup),
        cmocka_unit_test_setup(test_help_text, s_setup),
        cmocka_unit_test(test_endpoint_valid),
        cmocka_unit_test(test_endpoint_local),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
