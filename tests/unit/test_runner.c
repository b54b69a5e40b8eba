/*  test_runner.c: the runner, which runs a delivered job (or a batch of
    held ones) through its handler and reports each job's outcome and the
    time of the call it ran in, and probes a declared resource; and the
    jobs it runs as the worker makes them, once, from a "job" or "jobs"
    message: each points into the one decoded message, and an entry that
    does not decode is refused alone, as a "job" message would be. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "handler_fixture.h"
#include "onceq/clock.h"
#include "onceq/log.h"
#include "onceq/worker.h"
#include "registry.h"
#include "runner.h"

/* ---- runner -------------------------------------------------------------- */

/* A job made by hand as the worker makes one: its payload unpacked from
   a packed map (kept in unpacked until s_job_destroy). */
typedef struct {
    oq_runner_job_t run;
    msgpack_unpacked unpacked;
} s_job_t;

static void s_job_make(s_job_t *job, uint64_t id, const char *type, const msgpack_sbuffer *payload)
{
    msgpack_unpacked_init(&job->unpacked);
    assert_int_equal(msgpack_unpack_next(&job->unpacked, payload->data, payload->size, NULL),
                     MSGPACK_UNPACK_SUCCESS);
    oq_job_msg_t envelope = {
        .id = id, .attempt = 2, .type = oq_str(type), .queue = oq_str("default")};
    oq_runner_job_init(&job->run, &envelope, &job->unpacked.data);
}

static void s_job_destroy(s_job_t *job)
{
    msgpack_unpacked_destroy(&job->unpacked);
}

/* Run one job through the runner, as the worker does. */
static void s_run_one(const oq_registry_t *registry, s_job_t *job, oq_job_done_t *done)
{
    oq_runner_job_t *jobs[] = {&job->run};
    oq_runner_run(registry, jobs, 1, NULL, done);
    s_job_destroy(job);
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
    oq_registry_t *registry = oq_hfix_builtins();
    assert_int_equal(oq_registry_set_batch(registry, "sleep", s_batch_nap, 8), 0);
    msgpack_sbuffer map, not_map;
    s_ms_payload(&map, 20);
    msgpack_sbuffer_init(&not_map);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &not_map, msgpack_sbuffer_write);
    msgpack_pack_uint32(&pk, 7);

    /* A batch of three in one 20 ms call: each reports the whole call,
       which the auto prefetch charges over a full batch. */
    s_job_t made[3];
    oq_runner_job_t *jobs[3];
    oq_job_done_t done[3];
    for (size_t i = 0; i < 3; i++) {
        s_job_make(&made[i], 30 + i, "sleep", &map);
        jobs[i] = &made[i].run;
    }
    oq_runner_run(registry, jobs, 3, NULL, done);
    for (size_t i = 0; i < 3; i++) {
        s_job_destroy(&made[i]);
        assert_int_equal(done[i].report.outcome, OQ_OUTCOME_OK);
        assert_true(done[i].call_us >= 20000);
        assert_int_equal(done[i].call_us, done[0].call_us);
    }

    /* Two of three payloads are not maps: the third runs alone in its
       handler (a 20 ms sleep), and its call is that run; the two that
       never ran report none. */
    s_job_make(&made[0], 40, "sleep", &not_map);
    s_job_make(&made[1], 41, "sleep", &map);
    s_job_make(&made[2], 42, "sleep", &not_map);
    oq_runner_run(registry, jobs, 3, NULL, done);
    for (size_t i = 0; i < 3; i++)
        s_job_destroy(&made[i]);
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
    oq_registry_t *registry = oq_hfix_builtins();
    int seen = 0;
    assert_int_equal(oq_registry_add(registry, "count", oq_hfix_counting_handler, &seen), 0);
    assert_int_equal(oq_registry_add(registry, "silent", oq_hfix_silent_handler, NULL), 0);

    msgpack_sbuffer payload;
    s_ms_payload(&payload, 20);

    oq_job_done_t done;
    s_job_t job;

    s_job_make(&job, 11, "sleep", &payload);
    s_run_one(registry, &job, &done);
    assert_int_equal(done.id, 11);
    assert_int_equal(done.attempt, 2);
    assert_int_equal(done.report.outcome, OQ_OUTCOME_OK);
    assert_true(done.elapsed_ms >= 20);

    oq_hfix_calls = 0;
    s_job_make(&job, 12, "count", &payload);
    s_run_one(registry, &job, &done);
    assert_int_equal(done.id, 12);
    assert_int_equal(done.report.outcome, OQ_OUTCOME_OK);
    assert_int_equal(done.report.result, OQ_RESULT_APPLIED);

    s_job_make(&job, 13, "no_such_type", &payload);
    s_run_one(registry, &job, &done);
    assert_int_equal(done.id, 13);
    /* Handed back, no try used: a worker that handles the type runs it. */
    assert_int_equal(done.report.outcome, OQ_OUTCOME_RETURN);
    assert_false(done.report.has_delay);
    assert_string_equal(done.report.error, "no handler for job type no_such_type");

    s_job_make(&job, 14, "silent", &payload);
    s_run_one(registry, &job, &done);
    assert_int_equal(done.report.outcome, OQ_OUTCOME_FAIL);
    assert_non_null(strstr(done.report.error, "without reporting an outcome"));

    /* A payload that is not a map fails, naming it. */
    msgpack_sbuffer not_a_map;
    msgpack_sbuffer_init(&not_a_map);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &not_a_map, msgpack_sbuffer_write);
    msgpack_pack_uint32(&pk, 1);
    s_job_make(&job, 15, "count", &not_a_map);
    s_run_one(registry, &job, &done);
    msgpack_sbuffer_destroy(&not_a_map);
    assert_int_equal(done.id, 15);
    assert_int_equal(done.report.outcome, OQ_OUTCOME_FAIL);
    assert_string_equal(done.report.error, "the job's payload is not a msgpack map");

    oq_registry_destroy(&registry);
    assert_int_equal(oq_hfix_calls, 1);
    assert_int_equal(seen, 2);
    msgpack_sbuffer_destroy(&payload);
}

/* A probe is the declared resource's answer, timed. */
static void test_runner_probes(void **unused)
{
    oq_registry_t *registry = oq_hfix_builtins();
    oq_hfix_resource_t db = {0};
    assert_int_equal(oq_registry_add(registry, "grant_points", oq_hfix_counting_handler, NULL), 0);
    assert_int_equal(
        oq_registry_set_resource(registry, "grant_points", oq_hfix_probe, oq_hfix_release, &db), 0);
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

int main(void)
{
    /* The worker logs its decisions; keep only errors. */
    oq_log_init("test_runner");
    oq_log_set_level(OQ_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runner_runs_handlers),
        cmocka_unit_test(test_runner_reports_the_time_of_the_call),
        cmocka_unit_test(test_runner_probes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
