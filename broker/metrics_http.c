/*  metrics_http.c: libmicrohttpd with its internal polling thread (one
    thread calls every handler), fed by a PUSH/PULL pair of inproc sockets
    with ZMQ_CONFLATE: the loop's PUSH never blocks, and the server's PULL
    holds at most the newest text. Each socket is used by one thread only:
    the PUSH by the loop, the PULL by the server's thread (created before
    that thread starts, closed after it stops).

    Slow clients. The polling thread waits on every connection at once and
    the handler never waits (it takes the newest text or answers 503), so
    a client that sends or reads slowly holds its connection, never the
    thread. What it can hold is a slot: OQ_METRICS_MAX_CONNS of them over
    every address, OQ_METRICS_MAX_CONNS_PER_IP from one address (a
    connection over it is closed at once), each dropped after
    OQ_METRICS_TIMEOUT_S without a byte. libmicrohttpd has no deadline for
    a whole request, so a client trickling bytes keeps its slot; the limit
    per address is what leaves the others theirs. */
#include "metrics_http.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "onceq/limits.h"
#include "onceq/log.h"

#define S_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define S_ADDR_LEN     128
#define S_ENDPOINT_LEN 64

struct oq_metrics_http {
    void *zmq;                /* a context of its own, for the inproc pair */
    void *push;               /* the loop's end */
    void *pull;               /* the server thread's end */
    zmq_msg_t current;        /* the newest text received (server thread only) */
    bool has_current;         /* current holds a text */
    int fd;                   /* the listening socket */
    uint16_t port;            /* it listens on */
    bool ipv6;                /* the socket is AF_INET6 */
    struct MHD_Daemon *httpd; /* serving from its thread */
};

/* "IP:PORT" or "[IPv6]:PORT" into host and port. 0, or -1. */
static int s_split(const char *addr, char *host, size_t host_len, char *port, size_t port_len)
{
    const char *colon;
    const char *start = addr;
    size_t len;
    if (addr[0] == '[') {
        const char *end = strchr(addr, ']');
        if (!end || end[1] != ':')
            return -1;
        start = addr + 1;
        len = (size_t)(end - start);
        colon = end + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon)
            return -1;
        len = (size_t)(colon - addr);
    }
    if (len == 0 || len >= host_len || strlen(colon + 1) == 0 || strlen(colon + 1) >= port_len)
        return -1;
    memcpy(host, start, len);
    host[len] = 0;
    strcpy(port, colon + 1);
    return 0;
}

/* A listening TCP socket on addr, or -1 with reason. Made here rather than
   by libmicrohttpd so that a refusal says why (address in use, ...). */
static int s_listen(const char *addr, uint16_t *port_out, bool *ipv6, char *reason,
                    size_t reason_len)
{
    char host[S_ADDR_LEN], port[S_ADDR_LEN];
    if (s_split(addr, host, sizeof host, port, sizeof port) < 0) {
        snprintf(reason, reason_len, "metrics address '%s': expected IP:PORT or [IPv6]:PORT", addr);
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(reason, reason_len, "metrics address '%s': %s (an IP address and a port number)",
                 addr, gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, OQ_METRICS_BACKLOG) < 0) {
        snprintf(reason, reason_len, "metrics address '%s': %s", addr, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    *ipv6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    if (getsockname(fd, (struct sockaddr *)&bound, &bound_len) < 0) {
        snprintf(reason, reason_len, "metrics address '%s': %s", addr, strerror(errno));
        close(fd);
        return -1;
    }
    *port_out = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                  : ((struct sockaddr_in *)&bound)->sin_port);
    return fd;
}

/* Take the newest text published since the last scrape (server thread). */
static void s_take_newest(oq_metrics_http_t *self)
{
    for (;;) {
        zmq_msg_t fresh;
        zmq_msg_init(&fresh);
        if (zmq_msg_recv(&fresh, self->pull, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&fresh);
            return;
        }
        if (self->has_current)
            zmq_msg_close(&self->current);
        zmq_msg_init(&self->current);
        zmq_msg_move(&self->current, &fresh);
        zmq_msg_close(&fresh);
        self->has_current = true;
    }
}

static enum MHD_Result s_reply(struct MHD_Connection *conn, unsigned int status, const char *body,
                               size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *response = MHD_create_response_from_buffer(len, (void *)body, mode);
    if (!response)
        return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, S_CONTENT_TYPE);
    enum MHD_Result rc = MHD_queue_response(conn, status, response);
    MHD_destroy_response(response);
    return rc;
}

static enum MHD_Result s_handle(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_len, void **state)
{
    (void)version;
    (void)upload;
    (void)state;
    oq_metrics_http_t *self = cls;
    if (*upload_len) {
        *upload_len = 0; /* a body is read and ignored; the reply says why */
        return MHD_YES;
    }
    static const char not_found[] = "not found: the broker serves GET /metrics only\n";
    static const char bad_method[] = "method not allowed: GET /metrics\n";
    static const char not_yet[] = "no metrics rendered yet: try again\n";
    if (strcmp(url, "/metrics") != 0)
        return s_reply(conn, MHD_HTTP_NOT_FOUND, not_found, sizeof not_found - 1,
                       MHD_RESPMEM_PERSISTENT);
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return s_reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, bad_method, sizeof bad_method - 1,
                       MHD_RESPMEM_PERSISTENT);
    s_take_newest(self);
    if (!self->has_current)
        return s_reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, not_yet, sizeof not_yet - 1,
                       MHD_RESPMEM_PERSISTENT);
    return s_reply(conn, MHD_HTTP_OK, zmq_msg_data(&self->current), zmq_msg_size(&self->current),
                   MHD_RESPMEM_MUST_COPY);
}

static void s_free_text(void *data, void *hint)
{
    (void)hint;
    free(data);
}

oq_metrics_http_t *oq_metrics_http_new(const char *addr, char *reason, size_t reason_len)
{
    oq_metrics_http_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(reason, reason_len, "out of memory");
        return NULL;
    }
    self->fd = s_listen(addr, &self->port, &self->ipv6, reason, reason_len);
    if (self->fd < 0) {
        free(self);
        return NULL;
    }
    char endpoint[S_ENDPOINT_LEN];
    snprintf(endpoint, sizeof endpoint, "inproc://onceq-metrics-%p", (void *)self);
    int one = 1, zero = 0;
    self->zmq = zmq_ctx_new();
    if (self->zmq) {
        self->pull = zmq_socket(self->zmq, ZMQ_PULL);
        self->push = zmq_socket(self->zmq, ZMQ_PUSH);
    }
    if (!self->pull || !self->push ||
        zmq_setsockopt(self->pull, ZMQ_CONFLATE, &one, sizeof one) < 0 ||
        zmq_setsockopt(self->push, ZMQ_CONFLATE, &one, sizeof one) < 0 ||
        zmq_setsockopt(self->push, ZMQ_LINGER, &zero, sizeof zero) < 0 ||
        zmq_bind(self->pull, endpoint) < 0 || zmq_connect(self->push, endpoint) < 0) {
        snprintf(reason, reason_len, "metrics: %s", zmq_strerror(zmq_errno()));
        oq_metrics_http_destroy(&self);
        return NULL;
    }
    self->httpd = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG |
            (self->ipv6 ? MHD_USE_IPv6 : 0),
        0, NULL, NULL, s_handle, self, MHD_OPTION_LISTEN_SOCKET, self->fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)OQ_METRICS_MAX_CONNS,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)OQ_METRICS_MAX_CONNS_PER_IP,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)OQ_METRICS_TIMEOUT_S, MHD_OPTION_END);
    if (!self->httpd) {
        snprintf(reason, reason_len, "metrics: the HTTP server did not start on %s", addr);
        oq_metrics_http_destroy(&self);
        return NULL;
    }
    self->fd = -1; /* the daemon's now: MHD_stop_daemon closes it */
    return self;
}

void oq_metrics_http_destroy(oq_metrics_http_t **self_p)
{
    assert(self_p);
    oq_metrics_http_t *self = *self_p;
    if (!self)
        return;
    if (self->httpd)
        MHD_stop_daemon(self->httpd); /* joins the thread: the PULL is ours again */
    if (self->fd >= 0)
        close(self->fd);
    if (self->has_current)
        zmq_msg_close(&self->current);
    if (self->pull)
        zmq_close(self->pull);
    if (self->push)
        zmq_close(self->push);
    if (self->zmq)
        zmq_ctx_term(self->zmq);
    free(self);
    *self_p = NULL;
}

uint16_t oq_metrics_http_port(const oq_metrics_http_t *self)
{
    return self->port;
}

void oq_metrics_http_publish(oq_metrics_http_t *self, char **text_p, size_t len)
{
    assert(text_p && *text_p);
    zmq_msg_t msg;
    if (zmq_msg_init_data(&msg, *text_p, len, s_free_text, NULL) < 0) {
        free(*text_p);
        *text_p = NULL;
        return;
    }
    *text_p = NULL;
    if (zmq_msg_send(&msg, self->push, ZMQ_DONTWAIT) < 0)
        zmq_msg_close(&msg); /* frees the text; the server keeps the older one */
}
