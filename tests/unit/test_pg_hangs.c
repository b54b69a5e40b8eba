/*  test_pg_hangs.c: the connection's bound against a server that answers
    nothing, as a stopped or hung PostgreSQL does: its kernel still takes
    connections into the listen queue and statements into the socket.

    Two stand-ins on a unix socket, no PostgreSQL needed:
    - a listener that never accepts (a stopped postmaster): a connect ends
      within the job's bound, and the next connect goes on with the same
      attempt instead of queueing a second one;
    - a server that completes the startup handshake and then reads
      nothing and answers nothing (a hung backend): the job's statement
      ends within the job's bound, as `connection` (the job is handed back
      without a try), and no second connection is opened for it.

    The stand-in server is a forked child that reports each connection it
    took on a pipe; the test kills it at the end. Label `hostile` too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "onceq/effects.h"
#include "support.h"

/* The job's timeout; the client's bound is a little below it (a tenth
   less as statement_timeout, then half of that tenth more). */
#define S_JOB_TIMEOUT_MS 2000
#define S_BOUND_MS       1900
/* A wait that ran into the bound twice (the old reconnect after no
   answer) takes twice it; one that ran into it once takes less than
   this, however loaded the machine. */
#define S_ONCE_MAX_MS (S_BOUND_MS * 3 / 2)
#define S_PORT        5999
#define S_BACKLOG     16
#define S_MAX_CONNS   16

typedef struct {
    char dir[256];
    char conninfo[512];
    int listener;  /* the stand-in's socket */
    pid_t server;  /* the handshaking child, or 0 */
    int report_fd; /* a byte per connection the child took */
} s_fixture_t;

static int s_setup(void **state)
{
    s_fixture_t *f = calloc(1, sizeof *f);
    if (!f || oq_support_temp_dir("onceq-pg-hangs", f->dir, sizeof f->dir) < 0)
        return -1;
    snprintf(f->conninfo, sizeof f->conninfo,
             "host=%s port=%d dbname=onceq user=onceq sslmode=disable gssencmode=disable", f->dir,
             S_PORT);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    char path[sizeof f->dir + 32];
    snprintf(path, sizeof path, "%s/.s.PGSQL.%d", f->dir, S_PORT);
    if (strlen(path) >= sizeof addr.sun_path)
        return -1;
    memcpy(addr.sun_path, path, strlen(path) + 1);
    f->listener = socket(AF_UNIX, SOCK_STREAM, 0);
    if (f->listener < 0 || bind(f->listener, (struct sockaddr *)&addr, sizeof addr) < 0 ||
        listen(f->listener, S_BACKLOG) < 0)
        return -1;
    f->report_fd = -1;
    *state = f;
    return 0;
}

static int s_teardown(void **state)
{
    s_fixture_t *f = *state;
    if (f->server > 0) {
        kill(f->server, SIGKILL);
        waitpid(f->server, NULL, 0);
    }
    if (f->report_fd >= 0)
        close(f->report_fd);
    close(f->listener);
    oq_support_remove_tree(f->dir);
    free(f);
    return 0;
}

/* Read exactly len bytes; 0 or -1. */
static int s_read_all(int fd, void *buf, size_t len)
{
    for (size_t got = 0; got < len;) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

/* The child: take every connection, read its startup packet, answer
   AuthenticationOk and ReadyForQuery, report it, and from then on read
   nothing and answer nothing. */
static void s_serve(int listener, int report)
{
    int conns[S_MAX_CONNS];
    for (int n = 0; n < S_MAX_CONNS; n++) {
        conns[n] = accept(listener, NULL, NULL);
        if (conns[n] < 0)
            _exit(1);
        unsigned char len_be[4];
        if (s_read_all(conns[n], len_be, sizeof len_be) < 0)
            continue;
        uint32_t len = (uint32_t)len_be[0] << 24 | (uint32_t)len_be[1] << 16 |
                       (uint32_t)len_be[2] << 8 | len_be[3];
        char packet[1024];
        if (len < 8 || len - 4 > sizeof packet || s_read_all(conns[n], packet, len - 4) < 0)
            continue;
        static const unsigned char hello[] = {'R', 0, 0, 0, 8, 0, 0, 0, 0, 'Z', 0, 0, 0, 5, 'I'};
        if (write(conns[n], hello, sizeof hello) != (ssize_t)sizeof hello)
            _exit(1);
        if (write(report, "c", 1) != 1)
            _exit(1);
    }
    pause();
    _exit(0);
}

static void s_start_server(s_fixture_t *f)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    f->server = fork();
    assert_true(f->server >= 0);
    if (f->server == 0) {
        close(fds[0]);
        s_serve(f->listener, fds[1]);
    }
    close(fds[1]);
    f->report_fd = fds[0];
    assert_int_equal(fcntl(f->report_fd, F_SETFL, O_NONBLOCK), 0);
}

/* Connections the child reported so far. */
static int s_served(const s_fixture_t *f)
{
    char buf[S_MAX_CONNS];
    int total = 0;
    ssize_t n;
    while ((n = read(f->report_fd, buf, sizeof buf)) > 0)
        total += (int)n;
    return total;
}

/* Connections waiting in the listener's queue (nobody accepts them; the
   listener is non-blocking). */
static int s_queued(const s_fixture_t *f)
{
    int n = 0;
    for (int fd; (fd = accept(f->listener, NULL, NULL)) >= 0; n++)
        close(fd);
    return n;
}

/* A stopped postmaster: the connect ends in the job's bound, as
   `connection`, and the next connect waits on the same attempt. */
static void test_connect_to_a_stopped_server_is_bounded_and_kept(void **state)
{
    s_fixture_t *f = *state;
    assert_int_equal(fcntl(f->listener, F_SETFL, O_NONBLOCK), 0);
    oq_pg_t *pg = oq_pg_new(f->conninfo, "test_pg_hangs");
    oq_pg_error_t error;
    for (int round = 0; round < 2; round++) {
        oq_pg_set_job_timeout(pg, S_JOB_TIMEOUT_MS);
        int64_t start_ms = oq_support_now_ms();
        assert_int_equal(oq_pg_exec(pg, "SELECT 1", 0, NULL, NULL, &error), -1);
        int64_t took_ms = oq_support_now_ms() - start_ms;
        print_message("connect %d: %s after %lld ms\n", round + 1, error.message,
                      (long long)took_ms);
        assert_int_equal(error.cls, OQ_PG_ERR_CONNECTION);
        assert_true(took_ms >= S_BOUND_MS - 100);
        assert_true(took_ms < S_ONCE_MAX_MS);
    }
    /* One attempt queued, not one per connect. */
    assert_int_equal(s_queued(f), 1);
    oq_pg_destroy(&pg);
}

/* A server that took the connection and answers nothing more: the job's
   first statement ends in the job's bound, as `connection`, and is not
   sent again on a new connection. */
static void test_statement_to_a_hung_server_is_bounded(void **state)
{
    s_fixture_t *f = *state;
    s_start_server(f);
    oq_pg_t *pg = oq_pg_new(f->conninfo, "test_pg_hangs");
    oq_pg_error_t error;
    /* Connected, as a worker is between jobs. */
    oq_pg_set_job_timeout(pg, S_JOB_TIMEOUT_MS);
    assert_int_equal(oq_pg_connect(pg, &error), 0);
    assert_int_equal(s_served(f), 1);

    oq_pg_set_job_timeout(pg, S_JOB_TIMEOUT_MS);
    int64_t start_ms = oq_support_now_ms();
    int rc = oq_pg_begin(pg, "BEGIN ISOLATION LEVEL READ COMMITTED", &error);
    if (rc == 0) {
        const char *params[] = {"1"};
        rc = oq_pg_exec(pg, "SELECT $1::int", 1, params, NULL, &error);
        oq_pg_rollback(pg);
    }
    int64_t took_ms = oq_support_now_ms() - start_ms;
    print_message("statement: %s after %lld ms\n", error.message, (long long)took_ms);
    assert_int_equal(rc, -1);
    assert_int_equal(error.cls, OQ_PG_ERR_CONNECTION);
    assert_true(took_ms < S_ONCE_MAX_MS);
    assert_false(oq_pg_connected(pg));
    /* No second connection for the same job. */
    assert_int_equal(s_served(f), 0);
    oq_pg_destroy(&pg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_connect_to_a_stopped_server_is_bounded_and_kept,
                                        s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_statement_to_a_hung_server_is_bounded, s_setup,
                                        s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
