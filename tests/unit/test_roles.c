/*  test_roles.c: the command -> roles table (broker/roles.h): each role's
    commands, nothing for no role, and the rule for commands the table does
    not name (admin-only on the front, worker-only on the back). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "roles.h"

static void test_producer(void **state)
{
    (void)state;
    oq_role_t r = OQ_ROLE_PRODUCER;
    assert_true(oq_roles_allow(r, OQ_SIDE_FRONT, OQ_CMD_DISPATCH));
    assert_true(oq_roles_allow(r, OQ_SIDE_FRONT, OQ_CMD_PING));
    assert_true(oq_roles_allow(r, OQ_SIDE_FRONT, OQ_CMD_STATS));
    const oq_cmd_t admin_only[] = {OQ_CMD_FAILED,  OQ_CMD_REQUEUE,     OQ_CMD_REQUEUE_ALL,
                                   OQ_CMD_FORGET,  OQ_CMD_FLUSH,       OQ_CMD_CANCEL,
                                   OQ_CMD_HORIZON, OQ_CMD_REVIEW,      OQ_CMD_REVIEW_SHOW,
                                   OQ_CMD_RESOLVE, OQ_CMD_PRUNE_FAILED};
    for (size_t i = 0; i < sizeof admin_only / sizeof admin_only[0]; i++)
        assert_false(oq_roles_allow(r, OQ_SIDE_FRONT, admin_only[i]));
    for (oq_cmd_t c = OQ_CMD_READY; c <= OQ_CMD_DISCONNECT; c++)
        assert_false(oq_roles_allow(r, OQ_SIDE_BACK, c));
    assert_false(oq_roles_allow(r, OQ_SIDE_BACK, OQ_CMD_TOUCH));
    assert_false(oq_roles_allow(r, OQ_SIDE_BACK, OQ_CMD_STATUS));
}

static void test_worker(void **state)
{
    (void)state;
    oq_role_t r = OQ_ROLE_WORKER;
    const oq_cmd_t back[] = {OQ_CMD_READY, OQ_CMD_HEARTBEAT,  OQ_CMD_ACK,   OQ_CMD_TOUCH,
                             OQ_CMD_DRAIN, OQ_CMD_DISCONNECT, OQ_CMD_STATUS};
    for (size_t i = 0; i < sizeof back / sizeof back[0]; i++)
        assert_true(oq_roles_allow(r, OQ_SIDE_BACK, back[i]));
    const oq_cmd_t front[] = {OQ_CMD_DISPATCH, OQ_CMD_PING, OQ_CMD_STATS, OQ_CMD_FAILED,
                              OQ_CMD_REQUEUE};
    for (size_t i = 0; i < sizeof front / sizeof front[0]; i++)
        assert_false(oq_roles_allow(r, OQ_SIDE_FRONT, front[i]));
}

static void test_admin(void **state)
{
    (void)state;
    oq_role_t r = OQ_ROLE_ADMIN;
    const oq_cmd_t front[] = {
        OQ_CMD_DISPATCH,    OQ_CMD_PING,        OQ_CMD_STATS,   OQ_CMD_FAILED,      OQ_CMD_REQUEUE,
        OQ_CMD_REQUEUE_ALL, OQ_CMD_FORGET,      OQ_CMD_FLUSH,   OQ_CMD_CANCEL,      OQ_CMD_HORIZON,
        OQ_CMD_REVIEW,      OQ_CMD_REVIEW_SHOW, OQ_CMD_RESOLVE, OQ_CMD_PRUNE_FAILED};
    for (size_t i = 0; i < sizeof front / sizeof front[0]; i++)
        assert_true(oq_roles_allow(r, OQ_SIDE_FRONT, front[i]));
    /* An admin key does not make a worker. */
    assert_false(oq_roles_allow(r, OQ_SIDE_BACK, OQ_CMD_READY));
    assert_false(oq_roles_allow(r, OQ_SIDE_BACK, OQ_CMD_ACK));
}

static void test_no_role_sends_nothing(void **state)
{
    (void)state;
    for (oq_cmd_t c = OQ_CMD_UNKNOWN; c < OQ_CMD_COUNT_; c++) {
        assert_false(oq_roles_allow(OQ_ROLE_NONE, OQ_SIDE_FRONT, c));
        assert_false(oq_roles_allow(OQ_ROLE_NONE, OQ_SIDE_BACK, c));
        assert_false(oq_roles_allow(OQ_ROLE_COUNT_, OQ_SIDE_FRONT, c));
    }
}

/* A command added later and not in the table: a front one is the admin's
   alone, a back one the worker's. (OQ_CMD_COUNT_ stands in for it.) */
static void test_unnamed_commands_follow_their_socket(void **state)
{
    (void)state;
    oq_cmd_t later = OQ_CMD_COUNT_;
    assert_true(oq_roles_allow(OQ_ROLE_ADMIN, OQ_SIDE_FRONT, later));
    assert_false(oq_roles_allow(OQ_ROLE_PRODUCER, OQ_SIDE_FRONT, later));
    assert_false(oq_roles_allow(OQ_ROLE_WORKER, OQ_SIDE_FRONT, later));
    assert_true(oq_roles_allow(OQ_ROLE_WORKER, OQ_SIDE_BACK, later));
    assert_false(oq_roles_allow(OQ_ROLE_ADMIN, OQ_SIDE_BACK, later));
    assert_false(oq_roles_allow(OQ_ROLE_PRODUCER, OQ_SIDE_BACK, later));
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(oq_role_name(OQ_ROLE_PRODUCER), "producer");
    assert_string_equal(oq_role_plural(OQ_ROLE_WORKER), "workers");
    assert_string_equal(oq_role_plural(OQ_ROLE_ADMIN), "admins");
    assert_string_equal(oq_role_name(OQ_ROLE_NONE), "none");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_producer),
        cmocka_unit_test(test_worker),
        cmocka_unit_test(test_admin),
        cmocka_unit_test(test_no_role_sends_nothing),
        cmocka_unit_test(test_unnamed_commands_follow_their_socket),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
