/*  test_registry.c: the worker's handler side: the registry (types, batch
    functions, flags, resources), the report and payload helpers, and the
    built-in handlers. The runner, the session and the supervisor have
    files of their own (test_runner.c, test_session.c, test_supervisor.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handler_fixture.h"
#include "onceq/clock.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "onceq/worker.h"
#include "registry.h"
#include "worker_limits.h"

/* ---- helpers ------------------------------------------------------------- */

/* A payload map built with msgpack and held unpacked for a handler. */
typedef struct {
    msgpack_sbuffer buf;
    msgpack_packer pk;
    msgpack_unpacked unpacked;
    oq_job_t job;
} s_payload_t;

static void s_payload_begin(s_payload_t *p, uint32_t pairs)
{
    memset(p, 0, sizeof *p);
    msgpack_sbuffer_init(&p->buf);
    msgpack_packer_init(&p->pk, &p->buf, msgpack_sbuffer_write);
    msgpack_pack_map(&p->pk, pairs);
}

static void s_key(s_payload_t *p, const char *key)
{
    oq_proto_pack_cstr(&p->pk, key);
}

/* Unpack what was packed and make a job around it. */
static const oq_job_t *s_payload_end(s_payload_t *p)
{
    msgpack_unpacked_init(&p->unpacked);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&p->unpacked, p->buf.data, p->buf.size, &off),
                     MSGPACK_UNPACK_SUCCESS);
    p->job.id = 42;
    p->job.type = "test";
    p->job.queue = "default";
    p->job.attempt = 1;
    p->job.max_tries = 3;
    p->job.timeout_ms = 60000;
    p->job.payload = &p->unpacked.data;
    return &p->job;
}

static void s_payload_free(s_payload_t *p)
{
    msgpack_unpacked_destroy(&p->unpacked);
    msgpack_sbuffer_destroy(&p->buf);
}

static void s_other_handler(const oq_job_t *job, void *state, oq_report_t *report)
{
    oq_report_fail(report, "other");
}

/* Run a registered handler the way the runner does. */
static void s_run(oq_registry_t *registry, const char *type, const oq_job_t *job,
                  oq_report_t *report)
{
    oq_handler_fn fn;
    void *state;
    assert_int_equal(oq_registry_find(registry, type, &fn, &state), 0);
    memset(report, 0, sizeof *report);
    fn(job, state, report);
}

/* ---- registry ------------------------------------------------------------ */

static void test_registry_add_and_find(void **unused)
{
    oq_registry_t *registry = oq_registry_new();
    int seen = 0;
    assert_int_equal(oq_registry_add(registry, "count", oq_hfix_counting_handler, &seen), 0);
    assert_int_equal(oq_registry_add(registry, "other:v2", s_other_handler, NULL), 0);

    oq_handler_fn fn = NULL;
    void *state = NULL;
    assert_int_equal(oq_registry_find(registry, "count", &fn, &state), 0);
    assert_ptr_equal(fn, oq_hfix_counting_handler);
    assert_ptr_equal(state, &seen);
    assert_int_equal(oq_registry_find(registry, "other:v2", &fn, &state), 0);
    assert_ptr_equal(fn, s_other_handler);
    assert_null(state);

    assert_int_equal(oq_registry_find(registry, "missing", &fn, &state), -1);
    assert_int_equal(oq_registry_find(registry, "coun", &fn, &state), -1);
    assert_int_equal(oq_registry_find(registry, NULL, &fn, &state), -1);

    oq_registry_destroy(&registry);
    assert_null(registry);
    oq_registry_destroy(&registry); /* a second destroy is harmless */
}

static void s_batch_ok(const oq_job_t *const *jobs, size_t count, void *state, oq_report_t *reports)
{
    (void)jobs;
    *(size_t *)state += count;
    for (size_t i = 0; i < count; i++)
        oq_report_ok(&reports[i], OQ_RESULT_APPLIED);
}

static void test_registry_batch_functions(void **unused)
{
    oq_registry_t *registry = oq_registry_new();
    size_t seen = 0;
    assert_int_equal(oq_registry_add(registry, "count", oq_hfix_counting_handler, &seen), 0);
    assert_int_equal(oq_registry_add(registry, "single", s_other_handler, NULL), 0);

    /* Only a registered type, with a function and room for two jobs. */
    assert_int_equal(oq_registry_set_batch(registry, "missing", s_batch_ok, 8), -1);
    assert_int_equal(oq_registry_set_batch(registry, NULL, s_batch_ok, 8), -1);
    assert_int_equal(oq_registry_set_batch(registry, "count", NULL, 8), -1);
    assert_int_equal(oq_registry_set_batch(registry, "count", s_batch_ok, 1), -1);

    oq_batch_fn fn = NULL;
    void *state = NULL;
    size_t max_jobs = 0;
    assert_int_equal(oq_registry_find_batch(registry, "count", &fn, &state, &max_jobs), -1);

    /* The cap holds whatever the handler asks for; the state is the handler's. */
    assert_int_equal(oq_registry_set_batch(registry, "count", s_batch_ok, 100000), 0);
    assert_int_equal(oq_registry_find_batch(registry, "count", &fn, &state, &max_jobs), 0);
    assert_ptr_equal(fn, s_batch_ok);
    assert_ptr_equal(state, &seen);
    assert_int_equal(max_jobs, OQ_WORKER_MAX_BATCH);
    assert_int_equal(oq_registry_set_batch(registry, "count", s_batch_ok, 16), 0);
    assert_int_equal(oq_registry_find_batch(registry, "count", &fn, &state, &max_jobs), 0);
    assert_int_equal(max_jobs, 16);

    /* A type without one has none, and keeps its handler. */
    assert_int_equal(oq_registry_find_batch(registry, "single", &fn, &state, &max_jobs), -1);
    oq_handler_fn handler = NULL;
    assert_int_equal(oq_registry_find(registry, "single", &handler, NULL), 0);
    assert_ptr_equal(handler, s_other_handler);

    oq_report_t reports[3];
    memset(reports, 0, sizeof reports);
    fn(NULL, 3, state, reports);
    assert_int_equal(seen, 3);
    assert_int_equal(reports[2].outcome, OQ_OUTCOME_OK);
    oq_registry_destroy(&registry);
}

static void test_registry_refuses_bad_and_taken_types(void **unused)
{
    oq_registry_t *registry = oq_registry_new();
    char too_long[OQ_MAX_NAME_LEN + 2];
    memset(too_long, 'a', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = 0;
    char longest[OQ_MAX_NAME_LEN + 1];
    memset(longest, 'b', sizeof longest - 1);
    longest[sizeof longest - 1] = 0;

    assert_int_equal(oq_registry_add(registry, "", s_other_handler, NULL), -1);
    assert_int_equal(oq_registry_add(registry, "has space", s_other_handler, NULL), -1);
    assert_int_equal(oq_registry_add(registry, "slash/no", s_other_handler, NULL), -1);
    assert_int_equal(oq_registry_add(registry, too_long, s_other_handler, NULL), -1);
    assert_int_equal(oq_registry_add(registry, NULL, s_other_handler, NULL), -1);
    assert_int_equal(oq_registry_add(registry, longest, s_other_handler, NULL), 0);

    assert_int_equal(oq_registry_add(registry, "job", oq_hfix_counting_handler, NULL), 0);
    assert_int_equal(oq_registry_add(registry, "job", s_other_handler, NULL), -1);
    oq_handler_fn fn;
    assert_int_equal(oq_registry_find(registry, "job", &fn, NULL), 0);
    assert_ptr_equal(fn, oq_hfix_counting_handler); /* the first one stays */
    oq_registry_destroy(&registry);
}

static void test_registry_is_bounded(void **unused)
{
    oq_registry_t *registry = oq_registry_new();
    char type[32];
    for (int i = 0; i < OQ_WORKER_MAX_HANDLERS; i++) {
        snprintf(type, sizeof type, "type%d", i);
        assert_int_equal(oq_registry_add(registry, type, s_other_handler, NULL), 0);
    }
    assert_int_equal(oq_registry_add(registry, "one_more", s_other_handler, NULL), -1);
    oq_handler_fn fn;
    snprintf(type, sizeof type, "type%d", OQ_WORKER_MAX_HANDLERS - 1);
    assert_int_equal(oq_registry_find(registry, type, &fn, NULL), 0);
    assert_int_equal(oq_registry_find(registry, "type0", &fn, NULL), 0);
    oq_registry_destroy(&registry);
}

static void test_builtins_are_registered(void **unused)
{
    oq_registry_t *registry = oq_registry_new();
    oq_builtin_register(registry);
    oq_handler_fn fn;
    assert_int_equal(oq_registry_find(registry, "noop", &fn, NULL), 0);
    assert_int_equal(oq_registry_find(registry, "sleep", &fn, NULL), 0);
    assert_int_equal(oq_registry_find(registry, "fail", &fn, NULL), 0);
    assert_int_equal(oq_registry_find(registry, "crash", &fn, NULL), 0);
    /* A user's handler cannot take a built-in's type. */
    assert_int_equal(oq_registry_add(registry, "noop", s_other_handler, NULL), -1);
    oq_registry_destroy(&registry);
}

/* ---- report helpers ------------------------------------------------------ */

static void test_report_helpers(void **unused)
{
    oq_report_t report;
    memset(&report, 0, sizeof report);
    oq_report_retry(&report, "database down: %s (%d)", "ECONNREFUSED", 111);
    assert_int_equal(report.outcome, OQ_OUTCOME_RETRY);
    assert_string_equal(report.error, "database down: ECONNREFUSED (111)");

    oq_report_fail(&report, "bad order id %d", -1);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_int_equal(report.result, OQ_RESULT_NONE);
    assert_string_equal(report.error, "bad order id -1");

    oq_report_review(&report, "carrier: no answer for key %s", "shipment-request:42");
    assert_int_equal(report.outcome, OQ_OUTCOME_REVIEW);
    assert_int_equal(report.result, OQ_RESULT_NONE);
    assert_false(report.has_delay);
    assert_string_equal(report.error, "carrier: no answer for key shipment-request:42");

    oq_report_ok(&report, OQ_RESULT_ALREADY_APPLIED);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(report.result, OQ_RESULT_ALREADY_APPLIED);
    assert_string_equal(report.error, "");
}

static int s_parse_any(const char *value, void *dest, char *why, size_t why_len)
{
    *(const char **)dest = value;
    return 0;
}

/* Handlers' own flags: kept in order, refused when taken, nameless,
   without a destination or beyond the bound. */
static void test_registry_handler_flags(void **unused)
{
    oq_registry_t *r = oq_registry_new();
    const char *url = NULL;
    oq_flag_t flag = {.name = "carrier-url",
                      .env = "ONCEQ_CARRIER_URL",
                      .kind = OQ_FLAG_CUSTOM,
                      .arg = "URL",
                      .parse = s_parse_any,
                      .expected = "a URL",
                      .dest = &url,
                      .help = "the carrier"};
    assert_int_equal(oq_registry_add_flag(r, &flag), 0);
    assert_int_equal(oq_registry_add_flag(r, &flag), -1); /* taken */
    oq_flag_t nameless = flag;
    nameless.name = "";
    assert_int_equal(oq_registry_add_flag(r, &nameless), -1);
    oq_flag_t nowhere = flag;
    nowhere.name = "nowhere";
    nowhere.dest = NULL;
    assert_int_equal(oq_registry_add_flag(r, &nowhere), -1);
    oq_flag_t no_parser = flag;
    no_parser.name = "no-parser";
    no_parser.parse = NULL;
    assert_int_equal(oq_registry_add_flag(r, &no_parser), -1);
    char names[OQ_WORKER_MAX_HANDLER_FLAGS + 1][16];
    int added = 1;
    for (int i = 0; i < OQ_WORKER_MAX_HANDLER_FLAGS; i++) {
        snprintf(names[i], sizeof names[i], "flag-%d", i);
        oq_flag_t more = flag;
        more.name = names[i];
        added += oq_registry_add_flag(r, &more) == 0;
    }
    assert_int_equal(added, OQ_WORKER_MAX_HANDLER_FLAGS);
    oq_registry_destroy(&r);
}

static void test_report_cuts_long_errors_at_a_character(void **unused)
{
    oq_report_t report;
    char text[OQ_MAX_ERROR_LEN * 2];

    /* ASCII: cut at exactly the limit. */
    memset(text, 'x', sizeof text - 1);
    text[sizeof text - 1] = 0;
    oq_report_fail(&report, "%s", text);
    assert_int_equal(strlen(report.error), OQ_MAX_ERROR_LEN);

    /* One byte, then two-byte characters: the limit falls inside one, which
       is dropped whole. */
    text[0] = 'a';
    size_t n = 1;
    while (n + 2 < sizeof text) {
        text[n++] = (char)0xc3;
        text[n++] = (char)0xa9; /* é */
    }
    text[n] = 0;
    oq_report_retry(&report, "%s", text);
    assert_int_equal(strlen(report.error), OQ_MAX_ERROR_LEN - 1);
    assert_int_equal((unsigned char)report.error[OQ_MAX_ERROR_LEN - 2], 0xa9);

    /* A three-byte character that ends right at the limit stays. */
    memset(text, 'x', OQ_MAX_ERROR_LEN - 3);
    memcpy(text + OQ_MAX_ERROR_LEN - 3,
           "\xe2\x82\xac"
           "yyy",
           6); /* € */
    text[OQ_MAX_ERROR_LEN + 3] = 0;
    oq_report_fail(&report, "%s", text);
    assert_int_equal(strlen(report.error), OQ_MAX_ERROR_LEN);
}

/* ---- payload accessors --------------------------------------------------- */

static void test_payload_accessors(void **unused)
{
    s_payload_t p;
    s_payload_begin(&p, 7);
    s_key(&p, "u");
    msgpack_pack_uint64(&p.pk, 5);
    s_key(&p, "i");
    msgpack_pack_int64(&p.pk, -3);
    s_key(&p, "big");
    msgpack_pack_uint64(&p.pk, UINT64_MAX);
    s_key(&p, "s");
    oq_proto_pack_cstr(&p.pk, "hi");
    s_key(&p, "b");
    msgpack_pack_true(&p.pk);
    s_key(&p, "f");
    msgpack_pack_double(&p.pk, 1.5);
    s_key(&p, "n");
    msgpack_pack_nil(&p.pk);
    const oq_job_t *job = s_payload_end(&p);

    uint64_t u = 0;
    int64_t i = 0;
    oq_str_t s = {0};
    bool b = false;
    assert_int_equal(oq_payload_uint(job, "u", &u), 0);
    assert_int_equal(u, 5);
    assert_int_equal(oq_payload_uint(job, "big", &u), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(oq_payload_uint(job, "i", &u), -1); /* negative */
    assert_int_equal(oq_payload_uint(job, "f", &u), -1);
    assert_int_equal(oq_payload_uint(job, "missing", &u), -1);

    assert_int_equal(oq_payload_int(job, "i", &i), 0);
    assert_int_equal(i, -3);
    assert_int_equal(oq_payload_int(job, "u", &i), 0);
    assert_int_equal(i, 5);
    assert_int_equal(oq_payload_int(job, "big", &i), -1); /* past INT64_MAX */
    assert_int_equal(oq_payload_int(job, "s", &i), -1);

    assert_int_equal(oq_payload_str(job, "s", &s), 0);
    assert_true(oq_str_eq(s, "hi"));
    assert_int_equal(oq_payload_str(job, "u", &s), -1);
    assert_int_equal(oq_payload_str(job, "n", &s), -1);

    assert_int_equal(oq_payload_bool(job, "b", &b), 0);
    assert_true(b);
    assert_int_equal(oq_payload_bool(job, "u", &b), -1);
    assert_int_equal(oq_payload_bool(job, "missing", &b), -1);

    assert_non_null(oq_payload_get(job, "n"));
    assert_int_equal(oq_payload_get(job, "f")->type, MSGPACK_OBJECT_FLOAT64);
    assert_null(oq_payload_get(job, "missing"));
    s_payload_free(&p);
}

/* ---- built-in handlers --------------------------------------------------- */

static void test_builtin_noop_and_sleep(void **unused)
{
    oq_registry_t *registry = oq_hfix_builtins();
    oq_report_t report;
    s_payload_t p;

    s_payload_begin(&p, 0);
    s_run(registry, "noop", s_payload_end(&p), &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    s_payload_free(&p);

    s_payload_begin(&p, 1);
    s_key(&p, "ms");
    msgpack_pack_uint32(&p.pk, 30);
    int64_t started = oq_clock_mono_us();
    s_run(registry, "sleep", s_payload_end(&p), &report);
    int64_t slept_ms = (oq_clock_mono_us() - started) / 1000;
    assert_int_equal(report.outcome, OQ_OUTCOME_OK);
    assert_true(slept_ms >= 30);
    s_payload_free(&p);

    /* Missing, of the wrong type, negative, longer than any timeout. */
    for (int k = 0; k < 4; k++) {
        s_payload_begin(&p, k == 0 ? 0 : 1);
        if (k > 0)
            s_key(&p, "ms");
        if (k == 1)
            oq_proto_pack_cstr(&p.pk, "100");
        if (k == 2)
            msgpack_pack_int32(&p.pk, -5);
        if (k == 3)
            msgpack_pack_uint64(&p.pk, (uint64_t)OQ_MAX_TIMEOUT_MS + 1);
        s_run(registry, "sleep", s_payload_end(&p), &report);
        assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
        assert_non_null(strstr(report.error, "\"ms\""));
        s_payload_free(&p);
    }
    oq_registry_destroy(&registry);
}

static void test_builtin_fail(void **unused)
{
    oq_registry_t *registry = oq_hfix_builtins();
    oq_report_t report;
    s_payload_t p;

    s_payload_begin(&p, 0);
    s_run(registry, "fail", s_payload_end(&p), &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_RETRY);
    assert_string_equal(report.error, "failed on purpose");
    s_payload_free(&p);

    s_payload_begin(&p, 2);
    s_key(&p, "permanent");
    msgpack_pack_true(&p.pk);
    s_key(&p, "message");
    oq_proto_pack_cstr(&p.pk, "card declined");
    s_run(registry, "fail", s_payload_end(&p), &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_string_equal(report.error, "card declined");
    s_payload_free(&p);

    s_payload_begin(&p, 2);
    s_key(&p, "permanent");
    msgpack_pack_false(&p.pk);
    s_key(&p, "message");
    oq_proto_pack_cstr(&p.pk, "try later");
    s_run(registry, "fail", s_payload_end(&p), &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_RETRY);
    assert_string_equal(report.error, "try later");
    s_payload_free(&p);

    /* Bad payloads are permanent failures that say which field. */
    s_payload_begin(&p, 1);
    s_key(&p, "permanent");
    oq_proto_pack_cstr(&p.pk, "yes");
    s_run(registry, "fail", s_payload_end(&p), &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_non_null(strstr(report.error, "\"permanent\""));
    s_payload_free(&p);

    s_payload_begin(&p, 1);
    s_key(&p, "message");
    msgpack_pack_uint32(&p.pk, 5);
    s_run(registry, "fail", s_payload_end(&p), &report);
    assert_int_equal(report.outcome, OQ_OUTCOME_FAIL);
    assert_non_null(strstr(report.error, "\"message\""));
    s_payload_free(&p);
    oq_registry_destroy(&registry);
}

static void test_builtin_crash_aborts_the_process(void **unused)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        oq_registry_t *registry = oq_hfix_builtins();
        oq_report_t report;
        s_payload_t p;
        s_payload_begin(&p, 0);
        s_run(registry, "crash", s_payload_end(&p), &report);
        _exit(0); /* not reached */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    assert_false(WCOREDUMP(status));
}

static void test_registry_resources(void **unused)
{
    oq_registry_t *registry = oq_hfix_builtins();
    oq_hfix_resource_t db = {0}, other = {0};
    assert_int_equal(oq_registry_add(registry, "grant_points", oq_hfix_counting_handler, NULL), 0);
    assert_int_equal(
        oq_registry_add(registry, "grant_points_unguarded", oq_hfix_counting_handler, NULL), 0);
    assert_int_equal(oq_registry_add(registry, "mail", oq_hfix_counting_handler, NULL), 0);
    /* Only for a registered type. */
    assert_int_equal(
        oq_registry_set_resource(registry, "nope", oq_hfix_probe, oq_hfix_release, &db), -1);
    assert_int_equal(
        oq_registry_set_resource(registry, "grant_points", oq_hfix_probe, oq_hfix_release, &db), 0);
    assert_int_equal(oq_registry_set_resource(registry, "grant_points_unguarded", oq_hfix_probe,
                                              oq_hfix_release, &db),
                     0);
    assert_int_equal(oq_registry_set_resource(registry, "mail", NULL, oq_hfix_release, &other), 0);

    char reason[128];
    assert_int_equal(oq_registry_probe(registry, "grant_points", reason, sizeof reason), -1);
    assert_string_equal(reason, "cannot connect to the database: connection refused");
    db.up = true;
    assert_int_equal(oq_registry_probe(registry, "grant_points", reason, sizeof reason), 0);
    assert_int_equal(db.probes, 2);
    /* Nothing declared, or no probe: nothing to check. */
    assert_int_equal(oq_registry_probe(registry, "noop", reason, sizeof reason), 1);
    assert_int_equal(oq_registry_probe(registry, "mail", reason, sizeof reason), 1);

    /* The two points types share their connection: released once. */
    assert_int_equal(oq_registry_release_all(registry), 2);
    assert_int_equal(db.releases, 1);
    assert_int_equal(other.releases, 1);
    oq_registry_destroy(&registry);
}

int main(void)
{
    /* The worker logs its decisions; keep only errors. */
    oq_log_init("test_registry");
    oq_log_set_level(OQ_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_handler_flags),
        cmocka_unit_test(test_registry_add_and_find),
        cmocka_unit_test(test_registry_refuses_bad_and_taken_types),
        cmocka_unit_test(test_registry_is_bounded),
        cmocka_unit_test(test_builtins_are_registered),
        cmocka_unit_test(test_report_helpers),
        cmocka_unit_test(test_report_cuts_long_errors_at_a_character),
        cmocka_unit_test(test_payload_accessors),
        cmocka_unit_test(test_builtin_noop_and_sleep),
        cmocka_unit_test(test_builtin_fail),
        cmocka_unit_test(test_builtin_crash_aborts_the_process),
        cmocka_unit_test(test_registry_resources),
        cmocka_unit_test(test_registry_batch_functions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
