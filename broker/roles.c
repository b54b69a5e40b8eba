/*  roles.c: the command -> roles table. */
#include "roles.h"

#include <stddef.h>

#define S_BIT(role) (1u << (role))
#define S_PRODUCER  S_BIT(OQ_ROLE_PRODUCER)
#define S_WORKER    S_BIT(OQ_ROLE_WORKER)
#define S_ADMIN     S_BIT(OQ_ROLE_ADMIN)

/* Commands named here take exactly these roles; the others follow the
   rule of their socket (roles.h). */
static const struct {
    oq_cmd_t cmd;
    unsigned roles;
} s_command_roles[] = {
    {OQ_CMD_DISPATCH, S_PRODUCER | S_ADMIN},
    {OQ_CMD_PING, S_PRODUCER | S_ADMIN},
    {OQ_CMD_STATS, S_PRODUCER | S_ADMIN},
    {OQ_CMD_WAIT, S_PRODUCER | S_ADMIN},
    {OQ_CMD_FAILED, S_ADMIN},
    {OQ_CMD_REQUEUE, S_ADMIN},
    {OQ_CMD_REQUEUE_ALL, S_ADMIN},
    {OQ_CMD_FORGET, S_ADMIN},
    {OQ_CMD_FLUSH, S_ADMIN},
    {OQ_CMD_PRUNE_FAILED, S_ADMIN},
    {OQ_CMD_CANCEL, S_ADMIN},
    {OQ_CMD_HORIZON, S_ADMIN},
    {OQ_CMD_REVIEW, S_ADMIN},
    {OQ_CMD_REVIEW_SHOW, S_ADMIN},
    {OQ_CMD_RESOLVE, S_ADMIN},
    {OQ_CMD_DISPATCH_BATCH, S_PRODUCER | S_ADMIN},
    {OQ_CMD_BATCH, S_ADMIN},
    {OQ_CMD_CHAIN, S_ADMIN},
    {OQ_CMD_READY, S_WORKER},
    {OQ_CMD_HEARTBEAT, S_WORKER},
    {OQ_CMD_ACK, S_WORKER},
    {OQ_CMD_ACKS, S_WORKER},
    {OQ_CMD_TOUCH, S_WORKER},
    {OQ_CMD_DRAIN, S_WORKER},
    {OQ_CMD_DISCONNECT, S_WORKER},
    {OQ_CMD_STATUS, S_WORKER},
};

const char *oq_role_name(oq_role_t role)
{
    switch (role) {
    case OQ_ROLE_PRODUCER:
        return "producer";
    case OQ_ROLE_WORKER:
        return "worker";
    case OQ_ROLE_ADMIN:
        return "admin";
    default:
        return "none";
    }
}

const char *oq_role_plural(oq_role_t role)
{
    switch (role) {
    case OQ_ROLE_PRODUCER:
        return "producers";
    case OQ_ROLE_WORKER:
        return "workers";
    case OQ_ROLE_ADMIN:
        return "admins";
    default:
        return "none";
    }
}

bool oq_roles_allow(oq_role_t role, oq_side_t side, oq_cmd_t cmd)
{
    if (role <= OQ_ROLE_NONE || role >= OQ_ROLE_COUNT_)
        return false;
    for (size_t i = 0; i < sizeof s_command_roles / sizeof s_command_roles[0]; i++)
        if (s_command_roles[i].cmd == cmd)
            return (s_command_roles[i].roles & S_BIT(role)) != 0;
    return role == (side == OQ_SIDE_FRONT ? OQ_ROLE_ADMIN : OQ_ROLE_WORKER);
}
