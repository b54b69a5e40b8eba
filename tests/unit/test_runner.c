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

/* ---- jobs as the worker makes them from a message ------------------------- */

/* What the handler and the batch function below saw of each job they ran:
   the payload they were given, and its "n". */
#define S_SEEN_MAX 8
static const msgpack_object *s_seen_payload[S_SEEN_MAX];
static uint64_t s_seen_n[S_SEEN_MAX];
static size_t s_seen;

static void s_record(const oq_job_t *job, oq_report_t *report)
{
    assert_true(s_seen < S_SEEN_MAX);
    uint64_t n = 0;
    assert_int_equal(oq_payload_uint(job, "n", &n), 0);
    s_seen_payload[s_seen] = job->payload;
    s_seen_n[s_seen++] = n;
    oq_report_ok(report, OQ_RESULT_APPLIED);
}

static void s_record_handler(const oq_job_t *job, void *state, oq_report_t *report)
{
    (void)state;
    s_record(job, report);
}

static void s_record_batch(const oq_job_t *const *jobs, size_t count, void *state,
                           oq_report_t *reports)
{
    (void)state;
    for (size_t i = 0; i < count; i++)
        s_record(jobs[i], &reports[i]);
}

/* One delivery's map, as the broker sends it, for a "record" job: id, a
   lease of id + 100, and a payload of {"n": id, "pad": 40 bytes}; or with
   bad set, a payload that is not a map. */
static void s_pack_delivery(msgpack_packer *pk, uint64_t id, bool bad)
{
    msgpack_pack_map(pk, 8);
    oq_proto_pack_cstr(pk, "id");
    msgpack_pack_uint64(pk, id);
    oq_proto_pack_cstr(pk, "attempt");
    msgpack_pack_uint32(pk, 1);
    oq_proto_pack_cstr(pk, "lease");
    msgpack_pack_uint64(pk, id + 100);
    oq_proto_pack_cstr(pk, "type");
    oq_proto_pack_cstr(pk, "record");
    oq_proto_pack_cstr(pk, "queue");
    oq_proto_pack_cstr(pk, "default");
    oq_proto_pack_cstr(pk, "max_tries");
    msgpack_pack_uint32(pk, 3);
    oq_proto_pack_cstr(pk, "timeout");
    msgpack_pack_uint32(pk, 10);
    oq_proto_pack_cstr(pk, "payload");
    if (bad) {
        msgpack_pack_uint32(pk, 7);
        return;
    }
    msgpack_pack_map(pk, 2);
    oq_proto_pack_cstr(pk, "n");
    msgpack_pack_uint64(pk, id);
    oq_proto_pack_cstr(pk, "pad");
    oq_proto_pack_cstr(pk, "0123456789012345678901234567890123456789");
}

/* A "jobs" message of count deliveries, ids 1 ... count, the one with
   id bad (0: none) not decodable. */
static void s_pack_jobs(msgpack_sbuffer *buf, uint64_t count, uint64_t bad)
{
    msgpack_sbuffer_init(buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_JOBS, -1, 1);
    oq_proto_pack_cstr(&pk, "jobs");
    msgpack_pack_array(&pk, (uint32_t)count);
    for (uint64_t id = 1; id <= count; id++)
        s_pack_delivery(&pk, id, id == bad);
}

/* The frame decoded as the worker decodes it: its jobs left for
   oq_proto_decode_delivery. */
static void s_decode(oq_msg_t *msg, const msgpack_sbuffer *buf)
{
    oq_err_t code;
    char why[256];
    assert_int_equal(oq_proto_decode_shallow(msg, buf->data, buf->size, &code, why, sizeof why), 0);
}

/* A "jobs" message is decoded once: each job the runner gets has its
   payload where it is in that one decoded message (the payload map of its
   entry, not a copy packed again and unpacked), and runs with the payload
   it carried, alone or with the others as a batch. A lone "job" message
   the same. */
static void test_runner_runs_each_job_of_a_jobs_message_from_its_one_decode(void **unused)
{
    (void)unused;
    oq_registry_t *registry = oq_registry_new();
    assert_int_equal(oq_registry_add(registry, "record", s_record_handler, NULL), 0);
    assert_int_equal(oq_registry_set_batch(registry, "record", s_record_batch, 8), 0);
    msgpack_sbuffer buf;
    s_pack_jobs(&buf, 3, 0);
    oq_msg_t msg;
    s_decode(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_JOBS);
    assert_int_equal(oq_proto_entry_count(&msg), 3);

    oq_runner_job_t made[3];
    const msgpack_object *carried[3];
    for (uint32_t i = 0; i < 3; i++) {
        oq_job_msg_t envelope;
        const msgpack_object *payload = NULL;
        oq_err_t code;
        char why[256];
        assert_int_equal(
            oq_proto_decode_delivery(&msg, i, &envelope, &payload, &code, why, sizeof why), 0);
        carried[i] = oq_proto_map_get(&msg.entries->via.array.ptr[i], "payload");
        assert_non_null(carried[i]);
        assert_ptr_equal(payload, carried[i]); /* in the message, not a copy */
        assert_null(envelope.payload);         /* and not packed again */
        assert_int_equal(envelope.id, i + 1);
        assert_true(envelope.has_lease && envelope.lease == i + 101);
        oq_runner_job_init(&made[i], &envelope, payload);
        assert_string_equal(made[i].type, "record");
        assert_string_equal(made[i].queue, "default");
        assert_int_equal(made[i].job.timeout_ms, 10000);
    }
    /* As the worker runs them: the first alone, the two held behind it as
       one batch. */
    s_seen = 0;
    oq_job_done_t done[3];
    oq_runner_job_t *first[] = {&made[0]};
    oq_runner_run(registry, first, 1, NULL, &done[0]);
    oq_runner_job_t *rest[] = {&made[1], &made[2]};
    oq_runner_run(registry, rest, 2, NULL, &done[1]);
    assert_int_equal(s_seen, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(done[i].id, i + 1);
        assert_int_equal(done[i].report.outcome, OQ_OUTCOME_OK);
        assert_ptr_equal(s_seen_payload[i], carried[i]);
        assert_int_equal(s_seen_n[i], i + 1);
    }
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);

    /* A lone "job" message: its job left to the delivery's decode, its
       payload map in the decoded message too. */
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_JOB, -1, 1);
    oq_proto_pack_cstr(&pk, "job");
    s_pack_delivery(&pk, 9, false);
    s_decode(&msg, &buf);
    assert_int_equal(msg.cmd, OQ_CMD_JOB);
    assert_int_equal(msg.job.id, 0);
    assert_null(msg.job.payload);
    oq_job_msg_t envelope;
    const msgpack_object *payload = NULL;
    oq_err_t code;
    char why[256];
    assert_int_equal(oq_proto_decode_delivery(&msg, 0, &envelope, &payload, &code, why, sizeof why),
                     0);
    assert_ptr_equal(payload, oq_proto_map_get(oq_proto_map_get(&msg.root, "job"), "payload"));
    assert_int_equal(envelope.id, 9);
    oq_runner_job_init(&made[0], &envelope, payload);
    s_seen = 0;
    oq_runner_run(registry, first, 1, NULL, &done[0]);
    assert_int_equal(done[0].report.outcome, OQ_OUTCOME_OK);
    assert_ptr_equal(s_seen_payload[0], payload);
    assert_int_equal(s_seen_n[0], 9);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&buf);
    oq_registry_destroy(&registry);
}

/* An entry of a "jobs" message that does not decode is refused as a "job"
   message with the same map is, with the same code and reason (a lone job
   decoded as the worker does too), and can still be named by its id,
   attempt and lease, so the worker fails it by them (docs/protocol.md
   §6); the entries around it decode and run. */
static void test_runner_refuses_a_bad_entry_of_a_jobs_message_alone(void **unused)
{
    (void)unused;
    oq_registry_t *registry = oq_registry_new();
    assert_int_equal(oq_registry_add(registry, "record", s_record_handler, NULL), 0);
    msgpack_sbuffer buf;
    s_pack_jobs(&buf, 3, 2);
    oq_msg_t msg;
    s_decode(&msg, &buf);

    /* The same map alone in a "job" message. */
    msgpack_sbuffer alone;
    msgpack_sbuffer_init(&alone);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &alone, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_JOB, -1, 1);
    oq_proto_pack_cstr(&pk, "job");
    s_pack_delivery(&pk, 2, true);
    oq_msg_t lone;
    oq_err_t lone_code;
    char lone_why[256];
    assert_int_equal(
        oq_proto_decode(&lone, alone.data, alone.size, &lone_code, lone_why, sizeof lone_why), -1);
    /* As the worker decodes it, the frame decodes and its job does not,
       with the same code and reason. */
    oq_msg_t shallow;
    s_decode(&shallow, &alone);
    {
        oq_job_msg_t envelope;
        const msgpack_object *payload;
        oq_err_t code;
        char why[256];
        assert_int_equal(
            oq_proto_decode_delivery(&shallow, 0, &envelope, &payload, &code, why, sizeof why), -1);
        assert_int_equal(code, lone_code);
        assert_string_equal(why, lone_why);
    }
    oq_proto_msg_release(&shallow);

    s_seen = 0;
    for (uint32_t i = 0; i < 3; i++) {
        oq_job_msg_t envelope;
        const msgpack_object *payload = NULL;
        oq_err_t code;
        char why[256];
        int rc = oq_proto_decode_delivery(&msg, i, &envelope, &payload, &code, why, sizeof why);
        if (i == 1) {
            assert_int_equal(rc, -1);
            assert_int_equal(code, lone_code);
            assert_string_equal(why, lone_why);
            assert_string_equal(why, "field \"payload\" must be a map");
            uint64_t id, lease;
            uint32_t attempt;
            bool has_lease;
            assert_int_equal(oq_proto_entry_ids(&msg, i, &id, &attempt, &has_lease, &lease), 0);
            assert_int_equal(id, 2);
            assert_int_equal(attempt, 1);
            assert_true(has_lease && lease == 102);
            continue;
        }
        assert_int_equal(rc, 0);
        oq_runner_job_t made;
        oq_runner_job_init(&made, &envelope, payload);
        oq_runner_job_t *jobs[] = {&made};
        oq_job_done_t done;
        oq_runner_run(registry, jobs, 1, NULL, &done);
        assert_int_equal(done.report.outcome, OQ_OUTCOME_OK);
    }
    assert_int_equal(s_seen, 2);
    assert_int_equal(s_seen_n[0], 1);
    assert_int_equal(s_seen_n[1], 3);
    oq_proto_msg_release(&lone);
    oq_proto_msg_release(&msg);
    msgpack_sbuffer_destroy(&alone);
    msgpack_sbuffer_destroy(&buf);
    oq_registry_destroy(&registry);
}

/* A payload over the limit in a "jobs" entry, or in a "job" message
   decoded as the worker does, is refused with the size oq_proto_decode
   names for it: the worker's is counted without packing it, the other by
   packing it, and the two agree for every kind of value and every width
   of its encoding. */
static void test_runner_counts_an_entry_payload_as_packed(void **unused)
{
    (void)unused;
    /* Each kind and width once, then strings to go past the limit. */
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
    static const uint64_t uints[] = {0, 127, 128, 255, 256, 65535, 65536, UINT32_MAX, UINT64_MAX};
    static const int64_t ints[] = {-1, -32, -33, -128, -129, -32768, -32769, INT32_MIN, INT64_MIN};
    static const size_t strs[] = {0, 31, 32, 255, 256, 65535, 65536, 70000, 70000, 70000};
    static char text[70000];
    memset(text, 'x', sizeof text);
    size_t entries = 9 + 9 + 10 + 2 + 6 + 3;
    msgpack_pack_map(&pk, (uint32_t)entries);
    uint32_t key = 0;
    for (size_t i = 0; i < 9; i++, key++) {
        msgpack_pack_uint32(&pk, key);
        msgpack_pack_uint64(&pk, uints[i]);
    }
    for (size_t i = 0; i < 9; i++, key++) {
        msgpack_pack_uint32(&pk, key);
        msgpack_pack_int64(&pk, ints[i]);
    }
    for (size_t i = 0; i < 10; i++, key++) {
        msgpack_pack_uint32(&pk, key);
        msgpack_pack_str_with_body(&pk, text, strs[i]);
    }
    msgpack_pack_uint32(&pk, key++);
    msgpack_pack_float(&pk, 1.5f);
    msgpack_pack_uint32(&pk, key++);
    msgpack_pack_double(&pk, 2.5);
    static const size_t exts[] = {1, 2, 4, 8, 16, 3};
    for (size_t i = 0; i < 6; i++, key++) {
        msgpack_pack_uint32(&pk, key);
        msgpack_pack_ext_with_body(&pk, text, exts[i], 1);
    }
    msgpack_pack_uint32(&pk, key++);
    msgpack_pack_bin_with_body(&pk, text, 300);
    msgpack_pack_uint32(&pk, key++);
    msgpack_pack_array(&pk, 16);
    for (int i = 0; i < 16; i++)
        msgpack_pack_nil(&pk);
    msgpack_pack_uint32(&pk, key++);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_true(&pk);
    msgpack_pack_false(&pk);
    assert_true(payload.size > OQ_MAX_PAYLOAD_BYTES);

    /* The same delivery alone and as the only entry of "jobs". */
    msgpack_sbuffer frames[2];
    for (int jobs = 0; jobs < 2; jobs++) {
        msgpack_sbuffer_init(&frames[jobs]);
        msgpack_packer fp;
        msgpack_packer_init(&fp, &frames[jobs], msgpack_sbuffer_write);
        oq_proto_begin(&fp, jobs ? OQ_CMD_JOBS : OQ_CMD_JOB, -1, 1);
        oq_proto_pack_cstr(&fp, jobs ? "jobs" : "job");
        if (jobs)
            msgpack_pack_array(&fp, 1);
        msgpack_pack_map(&fp, 6);
        oq_proto_pack_cstr(&fp, "id");
        msgpack_pack_uint32(&fp, 5);
        oq_proto_pack_cstr(&fp, "attempt");
        msgpack_pack_uint32(&fp, 1);
        oq_proto_pack_cstr(&fp, "type");
        oq_proto_pack_cstr(&fp, "record");
        oq_proto_pack_cstr(&fp, "max_tries");
        msgpack_pack_uint32(&fp, 3);
        oq_proto_pack_cstr(&fp, "timeout");
        msgpack_pack_uint32(&fp, 10);
        oq_proto_pack_cstr(&fp, "payload");
        msgpack_sbuffer_write(&frames[jobs], payload.data, payload.size);
    }
    oq_msg_t lone, msg;
    oq_err_t lone_code, code;
    char lone_why[256], why[256];
    assert_int_equal(oq_proto_decode(&lone, frames[0].data, frames[0].size, &lone_code, lone_why,
                                     sizeof lone_why),
                     -1);
    char expected[128];
    snprintf(expected, sizeof expected, "payload is %zu bytes, the limit is %d", payload.size,
             OQ_MAX_PAYLOAD_BYTES);
    assert_string_equal(lone_why, expected);
    oq_msg_t shallow;
    s_decode(&shallow, &frames[0]);
    oq_job_msg_t envelope;
    const msgpack_object *view;
    assert_int_equal(
        oq_proto_decode_delivery(&shallow, 0, &envelope, &view, &code, why, sizeof why), -1);
    assert_string_equal(why, expected);
    oq_proto_msg_release(&shallow);
    s_decode(&msg, &frames[1]);
    assert_int_equal(oq_proto_decode_delivery(&msg, 0, &envelope, &view, &code, why, sizeof why),
                     -1);
    assert_int_equal(code, lone_code);
    assert_int_equal(code, OQ_ERR_TOO_LARGE);
    assert_string_equal(why, expected);
    oq_proto_msg_release(&lone);
    oq_proto_msg_release(&msg);
    for (int i = 0; i < 2; i++)
        msgpack_sbuffer_destroy(&frames[i]);
    msgpack_sbuffer_destroy(&payload);
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
        cmocka_unit_test(test_runner_runs_each_job_of_a_jobs_message_from_its_one_decode),
        cmocka_unit_test(test_runner_refuses_a_bad_entry_of_a_jobs_message_alone),
        cmocka_unit_test(test_runner_counts_an_entry_payload_as_packed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
