/*  fuzz_metrics_http.c: libFuzzer target for the broker's /metrics server
    (broker/metrics_http.c on libmicrohttpd), reached the way a client
    reaches it: each input is sent as the bytes of one TCP connection to a
    server started once in this process on 127.0.0.1, the write side is
    then closed, and the reply is read to its end. libmicrohttpd's parser
    turns the bytes into the URL, method, headers and body our handler
    sees. Whatever the bytes, the process must not crash or trip a
    sanitizer, and every S_CHECK_EVERY inputs a plain GET /metrics must
    still be answered 200 with the published text: the server keeps
    serving. See README.md to run it. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "metrics_http.h"
#include "onceq/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);

#define S_TEXT        "# onceq fuzz\nonceq_build_info{version=\"fuzz\"} 1\n"
#define S_REPLY_MS    2000 /* the server answers, or closes, within this */
#define S_CHECK_EVERY 256
#define S_CHECK_TRIES 50 /* a check may meet the limit per address while closes are reaped */
#define S_RETRY_MS    20
#define S_REPLY_BYTES 4096

static oq_metrics_http_t *s_server;
static uint16_t s_port;
static unsigned long s_inputs;

/* Send data as one connection, close the write side, read the reply (its
   first S_REPLY_BYTES into reply, if not NULL). Bytes read, or -1 if the
   connection could not be made. */
static ssize_t s_exchange(const uint8_t *data, size_t size, char *reply)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    OQ_FUZZ_CHECK(fd >= 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(s_port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (connect(fd, (struct sockaddr *)&to, sizeof to) < 0) {
        close(fd);
        return -1;
    }
    size_t sent = 0;
    while (sent < size) {
        ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* the server closed it early: what it read is what counts */
        sent += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    char sink[S_REPLY_BYTES];
    ssize_t got = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, S_REPLY_MS) <= 0)
            break;
        char *into = reply && got < S_REPLY_BYTES - 1 ? reply + got : sink;
        size_t room =
            reply && got < S_REPLY_BYTES - 1 ? (size_t)(S_REPLY_BYTES - 1 - got) : sizeof sink;
        ssize_t n = recv(fd, into, room, 0);
        if (n <= 0)
            break;
        got += n;
    }
    if (reply)
        reply[got < S_REPLY_BYTES ? got : S_REPLY_BYTES - 1] = 0;
    close(fd);
    return got;
}

/* A plain scrape is still answered with the text. */
static void s_check_serving(void)
{
    static const char scrape[] = "GET /metrics HTTP/1.0\r\n\r\n";
    static char reply[S_REPLY_BYTES];
    for (int i = 0; i < S_CHECK_TRIES; i++) {
        if (s_exchange((const uint8_t *)scrape, sizeof scrape - 1, reply) > 0 &&
            strncmp(reply, "HTTP/1.", 7) == 0) {
            OQ_FUZZ_CHECK(strstr(reply, " 200 ") && strstr(reply, S_TEXT));
            return;
        }
        poll(NULL, 0, S_RETRY_MS);
    }
    abort(); /* the server stopped answering */
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    oq_log_set_level(OQ_LOG_ERROR);
    char reason[256];
    s_server = oq_metrics_http_new("127.0.0.1:0", reason, sizeof reason);
    if (!s_server) {
        fprintf(stderr, "fuzz_metrics_http: %s\n", reason);
        abort();
    }
    s_port = oq_metrics_http_port(s_server);
    char *text = strdup(S_TEXT);
    OQ_FUZZ_CHECK(text);
    oq_metrics_http_publish(s_server, &text, strlen(S_TEXT));
    s_check_serving();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_exchange(data, size, NULL);
    if (++s_inputs % S_CHECK_EVERY == 0)
        s_check_serving();
    return 0;
}
