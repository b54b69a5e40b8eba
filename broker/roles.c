/*  roles.c: the roles' names. Which role may send which command is the
    command table's roles column (commands.c). */
#include "roles.h"

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
