/*  loopback.c: see loopback.h. */
#include "loopback.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int oq_loopback_full(int fd, void *buf, size_t len, bool reading)
{
    size_t done = 0;
    while (done < len) {
        uint8_t *at = (uint8_t *)buf + done;
        ssize_t n = reading ? read(fd, at, len - done) : write(fd, at, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

int oq_loopback_tune(int fd, int recv_timeout_ms)
{
    int one = 1;
    struct timeval tv = {recv_timeout_ms / 1000, (recv_timeout_ms % 1000) * 1000};
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0 ||
                   setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0
               ? -1
               : 0;
}

int oq_loopback_listen(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 1) < 0 ||
        getsockname(fd, (struct sockaddr *)&addr, &len) < 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(addr.sin_port);
    return fd;
}

int oq_loopback_connect(uint16_t port, int recv_timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0 ||
        oq_loopback_tune(fd, recv_timeout_ms) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}
