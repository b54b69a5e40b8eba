/*  conns.c: counting connections with socket monitors, refusing the excess.

    A monitor event is two frames: 6 bytes (uint16 event, uint32 value) and
    the endpoint. For ZMQ_EVENT_ACCEPTED and ZMQ_EVENT_DISCONNECTED the value
    is the connection's descriptor. A peer over the cap is refused with
    shutdown(), never close(): the descriptor belongs to libzmq, which sees
    the connection end and closes it itself (reported as DISCONNECTED). A
    descriptor named by an event may have been closed and reused by the
    time the event is read, so it is shut down only if it is still a
    connected socket.

    Connections in their handshake sit in a list in accept order, threaded
    through an array indexed by descriptor (descriptors are small and
    dense): the oldest is at the head, which is where both the expiry (a
    connection past handshake_ms is no longer in its handshake: libzmq
    would have dropped it) and the eviction take from. Counting one
    address's connections walks the list, which OQ_MAX_HANDSHAKES keeps
    short.

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

#include <arpa/inet.h>
#include <netinet/in.h>

#include "onceq/limits.h"
#include "onceq/log.h"
#include "throttle.h"

#define S_MAX_SOCKETS  4
#define S_EVENTS       (ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPT_FAILED)
#define S_EVENT_BYTES  6
#define S_ENDPOINT_LEN 64
#define S_MAX_FD       (1 << 22) /* descriptors beyond are not tracked in their handshake */
#define S_FIRST_SLOTS  64
#define S_SOURCE_BYTES 16 /* an IPv4 address, or an IPv6 /64 (OQ_IPV6_SOURCE_PREFIX_BYTES) */
#define S_LOG_SOURCES  64 /* sources whose refusals are logged apart, once a minute each */
#define S_NONE         (-1)

/* One descriptor's connection, while it is in its handshake. */
typedef struct {
    bool handshaking;               /* in the list */
    uint8_t source[S_SOURCE_BYTES]; /* its address, cut to what one host holds */
    uint8_t source_len;             /* 0: not an IP connection (ipc://) */
    int64_t accepted_ms;            /* when its accept was read */
    int prev, next;                 /* the list, oldest first; S_NONE ends it */
} s_conn_t;

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
    const oq_clock_t *clock;
    s_conn_t *by_fd;           /* slots, as many as the highest descriptor seen */
    size_t slots;              /* in by_fd */
    int head, tail;            /* connections in their handshake, oldest first */
    size_t handshaking;        /* in the list */
    size_t max_handshaking;    /* in the list at most */
    size_t per_source;         /* from one source at most; 0: no such cap */
    int64_t handshake_ms;      /* then a connection is past its handshake, or closed */
    oq_throttle_t *source_log; /* refusals for a source said once a minute per source */
    int64_t evict_logged_ms;   /* the last eviction said, or -1 */
    int64_t crowded_logged_ms; /* the last refusal for want of handshake room said, or -1 */
    unsigned long long refused_source, refused_crowded, evicted;
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

oq_conns_t *oq_conns_new(void *ctx, void *const sockets[], size_t count,
                         const oq_conns_config_t *config, const oq_clock_t *clock)
{
    assert(count <= S_MAX_SOCKETS && config && clock);
    size_t max_conns = config->max_conns;
    oq_conns_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->clock = clock;
    self->head = self->tail = S_NONE;
    self->per_source = config->max_handshakes_per_addr;
    self->handshake_ms = config->handshake_ms;
    self->evict_logged_ms = -1;
    self->crowded_logged_ms = -1;
    self->source_log = oq_throttle_new(S_LOG_SOURCES, OQ_AUTH_LOG_INTERVAL_MS);
    if (!self->source_log) {
        free(self);
        return NULL;
    }
    struct rlimit rl;
    size_t limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                       ? (size_t)rl.rlim_cur
                       : SIZE_MAX / 2;
    size_t used = s_open_fds() + 2 * count; /* and each monitor's own descriptors */
    self->max = limit > used + OQ_FD_RESERVE ? limit - used - OQ_FD_RESERVE : 1;
    if (max_conns && max_conns < self->max)
        self->max = max_conns;
    self->max_handshaking = self->max / OQ_HANDSHAKE_SHARE_DIVISOR;
    if (self->max_handshaking > OQ_MAX_HANDSHAKES)
        self->max_handshaking = OQ_MAX_HANDSHAKES;
    if (self->max_handshaking == 0)
        self->max_handshaking = 1;
    self->fd_slots = limit < S_MAX_FD_SLOTS ? limit : S_MAX_FD_SLOTS;
    self->fd_state = calloc(self->fd_slots, 1);
    if (!self->fd_state) {
        oq_throttle_destroy(&self->source_log);
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
    oq_info("connections: at most %zu (open-file limit %zu, %zu in use, %d in reserve); in "
            "their handshake at most %zu, %zu from one address, for %lld ms",
            self->max, limit, used, OQ_FD_RESERVE, self->max_handshaking, self->per_source,
            (long long)self->handshake_ms);
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
    oq_throttle_destroy(&self->source_log);
    free(self->by_fd);
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

/* ---- connections in their handshake ----------------------------------------- */

/* The slot of fd, growing the array to hold it; NULL beyond S_MAX_FD or
   out of memory (that connection is then counted only against the cap). */
static s_conn_t *s_slot(oq_conns_t *self, int fd)
{
    if (fd < 0 || fd >= S_MAX_FD)
        return NULL;
    if ((size_t)fd >= self->slots) {
        size_t len = self->slots ? self->slots : S_FIRST_SLOTS;
        while (len <= (size_t)fd)
            len *= 2;
        s_conn_t *grown = realloc(self->by_fd, len * sizeof *grown);
        if (!grown)
            return NULL;
        memset(grown + self->slots, 0, (len - self->slots) * sizeof *grown);
        self->by_fd = grown;
        self->slots = len;
    }
    return &self->by_fd[fd];
}

/* fd is no longer in its handshake (spoke, closed, expired or dropped). */
static void s_unlink(oq_conns_t *self, int fd)
{
    if (fd < 0 || (size_t)fd >= self->slots || !self->by_fd[fd].handshaking)
        return;
    s_conn_t *c = &self->by_fd[fd];
    if (c->prev != S_NONE)
        self->by_fd[c->prev].next = c->next;
    else
        self->head = c->next;
    if (c->next != S_NONE)
        self->by_fd[c->next].prev = c->prev;
    else
        self->tail = c->prev;
    c->handshaking = false;
    self->handshaking--;
}

/* A connection still open handshake_ms (and the slack) after its accept
   is past its handshake: libzmq drops one that is not. */
static void s_expire(oq_conns_t *self, int64_t now)
{
    while (self->head != S_NONE &&
           now - self->by_fd[self->head].accepted_ms >= self->handshake_ms + OQ_HANDSHAKE_SLACK_MS)
        s_unlink(self, self->head);
}

/* The source of the connection on fd: its IPv4 address, or its IPv6 /64
   (an IPv4-mapped IPv6 address counts as IPv4). 0 bytes if it is not an
   IP connection. */
static size_t s_source(int fd, uint8_t source[S_SOURCE_BYTES])
{
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    if (getpeername(fd, (struct sockaddr *)&peer, &len) < 0)
        return 0;
    if (peer.ss_family == AF_INET) {
        memcpy(source, &((struct sockaddr_in *)&peer)->sin_addr, 4);
        return 4;
    }
    if (peer.ss_family == AF_INET6) {
        const struct in6_addr *a = &((struct sockaddr_in6 *)&peer)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            memcpy(source, a->s6_addr + 12, 4);
            return 4;
        }
        memcpy(source, a->s6_addr, OQ_IPV6_SOURCE_PREFIX_BYTES);
        return OQ_IPV6_SOURCE_PREFIX_BYTES;
    }
    return 0;
}

static const char *s_source_text(const uint8_t *source, size_t len, char *text, size_t text_len)
{
    uint8_t full[16] = {0};
    memcpy(full, source, len);
    if (!inet_ntop(len == 4 ? AF_INET : AF_INET6, full, text, (socklen_t)text_len))
        snprintf(text, text_len, "?");
    else if (len != 4)
        strncat(text, "/64", text_len - strlen(text) - 1);
    return text;
}

static size_t s_count_from(const oq_conns_t *self, const uint8_t *source, size_t len)
{
    size_t n = 0;
    for (int fd = self->head; fd != S_NONE; fd = self->by_fd[fd].next) {
        const s_conn_t *c = &self->by_fd[fd];
        n += c->source_len == len && memcmp(c->source, source, len) == 0;
    }
    return n;
}

/* Drop the oldest connection in its handshake; false if there is none
   past its grace. A younger one may have finished its handshake with its
   first message still unread in this turn: dropped, it would lose the
   answer to that message. */
static bool s_evict_oldest(oq_conns_t *self, int64_t now)
{
    int fd = self->head;
    if (fd == S_NONE || now - self->by_fd[fd].accepted_ms < OQ_HANDSHAKE_GRACE_MS)
        return false;
    s_unlink(self, fd);
    oq_conns_shutdown(self, fd);
    self->evicted++;
    if (self->evict_logged_ms < 0 || now - self->evict_logged_ms >= OQ_AUTH_LOG_INTERVAL_MS) {
        oq_warn("dropping connections still in their handshake to take new ones: %zu in their "
                "handshake, at most %zu; %zu connections of %zu (%llu dropped so far; logged "
                "once a minute)",
                self->handshaking, self->max_handshaking, self->open, self->max, self->evicted);
        self->evict_logged_ms = now;
    }
    return true;
}

/* A connection that finds as many in their handshake as may be, all in
   their grace: shut down, said once a minute. */
static void s_refuse_crowded(oq_conns_t *self, int fd, int64_t now)
{
    oq_conns_shutdown(self, fd);
    self->refused_crowded++;
    if (self->crowded_logged_ms >= 0 && now - self->crowded_logged_ms < OQ_AUTH_LOG_INTERVAL_MS)
        return;
    oq_warn("refusing new peers for now: %zu connections are in their handshake, the most there "
            "may be, none older than %d ms (%llu refused so far; logged once a minute)",
            self->handshaking, OQ_HANDSHAKE_GRACE_MS, self->refused_crowded);
    self->crowded_logged_ms = now;
}

/* A connection from a source at its cap: shut down, said once a minute
   per source. */
static void s_refuse_source(oq_conns_t *self, int fd, const uint8_t *source, size_t len,
                            int64_t now)
{
    oq_conns_shutdown(self, fd);
    self->refused_source++;
    if (!oq_throttle_allow(self->source_log, source, len, now))
        return;
    char text[INET6_ADDRSTRLEN + 8], more[96] = "";
    uint64_t quiet = oq_throttle_take_suppressed(self->source_log);
    if (quiet)
        snprintf(more, sizeof more, "; %llu other refusals not logged since the last line",
                 (unsigned long long)quiet);
    oq_warn("refusing new peers from %s: %zu of its connections are in their handshake, the "
            "most one address may have (--max-handshakes-per-ip; logged once a minute per "
            "address%s)",
            s_source_text(source, len, text, sizeof text), self->per_source, more);
}

typedef enum { S_ADMITTED, S_REFUSED, S_OVER_CAP } s_verdict_t;

/* A connection was accepted on fd, and counted: admit it in its handshake
   (making room for it), refuse it for its source, or find the cap reached
   with no connection in its handshake to drop (the caller refuses it). */
static s_verdict_t s_handshake_begin(oq_conns_t *self, int fd)
{
    int64_t now = oq_clock_now_ms(self->clock);
    s_unlink(self, fd); /* a descriptor reused before its close was read */
    s_expire(self, now);
    uint8_t source[S_SOURCE_BYTES];
    size_t len = s_source(fd, source);
    if (len && self->per_source && s_count_from(self, source, len) >= self->per_source) {
        s_refuse_source(self, fd, source, len, now);
        return S_REFUSED;
    }
    if ((self->open > self->max || self->handshaking >= self->max_handshaking) &&
        !s_evict_oldest(self, now)) {
        if (self->open > self->max)
            return S_OVER_CAP;
        s_refuse_crowded(self, fd, now);
        return S_REFUSED;
    }
    s_conn_t *c = s_slot(self, fd);
    if (!c)
        return S_ADMITTED;
    *c = (s_conn_t){.handshaking = true,
                    .source_len = (uint8_t)len,
                    .accepted_ms = now,
                    .prev = self->tail,
                    .next = S_NONE};
    memcpy(c->source, source, len);
    if (self->tail != S_NONE)
        self->by_fd[self->tail].next = fd;
    else
        self->head = fd;
    self->tail = fd;
    self->handshaking++;
    return S_ADMITTED;
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
        if (s_handshake_begin(self, (int)value) == S_OVER_CAP) {
            if (!self->full)
                oq_warn("refusing new peers: %zu connections, the most the open-file limit "
                        "allows (a reserve of %d descriptors kept); connected peers are served",
                        self->max, OQ_FD_RESERVE);
            self->full = true;
            s_refuse(self, (int)value);
        }
        break;
    case ZMQ_EVENT_DISCONNECTED:
        s_unlink(self, (int)value);
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

void oq_conns_spoke(oq_conns_t *self, int fd)
{
    s_unlink(self, fd);
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
