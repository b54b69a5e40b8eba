/*  idle_connections_lockout: a broker under an open-file limit of 256
    meets a hostile loop on 127.0.0.1 that holds more idle TCP connections
    than the broker can take (none of them ever sends a byte) and opens
    again every one the broker drops. Meanwhile fresh producers connect
    from another loopback address, 127.0.0.2, one after the other, and
    each must have its ping answered within S_PING_MS.

    What held before: the idle connections filled the broker's connection
    cap and stayed for libzmq's default handshake interval (30 s), so a
    fresh producer was refused at accept and never answered. What holds
    now: connections still in their handshake are capped per source
    address, so one address cannot take the descriptors the others need,
    and libzmq drops an unfinished handshake after --handshake-timeout-ms.

    The same flood spread over S_MANY_SOURCES addresses, each under its
    limit and together over the cap, leaves them answered too: the oldest
    connection in its handshake gives way to a new one.

    And one idle connection alone is dropped once the default handshake
    timeout has passed, where libzmq alone kept it for 30 s.

    Bounded: S_ATTACK_MS of attack at most, S_MAX_REOPENS reopened
    connections at most, S_DROP_MS of waiting for the drop. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "harness.h"
#include "onceq/limits.h"

#define S_NOFILE            "256" /* the broker's open-file limit */
#define S_IDLE_CONNS        400   /* idle connections held: more than the broker can take */
#define S_MAX_REOPENS       20000
#define S_REOPENS_PER_S     500  /* the finding's attacker reopened about 330 a second */
#define S_WARMUP_MS         1500 /* the attack runs this long before the first producer */
#define S_PRODUCERS         6
#define S_PRODUCER_GAP_MS   300
#define S_PING_MS           5000 /* a fresh producer's ping is answered within this */
#define S_ATTACK_MS         (S_WARMUP_MS + S_PRODUCERS * (S_PING_MS + S_PRODUCER_GAP_MS))
#define S_POLL_MS           20
#define S_DROP_MS           (OQ_DEFAULT_HANDSHAKE_MS + 10000) /* libzmq's own default is 30 s */
#define S_DROP_EARLY_MS     500 /* the broker may start its timer before this test's clock */
#define S_ATTACKER_ADDR     "127.0.0.1"
#define S_LOOPBACK_NET      0x7f000000u
#define S_MANY_SOURCES      20 /* the flood from many addresses: 127.0.0.10 to .29 */
#define S_MANY_SOURCES_FROM 9  /* each under the limit per address, together over the cap */
#define S_PRODUCER_ADDR     "127.0.0.2"

typedef struct {
    int fds[S_IDLE_CONNS];
    int port;
    int sources; /* 0: every connection from 127.0.0.1; else from this many others */
    int64_t started_ms;
    unsigned long reopened;
} s_attack_t;

static int s_setup(void **state)
{
    *state = it_new("idle-lockout");
    return *state ? 0 : -1;
}

/* A non-blocking connection to 127.0.0.1:port from 127.0.0.1 (source 0)
   or from 127.0.0.(S_MANY_SOURCES_FROM + source), that will never speak. */
static int s_idle_conn(int port, int source)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in from = {.sin_family = AF_INET};
    from.sin_addr.s_addr =
        htonl(source ? S_LOOPBACK_NET | (uint32_t)(S_MANY_SOURCES_FROM + source) : INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&from, sizeof from) < 0) {
        close(fd);
        return -1;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, S_ATTACKER_ADDR, &a.sin_addr);
    connect(fd, (struct sockaddr *)&a, sizeof a); /* EINPROGRESS: completes by itself */
    return fd;
}

/* True if the broker dropped the connection on fd. What it sent (its
   ZMTP greeting comes first) is read and ignored: the connection stays
   idle. */
static bool s_dropped(int fd, short revents)
{
    if (revents & ZMQ_POLLERR)
        return true;
    if (!(revents & ZMQ_POLLIN))
        return false;
    char sink[512];
    ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Close and open again the idle connections the broker dropped, at
   S_REOPENS_PER_S at most. */
static void s_reopen_dropped(s_attack_t *attack, const zmq_pollitem_t *items)
{
    int64_t budget = (it_now_ms() - attack->started_ms) * S_REOPENS_PER_S / 1000;
    for (int i = 0; i < S_IDLE_CONNS; i++) {
        if (attack->fds[i] >= 0 && !s_dropped(attack->fds[i], items[i].revents))
            continue;
        if (attack->fds[i] >= 0)
            close(attack->fds[i]);
        attack->fds[i] = -1; /* poll skips it until it is opened again */
        if (attack->reopened >= S_MAX_REOPENS || (int64_t)attack->reopened >= budget)
            continue;
        attack->fds[i] = s_idle_conn(attack->port, attack->sources ? i % attack->sources + 1 : 0);
        attack->reopened++;
    }
}

/* True if a pong waits on sock; reads every message waiting. */
static bool s_pong_waiting(void *sock)
{
    bool pong = false;
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    while (zmq_msg_recv(&frame, sock, ZMQ_DONTWAIT) >= 0) {
        oq_msg_t msg;
        oq_err_t code;
        char why[256];
        if (oq_proto_decode(&msg, zmq_msg_data(&frame), zmq_msg_size(&frame), &code, why,
                            sizeof why) == 0)
            pong |= msg.cmd == OQ_CMD_PONG;
        oq_proto_msg_release(&msg);
    }
    zmq_msg_close(&frame);
    return pong;
}

/* Keep the attack going for wait_ms, or until sock (if not NULL) has a
   pong: true if it had. */
static bool s_attack_while(s_attack_t *attack, void *sock, int wait_ms)
{
    static zmq_pollitem_t items[S_IDLE_CONNS + 1];
    int64_t end = it_now_ms() + wait_ms;
    while (it_now_ms() < end) {
        for (int i = 0; i < S_IDLE_CONNS; i++)
            items[i] = (zmq_pollitem_t){.fd = attack->fds[i], .events = ZMQ_POLLIN};
        items[S_IDLE_CONNS] = (zmq_pollitem_t){.socket = sock, .events = ZMQ_POLLIN};
        int rc = zmq_poll(items, sock ? S_IDLE_CONNS + 1 : S_IDLE_CONNS, S_POLL_MS);
        if (rc < 0 && zmq_errno() != EINTR)
            fail_msg("zmq_poll: %s", zmq_strerror(zmq_errno()));
        s_reopen_dropped(attack, items);
        if (rc <= 0)
            continue;
        if (sock && (items[S_IDLE_CONNS].revents & ZMQ_POLLIN) && s_pong_waiting(sock))
            return true;
    }
    return false;
}

/* Flood the broker (under S_NOFILE) with idle connections from 127.0.0.1
   (sources 0) or from that many other addresses, and ping it from fresh
   producers on S_PRODUCER_ADDR meanwhile: how many were answered. */
static int s_flood(it_t *it, int sources)
{
    /* This process holds the idle connections: give it room. */
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_true(rl.rlim_cur > S_IDLE_CONNS + 64);

    char command[2048];
    snprintf(command, sizeof command,
             "ulimit -n " S_NOFILE " && exec %s --front %s --back %s --no-journal --keys %s",
             it_bin("onceq-broker"), it->front, it->back, it->keys_dir);
    const char *argv[] = {"/bin/sh", "-c", command, NULL};
    it->broker = it_spawn(it, "broker", argv);
    assert_true(it->broker > 0);
    assert_int_equal(it_wait_log(it, "broker", "serving:", 1, IT_WAIT_MS), 0);
    assert_int_equal(it_log_count(it, "broker", "open-file limit " S_NOFILE " (was"), 1);

    s_attack_t attack = {
        .port = atoi(strrchr(it->front, ':') + 1), .sources = sources, .started_ms = it_now_ms()};
    for (int i = 0; i < S_IDLE_CONNS; i++)
        attack.fds[i] = s_idle_conn(attack.port, sources ? i % sources + 1 : 0);
    s_attack_while(&attack, NULL, S_WARMUP_MS);

    char endpoint[128];
    snprintf(endpoint, sizeof endpoint, "tcp://" S_PRODUCER_ADDR ":0;%s", it->front + 6);
    int answered = 0;
    int64_t worst_ms = 0;
    for (int p = 0; p < S_PRODUCERS; p++) {
        void *producer = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, endpoint);
        assert_non_null(producer);
        msgpack_sbuffer buf;
        msgpack_sbuffer_init(&buf);
        oq_proto_encode_simple(&buf, OQ_CMD_PING, it_req(it));
        it_send(producer, &buf);
        msgpack_sbuffer_destroy(&buf);
        int64_t start = it_now_ms();
        if (s_attack_while(&attack, producer, S_PING_MS)) {
            answered++;
            if (it_now_ms() - start > worst_ms)
                worst_ms = it_now_ms() - start;
        }
        it_close_socket(it, producer);
        s_attack_while(&attack, NULL, S_PRODUCER_GAP_MS);
    }
    for (int i = 0; i < S_IDLE_CONNS; i++)
        if (attack.fds[i] >= 0)
            close(attack.fds[i]);
    print_message("idle connections from %d address(es): fresh producers answered within %d ms: "
                  "%d of %d (slowest %lld ms); idle connections reopened: %lu\n",
                  sources ? sources : 1, S_PING_MS, answered, S_PRODUCERS, (long long)worst_ms,
                  attack.reopened);
    return answered;
}

static void test_fresh_producers_are_answered_while_idle_connections_flood(void **state)
{
    assert_int_equal(s_flood(*state, 0), S_PRODUCERS);
}

/* Each address under its limit, together more than the cap: connections
   still in their handshake give way to new ones. */
static void test_fresh_producers_are_answered_while_many_addresses_flood(void **state)
{
    it_t *it = *state;
    assert_true(S_IDLE_CONNS / S_MANY_SOURCES < OQ_DEFAULT_HANDSHAKES_PER_ADDR);
    assert_int_equal(s_flood(it, S_MANY_SOURCES), S_PRODUCERS);
    assert_true(it_log_count(it, "broker", "dropping connections still in their handshake") > 0);
}

/* An idle connection is dropped once the default handshake timeout has
   passed, where libzmq alone keeps it 30 s. */
static void test_idle_connection_is_dropped_after_the_handshake_timeout(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, (const char *[]){"--no-journal", NULL}) > 0);
    int64_t start = it_now_ms();
    int fd = s_idle_conn(atoi(strrchr(it->front, ':') + 1), 0);
    assert_true(fd >= 0);
    bool dropped = false;
    while (!dropped && it_now_ms() - start < S_DROP_MS) {
        zmq_pollitem_t item = {.fd = fd, .events = ZMQ_POLLIN};
        if (zmq_poll(&item, 1, S_POLL_MS) > 0)
            dropped = s_dropped(fd, item.revents);
    }
    int64_t took_ms = it_now_ms() - start;
    close(fd);
    print_message("idle connection dropped after %lld ms\n", (long long)took_ms);
    assert_true(dropped);
    assert_true(took_ms >= OQ_DEFAULT_HANDSHAKE_MS - S_DROP_EARLY_MS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_fresh_producers_are_answered_while_idle_connections_flood, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(
            test_fresh_producers_are_answered_while_many_addresses_flood, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_idle_connection_is_dropped_after_the_handshake_timeout,
                                        s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
