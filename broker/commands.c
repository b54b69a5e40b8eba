/*  commands.c: the command table (commands.h), and running a row.

    The table is the one place that says, per command, where it may arrive,
    who may send it, and whether its answer waits for the journal. Which
    commands a producer may send is a list here, not a rule: everything
    else on the front is the admin's, and the back is the workers'. */
#include "commands.h"

#include "onceq/log.h"

#define S_PRODUCER OQ_ROLE_BIT(OQ_ROLE_PRODUCER)
#define S_WORKER   OQ_ROLE_BIT(OQ_ROLE_WORKER)
#define S_ADMIN    OQ_ROLE_BIT(OQ_ROLE_ADMIN)
#define S_FRONT    OQ_SIDE_FRONT
#define S_BACK     OQ_SIDE_BACK

/* clang-format off */
static const oq_command_t s_commands[] = {
    /* command              socket   roles                 durable  handler */
    {OQ_CMD_DISPATCH,       S_FRONT, S_PRODUCER | S_ADMIN, true,    oq_front_dispatch},
    {OQ_CMD_PING,           S_FRONT, S_PRODUCER | S_ADMIN, false,   oq_front_ping},
    {OQ_CMD_STATS,          S_FRONT, S_PRODUCER | S_ADMIN, false,   oq_front_stats},
    {OQ_CMD_WAIT,           S_FRONT, S_PRODUCER | S_ADMIN, false,   oq_front_wait},
    {OQ_CMD_DISPATCH_BATCH, S_FRONT, S_PRODUCER | S_ADMIN, true,    oq_front_dispatch_batch},
    {OQ_CMD_FAILED,         S_FRONT, S_ADMIN,              false,   oq_admin_failed},
    {OQ_CMD_REQUEUE,        S_FRONT, S_ADMIN,              true,    oq_admin_requeue},
    {OQ_CMD_REQUEUE_ALL,    S_FRONT, S_ADMIN,              true,    oq_admin_requeue_all},
    {OQ_CMD_FORGET,         S_FRONT, S_ADMIN,              true,    oq_admin_forget},
    {OQ_CMD_FLUSH,          S_FRONT, S_ADMIN,              true,    oq_admin_flush},
    {OQ_CMD_CANCEL,         S_FRONT, S_ADMIN,              true,    oq_admin_cancel},
    {OQ_CMD_PRUNE_FAILED,   S_FRONT, S_ADMIN,              true,    oq_admin_prune_failed},
    {OQ_CMD_CLEAR,          S_FRONT, S_ADMIN,              true,    oq_admin_clear},
    {OQ_CMD_HORIZON,        S_FRONT, S_ADMIN,              false,   oq_admin_horizon},
    {OQ_CMD_BATCH,          S_FRONT, S_ADMIN,              false,   oq_admin_batch},
    {OQ_CMD_CHAIN,          S_FRONT, S_ADMIN,              false,   oq_admin_chain},
    {OQ_CMD_REVIEW,         S_FRONT, S_ADMIN,              false,   oq_admin_review},
    {OQ_CMD_REVIEW_SHOW,    S_FRONT, S_ADMIN,              false,   oq_admin_review_show},
    {OQ_CMD_RESOLVE,        S_FRONT, S_ADMIN,              true,    oq_admin_resolve},
    {OQ_CMD_READY,          S_BACK,  S_WORKER,             false,   oq_back_ready},
    {OQ_CMD_HEARTBEAT,      S_BACK,  S_WORKER,             false,   oq_back_heartbeat},
    {OQ_CMD_ACK,            S_BACK,  S_WORKER,             false,   oq_back_ack},
    {OQ_CMD_ACKS,           S_BACK,  S_WORKER,             false,   oq_back_acks},
    {OQ_CMD_TOUCH,          S_BACK,  S_WORKER,             false,   oq_back_touch},
    {OQ_CMD_DRAIN,          S_BACK,  S_WORKER,             false,   oq_back_drain},
    {OQ_CMD_DISCONNECT,     S_BACK,  S_WORKER,             false,   oq_back_disconnect},
    {OQ_CMD_STATUS,         S_BACK,  S_WORKER,             false,   oq_back_status},
};
/* clang-format on */

#define S_COMMANDS (sizeof s_commands / sizeof s_commands[0])

const oq_command_t *oq_command_find(oq_cmd_t cmd)
{
    for (size_t i = 0; i < S_COMMANDS; i++)
        if (s_commands[i].cmd == cmd)
            return &s_commands[i];
    return NULL;
}

const oq_command_t *oq_command_table(size_t *count)
{
    *count = S_COMMANDS;
    return s_commands;
}

bool oq_command_allows(oq_role_t role, oq_side_t side, oq_cmd_t cmd)
{
    if (role <= OQ_ROLE_NONE || role >= OQ_ROLE_COUNT_)
        return false;
    const oq_command_t *row = oq_command_find(cmd);
    return row && row->side == side && (row->roles & OQ_ROLE_BIT(role)) != 0;
}

void oq_command_run(oq_broker_t *self, const oq_command_t *row, const oq_envelope_t *env,
                    const oq_msg_t *msg)
{
    int64_t req = msg->has_req ? (int64_t)msg->req : -1;
    if (row->durable && !oq_front_can_promise(self, env, req))
        return;
    if (row->handler(self, env, req, msg) != OQ_ANSWER_READY)
        return;
    if (row->durable)
        oq_front_promise(self, env, req);
    else if (oq_gate_reply(self, oq_gate_socket(self, row->side), env) < 0)
        oq_debug("the peer went away before its \"%s\" reply", oq_proto_cmd_name(row->cmd));
}
