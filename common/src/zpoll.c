/*  zpoll.c: one poll(2) over ZeroMQ sockets and plain descriptors (see
    onceq/zpoll.h for the edge-triggered contract it keeps). */
#include "onceq/zpoll.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <zmq.h>

int oq_zsock_init(oq_zsock_t *self, void *socket)
{
    assert(self && socket);
    self->socket = socket;
    self->unsure = true;
    size_t len = sizeof self->fd;
    return zmq_getsockopt(socket, ZMQ_FD, &self->fd, &len);
}

void oq_zsock_used(oq_zsock_t *self)
{
    assert(self);
    self->unsure = true;
}

void oq_zsock_recv_failed(oq_zsock_t *self, int err)
{
    assert(self);
    /* The failed receive processed the socket's commands and found no
       message: the next one that comes makes the descriptor readable. */
    if (err == EAGAIN)
        self->unsure = false;
}

/* Whether an unsure socket holds input now. Asking takes in every command
   waiting in its mailbox, so a socket without input is sure afterwards. A
   socket that cannot be asked (a context terminating, a signal) is ready:
   its receive says what is wrong. */
static bool s_has_input(oq_zsock_t *sock)
{
    uint32_t events = 0;
    size_t len = sizeof events;
    if (zmq_getsockopt(sock->socket, ZMQ_EVENTS, &events, &len) < 0)
        return true;
    if (events & ZMQ_POLLIN)
        return true;
    sock->unsure = false;
    return false;
}

int oq_zpoll(oq_zpoll_item_t *items, size_t count, long timeout_ms)
{
    assert(items && count <= OQ_ZPOLL_MAX_ITEMS);
    struct pollfd fds[OQ_ZPOLL_MAX_ITEMS];
    int ready = 0;
    for (size_t i = 0; i < count; i++) {
        items[i].ready = items[i].sock && items[i].sock->unsure && s_has_input(items[i].sock);
        ready += items[i].ready;
        fds[i] = (struct pollfd){.fd = items[i].sock ? items[i].sock->fd : items[i].fd,
                                 .events = POLLIN};
    }
    /* With input known to wait, only a look at the rest. */
    int n = poll(fds, count, ready ? 0 : (int)(timeout_ms > INT32_MAX ? INT32_MAX : timeout_ms));
    if (n < 0) {
        int err = errno;
        for (size_t i = 0; i < count; i++)
            items[i].ready = false;
        errno = err;
        return -1;
    }
    ready = 0;
    for (size_t i = 0; i < count; i++) {
        items[i].ready |= (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) != 0;
        ready += items[i].ready;
    }
    return ready;
}
