/*  test_auth: who may talk to the broker, with the real binaries under
    CURVE (the harness's default: a broker pair and a producer, a worker and
    an admin key per fixture).

    (i)    A plaintext peer and a peer with a key the broker was never told
           of get no answer at all; the unknown key is logged once however
           often it tries.
    (ii)   A producer key cannot register as a worker: its ready is
           answered "forbidden", it gets no job, and a real onceq-worker
           started with it runs nothing.
    (iii)  Each role gets exactly its commands: a worker key cannot list or
           requeue the failed store (nor dispatch), a producer key neither
           (nor clear a queue); an admin may do everything on the front. Every refusal is
           counted.
    (iv)   Under CURVE, an ack from another registered worker with a
           guessed lease changes nothing (fenced), and one from a producer
           key is forbidden before it is even read.
    (v)    SIGHUP reads the keys again: a revoked worker's next command is
           refused and it is dropped (its lease given back), a revoked
           producer's next dispatch is refused, and a new handshake with a
           revoked key is refused.
    (vi)   `onceq keygen` writes a pair that loads, 0600 for the secret,
           and refuses to overwrite it.
    (vii)  Without keys the broker starts only with --insecure, and then
           binds only loopback unless --insecure-remote is given.
    (viii) Over --max-producers a new producer is refused at its handshake,
           logged once, without a spin; a slot that frees is taken again.
           --max-conns caps every connection.
    (ix)   The broker's flag table: --help names a variable for every flag,
           and variables work (ONCEQ_QUEUES). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "harness.h"
#include "onceq/keys.h"
#include "support.h"

#define S_PEER_WAIT_MS   10000
#define S_SILENCE_MS     1500 /* a refused peer hears nothing for this long */
#define S_STRANGER_TRIES 5
#define S_MAX_PRODUCERS  "2"
#define S_CPU_SAMPLE_MS  2000
#define S_MAX_CPU_PCT    30 /* a spinning broker takes a whole core */

static int s_setup(void **state)
{
    *state = it_new("auth");
    return *state ? 0 : -1;
}

/* ---- raw peers -------------------------------------------------------------- */

/* True if nothing at all arrives on sock within timeout_ms. */
static bool s_silent(void *sock, int timeout_ms)
{
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    return zmq_poll(&item, 1, timeout_ms) == 0;
}

/* Expect an error with code on sock; its text must contain needle. */
static void s_expect_error(void *sock, oq_err_t code, const char *needle)
{
    oq_msg_t msg;
    assert_int_equal(it_expect(sock, OQ_CMD_ERROR, &msg, S_PEER_WAIT_MS), 0);
    char text[OQ_MAX_ERROR_LEN + 1];
    oq_str_copy(msg.err_text, text, sizeof text);
    if (msg.err_code != code || (needle && !strstr(text, needle)))
        fail_msg("expected error %s with \"%s\", got %s: %s", oq_proto_err_name(code),
                 needle ? needle : "", oq_proto_err_name(msg.err_code), text);
    oq_proto_msg_release(&msg);
}

static void s_send_simple(void *sock, oq_cmd_t cmd, int64_t req)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_simple(&buf, cmd, req);
    it_send(sock, &buf);
    msgpack_sbuffer_destroy(&buf);
}

static void s_send_ready(void *sock)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready(&buf, 1, "peer", 1);
    it_send(sock, &buf);
    msgpack_sbuffer_destroy(&buf);
}

/* A front peer of role: the reply to ping (1) is pong, or none. */
static bool s_pings(void *sock)
{
    s_send_simple(sock, OQ_CMD_PING, 1);
    oq_msg_t msg;
    if (it_expect(sock, OQ_CMD_PONG, &msg, S_PEER_WAIT_MS) < 0)
        return false;
    oq_proto_msg_release(&msg);
    return true;
}

/* ---- stats ---------------------------------------------------------------------- */

/* auth.KEY, or auth.GROUP.KEY with group ("connected", "keys", "max"). */
static uint64_t s_auth(it_t *it, const char *group, const char *key)
{
    oq_msg_t reply;
    assert_int_equal(it_stats_reply(it, &reply, IT_WAIT_MS), 0);
    const msgpack_object *map = oq_proto_map_get(&reply.root, "auth");
    if (group)
        map = oq_proto_map_get(map, group);
    const msgpack_object *o = oq_proto_map_get(map, key);
    uint64_t value = o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
    oq_proto_msg_release(&reply);
    return value;
}

/* Wait until auth[.group].key >= at_least. */
static void s_wait_auth(it_t *it, const char *group, const char *key, uint64_t at_least)
{
    int64_t end = it_now_ms() + IT_WAIT_MS;
    while (s_auth(it, group, key) < at_least) {
        if (it_now_ms() > end)
            fail_msg("auth.%s%s%s stayed below %llu", group ? group : "", group ? "." : "", key,
                     (unsigned long long)at_least);
        oq_support_sleep_ms(20);
    }
}

/* CPU time (user + system) of pid in clock ticks. */
static long s_cpu_ticks(pid_t pid)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *p = strrchr(text, ')');
    assert_non_null(p);
    long utime = 0, stime = 0;
    /* After ")": the state, ten fields, then utime and stime (proc(5)). */
    assert_int_equal(
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime), 2);
    return utime + stime;
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_peers_without_an_allowed_key_get_nothing(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    void *plain = it_socket_as(it, IT_ROLE_PLAIN, ZMQ_DEALER, it->front);
    void *plain_back = it_socket_as(it, IT_ROLE_PLAIN, ZMQ_DEALER, it->back);
    s_send_simple(plain, OQ_CMD_PING, 1);
    s_send_ready(plain_back);
    /* The same unknown key, again and again, on both sockets. */
    void *strangers[S_STRANGER_TRIES];
    for (int i = 0; i < S_STRANGER_TRIES; i++) {
        strangers[i] = it_socket_as(it, IT_ROLE_STRANGER, ZMQ_DEALER, i ? it->front : it->back);
        if (i)
            s_send_simple(strangers[i], OQ_CMD_PING, 1);
        else
            s_send_ready(strangers[i]);
    }
    s_wait_auth(it, NULL, "unknown_keys", S_STRANGER_TRIES);
    assert_true(s_silent(plain, S_SILENCE_MS));
    assert_true(s_silent(plain_back, 0));
    for (int i = 0; i < S_STRANGER_TRIES; i++)
        assert_true(s_silent(strangers[i], 0));
    /* Nobody registered, the allowed client is served. */
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.workers, 0);
    assert_int_equal(s_auth(it, NULL, "handshakes") >= 1, 1);
    /* Logged once for the key, not once per try. */
    char needle[128];
    snprintf(needle, sizeof needle, "unknown key %s", it->pairs[IT_ROLE_STRANGER].public_z85);
    assert_int_equal(it_log_count(it, "broker", needle), 1);

    /* The onceq tool says why it heard nothing. */
    const char *argv[] = {it_bin("onceq"),
                          "ping",
                          "--broker",
                          it->front,
                          "--timeout-ms",
                          "3000",
                          "--key",
                          it_key_file(it, IT_ROLE_STRANGER),
                          NULL};
    pid_t cli = it_spawn(it, "stranger", argv);
    int status = it_wait_exit(cli, IT_WAIT_MS);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 3);
    assert_int_equal(it_log_count(it, "stranger", "the broker refused our key"), 1);
}

static void test_a_producer_key_cannot_work(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
    void *sock = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->back);
    s_send_ready(sock);
    s_expect_error(sock, OQ_ERR_FORBIDDEN, "a producer key (\"producer\") may not send \"ready\"");
    s_send_simple(sock, OQ_CMD_HEARTBEAT, -1);
    s_expect_error(sock, OQ_ERR_FORBIDDEN, "may not send \"heartbeat\"");
    oq_msg_t msg;
    assert_int_equal(it_expect(sock, OQ_CMD_JOB, &msg, S_SILENCE_MS), -1);
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.workers, 0);
    assert_int_equal(s.ready, 1);

    /* A real worker with a producer's key: refused, runs nothing. */
    const char *flags[] = {"--key", it_key_file(it, IT_ROLE_PRODUCER), NULL};
    assert_true(it_start_worker(it, "impostor", flags) > 0);
    assert_int_equal(it_wait_log(it, "impostor", "broker error forbidden", 1, IT_WAIT_MS), 0);
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.workers, 0);
    assert_int_equal(s.ready, 1);
    assert_int_equal(s.done, 0);
    assert_true(s_auth(it, NULL, "forbidden") >= 3);
    /* The refusals are logged once a minute per key, not once each. */
    assert_int_equal(it_log_count(it, "broker", "forbidden on the back socket"), 1);

    /* With its own key the same worker runs the job. */
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    uint64_t one = 1;
    assert_true(it_wait_stats(it, it_done_at_least, &one, IT_WAIT_MS, &s) >= 0);
}

/* What each role may send on the front socket. */
static void test_each_role_gets_its_commands(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--max-tries", "1", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    /* One failed job to list and requeue. */
    uint64_t id = it_dispatch(it, "fail", NULL, NULL);
    assert_true(id > 0);
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    it_stats_t s;
    int64_t end = it_now_ms() + IT_WAIT_MS;
    do {
        assert_int_equal(it_stats(it, &s), 0);
        assert_true(it_now_ms() < end);
    } while (s.failed != 1);

    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_msg_t msg;
    uint64_t refused = 0;
    for (it_role_t role = IT_ROLE_PRODUCER; role <= IT_ROLE_ADMIN; role++) {
        void *sock = it_socket_as(it, role, ZMQ_DEALER, it->front);
        bool admin = role == IT_ROLE_ADMIN, producer = role == IT_ROLE_PRODUCER;
        /* failed list and requeue: admin only */
        oq_proto_encode_failed_request(&buf, 2, NULL, 10);
        it_send(sock, &buf);
        if (admin) {
            assert_int_equal(it_expect(sock, OQ_CMD_FAILED, &msg, S_PEER_WAIT_MS), 0);
            oq_proto_msg_release(&msg);
        } else {
            s_expect_error(sock, OQ_ERR_FORBIDDEN, "may not send \"failed\"");
            refused++;
        }
        oq_proto_encode_requeue(&buf, OQ_CMD_REQUEUE, 3, admin ? id + 1000 : id);
        it_send(sock, &buf);
        if (admin) {
            /* A job not in the store: the broker read the request. */
            s_expect_error(sock, OQ_ERR_BAD_REQUEST, NULL);
        } else {
            s_expect_error(sock, OQ_ERR_FORBIDDEN, "may not send \"requeue\"");
            refused++;
        }
        /* dispatch, stats, ping: producers and admins */
        oq_job_msg_t job = {.type = oq_str("noop"), .delay_ms = 3600000, .has_delay = true};
        oq_proto_encode_dispatch(&buf, 4, &job);
        it_send(sock, &buf);
        if (admin || producer) {
            /* One at a time: a dispatch is answered after its fsync, later
               than a stats sent behind it. */
            assert_int_equal(it_expect(sock, OQ_CMD_DISPATCHED, &msg, S_PEER_WAIT_MS), 0);
            oq_proto_msg_release(&msg);
            s_send_simple(sock, OQ_CMD_STATS, 5);
            assert_int_equal(it_expect(sock, OQ_CMD_STATS, &msg, S_PEER_WAIT_MS), 0);
            oq_proto_msg_release(&msg);
            assert_true(s_pings(sock));
        } else {
            s_expect_error(sock, OQ_ERR_FORBIDDEN, "a worker key (\"worker\") may not send");
            s_send_simple(sock, OQ_CMD_STATS, 5);
            s_expect_error(sock, OQ_ERR_FORBIDDEN, "may not send \"stats\"");
            s_send_simple(sock, OQ_CMD_PING, 6);
            s_expect_error(sock, OQ_ERR_FORBIDDEN, "may not send \"ping\"");
            refused += 3;
        }
    }
    msgpack_sbuffer_destroy(&buf);
    /* The failed job is still there, untouched by the refused requeues. */
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s_auth(it, NULL, "forbidden"), refused);

    /* The onceq tool with the producer's key, and with the admin's. */
    char id_text[32];
    snprintf(id_text, sizeof id_text, "%llu", (unsigned long long)id);
    const char *as_producer[] = {it_bin("onceq"),
                                 "failed",
                                 "retry",
                                 id_text,
                                 "--broker",
                                 it->front,
                                 "--key",
                                 it_key_file(it, IT_ROLE_PRODUCER),
                                 NULL};
    pid_t cli = it_spawn(it, "cli-producer", as_producer);
    int status = it_wait_exit(cli, IT_WAIT_MS);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    assert_int_equal(it_log_count(it, "cli-producer", "onceq: forbidden: a producer key"), 1);
    const char *as_admin[] = {it_bin("onceq"), "failed",  "retry", id_text,
                              "--broker",      it->front, NULL};
    cli = it_spawn(it, "cli-admin", as_admin);
    status = it_wait_exit(cli, IT_WAIT_MS);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* Clearing a queue is the admin's: a producer's is refused and cancels
       none of the delayed jobs dispatched above. */
    assert_int_equal(it_stats(it, &s), 0);
    uint64_t delayed = s.delayed;
    assert_true(delayed >= 2);
    const char *clear_as_producer[] = {it_bin("onceq"),
                                       "queue",
                                       "clear",
                                       "default",
                                       "--broker",
                                       it->front,
                                       "--key",
                                       it_key_file(it, IT_ROLE_PRODUCER),
                                       NULL};
    cli = it_spawn(it, "cli-producer-clear", clear_as_producer);
    status = it_wait_exit(cli, IT_WAIT_MS);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    assert_int_equal(it_log_count(it, "cli-producer-clear", "onceq: forbidden: a producer key"), 1);
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.delayed, delayed);
}

static void test_blind_acks_under_curve_change_nothing(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    uint64_t id = it_dispatch(it, "noop", NULL, NULL);
    assert_true(id > 0);
    /* The lease holder: a registered raw worker that sits on the job. */
    void *holder = it_socket(it, ZMQ_DEALER, it->back);
    s_send_ready(holder);
    oq_msg_t msg, job;
    assert_int_equal(it_expect(holder, OQ_CMD_WELCOME, &msg, S_PEER_WAIT_MS), 0);
    oq_proto_msg_release(&msg);
    assert_int_equal(it_expect(holder, OQ_CMD_JOB, &job, S_PEER_WAIT_MS), 0);
    assert_int_equal(job.job.id, id);

    /* Another registered worker, with a valid worker key, guesses leases. */
    void *rival = it_socket(it, ZMQ_DEALER, it->back);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready(&buf, 0, "rival", 2);
    it_send(rival, &buf);
    assert_int_equal(it_expect(rival, OQ_CMD_WELCOME, &msg, S_PEER_WAIT_MS), 0);
    oq_proto_msg_release(&msg);
    for (uint64_t guess = 0; guess < 4; guess++) {
        oq_ack_msg_t ack = {.id = id,
                            .attempt = 1,
                            .outcome = OQ_OUTCOME_OK,
                            .result = OQ_RESULT_APPLIED,
                            .lease = job.job.lease ^ (guess + 1),
                            .has_lease = true};
        oq_proto_encode_ack(&buf, &ack);
        it_send(rival, &buf);
    }
    /* A producer key's ack is not even read. */
    void *producer = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->back);
    oq_ack_msg_t ack = {.id = id,
                        .attempt = 1,
                        .outcome = OQ_OUTCOME_OK,
                        .result = OQ_RESULT_APPLIED,
                        .lease = job.job.lease,
                        .has_lease = true};
    oq_proto_encode_ack(&buf, &ack);
    it_send(producer, &buf);
    s_expect_error(producer, OQ_ERR_FORBIDDEN, "may not send \"ack\"");

    it_stats_t s;
    uint64_t one = 1;
    assert_true(it_wait_stats(it, it_leased_is, &one, IT_WAIT_MS, &s) >= 0);
    int64_t end = it_now_ms() + IT_WAIT_MS;
    for (;;) {
        uint64_t fenced = 0;
        msgpack_sbuffer req_buf;
        msgpack_sbuffer_init(&req_buf);
        int64_t req = it_req(it);
        oq_proto_encode_simple(&req_buf, OQ_CMD_STATS, req);
        oq_msg_t reply;
        assert_int_equal(it_call(it, &req_buf, req, &reply, IT_WAIT_MS), 0);
        msgpack_sbuffer_destroy(&req_buf);
        const msgpack_object *o =
            oq_proto_map_get(oq_proto_map_get(&reply.root, "broker"), "fenced_acks");
        fenced = o ? o->via.u64 : 0;
        oq_proto_msg_release(&reply);
        if (fenced == 4)
            break;
        assert_true(it_now_ms() < end);
    }
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.done, 0);
    assert_int_equal(s.leased, 1);

    /* The holder's own ack completes it. */
    ack.lease = job.job.lease;
    oq_proto_encode_ack(&buf, &ack);
    it_send(holder, &buf);
    assert_true(it_wait_stats(it, it_done_at_least, &one, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.late_acks, 0);
    oq_proto_msg_release(&job);
    msgpack_sbuffer_destroy(&buf);
}

/* Remove a role's public key file from the broker's keys and SIGHUP it. */
static void s_revoke(it_t *it, it_role_t role, size_t reloads)
{
    assert_int_equal(unlink(it_allowed_key_file(it, role)), 0);
    it_signal(it->broker, SIGHUP);
    assert_int_equal(it_wait_log(it, "broker", "keys read again", reloads, IT_WAIT_MS), 0);
}

static void test_sighup_revokes_a_key_at_once(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    /* A registered worker holding a job, and a producer that dispatched. */
    void *worker = it_socket(it, ZMQ_DEALER, it->back);
    void *producer = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    assert_true(s_pings(producer));
    s_send_ready(worker);
    oq_msg_t msg;
    assert_int_equal(it_expect(worker, OQ_CMD_WELCOME, &msg, S_PEER_WAIT_MS), 0);
    oq_proto_msg_release(&msg);
    assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
    assert_int_equal(it_expect(worker, OQ_CMD_JOB, &msg, S_PEER_WAIT_MS), 0);
    oq_proto_msg_release(&msg);
    uint64_t one_worker = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_workers_are, &one_worker, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s_auth(it, "connected", "workers"), 1);
    assert_int_equal(s_auth(it, "connected", "producers"), 1);

    s_revoke(it, IT_ROLE_WORKER, 1);
    s_send_simple(worker, OQ_CMD_HEARTBEAT, -1);
    s_expect_error(worker, OQ_ERR_FORBIDDEN, "not allowed");
    /* Dropped at once, its job ready again for someone else. */
    uint64_t none = 0;
    assert_true(it_wait_stats(it, it_workers_are, &none, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.leased, 0);
    assert_int_equal(s.ready, 1);
    /* A new connection with the revoked key is refused at its handshake. */
    uint64_t unknown = s_auth(it, NULL, "unknown_keys");
    void *again = it_socket(it, ZMQ_DEALER, it->back);
    s_send_ready(again);
    s_wait_auth(it, NULL, "unknown_keys", unknown + 1);
    assert_true(s_silent(again, S_SILENCE_MS));

    /* The producer's key next: its connection's next dispatch is refused. */
    s_revoke(it, IT_ROLE_PRODUCER, 2);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_job_msg_t job = {.type = oq_str("noop")};
    oq_proto_encode_dispatch(&buf, 7, &job);
    it_send(producer, &buf);
    msgpack_sbuffer_destroy(&buf);
    s_expect_error(producer, OQ_ERR_FORBIDDEN, "not allowed");
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.dispatched, 1);

    /* A broken keys directory keeps the keys in force. */
    char path[600];
    snprintf(path, sizeof path, "%s/admins/broken.key", it->keys_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a key\n", f);
    fclose(f);
    it_signal(it->broker, SIGHUP);
    assert_int_equal(it_wait_log(it, "broker", "keys not read again", 1, IT_WAIT_MS), 0);
    assert_int_equal(it_stats(it, &s), 0); /* the admin is still served */
}

static void test_keygen_writes_a_pair_that_loads(void **state)
{
    it_t *it = *state;
    char dir[400], secret[500], public[500];
    snprintf(dir, sizeof dir, "%s/made/deeper", it->dir);
    const char *argv[] = {it_bin("onceq"), "keygen", "--dir", dir, "app-1", NULL};
    pid_t pid = it_spawn(it, "keygen", argv);
    assert_int_equal(it_wait_exit(pid, IT_WAIT_MS), 0);
    snprintf(secret, sizeof secret, "%s/app-1.key_secret", dir);
    snprintf(public, sizeof public, "%s/app-1.key", dir);
    oq_keypair_t pair;
    char pub[OQ_KEY_Z85_LEN + 1], reason[600];
    assert_int_equal(oq_keys_load_pair(secret, &pair, reason, sizeof reason), 0);
    assert_int_equal(oq_keys_load_public(public, pub, reason, sizeof reason), 0);
    assert_string_equal(pub, pair.public_z85);
    struct stat st;
    assert_int_equal(stat(secret, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* It printed the public key. */
    assert_int_equal(it_log_count(it, "keygen", pair.public_z85), 1);
    /* Again: refused, the pair unchanged. */
    pid = it_spawn(it, "keygen-again", argv);
    int status = it_wait_exit(pid, IT_WAIT_MS);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    assert_int_equal(it_log_count(it, "keygen-again", "exists already"), 1);
    oq_keypair_t same;
    assert_int_equal(oq_keys_load_pair(secret, &same, reason, sizeof reason), 0);
    assert_string_equal(same.secret_z85, pair.secret_z85);
    /* A broker takes a directory made with it. */
    const char *broker_argv[] = {it_bin("onceq"), "keygen", "--dir", dir, "broker", NULL};
    pid = it_spawn(it, "keygen-broker", broker_argv);
    assert_int_equal(it_wait_exit(pid, IT_WAIT_MS), 0);
    const char *broker_flags[] = {it_bin("onceq-broker"), "--front", it->front, "--back", it->back,
                                  "--no-journal",         "--keys",  dir,       NULL};
    it_spawn(it, "broker", broker_flags);
    assert_int_equal(it_wait_log(it, "broker", "serving:", 1, IT_WAIT_MS), 0);
    assert_int_equal(it_log_count(it, "broker", "keys read from"), 1);
    assert_int_equal(it_log_count(it, "broker", "no public keys in"), 1);
}

/* Start the broker with argv's flags; its exit status and log. */
static int s_broker_exit(it_t *it, const char *log, const char *const flags[])
{
    const char *argv[16] = {it_bin("onceq-broker"), "--no-journal"};
    size_t n = 2;
    for (size_t i = 0; flags[i]; i++)
        argv[n++] = flags[i];
    argv[n] = NULL;
    pid_t pid = it_spawn(it, log, argv);
    int status = it_wait_exit(pid, IT_WAIT_MS);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_plaintext_only_when_asked(void **state)
{
    it_t *it = *state;
    it_insecure(it); /* no ONCEQ_KEYS in the environment */
    const char *none[] = {"--front", it->front, "--back", it->back, NULL};
    assert_int_equal(s_broker_exit(it, "no-keys", none), 1);
    assert_int_equal(it_log_count(it, "no-keys", "refusing to start: no keys: give --keys DIR"), 1);
    const char *both[] = {"--insecure", "--keys", it->keys_dir, NULL};
    assert_int_equal(s_broker_exit(it, "both", both), 2);
    /* 192.0.2.1 (TEST-NET-1) is no address of this machine: the check comes
       first, and with --insecure-remote the bind itself fails; nothing
       ever listens beyond loopback. */
    const char *remote[] = {"--insecure", "--front", "tcp://192.0.2.1:7750",
                            "--back",     it->back,  NULL};
    assert_int_equal(s_broker_exit(it, "remote", remote), 1);
    assert_int_equal(it_log_count(it, "remote", "--insecure binds only loopback"), 1);
    const char *allowed[] = {
        "--insecure", "--insecure-remote", "--front", "tcp://192.0.2.1:7750", "--back", it->back,
        NULL};
    assert_int_equal(s_broker_exit(it, "allowed", allowed), 1);
    assert_int_equal(it_log_count(it, "allowed", "--insecure binds only loopback"), 0);
    assert_int_equal(it_log_count(it, "allowed", "cannot bind tcp://192.0.2.1:7750"), 1);
    const char *lone[] = {"--insecure-remote", NULL};
    assert_int_equal(s_broker_exit(it, "lone", lone), 2);

    /* --insecure on loopback: served, with a warning, every command open. */
    assert_true(it_start_broker(it, NULL) > 0);
    assert_int_equal(it_log_count(it, "broker", "running --insecure"), 1);
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_at_least, &one, IT_WAIT_MS, &s) >= 0);
    assert_true(it_log_count(it, "worker", "(plaintext)") >= 1);
}

static void test_over_the_producer_limit_is_refused_without_a_spin(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--max-producers", S_MAX_PRODUCERS, NULL};
    pid_t broker = it_start_broker(it, flags);
    assert_true(broker > 0);
    void *a = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    void *b = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    assert_true(s_pings(a));
    assert_true(s_pings(b));
    assert_int_equal(s_auth(it, "connected", "producers"), 2);
    assert_int_equal(s_auth(it, "max", "producers"), 2);
    /* Eight more: each refused at its handshake. */
    void *extra[8];
    for (int i = 0; i < 8; i++) {
        extra[i] = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
        s_send_simple(extra[i], OQ_CMD_PING, 1);
    }
    s_wait_auth(it, NULL, "refused_full", 8);
    long before = s_cpu_ticks(broker);
    int64_t t0 = it_now_ms();
    for (int i = 0; i < 8; i++)
        assert_true(s_silent(extra[i], i ? 0 : S_CPU_SAMPLE_MS));
    long ticks = s_cpu_ticks(broker) - before;
    int64_t wall_ms = it_now_ms() - t0;
    long pct = ticks * 1000 / sysconf(_SC_CLK_TCK) * 100 / (wall_ms > 0 ? wall_ms : 1);
    print_message("broker CPU with 8 refused producers: %ld%% over %lld ms\n", pct,
                  (long long)wall_ms);
    assert_true(pct < S_MAX_CPU_PCT);
    assert_int_equal(it_log_count(it, "broker", "refusing new producers"), 1);
    /* Other roles are not limited by it, and the connected ones are served. */
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_true(s_pings(a));
    /* A slot that frees is taken by the next new peer. */
    for (int i = 0; i < 8; i++)
        it_close_socket(it, extra[i]);
    it_close_socket(it, b);
    int64_t end = it_now_ms() + IT_WAIT_MS;
    while (s_auth(it, "connected", "producers") != 1)
        assert_true(it_now_ms() < end);
    void *c = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    assert_true(s_pings(c));
    assert_int_equal(it_wait_log(it, "broker", "accepting new producers again", 1, IT_WAIT_MS), 0);
}

/* --max-conns counts every connection, keyed or not, both sockets. */
static void test_max_conns_caps_every_peer(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--max-conns", "3", NULL};
    assert_true(it_start_broker(it, flags) > 0); /* the fixture's client is one */
    void *a = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    void *w = it_socket(it, ZMQ_DEALER, it->back);
    assert_true(s_pings(a));
    s_send_ready(w);
    oq_msg_t msg;
    assert_int_equal(it_expect(w, OQ_CMD_WELCOME, &msg, S_PEER_WAIT_MS), 0);
    oq_proto_msg_release(&msg);
    void *over = it_socket_as(it, IT_ROLE_ADMIN, ZMQ_DEALER, it->front);
    s_send_simple(over, OQ_CMD_PING, 1);
    assert_true(s_silent(over, S_SILENCE_MS));
    assert_int_equal(it_wait_log(it, "broker", "refusing new peers: 3 connections", 1, IT_WAIT_MS),
                     0);
    assert_true(s_pings(a));
}

static void test_broker_flags_have_variables(void **state)
{
    it_t *it = *state;
    const char *argv[] = {it_bin("onceq-broker"), "--help", NULL};
    pid_t pid = it_spawn(it, "help", argv);
    assert_int_equal(it_wait_exit(pid, IT_WAIT_MS), 0);
    char *text = it_read_log(it, "help");
    size_t flags = 0, vars = 0;
    for (const char *p = strstr(text, "\n  --"); p; p = strstr(p + 1, "\n  --"))
        flags++;
    for (const char *p = strstr(text, "[ONCEQ_"); p; p = strstr(p + 1, "[ONCEQ_"))
        vars++;
    free(text);
    assert_true(flags > 30);
    assert_int_equal(vars, flags - 2); /* all but --help and --version */

    /* A variable: ONCEQ_QUEUES sets two queues. */
    setenv("ONCEQ_QUEUES", "fast:10:4,slow:120", 1);
    pid_t broker = it_start_broker(it, NULL);
    unsetenv("ONCEQ_QUEUES");
    assert_true(broker > 0);
    oq_job_msg_t fast = {.queue = oq_str("fast"),
                         .timeout_ms = 6000,
                         .has_timeout = true}; /* too long for fast's lease */
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(it);
    fast.type = oq_str("noop");
    oq_proto_encode_dispatch(&buf, req, &fast);
    oq_msg_t reply;
    assert_int_equal(it_call(it, &buf, req, &reply, IT_WAIT_MS), 0);
    assert_int_equal(reply.cmd, OQ_CMD_ERROR);
    assert_int_equal(reply.err_code, OQ_ERR_TIMEOUT_RULE);
    oq_proto_msg_release(&reply);
    msgpack_sbuffer_destroy(&buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_peers_without_an_allowed_key_get_nothing, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_a_producer_key_cannot_work, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_each_role_gets_its_commands, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_blind_acks_under_curve_change_nothing, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_sighup_revokes_a_key_at_once, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_keygen_writes_a_pair_that_loads, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_plaintext_only_when_asked, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_over_the_producer_limit_is_refused_without_a_spin,
                                        s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_max_conns_caps_every_peer, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_broker_flags_have_variables, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
