/*  test_shipping: request_shipment against the real onceq-carrier and a
    real PostgreSQL, one test per row of the classification table
    (docs/shipments.md), and the review store across broker SIGKILLs with
    the onceq tool. Every test ends by checking the data on both sides: the
    order's row in shipment_requests, and the carrier's own account of its
    shipments (GET /shipments): one shipment per order, however often the
    request was sent. The carrier's faults are switched with PUT /faults
    while it runs; a "forgetful" carrier is a restarted one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <sys/wait.h>

#include "harness.h"
#include "payloads.h"
#include "support.h"

#define S_TYPE "request_shipment"

static it_t *s_it;
static int s_carrier_port;
static pid_t s_carrier;
static char s_carrier_url[64];

/* ---- the carrier ---- */

typedef struct {
    char *data;
    size_t len;
} s_text_t;

static size_t s_collect(char *data, size_t size, size_t count, void *ctx)
{
    s_text_t *t = ctx;
    size_t n = size * count;
    t->data = realloc(t->data, t->len + n + 1);
    memcpy(t->data + t->len, data, n);
    t->len += n;
    t->data[t->len] = 0;
    return n;
}

/* One request to the carrier; the JSON answer (json_decref it), or NULL. */
static json_t *s_http(const char *method, const char *path, const char *body)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", s_carrier_url, path);
    CURL *curl = curl_easy_init();
    s_text_t got = {NULL, 0};
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_PROXY, "");
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &got);
    if (body)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    CURLcode rc = curl_easy_perform(curl);
    curl_easy_cleanup(curl);
    json_t *j = rc == CURLE_OK && got.data ? json_loads(got.data, 0, NULL) : NULL;
    free(got.data);
    return j;
}

static void s_faults(const char *json)
{
    json_t *j = s_http("PUT", "/faults", json);
    assert_non_null(j);
    json_decref(j);
}

/* Start the carrier on s_carrier_port (a restart forgets every shipment). */
static void s_carrier_start(const char *first_reference)
{
    char port[16];
    snprintf(port, sizeof port, "%d", s_carrier_port);
    const char *argv[] = {it_bin("onceq-carrier"), "--port",        port, "--seed", "7",
                          "--first-reference",     first_reference, NULL};
    s_carrier = it_spawn(s_it, "carrier", argv);
    assert_true(s_carrier > 0);
    int64_t end = it_now_ms() + IT_WAIT_MS;
    json_t *j;
    while (!(j = s_http("GET", "/faults", NULL))) {
        assert_true(it_now_ms() < end);
        oq_support_sleep_ms(20);
    }
    json_decref(j);
}

static void s_carrier_stop(void)
{
    it_signal(s_carrier, SIGKILL);
    assert_true(it_wait_exit(s_carrier, IT_WAIT_MS) != -1);
}

/* The carrier's shipments of order (count of them) and the first one's
   counters. */
typedef struct {
    int shipments; /* for this order */
    char reference[32];
    int64_t requests, replays, conflicts, dropped;
} s_carrier_view_t;

static s_carrier_view_t s_carrier_order(uint64_t order)
{
    s_carrier_view_t v;
    memset(&v, 0, sizeof v);
    json_t *j = s_http("GET", "/shipments", NULL);
    assert_non_null(j);
    json_t *list = json_object_get(j, "shipments");
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *s = json_array_get(list, i);
        if ((uint64_t)json_integer_value(json_object_get(s, "order_id")) != order)
            continue;
        if (v.shipments++ == 0) {
            snprintf(v.reference, sizeof v.reference, "%s",
                     json_string_value(json_object_get(s, "reference")));
            v.requests = json_integer_value(json_object_get(s, "requests"));
            v.replays = json_integer_value(json_object_get(s, "replays"));
            v.conflicts = json_integer_value(json_object_get(s, "conflicts"));
            v.dropped = json_integer_value(json_object_get(s, "dropped"));
        }
    }
    json_decref(j);
    return v;
}

/* ---- fixture ---- */

static int s_group_setup(void **state)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    s_it = it_new_pg("shipments");
    if (!s_it)
        return -1;
    s_it->stats_type = S_TYPE;
    *state = s_it;
    return 0;
}

static int s_group_teardown(void **state)
{
    it_destroy(&s_it);
    curl_global_cleanup();
    return 0;
}

static int s_setup(void **state)
{
    it_t *it = *state;
    it_kill_all(it);
    it_fresh_data_dir(it);
    it_sql(it, "TRUNCATE shipment_requests");
    s_carrier_port = oq_support_free_port();
    snprintf(s_carrier_url, sizeof s_carrier_url, "http://127.0.0.1:%d", s_carrier_port);
    s_carrier_start("1");
    return 0;
}

/* Broker and one worker that knows the carrier (or url). */
static void s_up(it_t *it, const char *url)
{
    const char *flags[] = {"--heartbeat-ms", "200", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    const char *worker_flags[] = {"--carrier-url", url ? url : s_carrier_url, NULL};
    assert_true(it_start_worker_counted(it, "worker", worker_flags, 1) > 0);
}

/* A request_shipment job for order, with a small retry budget and a short
   backoff; timeout_s bounds each try (and so each call). */
static uint64_t s_ship(it_t *it, uint64_t order, const char *address, uint32_t qty,
                       uint32_t max_tries, double timeout_s)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_payload_shipment(&buf, order, address, "MUG-1", qty);
    oq_job_msg_t options = {.max_tries = max_tries,
                            .has_max_tries = true,
                            .timeout_ms = (int64_t)(timeout_s * 1000),
                            .has_timeout = true,
                            .backoff_ms = {200},
                            .backoff_len = 1};
    uint64_t id = it_dispatch(it, S_TYPE, &buf, &options);
    msgpack_sbuffer_destroy(&buf);
    assert_true(id > 0);
    return id;
}

static bool s_settled(const it_stats_t *s, const void *arg)
{
    return s->done + s->failed + s->review >= *(const uint64_t *)arg && s->leased == 0 &&
           s->ready == 0 && s->delayed == 0;
}

static bool s_retried(const it_stats_t *s, const void *arg)
{
    return s->retried >= *(const uint64_t *)arg;
}

static it_stats_t s_wait_settled(it_t *it, uint64_t jobs)
{
    it_stats_t s;
    if (it_wait_stats(it, s_settled, &jobs, IT_WAIT_MS, &s) < 0)
        fail_msg("jobs did not settle: done %llu failed %llu review %llu ready %llu delayed %llu "
                 "leased %llu",
                 (unsigned long long)s.done, (unsigned long long)s.failed,
                 (unsigned long long)s.review, (unsigned long long)s.ready,
                 (unsigned long long)s.delayed, (unsigned long long)s.leased);
    return s;
}

/* The order's row: status, reference, attempts, reason. */
static void s_row(it_t *it, uint64_t order, const char *status, const char *reason_has,
                  int64_t min_attempts)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM shipment_requests WHERE order_id = %llu AND status = '%s' "
             "AND attempts >= %lld AND coalesce(reason, '') LIKE '%%%s%%'",
             (unsigned long long)order, status, (long long)min_attempts,
             reason_has ? reason_has : "");
    if (it_sql_int(it, sql) != 1) {
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM shipment_requests WHERE order_id = %llu AND status = '%s'",
                 (unsigned long long)order, status);
        fail_msg("order %llu: no row with status %s, attempts >= %lld and a reason with "
                 "\"%s\" (rows with that status: %lld)",
                 (unsigned long long)order, status, (long long)min_attempts,
                 reason_has ? reason_has : "", (long long)it_sql_int(it, sql));
    }
}

static void s_row_reference(it_t *it, uint64_t order, const char *reference)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM shipment_requests WHERE order_id = %llu AND reference = '%s'",
             (unsigned long long)order, reference);
    assert_int_equal(it_sql_int(it, sql), 1);
}

/* The failed job's error, from the broker's failed store. */
static char *s_failed_error(it_t *it, uint64_t id)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(it);
    oq_proto_encode_failed_page(&buf, req, NULL, 0, 100);
    oq_msg_t reply;
    assert_int_equal(it_call(it, &buf, req, &reply, IT_WAIT_MS), 0);
    msgpack_sbuffer_destroy(&buf);
    char *error = NULL;
    const msgpack_object *jobs = oq_proto_map_get(&reply.root, "jobs");
    for (uint32_t i = 0; jobs && i < jobs->via.array.size; i++) {
        const msgpack_object *job = &jobs->via.array.ptr[i];
        const msgpack_object *e = oq_proto_map_get(job, "error");
        if (oq_proto_map_get(job, "id")->via.u64 == id && e)
            error = strndup(e->via.str.ptr, e->via.str.size);
    }
    oq_proto_msg_release(&reply);
    assert_non_null(error);
    return error;
}

/* ---- the classification rows ---- */

/* 2xx: confirmed with its reference. The same order dispatched again (a
   second job): the carrier replays its first answer, confirmed again,
   counted as a duplicate; one shipment. */
static void test_created_then_replayed_confirms(void **state)
{
    it_t *it = *state;
    s_up(it, NULL);
    s_ship(it, 101, "1 Quay Street", 2, 3, 5);
    it_stats_t s = s_wait_settled(it, 1);
    assert_int_equal(s.done, 1);
    assert_int_equal(s.type_applied, 1);
    s_row(it, 101, "confirmed", NULL, 1);
    s_row_reference(it, 101, "SHP-000001");

    s_ship(it, 101, "1 Quay Street", 2, 3, 5);
    s = s_wait_settled(it, 2);
    assert_int_equal(s.done, 2);
    assert_int_equal(s.type_duplicates, 1);
    s_row(it, 101, "confirmed", NULL, 2);
    s_carrier_view_t v = s_carrier_order(101);
    assert_int_equal(v.shipments, 1);
    assert_int_equal(v.requests, 2);
    assert_int_equal(v.replays, 1);
    assert_string_equal(v.reference, "SHP-000001");
}

/* Another 4xx: failed at once with the carrier's reason, no retry. */
static void test_carrier_4xx_fails_with_its_reason(void **state)
{
    it_t *it = *state;
    s_up(it, NULL);
    uint64_t id = s_ship(it, 102, "1 Quay Street", 0 /* qty 0: the carrier refuses */, 3, 5);
    it_stats_t s = s_wait_settled(it, 1);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.retried, 0);
    char *error = s_failed_error(it, id);
    if (!strstr(error, "HTTP 400") || !strstr(error, "invalid_request") || !strstr(error, "qty"))
        fail_msg("the job's error does not carry the carrier's reason: %s", error);
    free(error);
    s_row(it, 102, "failed", "HTTP 400", 1);
    assert_int_equal(s_carrier_order(102).shipments, 0);
}

/* 5xx: retried after the backoff, confirmed once the carrier recovers. */
static void test_5xx_is_retried_with_backoff(void **state)
{
    it_t *it = *state;
    s_up(it, NULL);
    s_faults("{\"error_rate\": 1.0}");
    s_ship(it, 103, "1 Quay Street", 1, 10, 5);
    uint64_t two = 2;
    it_stats_t s;
    assert_true(it_wait_stats(it, s_retried, &two, IT_WAIT_MS, &s) >= 0);
    s_faults("{\"error_rate\": 0.0}");
    s = s_wait_settled(it, 1);
    assert_int_equal(s.done, 1);
    s_row(it, 103, "confirmed", NULL, 3);
    s_carrier_view_t v = s_carrier_order(103);
    assert_int_equal(v.shipments, 1);
    assert_int_equal(v.requests, 1); /* the 503s were never processed */
}

/* A refused connection: retried (nothing was sent), and failed once no
   tries remain. */
static void test_refused_connection_is_retried_then_fails(void **state)
{
    it_t *it = *state;
    char closed[64];
    snprintf(closed, sizeof closed, "http://127.0.0.1:%d", oq_support_free_port());
    s_up(it, closed);
    uint64_t id = s_ship(it, 104, "1 Quay Street", 1, 2, 5);
    it_stats_t s = s_wait_settled(it, 1);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.retried, 1);
    char *error = s_failed_error(it, id);
    if (!strstr(error, "connection refused") || !strstr(error, "no tries are left"))
        fail_msg("unexpected error: %s", error);
    free(error);
    s_row(it, 104, "failed", "nothing was sent", 2);
}

/* The carrier drops its reply after creating the shipment: the outcome is
   unknown, the job retries with the same key, the carrier replays, and
   there is exactly one shipment. */
static void test_dropped_reply_is_retried_with_the_same_key(void **state)
{
    it_t *it = *state;
    s_up(it, NULL);
    s_faults("{\"drop_reply_rate\": 1.0}");
    s_ship(it, 105, "1 Quay Street", 3, 10, 5);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, s_retried, &one, IT_WAIT_MS, &s) >= 0);
    s_faults("{\"drop_reply_rate\": 0.0}");
    s = s_wait_settled(it, 1);
    assert_int_equal(s.done, 1);
    assert_int_equal(s.type_duplicates, 1); /* confirmed by the replay */
    s_carrier_view_t v = s_carrier_order(105);
    assert_int_equal(v.shipments, 1);
    assert_true(v.dropped >= 1);
    assert_true(v.requests >= 2);
    assert_int_equal(v.replays, v.requests - 1);
    s_row(it, 105, "confirmed", NULL, 2);
    s_row_reference(it, 105, v.reference);
}

/* A reply slower than the call's budget (which comes from the job's
   timeout): a timeout after the request went out, retried with the same
   key; the worker's watchdog never fires. */
static void test_timeout_after_sending_is_retried_with_the_same_key(void **state)
{
    it_t *it = *state;
    s_up(it, NULL);
    s_faults("{\"delay_ms\": 5000}");
    s_ship(it, 106, "1 Quay Street", 1, 10, 2);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, s_retried, &one, IT_WAIT_MS, &s) >= 0);
    s_faults("{\"delay_ms\": 0}");
    s = s_wait_settled(it, 1);
    assert_int_equal(s.done, 1);
    s_carrier_view_t v = s_carrier_order(106);
    assert_int_equal(v.shipments, 1);
    assert_true(v.replays >= 1);
    s_row(it, 106, "confirmed", NULL, 2);
    assert_int_equal(it_log_count(it, "worker", "outcome=timeout"), 0);
}

/* The key reused with another body (422): the answer contradicts the
   record, so the job goes to review. */
static void test_key_reused_with_another_body_goes_to_review(void **state)
{
    it_t *it = *state;
    s_up(it, NULL);
    s_ship(it, 107, "1 Quay Street", 1, 3, 5);
    s_wait_settled(it, 1);
    /* The record is lost; the order comes again with another address. */
    it_sql(it, "DELETE FROM shipment_requests WHERE order_id = 107");
    s_ship(it, 107, "2 Dock Road", 1, 3, 5);
    it_stats_t s = s_wait_settled(it, 2);
    assert_int_equal(s.review, 1);
    assert_int_equal(s.retried, 0);
    s_row(it, 107, "review", "HTTP 422", 1);
    assert_int_equal(s_carrier_order(107).conflicts, 1);
}

/* The carrier forgot (restarted) and answers the key with a new shipment:
   the same key now names two shipments, which is for a person to see. */
static void test_another_shipment_for_the_key_goes_to_review(void **state)
{
    it_t *it = *state;
    s_up(it, NULL);
    s_ship(it, 108, "1 Quay Street", 1, 3, 5);
    s_wait_settled(it, 1);
    s_row_reference(it, 108, "SHP-000001");
    s_carrier_stop();
    s_carrier_start("500");
    s_ship(it, 108, "1 Quay Street", 1, 3, 5);
    it_stats_t s = s_wait_settled(it, 2);
    assert_int_equal(s.review, 1);
    s_row(it, 108, "review", "SHP-000500", 2);
    s_row_reference(it, 108, "SHP-000001"); /* kept for the person */
}

/* Bad input: a payload without an order id fails naming the field; a
   carrier URL that does not parse stops the worker at start, naming it. */
static void test_bad_input_is_refused_clearly(void **state)
{
    it_t *it = *state;
    s_up(it, NULL);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    oq_proto_pack_cstr(&pk, "address");
    oq_proto_pack_cstr(&pk, "1 Quay Street");
    uint64_t id = it_dispatch(it, S_TYPE, &buf, NULL);
    msgpack_sbuffer_destroy(&buf);
    it_stats_t s = s_wait_settled(it, 1);
    assert_int_equal(s.failed, 1);
    char *error = s_failed_error(it, id);
    assert_non_null(strstr(error, "payload field \"order_id\" is missing"));
    free(error);

    const char *bad[] = {"--carrier-url", "http//127.0.0.1:1", NULL};
    pid_t pid = it_start_worker(it, "bad-url", bad);
    int status = it_wait_exit(pid, IT_WAIT_MS);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 2);
    assert_int_equal(it_log_count(it, "bad-url", "invalid --carrier-url \"http//127.0.0.1:1\""), 1);
}

/* ---- the review store, across broker SIGKILLs, with the onceq tool ---- */

/* Run the onceq tool against the fixture's broker; its exit status, and
   its output in *out (free it). */
static int s_onceq(it_t *it, char **out, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --broker '%s' --timeout-ms 10000 %s 2>&1", it_bin("onceq"),
             it->front, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    s_text_t text = {NULL, 0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, p)) > 0)
        s_collect(chunk, 1, n, &text);
    int status = pclose(p);
    *out = text.data ? text.data : strdup("");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void s_restart_broker(it_t *it)
{
    it_signal(it->broker, SIGKILL);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) != -1);
    const char *flags[] = {"--heartbeat-ms", "200", NULL};
    assert_true(it_start_broker(it, flags) > 0);
}

static bool s_in_review(const it_stats_t *s, const void *arg)
{
    return s->review == *(const uint64_t *)arg;
}

/* No answer on any try (the carrier is slower than every call's budget):
   review once the tries run out. The job stays in review across a broker
   SIGKILL, is listed and resolved with the tool, and its resolution, with
   the note and the handler's reason, is still there after another
   SIGKILL; resolving it again, or a job never in review, is refused
   naming it. */
static void test_unknown_after_the_last_try_goes_to_review_and_is_kept(void **state)
{
    it_t *it = *state;
    s_up(it, NULL);
    s_faults("{\"delay_ms\": 5000}");
    uint64_t id = s_ship(it, 109, "1 Quay Street", 1, 2, 2);
    it_stats_t s = s_wait_settled(it, 1);
    assert_int_equal(s.review, 1);
    assert_int_equal(s.retried, 1);
    s_row(it, 109, "review", "last try", 2);
    assert_int_equal(s_carrier_order(109).shipments, 1); /* it does exist */

    s_restart_broker(it);
    uint64_t one = 1;
    assert_true(it_wait_stats(it, s_in_review, &one, IT_WAIT_MS, &s) >= 0);
    char *out, want[64];
    snprintf(want, sizeof want, "\"id\":%llu", (unsigned long long)id);
    assert_int_equal(s_onceq(it, &out, "review list --json"), 0);
    if (!strstr(out, want) || !strstr(out, "last try") || !strstr(out, "\"total\":1"))
        fail_msg("review list: %s", out);
    free(out);
    assert_int_equal(s_onceq(it, &out, "review list"), 0);
    assert_non_null(strstr(out, S_TYPE));
    free(out);
    assert_int_equal(s_onceq(it, &out, "stats"), 0);
    assert_non_null(strstr(out, "REVIEW"));
    free(out);

    char args[256];
    snprintf(args, sizeof args,
             "review resolve %llu --done --note 'the carrier shows SHP-000001 for order 109'",
             (unsigned long long)id);
    assert_int_equal(s_onceq(it, &out, args), 0);
    free(out);
    s = s_wait_settled(it, 1);
    assert_int_equal(s.review, 0);

    s_restart_broker(it);
    snprintf(args, sizeof args, "review show %llu --json", (unsigned long long)id);
    assert_int_equal(s_onceq(it, &out, args), 0);
    if (!strstr(out, "\"action\":\"done\"") ||
        !strstr(out, "the carrier shows SHP-000001 for order 109") || !strstr(out, "last try"))
        fail_msg("review show after a restart: %s", out);
    free(out);
    it_stats(it, &s);
    assert_int_equal(s.review, 0);

    snprintf(args, sizeof args, "review resolve %llu --retry", (unsigned long long)id);
    assert_int_equal(s_onceq(it, &out, args), 1);
    snprintf(want, sizeof want, "job %llu is not in review", (unsigned long long)id);
    if (!strstr(out, want) || !strstr(out, "resolved already (done"))
        fail_msg("a second resolve: %s", out);
    free(out);
    assert_int_equal(s_onceq(it, &out, "review resolve 987654 --fail"), 1);
    assert_non_null(strstr(out, "job 987654 is not in review and has no resolution on record"));
    free(out);
    assert_int_equal(s_onceq(it, &out, "review resolve 5"), 2); /* no decision given */
    free(out);
}

/* A person's retry runs the job again with a fresh budget: the carrier
   answers by now, and the order is confirmed under the same key. */
static void test_review_resolved_as_retry_runs_again(void **state)
{
    it_t *it = *state;
    s_up(it, NULL);
    s_faults("{\"drop_reply_rate\": 1.0}");
    uint64_t id = s_ship(it, 110, "1 Quay Street", 1, 1, 5);
    it_stats_t s = s_wait_settled(it, 1);
    assert_int_equal(s.review, 1);
    s_faults("{\"drop_reply_rate\": 0.0}");
    char *out, args[128];
    snprintf(args, sizeof args, "review resolve %llu --retry --note 'carrier is back'",
             (unsigned long long)id);
    assert_int_equal(s_onceq(it, &out, args), 0);
    free(out);
    s = s_wait_settled(it, 1);
    assert_int_equal(s.done, 1);
    assert_int_equal(s.review, 0);
    s_row(it, 110, "confirmed", NULL, 2);
    assert_int_equal(s_carrier_order(110).shipments, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_created_then_replayed_confirms, s_setup,
                                        it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_carrier_4xx_fails_with_its_reason, s_setup,
                                        it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_5xx_is_retried_with_backoff, s_setup,
                                        it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_refused_connection_is_retried_then_fails, s_setup,
                                        it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_dropped_reply_is_retried_with_the_same_key, s_setup,
                                        it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_timeout_after_sending_is_retried_with_the_same_key,
                                        s_setup, it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_key_reused_with_another_body_goes_to_review, s_setup,
                                        it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_another_shipment_for_the_key_goes_to_review, s_setup,
                                        it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_bad_input_is_refused_clearly, s_setup,
                                        it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_unknown_after_the_last_try_goes_to_review_and_is_kept,
                                        s_setup, it_kill_teardown),
        cmocka_unit_test_setup_teardown(test_review_resolved_as_retry_runs_again, s_setup,
                                        it_kill_teardown),
    };
    return cmocka_run_group_tests(tests, s_group_setup, s_group_teardown);
}
