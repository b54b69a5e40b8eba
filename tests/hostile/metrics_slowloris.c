/*  metrics_slowloris: S_SLOW connections from 127.0.0.1 to the broker's
    /metrics each send the start of a request and then one header byte now
    and then, never finishing it (slowloris). While they do, a scrape from
    127.0.0.2 must be answered (200) within S_SCRAPE_MS.

    What held before: the HTTP server took 16 connections at most from
    anyone, and a slow one kept its slot as long as it sent a byte within
    the idle timeout (10 s), so the slow connections held every slot and
    the scrape waited in the listen queue. What holds now: one address may
    hold OQ_METRICS_MAX_CONNS_PER_IP connections, so the others keep theirs.

    Bounded: S_SLOW connections, S_SCRAPES scrapes of S_SCRAPE_MS each. */
#include <errno.h>
#include <poll.h>
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

#include <cmocka.h>

#include "harness.h"

#define S_SLOW          300
#define S_SCRAPES       3
#define S_SCRAPE_MS     5000 /* a scrape from another address is answered within this */
#define S_TRICKLE_MS    1000 /* each slow connection sends a byte this often */
#define S_WARMUP_MS     1500 /* the slow connections are in before the first scrape */
#define S_POLL_MS       20
#define S_SLOW_ADDR     "127.0.0.1"
#define S_SCRAPER_ADDR  "127.0.0.2"
#define S_REQUEST_START "GET /metrics HTTP/1.1\r\nHost: onceq\r\n"
#define S_SCRAPE        "GET /metrics HTTP/1.0\r\nHost: onceq\r\n\r\n"

typedef struct {
    int fds[S_SLOW];
    int64_t next_trickle_ms;
    int port;
} s_slow_t;

static int s_setup(void **state)
{
    *state = it_new("slowloris");
    return *state ? 0 : -1;
}

/* A non-blocking TCP connection from source to 127.0.0.1:port. */
static int s_connect(const char *source, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in from = {.sin_family = AF_INET};
    inet_pton(AF_INET, source, &from.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&from, sizeof from), 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    connect(fd, (struct sockaddr *)&to, sizeof to); /* EINPROGRESS: completes by itself */
    return fd;
}

/* Every slow connection sends one more byte of its endless headers, when
   due; one the server closed is opened again, so the pressure holds. */
static void s_trickle(s_slow_t *slow)
{
    int64_t now = it_now_ms();
    if (now < slow->next_trickle_ms)
        return;
    slow->next_trickle_ms = now + S_TRICKLE_MS;
    for (int i = 0; i < S_SLOW; i++) {
        char sink[256];
        ssize_t n = recv(slow->fds[i], sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN) ||
            send(slow->fds[i], "X", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOTCONN)
                continue;
            close(slow->fds[i]);
            slow->fds[i] = s_connect(S_SLOW_ADDR, slow->port);
            send(slow->fds[i], S_REQUEST_START, strlen(S_REQUEST_START), MSG_NOSIGNAL);
        }
    }
}

/* One scrape from S_SCRAPER_ADDR, trickling on while it waits: true if
   its reply's status line says 200 within S_SCRAPE_MS. */
static bool s_scrape(s_slow_t *slow, int64_t *took_ms)
{
    int64_t start = it_now_ms(), end = start + S_SCRAPE_MS;
    int fd = s_connect(S_SCRAPER_ADDR, slow->port);
    bool sent = false, ok = false;
    char head[64];
    size_t got = 0;
    while (it_now_ms() < end) {
        s_trickle(slow);
        struct pollfd p = {.fd = fd, .events = sent ? POLLIN : POLLOUT};
        if (poll(&p, 1, S_POLL_MS) <= 0)
            continue;
        if (!sent) {
            sent = send(fd, S_SCRAPE, strlen(S_SCRAPE), MSG_NOSIGNAL) == (ssize_t)strlen(S_SCRAPE);
            if (!sent)
                break;
            continue;
        }
        ssize_t n = recv(fd, head + got, sizeof head - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        head[got] = 0;
        if (strchr(head, '\n')) {
            ok = strncmp(head, "HTTP/1.1 200", 12) == 0 || strncmp(head, "HTTP/1.0 200", 12) == 0;
            break;
        }
        if (got == sizeof head - 1)
            break;
    }
    close(fd);
    *took_ms = it_now_ms() - start;
    return ok;
}

static void test_scrape_from_another_address_is_answered_under_slowloris(void **state)
{
    it_t *it = *state;
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_true(rl.rlim_cur > S_SLOW + 64);

    const char *extra[] = {"--no-journal", "--metrics", "127.0.0.1:0", NULL};
    assert_true(it_start_broker(it, extra) > 0);
    s_slow_t slow = {.port = (int)it_metrics_port(it)};
    /* A scrape before the flood: the endpoint works and has its text. */
    int64_t took_ms = 0;
    int64_t ready_end = it_now_ms() + IT_WAIT_MS;
    while (!s_scrape(&slow, &took_ms) && it_now_ms() < ready_end)
        ;
    for (int i = 0; i < S_SLOW; i++)
        slow.fds[i] = s_connect(S_SLOW_ADDR, slow.port);
    /* The start of a request on every connection that is up (one still in
       the listen queue sends only the trickled bytes: as endless a line). */
    poll(NULL, 0, S_POLL_MS * 10);
    for (int i = 0; i < S_SLOW; i++)
        send(slow.fds[i], S_REQUEST_START, strlen(S_REQUEST_START), MSG_NOSIGNAL | MSG_DONTWAIT);
    slow.next_trickle_ms = it_now_ms() + S_TRICKLE_MS;
    int64_t warm_end = it_now_ms() + S_WARMUP_MS;
    while (it_now_ms() < warm_end) {
        s_trickle(&slow);
        poll(NULL, 0, S_POLL_MS);
    }

    int answered = 0;
    int64_t slowest_ms = 0;
    for (int s = 0; s < S_SCRAPES; s++) {
        if (s_scrape(&slow, &took_ms)) {
            answered++;
            if (took_ms > slowest_ms)
                slowest_ms = took_ms;
        }
    }
    for (int i = 0; i < S_SLOW; i++)
        close(slow.fds[i]);
    print_message("scrapes from " S_SCRAPER_ADDR " answered within %d ms under %d slow "
                  "connections: %d of %d (slowest %lld ms)\n",
                  S_SCRAPE_MS, S_SLOW, answered, S_SCRAPES, (long long)slowest_ms);
    assert_int_equal(answered, S_SCRAPES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_scrape_from_another_address_is_answered_under_slowloris, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
