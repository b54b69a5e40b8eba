/*  pg_errors.c: SQLSTATE -> what to do.

    The classification is a table, looked up first by the exact five-character
    code and then by its two-character class, so that a code not listed falls
    into its family. Two facts about the connection come before the table:

    - A connection that is gone after the error means the server is
      unreachable or our session was ended. Nothing in flight committed,
      except possibly a COMMIT: if the connection died while COMMIT was on
      the wire, the client cannot know whether the server committed first.
      That is OQ_PG_ERR_UNKNOWN. Both mean "retry the job": a second run of a
      job whose first run did commit finds the guard row and does nothing.
    - An error answer from the server to COMMIT (a serialization failure,
      say) is not unknown: the server replied, and it replied that it rolled
      back. Such errors are classified like any other.

    An error the table does not know is OQ_PG_ERR_FAIL: a statement that
    fails for a reason we cannot name would fail the same way on every try,
    and the failed store shows it to a person with its SQLSTATE.

    Infrastructure. OQ_PG_ERR_CONNECTION and OQ_PG_ERR_UNKNOWN say that the
    database, or the way to it, failed: the server is down or restarting,
    out of connection slots, or our session or network is gone. Nothing
    about the job is wrong, so such an error must not use one of its tries:
    a job whose tries run out during a one-minute outage would fail for
    good although nothing was wrong with it. The worker hands it back and
    waits until a probe connects. Everything else is about the work itself
    (its data, a collision, a lock, the job's own statement timeout) and
    uses a try as before. */
#include "onceq/effects.h"

#include <assert.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define S_SQLSTATE_LEN 5 /* e.g. "40001" */
#define S_CLASS_LEN    2 /* e.g. "40" */

typedef struct {
    const char *code; /* five characters, or the two of a class */
    oq_pg_class_t cls;
} s_rule_t;

/* Exact codes: the ones whose handling differs from their class. */
static const s_rule_t s_codes[] = {
    /* The two the server asks us to retry: it rolled the transaction back
       so that another could go on. */
    {"40001", OQ_PG_ERR_RETRY_TXN}, /* serialization_failure */
    {"40P01", OQ_PG_ERR_RETRY_TXN}, /* deadlock_detected */
    /* The server itself cannot say whether the statement completed. */
    {"40003", OQ_PG_ERR_UNKNOWN}, /* statement_completion_unknown */
    /* Our statement_timeout (set from the job's timeout) or a cancel. */
    {"57014", OQ_PG_ERR_TRANSIENT}, /* query_canceled */
    /* The server ended our session, or refuses new ones for now; the
       connection is gone or going. */
    {"57P01", OQ_PG_ERR_CONNECTION}, /* admin_shutdown, pg_terminate_backend */
    {"57P02", OQ_PG_ERR_CONNECTION}, /* crash_shutdown */
    {"57P03", OQ_PG_ERR_CONNECTION}, /* cannot_connect_now: starting or stopping */
    {"57P05", OQ_PG_ERR_CONNECTION}, /* idle_session_timeout */
    {"25P03", OQ_PG_ERR_CONNECTION}, /* idle_in_transaction_session_timeout */
    /* Every connection slot is taken (max_connections, or the role's or
       database's CONNECTION LIMIT): the database cannot serve this
       process now, which is infrastructure, not a resource the statement
       ran out of. */
    {"53300", OQ_PG_ERR_CONNECTION}, /* too_many_connections */
    /* Someone else holds what we need; it will be free later. */
    {"55P03", OQ_PG_ERR_TRANSIENT}, /* lock_not_available (lock_timeout) */
    {"55006", OQ_PG_ERR_TRANSIENT}, /* object_in_use */
};

/* Classes. Everything not here (22 data exception, 23 integrity constraint,
   42 syntax error or missing object, XX internal error, ...) fails. */
static const s_rule_t s_classes[] = {
    {"08", OQ_PG_ERR_CONNECTION}, /* connection_exception */
    {"40", OQ_PG_ERR_TRANSIENT},  /* other transaction rollbacks */
    {"53", OQ_PG_ERR_TRANSIENT},  /* insufficient_resources: disk, memory */
    {"57", OQ_PG_ERR_TRANSIENT},  /* operator_intervention */
    {"58", OQ_PG_ERR_TRANSIENT},  /* system_error: I/O */
    {"72", OQ_PG_ERR_TRANSIENT},  /* snapshot_too_old */
};

#define S_COUNT(a) (sizeof(a) / sizeof((a)[0]))

oq_pg_class_t oq_pg_errors_classify(const char *sqlstate, bool connection_ok, bool in_commit)
{
    if (!connection_ok)
        return in_commit ? OQ_PG_ERR_UNKNOWN : OQ_PG_ERR_CONNECTION;
    if (!sqlstate || strlen(sqlstate) != S_SQLSTATE_LEN) {
        /* libpq's own failures with the connection still up (out of
           memory, a protocol hiccup): nothing says the data is wrong. */
        return in_commit ? OQ_PG_ERR_UNKNOWN : OQ_PG_ERR_TRANSIENT;
    }
    for (size_t i = 0; i < S_COUNT(s_codes); i++)
        if (strcmp(sqlstate, s_codes[i].code) == 0)
            return s_codes[i].cls;
    for (size_t i = 0; i < S_COUNT(s_classes); i++)
        if (strncmp(sqlstate, s_classes[i].code, S_CLASS_LEN) == 0)
            return s_classes[i].cls;
    return OQ_PG_ERR_FAIL;
}

void oq_pg_errors_clear(oq_pg_error_t *error)
{
    assert(error);
    error->cls = OQ_PG_ERR_NONE;
    error->sqlstate[0] = 0;
    error->message[0] = 0;
}

void oq_pg_errors_set(oq_pg_error_t *error, oq_pg_class_t cls, const char *sqlstate,
                      const char *format, ...)
{
    assert(error);
    error->cls = cls;
    snprintf(error->sqlstate, sizeof error->sqlstate, "%s", sqlstate ? sqlstate : "");
    va_list args;
    va_start(args, format);
    int n = vsnprintf(error->message, sizeof error->message, format, args);
    va_end(args);
    if (n < 0)
        error->message[0] = 0;
    /* libpq's messages end in a newline and some span lines ("server closed
       the connection unexpectedly\n\tThis probably means ..."); a job error
       and a log line are one line each. Runs of white space become one. */
    char *out = error->message;
    bool space = false;
    for (const char *in = error->message; *in; in++) {
        if (isspace((unsigned char)*in)) {
            space = out != error->message;
            continue;
        }
        if (space)
            *out++ = ' ';
        space = false;
        *out++ = *in;
    }
    *out = 0;
}

oq_effects_verdict_t oq_pg_errors_verdict(oq_pg_class_t cls)
{
    switch (cls) {
    case OQ_PG_ERR_NONE:
        return OQ_EFFECTS_OK;
    case OQ_PG_ERR_FAIL:
        return OQ_EFFECTS_FAIL;
    case OQ_PG_ERR_UNKNOWN:
        return OQ_EFFECTS_UNKNOWN;
    case OQ_PG_ERR_CONNECTION:
        return OQ_EFFECTS_UNAVAILABLE;
    case OQ_PG_ERR_RETRY_TXN:
    case OQ_PG_ERR_TRANSIENT:
        return OQ_EFFECTS_RETRY;
    }
    assert(!"unknown error class");
    return OQ_EFFECTS_FAIL;
}

bool oq_pg_errors_infrastructure(oq_pg_class_t cls)
{
    return cls == OQ_PG_ERR_CONNECTION || cls == OQ_PG_ERR_UNKNOWN;
}

const char *oq_pg_errors_hint(const oq_pg_error_t *error)
{
    assert(error);
    /* undefined_table, undefined_column: a schema older than the code. */
    if (strcmp(error->sqlstate, "42P01") == 0 || strcmp(error->sqlstate, "42703") == 0)
        return "is the schema up to date? run: onceq db migrate";
    return NULL;
}

const char *oq_pg_errors_class_name(oq_pg_class_t cls)
{
    switch (cls) {
    case OQ_PG_ERR_NONE:
        return "none";
    case OQ_PG_ERR_RETRY_TXN:
        return "retry_txn";
    case OQ_PG_ERR_CONNECTION:
        return "connection";
    case OQ_PG_ERR_UNKNOWN:
        return "unknown";
    case OQ_PG_ERR_TRANSIENT:
        return "transient";
    case OQ_PG_ERR_FAIL:
        return "fail";
    }
    return "?";
}

const char *oq_effects_verdict_name(oq_effects_verdict_t verdict)
{
    switch (verdict) {
    case OQ_EFFECTS_OK:
        return "ok";
    case OQ_EFFECTS_RETRY:
        return "retry";
    case OQ_EFFECTS_UNKNOWN:
        return "unknown";
    case OQ_EFFECTS_FAIL:
        return "fail";
    case OQ_EFFECTS_UNAVAILABLE:
        return "unavailable";
    }
    return "?";
}
