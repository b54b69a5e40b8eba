/*  web_server.c: libmicrohttpd in "external" mode on epoll: the caller's
    loop polls its one file descriptor and calls MHD_run, so every handler
    runs on that thread, between two samples of the history.

    Every request needs a login (HTTP basic, checked against the users
    file, web_users.h) before anything is read from it or sent to the
    broker. A POST is an action: it needs the admin role (a viewer gets
    403) and the CSRF token of the user who posts (403 without it); a
    cross-site form cannot read the token, so it cannot post as the user.
    The form is read by libmicrohttpd's post processor into a bounded set
    of fields: a body over OQ_WEB_MAX_BODY_BYTES, a field over its limit
    or too many fields answer 413 or 400, never a cut value acted on.

    Slow clients hold a connection, never the thread (libmicrohttpd waits
    on all at once), at most OQ_WEB_MAX_CONNS_PER_IP from one address, each
    closed after OQ_WEB_TIMEOUT_S of silence, as the broker's /metrics. */
#include "web_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "onceq/log.h"
#include "web_guard.h"

/* Longest address text, in bytes. */
#define S_ADDR_LEN 128
/* Largest TLS certificate or key file read, in bytes. */
#define S_MAX_PEM_BYTES (64 * 1024)
#define S_REALM         "onceq"

struct oq_web_server {
    oq_web_t *web;
    struct MHD_Daemon *httpd;
    int fd; /* the listening socket until the daemon owns it */
    uint16_t port;
    int epoll_fd;   /* libmicrohttpd's: what the loop polls */
    char *tls_cert; /* PEM text, kept while the daemon runs */
    char *tls_key;
    oq_web_guard_t guard; /* failed logins per address */
};

/* The routes: a path, the page for GET and the one for POST. */
typedef struct {
    const char *path;
    oq_web_page_fn get;
    oq_web_page_fn post;
} s_route_t;

static const s_route_t s_routes[] = {
    {"/", oq_web_page_overview, NULL},
    {"/workers", oq_web_page_workers, NULL},
    {"/failed", oq_web_page_failed, NULL},
    {"/review", oq_web_page_review, NULL},
    {"/review/show", oq_web_page_review_show, NULL},
    {"/job", oq_web_page_job, NULL},
    {"/action", NULL, oq_web_page_action},
};

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
    if (len == 0 || len >= host_len || !colon[1] || strlen(colon + 1) >= port_len)
        return -1;
    memcpy(host, start, len);
    host[len] = 0;
    strcpy(port, colon + 1);
    return 0;
}

static int s_listen(const char *addr, uint16_t *port_out, bool *ipv6, char *reason,
                    size_t reason_len)
{
    char host[S_ADDR_LEN], port[S_ADDR_LEN];
    if (s_split(addr, host, sizeof host, port, sizeof port) < 0) {
        snprintf(reason, reason_len, "--listen '%s': expected IP:PORT or [IPv6]:PORT", addr);
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(reason, reason_len, "--listen '%s': %s (an IP address and a port number)", addr,
                 gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, OQ_WEB_BACKLOG) < 0) {
        snprintf(reason, reason_len, "--listen '%s': %s", addr, strerror(errno));
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
        snprintf(reason, reason_len, "--listen '%s': %s", addr, strerror(errno));
        close(fd);
        return -1;
    }
    *port_out = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                  : ((struct sockaddr_in *)&bound)->sin_port);
    return fd;
}

const char *oq_web_arg(oq_web_req_t *req, const char *name, bool *bad)
{
    if (req->post) {
        for (size_t i = 0; i < req->field_count; i++)
            if (strcmp(req->fields[i].name, name) == 0)
                return req->fields[i].value;
        return NULL;
    }
    const char *v = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
    if (v && strlen(v) > OQ_WEB_MAX_ARG_BYTES) {
        if (bad)
            *bad = true;
        return NULL;
    }
    return v;
}

static enum MHD_Result s_post_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *filename, const char *content_type,
                                    const char *encoding, const char *data, uint64_t off,
                                    size_t size)
{
    (void)kind;
    (void)filename;
    (void)content_type;
    (void)encoding;
    oq_web_req_t *req = cls;
    if (strlen(key) > OQ_WEB_MAX_FIELD_NAME) {
        req->form_bad = true;
        return MHD_YES;
    }
    oq_web_field_t *field = NULL;
    for (size_t i = 0; i < req->field_count; i++)
        if (strcmp(req->fields[i].name, key) == 0)
            field = &req->fields[i];
    if (!field || off == 0) {
        if (field || req->field_count == OQ_WEB_MAX_FIELDS) {
            req->form_bad = true; /* a field twice, or too many */
            return MHD_YES;
        }
        field = &req->fields[req->field_count++];
        snprintf(field->name, sizeof field->name, "%s", key);
        field->len = 0;
    }
    if (field->len + size > OQ_WEB_MAX_FIELD_BYTES) {
        req->form_bad = true;
        return MHD_YES;
    }
    memcpy(field->value + field->len, data, size);
    field->len += size;
    field->value[field->len] = 0;
    if (memchr(field->value, 0, field->len))
        req->form_bad = true; /* a NUL inside a value */
    return MHD_YES;
}

/* The per-request state, kept between libmicrohttpd's calls. */
typedef struct {
    oq_web_req_t req;
    struct MHD_PostProcessor *pp;
} s_conn_t;

static enum MHD_Result s_send(struct MHD_Connection *conn, oq_web_req_t *req)
{
    size_t len = 0;
    if (oq_web_buf_failed(&req->body)) {
        oq_web_buf_reset(&req->body);
        oq_web_page_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR,
                          "the page grew over its limit or memory ran out");
    }
    char *text = oq_web_buf_take(&req->body, &len);
    struct MHD_Response *response = MHD_create_response_from_buffer(
        len, text ? text : "", text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!response) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                            req->type ? req->type : "text/html; charset=utf-8");
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(response, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(response, "X-Frame-Options", "DENY");
    MHD_add_response_header(response, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; form-action 'self'; "
                            "frame-ancestors 'none'");
    if (req->location[0])
        MHD_add_response_header(response, MHD_HTTP_HEADER_LOCATION, req->location);
    enum MHD_Result rc = MHD_queue_response(conn, req->status, response);
    MHD_destroy_response(response);
    return rc;
}

static enum MHD_Result s_static(struct MHD_Connection *conn, const char *text, const char *type)
{
    struct MHD_Response *response =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!response)
        return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "max-age=3600");
    MHD_add_response_header(response, "X-Content-Type-Options", "nosniff");
    enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_OK, response);
    MHD_destroy_response(response);
    return rc;
}

static int64_t s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static enum MHD_Result s_too_many(struct MHD_Connection *conn)
{
    static const char body[] = "<!doctype html><title>too many failed logins</title><h1>429 "
                               "too many failed logins</h1><p>This address failed to log in "
                               "10 times within a minute: try again in a minute.</p>";
    struct MHD_Response *response =
        MHD_create_response_from_buffer(sizeof body - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!response)
        return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(response, "Retry-After", "60");
    enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_TOO_MANY_REQUESTS, response);
    MHD_destroy_response(response);
    return rc;
}

static enum MHD_Result s_login_needed(struct MHD_Connection *conn)
{
    static const char body[] = "<!doctype html><title>login needed</title><h1>401 login "
                               "needed</h1><p>onceq-web needs a user name and password from "
                               "its users file.</p>";
    struct MHD_Response *response =
        MHD_create_response_from_buffer(sizeof body - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!response)
        return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    enum MHD_Result rc = MHD_queue_basic_auth_fail_response(conn, S_REALM, response);
    MHD_destroy_response(response);
    return rc;
}

static const s_route_t *s_route(const char *path)
{
    for (size_t i = 0; i < sizeof s_routes / sizeof s_routes[0]; i++)
        if (strcmp(s_routes[i].path, path) == 0)
            return &s_routes[i];
    return NULL;
}

static enum MHD_Result s_handle(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_len, void **state)
{
    (void)version;
    oq_web_server_t *self = cls;
    s_conn_t *c = *state;
    if (!c) {
        /* First call: headers only. Log in before reading anything else. */
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const struct sockaddr *peer = info ? info->client_addr : NULL;
        int64_t now = s_now_ms();
        char *pass = NULL;
        char *name = MHD_basic_auth_get_username_password(conn, &pass);
        if (name && !oq_web_guard_allows(&self->guard, peer, now)) {
            MHD_free(name);
            if (pass)
                MHD_free(pass);
            return s_too_many(conn);
        }
        const oq_web_user_t *user = oq_web_users_check(self->web->users, name, pass);
        if (!user && name) {
            oq_web_guard_failed(&self->guard, peer, now);
            oq_warn("web: a failed login"); /* the name typed is not logged: it may be anything */
        }
        if (name)
            MHD_free(name);
        if (pass)
            MHD_free(pass);
        if (!user)
            return s_login_needed(conn);
        c = calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        c->req.web = self->web;
        c->req.conn = conn;
        c->req.user = user;
        c->req.path = url;
        c->req.status = MHD_HTTP_OK;
        c->req.post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
        const char *live = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Onceq-Live");
        c->req.fragment = live && strcmp(live, "1") == 0;
        if (c->req.post) {
            c->pp = MHD_create_post_processor(conn, 4096, s_post_field, &c->req);
            if (!c->pp)
                c->req.form_bad = true; /* not a urlencoded or multipart form */
        }
        *state = c;
        return MHD_YES;
    }
    oq_web_req_t *req = &c->req;
    if (*upload_len) {
        req->body_bytes += *upload_len;
        if (req->body_bytes > OQ_WEB_MAX_BODY_BYTES)
            req->form_bad = true;
        else if (c->pp && MHD_post_process(c->pp, upload, *upload_len) != MHD_YES)
            req->form_bad = true;
        *upload_len = 0;
        return MHD_YES;
    }
    if (strcmp(url, "/static/style.css") == 0)
        return s_static(conn, oq_web_asset_css, "text/css; charset=utf-8");
    if (strcmp(url, "/static/live.js") == 0)
        return s_static(conn, oq_web_asset_js, "text/javascript; charset=utf-8");
    const s_route_t *route = s_route(url);
    bool get =
        strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (!route)
        oq_web_page_error(req, MHD_HTTP_NOT_FOUND, "no such page");
    else if (req->post && route->post) {
        if (req->body_bytes > OQ_WEB_MAX_BODY_BYTES)
            oq_web_page_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "the form is too large");
        else if (req->form_bad)
            oq_web_page_error(req, MHD_HTTP_BAD_REQUEST,
                              "malformed form: expected application/x-www-form-urlencoded with "
                              "at most 16 fields of at most 2,048 bytes each");
        else if (req->user->role != OQ_WEB_ROLE_ADMIN) {
            oq_info("web: %s (viewer) refused: %s needs the admin role", req->user->name, url);
            oq_web_page_error(req, MHD_HTTP_FORBIDDEN,
                              "this user is a viewer: actions need the admin role");
        } else if (!oq_web_users_csrf_ok(req->user, oq_web_arg(req, "csrf", NULL))) {
            oq_warn("web: %s refused: %s without the user's CSRF token", req->user->name, url);
            oq_web_page_error(req, MHD_HTTP_FORBIDDEN,
                              "the form lacks this user's CSRF token: reload the page and "
                              "try again");
        } else
            route->post(req);
    } else if (get && route->get)
        route->get(req);
    else
        oq_web_page_error(req, MHD_HTTP_METHOD_NOT_ALLOWED,
                          route->get ? "this page is read with GET" : "this is an action: POST");
    return s_send(conn, req);
}

static void s_completed(void *cls, struct MHD_Connection *conn, void **state,
                        enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    s_conn_t *c = *state;
    if (!c)
        return;
    if (c->pp)
        MHD_destroy_post_processor(c->pp);
    oq_web_buf_reset(&c->req.body);
    free(c);
    *state = NULL;
}

static char *s_read_pem(const char *path, char *reason, size_t reason_len)
{
    FILE *file = fopen(path, "r");
    if (!file) {
        snprintf(reason, reason_len, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = malloc(S_MAX_PEM_BYTES + 1);
    size_t len = text ? fread(text, 1, S_MAX_PEM_BYTES + 1, file) : 0;
    fclose(file);
    if (!text || len == 0 || len > S_MAX_PEM_BYTES) {
        snprintf(reason, reason_len, "%s: empty, unreadable or over 64 KiB", path);
        free(text);
        return NULL;
    }
    text[len] = 0;
    return text;
}

oq_web_server_t *oq_web_server_new(oq_web_t *web, const char *addr, const char *cert,
                                   const char *key, char *reason, size_t reason_len)
{
    oq_web_server_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(reason, reason_len, "out of memory");
        return NULL;
    }
    self->web = web;
    self->epoll_fd = -1;
    bool ipv6 = false;
    if (cert) {
        self->tls_cert = s_read_pem(cert, reason, reason_len);
        self->tls_key = self->tls_cert ? s_read_pem(key, reason, reason_len) : NULL;
        if (!self->tls_key) {
            oq_web_server_destroy(&self);
            return NULL;
        }
    }
    self->fd = s_listen(addr, &self->port, &ipv6, reason, reason_len);
    if (self->fd < 0) {
        oq_web_server_destroy(&self);
        return NULL;
    }
    unsigned int flags =
        MHD_USE_EPOLL | MHD_USE_ERROR_LOG | (ipv6 ? MHD_USE_IPv6 : 0) | (cert ? MHD_USE_TLS : 0);
    if (cert)
        self->httpd = MHD_start_daemon(
            flags, 0, NULL, NULL, s_handle, self, MHD_OPTION_LISTEN_SOCKET, self->fd,
            MHD_OPTION_NOTIFY_COMPLETED, s_completed, self, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned int)OQ_WEB_MAX_CONNS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned int)OQ_WEB_MAX_CONNS_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT,
            (unsigned int)OQ_WEB_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
            (size_t)OQ_WEB_HEADER_BYTES, MHD_OPTION_HTTPS_MEM_CERT, self->tls_cert,
            MHD_OPTION_HTTPS_MEM_KEY, self->tls_key, MHD_OPTION_END);
    else
        self->httpd = MHD_start_daemon(
            flags, 0, NULL, NULL, s_handle, self, MHD_OPTION_LISTEN_SOCKET, self->fd,
            MHD_OPTION_NOTIFY_COMPLETED, s_completed, self, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned int)OQ_WEB_MAX_CONNS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned int)OQ_WEB_MAX_CONNS_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT,
            (unsigned int)OQ_WEB_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
            (size_t)OQ_WEB_HEADER_BYTES, MHD_OPTION_END);
    if (!self->httpd) {
        snprintf(reason, reason_len, "the HTTP server did not start on %s%s", addr,
                 cert ? " (is the certificate and key a PEM pair?)" : "");
        oq_web_server_destroy(&self);
        return NULL;
    }
    self->fd = -1; /* the daemon's now */
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->httpd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info) {
        snprintf(reason, reason_len, "the HTTP server has no epoll descriptor");
        oq_web_server_destroy(&self);
        return NULL;
    }
    self->epoll_fd = info->epoll_fd;
    return self;
}

void oq_web_server_destroy(oq_web_server_t **self_p)
{
    oq_web_server_t *self = *self_p;
    if (!self)
        return;
    if (self->httpd)
        MHD_stop_daemon(self->httpd);
    if (self->fd >= 0)
        close(self->fd);
    free(self->tls_cert);
    free(self->tls_key);
    free(self);
    *self_p = NULL;
}

uint16_t oq_web_server_port(const oq_web_server_t *self)
{
    return self->port;
}

int oq_web_server_run(oq_web_server_t *self, int max_wait_ms)
{
    MHD_UNSIGNED_LONG_LONG next = 0;
    int wait_ms = max_wait_ms;
    if (MHD_get_timeout(self->httpd, &next) == MHD_YES && next < (MHD_UNSIGNED_LONG_LONG)wait_ms)
        wait_ms = (int)next;
    struct pollfd item = {.fd = self->epoll_fd, .events = POLLIN};
    if (poll(&item, 1, wait_ms) < 0 && errno != EINTR)
        return -1;
    return MHD_run(self->httpd) == MHD_YES ? 0 : -1;
}
