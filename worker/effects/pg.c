/*  pg.c: the per-process PostgreSQL connection.

    libpq's blocking calls wait as long as the network lets them, which can
    be longer than a job may run, and a server that is stopped or hung
    answers nothing while its kernel still takes what is sent. So the
    connection is non-blocking from its first packet to PQfinish: it is
    opened with PQconnectStart/PQconnectPoll, statements are sent with the
    asynchronous API and flushed, and every wait, for the socket to take
    what is sent or for an answer, is a poll() on a budget. Two bounds
    cooperate, both derived from the job's timeout:

    - statement_timeout on the server, the job's timeout less a margin,
      stops a statement that waits on a lock or runs long, rolls its
      transaction back and frees what it held; the client gets 57014 and
      retries the job, before the worker's watchdog would end the process.
    - the client waits for any one answer at most statement_timeout plus
      half a margin. A server that has not even reported its own timeout by
      then is unreachable (a dead network, a stopped host), and the client
      drops the connection, which is what the server would see from a
      crashed worker anyway.

    The client's bound counts only time spent waiting in poll(), not a
    deadline from the job's start; a poll() that returns late (the process
    was stopped or starved meanwhile) is charged what it asked for, which
    the server had to answer in, while the worker's watchdog leaves the
    lateness out of the job's time. For a job, connecting again counts
    against the same bound, and a statement the server did not answer is
    never sent again on a new connection (a server that answered nothing
    in the job's time will not in what is left of it), so a hung server
    ends the job with `connection` (unavailable, no try used) before its
    watchdog would end the process.

    statement_timeout bounds one statement; a job runs several (a grant's
    INSERT and UPDATE, a batch's, a batch's fallback one item at a time),
    and two that each wait on a lock for most of it would together outlast
    the job. So for a job (oq_pg_set_job_timeout; oq_pg_set_timeout keeps
    the bound per statement, for a tool's long maintenance) the waits for
    answers since it began are added up, and once what is left of its
    statement time falls more than the client's grace below what the
    server would allow, the next statement gets what is left: set for the
    session between transactions, with SET LOCAL (one round trip, only
    then) inside one. A job that waited little never pays for it.

    BEGIN waits for the transaction's first statement and goes with it in
    one pipeline (libpq's pipeline mode: both sent, then one sync): its
    answer decides nothing the statement would need, so a job spends one
    round trip less waiting on the server. If BEGIN fails, the server skips
    the statement, and BEGIN's error is the one reported. Later statements
    of the transaction each wait for their answer, since the caller decides
    on it (the grant's UPDATE only when its INSERT took the key). */
#include "onceq/effects.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects_limits.h"
#include "onceq/clock.h"
#include "onceq/log.h"

/* statement_timeout as set_config() text: milliseconds, at most 20 digits. */
#define S_TIMEOUT_TEXT_LEN 24
/* Applied statement_timeout of a session we have not set yet. */
#define S_TIMEOUT_UNKNOWN (-1)
/* Statements with parameters prepared per connection; beyond this many the
   rest run unprepared. The ledger uses a handful. */
#define S_MAX_PREPARED  16
#define S_STMT_NAME_LEN 16

struct oq_pg {
    char *conninfo;         /* as given; "" = libpq's defaults */
    char *application_name; /* fallback_application_name */
    PGconn *conn;           /* NULL before the first use and after a loss */
    PGconn *connecting;     /* an attempt the last connect gave up waiting on, or NULL */
    PostgresPollingStatusType connect_status; /* what that attempt waits for */
    int64_t connect_started_ms;               /* when that attempt began */
    bool unanswered;                          /* the last loss: the server did not answer in time */
    bool in_txn;                              /* between BEGIN and COMMIT/ROLLBACK */
    bool begin_pending;         /* in_txn, BEGIN not sent yet: it goes with the first statement */
    char *begin_sql;            /* the pending transaction's BEGIN */
    int64_t timeout_ms;         /* statement_timeout the current job wants; 0 = none */
    int64_t grace_ms;           /* how much longer the client waits for an answer */
    int64_t applied_timeout_ms; /* what the session has, or S_TIMEOUT_UNKNOWN */
    int64_t local_timeout_ms;   /* set LOCAL in the open transaction; 0 = none */
    int64_t waited_ms;          /* for answers since the job began (oq_pg_set_job_timeout) */
    bool shared;                /* the statements share the bound: a job's */
    char *prepared[S_MAX_PREPARED]; /* SQL prepared on this connection as "oq_<index>" */
    int prepared_count;
};

static int64_t s_now_ms(void)
{
    return oq_clock_now_ms(oq_clock_system());
}

/* The server logs notices (CREATE TABLE IF NOT EXISTS ... skipping); libpq
   would print them on stderr, in no log format. */
static void s_notice(void *arg, const char *message)
{
    oq_debug("postgres: %.*s", (int)strcspn(message, "\n"), message);
}

oq_pg_t *oq_pg_new(const char *conninfo, const char *application_name)
{
    oq_pg_t *self = calloc(1, sizeof *self);
    assert(self);
    self->conninfo = strdup(conninfo ? conninfo : "");
    self->application_name = strdup(application_name ? application_name : "onceq");
    assert(self->conninfo && self->application_name);
    self->applied_timeout_ms = S_TIMEOUT_UNKNOWN;
    return self;
}

/* Prepared statements live and die with their connection. */
static void s_forget_prepared(oq_pg_t *self)
{
    for (int i = 0; i < self->prepared_count; i++)
        free(self->prepared[i]);
    self->prepared_count = 0;
}

/* Abandon a connection attempt kept for the next connect. */
static void s_abandon(oq_pg_t *self)
{
    if (self->connecting)
        PQfinish(self->connecting);
    self->connecting = NULL;
}

static void s_drop(oq_pg_t *self)
{
    /* Non-blocking (s_connect), so that PQfinish's goodbye to the server
       never waits on a full socket. */
    if (self->conn)
        PQfinish(self->conn);
    self->conn = NULL;
    s_forget_prepared(self);
    self->applied_timeout_ms = S_TIMEOUT_UNKNOWN;
    self->local_timeout_ms = 0;
}

void oq_pg_destroy(oq_pg_t **self_p)
{
    assert(self_p);
    oq_pg_t *self = *self_p;
    if (!self)
        return;
    s_drop(self);
    s_abandon(self);
    free(self->begin_sql);
    free(self->conninfo);
    free(self->application_name);
    free(self);
    *self_p = NULL;
}

void oq_pg_set_timeout(oq_pg_t *self, int64_t timeout_ms)
{
    assert(self);
    self->waited_ms = 0;
    self->shared = false;
    if (timeout_ms <= 0) {
        self->timeout_ms = 0;
        self->grace_ms = 0;
        return;
    }
    int64_t margin_ms = timeout_ms / OQ_PG_MARGIN_DIVISOR;
    if (margin_ms > OQ_PG_MARGIN_MAX_MS)
        margin_ms = OQ_PG_MARGIN_MAX_MS;
    /* statement_timeout 0 would mean "none": keep at least 1 ms. */
    self->timeout_ms = timeout_ms - margin_ms > 0 ? timeout_ms - margin_ms : 1;
    self->grace_ms = margin_ms / 2;
}

void oq_pg_set_job_timeout(oq_pg_t *self, int64_t timeout_ms)
{
    oq_pg_set_timeout(self, timeout_ms);
    self->shared = timeout_ms > 0;
}

/* How long the client waits for the answer to one statement, or -1 for as
   long as it takes. */
static int64_t s_answer_budget_ms(const oq_pg_t *self)
{
    return self->timeout_ms ? self->timeout_ms + self->grace_ms : -1;
}

/* The statement_timeout the next statement should have: what is left of
   the job's statement time (at least 1 ms: 0 would mean none). */
static int64_t s_left_ms(const oq_pg_t *self)
{
    int64_t left_ms = self->timeout_ms - (self->shared ? self->waited_ms : 0);
    return left_ms > 0 ? left_ms : 1;
}

/* The statement_timeout the server applies to the next statement now. */
static int64_t s_server_timeout_ms(const oq_pg_t *self)
{
    return self->local_timeout_ms ? self->local_timeout_ms : self->applied_timeout_ms;
}

/* How long the client waits for one answer: the server's own bound plus
   the grace, so that the server's 57014 comes first. */
static int64_t s_statement_budget_ms(const oq_pg_t *self)
{
    if (!self->timeout_ms)
        return -1;
    int64_t server_ms = s_server_timeout_ms(self);
    if (server_ms <= 0 || server_ms > self->timeout_ms)
        server_ms = self->timeout_ms;
    return server_ms + self->grace_ms;
}

/* Wait until fd is ready for events, spending at most *budget_ms (-1: no
   limit) and taking what was spent off it. 1 ready, 0 budget spent, -1
   poll error. A poll() that came back later than it asked to (the process
   was stopped, or starved of CPU, meanwhile) is charged only what it
   asked for: the server had all that time to answer and did not, so the
   wait ends, and the worker's watchdog, which leaves such time out of the
   job's, still lies ahead. */
static int s_poll(int fd, short events, int64_t *budget_ms)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int wait_ms = *budget_ms < 0 ? -1 : (int)(*budget_ms < INT32_MAX ? *budget_ms : INT32_MAX);
        int64_t start_ms = s_now_ms();
        int n = poll(&p, 1, wait_ms);
        int64_t waited_ms = s_now_ms() - start_ms;
        if (*budget_ms > 0)
            *budget_ms -= waited_ms < wait_ms ? waited_ms : wait_ms;
        if (n > 0)
            return 1;
        if (n == 0 && *budget_ms <= 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* The SQLSTATE of a refused connection. libpq keeps the server's error
   response to a connection attempt to itself (no PGresult), and writes it
   into the connection's message, which with PQERRORS_VERBOSE reads
   "...failed: FATAL:  53300: sorry, too many clients already\nLOCATION: ...".
   The code is found there (it is never translated), and taken out of the
   text with the LOCATION line, so the message reads as a default one. The
   class is OQ_PG_ERR_CONNECTION whatever the code: the database cannot be
   used by this process now (53300 no connection slot, 57P03 starting up or
   shutting down, but also 28P01 a wrong password or 3D000 no such
   database, which no job can fix either). */
static void s_connect_error(const char *text, oq_pg_error_t *error)
{
    char message[OQ_PG_MAX_ERROR_LEN + 1];
    snprintf(message, sizeof message, "%s", text ? text : "");
    char *location = strstr(message, "\nLOCATION:");
    if (location)
        *location = 0;
    char sqlstate[6] = "";
    for (char *at = strstr(message, ":  "); at; at = strstr(at + 1, ":  ")) {
        char *code = at + 3;
        size_t len = strspn(code, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ");
        if (len == 5 && code[5] == ':' && code[6] == ' ') {
            memcpy(sqlstate, code, 5);
            sqlstate[5] = 0;
            memmove(code, code + 7, strlen(code + 7) + 1);
            break;
        }
    }
    oq_pg_errors_set(error, OQ_PG_ERR_CONNECTION, sqlstate[0] ? sqlstate : NULL,
                     "cannot connect to the database: %s", message);
}

/* How long a connection attempt may wait now: OQ_PG_CONNECT_TIMEOUT_MS,
   or less if the statements may not wait that long; for a job, what its
   waits so far left of its bound, so that connecting again after a loss
   cannot carry the job past its timeout. */
static int64_t s_connect_budget_ms(const oq_pg_t *self)
{
    int64_t budget_ms = s_answer_budget_ms(self);
    if (budget_ms >= 0 && self->shared)
        budget_ms = budget_ms > self->waited_ms ? budget_ms - self->waited_ms : 0;
    if (budget_ms < 0 || budget_ms > OQ_PG_CONNECT_TIMEOUT_MS)
        budget_ms = OQ_PG_CONNECT_TIMEOUT_MS;
    return budget_ms;
}

/* A new connection attempt (PQconnectStartParams: nothing in it blocks but
   the host name's lookup). The keepalive and TCP timeouts go before
   conninfo, so that conninfo's own values win (libpq keeps the last one of
   a repeated key). They matter over TCP only: a peer host that is gone or
   cut off is found out by the kernel within seconds, on an idle
   connection too, where without them an idle connection to a vanished
   host looks alive until something is sent. */
static PGconn *s_connect_start(oq_pg_t *self)
{
    char idle[S_TIMEOUT_TEXT_LEN], interval[S_TIMEOUT_TEXT_LEN], count[S_TIMEOUT_TEXT_LEN],
        user_timeout[S_TIMEOUT_TEXT_LEN];
    snprintf(idle, sizeof idle, "%d", OQ_PG_KEEPALIVE_IDLE_S);
    snprintf(interval, sizeof interval, "%d", OQ_PG_KEEPALIVE_INTERVAL_S);
    snprintf(count, sizeof count, "%d", OQ_PG_KEEPALIVE_COUNT);
    snprintf(user_timeout, sizeof user_timeout, "%d", OQ_PG_TCP_USER_TIMEOUT_MS);
    const char *keys[8], *values[8];
    int n = 0;
    keys[n] = "keepalives";
    values[n++] = "1";
    keys[n] = "keepalives_idle";
    values[n++] = idle;
    keys[n] = "keepalives_interval";
    values[n++] = interval;
    keys[n] = "keepalives_count";
    values[n++] = count;
    keys[n] = "tcp_user_timeout";
    values[n++] = user_timeout;
    if (self->conninfo[0]) {
        /* With expand_dbname, a conninfo string or URI given as dbname is
           parsed as a whole, as PQconnectdb would. */
        keys[n] = "dbname";
        values[n++] = self->conninfo;
    }
    keys[n] = "fallback_application_name";
    values[n++] = self->application_name;
    keys[n] = NULL;
    values[n] = NULL;
    PGconn *conn = PQconnectStartParams(keys, values, 1);
    if (conn) {
        /* So that a refusal by the server carries its SQLSTATE
           (s_connect_error). */
        PQsetErrorVerbosity(conn, PQERRORS_VERBOSE);
        /* libpq's polling loop: begin as if PQconnectPoll had asked to
           write. */
        self->connect_status =
            PQstatus(conn) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
        self->connect_started_ms = s_now_ms();
    }
    return conn;
}

/* Open the connection, waiting at most s_connect_budget_ms.

   An attempt that runs out of time is kept, and the next connect (the
   worker's probe, the next job) goes on waiting on it, up to
   OQ_PG_CONNECT_KEEP_MS after it began. A server that is stopped or hung
   still has the kernel accept connections for it into its listen queue;
   an attempt given up and made again only adds one more there, and when
   the server runs again it takes every one at once, each to find its
   client gone (a FATAL line in its log for each, and a burst of
   connections in one second). Kept, a process has one attempt out at a
   time, which the server answers when it can. */
static int s_connect(oq_pg_t *self, oq_pg_error_t *error)
{
    if (self->connecting && s_now_ms() - self->connect_started_ms > OQ_PG_CONNECT_KEEP_MS) {
        oq_debug("giving up a connection attempt of %d ms; starting a new one",
                 (int)(s_now_ms() - self->connect_started_ms));
        s_abandon(self);
    }
    if (!self->connecting) {
        self->connecting = s_connect_start(self);
        if (!self->connecting) {
            oq_pg_errors_set(error, OQ_PG_ERR_CONNECTION, NULL,
                             "cannot connect to the database: out of memory");
            return -1;
        }
    }
    PGconn *conn = self->connecting;
    int64_t budget_ms = s_connect_budget_ms(self);
    int64_t before_ms = budget_ms;
    PostgresPollingStatusType status = self->connect_status;
    while (status != PGRES_POLLING_OK && status != PGRES_POLLING_FAILED) {
        short events = status == PGRES_POLLING_READING ? POLLIN : POLLOUT;
        int ready = s_poll(PQsocket(conn), events, &budget_ms);
        if (ready <= 0) {
            self->waited_ms += before_ms - budget_ms;
            oq_pg_errors_set(error, OQ_PG_ERR_CONNECTION, NULL,
                             "cannot connect to the database: %s",
                             ready == 0 ? "no answer in time" : strerror(errno));
            if (ready == 0)
                self->connect_status = status; /* kept, to go on with */
            else
                s_abandon(self);
            return -1;
        }
        status = PQconnectPoll(conn);
    }
    self->waited_ms += before_ms - budget_ms;
    self->connecting = NULL;
    if (status == PGRES_POLLING_FAILED) {
        s_connect_error(PQerrorMessage(conn), error);
        PQfinish(conn);
        return -1;
    }
    /* Non-blocking from here on: a send never waits for the socket (a
       server that reads nothing fills it), s_collect flushes within the
       statement's budget, and PQfinish never waits either. */
    if (PQsetnonblocking(conn, 1) != 0) {
        oq_pg_errors_set(error, OQ_PG_ERR_CONNECTION, NULL, "cannot connect to the database: %s",
                         PQerrorMessage(conn));
        PQfinish(conn);
        return -1;
    }
    /* Errors of statements are read field by field; keep their text plain. */
    PQsetErrorVerbosity(conn, PQERRORS_DEFAULT);
    PQsetNoticeProcessor(conn, s_notice, NULL);
    self->conn = conn;
    self->unanswered = false;
    self->applied_timeout_ms = S_TIMEOUT_UNKNOWN;
    oq_debug("connected to the database (server pid %d)", PQbackendPID(conn));
    return 0;
}

int oq_pg_connect(oq_pg_t *self, oq_pg_error_t *error)
{
    assert(self && error);
    oq_pg_errors_clear(error);
    return self->conn ? 0 : s_connect(self, error);
}

bool oq_pg_disconnect(oq_pg_t *self)
{
    assert(self);
    if (self->in_txn)
        return false;
    s_abandon(self);
    if (!self->conn)
        return false;
    oq_debug("closing the database connection (server pid %d)", PQbackendPID(self->conn));
    s_drop(self);
    return true;
}

/* The error of a failed result (or of the connection if res is NULL). A
   FATAL or PANIC error ends the session even if libpq has not noticed yet. */
static void s_error(oq_pg_t *self, const PGresult *res, bool in_commit, oq_pg_error_t *error)
{
    const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *severity = res ? PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED) : NULL;
    const char *message = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (!message)
        message = PQerrorMessage(self->conn);
    bool fatal = severity && (strcmp(severity, "FATAL") == 0 || strcmp(severity, "PANIC") == 0);
    bool connection_ok = !fatal && PQstatus(self->conn) == CONNECTION_OK;
    oq_pg_class_t cls = oq_pg_errors_classify(sqlstate, connection_ok, in_commit);
    oq_pg_errors_set(error, cls, sqlstate, "%s", message && *message ? message : "unknown error");
    if (!connection_ok)
        s_drop(self);
}

/* Send what libpq holds of the statements (the connection is
   non-blocking: a send only buffers what the socket would not take),
   within *budget_ms, reading meanwhile whatever the server sends so that
   neither side waits on the other. 0, or -1 with the connection dropped
   and error set (in_commit: the outcome of a COMMIT is unknown once any of
   it may have left). */
static int s_flush(oq_pg_t *self, int64_t *budget_ms, bool in_commit, oq_pg_error_t *error)
{
    int rc;
    while ((rc = PQflush(self->conn)) == 1) {
        int64_t before_ms = *budget_ms;
        int ready = s_poll(PQsocket(self->conn), POLLOUT | POLLIN, budget_ms);
        if (before_ms > 0)
            self->waited_ms += before_ms - *budget_ms;
        if (ready == 0) {
            oq_pg_errors_set(error, in_commit ? OQ_PG_ERR_UNKNOWN : OQ_PG_ERR_CONNECTION, NULL,
                             "the database took nothing we sent within %" PRId64 " ms",
                             s_statement_budget_ms(self));
            s_drop(self);
            self->unanswered = true;
            return -1;
        }
        if (ready < 0 || !PQconsumeInput(self->conn)) {
            rc = -1;
            break;
        }
    }
    if (rc < 0) {
        s_error(self, NULL, in_commit, error);
        error->cls = in_commit ? OQ_PG_ERR_UNKNOWN : OQ_PG_ERR_CONNECTION;
        s_drop(self);
        return -1;
    }
    return 0;
}

/* Read the answers to what was sent, within the answer budget (per
   statement in a pipeline, up to its sync). Keeps the first error (later
   statements of a script or a pipeline are skipped by the server anyway),
   else the last result, in *last if last is non-NULL. */
static int s_collect(oq_pg_t *self, bool in_commit, PGresult **last, oq_pg_error_t *error)
{
    int64_t budget_ms = s_statement_budget_ms(self);
    PGresult *kept = NULL;
    bool failed = false;
    bool pipeline = PQpipelineStatus(self->conn) != PQ_PIPELINE_OFF;
    if (s_flush(self, &budget_ms, in_commit, error) < 0)
        return -1;
    for (;;) {
        while (PQisBusy(self->conn)) {
            int64_t before_ms = budget_ms;
            int ready = s_poll(PQsocket(self->conn), POLLIN, &budget_ms);
            if (before_ms > 0)
                self->waited_ms += before_ms - budget_ms;
            if (ready <= 0 || !PQconsumeInput(self->conn)) {
                if (ready == 0) {
                    /* Not even the server's own statement_timeout came
                       back: the network or the server is stuck. Give the
                       connection up; the server rolls back what it had. */
                    oq_pg_errors_set(error, in_commit ? OQ_PG_ERR_UNKNOWN : OQ_PG_ERR_CONNECTION,
                                     NULL, "no answer from the database within %" PRId64 " ms",
                                     s_statement_budget_ms(self));
                } else {
                    s_error(self, NULL, in_commit, error);
                    error->cls = in_commit ? OQ_PG_ERR_UNKNOWN : OQ_PG_ERR_CONNECTION;
                }
                PQclear(kept);
                s_drop(self);
                self->unanswered = ready == 0;
                return -1;
            }
        }
        PGresult *res = PQgetResult(self->conn);
        if (!res && pipeline && PQstatus(self->conn) == CONNECTION_OK) {
            /* The end of one statement's answers; the next statement's,
               or the sync, follow. */
            budget_ms = s_statement_budget_ms(self);
            continue;
        }
        if (!res)
            break;
        ExecStatusType status = PQresultStatus(res);
        if (status == PGRES_PIPELINE_SYNC || status == PGRES_PIPELINE_ABORTED) {
            /* Aborted: skipped after an error, which is kept already. */
            PQclear(res);
            if (status == PGRES_PIPELINE_SYNC)
                break;
            continue;
        }
        bool ok =
            status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY;
        if (!ok && !failed) {
            failed = true;
            s_error(self, res, in_commit, error);
            PQclear(kept);
            kept = NULL;
            if (!self->conn) {
                PQclear(res);
                return -1;
            }
        }
        if (ok && !failed) {
            PQclear(kept);
            kept = res;
        } else {
            PQclear(res);
        }
    }
    if (failed) {
        PQclear(kept);
        return -1;
    }
    if (last)
        *last = kept;
    else
        PQclear(kept);
    return 0;
}

/* Make the connection ready for a statement: connected (unless that would
   silently leave a transaction), and with the job's statement_timeout
   (inside a transaction only if local, and only while it is sound: never
   before COMMIT, which waits on no lock, nor after an error). */
static int s_ready(oq_pg_t *self, bool local, oq_pg_error_t *error)
{
    if (!self->conn) {
        if (self->in_txn && !self->begin_pending) {
            /* Connecting again now would run the rest of the transaction
               outside of it. */
            oq_pg_errors_set(error, OQ_PG_ERR_CONNECTION, NULL,
                             "the database connection was lost inside a transaction");
            return -1;
        }
        if (s_connect(self, error) < 0)
            return -1;
    }
    /* For the session outside transactions (a pending BEGIN has not opened
       one): inside one, a rollback would undo it. Inside one, SET LOCAL,
       which ends with it. */
    bool outside = !self->in_txn || self->begin_pending;
    int64_t want_ms = self->timeout_ms ? s_left_ms(self) : 0;
    int64_t has_ms = outside ? self->applied_timeout_ms : s_server_timeout_ms(self);
    bool set = outside ? has_ms != want_ms : false;
    if (!outside && (!local || PQtransactionStatus(self->conn) != PQTRANS_INTRANS))
        return 0;
    if (self->timeout_ms && has_ms != S_TIMEOUT_UNKNOWN) {
        /* Within the grace above what is left: close enough, no round trip
           (the client's wait covers it). Below it only at a new job. */
        set = has_ms > want_ms + self->grace_ms || (outside && has_ms < want_ms);
    }
    if (set) {
        char text[S_TIMEOUT_TEXT_LEN];
        snprintf(text, sizeof text, "%" PRId64, want_ms);
        const char *params[] = {text};
        const char *sql = outside ? "SELECT set_config('statement_timeout', $1, false)"
                                  : "SELECT set_config('statement_timeout', $1, true)";
        if (PQsendQueryParams(self->conn, sql, 1, NULL, params, NULL, NULL, 0) == 0) {
            s_error(self, NULL, false, error);
            return -1;
        }
        if (s_collect(self, false, NULL, error) < 0)
            return -1;
        if (outside)
            self->applied_timeout_ms = want_ms;
        else
            self->local_timeout_ms = want_ms;
    }
    return 0;
}

/* The index of sql's prepared statement on this connection, preparing it
   the first time (a round trip once per connection, then the server skips
   parsing and planning on every job); -1 to run it unprepared (no room
   left), -2 if preparing failed (error is set). */
static int s_prepared(oq_pg_t *self, const char *sql, int nparams, bool in_commit,
                      oq_pg_error_t *error)
{
    for (int i = 0; i < self->prepared_count; i++)
        if (strcmp(self->prepared[i], sql) == 0)
            return i;
    if (self->prepared_count == S_MAX_PREPARED)
        return -1;
    char name[S_STMT_NAME_LEN];
    snprintf(name, sizeof name, "oq_%d", self->prepared_count);
    if (!PQsendPrepare(self->conn, name, sql, nparams, NULL)) {
        s_error(self, NULL, in_commit, error);
        return -2;
    }
    if (s_collect(self, in_commit, NULL, error) < 0)
        return -2;
    char *copy = strdup(sql);
    if (!copy)
        return -1;
    self->prepared[self->prepared_count] = copy;
    return self->prepared_count++;
}

/* Whether a statement runs prepared: those with parameters, and the
   transaction's own (prepare set: BEGIN and COMMIT, sent on every job);
   other statements without parameters, which callers send once or rarely,
   are not worth a slot. */
static bool s_prepare_it(int nparams, bool prepare)
{
    return nparams > 0 || (prepare && nparams == 0);
}

/* Send one statement: prepared statement stmt (its index), or sql as is. */
static bool s_send(oq_pg_t *self, int stmt, const char *sql, int nparams, const char *const *params)
{
    if (stmt >= 0) {
        char name[S_STMT_NAME_LEN];
        snprintf(name, sizeof name, "oq_%d", stmt);
        return PQsendQueryPrepared(self->conn, name, nparams, params, NULL, NULL, 0) != 0;
    }
    if (nparams < 0)
        return PQsendQuery(self->conn, sql) != 0;
    return PQsendQueryParams(self->conn, sql, nparams, NULL, params, NULL, NULL, 0) != 0;
}

/* The transaction's COMMIT and then its BEGIN prepared on this connection
   (once per connection, outside the transaction, so that a failure to
   prepare COMMIT is never taken for a COMMIT of unknown outcome). The
   index of BEGIN, -1 if it runs unprepared, -2 on error. */
static int s_prepare_txn(oq_pg_t *self, oq_pg_error_t *error)
{
    if (s_prepared(self, "COMMIT", 0, false, error) == -2)
        return -2;
    return s_prepared(self, self->begin_sql, 0, false, error);
}

static int s_run(oq_pg_t *self, const char *sql, int nparams, const char *const *params,
                 bool prepare, bool in_commit, PGresult **result, oq_pg_error_t *error);

/* The transaction's first statement, with the pending BEGIN before it in
   one pipeline. A connection lost meanwhile rolled back whatever of the
   two ran, as a lost idle connection would have before BEGIN. */
static int s_run_first(oq_pg_t *self, const char *sql, int nparams, const char *const *params,
                       bool prepare, PGresult **result, oq_pg_error_t *error)
{
    if (nparams < 0) {
        /* A script cannot go in a pipeline: BEGIN alone first. */
        if (s_ready(self, true, error) < 0)
            return -1;
        int begin = s_prepare_txn(self, error);
        if (begin == -2)
            return -1;
        self->begin_pending = false;
        if (!s_send(self, begin, self->begin_sql, 0, NULL)) {
            s_error(self, NULL, false, error);
            error->cls = OQ_PG_ERR_CONNECTION;
            s_drop(self);
            return -1;
        }
        if (s_collect(self, false, NULL, error) < 0)
            return -1;
        return s_run(self, sql, nparams, params, prepare, false, result, error);
    }
    if (s_ready(self, true, error) < 0)
        return -1;
    int begin = s_prepare_txn(self, error);
    int stmt = begin == -2                      ? -2
               : s_prepare_it(nparams, prepare) ? s_prepared(self, sql, nparams, false, error)
                                                : -1;
    if (stmt == -2)
        return -1;
    /* From here on BEGIN may have run: a later statement of this
       transaction must not connect again and run outside it. */
    self->begin_pending = false;
    if (!PQenterPipelineMode(self->conn)) {
        /* Nothing was sent; the connection goes, so that no later
           statement can run on it outside the transaction. */
        s_error(self, NULL, false, error);
        error->cls = OQ_PG_ERR_CONNECTION;
        s_drop(self);
        return -1;
    }
    if (!s_send(self, begin, self->begin_sql, 0, NULL) ||
        !s_send(self, stmt, sql, nparams, params) || !PQpipelineSync(self->conn)) {
        /* What reached the server, if anything, is rolled back with the
           session. */
        s_error(self, NULL, false, error);
        error->cls = OQ_PG_ERR_CONNECTION;
        s_drop(self);
        return -1;
    }
    int rc = s_collect(self, false, result, error);
    if (self->conn && !PQexitPipelineMode(self->conn)) {
        if (rc == 0) {
            s_error(self, NULL, false, error);
            if (result) {
                PQclear(*result);
                *result = NULL;
            }
        }
        error->cls = OQ_PG_ERR_CONNECTION;
        s_drop(self);
        return -1;
    }
    return rc;
}

/* Send a statement (with parameters, or as a script if params is NULL and
   nparams is -1) and collect its answer; the transaction's first one with
   its BEGIN. */
static int s_run(oq_pg_t *self, const char *sql, int nparams, const char *const *params,
                 bool prepare, bool in_commit, PGresult **result, oq_pg_error_t *error)
{
    if (self->begin_pending) {
        bool reused = self->conn != NULL;
        if (s_run_first(self, sql, nparams, params, prepare, result, error) == 0)
            return 0;
        /* As at BEGIN (oq_pg_begin): a connection that died while idle is
           found out here. Nothing of the transaction is left on the
           server, so once only, BEGIN and the statement go again on a new
           connection; not after a server that did not answer at all. */
        if (!reused || self->conn || error->cls != OQ_PG_ERR_CONNECTION || nparams < 0 ||
            self->unanswered)
            return -1;
        oq_info("the database connection was lost while idle (%s); connecting again",
                error->message);
        oq_pg_errors_clear(error);
        self->begin_pending = true;
        return s_run_first(self, sql, nparams, params, prepare, result, error);
    }
    if (s_ready(self, !in_commit, error) < 0)
        return -1;
    if (self->in_txn && PQtransactionStatus(self->conn) == PQTRANS_IDLE) {
        /* The transaction's BEGIN failed (its error went to the first
           statement): what follows must not run, let alone commit, on its
           own. */
        oq_pg_errors_set(error, OQ_PG_ERR_TRANSIENT, NULL,
                         "not inside the transaction: its BEGIN failed");
        return -1;
    }
    int stmt =
        s_prepare_it(nparams, prepare) ? s_prepared(self, sql, nparams, in_commit, error) : -1;
    if (stmt == -2)
        return -1;
    if (!s_send(self, stmt, sql, nparams, params)) {
        s_error(self, NULL, in_commit, error);
        if (self->conn && error->cls != OQ_PG_ERR_UNKNOWN) {
            /* Not sent and the connection still up: nothing reached the
               server. */
            error->cls = OQ_PG_ERR_TRANSIENT;
        }
        return -1;
    }
    return s_collect(self, in_commit, result, error);
}

int oq_pg_exec(oq_pg_t *self, const char *sql, int nparams, const char *const *params,
               PGresult **result, oq_pg_error_t *error)
{
    assert(self && sql && error);
    assert(nparams >= 0);
    oq_pg_errors_clear(error);
    if (result)
        *result = NULL;
    return s_run(self, sql, nparams, params, false, false, result, error);
}

int oq_pg_exec_script(oq_pg_t *self, const char *sql, oq_pg_error_t *error)
{
    assert(self && sql && error);
    oq_pg_errors_clear(error);
    return s_run(self, sql, -1, NULL, false, false, NULL, error);
}

/* Ready the connection for a transaction whose BEGIN goes with its first
   statement: connected, the job's statement_timeout set, BEGIN and COMMIT
   prepared. Each is a round trip only when it changes. */
static int s_begin(oq_pg_t *self, const char *begin_sql, oq_pg_error_t *error)
{
    if (!self->begin_sql || strcmp(self->begin_sql, begin_sql) != 0) {
        free(self->begin_sql);
        self->begin_sql = strdup(begin_sql);
        assert(self->begin_sql);
    }
    if (s_ready(self, true, error) < 0 || s_prepare_txn(self, error) == -2)
        return -1;
    self->begin_pending = true;
    return 0;
}

int oq_pg_begin(oq_pg_t *self, const char *begin_sql, oq_pg_error_t *error)
{
    assert(self && begin_sql && error);
    assert(!self->in_txn);
    oq_pg_errors_clear(error);
    bool reused = self->conn != NULL;
    if (s_begin(self, begin_sql, error) < 0) {
        /* A connection that died while idle (the server restarted, an
           idle timeout) is found out by the first statement sent on it.
           Nothing of this transaction has happened yet, so connecting
           again now is safe and spares the job a retry. Once only: a
           fresh connection that fails is a real outage. Never after no
           answer: a server that answered nothing in the job's time will
           not answer a new connection in what is left of it (and the
           attempt would be one more it finds abandoned when it runs
           again). */
        if (!reused || self->conn || error->cls != OQ_PG_ERR_CONNECTION || self->unanswered)
            return -1;
        oq_info("the database connection was lost while idle (%s); connecting again",
                error->message);
        oq_pg_errors_clear(error);
        if (s_begin(self, begin_sql, error) < 0)
            return -1;
    }
    self->in_txn = true;
    return 0;
}

int oq_pg_commit(oq_pg_t *self, oq_pg_error_t *error)
{
    assert(self && error);
    oq_pg_errors_clear(error);
    if (self->begin_pending) {
        /* No statement ran: nothing to commit, nothing was sent. */
        self->begin_pending = false;
        self->in_txn = false;
        self->local_timeout_ms = 0;
        return 0;
    }
    PGresult *res = NULL;
    int rc = s_run(self, "COMMIT", 0, NULL, true, true, &res, error);
    /* Whatever the answer, the transaction is over: committed, rolled back
       by the server, or unknown with the connection gone. */
    self->in_txn = false;
    self->local_timeout_ms = 0;
    if (rc < 0)
        return -1;
    /* COMMIT of a transaction that had failed answers "ROLLBACK", with no
       error: not a commit. */
    bool committed = res && strcmp(PQcmdStatus(res), "COMMIT") == 0;
    PQclear(res);
    if (!committed) {
        oq_pg_errors_set(error, OQ_PG_ERR_TRANSIENT, NULL,
                         "the transaction had failed and was rolled back at COMMIT");
        return -1;
    }
    return 0;
}

void oq_pg_rollback(oq_pg_t *self)
{
    assert(self);
    /* Sent as is, without s_ready: nothing else may go first in a
       transaction that failed. */
    if (self->conn && PQtransactionStatus(self->conn) != PQTRANS_IDLE) {
        oq_pg_error_t error;
        oq_pg_errors_clear(&error);
        if (!PQsendQuery(self->conn, "ROLLBACK"))
            s_drop(self);
        else if (s_collect(self, false, NULL, &error) < 0)
            oq_debug("ROLLBACK failed (%s): %s", oq_pg_errors_class_name(error.cls), error.message);
    }
    self->begin_pending = false;
    self->in_txn = false;
    self->local_timeout_ms = 0;
}

bool oq_pg_connected(const oq_pg_t *self)
{
    assert(self);
    return self->conn != NULL;
}

int oq_pg_backend_pid(const oq_pg_t *self)
{
    assert(self);
    return self->conn ? PQbackendPID(self->conn) : 0;
}
