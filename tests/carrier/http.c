/*  http.c: routes, the request life cycle and the event loop.

    libmicrohttpd calls s_on_request several times per request: once with
    the headers (where a missing key or an announced oversize body is
    refused at once, without reading the body), once per piece of body, and
    once when the request is complete, where the work happens. A reply is
    then sent, or held back (the connection is suspended and listed in
    `pending` with its due time), or dropped: the handler returns MHD_NO,
    which the library documents as "the socket must be closed", so the
    client sees its connection closed with no reply at all, after the
    shipment was created. */
#include "http.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <jansson.h>
#include <microhttpd.h>

#include "carrier_limits.h"
#include "onceq/clock.h"
#include "onceq/log.h"
#include "shipments.h"

#define S_KEY_HEADER      "Idempotency-Key"
#define S_REPLAYED_HEADER "Idempotent-Replayed"
#define S_JSON            "application/json"
#define S_SHIPMENTS       "/shipments"
#define S_SHIPMENT_PREFIX "/shipments/"
#define S_FAULTS          "/faults"
#define S_ERR_LEN         512
#define S_ADDRESS_LEN     64

typedef enum {
    S_CREATE,      /* POST /shipments */
    S_LIST,        /* GET /shipments */
    S_SHOW,        /* GET /shipments/{reference} */
    S_FAULTS_GET,  /* GET /faults */
    S_FAULTS_PUT,  /* PUT /faults */
    S_NOT_FOUND,   /* any other path */
    S_NOT_ALLOWED, /* a known path, another method */
} s_route_t;

/* One request, from its headers to its reply (the library keeps it for us
   between calls and s_on_completed frees it). */
typedef struct {
    s_route_t route;
    const char *allow; /* S_NOT_ALLOWED: the Allow header */
    char *body;        /* the body so far, at most OQ_CARRIER_MAX_BODY_BYTES */
    size_t len;
    bool too_large; /* the body went past the limit: the rest is discarded */
    char key[OQ_CARRIER_MAX_KEY_LEN + 1];
    int64_t started_ms;
    /* The reply, kept here while a delay holds it back. */
    bool resumed; /* the delay is over: send (or drop) the reply */
    unsigned status;
    char *reply;
    bool replayed;
    bool drop;
    const char *outcome;
    char reference[OQ_CARRIER_MAX_REFERENCE_LEN];
} s_request_t;

/* A reply waiting out --delay-ms on a suspended connection. */
typedef struct {
    struct MHD_Connection *connection;
    s_request_t *request;
    int64_t due_ms;
} s_pending_t;

/* Counts since the start, shown in GET /shipments and GET /faults. */
typedef struct {
    uint64_t posts;     /* POST /shipments received */
    uint64_t created;   /* new shipments */
    uint64_t replayed;  /* saved answers sent again */
    uint64_t conflicts; /* 422: a key with another body */
    uint64_t invalid;   /* 400: no key, a bad key, a bad body */
    uint64_t too_large; /* 413 */
    uint64_t full;      /* 507 */
    uint64_t errors;    /* 503 injected by --error-rate */
    uint64_t dropped;   /* replies dropped by --drop-reply-rate */
    uint64_t delayed;   /* replies held back by --delay-ms */
} s_totals_t;

struct oq_http {
    struct MHD_Daemon *daemon;
    oq_shipments_t *shipments;
    oq_fault_plan_t faults;
    s_totals_t totals;
    /* Suspended connections count against the connection limit, so this
       many slots always suffice. */
    s_pending_t pending[OQ_CARRIER_MAX_CONNECTIONS];
    size_t pending_count;
    char address[S_ADDRESS_LEN];
};

static int64_t s_now_ms(void)
{
    return oq_clock_now_ms(oq_clock_system());
}

/* ---- replies ---- */

static void s_log(const s_request_t *req, const char *method, const char *url, unsigned status,
                  const char *outcome, const char *reference)
{
    /* Reads are what tests and harnesses poll: debug, so the log stays one
       line per request that can change something. */
    oq_log_level_t level = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ? OQ_LOG_DEBUG : OQ_LOG_INFO;
    char st[16];
    if (status)
        snprintf(st, sizeof st, "%u", status);
    else
        snprintf(st, sizeof st, "none");
    oq_log(level, "%s %s%s%s%s status=%s outcome=%s%s%s ms=%" PRId64, method, url,
           *req->key ? " key=\"" : "", req->key, *req->key ? "\"" : "", st, outcome,
           reference && *reference ? " reference=" : "", reference ? reference : "",
           s_now_ms() - req->started_ms);
}

/* Queue text (taken: freed by the library) as the reply. */
static enum MHD_Result s_reply(struct MHD_Connection *connection, unsigned status, char *text,
                               bool replayed, const char *allow)
{
    if (!text)
        return MHD_NO; /* out of memory: closing is all that is left */
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, S_JSON);
    if (replayed)
        MHD_add_response_header(r, S_REPLAYED_HEADER, "true");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(connection, status, r);
    MHD_destroy_response(r);
    return ret;
}

static char *s_error_text(const char *code, const char *message)
{
    json_t *o = json_pack("{s:s, s:s}", "error", code, "message", message);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

static enum MHD_Result s_reply_error(struct MHD_Connection *connection, s_request_t *req,
                                     const char *method, const char *url, unsigned status,
                                     const char *code, const char *message)
{
    s_log(req, method, url, status, code, NULL);
    return s_reply(connection, status, s_error_text(code, message), false, req->allow);
}

/* Send the reply kept in req, or drop it. */
static enum MHD_Result s_deliver(oq_http_t *self, struct MHD_Connection *connection,
                                 s_request_t *req, const char *method, const char *url)
{
    if (req->drop) {
        self->totals.dropped++;
        oq_shipments_note_dropped(self->shipments, req->key);
        char outcome[64];
        snprintf(outcome, sizeof outcome, "%s,reply-dropped", req->outcome);
        s_log(req, method, url, 0, outcome, req->reference);
        return MHD_NO;
    }
    s_log(req, method, url, req->status, req->outcome, req->reference);
    char *text = req->reply;
    req->reply = NULL;
    return s_reply(connection, req->status, text, req->replayed, NULL);
}

/* The reply of a POST /shipments that got this far: now, or after the
   delay on a suspended connection. */
static enum MHD_Result s_finish(oq_http_t *self, struct MHD_Connection *connection,
                                s_request_t *req, const char *method, const char *url)
{
    uint32_t delay_ms = self->faults.settings.delay_ms;
    if (delay_ms == 0 || self->pending_count == OQ_CARRIER_MAX_CONNECTIONS)
        return s_deliver(self, connection, req, method, url);
    self->totals.delayed++;
    self->pending[self->pending_count++] =
        (s_pending_t){.connection = connection, .request = req, .due_ms = s_now_ms() + delay_ms};
    MHD_suspend_connection(connection);
    return MHD_YES;
}

/* ---- routes ---- */

static s_route_t s_route(const char *url, const char *method, const char **allow)
{
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    if (strcmp(url, S_SHIPMENTS) == 0) {
        *allow = "GET, POST";
        if (strcmp(method, MHD_HTTP_METHOD_POST) == 0)
            return S_CREATE;
        return get ? S_LIST : S_NOT_ALLOWED;
    }
    if (strncmp(url, S_SHIPMENT_PREFIX, strlen(S_SHIPMENT_PREFIX)) == 0) {
        *allow = "GET";
        return get ? S_SHOW : S_NOT_ALLOWED;
    }
    if (strcmp(url, S_FAULTS) == 0) {
        *allow = "GET, PUT";
        if (strcmp(method, MHD_HTTP_METHOD_PUT) == 0)
            return S_FAULTS_PUT;
        return get ? S_FAULTS_GET : S_NOT_ALLOWED;
    }
    return S_NOT_FOUND;
}

static json_t *s_totals_json(const s_totals_t *t)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "posts",
                     (json_int_t)t->posts, "created", (json_int_t)t->created, "replayed",
                     (json_int_t)t->replayed, "conflicts", (json_int_t)t->conflicts, "invalid",
                     (json_int_t)t->invalid, "too_large", (json_int_t)t->too_large, "full",
                     (json_int_t)t->full, "injected_errors", (json_int_t)t->errors,
                     "dropped_replies", (json_int_t)t->dropped, "delayed_replies",
                     (json_int_t)t->delayed);
}

static json_t *s_faults_json(const oq_http_t *self)
{
    const oq_fault_settings_t *f = &self->faults.settings;
    return json_pack("{s:f, s:f, s:I, s:I, s:o}", "error_rate", f->error_rate, "drop_reply_rate",
                     f->drop_reply_rate, "delay_ms", (json_int_t)f->delay_ms, "seed",
                     (json_int_t)self->faults.seed, "totals", s_totals_json(&self->totals));
}

static enum MHD_Result s_reply_json(struct MHD_Connection *connection, s_request_t *req,
                                    const char *method, const char *url, json_t *o)
{
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        return s_reply_error(connection, req, method, url, MHD_HTTP_INTERNAL_SERVER_ERROR,
                             "out_of_memory", "out of memory");
    s_log(req, method, url, MHD_HTTP_OK, "ok", NULL);
    return s_reply(connection, MHD_HTTP_OK, text, false, NULL);
}

static enum MHD_Result s_list(oq_http_t *self, struct MHD_Connection *connection, s_request_t *req,
                              const char *method, const char *url)
{
    json_t *list = oq_shipments_list(self->shipments);
    json_t *o = list ? json_pack("{s:I, s:o, s:o}", "count",
                                 (json_int_t)oq_shipments_count(self->shipments), "shipments", list,
                                 "totals", s_totals_json(&self->totals))
                     : NULL;
    return s_reply_json(connection, req, method, url, o);
}

static enum MHD_Result s_show(oq_http_t *self, struct MHD_Connection *connection, s_request_t *req,
                              const char *method, const char *url)
{
    const char *reference = url + strlen(S_SHIPMENT_PREFIX);
    json_t *o = oq_shipments_find(self->shipments, reference);
    if (!o) {
        char err[S_ERR_LEN];
        snprintf(err, sizeof err, "no shipment \"%.64s\"", reference);
        return s_reply_error(connection, req, method, url, MHD_HTTP_NOT_FOUND, "not_found", err);
    }
    return s_reply_json(connection, req, method, url, o);
}

/* PUT /faults: any of error_rate, drop_reply_rate, delay_ms; all checked
   before any is applied. */
static enum MHD_Result s_faults_put(oq_http_t *self, struct MHD_Connection *connection,
                                    s_request_t *req, const char *method, const char *url)
{
    char err[S_ERR_LEN];
    json_error_t jerr;
    json_t *o = json_loadb(req->body ? req->body : "", req->len, JSON_REJECT_DUPLICATES, &jerr);
    oq_fault_settings_t f = self->faults.settings;
    const char *name;
    json_t *v;
    if (!json_is_object(o)) {
        snprintf(err, sizeof err, "the body must be a JSON object");
        goto bad;
    }
    json_object_foreach(o, name, v)
    {
        if (strcmp(name, "error_rate") == 0 || strcmp(name, "drop_reply_rate") == 0) {
            double r = json_number_value(v);
            if (!json_is_number(v) || r < 0 || r > 1) {
                snprintf(err, sizeof err, "\"%s\" must be a number from 0 to 1", name);
                goto bad;
            }
            *(name[0] == 'e' ? &f.error_rate : &f.drop_reply_rate) = r;
        } else if (strcmp(name, "delay_ms") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > OQ_CARRIER_MAX_DELAY_MS) {
                snprintf(err, sizeof err, "\"delay_ms\" must be an integer from 0 to %d",
                         OQ_CARRIER_MAX_DELAY_MS);
                goto bad;
            }
            f.delay_ms = (uint32_t)json_integer_value(v);
        } else {
            snprintf(err, sizeof err, "unknown field \"%.64s\"", name);
            goto bad;
        }
    }
    json_decref(o);
    self->faults.settings = f;
    oq_info("faults set: error_rate=%g drop_reply_rate=%g delay_ms=%u", f.error_rate,
            f.drop_reply_rate, f.delay_ms);
    return s_reply_json(connection, req, method, url, s_faults_json(self));
bad:
    json_decref(o);
    return s_reply_error(connection, req, method, url, MHD_HTTP_BAD_REQUEST, "invalid_request",
                         err);
}

static enum MHD_Result s_create(oq_http_t *self, struct MHD_Connection *connection,
                                s_request_t *req, const char *method, const char *url)
{
    if (req->too_large) {
        self->totals.too_large++;
        char err[S_ERR_LEN];
        snprintf(err, sizeof err, "the body is over %d bytes", OQ_CARRIER_MAX_BODY_BYTES);
        return s_reply_error(connection, req, method, url, MHD_HTTP_CONTENT_TOO_LARGE,
                             "body_too_large", err);
    }
    oq_fault_draw_t draw = oq_fault_plan_draw(&self->faults);
    if (draw.error) {
        self->totals.errors++;
        req->status = MHD_HTTP_SERVICE_UNAVAILABLE;
        req->reply = s_error_text("injected_error",
                                  "service unavailable (--error-rate); nothing was processed");
        req->outcome = "injected-error";
        return s_finish(self, connection, req, method, url);
    }
    oq_shipments_answer_t a;
    if (oq_shipments_submit(self->shipments, req->key, req->body ? req->body : "", req->len, &a) <
        0)
        return s_reply_error(connection, req, method, url, MHD_HTTP_INTERNAL_SERVER_ERROR,
                             "out_of_memory", "out of memory");
    static const char *const outcomes[] = {
        [OQ_SHIPMENTS_CREATED] = "created",   [OQ_SHIPMENTS_REPLAYED] = "replayed",
        [OQ_SHIPMENTS_CONFLICT] = "conflict", [OQ_SHIPMENTS_INVALID] = "invalid",
        [OQ_SHIPMENTS_FULL] = "full",
    };
    switch (a.outcome) {
    case OQ_SHIPMENTS_CREATED:
        self->totals.created++;
        break;
    case OQ_SHIPMENTS_REPLAYED:
        self->totals.replayed++;
        break;
    case OQ_SHIPMENTS_CONFLICT:
        self->totals.conflicts++;
        break;
    case OQ_SHIPMENTS_INVALID:
        self->totals.invalid++;
        break;
    case OQ_SHIPMENTS_FULL:
        self->totals.full++;
        break;
    }
    req->status = a.status;
    req->reply = a.body;
    req->replayed = a.outcome == OQ_SHIPMENTS_REPLAYED;
    req->drop = draw.drop;
    req->outcome = outcomes[a.outcome];
    snprintf(req->reference, sizeof req->reference, "%s", a.reference);
    return s_finish(self, connection, req, method, url);
}

/* ---- the request life cycle ---- */

/* The headers are in: refuse what can be refused without the body. */
static enum MHD_Result s_begin(oq_http_t *self, struct MHD_Connection *connection, s_request_t *req,
                               const char *method, const char *url)
{
    char err[S_ERR_LEN];
    if (req->route == S_NOT_FOUND) {
        snprintf(err, sizeof err, "no such path \"%.128s\"", url);
        return s_reply_error(connection, req, method, url, MHD_HTTP_NOT_FOUND, "not_found", err);
    }
    if (req->route == S_NOT_ALLOWED) {
        snprintf(err, sizeof err, "%.16s is not allowed on %.128s (allowed: %s)", method, url,
                 req->allow);
        return s_reply_error(connection, req, method, url, MHD_HTTP_METHOD_NOT_ALLOWED,
                             "method_not_allowed", err);
    }
    req->allow = NULL;
    if (req->route != S_CREATE && req->route != S_FAULTS_PUT)
        return MHD_YES;

    if (req->route == S_CREATE) {
        self->totals.posts++;
        const char *key = NULL;
        size_t key_len = 0;
        if (MHD_lookup_connection_value_n(connection, MHD_HEADER_KIND, S_KEY_HEADER,
                                          strlen(S_KEY_HEADER), &key, &key_len) != MHD_YES ||
            !key) {
            self->totals.invalid++;
            return s_reply_error(connection, req, method, url, MHD_HTTP_BAD_REQUEST,
                                 "missing_idempotency_key",
                                 "the header " S_KEY_HEADER " is required");
        }
        if (strlen(key) != key_len) {
            snprintf(err, sizeof err, S_KEY_HEADER " holds a NUL byte");
            self->totals.invalid++;
            return s_reply_error(connection, req, method, url, MHD_HTTP_BAD_REQUEST,
                                 "invalid_idempotency_key", err);
        }
        if (oq_shipments_check_key(key, err, sizeof err) < 0) {
            self->totals.invalid++;
            return s_reply_error(connection, req, method, url, MHD_HTTP_BAD_REQUEST,
                                 "invalid_idempotency_key", err);
        }
        memcpy(req->key, key, key_len + 1);
    }
    const char *cl =
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || *end || n > OQ_CARRIER_MAX_BODY_BYTES) {
            if (req->route == S_CREATE)
                self->totals.too_large++;
            snprintf(err, sizeof err, "Content-Length %.32s is over %d bytes", cl,
                     OQ_CARRIER_MAX_BODY_BYTES);
            return s_reply_error(connection, req, method, url, MHD_HTTP_CONTENT_TOO_LARGE,
                                 "body_too_large", err);
        }
    }
    return MHD_YES;
}

/* A piece of body: kept up to the limit, the rest read and discarded (the
   library allows no reply while body is still coming; the 413 goes out
   when it is all in). */
static void s_take_body(s_request_t *req, const char *data, size_t size)
{
    if (req->too_large)
        return;
    if (size > OQ_CARRIER_MAX_BODY_BYTES - req->len) {
        req->too_large = true;
        free(req->body);
        req->body = NULL;
        req->len = 0;
        return;
    }
    char *b = realloc(req->body, req->len + size + 1);
    if (!b) {
        req->too_large = true; /* no memory for it: the same answer as a body too big */
        return;
    }
    memcpy(b + req->len, data, size);
    req->len += size;
    b[req->len] = '\0';
    req->body = b;
}

static enum MHD_Result s_on_request(void *cls, struct MHD_Connection *connection, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **req_cls)
{
    oq_http_t *self = cls;
    s_request_t *req = *req_cls;
    if (!req) {
        req = calloc(1, sizeof *req);
        if (!req)
            return MHD_NO;
        *req_cls = req;
        req->started_ms = s_now_ms();
        req->route = s_route(url, method, &req->allow);
        return s_begin(self, connection, req, method, url);
    }
    if (req->resumed)
        return s_deliver(self, connection, req, method, url);
    if (*upload_data_size) {
        s_take_body(req, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    switch (req->route) {
    case S_CREATE:
        return s_create(self, connection, req, method, url);
    case S_LIST:
        return s_list(self, connection, req, method, url);
    case S_SHOW:
        return s_show(self, connection, req, method, url);
    case S_FAULTS_GET:
        return s_reply_json(connection, req, method, url, s_faults_json(self));
    case S_FAULTS_PUT:
        if (req->too_large) {
            char err[S_ERR_LEN];
            snprintf(err, sizeof err, "the body is over %d bytes", OQ_CARRIER_MAX_BODY_BYTES);
            return s_reply_error(connection, req, method, url, MHD_HTTP_CONTENT_TOO_LARGE,
                                 "body_too_large", err);
        }
        return s_faults_put(self, connection, req, method, url);
    case S_NOT_FOUND:
    case S_NOT_ALLOWED:
        break;
    }
    assert(false && "answered in s_begin");
    return MHD_NO;
}

static void s_on_completed(void *cls, struct MHD_Connection *connection, void **req_cls,
                           enum MHD_RequestTerminationCode code)
{
    s_request_t *req = *req_cls;
    if (!req)
        return;
    free(req->body);
    free(req->reply);
    free(req);
    *req_cls = NULL;
}

/* ---- new, destroy, run ---- */

/* The library's own messages (a port in use, a connection closed after a
   dropped reply) go to the log with the rest, one line each. */
static void s_on_library_log(void *cls, const char *format, va_list args)
{
    char text[S_ERR_LEN];
    vsnprintf(text, sizeof text, format, args);
    size_t n = strlen(text);
    while (n && text[n - 1] == '\n')
        text[--n] = '\0';
    oq_info("libmicrohttpd: %s", text);
}

oq_http_t *oq_http_new(const oq_http_config_t *config)
{
    assert(config && config->bind);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    bool v6 = false;
    if (inet_pton(AF_INET, config->bind, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(config->port);
    } else if (inet_pton(AF_INET6, config->bind, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(config->port);
        flags |= MHD_USE_IPv6;
        v6 = true;
    } else {
        oq_error("--bind \"%s\" is not an IPv4 or IPv6 address", config->bind);
        return NULL;
    }

    oq_http_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->shipments = oq_shipments_new(config->max_shipments, config->first_ref);
    if (!self->shipments) {
        free(self);
        return NULL;
    }
    oq_fault_plan_init(&self->faults, &config->faults, config->seed);
    self->daemon =
        MHD_start_daemon(flags, config->port, NULL, NULL, s_on_request, self, MHD_OPTION_SOCK_ADDR,
                         (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, s_on_completed, self,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)OQ_CARRIER_MAX_CONNECTIONS,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)OQ_CARRIER_CONNECTION_TIMEOUT_S,
                         MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                         MHD_OPTION_EXTERNAL_LOGGER, s_on_library_log, NULL, MHD_OPTION_END);
    if (!self->daemon) {
        oq_error("cannot listen on %s port %u (in use? see the error above)", config->bind,
                 (unsigned)config->port);
        oq_shipments_destroy(&self->shipments);
        free(self);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->daemon, MHD_DAEMON_INFO_BIND_PORT);
    unsigned port = info ? info->port : config->port;
    snprintf(self->address, sizeof self->address, v6 ? "[%s]:%u" : "%s:%u", config->bind, port);
    return self;
}

static void s_resume(oq_http_t *self, size_t i)
{
    s_pending_t p = self->pending[i];
    self->pending[i] = self->pending[--self->pending_count];
    p.request->resumed = true;
    MHD_resume_connection(p.connection);
}

void oq_http_destroy(oq_http_t **self_p)
{
    assert(self_p);
    oq_http_t *self = *self_p;
    if (!self)
        return;
    /* The library must not be stopped with suspended connections: send
       what they wait for now. */
    while (self->pending_count)
        s_resume(self, 0);
    MHD_run(self->daemon);
    MHD_stop_daemon(self->daemon);
    oq_shipments_destroy(&self->shipments);
    free(self);
    *self_p = NULL;
}

const char *oq_http_address(const oq_http_t *self)
{
    return self->address;
}

int oq_http_run(oq_http_t *self, int stop_fd)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info) {
        oq_error("the server library gave no epoll descriptor");
        return -1;
    }
    struct pollfd fds[2] = {{.fd = info->epoll_fd, .events = POLLIN},
                            {.fd = stop_fd, .events = POLLIN}};
    for (;;) {
        /* Wait for the network, the library's own timers or the nearest
           delayed reply, whichever comes first; no fixed tick. */
        int timeout = -1;
        MHD_UNSIGNED_LONG_LONG mhd_ms;
        if (MHD_get_timeout(self->daemon, &mhd_ms) == MHD_YES)
            timeout = mhd_ms > INT_MAX ? INT_MAX : (int)mhd_ms;
        int64_t now = s_now_ms();
        for (size_t i = 0; i < self->pending_count; i++) {
            int64_t wait = self->pending[i].due_ms - now;
            wait = wait < 0 ? 0 : wait;
            if (timeout < 0 || wait < timeout)
                timeout = (int)wait;
        }
        int n = poll(fds, 2, timeout);
        if (n < 0 && errno != EINTR) {
            oq_error("poll: %s", strerror(errno));
            return -1;
        }
        if (n > 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
            return 0;
        now = s_now_ms();
        for (size_t i = 0; i < self->pending_count;) {
            if (self->pending[i].due_ms <= now)
                s_resume(self, i); /* moves the last entry into i */
            else
                i++;
        }
        if (MHD_run(self->daemon) != MHD_YES) {
            oq_error("the server library failed to run");
            return -1;
        }
    }
}
