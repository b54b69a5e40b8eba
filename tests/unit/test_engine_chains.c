/*  test_engine_chains.c: chains in the engine (broker/engine_chains.c) on
    the fixture's hand-moved clock: each link follows the ok of the one
    before, a final failure stops the chain and runs chain_catch, and a
    restart between a link's ack and the next link's dispatch (a journal
    cut there) dispatches the next link exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_fixture.h"
#include "journal.h"
#include "record.h"

/* Points, then shipment, then a notice; chain_catch an alert. */
typedef struct {
    oq_job_msg_t first, links[2], catch_;
} s_chain_t;

static void s_chain(s_chain_t *c)
{
    c->first = EF_JOB(.type = "grant_points", .max_tries = 1);
    c->links[0] = EF_JOB(.type = "request_shipment", .max_tries = 1);
    c->links[1] = EF_JOB(.type = "notify", .max_tries = 1);
    c->catch_ = EF_JOB(.type = "alert");
}

static uint64_t s_dispatch(ef_fixture_t *f, s_chain_t *c)
{
    uint64_t id = 0;
    oq_err_t code;
    char reason[256] = "";
    if (oq_engine_dispatch_chain(f->engine, &c->first, c->links, 2, &c->catch_, &id, &code, reason,
                                 sizeof reason) < 0)
        fail_msg("chain refused: %s", reason);
    return id;
}

typedef struct {
    const char *type;
    size_t count;
    uint64_t last;
} s_count_t;

static void s_count_type(void *ctx, const oq_job_view_t *job)
{
    s_count_t *c = ctx;
    if (strcmp(job->type, c->type) == 0) {
        c->count++;
        c->last = job->id;
    }
}

static s_count_t s_held(ef_fixture_t *f, const char *type)
{
    s_count_t c = {type, 0, 0};
    oq_engine_job_each(f->engine, s_count_type, &c);
    return c;
}

static void test_each_link_follows_the_ok_of_the_one_before(void **state)
{
    ef_fixture_t *f = *state;
    s_chain_t c;
    s_chain(&c);
    uint64_t id = s_dispatch(f, &c);
    oq_chain_view_t v;
    assert_int_equal(oq_engine_chain_view(f->engine, id, &v), 0);
    assert_int_equal(v.place, 1);
    assert_int_equal(v.total, 3);
    assert_int_equal(s_held(f, "request_shipment").count, 0);
    oq_worker_t *w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, id, 1, OQ_OUTCOME_OK);
    s_count_t ship = s_held(f, "request_shipment");
    assert_int_equal(ship.count, 1);
    assert_int_equal(oq_engine_chain_view(f->engine, ship.last, &v), 0);
    assert_int_equal(v.root, id);
    assert_int_equal(v.place, 2);
    assert_int_equal(oq_engine_chain_view(f->engine, id, &v), -1); /* moved on */
    w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, ship.last, 1, OQ_OUTCOME_OK);
    s_count_t notify = s_held(f, "notify");
    assert_int_equal(notify.count, 1);
    w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, notify.last, 1, OQ_OUTCOME_OK);
    assert_int_equal(oq_engine_job_count(f->engine), 0);
    assert_int_equal(oq_engine_chains_settle(f->engine), 0);
    assert_int_equal(s_held(f, "alert").count, 0);
}

static void test_a_final_failure_stops_the_chain_and_runs_its_catch(void **state)
{
    ef_fixture_t *f = *state;
    s_chain_t c;
    s_chain(&c);
    uint64_t id = s_dispatch(f, &c);
    oq_worker_t *w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, id, 1, OQ_OUTCOME_OK);
    uint64_t ship = s_held(f, "request_shipment").last;
    w = ef_lease_all(f, 'a');
    ef_ack_leased(f, w, ship, 1, OQ_OUTCOME_FAIL);
    assert_int_equal(s_held(f, "alert").count, 1);
    assert_int_equal(s_held(f, "notify").count, 0);
    oq_chain_view_t v;
    assert_int_equal(oq_engine_chain_view(f->engine, ship, &v), -1);
}

static void test_a_cancelled_link_stops_the_chain(void **state)
{
    ef_fixture_t *f = *state;
    s_chain_t c;
    s_chain(&c);
    uint64_t id = s_dispatch(f, &c);
    oq_refusal_t why;
    char reason[128];
    assert_int_equal(oq_engine_cancel(f->engine, id, &why, reason, sizeof reason), 0);
    assert_int_equal(oq_engine_job_count(f->engine), 0);
    oq_chain_view_t v;
    assert_int_equal(oq_engine_chain_view(f->engine, id, &v), -1);
}

/* The longest chain the limits allow fits one journal record, and one
   byte of payload more is refused before anything is queued. */
static void test_the_longest_chain_fits_one_record(void **state)
{
    ef_fixture_t *f = *state;
    ef_engine_bytes(f, 64ull << 20, 0);
    static uint8_t payload[OQ_MAX_CHAIN_PAYLOAD_BYTES];
    /* A msgpack map whose length is all of one bin: 0x81, key, bin32. */
    size_t each = OQ_MAX_CHAIN_PAYLOAD_BYTES / (OQ_MAX_CHAIN_LINKS + 1);
    char type[OQ_MAX_NAME_LEN + 1], key[OQ_MAX_JOB_KEY_LEN + 1];
    memset(type, 't', OQ_MAX_NAME_LEN);
    type[OQ_MAX_NAME_LEN] = 0;
    memset(key, 'k', OQ_MAX_JOB_KEY_LEN);
    key[OQ_MAX_JOB_KEY_LEN] = 0;
    oq_job_msg_t links[OQ_MAX_CHAIN_LINKS + 1];
    for (int i = 0; i <= OQ_MAX_CHAIN_LINKS; i++) {
        links[i] = EF_JOB(.type = type, .queue = type, .payload = payload, .payload_len = each,
                          .overlap_key = key, .priority = 1, .delay_ms = 1000, .max_tries = 3,
                          .timeout_ms = 1000,
                          .backoff_ms = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
    }
    oq_chain_view_t v = {.job_id = 9, .root = 9, .place = 1, .rest_count = OQ_MAX_CHAIN_LINKS};
    for (int i = 0; i < OQ_MAX_CHAIN_LINKS; i++)
        v.rest[i] = &links[i];
    v.catch_ = &links[OQ_MAX_CHAIN_LINKS];
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    assert_int_equal(oq_record_chain(&buf, &v), 0);
    size_t frame = 0;
    assert_int_equal(oq_record_frame((const uint8_t *)buf.data, buf.size, &frame), OQ_FRAME_OK);
    oq_record_t rec;
    char why[128];
    assert_int_equal(oq_record_decode((const uint8_t *)buf.data, frame, &rec, why, sizeof why), 0);
    assert_int_equal(rec.chain.rest_count, OQ_MAX_CHAIN_LINKS);
    msgpack_sbuffer_destroy(&buf);
    /* One byte over the links' payload limit: refused, nothing queued. */
    oq_job_msg_t first = EF_JOB();
    links[0].payload_len =
        each + (OQ_MAX_CHAIN_PAYLOAD_BYTES - each * (OQ_MAX_CHAIN_LINKS + 1)) + 1;
    uint64_t id;
    oq_err_t code;
    assert_int_equal(oq_engine_dispatch_chain(f->engine, &first, links, OQ_MAX_CHAIN_LINKS,
                                              &links[OQ_MAX_CHAIN_LINKS], &id, &code, why,
                                              sizeof why),
                     -1);
    assert_int_equal(code, OQ_ERR_TOO_LARGE);
    assert_int_equal(oq_engine_job_count(f->engine), 0);
}

static off_t s_size(ef_fixture_t *f)
{
    struct stat st;
    assert_int_equal(stat(ef_path(f, "journal"), &st), 0);
    return st.st_size;
}

/* DONE: frame, type, id. CHAIN_FIRED: the same. */
#define S_DONE_RECORD_BYTES  (OQ_RECORD_FRAME_BYTES + 1 + 8)
#define S_FIRED_RECORD_BYTES (OQ_RECORD_FRAME_BYTES + 1 + 8)

/* Run the first link to its ack in a journal, cut the journal cut bytes
   before the end (negative: right after the first link's DONE), restart. */
static void s_crash_after_first_ack(ef_fixture_t *f, long cut)
{
    ef_open_ok(f, NULL);
    s_chain_t c;
    s_chain(&c);
    uint64_t id = s_dispatch(f, &c);
    oq_worker_t *w = ef_lease_all(f, 'a');
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    off_t before = s_size(f);
    ef_ack_leased(f, w, id, 1, OQ_OUTCOME_OK);
    assert_int_equal(s_held(f, "request_shipment").count, 1);
    assert_int_equal(oq_journal_flush(f->journal, oq_journal_appended(f->journal)), 0);
    off_t after = s_size(f);
    ef_close(f);
    off_t at = cut < 0 ? before + S_DONE_RECORD_BYTES : after - cut;
    assert_true(at > before && at <= after);
    assert_int_equal(truncate(ef_path(f, "journal"), at), 0);
    unlink(ef_path(f, "journal.durable")); /* the cut bytes were never durable */
    ef_open_ok(f, NULL);
}

static void test_crash_before_the_next_link_dispatches_it_once(void **state)
{
    ef_fixture_t *f = *state;
    s_crash_after_first_ack(f, -1);
    s_count_t ship = s_held(f, "request_shipment");
    assert_int_equal(ship.count, 1);
    assert_int_equal(oq_engine_job_count(f->engine), 1);
    oq_chain_view_t v;
    assert_int_equal(oq_engine_chain_view(f->engine, ship.last, &v), 0);
    assert_int_equal(v.place, 2);
    ef_open_ok(f, NULL);
    assert_int_equal(s_held(f, "request_shipment").count, 1);
    assert_int_equal(s_held(f, "request_shipment").last, ship.last);
}

static void test_crash_before_the_firing_record_keeps_the_first_link(void **state)
{
    ef_fixture_t *f = *state;
    s_crash_after_first_ack(f, S_FIRED_RECORD_BYTES);
    s_count_t ship = s_held(f, "request_shipment");
    assert_int_equal(ship.count, 1);
    assert_int_equal(oq_engine_job_count(f->engine), 1);
    /* The chain goes on from it. */
    oq_worker_t *w = ef_lease_all(f, 'b');
    ef_ack_leased(f, w, ship.last, 1, OQ_OUTCOME_OK);
    assert_int_equal(s_held(f, "notify").count, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_each_link_follows_the_ok_of_the_one_before, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_a_final_failure_stops_the_chain_and_runs_its_catch,
                                        ef_setup, ef_teardown),
        cmocka_unit_test_setup_teardown(test_a_cancelled_link_stops_the_chain, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_the_longest_chain_fits_one_record, ef_setup,
                                        ef_teardown),
        cmocka_unit_test_setup_teardown(test_crash_before_the_next_link_dispatches_it_once,
                                        ef_setup_journal, ef_teardown),
        cmocka_unit_test_setup_teardown(test_crash_before_the_firing_record_keeps_the_first_link,
                                        ef_setup_journal, ef_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
