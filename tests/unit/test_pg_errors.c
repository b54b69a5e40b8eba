/*  test_pg_errors.c: the SQLSTATE classification of the effects SDK
    (onceq/effects.h): every code the table names, the class fallbacks, the
    two connection facts that come before the table, and the verdict each
    class maps to, and which classes are infrastructure (the database
    failed, not the job). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include "onceq/effects.h"

typedef struct {
    const char *sqlstate;
    oq_pg_class_t cls;
} s_case_t;

#define S_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* With the connection up and the statement not COMMIT. */
static const s_case_t s_cases[] = {
    /* the two that retry the transaction in place */
    {"40001", OQ_PG_ERR_RETRY_TXN},
    {"40P01", OQ_PG_ERR_RETRY_TXN},
    /* the server cannot say whether it completed */
    {"40003", OQ_PG_ERR_UNKNOWN},
    /* other transaction rollbacks: retry the job */
    {"40000", OQ_PG_ERR_TRANSIENT},
    {"40002", OQ_PG_ERR_TRANSIENT},
    /* the session is being ended */
    {"57P01", OQ_PG_ERR_CONNECTION},
    {"57P02", OQ_PG_ERR_CONNECTION},
    {"57P03", OQ_PG_ERR_CONNECTION},
    {"57P05", OQ_PG_ERR_CONNECTION},
    {"25P03", OQ_PG_ERR_CONNECTION},
    {"08006", OQ_PG_ERR_CONNECTION},
    {"08003", OQ_PG_ERR_CONNECTION},
    {"08000", OQ_PG_ERR_CONNECTION},
    {"08001", OQ_PG_ERR_CONNECTION},
    {"08004", OQ_PG_ERR_CONNECTION},
    /* no connection slot left: infrastructure, not a resource the
       statement ran out of */
    {"53300", OQ_PG_ERR_CONNECTION},
    /* timeouts, resources, locks: retry the job */
    {"57014", OQ_PG_ERR_TRANSIENT},
    {"57000", OQ_PG_ERR_TRANSIENT},
    {"53100", OQ_PG_ERR_TRANSIENT},
    {"53200", OQ_PG_ERR_TRANSIENT},
    {"55P03", OQ_PG_ERR_TRANSIENT},
    {"55006", OQ_PG_ERR_TRANSIENT},
    {"58030", OQ_PG_ERR_TRANSIENT},
    {"72000", OQ_PG_ERR_TRANSIENT},
    /* data and schema errors: fail the job */
    {"22003", OQ_PG_ERR_FAIL},
    {"22P02", OQ_PG_ERR_FAIL},
    {"23505", OQ_PG_ERR_FAIL},
    {"23503", OQ_PG_ERR_FAIL},
    {"23514", OQ_PG_ERR_FAIL},
    {"42P01", OQ_PG_ERR_FAIL},
    {"42601", OQ_PG_ERR_FAIL},
    {"55000", OQ_PG_ERR_FAIL},
    {"25001", OQ_PG_ERR_FAIL},
    {"XX000", OQ_PG_ERR_FAIL},
    /* a family no rule names */
    {"HV000", OQ_PG_ERR_FAIL},
};

static void test_table(void **state)
{
    for (size_t i = 0; i < S_COUNT(s_cases); i++) {
        oq_pg_class_t got = oq_pg_errors_classify(s_cases[i].sqlstate, true, false);
        if (got != s_cases[i].cls)
            fail_msg("SQLSTATE %s: %s, expected %s", s_cases[i].sqlstate,
                     oq_pg_errors_class_name(got), oq_pg_errors_class_name(s_cases[i].cls));
    }
}

/* An error answer to COMMIT is the server saying it rolled back: classified
   like any other statement's. */
static void test_commit_answered_is_not_unknown(void **state)
{
    assert_int_equal(oq_pg_errors_classify("40001", true, true), OQ_PG_ERR_RETRY_TXN);
    assert_int_equal(oq_pg_errors_classify("40P01", true, true), OQ_PG_ERR_RETRY_TXN);
    assert_int_equal(oq_pg_errors_classify("23505", true, true), OQ_PG_ERR_FAIL);
    assert_int_equal(oq_pg_errors_classify("57014", true, true), OQ_PG_ERR_TRANSIENT);
}

/* A connection gone after the error: retry the job, and during COMMIT the
   outcome is unknown, whatever the SQLSTATE said. */
static void test_connection_lost(void **state)
{
    assert_int_equal(oq_pg_errors_classify(NULL, false, false), OQ_PG_ERR_CONNECTION);
    assert_int_equal(oq_pg_errors_classify("", false, false), OQ_PG_ERR_CONNECTION);
    assert_int_equal(oq_pg_errors_classify("57P01", false, false), OQ_PG_ERR_CONNECTION);
    assert_int_equal(oq_pg_errors_classify("22003", false, false), OQ_PG_ERR_CONNECTION);
    assert_int_equal(oq_pg_errors_classify(NULL, false, true), OQ_PG_ERR_UNKNOWN);
    assert_int_equal(oq_pg_errors_classify("57P01", false, true), OQ_PG_ERR_UNKNOWN);
    assert_int_equal(oq_pg_errors_classify("08006", false, true), OQ_PG_ERR_UNKNOWN);
}

/* libpq's own errors carry no SQLSTATE. */
static void test_no_sqlstate(void **state)
{
    assert_int_equal(oq_pg_errors_classify(NULL, true, false), OQ_PG_ERR_TRANSIENT);
    assert_int_equal(oq_pg_errors_classify(NULL, true, true), OQ_PG_ERR_UNKNOWN);
    assert_int_equal(oq_pg_errors_classify("4000", true, false), OQ_PG_ERR_TRANSIENT);
    assert_int_equal(oq_pg_errors_classify("400011", true, false), OQ_PG_ERR_TRANSIENT);
}

/* Infrastructure: the database, or the way to it, failed; the job is not
   at fault and must not lose a try. Each of the conditions, as the
   classification sees it. */
static void test_infrastructure(void **state)
{
    static const struct {
        const char *what;
        const char *sqlstate;
        bool connection_ok, in_commit;
    } infra[] = {
        {"cannot connect (refused, unreachable)", NULL, false, false},
        {"too many connections", "53300", false, false},
        {"too many connections, session still up (dblink)", "53300", true, false},
        {"admin shutdown", "57P01", false, false},
        {"admin shutdown, not yet noticed by libpq", "57P01", true, false},
        {"crash shutdown", "57P02", false, false},
        {"cannot connect now", "57P03", false, false},
        {"cannot connect now, answered", "57P03", true, false},
        {"connection exception", "08006", true, false},
        {"connection lost mid-transaction", NULL, false, false},
        {"connection lost mid-transaction, with a code", "40001", false, false},
        {"COMMIT outcome unknown", NULL, false, true},
        {"COMMIT outcome unknown, with a code", "57P01", false, true},
    };
    for (size_t i = 0; i < S_COUNT(infra); i++) {
        oq_pg_class_t cls =
            oq_pg_errors_classify(infra[i].sqlstate, infra[i].connection_ok, infra[i].in_commit);
        if (!oq_pg_errors_infrastructure(cls))
            fail_msg("%s: class %s is not infrastructure", infra[i].what,
                     oq_pg_errors_class_name(cls));
    }
    /* The job's own problems are not: its data, a collision the runner
       re-runs in place, its statement timeout, a lock, a full disk. */
    static const char *const not_infra[] = {"22003", "23505", "42P01", "40001", "40P01",
                                            "57014", "55P03", "53100", "XX000"};
    for (size_t i = 0; i < S_COUNT(not_infra); i++) {
        oq_pg_class_t cls = oq_pg_errors_classify(not_infra[i], true, false);
        if (oq_pg_errors_infrastructure(cls))
            fail_msg("SQLSTATE %s: class %s is infrastructure", not_infra[i],
                     oq_pg_errors_class_name(cls));
    }
    assert_true(oq_pg_errors_infrastructure(OQ_PG_ERR_CONNECTION));
    assert_true(oq_pg_errors_infrastructure(OQ_PG_ERR_UNKNOWN));
    assert_false(oq_pg_errors_infrastructure(OQ_PG_ERR_NONE));
    assert_false(oq_pg_errors_infrastructure(OQ_PG_ERR_RETRY_TXN));
    assert_false(oq_pg_errors_infrastructure(OQ_PG_ERR_TRANSIENT));
    assert_false(oq_pg_errors_infrastructure(OQ_PG_ERR_FAIL));
}

static void test_outcomes(void **state)
{
    assert_int_equal(oq_pg_errors_verdict(OQ_PG_ERR_NONE), OQ_EFFECTS_OK);
    assert_int_equal(oq_pg_errors_verdict(OQ_PG_ERR_RETRY_TXN), OQ_EFFECTS_RETRY);
    assert_int_equal(oq_pg_errors_verdict(OQ_PG_ERR_CONNECTION), OQ_EFFECTS_UNAVAILABLE);
    assert_string_equal(oq_effects_verdict_name(OQ_EFFECTS_UNAVAILABLE), "unavailable");
    assert_int_equal(oq_pg_errors_verdict(OQ_PG_ERR_UNKNOWN), OQ_EFFECTS_UNKNOWN);
    assert_int_equal(oq_pg_errors_verdict(OQ_PG_ERR_TRANSIENT), OQ_EFFECTS_RETRY);
    assert_int_equal(oq_pg_errors_verdict(OQ_PG_ERR_FAIL), OQ_EFFECTS_FAIL);
    assert_string_equal(oq_effects_verdict_name(OQ_EFFECTS_UNKNOWN), "unknown");
}

static void test_set_makes_one_line(void **state)
{
    oq_pg_error_t error;
    oq_pg_errors_set(&error, OQ_PG_ERR_CONNECTION, NULL,
                     "server closed the connection unexpectedly\n\tThis probably means %s\n",
                     "the server terminated abnormally");
    assert_string_equal(error.message, "server closed the connection unexpectedly This probably "
                                       "means the server terminated abnormally");
    assert_string_equal(error.sqlstate, "");
    assert_int_equal(error.cls, OQ_PG_ERR_CONNECTION);

    oq_pg_errors_set(&error, OQ_PG_ERR_FAIL, "23505", "  duplicate key  ");
    assert_string_equal(error.message, "duplicate key");
    assert_string_equal(error.sqlstate, "23505");

    /* A message longer than the buffer is cut, not overrun. */
    char long_text[2 * OQ_PG_MAX_ERROR_LEN];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = 0;
    oq_pg_errors_set(&error, OQ_PG_ERR_FAIL, NULL, "%s", long_text);
    assert_int_equal(strlen(error.message), OQ_PG_MAX_ERROR_LEN);

    oq_pg_errors_clear(&error);
    assert_int_equal(error.cls, OQ_PG_ERR_NONE);
    assert_string_equal(error.message, "");
}

static void test_hints(void **state)
{
    oq_pg_error_t error;
    oq_pg_errors_set(&error, OQ_PG_ERR_FAIL, "42P01", "relation \"point_grants\" does not exist");
    assert_non_null(oq_pg_errors_hint(&error));
    assert_non_null(strstr(oq_pg_errors_hint(&error), "onceq db migrate"));
    oq_pg_errors_set(&error, OQ_PG_ERR_FAIL, "22003", "bigint out of range");
    assert_null(oq_pg_errors_hint(&error));
}

static void test_names(void **state)
{
    assert_string_equal(oq_pg_errors_class_name(OQ_PG_ERR_RETRY_TXN), "retry_txn");
    assert_string_equal(oq_pg_errors_class_name(OQ_PG_ERR_UNKNOWN), "unknown");
    assert_string_equal(oq_pg_errors_class_name(OQ_PG_ERR_FAIL), "fail");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_commit_answered_is_not_unknown),
        cmocka_unit_test(test_connection_lost),
        cmocka_unit_test(test_no_sqlstate),
        cmocka_unit_test(test_infrastructure),
        cmocka_unit_test(test_outcomes),
        cmocka_unit_test(test_set_makes_one_line),
        cmocka_unit_test(test_hints),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
