/*  test_registry.c: the worker's handler side and its decisions: the
    registry, the report and payload helpers, the built-in handlers, the job
    thread, the protocol state machine (session) and the supervisor's restart
    delay. */
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
#include <zmq.h>

#include "runner.h"
#include "onceq/clock.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "onceq/worker.h"
#include "registry.h"
#include "session.h"
#include "supervisor.h"
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

static int s_calls;

static void s_counting_handler(const oq_job_t *job, void *state, oq_report_t *report)
{
    s_calls++;
    int *seen = state;
    if (seen)
        *seen = (int)job->attempt;
    oq_report_ok(report, OQ_RESULT_APPLIED);
}

static void s_other_handler(const oq_job_t *job, void *state, oq_report_t *report)
{
    oq_report_fail(report, "other");
}

static void s_silent_handler(const oq_job_t *job, void *state, oq_report_t *report)
{
    /* forgets to report */
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
    assert_int_equal(oq_registry_add(registry, "count", s_counting_handler, &seen), 0);
    assert_int_equal(oq_registry_add(registry, "other:v2", s_other_handler, NULL), 0);

    oq_handler_fn fn = NULL;
    void *state = NULL;
    assert_int_equal(oq_registry_find(registry, "count", &fn, &state), 0);
    assert_ptr_equal(fn, s_counting_handler);
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
    assert_int_equal(oq_registry_add(registry, "count", s_counting_handler, &seen), 0);
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

    assert_int_equal(oq_registry_add(registry, "job", s_counting_handler, NULL), 0);
    assert_int_equal(oq_registry_add(registry, "job", s_other_handler, NULL), -1);
    oq_handler_fn fn;
    assert_int_equal(oq_registry_find(registry, "job", &fn, NULL), 0);
    assert_ptr_equal(fn, s_counting_handler); /* the first one stays */
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

static oq_registry_t *s_builtins(void)
{
    oq_registry_t *registry = oq_registry_new();
    oq_builtin_register(registry);
    return registry;
}

static void test_builtin_noop_and_sleep(void **unused)
{
    oq_registry_t *registry = s_builtins();
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
    oq_registry_t *registry = s_builtins();
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
        oq_registry_t *registry = s_builtins();
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

/* ---- runner -------------------------------------------------------------- */

static void s_job_msg(oq_job_msg_t *job, uint64_t id, const char *type, msgpack_sbuffer *payload)
{
    memset(job, 0, sizeof *job);
    job->id = id;
    job->attempt = 2;
    job->type = oq_str(type);
    job->queue = oq_str("default");
    job->payload = (const uint8_t *)payload->data;
    job->payload_len = payload->size;
}

/* Run one job through the runner, as the worker does. */
static void s_run_one(const oq_registry_t *registry, const oq_job_msg_t *job, oq_job_done_t *done)
{
    const oq_job_msg_t *jobs[] = {job};
    oq_runner_run(registry, jobs, 1, NULL, done);
}

/* A payload of {"ms": ms}: what the builtin sleep handler takes. */
static void s_ms_payload(msgpack_sbuffer *payload, uint32_t ms)
{
    msgpack_sbuffer_init(payload);
    msgpack_packer pk;
    msgpack_packer_init(&pk, payload, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    oq_proto_pack_cstr(&pk, "ms");
    msgpack_pack_uint32(&pk, ms);
}

/* A batch function that takes 20 ms for the whole batch. */
static void s_batch_nap(const oq_job_t *const *jobs, size_t count, void *state,
                        oq_report_t *reports)
{
    (void)jobs;
    (void)state;
    usleep(20000);
    for (size_t i = 0; i < count; i++)
        oq_report_ok(&reports[i], OQ_RESULT_APPLIED);
}

static void test_runner_reports_the_time_of_the_call(void **unused)
{
    (void)unused;
    oq_registry_t *registry = s_builtins();
    assert_int_equal(oq_registry_set_batch(registry, "sleep", s_batch_nap, 8), 0);
    msgpack_sbuffer map, not_map;
    s_ms_payload(&map, 20);
    msgpack_sbuffer_init(&not_map);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &not_map, msgpack_sbuffer_write);
    msgpack_pack_uint32(&pk, 7);

    /* A batch of three in one 20 ms call: each reports the whole call,
       which the auto prefetch charges over a full batch. */
    oq_job_msg_t msgs[3];
    const oq_job_msg_t *jobs[3];
    oq_job_done_t done[3];
    for (size_t i = 0; i < 3; i++) {
        s_job_msg(&msgs[i], 30 + i, "sleep", &map);
        jobs[i] = &msgs[i];
    }
    oq_runner_run(registry, jobs, 3, NULL, done);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(done[i].report.outcome, OQ_OUTCOME_OK);
        assert_true(done[i].call_us >= 20000);
        assert_int_equal(done[i].call_us, done[0].call_us);
    }

    /* Two of three payloads do not decode: the third runs alone in its
       handler (a 20 ms sleep), and its call is that run; the two that
       never ran report none. */
    s_job_msg(&msgs[0], 40, "sleep", &not_map);
    s_job_msg(&msgs[1], 41, "sleep", &map);
    s_job_msg(&msgs[2], 42, "sleep", &not_map);
    oq_runner_run(registry, jobs, 3, NULL, done);
    assert_int_equal(done[0].report.outcome, OQ_OUTCOME_FAIL);
    assert_int_equal(done[0].call_us, 0);
    assert_int_equal(done[2].call_us, 0);
    assert_int_equal(done[1].report.outcome, OQ_OUTCOME_OK);
    assert_true(done[1].call_us >= 20000);
    assert_int_equal(done[1].call_us / 1000, done[1].elapsed_ms);
    msgpack_sbuffer_destroy(&map);
    msgpack_sbuffer_destroy(&not_map);
    oq_registry_destroy(&registry);
}

static void test_runner_runs_handlers(void **unused)
{
    oq_registry_t *registry = s_builtins();
    int seen = 0;
    assert_int_equal(oq_registry_add(registry, "count", s_counting_handler, &seen), 0);
    assert_int_equal(oq_registry_add(registry, "silent", s_silent_handler, NULL), 0);

    msgpack_sbuffer payload;
    s_ms_payload(&payload, 20);

    oq_job_done_t done;
    oq_job_msg_t job;

    s_job_msg(&job, 11, "sleep", &payload);
    s_run_one(registry, &job, &done);
    assert_int_equal(done.id, 11);
    assert_int_equal(done.attempt, 2);
    assert_int_equal(done.report.outcome, OQ_OUTCOME_OK);
    assert_true(done.elapsed_ms >= 20);

    s_calls = 0;
    s_job_msg(&job, 12, "count", &payload);
    s_run_one(registry, &job, &done);
    assert_int_equal(done.id, 12);
    assert_int_equal(done.report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(done.report.result, OQ_RESULT_APPLIED);

    s_job_msg(&job, 13, "no_such_type", &payload);
    s_run_one(registry, &job, &done);
    assert_int_equal(done.id, 13);
    /* Handed back, no try used: a worker that handles the type runs it. */
    assert_int_equal(done.report.outcome, OQ_OUTCOME_RETURN);
    assert_false(done.report.has_delay);
    assert_string_equal(done.report.error, "no handler for job type no_such_type");

    s_job_msg(&job, 14, "silent", &payload);
    s_run_one(registry, &job, &done);
    assert_int_equal(done.report.outcome, OQ_OUTCOME_FAIL);
    assert_non_null(strstr(done.report.error, "without reporting an outcome"));

    /* A payload that is not a map fails, naming it. */
    static const uint8_t not_a_map = 0x01;
    job.id = 15;
    job.payload = &not_a_map;
    job.payload_len = 1;
    s_run_one(registry, &job, &done);
    assert_int_equal(done.id, 15);
    assert_int_equal(done.report.outcome, OQ_OUTCOME_FAIL);
    assert_string_equal(done.report.error, "the job's payload is not a msgpack map");

    oq_registry_destroy(&registry);
    assert_int_equal(s_calls, 1);
    assert_int_equal(seen, 2);
    msgpack_sbuffer_destroy(&payload);
}

/* A resource a test controls: whether it answers, and what was asked of it. */
typedef struct {
    bool up;
    int probes;
    int releases;
} s_resource_t;

static int s_probe(void *ctx, char *reason, size_t reason_len)
{
    s_resource_t *r = ctx;
    r->probes++;
    if (r->up)
        return 0;
    snprintf(reason, reason_len, "cannot connect to the database: connection refused");
    return -1;
}

static void s_release(void *ctx)
{
    ((s_resource_t *)ctx)->releases++;
}

static void test_registry_resources(void **unused)
{
    oq_registry_t *registry = s_builtins();
    s_resource_t db = {0}, other = {0};
    assert_int_equal(oq_registry_add(registry, "grant_points", s_counting_handler, NULL), 0);
    assert_int_equal(oq_registry_add(registry, "grant_points_unguarded", s_counting_handler, NULL),
                     0);
    assert_int_equal(oq_registry_add(registry, "mail", s_counting_handler, NULL), 0);
    /* Only for a registered type. */
    assert_int_equal(oq_registry_set_resource(registry, "nope", s_probe, s_release, &db), -1);
    assert_int_equal(oq_registry_set_resource(registry, "grant_points", s_probe, s_release, &db),
                     0);
    assert_int_equal(
        oq_registry_set_resource(registry, "grant_points_unguarded", s_probe, s_release, &db), 0);
    assert_int_equal(oq_registry_set_resource(registry, "mail", NULL, s_release, &other), 0);

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

/* A probe is the declared resource's answer, timed. */
static void test_runner_probes(void **unused)
{
    oq_registry_t *registry = s_builtins();
    s_resource_t db = {0};
    assert_int_equal(oq_registry_add(registry, "grant_points", s_counting_handler, NULL), 0);
    assert_int_equal(oq_registry_set_resource(registry, "grant_points", s_probe, s_release, &db),
                     0);
    oq_probe_done_t probed;
    oq_runner_probe(registry, "grant_points", &probed);
    assert_int_equal(probed.result, -1);
    assert_string_equal(probed.reason, "cannot connect to the database: connection refused");
    oq_runner_probe(registry, "noop", &probed);
    assert_int_equal(probed.result, 1);
    db.up = true;
    oq_runner_probe(registry, "grant_points", &probed);
    assert_int_equal(probed.result, 0);
    assert_int_equal(db.probes, 2);
    oq_registry_destroy(&registry);
}

/* ---- session ------------------------------------------------------------- */

#define S_HB 100 /* ms: heartbeat the tests' broker announces */

static oq_action_t s_next(oq_session_t *session, oq_action_kind_t kind)
{
    oq_action_t action;
    assert_int_equal(oq_session_next(session, &action), 0);
    assert_int_equal(action.kind, kind);
    return action;
}

static oq_action_t s_next_send(oq_session_t *session, oq_cmd_t cmd)
{
    oq_action_t action = s_next(session, OQ_ACTION_SEND);
    assert_string_equal(oq_proto_cmd_name(action.cmd), oq_proto_cmd_name(cmd));
    return action;
}

static void s_no_action(oq_session_t *session)
{
    oq_action_t action;
    assert_int_equal(oq_session_next(session, &action), -1);
}

static void s_receive(oq_session_t *session, oq_cmd_t cmd, int64_t now)
{
    oq_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.cmd = cmd;
    msg.heartbeat_ms = S_HB;
    msg.liveness = 3;
    msg.err_text = oq_str("unknown worker");
    oq_session_on_message(session, &msg, now);
}

static void s_deliver(oq_session_t *session, uint64_t id, int64_t timeout_ms, int64_t now)
{
    oq_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.cmd = OQ_CMD_JOB;
    msg.job.id = id;
    msg.job.attempt = 1;
    msg.job.type = oq_str("sleep");
    msg.job.has_timeout = true;
    msg.job.timeout_ms = timeout_ms;
    oq_session_on_message(session, &msg, now);
}

static void s_finish(oq_session_t *session, uint64_t id, oq_outcome_t outcome, int64_t now)
{
    oq_job_done_t done;
    memset(&done, 0, sizeof done);
    done.id = id;
    done.attempt = 1;
    done.elapsed_ms = 5;
    done.report.outcome = outcome;
    if (outcome != OQ_OUTCOME_OK)
        snprintf(done.report.error, sizeof done.report.error, "it broke");
    oq_session_on_done(session, &done, now);
}

/* A session that connected at 0 and was welcomed at 1. */
static oq_session_t *s_session_up(void)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_UP);
    return session;
}

/* A delivery with a lease token, as a broker that fences acks sends it. */
static void s_deliver_leased(oq_session_t *session, uint64_t id, uint64_t lease, int64_t timeout_ms,
                             int64_t now)
{
    oq_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.cmd = OQ_CMD_JOB;
    msg.job.id = id;
    msg.job.attempt = 1;
    msg.job.type = oq_str("sleep");
    msg.job.has_timeout = true;
    msg.job.timeout_ms = timeout_ms;
    msg.job.lease = lease;
    msg.job.has_lease = true;
    oq_session_on_message(session, &msg, now);
}

static void test_session_ack_and_resend_echo_the_lease(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver_leased(session, 21, 0xfeedface12345678ULL, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish(session, 21, OQ_OUTCOME_OK, 20);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_true(ack.ack.has_lease);
    assert_true(ack.ack.lease == 0xfeedface12345678ULL);
    /* The link drops before anything is heard: the resent ack, on a fresh
       socket (a new identity), still carries the token. */
    oq_session_on_send_error(session, 30);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_on_tick(session, 30 + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    s_next_send(session, OQ_CMD_READY);
    ack = s_next_send(session, OQ_CMD_ACK);
    assert_true(ack.ack.has_lease);
    assert_true(ack.ack.lease == 0xfeedface12345678ULL);
    oq_session_destroy(&session);
}

static void test_session_touch_restarts_the_watchdog(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver_leased(session, 22, 77, 1000, 100);
    s_next(session, OQ_ACTION_START_JOB);
    assert_int_equal(oq_session_deadline(session), S_HB);
    /* Touches come faster than the limit: only the first one counts. */
    assert_true(oq_session_on_touch(session, 22, 100 + OQ_WORKER_TOUCH_MIN_MS));
    oq_action_t touch = s_next_send(session, OQ_CMD_TOUCH);
    assert_int_equal(touch.ack.id, 22);
    assert_int_equal(touch.ack.attempt, 1);
    assert_true(touch.ack.lease == 77);
    assert_false(oq_session_on_touch(session, 22, 100 + OQ_WORKER_TOUCH_MIN_MS + 1));
    assert_false(oq_session_on_touch(session, 99, 100 + 3 * OQ_WORKER_TOUCH_MIN_MS)); /* not its */
    s_no_action(session);
    /* Touching every 900 ms keeps a 1 s job alive for 5 s. */
    int64_t t = 100 + OQ_WORKER_TOUCH_MIN_MS + 900;
    for (; t < 5000; t += 900) {
        s_receive(session, OQ_CMD_HEARTBEAT, t);
        oq_session_on_tick(session, t);
        assert_true(oq_session_on_touch(session, 22, t));
        oq_action_t action;
        while (oq_session_next(session, &action) == 0)
            assert_int_equal(action.kind, OQ_ACTION_SEND); /* touches and heartbeats only */
        assert_int_equal(oq_session_deadline(session) <= t + 1000, true);
    }
    assert_true(oq_session_busy(session));
    /* Without touches the watchdog fires a timeout after the last one. */
    int64_t last = t - 900;
    s_receive(session, OQ_CMD_HEARTBEAT, last + 999);
    oq_session_on_tick(session, last + 999);
    oq_action_t action;
    while (oq_session_next(session, &action) == 0)
        assert_false(action.kind == OQ_ACTION_SEND && action.cmd == OQ_CMD_ACK);
    s_receive(session, OQ_CMD_HEARTBEAT, last + 1000);
    oq_session_on_tick(session, last + 1000);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_TIMEOUT);
    oq_session_destroy(&session);
}

static void test_session_touch_needs_a_link(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver_leased(session, 23, 5, 1000, 100);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_send_error(session, 200);
    s_next(session, OQ_ACTION_CLOSE);
    /* The broker would not hear it: the watchdog must not move either. */
    assert_false(oq_session_on_touch(session, 23, 600));
    s_no_action(session);
    assert_int_equal(oq_session_deadline(session), 200 + OQ_RECONNECT_MIN_MS);
    oq_session_on_tick(session, 1100);
    s_next(session, OQ_ACTION_CONNECT);
    oq_session_destroy(&session);
}

static void test_session_release_and_return_carry_their_delay(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver_leased(session, 24, 9, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    oq_job_done_t done;
    memset(&done, 0, sizeof done);
    done.id = 24;
    done.attempt = 1;
    oq_report_release(&done.report, 1500, "busy %d", 1);
    oq_session_on_done(session, &done, 20);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_RETRY);
    assert_true(ack.ack.has_delay);
    assert_int_equal(ack.ack.delay_ms, 1500);
    assert_int_equal(ack.ack.credit, 1);

    s_receive(session, OQ_CMD_HEARTBEAT, 30);
    s_deliver_leased(session, 25, 10, 60000, 40);
    s_next(session, OQ_ACTION_START_JOB);
    memset(&done, 0, sizeof done);
    done.id = 25;
    done.attempt = 1;
    oq_report_return(&done.report, 0, "no handler for job type %s", "x");
    oq_session_on_done(session, &done, 50);
    ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_RETURN);
    assert_false(ack.ack.has_delay);
    assert_true(ack.ack.lease == 10);
    oq_session_destroy(&session);
}

/* The next action that is not a heartbeat (a test spanning seconds keeps
   the link up by hearing from the broker; the session heartbeats meanwhile). */
static oq_action_t s_next_real(oq_session_t *session)
{
    oq_action_t action;
    do
        assert_int_equal(oq_session_next(session, &action), 0);
    while (action.kind == OQ_ACTION_SEND && action.cmd == OQ_CMD_HEARTBEAT);
    return action;
}

static void s_no_real_action(oq_session_t *session)
{
    oq_action_t action;
    while (oq_session_next(session, &action) == 0)
        assert_true(action.kind == OQ_ACTION_SEND && action.cmd == OQ_CMD_HEARTBEAT);
}

/* Time passes with the broker heard from: a tick at now. */
static void s_tick_alive(oq_session_t *session, int64_t now)
{
    s_receive(session, OQ_CMD_HEARTBEAT, now);
    oq_session_on_tick(session, now);
}

/* Tick at each deadline, the broker heard from, until a probe is asked
   for; returns when (heartbeats come due in between). */
static int64_t s_until_probe(oq_session_t *session, const char *type)
{
    for (int i = 0; i < 1000; i++) {
        int64_t now = oq_session_deadline(session);
        s_tick_alive(session, now);
        oq_action_t action;
        while (oq_session_next(session, &action) == 0) {
            if (action.kind == OQ_ACTION_PROBE) {
                assert_string_equal(action.type, type);
                s_no_real_action(session);
                return now;
            }
            assert_true(action.kind == OQ_ACTION_SEND && action.cmd == OQ_CMD_HEARTBEAT);
        }
    }
    fail_msg("no probe came");
    return -1;
}

static oq_probe_done_t s_probed(int result, const char *reason)
{
    oq_probe_done_t probed;
    memset(&probed, 0, sizeof probed);
    probed.result = result;
    snprintf(probed.reason, sizeof probed.reason, "%s", reason);
    return probed;
}

/* The database is down: the job goes back without a try and without
   credit, the broker hears the worker is paused and why, probes come after
   a doubling, jittered pause, a job sent meanwhile is handed back too, and
   once a probe answers the worker says ready and gives its credit again. */
static void test_session_unavailable_pauses_and_probes(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver_leased(session, 41, 99, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    oq_job_done_t done;
    memset(&done, 0, sizeof done);
    done.id = 41;
    done.attempt = 1;
    oq_report_unavailable(&done.report, "sleep: database unavailable (connection): refused");
    oq_session_on_done(session, &done, 20);
    oq_action_t status = s_next_send(session, OQ_CMD_STATUS);
    assert_int_equal(status.state, OQ_STATUS_UNAVAILABLE);
    assert_int_equal(status.state_ms, 0);
    assert_string_equal(status.error, "sleep: database unavailable (connection): refused");
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_UNAVAILABLE);
    assert_int_equal(ack.ack.credit, 0);
    assert_true(ack.ack.lease == 99);
    s_no_action(session);
    assert_true(oq_session_unavailable(session));

    /* The first probe within [min/2, min] of the pause. */
    int64_t at = oq_session_deadline(session);
    assert_true(at >= 20 + OQ_WORKER_PROBE_MIN_MS / 2 && at <= 20 + OQ_WORKER_PROBE_MIN_MS);
    oq_session_on_tick(session, at - 1);
    s_no_real_action(session);
    s_tick_alive(session, at);
    oq_action_t probe = s_next_real(session);
    assert_int_equal(probe.kind, OQ_ACTION_PROBE);
    assert_string_equal(probe.type, "sleep");
    s_no_real_action(session);

    /* A job sent while paused (a broker's credit race) goes back, no try. */
    s_deliver_leased(session, 42, 7, 60000, at + 1);
    ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_UNAVAILABLE);
    assert_int_equal(ack.ack.credit, 0);
    assert_non_null(strstr(ack.ack.error.ptr, "worker is paused")); /* NUL-terminated copy */
    s_no_action(session);

    /* The probe fails: the broker hears the new reason, the pause doubles. */
    oq_probe_done_t probed = s_probed(-1, "cannot connect to the database: shutting down");
    int64_t now = at + 2;
    oq_session_on_probed(session, &probed, now);
    status = s_next_send(session, OQ_CMD_STATUS);
    assert_int_equal(status.state, OQ_STATUS_UNAVAILABLE);
    assert_int_equal(status.state_ms, now - 20);
    assert_string_equal(status.error, "cannot connect to the database: shutting down");
    s_no_action(session);

    /* The next probe comes within [2 min / 2, 2 min]; after many failures
       the pause stays within [max / 2, max]. */
    at = s_until_probe(session, "sleep");
    assert_true(at >= now + OQ_WORKER_PROBE_MIN_MS && at <= now + 2 * OQ_WORKER_PROBE_MIN_MS);
    for (int i = 0; i < 20; i++) {
        now = at;
        oq_session_on_probed(session, &probed, now);
        s_next_send(session, OQ_CMD_STATUS);
        s_no_real_action(session);
        at = s_until_probe(session, "sleep");
        assert_true(at - now <= OQ_WORKER_PROBE_MAX_MS);
    }
    assert_true(at - now >= OQ_WORKER_PROBE_MAX_MS / 2);

    /* It answers: ready, and the credit comes back. */
    now = at;
    probed = s_probed(0, "");
    oq_session_on_probed(session, &probed, now + 3);
    status = s_next_send(session, OQ_CMD_STATUS);
    assert_int_equal(status.state, OQ_STATUS_READY);
    assert_string_equal(status.error, "");
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    assert_false(oq_session_unavailable(session));
    s_deliver(session, 43, 60000, now + 4);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_destroy(&session);
}

/* A broker that does not know the worker (a fresh socket) hears at once
   that it is paused, and gets no credit from it. */
static void test_session_paused_worker_registers_paused(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 51, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish(session, 51, OQ_OUTCOME_UNAVAILABLE, 20);
    s_next_send(session, OQ_CMD_STATUS);
    s_next_send(session, OQ_CMD_ACK);
    s_no_action(session);
    /* The broker asks for a new ready (it restarted). */
    s_receive(session, OQ_CMD_RECONNECT, 30);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    assert_int_equal(s_next_send(session, OQ_CMD_STATUS).state, OQ_STATUS_UNAVAILABLE);
    s_no_action(session);
    oq_session_destroy(&session);
}

/* SIGTERM during a probe: the probe finishes (it is bounded), then exit. */
static void test_session_sigterm_while_probing(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 61, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish(session, 61, OQ_OUTCOME_UNAVAILABLE, 20);
    s_next_send(session, OQ_CMD_STATUS);
    s_next_send(session, OQ_CMD_ACK);
    int64_t at = s_until_probe(session, "sleep");
    oq_session_on_signal(session, at + 1);
    s_next_send(session, OQ_CMD_DRAIN);
    s_no_action(session);
    oq_probe_done_t probed = s_probed(-1, "still down");
    oq_session_on_probed(session, &probed, at + 2);
    s_next_send(session, OQ_CMD_STATUS);
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    oq_session_destroy(&session);
}

/* After idle_release_ms without a job, the handlers release their
   connections, once per idle period; a worker that never ran a job has
   nothing to release. */
static void test_session_idle_release(void **unused)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3, .idle_release_ms = 1000};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    s_next_send(session, OQ_CMD_READY);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_tick_alive(session, 5000);
    s_no_real_action(session);

    s_deliver(session, 71, 60000, 5000);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish(session, 71, OQ_OUTCOME_OK, 5100);
    s_next_send(session, OQ_CMD_ACK);
    assert_true(oq_session_deadline(session) <= 5100 + 1000);
    s_tick_alive(session, 6099);
    s_no_real_action(session);
    s_tick_alive(session, 6100);
    assert_int_equal(s_next_real(session).kind, OQ_ACTION_RELEASE);
    s_no_real_action(session);
    s_tick_alive(session, 9000);
    s_no_real_action(session);
    oq_session_destroy(&session);
}

static void test_session_registers_and_heartbeats(void **unused)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3};
    oq_session_t *session = oq_session_new(&config, 0);
    assert_int_equal(oq_session_link(session), OQ_LINK_DOWN);
    assert_int_equal(oq_session_deadline(session), 0); /* connect at once */
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_REGISTERING);

    /* No heartbeat before welcome: the broker does not know us yet. */
    oq_session_on_tick(session, 1500);
    s_no_action(session);

    /* Welcome: its heartbeat replaces ours. */
    s_receive(session, OQ_CMD_WELCOME, 1600);
    assert_int_equal(oq_session_link(session), OQ_LINK_UP);
    assert_int_equal(oq_session_heartbeat_ms(session), S_HB);
    assert_int_equal(oq_session_deadline(session), S_HB); /* the ready at 0 was the last send */
    oq_session_on_tick(session, 1600);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    oq_session_on_tick(session, 1600 + S_HB - 1);
    s_no_action(session);
    s_receive(session, OQ_CMD_HEARTBEAT, 1650);
    oq_session_on_tick(session, 1600 + S_HB);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    oq_session_destroy(&session);
    assert_null(session);
}

static void test_session_silent_broker_reconnects_with_backoff(void **unused)
{
    oq_session_t *session = s_session_up();
    int64_t now = 1;
    int64_t expected_ms = OQ_RECONNECT_MIN_MS;
    for (int round = 0; round < 8; round++) {
        /* Keep heartbeating: sending is not hearing. */
        for (int64_t t = now + S_HB; t < now + 3 * S_HB; t += S_HB) {
            oq_session_on_tick(session, t);
            if (oq_session_link(session) == OQ_LINK_UP)
                s_next_send(session, OQ_CMD_HEARTBEAT);
            s_no_action(session);
        }
        now += 3 * S_HB;
        oq_session_on_tick(session, now);
        s_next(session, OQ_ACTION_CLOSE);
        s_no_action(session);
        assert_int_equal(oq_session_link(session), OQ_LINK_DOWN);
        assert_int_equal(oq_session_deadline(session), now + expected_ms);
        oq_session_on_tick(session, now + expected_ms - 1);
        s_no_action(session);
        now += expected_ms;
        oq_session_on_tick(session, now);
        s_next(session, OQ_ACTION_CONNECT); /* a fresh socket: a new identity */
        assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
        s_no_action(session);
        expected_ms *= 2;
        if (expected_ms > OQ_RECONNECT_MAX_MS)
            expected_ms = OQ_RECONNECT_MAX_MS;
    }
    assert_int_equal(expected_ms, OQ_RECONNECT_MAX_MS);

    /* A welcome resets the backoff. */
    s_receive(session, OQ_CMD_WELCOME, now);
    now += 3 * S_HB;
    oq_session_on_tick(session, now);
    s_next(session, OQ_ACTION_CLOSE);
    assert_int_equal(oq_session_deadline(session), now + OQ_RECONNECT_MIN_MS);
    oq_session_destroy(&session);
}

static void test_session_job_is_acked_with_credit(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 7, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_no_action(session);
    assert_true(oq_session_busy(session));

    s_finish(session, 7, OQ_OUTCOME_RETRY, 20);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    s_no_action(session);
    assert_int_equal(ack.ack.id, 7);
    assert_int_equal(ack.ack.attempt, 1);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_RETRY);
    assert_int_equal(ack.ack.credit, 1);
    assert_true(oq_str_eq(ack.ack.error, "it broke"));
    assert_false(oq_session_busy(session));
    oq_session_destroy(&session);
}

static void test_session_job_done_while_down_is_acked_after_reconnect(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 8, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_tick(session, 10 + 3 * S_HB - 1);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    oq_session_on_tick(session, 10 + 3 * S_HB); /* silent since 10 */
    s_next(session, OQ_ACTION_CLOSE);
    s_no_action(session);

    s_finish(session, 8, OQ_OUTCOME_OK, 400);
    s_no_action(session); /* no link: owed */

    oq_session_on_tick(session, 10 + 3 * S_HB + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    /* The ack gives the credit back; the ready must not add a second. */
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 8);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_OK);
    assert_int_equal(ack.ack.credit, 1);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_unconfirmed_ack_is_sent_again(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 9, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish(session, 9, OQ_OUTCOME_OK, 20);
    s_next_send(session, OQ_CMD_ACK);

    /* Nothing heard since the ack: it may have died with the socket. */
    oq_session_on_tick(session, 10 + 3 * S_HB);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_on_tick(session, 10 + 3 * S_HB + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 9);
    s_no_action(session);

    /* Heard after it: settled, not sent again on the next link. */
    int64_t now = 10 + 3 * S_HB + OQ_RECONNECT_MIN_MS;
    s_receive(session, OQ_CMD_WELCOME, now + 1);
    now += 1 + 3 * S_HB;
    oq_session_on_tick(session, now);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_on_tick(session, now + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_reconnect_offers_free_credit_once(void **unused)
{
    oq_session_t *session = s_session_up();
    /* Idle: one credit. */
    s_receive(session, OQ_CMD_RECONNECT, 10);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_REGISTERING);
    /* A second reconnect before welcome answers something sent before that
       ready: another ready would double the credit. */
    s_receive(session, OQ_CMD_RECONNECT, 11);
    s_no_action(session);
    s_receive(session, OQ_CMD_WELCOME, 12);
    assert_int_equal(oq_session_link(session), OQ_LINK_UP);

    /* Busy: no credit now, the ack brings it. */
    s_deliver(session, 10, 60000, 20);
    s_next(session, OQ_ACTION_START_JOB);
    s_receive(session, OQ_CMD_RECONNECT, 30);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    s_receive(session, OQ_CMD_WELCOME, 31);
    s_finish(session, 10, OQ_OUTCOME_OK, 40);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_watchdog_reports_timeout_and_exits(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 11, 1000, 100);
    s_next(session, OQ_ACTION_START_JOB);
    assert_int_equal(oq_session_deadline(session), S_HB); /* a heartbeat first */
    for (int64_t t = 100; t < 1100; t += S_HB) {
        s_receive(session, OQ_CMD_HEARTBEAT, t);
        oq_session_on_tick(session, t + S_HB - 1);
        oq_action_t action;
        while (oq_session_next(session, &action) == 0)
            assert_int_equal(action.kind, OQ_ACTION_SEND); /* heartbeats only */
    }
    oq_session_on_tick(session, 1100);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 11);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_TIMEOUT);
    assert_int_equal(ack.ack.credit, 0);
    assert_true(oq_str_eq(ack.ack.error, "handler ran past its timeout of 1 s"));
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, OQ_EXIT_TIMEOUT);
    s_no_action(session);
    assert_true(oq_session_exiting(session));
    /* Nothing happens after the exit. */
    s_finish(session, 11, OQ_OUTCOME_OK, 1200);
    oq_session_on_tick(session, 99999);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_stall_is_not_silence_nor_handler_time(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 12, 2000, 10);
    s_next(session, OQ_ACTION_START_JOB);

    /* SIGSTOP at 50, SIGCONT at 10050: the worker wakes 10 s late. */
    oq_session_on_stall(session, 10000, 10050);
    oq_session_on_tick(session, 10050);
    s_next_send(session, OQ_CMD_HEARTBEAT); /* overdue, and it is all */
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_UP);
    assert_true(oq_session_busy(session));

    /* The handler then finishes and its ack goes out, lease or no lease. */
    s_finish(session, 12, OQ_OUTCOME_OK, 10060);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.outcome, OQ_OUTCOME_OK);
    s_no_action(session);

    /* The time limit still holds for running time. */
    s_deliver(session, 13, 2000, 10100);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_stall(session, 500, 10700);
    s_receive(session, OQ_CMD_HEARTBEAT, 12599);
    oq_session_on_tick(session, 12599);
    oq_action_t action;
    while (oq_session_next(session, &action) == 0)
        assert_int_equal(action.kind, OQ_ACTION_SEND);
    oq_session_on_tick(session, 12600);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.outcome, OQ_OUTCOME_TIMEOUT);
    oq_session_destroy(&session);
}

static void test_session_stall_extends_only_what_it_stalled(void **unused)
{
    oq_session_t *session = s_session_up();
    /* A job that arrived after the stall, in the same turn, was not
       stalled: its time limit starts when it arrived. */
    s_deliver(session, 20, 1000, 5000);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_stall(session, 4000, 5000);
    s_receive(session, OQ_CMD_HEARTBEAT, 5900);
    oq_session_on_tick(session, 5999);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    oq_session_on_tick(session, 6000);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.outcome, OQ_OUTCOME_TIMEOUT);
    oq_session_destroy(&session);

    /* Silence since 1, a stall of 200 ms before 250: silent since 201. */
    session = s_session_up();
    oq_session_on_stall(session, 200, 250);
    oq_session_on_tick(session, 201 + 3 * S_HB - 1);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    oq_session_on_tick(session, 201 + 3 * S_HB);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_destroy(&session);

    /* A stall longer than the time since the last tick moves nothing
       past now. */
    session = s_session_up();
    oq_session_on_stall(session, 5000, 250);
    oq_session_on_tick(session, 250 + 3 * S_HB - 1);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    oq_session_on_tick(session, 250 + 3 * S_HB);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_destroy(&session);
}

static void test_session_sigterm_when_idle(void **unused)
{
    oq_session_t *session = s_session_up();
    oq_session_on_signal(session, 10);
    s_next_send(session, OQ_CMD_DRAIN);
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_sigterm_finishes_the_job_first(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 14, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_signal(session, 20);
    s_next_send(session, OQ_CMD_DRAIN);
    s_no_action(session);
    oq_session_on_signal(session, 21); /* a second signal changes nothing */
    s_no_action(session);

    /* A delivery the broker sent before it read the drain is handed back. */
    s_deliver(session, 15, 60000, 25);
    oq_action_t refused = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(refused.ack.id, 15);
    assert_int_equal(refused.ack.outcome, OQ_OUTCOME_RETRY);
    assert_int_equal(refused.ack.credit, 0);
    s_no_action(session);

    s_finish(session, 14, OQ_OUTCOME_OK, 30);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 14);
    assert_int_equal(ack.ack.credit, 0); /* stopping: no new job */
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_sigterm_without_a_link(void **unused)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3};
    /* Idle and disconnected: nothing to tell anyone. */
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_on_signal(session, 0);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    s_no_action(session);
    oq_session_destroy(&session);

    /* Busy, and the link is lost: the ack still gets its chance. */
    session = s_session_up();
    s_deliver(session, 16, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_signal(session, 20);
    s_next_send(session, OQ_CMD_DRAIN);
    oq_session_on_tick(session, 10 + 3 * S_HB);
    s_next(session, OQ_ACTION_CLOSE);
    s_finish(session, 16, OQ_OUTCOME_OK, 320);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 16);
    assert_int_equal(ack.ack.credit, 0);
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_refuses_a_second_job(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 17, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver(session, 18, 60000, 11);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 18);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_RETRY);
    assert_int_equal(ack.ack.credit, 0);
    s_no_action(session);
    assert_true(oq_session_busy(session));
    s_finish(session, 17, OQ_OUTCOME_OK, 20);
    ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 17);
    assert_int_equal(ack.ack.credit, 1);
    oq_session_destroy(&session);
}

static void test_session_bad_job_fails_and_returns_credit(void **unused)
{
    oq_session_t *session = s_session_up();
    oq_session_on_bad_job(session, 19, 2, "field \"type\" must be a string", 10);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 19);
    assert_int_equal(ack.ack.attempt, 2);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_FAIL);
    assert_int_equal(ack.ack.credit, 1);
    assert_non_null(strstr(ack.ack.error.ptr, "\"type\""));
    s_no_action(session);
    assert_false(oq_session_busy(session));
    oq_session_destroy(&session);
}

static void test_session_any_message_is_a_sign_of_life(void **unused)
{
    oq_session_t *session = s_session_up();
    s_receive(session, OQ_CMD_ERROR, 250); /* logged, nothing sent */
    s_receive(session, OQ_CMD_PONG, 260);  /* unexpected, ignored */
    oq_session_on_garbage(session, 280);   /* did not decode */
    s_no_action(session);
    oq_session_on_tick(session, 280 + 3 * S_HB - 1);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_UP);
    oq_session_on_tick(session, 280 + 3 * S_HB);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_destroy(&session);
}

static void test_session_send_error_drops_the_link(void **unused)
{
    oq_session_t *session = s_session_up();
    oq_session_on_send_error(session, 10);
    s_next(session, OQ_ACTION_CLOSE);
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_DOWN);
    assert_int_equal(oq_session_deadline(session), 10 + OQ_RECONNECT_MIN_MS);
    oq_session_destroy(&session);
}

/* ---- supervisor ---------------------------------------------------------- */

/* ---- session: prefetch ---------------------------------------------------- */

/* A session with prefetch p, connected at 0 and welcomed at 1: its ready
   offers all p. */
static oq_session_t *s_session_prefetch(uint32_t prefetch)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3, .prefetch = prefetch};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, prefetch);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_no_action(session);
    return session;
}

static void test_session_prefetch_holds_then_starts_in_order(void **unused)
{
    oq_session_t *session = s_session_prefetch(3);
    s_deliver_leased(session, 1, 11, 60000, 10);
    assert_false(s_next(session, OQ_ACTION_START_JOB).held);
    s_deliver_leased(session, 2, 12, 60000, 11);
    s_next(session, OQ_ACTION_HOLD);
    s_deliver_leased(session, 3, 13, 60000, 12);
    s_next(session, OQ_ACTION_HOLD);
    s_no_action(session);
    assert_int_equal(oq_session_held(session), 2);

    /* Beyond the credit: refused as with one job at a time. */
    s_deliver_leased(session, 4, 14, 60000, 13);
    oq_action_t refused = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(refused.ack.id, 4);
    assert_int_equal(refused.ack.credit, 0);
    s_no_action(session);

    /* Each end gives a credit back and starts the oldest held job at once,
       before any message from the broker: the acks wait to be settled
       together. */
    s_finish(session, 1, OQ_OUTCOME_OK, 20);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 1);
    assert_int_equal(ack.ack.credit, 1);
    assert_true(s_next(session, OQ_ACTION_START_JOB).held);
    s_no_action(session);
    assert_int_equal(oq_session_held(session), 1);
    s_finish(session, 2, OQ_OUTCOME_OK, 30);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 2);
    assert_true(s_next(session, OQ_ACTION_START_JOB).held);
    s_finish(session, 3, OQ_OUTCOME_OK, 40);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 3);
    s_no_action(session);
    assert_false(oq_session_busy(session));

    /* The link drops before the broker was heard: all four acks unsettled
       go again, and the new ready offers none of what three of them give
       back (the refusal gives none). */
    oq_session_on_send_error(session, 50);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_on_tick(session, 50 + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    uint64_t ids = 0;
    for (int i = 0; i < 4; i++) {
        oq_action_t again = s_next_send(session, OQ_CMD_ACK);
        assert_int_equal(again.ack.credit, again.ack.id == 4 ? 0 : 1);
        ids |= 1u << again.ack.id;
    }
    assert_int_equal(ids, (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4));
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_prefetch_stop_hands_held_jobs_back(void **unused)
{
    oq_session_t *session = s_session_prefetch(3);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 60000, 11);
    s_next(session, OQ_ACTION_HOLD);
    s_deliver_leased(session, 3, 13, 60000, 12);
    s_next(session, OQ_ACTION_HOLD);

    /* SIGTERM: the held jobs go back at once, unrun, marked held (no try
       used, the type kept), with no credit; the running one finishes. */
    oq_session_on_signal(session, 20);
    s_next_send(session, OQ_CMD_DRAIN);
    for (uint64_t id = 2; id <= 3; id++) {
        oq_action_t back = s_next_send(session, OQ_CMD_ACK);
        assert_int_equal(back.ack.id, id);
        assert_int_equal(back.ack.outcome, OQ_OUTCOME_RETURN);
        assert_true(back.ack.held);
        assert_true(back.ack.lease == 10 + id);
        assert_int_equal(back.ack.credit, 0);
        s_next(session, OQ_ACTION_DROP_HELD);
    }
    s_no_action(session);
    assert_int_equal(oq_session_held(session), 0);
    s_finish(session, 1, OQ_OUTCOME_OK, 30);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 1);
    assert_false(ack.ack.held);
    assert_int_equal(ack.ack.credit, 0);
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_prefetch_long_wait_is_touched_or_handed_back(void **unused)
{
    oq_session_t *session = s_session_prefetch(3);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 1000, 10); /* a 1 s timeout */
    s_next(session, OQ_ACTION_HOLD);
    s_deliver_leased(session, 3, 13, 60000, 10);
    s_next(session, OQ_ACTION_HOLD);

    /* Job 1 ran 600 ms: job 2 waited more than half its timeout and goes
       back for a fresh lease, giving its credit back; job 3 starts with a
       touch that restarts its lease. */
    s_tick_alive(session, 300);
    s_tick_alive(session, 600);
    while (oq_session_next(session, &(oq_action_t){0}) == 0)
        ;
    s_finish(session, 1, OQ_OUTCOME_OK, 610);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 1);
    oq_action_t back = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(back.ack.id, 2);
    assert_int_equal(back.ack.outcome, OQ_OUTCOME_RETURN);
    assert_true(back.ack.held);
    assert_int_equal(back.ack.credit, 1);
    s_next(session, OQ_ACTION_DROP_HELD);
    assert_true(s_next(session, OQ_ACTION_START_JOB).held);
    oq_action_t touch = s_next_send(session, OQ_CMD_TOUCH);
    assert_int_equal(touch.ack.id, 3);
    assert_true(touch.ack.lease == 13);
    s_no_action(session);
    /* The watchdog runs from the start, not from the delivery. */
    s_finish(session, 3, OQ_OUTCOME_OK, 620);
    oq_session_destroy(&session);
}

static void test_session_prefetch_jobs_behind_a_long_one_go_back(void **unused)
{
    oq_session_t *session = s_session_prefetch(3);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 60000, 20);
    s_next(session, OQ_ACTION_HOLD);
    s_deliver_leased(session, 3, 13, 60000, 20);
    s_next(session, OQ_ACTION_HOLD);
    s_no_action(session);
    /* Job 1 has run OQ_WORKER_HOLD_MAX_MS: what waits behind it goes back
       unrun for a free worker, and its credit stays back. */
    int64_t now = 10 + OQ_WORKER_HOLD_MAX_MS;
    s_receive(session, OQ_CMD_HEARTBEAT, now);
    oq_session_on_tick(session, now);
    for (uint64_t id = 2; id <= 3; id++) {
        oq_action_t back = s_next_send(session, OQ_CMD_ACK);
        assert_int_equal(back.ack.id, id);
        assert_int_equal(back.ack.outcome, OQ_OUTCOME_RETURN);
        assert_true(back.ack.held);
        assert_int_equal(back.ack.credit, 0);
        s_next(session, OQ_ACTION_DROP_HELD);
    }
    oq_action_t action;
    while (oq_session_next(session, &action) == 0)
        assert_int_equal(action.cmd, OQ_CMD_HEARTBEAT);
    /* When it ends, its own credit comes back with its ack, the others'
       with a ready. */
    s_finish(session, 1, OQ_OUTCOME_OK, now + 500);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 2);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_prefetch_lost_link_drops_held_jobs(void **unused)
{
    oq_session_t *session = s_session_prefetch(4);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 60000, 11);
    s_next(session, OQ_ACTION_HOLD);
    /* The broker forgot us: it gave the held job's lease back itself. */
    s_receive(session, OQ_CMD_RECONNECT, 20);
    s_next(session, OQ_ACTION_DROP_HELD);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 3);
    s_no_action(session);
    s_receive(session, OQ_CMD_WELCOME, 21);
    s_deliver_leased(session, 3, 13, 60000, 22);
    s_next(session, OQ_ACTION_HOLD);
    /* The link is lost: the same, and the running job's ack waits. */
    oq_session_on_send_error(session, 30);
    s_next(session, OQ_ACTION_CLOSE);
    s_next(session, OQ_ACTION_DROP_HELD);
    s_no_action(session);
    assert_int_equal(oq_session_held(session), 0);
    s_finish(session, 1, OQ_OUTCOME_OK, 40);
    s_no_action(session);
    oq_session_on_tick(session, 30 + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 3);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_prefetch_pause_hands_held_jobs_back(void **unused)
{
    oq_session_t *session = s_session_prefetch(2);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 60000, 11);
    s_next(session, OQ_ACTION_HOLD);
    oq_job_done_t done;
    memset(&done, 0, sizeof done);
    done.id = 1;
    done.attempt = 1;
    oq_report_unavailable(&done.report, "sleep: database unavailable");
    oq_session_on_done(session, &done, 20);
    s_next_send(session, OQ_CMD_STATUS);
    oq_action_t back = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(back.ack.id, 2);
    assert_int_equal(back.ack.outcome, OQ_OUTCOME_RETURN);
    assert_true(back.ack.held);
    assert_int_equal(back.ack.credit, 0);
    s_next(session, OQ_ACTION_DROP_HELD);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 1);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_UNAVAILABLE);
    assert_int_equal(ack.ack.credit, 0);
    s_no_action(session);
    oq_session_destroy(&session);
}

/* ---- session: prefetch auto ------------------------------------------------ */

/* A session with --prefetch auto up to cap, connected at 0 and welcomed
   at 1: before any job has run it offers one credit. */
static oq_session_t *s_session_auto(uint32_t cap)
{
    oq_session_config_t config = {
        .heartbeat_ms = 1000, .liveness = 3, .prefetch = cap, .prefetch_auto = true};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 1);
    return session;
}

/* The report of a job whose handler ran run_us. */
static void s_finish_us(oq_session_t *session, uint64_t id, int64_t run_us, int64_t now)
{
    oq_job_done_t done;
    memset(&done, 0, sizeof done);
    done.id = id;
    done.attempt = 1;
    done.call_us = run_us;
    done.elapsed_ms = run_us / 1000;
    done.report.outcome = OQ_OUTCOME_OK;
    oq_session_on_done(session, &done, now);
}

static void test_session_prefetch_auto_credit_follows_run_times(void **unused)
{
    oq_session_t *session = s_session_auto(8);
    /* A short job: the limit grows to 2; its ack gives its credit back
       and a ready the new one. */
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish_us(session, 1, 50, 11);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 2);

    /* Both credits used: one runs, one is held; the next short job grows
       it to 3, the held one starts, and one more credit goes out. */
    s_deliver_leased(session, 2, 12, 60000, 12);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 3, 13, 60000, 12);
    s_next(session, OQ_ACTION_HOLD);
    s_finish_us(session, 2, 50, 13);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    assert_true(s_next(session, OQ_ACTION_START_JOB).held);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 3);

    /* A job of a second: the limit falls to 1 at once, and with two
       credits still at the broker its ack gives none back. */
    s_finish_us(session, 3, 1000000, 1020);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 0);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 1);

    /* The broker uses the two it had: both are taken, and the credit
       comes back only once the worker is down to the limit. */
    s_deliver_leased(session, 4, 14, 60000, 1030);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 5, 15, 60000, 1030);
    s_next(session, OQ_ACTION_HOLD);
    s_finish_us(session, 4, 50, 1031);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 0);
    assert_true(s_next(session, OQ_ACTION_START_JOB).held);
    s_no_action(session);
    s_finish_us(session, 5, 50, 1032);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 1);

    /* Short jobs one at a time bring it back up to the cap, never past. */
    uint32_t credit = 1; /* at the broker */
    for (uint64_t id = 6; id < 200; id++) {
        assert_true(credit >= 1);
        s_deliver_leased(session, id, id, 60000, 1040);
        credit--;
        s_next(session, OQ_ACTION_START_JOB);
        s_finish_us(session, id, 50, 1040);
        oq_action_t action;
        while (oq_session_next(session, &action) == 0) {
            assert_int_equal(action.kind, OQ_ACTION_SEND);
            credit += action.cmd == OQ_CMD_ACK ? action.ack.credit : action.credit;
        }
        assert_int_equal(credit, oq_session_limit(session));
    }
    assert_int_equal(oq_session_limit(session), 8);

    /* A new registration offers the whole limit. */
    s_receive(session, OQ_CMD_RECONNECT, 1050);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 8);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_prefetch_auto_jobs_behind_a_long_one_go_back_soon(void **unused)
{
    oq_session_t *session = s_session_auto(8);
    for (uint64_t id = 1; id <= 3; id++) {
        s_deliver_leased(session, id, id, 60000, 10);
        s_next(session, OQ_ACTION_START_JOB);
        s_finish_us(session, id, 50, 10);
        while (oq_session_next(session, &(oq_action_t){0}) == 0)
            ;
    }
    assert_int_equal(oq_session_limit(session), 4);
    s_deliver_leased(session, 4, 14, 60000, 20);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 5, 15, 60000, 20);
    s_next(session, OQ_ACTION_HOLD);
    /* Job 4 runs past what the average promised: the held one goes back
       after OQ_WORKER_PREFETCH_AUTO_HOLD_MS, not a second, its credit
       kept back. */
    assert_int_equal(oq_session_deadline(session), 20 + OQ_WORKER_PREFETCH_AUTO_HOLD_MS);
    s_tick_alive(session, 20 + OQ_WORKER_PREFETCH_AUTO_HOLD_MS - 1);
    s_no_action(session);
    s_tick_alive(session, 20 + OQ_WORKER_PREFETCH_AUTO_HOLD_MS);
    oq_action_t back = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(back.ack.id, 5);
    assert_int_equal(back.ack.outcome, OQ_OUTCOME_RETURN);
    assert_true(back.ack.held);
    assert_int_equal(back.ack.credit, 0);
    s_next(session, OQ_ACTION_DROP_HELD);
    s_no_action(session);
    /* It ends after 2 s: the limit is 1, and the two credits still at the
       broker are more than that: nothing comes back. */
    s_finish_us(session, 4, 2000000, 2020);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 0);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 1);
    oq_session_destroy(&session);
}

/* Jobs of 3 ms, one at a time, under --prefetch auto: the limit they
   reach when type "sleep" has a batch function of up to batch_most. */
static uint32_t s_auto_limit_after_3ms_jobs(size_t batch_most)
{
    oq_session_config_t config = {.heartbeat_ms = 1000,
                                  .liveness = 3,
                                  .prefetch = OQ_WORKER_PREFETCH_AUTO_CAP,
                                  .prefetch_auto = true,
                                  .batch = 16};
    oq_session_t *session = oq_session_new(&config, 0);
    if (batch_most > 1)
        oq_session_set_batch(session, "sleep", batch_most);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_receive(session, OQ_CMD_WELCOME, 1);
    for (uint64_t id = 1; id <= 100; id++) {
        s_deliver_leased(session, id, id, 60000, 10);
        s_next(session, OQ_ACTION_START_JOB);
        s_finish_us(session, id, 3000, 10);
        while (oq_session_next(session, &(oq_action_t){0}) == 0)
            ;
    }
    uint32_t limit = oq_session_limit(session);
    oq_session_destroy(&session);
    return limit;
}

static void test_session_prefetch_auto_holds_a_batch_of_a_batch_type(void **unused)
{
    (void)unused;
    /* Without a batch function, 3 ms jobs hold one behind the running one
       within the 4 ms budget; with one that takes 256 (capped by --batch
       at 16), the held ones would run in one call: a full batch of 16 is
       held behind the running job. */
    assert_int_equal(s_auto_limit_after_3ms_jobs(1), 2);
    assert_int_equal(s_auto_limit_after_3ms_jobs(256), 17);

    /* The most it may hold grows with the batch, up to its own cap; a
       fixed --prefetch is left as it is. */
    oq_session_config_t config = {.heartbeat_ms = 1000,
                                  .liveness = 3,
                                  .prefetch = OQ_WORKER_PREFETCH_AUTO_CAP,
                                  .prefetch_auto = true,
                                  .batch = OQ_WORKER_MAX_BATCH};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_set_batch(session, "sleep", 4);
    assert_int_equal(oq_session_prefetch(session), OQ_WORKER_PREFETCH_AUTO_CAP);
    oq_session_set_batch(session, "other", OQ_WORKER_MAX_BATCH);
    assert_int_equal(oq_session_prefetch(session), OQ_WORKER_PREFETCH_AUTO_BATCH_CAP);
    oq_session_destroy(&session);
    config.prefetch_auto = false;
    config.prefetch = 3;
    session = oq_session_new(&config, 0);
    oq_session_set_batch(session, "sleep", OQ_WORKER_MAX_BATCH);
    assert_int_equal(oq_session_prefetch(session), 3);
    oq_session_destroy(&session);
}

static void test_session_batch_starts_held_jobs_of_a_type_together(void **unused)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3, .prefetch = 5, .batch = 3};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_set_batch(session, "sleep", 8); /* capped by --batch at 3 */
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 5);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_deliver_leased(session, 1, 11, 60000, 10);
    assert_int_equal(s_next(session, OQ_ACTION_START_JOB).count, 1);
    for (uint64_t id = 2; id <= 5; id++) {
        s_deliver_leased(session, id, 10 + id, id == 3 ? 1000 : 60000, 11);
        s_next(session, OQ_ACTION_HOLD);
    }
    s_finish(session, 1, OQ_OUTCOME_OK, 20);
    s_next_send(session, OQ_CMD_ACK);
    oq_action_t start = s_next(session, OQ_ACTION_START_JOB);
    assert_true(start.held);
    assert_int_equal(start.count, 3);
    s_no_action(session);
    assert_int_equal(oq_session_held(session), 1);

    /* Each job is acked on its own, in any order; the next start waits
       for the last of the batch. */
    s_finish(session, 3, OQ_OUTCOME_OK, 30);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 3);
    assert_true(ack.ack.lease == 13);
    s_no_action(session);
    s_finish(session, 2, OQ_OUTCOME_RETRY, 30);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 2);
    s_no_action(session);
    assert_true(oq_session_busy(session));
    s_finish(session, 4, OQ_OUTCOME_OK, 30);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 4);
    start = s_next(session, OQ_ACTION_START_JOB);
    assert_int_equal(start.count, 1); /* one left: alone */
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_batch_timeout_reports_every_job(void **unused)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3, .prefetch = 3, .batch = 8};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_set_batch(session, "sleep", 8);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    s_next_send(session, OQ_CMD_READY);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 500, 10);
    s_next(session, OQ_ACTION_HOLD);
    s_deliver_leased(session, 3, 13, 500, 10);
    s_next(session, OQ_ACTION_HOLD);
    s_finish(session, 1, OQ_OUTCOME_OK, 20);
    s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(s_next(session, OQ_ACTION_START_JOB).count, 2);
    s_receive(session, OQ_CMD_HEARTBEAT, 520);
    oq_session_on_tick(session, 520);
    for (uint64_t id = 2; id <= 3; id++) {
        oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
        assert_int_equal(ack.ack.outcome, OQ_OUTCOME_TIMEOUT);
        assert_int_equal(ack.ack.credit, 0);
    }
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, OQ_EXIT_TIMEOUT);
    oq_session_destroy(&session);
}

static void test_supervisor_restart_delay(void **unused)
{
    assert_int_equal(oq_supervisor_restart_delay(0, 10), OQ_SUPERVISOR_RESTART_MS);
    assert_int_equal(oq_supervisor_restart_delay(0, 100000), OQ_SUPERVISOR_RESTART_MS);
    /* Dying again within a second doubles it, up to the cap. */
    int64_t delay = OQ_SUPERVISOR_RESTART_MS;
    for (int i = 0; i < 10; i++) {
        int64_t next = oq_supervisor_restart_delay(delay, OQ_SUPERVISOR_STABLE_MS - 1);
        assert_true(next == delay * 2 || next == OQ_SUPERVISOR_RESTART_MAX_MS);
        delay = next;
    }
    assert_int_equal(delay, OQ_SUPERVISOR_RESTART_MAX_MS);
    /* A worker that ran stably starts over. */
    assert_int_equal(oq_supervisor_restart_delay(delay, OQ_SUPERVISOR_STABLE_MS),
                     OQ_SUPERVISOR_RESTART_MS);
}

int main(void)
{
    /* The session and registry log their decisions; keep only errors. */
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
        cmocka_unit_test(test_runner_runs_handlers),
        cmocka_unit_test(test_runner_reports_the_time_of_the_call),
        cmocka_unit_test(test_registry_resources),
        cmocka_unit_test(test_registry_batch_functions),
        cmocka_unit_test(test_runner_probes),
        cmocka_unit_test(test_session_unavailable_pauses_and_probes),
        cmocka_unit_test(test_session_paused_worker_registers_paused),
        cmocka_unit_test(test_session_sigterm_while_probing),
        cmocka_unit_test(test_session_idle_release),
        cmocka_unit_test(test_session_registers_and_heartbeats),
        cmocka_unit_test(test_session_ack_and_resend_echo_the_lease),
        cmocka_unit_test(test_session_touch_restarts_the_watchdog),
        cmocka_unit_test(test_session_touch_needs_a_link),
        cmocka_unit_test(test_session_release_and_return_carry_their_delay),
        cmocka_unit_test(test_session_silent_broker_reconnects_with_backoff),
        cmocka_unit_test(test_session_job_is_acked_with_credit),
        cmocka_unit_test(test_session_job_done_while_down_is_acked_after_reconnect),
        cmocka_unit_test(test_session_unconfirmed_ack_is_sent_again),
        cmocka_unit_test(test_session_reconnect_offers_free_credit_once),
        cmocka_unit_test(test_session_watchdog_reports_timeout_and_exits),
        cmocka_unit_test(test_session_stall_is_not_silence_nor_handler_time),
        cmocka_unit_test(test_session_stall_extends_only_what_it_stalled),
        cmocka_unit_test(test_session_sigterm_when_idle),
        cmocka_unit_test(test_session_sigterm_finishes_the_job_first),
        cmocka_unit_test(test_session_sigterm_without_a_link),
        cmocka_unit_test(test_session_refuses_a_second_job),
        cmocka_unit_test(test_session_bad_job_fails_and_returns_credit),
        cmocka_unit_test(test_session_any_message_is_a_sign_of_life),
        cmocka_unit_test(test_session_send_error_drops_the_link),
        cmocka_unit_test(test_session_prefetch_holds_then_starts_in_order),
        cmocka_unit_test(test_session_prefetch_stop_hands_held_jobs_back),
        cmocka_unit_test(test_session_prefetch_long_wait_is_touched_or_handed_back),
        cmocka_unit_test(test_session_prefetch_jobs_behind_a_long_one_go_back),
        cmocka_unit_test(test_session_prefetch_lost_link_drops_held_jobs),
        cmocka_unit_test(test_session_prefetch_pause_hands_held_jobs_back),
        cmocka_unit_test(test_session_prefetch_auto_credit_follows_run_times),
        cmocka_unit_test(test_session_prefetch_auto_jobs_behind_a_long_one_go_back_soon),
        cmocka_unit_test(test_session_prefetch_auto_holds_a_batch_of_a_batch_type),
        cmocka_unit_test(test_session_batch_starts_held_jobs_of_a_type_together),
        cmocka_unit_test(test_session_batch_timeout_reports_every_job),
        cmocka_unit_test(test_supervisor_restart_delay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
