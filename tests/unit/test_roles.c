/*  test_roles.c: who may send what: the roles column of the broker's
    command table (broker/commands.h) for each role's commands, nothing for
    no role, nothing for a command the table does not name or on a socket
    its row does not name; and the role names of broker/roles.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "commands.h"
#include "roles.h"

static void test_producer(void **state)
{
    (void)state;
    oq_role_t r = OQ_ROLE_PRODUCER;
    assert_true(oq_command_allows(r, OQ_SIDE_FRONT, OQ_CMD_DISPATCH));
    assert_true(oq_command_allows(r, OQ_SIDE_FRONT, OQ_CMD_PING));
    assert_true(oq_command_allows(r, OQ_SIDE_FRONT, OQ_CMD_STATS));
    const oq_cmd_t admin_only[] = {OQ_CMD_FAILED,  OQ_CMD_REQUEUE,      OQ_CMD_REQUEUE_ALL,
                                   OQ_CMD_FORGET,  OQ_CMD_FLUSH,        OQ_CMD_CANCEL,
                                   OQ_CMD_HORIZON, OQ_CMD_REVIEW,       OQ_CMD_REVIEW_SHOW,
                                   OQ_CMD_RESOLVE, OQ_CMD_PRUNE_FAILED, OQ_CMD_CLEAR};
    for (size_t i = 0; i < sizeof admin_only / sizeof admin_only[0]; i++)
        assert_false(oq_command_allows(r, OQ_SIDE_FRONT, admin_only[i]));
    for (oq_cmd_t c = OQ_CMD_READY; c <= OQ_CMD_DISCONNECT; c++)
        assert_false(oq_command_allows(r, OQ_SIDE_BACK, c));
    assert_false(oq_command_allows(r, OQ_SIDE_BACK, OQ_CMD_TOUCH));
    assert_false(oq_command_allows(r, OQ_SIDE_BACK, OQ_CMD_STATUS));
}

static void test_worker(void **state)
{
    (void)state;
    oq_role_t r = OQ_ROLE_WORKER;
    const oq_cmd_t back[] = {OQ_CMD_READY, OQ_CMD_HEARTBEAT,  OQ_CMD_ACK,   OQ_CMD_TOUCH,
                             OQ_CMD_DRAIN, OQ_CMD_DISCONNECT, OQ_CMD_STATUS};
    for (size_t i = 0; i < sizeof back / sizeof back[0]; i++)
        assert_true(oq_command_allows(r, OQ_SIDE_BACK, back[i]));
    const oq_cmd_t front[] = {OQ_CMD_DISPATCH, OQ_CMD_PING, OQ_CMD_STATS, OQ_CMD_FAILED,
                              OQ_CMD_REQUEUE};
    for (size_t i = 0; i < sizeof front / sizeof front[0]; i++)
        assert_false(oq_command_allows(r, OQ_SIDE_FRONT, front[i]));
}

static void test_admin(void **state)
{
    (void)state;
    oq_role_t r = OQ_ROLE_ADMIN;
    const oq_cmd_t front[] = {
        OQ_CMD_DISPATCH,    OQ_CMD_PING,        OQ_CMD_STATS,   OQ_CMD_FAILED,       OQ_CMD_REQUEUE,
        OQ_CMD_REQUEUE_ALL, OQ_CMD_FORGET,      OQ_CMD_FLUSH,   OQ_CMD_CANCEL,       OQ_CMD_HORIZON,
        OQ_CMD_REVIEW,      OQ_CMD_REVIEW_SHOW, OQ_CMD_RESOLVE, OQ_CMD_PRUNE_FAILED, OQ_CMD_CLEAR};
    for (size_t i = 0; i < sizeof front / sizeof front[0]; i++)
        assert_true(oq_command_allows(r, OQ_SIDE_FRONT, front[i]));
    /* An admin key does not make a worker. */
    assert_false(oq_command_allows(r, OQ_SIDE_BACK, OQ_CMD_READY));
    assert_false(oq_command_allows(r, OQ_SIDE_BACK, OQ_CMD_ACK));
}

static void test_no_role_sends_nothing(void **state)
{
    (void)state;
    for (oq_cmd_t c = OQ_CMD_UNKNOWN; c < OQ_CMD_COUNT_; c++) {
        assert_false(oq_command_allows(OQ_ROLE_NONE, OQ_SIDE_FRONT, c));
        assert_false(oq_command_allows(OQ_ROLE_NONE, OQ_SIDE_BACK, c));
        assert_false(oq_command_allows(OQ_ROLE_COUNT_, OQ_SIDE_FRONT, c));
    }
}

/* A command no row names (OQ_CMD_COUNT_ stands in for one added to the
   protocol without a row) is sent by nobody: the gate answers it
   "unknown_command" before any role is asked. */
static void test_unnamed_commands_are_nobodys(void **state)
{
    (void)state;
    oq_cmd_t later = OQ_CMD_COUNT_;
    for (oq_role_t r = OQ_ROLE_NONE; r < OQ_ROLE_COUNT_; r++) {
        assert_false(oq_command_allows(r, OQ_SIDE_FRONT, later));
        assert_false(oq_command_allows(r, OQ_SIDE_BACK, later));
    }
    assert_null(oq_command_find(later));
    assert_null(oq_command_find(OQ_CMD_UNKNOWN));
    /* Replies have no row: a peer may not send them. */
    assert_null(oq_command_find(OQ_CMD_DISPATCHED));
    assert_null(oq_command_find(OQ_CMD_JOB));
}

/* Every row is whole: one row per command, a handler, some role, and the
   front's durable rows are the changes a restart must keep. */
static void test_every_row_is_whole(void **state)
{
    (void)state;
    size_t count;
    const oq_command_t *rows = oq_command_table(&count);
    assert_true(count > 0);
    for (size_t i = 0; i < count; i++) {
        assert_non_null(rows[i].handler);
        assert_int_not_equal(rows[i].roles, 0);
        assert_ptr_equal(oq_command_find(rows[i].cmd), &rows[i]);
        assert_false(rows[i].durable && rows[i].side == OQ_SIDE_BACK);
        /* A command belongs on one socket only. */
        oq_side_t other = rows[i].side == OQ_SIDE_FRONT ? OQ_SIDE_BACK : OQ_SIDE_FRONT;
        for (oq_role_t r = OQ_ROLE_NONE; r < OQ_ROLE_COUNT_; r++)
            assert_false(oq_command_allows(r, other, rows[i].cmd));
    }
    const oq_cmd_t durable[] = {OQ_CMD_DISPATCH, OQ_CMD_REQUEUE,      OQ_CMD_REQUEUE_ALL,
                                OQ_CMD_FORGET,   OQ_CMD_FLUSH,        OQ_CMD_CANCEL,
                                OQ_CMD_RESOLVE,  OQ_CMD_PRUNE_FAILED, OQ_CMD_CLEAR};
    for (size_t i = 0; i < sizeof durable / sizeof durable[0]; i++)
        assert_true(oq_command_find(durable[i])->durable);
    assert_false(oq_command_find(OQ_CMD_STATS)->durable);
    assert_false(oq_command_find(OQ_CMD_HORIZON)->durable);
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
        cmocka_unit_test(test_unnamed_commands_are_nobodys),
        cmocka_unit_test(test_every_row_is_whole),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
