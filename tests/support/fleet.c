/*  fleet.c: simulated workers over raw ZMTP 3.0 (fleet.h).

    A connection sends its greeting (signature, version 3.0, mechanism
    NULL, as client) and its READY command (Socket-Type DEALER, an empty
    Identity: the broker's ROUTER makes one up), waits for the broker's
    greeting and READY (libzmq drops a peer whose message comes before
    them), then sends the "ready" message as one frame and reads up to the
    broker's "welcome", the first message frame. Workers register in batches, each batch's welcomes
   read before the next connects, so the broker's accept queue never overflows (a dropped SYN is
   retried only after a second). */
#include "fleet.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support.h"

pid_t it_fleet_broker(it_t *it)
{
    const char *flags[] = {"--no-journal", "--heartbeat-ms",          "60000", "--liveness",
                           "10",           "--max-handshakes-per-ip", "0",     NULL};
    pid_t pid = it_start_broker(it, flags);
    assert_true(pid > 0);
    return pid;
}

#define S_BATCH         100 /* connections registering at once */
#define S_GREETING_LEN  64  /* ZMTP 3.0 greeting */
#define S_FLAG_LONG     0x02
#define S_FLAG_COMMAND  0x04
#define S_MAX_FRAME_LEN (1 << 20) /* what the fleet reads of one frame: the broker's are small */

struct it_fleet {
    int *fds;
    size_t count;
};

static int s_write_all(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read exactly len bytes (out NULL: discard them) before deadline_ms. */
static int s_read_all(int fd, void *out, size_t len, int64_t deadline_ms)
{
    uint8_t scratch[4096];
    uint8_t *p = out;
    while (len > 0) {
        int64_t left = deadline_ms - oq_support_now_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return -1;
        size_t want = out ? len : (len < sizeof scratch ? len : sizeof scratch);
        ssize_t n = read(fd, out ? (void *)p : (void *)scratch, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        if (out)
            p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read frames up to the first of the kind wanted (a command or a message),
   skipping the others. */
static int s_read_frame(int fd, bool command, int64_t deadline_ms)
{
    for (;;) {
        uint8_t flags, size8[8];
        uint64_t size = 0;
        if (s_read_all(fd, &flags, 1, deadline_ms) < 0)
            return -1;
        size_t size_len = flags & S_FLAG_LONG ? 8 : 1;
        if (s_read_all(fd, size8, size_len, deadline_ms) < 0)
            return -1;
        for (size_t i = 0; i < size_len; i++)
            size = size << 8 | size8[i];
        if (size > S_MAX_FRAME_LEN || s_read_all(fd, NULL, size, deadline_ms) < 0)
            return -1;
        if (!(flags & S_FLAG_COMMAND) != command)
            return 0;
    }
}

static size_t s_put_prop(uint8_t *out, const char *name, const char *value)
{
    size_t n = strlen(name), v = strlen(value), at = 0;
    out[at++] = (uint8_t)n;
    memcpy(out + at, name, n);
    at += n;
    out[at++] = 0;
    out[at++] = 0;
    out[at++] = 0;
    out[at++] = (uint8_t)v;
    memcpy(out + at, value, v);
    return at + v;
}

/* Connect to 127.0.0.1:port and send the greeting and READY. */
static int s_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    uint8_t greeting[S_GREETING_LEN] = {0xff, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x7f, 3, 0};
    memcpy(greeting + 12, "NULL", 4);
    uint8_t ready[64] = {S_FLAG_COMMAND, 0, 5, 'R', 'E', 'A', 'D', 'Y'};
    size_t len = 8;
    len += s_put_prop(ready + len, "Socket-Type", "DEALER");
    len += s_put_prop(ready + len, "Identity", "");
    ready[1] = (uint8_t)(len - 2);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0 ||
        s_write_all(fd, greeting, sizeof greeting) < 0 || s_write_all(fd, ready, len) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Once the broker's greeting and READY came: send msg as one frame. */
static int s_send_message(int fd, const void *msg, size_t msg_len, int64_t deadline_ms)
{
    if (s_read_all(fd, NULL, S_GREETING_LEN, deadline_ms) < 0 ||
        s_read_frame(fd, true, deadline_ms) < 0)
        return -1;
    uint8_t head[9];
    size_t head_len;
    if (msg_len > 255) {
        head[0] = S_FLAG_LONG;
        for (int i = 0; i < 8; i++)
            head[1 + i] = (uint8_t)((uint64_t)msg_len >> (56 - 8 * i));
        head_len = 9;
    } else {
        head[0] = 0;
        head[1] = (uint8_t)msg_len;
        head_len = 2;
    }
    return s_write_all(fd, head, head_len) < 0 || s_write_all(fd, msg, msg_len) < 0 ? -1 : 0;
}

it_fleet_t *it_fleet_new(const char *endpoint, size_t count, const void *ready, size_t ready_len,
                         int timeout_ms)
{
    const char *colon = strrchr(endpoint, ':');
    int port = colon ? atoi(colon + 1) : 0;
    it_fleet_t *self = calloc(1, sizeof *self);
    if (!self || port <= 0 || !(self->fds = calloc(count ? count : 1, sizeof *self->fds))) {
        free(self);
        return NULL;
    }
    int64_t deadline = oq_support_now_ms() + timeout_ms;
    for (size_t first = 0; first < count; first += S_BATCH) {
        size_t end = first + S_BATCH < count ? first + S_BATCH : count;
        for (size_t i = first; i < end; i++) {
            int fd = s_connect(port);
            if (fd < 0) {
                fprintf(stderr, "fleet: worker %zu of %zu cannot connect to %s: %s\n", i + 1, count,
                        endpoint, strerror(errno));
                it_fleet_destroy(&self);
                return NULL;
            }
            self->fds[self->count++] = fd;
        }
        for (size_t i = first; i < end; i++) {
            if (s_send_message(self->fds[i], ready, ready_len, deadline) < 0) {
                fprintf(stderr, "fleet: worker %zu of %zu cannot send its ready\n", i + 1, count);
                it_fleet_destroy(&self);
                return NULL;
            }
        }
        for (size_t i = first; i < end; i++) {
            if (s_read_frame(self->fds[i], false, deadline) < 0) {
                fprintf(stderr, "fleet: worker %zu of %zu got no welcome within %d ms\n", i + 1,
                        count, timeout_ms);
                it_fleet_destroy(&self);
                return NULL;
            }
        }
    }
    return self;
}

void it_fleet_destroy(it_fleet_t **self_p)
{
    it_fleet_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->count; i++)
        close(self->fds[i]);
    free(self->fds);
    free(self);
    *self_p = NULL;
}
