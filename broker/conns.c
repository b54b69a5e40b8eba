/*  conns.c: counting connections with socket monitors, refusing the excess.

    A monitor event is two frames: 6 bytes (uint16 event, uint32 value) and
    the endpoint. For ZMQ_EVENT_ACCEPTED and ZMQ_EVENT_DISCONNECTED the value
    is the connection's descriptor. A peer over the cap is refused with
    shutdown(), never close(): the descriptor belongs to libzmq, which sees
    the connection end and closes it itself (reported as DISCONNECTED). A
    descriptor named by an event may have been closed and reused by the
    time the event is read, so it is shut down only if it is still a
    connected socket.

    Each descriptor's last event is kept (a byte per descriptor up to the
    open-file limit), so the broker can tell a message from a connection
    that closed after it was sent from one of a live connection. */
#include "conns.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <zmq.h>

#include "onceq/limits.h"
#include "onceq/log.h"

#define S_MAX_SOCKETS  4
#define S_EVENTS       (ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPT_FAILED)
#define S_EVENT_BYTES  6
#define S_ENDPOINT_LEN 64
#define S_MAX_FD_SLOTS (1 << 20) /* descriptors whose state is kept, at most */

enum { S_FD_UNSEEN, S_FD_OPEN, S_FD_CLOSED };

struct oq_conns {
    void *monitors[S_MAX_SOCKETS];   /* PAIR sockets reading each monitor */
    oq_zsock_t waits[S_MAX_SOCKETS]; /* the same, as the broker's loop waits on them */
    size_t count;                    /* sockets watched */
    size_t open;                     /* connections open now */
    size_t max;                      /* the cap */
    bool full;                       /* at the cap: logged, refusing */
    bool accept_failed;              /* an accept failed in this episode: logged */
    unsigned long long refused;
    unsigned long long failed_accepts;
    void (*watch)(void *ctx, int fd, bool open); /* told of every accept and close */
    uint8_t *fd_state;                           /* S_FD_* per descriptor */
    size_t fd_slots;
    void *watch_ctx;
};

/* Descriptors open in this process now. */
static size_t s_open_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (!dir)
        return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(dir);
    return n > 0 ? n - 1 : 0; /* the directory's own descriptor */
}

oq_conns_t *oq_conns_new(void *ctx, void *const sockets[], size_t count, size_t max_conns)
{
    assert(count <= S_MAX_SOCKETS);
    oq_conns_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    struct rlimit rl;
    size_t limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                       ? (size_t)rl.rlim_cur
                       : SIZE_MAX / 2;
    size_t used = s_open_fds() + 2 * count; /* and each monitor's own descriptors */
    self->max = limit > used + OQ_FD_RESERVE ? limit - used - OQ_FD_RESERVE : 1;
    if (max_conns && max_conns < self->max)
        self->max = max_conns;
    self->fd_slots = limit < S_MAX_FD_SLOTS ? limit : S_MAX_FD_SLOTS;
    self->fd_state = calloc(self->fd_slots, 1);
    if (!self->fd_state) {
        free(self);
        return NULL;
    }
    if (self->max < OQ_FD_RESERVE)
        oq_warn("the open-file limit %zu leaves room for %zu connections only (%zu descriptors in "
                "use, %d kept in reserve); raise it (ulimit -n, LimitNOFILE)",
                limit, self->max, used, OQ_FD_RESERVE);
    for (size_t i = 0; i < count; i++) {
        char endpoint[S_ENDPOINT_LEN];
        snprintf(endpoint, sizeof endpoint, "inproc://oq-conns-%p-%zu", (void *)self, i);
        if (zmq_socket_monitor(sockets[i], endpoint, S_EVENTS) < 0)
            goto fail;
        self->monitors[i] = zmq_socket(ctx, ZMQ_PAIR);
        int zero = 0;
        if (!self->monitors[i])
            goto fail;
        self->count = i + 1;
        zmq_setsockopt(self->monitors[i], ZMQ_LINGER, &zero, sizeof zero);
        if (zmq_connect(self->monitors[i], endpoint) < 0 ||
            oq_zsock_init(&self->waits[i], self->monitors[i]) < 0)
            goto fail;
    }
    oq_info("connections: at most %zu (open-file limit %zu, %zu in use, %d in reserve)", self->max,
            limit, used, OQ_FD_RESERVE);
    return self;
fail:
    oq_error("cannot monitor connections: %s", zmq_strerror(zmq_errno()));
    oq_conns_destroy(&self);
    return NULL;
}

void oq_conns_destroy(oq_conns_t **self_p)
{
    assert(self_p);
    oq_conns_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->count; i++)
        if (self->monitors[i])
            zmq_close(self->monitors[i]);
    free(self->fd_state);
    free(self);
    *self_p = NULL;
}

oq_zsock_t *oq_conns_pollers(oq_conns_t *self, size_t *count)
{
    *count = self->count;
    return self->waits;
}

/* Shut a just-accepted peer down, if fd is still a connected socket. */
static void s_refuse(oq_conns_t *self, int fd)
{
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    if (getpeername(fd, (struct sockaddr *)&peer, &len) < 0)
        return; /* closed, reused for something else, or the listener */
    if (shutdown(fd, SHUT_RDWR) == 0)
        self->refused++;
}

static void s_event(oq_conns_t *self, uint16_t event, uint32_t value)
{
    if (value < self->fd_slots && (event == ZMQ_EVENT_ACCEPTED || event == ZMQ_EVENT_DISCONNECTED))
        self->fd_state[value] = event == ZMQ_EVENT_ACCEPTED ? S_FD_OPEN : S_FD_CLOSED;
    if (self->watch && (event == ZMQ_EVENT_ACCEPTED || event == ZMQ_EVENT_DISCONNECTED))
        self->watch(self->watch_ctx, (int)value, event == ZMQ_EVENT_ACCEPTED);
    switch (event) {
    case ZMQ_EVENT_ACCEPTED:
        self->open++;
        if (self->open > self->max) {
            if (!self->full)
                oq_warn("refusing new peers: %zu connections, the most the open-file limit "
                        "allows (a reserve of %d descriptors kept); connected peers are served",
                        self->max, OQ_FD_RESERVE);
            self->full = true;
            s_refuse(self, (int)value);
        }
        break;
    case ZMQ_EVENT_DISCONNECTED:
        if (self->open)
            self->open--;
        if (self->full && self->open < self->max) {
            oq_info("accepting new peers again: %zu connections (%llu refused so far, %llu "
                    "accepts failed)",
                    self->open, self->refused, self->failed_accepts);
            self->full = false;
            self->accept_failed = false;
        }
        break;
    case ZMQ_EVENT_ACCEPT_FAILED:
        /* A burst of connections faster than the refusals can outrun the
           reserve for a moment: libzmq retries until the refused peers'
           descriptors are closed. Said once per episode. */
        self->failed_accepts++;
        if (!self->accept_failed)
            oq_warn("accepting a connection failed: %s (%zu connections open); new peers are "
                    "refused until descriptors are free",
                    strerror((int)value), self->open);
        self->accept_failed = true;
        self->full = true;
        break;
    default:
        break;
    }
}

void oq_conns_poll(oq_conns_t *self)
{
    for (size_t i = 0; i < self->count; i++) {
        for (;;) {
            zmq_msg_t head, endpoint;
            zmq_msg_init(&head);
            if (zmq_msg_recv(&head, self->monitors[i], ZMQ_DONTWAIT) < 0) {
                oq_zsock_recv_failed(&self->waits[i], errno);
                zmq_msg_close(&head);
                break;
            }
            uint16_t event = 0;
            uint32_t value = 0;
            if (zmq_msg_size(&head) >= S_EVENT_BYTES) {
                memcpy(&event, zmq_msg_data(&head), sizeof event);
                memcpy(&value, (uint8_t *)zmq_msg_data(&head) + sizeof event, sizeof value);
            }
            bool more = zmq_msg_more(&head);
            zmq_msg_close(&head);
            if (more) {
                zmq_msg_init(&endpoint);
                zmq_msg_recv(&endpoint, self->monitors[i], 0);
                zmq_msg_close(&endpoint);
            }
            s_event(self, event, value);
        }
    }
}

bool oq_conns_closed(oq_conns_t *self, int fd)
{
    if (fd < 0 || (size_t)fd >= self->fd_slots || self->fd_state[fd] != S_FD_CLOSED)
        return false;
    /* Its new connection's accept may wait unread: it was reported before
       any of that connection's messages could be read. */
    oq_conns_poll(self);
    return self->fd_state[fd] == S_FD_CLOSED;
}

size_t oq_conns_count(const oq_conns_t *self)
{
    return self->open;
}

size_t oq_conns_max(const oq_conns_t *self)
{
    return self->max;
}

bool oq_conns_room(const oq_conns_t *self)
{
    return self->open < self->max;
}

unsigned long long oq_conns_refused(const oq_conns_t *self)
{
    return self->refused;
}

void oq_conns_watch(oq_conns_t *self, void (*fn)(void *ctx, int fd, bool open), void *ctx)
{
    self->watch = fn;
    self->watch_ctx = ctx;
}

void oq_conns_shutdown(oq_conns_t *self, int fd)
{
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    (void)self;
    if (getpeername(fd, (struct sockaddr *)&peer, &len) == 0)
        shutdown(fd, SHUT_RDWR);
}
