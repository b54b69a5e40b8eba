/*  test_failed_prune: `onceq failed prune --older-than D [--queue Q]` with
    the real broker, worker and onceq tool, on the wall clock the broker
    stamps failures with.

    Jobs fail in two rounds, S_AGE_MS + S_MARGIN_MS apart. Pruning by the
    age S_AGE_MS deletes the first round (of one queue, then of every
    queue), says how many, and keeps the second; a broker SIGKILLed right
    after the replies comes back without the pruned jobs and with the
    others. On the wire, a request's limit bounds the deletions and "more"
    says exactly whether others are due; those deletions survive a restart
    too. Bad durations are usage errors that change nothing.

    The margins are generous: the first round is at least S_AGE_MS +
    S_MARGIN_MS old when it is pruned, and the second is pruned by the same
    age within a few calls of failing, S_AGE_MS before it could be due. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "harness.h"
#include "onceq/limits.h"
#include "support.h"

#define S_CALL_MS   5000
#define S_POLL_MS   20
#define S_AGE_MS    5000 /* the age pruned by: --older-than 5s */
#define S_AGE_TEXT  "5s"
#define S_MARGIN_MS 3000 /* how much older than the age the first round is */
#define S_ROUND     2    /* jobs per queue per round */

static int s_setup(void **state)
{
    *state = it_new("failed_prune");
    return *state ? 0 : -1;
}

/* The wall clock, as the broker reads it for failed_at. */
static int64_t s_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t s_u64(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

/* The failed store: how many jobs, and the failure time of job id (0 if it
   is not there). */
static uint64_t s_failed(it_t *it, uint64_t id, int64_t *failed_at)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(it);
    oq_proto_encode_failed_request(&buf, req, NULL, OQ_MAX_FAILED_LIST);
    oq_msg_t reply;
    assert_int_equal(it_call(it, &buf, req, &reply, S_CALL_MS), 0);
    msgpack_sbuffer_destroy(&buf);
    uint64_t total = s_u64(&reply.root, "total");
    const msgpack_object *jobs = oq_proto_map_get(&reply.root, "jobs");
    if (failed_at)
        *failed_at = 0;
    for (uint32_t i = 0; failed_at && jobs && i < jobs->via.array.size; i++)
        if (s_u64(&jobs->via.array.ptr[i], "id") == id)
            *failed_at = (int64_t)s_u64(&jobs->via.array.ptr[i], "failed_at");
    oq_proto_msg_release(&reply);
    return total;
}

static void s_wait_failed(it_t *it, uint64_t want)
{
    int64_t end = it_now_ms() + IT_WAIT_MS;
    uint64_t got;
    while ((got = s_failed(it, 0, NULL)) != want) {
        if (it_now_ms() > end)
            fail_msg("%llu failed jobs, waited for %llu", (unsigned long long)got,
                     (unsigned long long)want);
        oq_support_sleep_ms(S_POLL_MS);
    }
}

/* A job of type fail that fails for good at its first try. */
static uint64_t s_dispatch_failing(it_t *it, const char *queue)
{
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    oq_proto_pack_cstr(&pk, "permanent");
    msgpack_pack_true(&pk);
    oq_job_msg_t options = {.queue = oq_str(queue), .max_tries = 1, .has_max_tries = true};
    uint64_t id = it_dispatch(it, "fail", &payload, &options);
    msgpack_sbuffer_destroy(&payload);
    assert_true(id > 0);
    return id;
}

/* S_ROUND failing jobs in alpha, then as many in beta (ids in that order). */
static void s_round(it_t *it, uint64_t ids[2 * S_ROUND])
{
    for (int i = 0; i < 2 * S_ROUND; i++)
        ids[i] = s_dispatch_failing(it, i < S_ROUND ? "alpha" : "beta");
}

static void s_restart_broker(it_t *it)
{
    it_signal(it->broker, SIGKILL);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);
    assert_true(it_start_broker(it, NULL) > 0);
}

/* prune_failed on the wire with a limit: the count, and "more". */
static uint64_t s_prune_wire(it_t *it, int64_t older_than_ms, uint32_t limit, bool *more)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(it);
    oq_proto_encode_prune_failed(&buf, req, NULL, older_than_ms, limit);
    oq_msg_t reply;
    assert_int_equal(it_call(it, &buf, req, &reply, S_CALL_MS), 0);
    msgpack_sbuffer_destroy(&buf);
    if (reply.cmd != OQ_CMD_PRUNED_FAILED)
        fail_msg("prune_failed was answered %s: %.*s", oq_proto_cmd_name(reply.cmd),
                 (int)reply.err_text.len, reply.err_text.ptr);
    const msgpack_object *m = oq_proto_map_get(&reply.root, "more");
    assert_non_null(m);
    *more = m->via.boolean;
    uint64_t count = reply.count;
    oq_proto_msg_release(&reply);
    return count;
}

static void test_prune_by_age_survives_a_kill(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    uint64_t old[2 * S_ROUND], young[2 * S_ROUND];
    s_round(it, old);
    s_wait_failed(it, 2 * S_ROUND);
    int64_t old_at = 0, at;
    for (int i = 0; i < 2 * S_ROUND; i++) {
        s_failed(it, old[i], &at);
        assert_true(at > 0);
        old_at = at > old_at ? at : old_at;
    }

    /* Bad input changes nothing. */
    it_expect_output(it_cli(it, "usage1", 2, "failed", "prune", NULL), "needs --older-than");
    it_expect_output(it_cli(it, "usage2", 2, "failed", "prune", "--older-than", "0s", NULL),
                     "--older-than");
    it_expect_output(it_cli(it, "usage3", 2, "failed", "prune", "--older-than", "5 days", NULL),
                     "not a duration");
    it_expect_output(it_cli(it, "usage4", 2, "failed", "prune", "--older-than", "5s", "42", NULL),
                     "unexpected argument");
    it_expect_output(
        it_cli(it, "usage5", 2, "failed", "prune", "--older-than", "5s", "--all", NULL),
        "does not go with");
    assert_int_equal(s_failed(it, 0, NULL), 2 * S_ROUND);

    /* The second round fails once the first is well past the age. */
    while (s_wall_ms() < old_at + S_AGE_MS + S_MARGIN_MS)
        oq_support_sleep_ms(S_POLL_MS);
    s_round(it, young);
    s_wait_failed(it, 4 * S_ROUND);
    int64_t young_at = INT64_MAX;
    for (int i = 0; i < 2 * S_ROUND; i++) {
        s_failed(it, young[i], &at);
        assert_true(at > old_at + S_AGE_MS);
        young_at = at < young_at ? at : young_at;
    }

    char want[128];
    snprintf(want, sizeof want,
             "%d failed job(s) of queue beta that failed more than " S_AGE_TEXT " ago deleted",
             S_ROUND);
    it_expect_output(it_cli(it, "beta", 0, "failed", "prune", "--older-than", S_AGE_TEXT, "--queue",
                            "beta", NULL),
                     want);
    snprintf(want, sizeof want, "%d failed job(s) that failed more than " S_AGE_TEXT " ago deleted",
             S_ROUND);
    it_expect_output(it_cli(it, "all", 0, "failed", "prune", "--older-than", S_AGE_TEXT, NULL),
                     want);

    s_restart_broker(it);
    assert_int_equal(s_failed(it, 0, NULL), 2 * S_ROUND);
    for (int i = 0; i < 2 * S_ROUND; i++) {
        s_failed(it, young[i], &at);
        if (at == 0)
            fail_msg("job %llu of the second round is gone", (unsigned long long)young[i]);
        s_failed(it, old[i], &at);
        if (at != 0)
            fail_msg("job %llu of the first round is back", (unsigned long long)old[i]);
    }
    char id[32];
    snprintf(id, sizeof id, "%llu", (unsigned long long)old[0]);
    it_expect_output(it_cli(it, "forget", 1, "failed", "forget", id, NULL), "is unknown");

    /* On the wire: one per request, and "more" exact. Once the second
       round is past the shortest age. */
    while (s_wall_ms() < young_at + 2 * OQ_MIN_PRUNE_AGE_MS)
        oq_support_sleep_ms(S_POLL_MS);
    bool more = false;
    for (int i = 0; i < 2 * S_ROUND - 1; i++) {
        assert_int_equal(s_prune_wire(it, OQ_MIN_PRUNE_AGE_MS, 1, &more), 1);
        assert_true(more);
    }
    assert_int_equal(s_prune_wire(it, OQ_MIN_PRUNE_AGE_MS, 1, &more), 1);
    assert_false(more);
    assert_int_equal(s_prune_wire(it, OQ_MIN_PRUNE_AGE_MS, 1, &more), 0);
    assert_false(more);
    it_expect_output(it_cli(it, "none", 0, "failed", "prune", "--older-than", "1s", NULL),
                     "0 failed job(s) that failed more than 1s ago deleted");
    s_restart_broker(it);
    assert_int_equal(s_failed(it, 0, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prune_by_age_survives_a_kill, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
