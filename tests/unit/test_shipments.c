/*  test_shipments: the shipment request's pure parts: the classification
    table (every row of docs/shipments.md), the payload into the carrier's
    body and key, and the call's budget from the job's timeout. The carrier
    itself, PostgreSQL and the broker are the integration test's
    (tests/integration/test_shipping.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "shipments/classify.h"
#include "shipments/handler.h"
#include "shipments/request.h"

#define S_KEY "shipment-request:42"

static oq_carrier_answer_t s_answer(long status, const char *reference, bool replayed,
                                    const char *error, const char *message)
{
    oq_carrier_answer_t a;
    memset(&a, 0, sizeof a);
    a.transport = OQ_CARRIER_ANSWERED;
    a.status = status;
    a.replayed = replayed;
    snprintf(a.reference, sizeof a.reference, "%s", reference ? reference : "");
    snprintf(a.error, sizeof a.error, "%s", error ? error : "");
    snprintf(a.message, sizeof a.message, "%s", message ? message : "");
    return a;
}

static oq_carrier_answer_t s_transport(oq_carrier_transport_t transport, bool timed_out,
                                       const char *message)
{
    oq_carrier_answer_t a;
    memset(&a, 0, sizeof a);
    a.transport = transport;
    a.timed_out = timed_out;
    snprintf(a.message, sizeof a.message, "%s", message);
    return a;
}

static oq_shipment_outcome_t s_classify(const oq_carrier_answer_t *a, const char *recorded,
                                        bool last_try)
{
    oq_shipment_outcome_t out;
    oq_shipment_classify(a, S_KEY, recorded, last_try, &out);
    return out;
}

static void s_reason_has(const oq_shipment_outcome_t *out, const char *text)
{
    if (!strstr(out->reason, text))
        fail_msg("reason \"%s\" does not say \"%s\"", out->reason, text);
}

static void test_2xx_confirms_with_its_reference(void **state)
{
    oq_carrier_answer_t a = s_answer(201, "SHP-000001", false, NULL, NULL);
    oq_shipment_outcome_t out = s_classify(&a, "", false);
    assert_int_equal(out.verdict, OQ_SHIPMENT_CONFIRMED);
    assert_string_equal(out.reference, "SHP-000001");
    assert_false(out.replayed);
    /* The same on the last try, and with the same reference recorded. */
    out = s_classify(&a, "SHP-000001", true);
    assert_int_equal(out.verdict, OQ_SHIPMENT_CONFIRMED);
}

static void test_replayed_confirms(void **state)
{
    oq_carrier_answer_t a = s_answer(201, "SHP-000007", true, NULL, NULL);
    oq_shipment_outcome_t out = s_classify(&a, NULL, false);
    assert_int_equal(out.verdict, OQ_SHIPMENT_CONFIRMED);
    assert_true(out.replayed);
    assert_string_equal(out.reference, "SHP-000007");
}

static void test_another_reference_than_recorded_is_review(void **state)
{
    oq_carrier_answer_t a = s_answer(201, "SHP-000500", false, NULL, NULL);
    oq_shipment_outcome_t out = s_classify(&a, "SHP-000001", false);
    assert_int_equal(out.verdict, OQ_SHIPMENT_REVIEW);
    s_reason_has(&out, "SHP-000500");
    s_reason_has(&out, "SHP-000001");
    s_reason_has(&out, S_KEY);
}

static void test_2xx_without_reference_is_review(void **state)
{
    oq_carrier_answer_t a = s_answer(200, NULL, false, NULL, NULL);
    assert_int_equal(s_classify(&a, "", false).verdict, OQ_SHIPMENT_REVIEW);
}

static void test_key_reuse_422_is_review(void **state)
{
    oq_carrier_answer_t a =
        s_answer(422, "SHP-000003", false, "idempotency_key_reused", "key used with another body");
    oq_shipment_outcome_t out = s_classify(&a, "", false);
    assert_int_equal(out.verdict, OQ_SHIPMENT_REVIEW);
    s_reason_has(&out, "422");
    s_reason_has(&out, "SHP-000003");
    s_reason_has(&out, "idempotency_key_reused");
}

static void test_other_4xx_fails_with_the_carriers_reason(void **state)
{
    const long statuses[] = {400, 404, 409, 413};
    for (size_t i = 0; i < 4; i++) {
        oq_carrier_answer_t a =
            s_answer(statuses[i], NULL, false, "invalid_request", "items[0].qty must be 1 or more");
        oq_shipment_outcome_t out = s_classify(&a, "", false);
        assert_int_equal(out.verdict, OQ_SHIPMENT_FAILED);
        s_reason_has(&out, "items[0].qty must be 1 or more");
        s_reason_has(&out, "invalid_request");
    }
}

static void test_5xx_retries_and_fails_without_tries(void **state)
{
    const long statuses[] = {500, 502, 503, 507};
    for (size_t i = 0; i < 4; i++) {
        oq_carrier_answer_t a = s_answer(statuses[i], NULL, false, "injected_error", "try later");
        assert_int_equal(s_classify(&a, "", false).verdict, OQ_SHIPMENT_RETRY);
        oq_shipment_outcome_t out = s_classify(&a, "", true);
        assert_int_equal(out.verdict, OQ_SHIPMENT_FAILED);
        s_reason_has(&out, "no tries are left");
    }
}

static void test_not_reached_retries_nothing_was_sent(void **state)
{
    const oq_carrier_transport_t ways[] = {OQ_CARRIER_REFUSED, OQ_CARRIER_DNS,
                                           OQ_CARRIER_UNREACHABLE};
    const char *says[] = {"connection refused", "host name not resolved", "no connection in time"};
    for (size_t i = 0; i < 3; i++) {
        oq_carrier_answer_t a = s_transport(ways[i], i == 2, "libcurl says so");
        oq_shipment_outcome_t out = s_classify(&a, "", false);
        assert_int_equal(out.verdict, OQ_SHIPMENT_RETRY);
        s_reason_has(&out, says[i]);
        s_reason_has(&out, "nothing was sent");
        assert_int_equal(s_classify(&a, "", true).verdict, OQ_SHIPMENT_FAILED);
    }
}

static void test_no_answer_retries_with_the_same_key_then_review(void **state)
{
    oq_carrier_answer_t a = s_transport(OQ_CARRIER_NO_ANSWER, true, "Operation timed out");
    oq_shipment_outcome_t out = s_classify(&a, "", false);
    assert_int_equal(out.verdict, OQ_SHIPMENT_RETRY);
    s_reason_has(&out, "same key");
    s_reason_has(&out, S_KEY);
    out = s_classify(&a, "", true);
    assert_int_equal(out.verdict, OQ_SHIPMENT_REVIEW);
    s_reason_has(&out, "last try");
    /* An empty reply (the carrier dropped it) is the same case. */
    a = s_transport(OQ_CARRIER_NO_ANSWER, false, "Empty reply from server");
    assert_int_equal(s_classify(&a, "", false).verdict, OQ_SHIPMENT_RETRY);
}

static void test_bad_url_and_odd_statuses(void **state)
{
    oq_carrier_answer_t a = s_transport(OQ_CARRIER_BAD_URL, false, "URL rejected");
    assert_int_equal(s_classify(&a, "", false).verdict, OQ_SHIPMENT_FAILED);
    a = s_answer(302, NULL, false, NULL, NULL);
    assert_int_equal(s_classify(&a, "", false).verdict, OQ_SHIPMENT_REVIEW);
    assert_string_equal(oq_shipment_verdict_name(OQ_SHIPMENT_REVIEW), "review");
}

/* ---- the payload ---- */

static void s_pack_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* Decode a payload built by fill; rc and the request or why. */
static int s_decode(void (*fill)(msgpack_packer *pk), oq_shipment_request_t *request, char *why)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    fill(&pk);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, buf.data, buf.size, NULL), MSGPACK_UNPACK_SUCCESS);
    int rc = oq_shipment_request_decode(&u.data, request, why, 256);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&buf);
    return rc;
}

static void s_full(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    s_pack_str(pk, "items"); /* out of order on purpose: the body sorts keys */
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 2);
    s_pack_str(pk, "qty");
    msgpack_pack_uint32(pk, 2);
    s_pack_str(pk, "sku");
    s_pack_str(pk, "MUG-1");
    s_pack_str(pk, "address");
    s_pack_str(pk, "1 Quay Street");
    s_pack_str(pk, "order_id");
    msgpack_pack_uint64(pk, 42);
}

static void s_no_order(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    s_pack_str(pk, "address");
    s_pack_str(pk, "1 Quay Street");
}

static void s_order_zero(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    s_pack_str(pk, "order_id");
    msgpack_pack_uint64(pk, 0);
    s_pack_str(pk, "address");
    s_pack_str(pk, "x");
}

static void s_no_address(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    s_pack_str(pk, "order_id");
    msgpack_pack_uint64(pk, 7);
}

static void s_bad_item(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 3);
    s_pack_str(pk, "order_id");
    msgpack_pack_uint64(pk, 7);
    s_pack_str(pk, "address");
    s_pack_str(pk, "x");
    s_pack_str(pk, "items");
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 1);
    s_pack_str(pk, "sku");
    msgpack_pack_uint32(pk, 5);
}

static void test_payload_gives_the_key_and_one_body(void **state)
{
    oq_shipment_request_t r;
    char why[256];
    assert_int_equal(s_decode(s_full, &r, why), 0);
    assert_int_equal(r.order_id, 42);
    assert_string_equal(r.key, "shipment-request:42");
    assert_string_equal(r.body, "{\"address\":\"1 Quay Street\",\"items\":[{\"qty\":2,\"sku\":"
                                "\"MUG-1\"}],\"order_id\":42}");
    oq_shipment_request_clear(&r);

    assert_int_equal(s_decode(s_no_order, &r, why), -1);
    assert_non_null(strstr(why, "\"order_id\" is missing"));
    assert_int_equal(s_decode(s_order_zero, &r, why), -1);
    assert_non_null(strstr(why, "\"order_id\" must be an integer from 1"));
    assert_int_equal(s_decode(s_no_address, &r, why), -1);
    assert_non_null(strstr(why, "\"address\" is missing"));
    assert_int_equal(s_decode(s_bad_item, &r, why), -1);
    assert_non_null(strstr(why, "item 0: \"sku\" must be a string"));
    assert_null(r.body);
}

/* The call fits in the job's timeout with room for the database, and
   connecting takes at most half of it. */
static void test_call_budget_stays_inside_the_timeout(void **state)
{
    const int64_t timeouts[] = {200, 2000, 10000, 60000, 24LL * 3600 * 1000};
    for (size_t i = 0; i < 5; i++) {
        int64_t connect, total;
        oq_shipments_call_budget(timeouts[i], &connect, &total);
        assert_true(total < timeouts[i]);
        assert_true(total >= timeouts[i] / 2);
        assert_true(connect <= total / 2 && connect > 0);
        assert_true(connect <= 5000);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_2xx_confirms_with_its_reference),
        cmocka_unit_test(test_replayed_confirms),
        cmocka_unit_test(test_another_reference_than_recorded_is_review),
        cmocka_unit_test(test_2xx_without_reference_is_review),
        cmocka_unit_test(test_key_reuse_422_is_review),
        cmocka_unit_test(test_other_4xx_fails_with_the_carriers_reason),
        cmocka_unit_test(test_5xx_retries_and_fails_without_tries),
        cmocka_unit_test(test_not_reached_retries_nothing_was_sent),
        cmocka_unit_test(test_no_answer_retries_with_the_same_key_then_review),
        cmocka_unit_test(test_bad_url_and_odd_statuses),
        cmocka_unit_test(test_payload_gives_the_key_and_one_body),
        cmocka_unit_test(test_call_budget_stays_inside_the_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
