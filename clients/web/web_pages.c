/*  web_pages.c: the pages and actions of onceq-web. Each page asks the
    broker with one request, or a few bounded ones (a page of a store is
    a page of the broker's: no list is loaded whole), and renders plain
    HTML that works without JavaScript: forms post, links page. live.js
    then asks for the same page every few seconds and swaps its main part,
    which is all a request with the X-Onceq-Live header gets.

    An action is a POST to /action with op, the job or filter, the user's
    CSRF token (checked before this file is reached) and, for the actions
    that touch many jobs or cannot be undone, confirm=yes: without it the
    answer is a page that says what would happen, with the same form and
    the button that confirms. Every action is logged with the user's name
    and the broker's answer. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../cli/mpjson.h"
#include "onceq/config.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "web.h"

#define S_TIME_LEN 40

/* ---- layout ------------------------------------------------------------ */

static void s_head(oq_web_req_t *req, const char *title, const char *nav)
{
    oq_web_buf_t *b = &req->body;
    if (req->fragment)
        return;
    static const struct {
        const char *key, *path, *label;
    } items[] = {{"overview", "/", "Overview"},
                 {"workers", "/workers", "Workers"},
                 {"failed", "/failed", "Failed"},
                 {"review", "/review", "Review"},
                 {"job", "/job", "Job by id"}};
    oq_web_buf_puts(b, "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                       "<meta name=\"viewport\" content=\"width=device-width\">"
                       "<link rel=\"stylesheet\" href=\"/static/style.css\"><title>");
    oq_web_buf_escape(b, title, strlen(title));
    oq_web_buf_puts(b, " · onceq</title><script src=\"/static/live.js\" defer></script></head>"
                       "<body><header><span class=\"brand\">onceq</span><nav>");
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++)
        oq_web_buf_printf(b, "<a href=\"%s\"%s>%s</a>", items[i].path,
                          strcmp(items[i].key, nav) == 0 ? " class=\"here\"" : "", items[i].label);
    oq_web_buf_puts(b, "</nav><span class=\"who\">");
    oq_web_buf_escape(b, req->user->name, strlen(req->user->name));
    oq_web_buf_printf(b, " (%s) · broker ", oq_web_role_name(req->user->role));
    const char *ep = oq_web_broker_endpoint(req->web->broker);
    oq_web_buf_escape(b, ep, strlen(ep));
    oq_web_buf_puts(b, "</span></header><main id=\"live\">");
}

static void s_foot(oq_web_req_t *req)
{
    if (!req->fragment)
        oq_web_buf_puts(&req->body, "</main></body></html>\n");
}

void oq_web_page_error(oq_web_req_t *req, unsigned status, const char *message)
{
    oq_web_buf_reset(&req->body);
    req->status = status;
    req->fragment = false;
    char title[32];
    snprintf(title, sizeof title, "error %u", status);
    s_head(req, title, "");
    oq_web_buf_printf(&req->body, "<h1>%u</h1><p class=\"error\" id=\"error\">", status);
    oq_web_buf_escape(&req->body, message, strlen(message));
    oq_web_buf_puts(&req->body, "</p><p><a href=\"/\">back to the overview</a></p>");
    s_foot(req);
}

/* The broker's failure as an error page: its answer (a refusal) as 409,
   no answer as 503 (and the next broker of the list is tried). */
static void s_broker_error(oq_web_req_t *req, const char *what)
{
    oq_client_t *client = oq_web_broker_client(req->web->broker);
    char text[600];
    oq_err_t code = oq_client_error_code(client);
    if (code == OQ_ERR_NONE)
        snprintf(text, sizeof text, "%s: the broker did not answer (%s)", what,
                 oq_client_error(client));
    else
        snprintf(text, sizeof text, "%s: %s: %s", what, oq_proto_err_name(code),
                 oq_client_error(client));
    unsigned status = code == OQ_ERR_NONE        ? MHD_HTTP_SERVICE_UNAVAILABLE
                      : code == OQ_ERR_NOT_FOUND ? MHD_HTTP_NOT_FOUND
                                                 : MHD_HTTP_CONFLICT;
    oq_web_broker_failed(req->web->broker);
    oq_web_page_error(req, status, text);
}

static void s_time(oq_web_buf_t *b, const msgpack_object *map, const char *key)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 == 0) {
        oq_web_buf_puts(b, "-");
        return;
    }
    time_t seconds = (time_t)(o->via.u64 / 1000);
    struct tm tm;
    char stamp[S_TIME_LEN];
    if (!gmtime_r(&seconds, &tm) || !strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm)) {
        oq_web_buf_puts(b, "-");
        return;
    }
    int64_t age_s = (int64_t)time(NULL) - (int64_t)seconds;
    oq_web_buf_printf(b, "<time datetime=\"%" PRIu64 "\">%s UTC</time>", o->via.u64, stamp);
    if (age_s >= 0)
        oq_web_buf_printf(b, " <span class=\"age\">(%" PRId64 "m ago)</span>", age_s / 60);
}

static void s_field(oq_web_buf_t *b, const msgpack_object *map, const char *key)
{
    oq_web_buf_value(b, oq_proto_map_get(map, key));
}

static uint64_t s_uint(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = oq_proto_map_get(map, key);
    return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

static bool s_str_is(const msgpack_object *o, const char *text, size_t len)
{
    return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == len &&
           memcmp(o->via.str.ptr, text, len) == 0;
}

/* The payload as JSON in a <pre>, cut after max bytes. */
static void s_payload(oq_web_buf_t *b, const msgpack_object *payload, size_t max)
{
    if (!payload) {
        oq_web_buf_puts(b, "<pre class=\"payload\">-</pre>");
        return;
    }
    json_t *json = oq_mpjson_from_object(payload);
    char *text = json ? json_dumps(json, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
    json_decref(json);
    oq_web_buf_puts(b, "<pre class=\"payload\">");
    if (text) {
        size_t len = strlen(text);
        oq_web_buf_escape(b, text, len > max ? max : len);
        if (len > max)
            oq_web_buf_printf(b, "\n… (%zu bytes more)", len - max);
    } else
        oq_web_buf_puts(b, "(not shown: out of memory)");
    free(text);
    oq_web_buf_puts(b, "</pre>");
}

/* A form posting op to /action with the user's CSRF token; fields are
   (name, value) pairs ending in NULL. Nothing for a viewer. */
static void s_action_form(oq_web_req_t *req, const char *op, const char *label, const char *cls,
                          const char *const *fields)
{
    if (req->user->role != OQ_WEB_ROLE_ADMIN)
        return;
    oq_web_buf_t *b = &req->body;
    oq_web_buf_printf(b,
                      "<form method=\"post\" action=\"/action\" class=\"inline\">"
                      "<input type=\"hidden\" name=\"csrf\" value=\"%s\">"
                      "<input type=\"hidden\" name=\"op\" value=\"%s\">",
                      req->user->csrf, op);
    for (size_t i = 0; fields && fields[i]; i += 2) {
        oq_web_buf_printf(b, "<input type=\"hidden\" name=\"%s\" value=\"", fields[i]);
        oq_web_buf_escape(b, fields[i + 1], strlen(fields[i + 1]));
        oq_web_buf_puts(b, "\">");
    }
    oq_web_buf_printf(b, "<button type=\"submit\" class=\"%s\" data-op=\"%s\">%s</button></form>",
                      cls, op, label);
}

/* ---- overview ---------------------------------------------------------- */

static void s_sample_from(oq_web_t *web, const msgpack_object *root)
{
    const msgpack_object *queues = oq_proto_map_get(root, "queues");
    if (!queues || queues->type != MSGPACK_OBJECT_ARRAY)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    oq_web_sample_t sample = {.at_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000};
    for (uint32_t i = 0; i < queues->via.array.size; i++) {
        sample.done += s_uint(&queues->via.array.ptr[i], "done");
        sample.failed += s_uint(&queues->via.array.ptr[i], "failed");
    }
    oq_web_history_add(&web->history, &sample);
}

void oq_web_sample(oq_web_t *web)
{
    oq_client_t *client = oq_web_broker_client(web->broker);
    oq_msg_t reply;
    if (!client || oq_client_stats_page(client, 0, 0, web->timeout_ms, &reply) < 0) {
        if (client)
            oq_web_broker_failed(web->broker);
        return;
    }
    s_sample_from(web, &reply.root);
    oq_proto_msg_release(&reply);
}

static void s_table(oq_web_buf_t *b, const char *id, const msgpack_object *rows,
                    const char *const *columns, const char *const *headers, size_t count,
                    const char *link_key, const char *link_prefix)
{
    oq_web_buf_printf(b, "<table id=\"%s\"><thead><tr>", id);
    for (size_t c = 0; c < count; c++)
        oq_web_buf_printf(b, "<th>%s</th>", headers[c]);
    oq_web_buf_puts(b, "</tr></thead><tbody>");
    for (uint32_t r = 0; rows && rows->type == MSGPACK_OBJECT_ARRAY && r < rows->via.array.size;
         r++) {
        const msgpack_object *row = &rows->via.array.ptr[r];
        oq_web_buf_puts(b, "<tr>");
        for (size_t c = 0; c < count; c++) {
            const msgpack_object *v = oq_proto_map_get(row, columns[c]);
            oq_web_buf_printf(b, "<td data-col=\"%s\">", columns[c]);
            if (link_key && strcmp(columns[c], link_key) == 0 && v &&
                v->type == MSGPACK_OBJECT_STR) {
                oq_web_buf_printf(b, "<a href=\"%s", link_prefix);
                oq_web_buf_urlencode(b, v->via.str.ptr, v->via.str.size);
                oq_web_buf_puts(b, "\">");
                oq_web_buf_value(b, v);
                oq_web_buf_puts(b, "</a>");
            } else
                oq_web_buf_value(b, v);
            oq_web_buf_puts(b, "</td>");
        }
        oq_web_buf_puts(b, "</tr>");
    }
    oq_web_buf_puts(b, "</tbody></table>");
}

void oq_web_page_overview(oq_web_req_t *req)
{
    oq_client_t *client = oq_web_broker_client(req->web->broker);
    oq_msg_t reply;
    if (oq_client_stats_page(client, 0, 0, req->web->timeout_ms, &reply) < 0) {
        s_broker_error(req, "stats");
        return;
    }
    const msgpack_object *root = &reply.root;
    oq_web_buf_t *b = &req->body;
    s_head(req, "Overview", "overview");
    const msgpack_object *broker = oq_proto_map_get(root, "broker");
    oq_web_buf_puts(b, "<h1>Overview</h1><p class=\"summary\">broker ");
    s_field(b, broker, "version");
    oq_web_buf_printf(b,
                      ", up %" PRIu64 " s · <b id=\"jobs-held\">%" PRIu64
                      "</b> jobs held · <b>%" PRIu64 "</b> workers connected",
                      s_uint(broker, "uptime_ms") / 1000, s_uint(broker, "jobs"),
                      s_uint(broker, "workers"));
    if (s_uint(broker, "workers_unavailable"))
        oq_web_buf_printf(b, ", <b class=\"bad\">%" PRIu64 " paused</b>",
                          s_uint(broker, "workers_unavailable"));
    oq_web_buf_puts(b, "</p><div class=\"charts\">");
    oq_web_history_svg(&req->web->history, false, "done", b);
    oq_web_history_svg(&req->web->history, true, "failed", b);
    oq_web_buf_puts(b, "</div><h2>Queues</h2>");
    static const char *const qcols[] = {"name",    "ready",       "delayed",    "leased",
                                        "waiting", "failed",      "review",     "done",
                                        "retried", "redelivered", "duplicates", "cancelled"};
    static const char *const qheads[] = {
        "queue",     "ready", "delayed", "leased",      "waiting for a key", "failed",
        "in review", "done",  "retried", "redelivered", "duplicates",        "cancelled"};
    const msgpack_object *queues = oq_proto_map_get(root, "queues");
    if (!queues || queues->type != MSGPACK_OBJECT_ARRAY || queues->via.array.size == 0)
        oq_web_buf_puts(b, "<p>no queues yet</p>");
    else
        s_table(b, "queues", queues, qcols, qheads, sizeof qcols / sizeof qcols[0], "name",
                "/failed?queue=");
    oq_web_buf_puts(b, "<h2>Job types</h2><p class=\"hint\">duplicates: deliveries whose effect "
                       "the UNIQUE guard had already recorded, absorbed rather than applied "
                       "twice; no worker: jobs waiting for a worker that takes their "
                       "type.</p>");
    static const char *const tcols[] = {"name",       "ready",  "done",    "applied",
                                        "duplicates", "failed", "workers", "unhandled"};
    static const char *const theads[] = {
        "type",   "ready",   "done",     "applied", "duplicates absorbed",
        "failed", "workers", "no worker"};
    const msgpack_object *types = oq_proto_map_get(root, "types");
    if (!types || types->type != MSGPACK_OBJECT_ARRAY || types->via.array.size == 0)
        oq_web_buf_puts(b, "<p>no job types yet</p>");
    else
        s_table(b, "types", types, tcols, theads, sizeof tcols / sizeof tcols[0], NULL, NULL);
    s_foot(req);
    oq_proto_msg_release(&reply);
}

/* ---- workers ----------------------------------------------------------- */

void oq_web_page_workers(oq_web_req_t *req)
{
    oq_client_t *client = oq_web_broker_client(req->web->broker);
    oq_msg_t reply;
    if (oq_client_stats_page(client, 0, OQ_WEB_MAX_WORKERS, req->web->timeout_ms, &reply) < 0) {
        s_broker_error(req, "stats");
        return;
    }
    const msgpack_object *root = &reply.root;
    oq_web_buf_t *b = &req->body;
    s_head(req, "Workers", "workers");
    const msgpack_object *broker = oq_proto_map_get(root, "broker");
    oq_web_buf_printf(b,
                      "<h1>Workers</h1><p class=\"summary\"><b id=\"workers-connected\">%" PRIu64
                      "</b> connected</p>",
                      s_uint(broker, "workers"));
    const msgpack_object *workers = oq_proto_map_get(root, "workers");
    if (!workers || workers->type != MSGPACK_OBJECT_ARRAY || workers->via.array.size == 0) {
        oq_web_buf_puts(b, "<p id=\"no-workers\">no worker connected</p>");
    } else {
        oq_web_buf_puts(b, "<table id=\"workers\"><thead><tr><th>id</th><th>name</th><th>pid"
                           "</th><th>state</th><th>credit</th><th>jobs held</th><th>last "
                           "heard</th><th>types</th><th>queues</th></tr></thead><tbody>");
        for (uint32_t i = 0; i < workers->via.array.size; i++) {
            const msgpack_object *w = &workers->via.array.ptr[i];
            oq_web_buf_printf(b, "<tr data-pid=\"%" PRIu64 "\"><td>", s_uint(w, "pid"));
            s_field(b, w, "id");
            oq_web_buf_puts(b, "</td><td>");
            s_field(b, w, "name");
            oq_web_buf_puts(b, "</td><td>");
            s_field(b, w, "pid");
            const msgpack_object *state = oq_proto_map_get(w, "state");
            bool paused = s_str_is(state, "unavailable", 11);
            oq_web_buf_puts(b, paused ? "</td><td class=\"bad\" data-col=\"state\">"
                                      : "</td><td data-col=\"state\">");
            s_field(b, w, "state");
            const msgpack_object *error = oq_proto_map_get(w, "error");
            if (paused) {
                oq_web_buf_printf(b, " for %" PRIu64 " s", s_uint(w, "state_ms") / 1000);
                if (error) {
                    oq_web_buf_puts(b, ": ");
                    oq_web_buf_value(b, error);
                }
            }
            oq_web_buf_puts(b, "</td><td>");
            s_field(b, w, "credit");
            oq_web_buf_puts(b, "</td><td>");
            s_field(b, w, "leased");
            oq_web_buf_printf(b, "</td><td>%.1f s ago</td><td>",
                              (double)s_uint(w, "idle_ms") / 1000.0);
            s_field(b, w, "types");
            oq_web_buf_puts(b, "</td><td>");
            s_field(b, w, "queues");
            oq_web_buf_puts(b, "</td></tr>");
        }
        oq_web_buf_puts(b, "</tbody></table>");
        if (oq_proto_map_get(root, "workers_next"))
            oq_web_buf_printf(b, "<p>the first %d workers are shown</p>", OQ_WEB_MAX_WORKERS);
    }
    s_foot(req);
    oq_proto_msg_release(&reply);
}

/* ---- the failed and the review store ---------------------------------- */

typedef struct {
    bool review;                     /* the review store, else failed */
    const char *queue, *type, *text; /* filters, or NULL */
    const char *older;               /* the age filter as given (minutes), or NULL */
    int64_t before_ms;               /* only jobs that failed before this (Unix ms), 0: any */
    uint64_t after;                  /* cursor: id */
    int64_t after_at;                /* and time, -1: none */
    uint32_t limit;                  /* jobs on the page */
} s_filter_t;

static bool s_contains(const msgpack_object *o, const char *needle)
{
    if (!needle || !*needle)
        return true;
    if (!o || o->type != MSGPACK_OBJECT_STR)
        return false;
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= o->via.str.size; i++)
        if (strncasecmp(o->via.str.ptr + i, needle, n) == 0)
            return true;
    return false;
}

static bool s_match(const s_filter_t *f, const msgpack_object *job)
{
    if (f->before_ms > 0 &&
        s_uint(job, f->review ? "review_at" : "failed_at") >= (uint64_t)f->before_ms)
        return false;
    if (f->type && *f->type) {
        const msgpack_object *t = oq_proto_map_get(job, "type");
        if (!s_str_is(t, f->type, strlen(f->type)))
            return false;
    }
    return s_contains(oq_proto_map_get(job, f->review ? "reason" : "error"), f->text);
}

/* Parse the store's filter from the query. 0, or -1 after an error page. */
static int s_filter(oq_web_req_t *req, bool review, s_filter_t *f)
{
    bool bad = false;
    memset(f, 0, sizeof *f);
    f->review = review;
    f->queue = oq_web_arg(req, "queue", &bad);
    f->type = oq_web_arg(req, "type", &bad);
    f->text = oq_web_arg(req, "q", &bad);
    f->older = oq_web_arg(req, "older", &bad);
    const char *after = oq_web_arg(req, "after", &bad);
    const char *after_at = oq_web_arg(req, "after_at", &bad);
    const char *limit = oq_web_arg(req, "limit", &bad);
    if (bad) {
        oq_web_page_error(req, MHD_HTTP_BAD_REQUEST, "a query value is over 256 bytes");
        return -1;
    }
    if (f->queue && !*f->queue)
        f->queue = NULL;
    f->after_at = -1;
    f->limit = OQ_WEB_PAGE_DEFAULT;
    uint64_t n;
    if (after && *after) {
        if (oq_config_uint(after, 1, UINT64_MAX, &n) < 0) {
            oq_web_page_error(req, MHD_HTTP_BAD_REQUEST, "after: expected a job id");
            return -1;
        }
        f->after = n;
    }
    if (after_at && *after_at) {
        if (oq_config_uint(after_at, 0, INT64_MAX, &n) < 0) {
            oq_web_page_error(req, MHD_HTTP_BAD_REQUEST, "after_at: expected Unix milliseconds");
            return -1;
        }
        f->after_at = (int64_t)n;
    }
    if (f->older && *f->older) {
        if (oq_config_uint(f->older, 1, OQ_WEB_MAX_AGE_MIN, &n) < 0) {
            oq_web_page_error(req, MHD_HTTP_BAD_REQUEST,
                              "older: expected minutes, 1 to 525600 (a year)");
            return -1;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        f->before_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - (int64_t)n * 60000;
    }
    if (limit && *limit) {
        if (oq_config_uint(limit, 1, OQ_WEB_PAGE_MAX, &n) < 0) {
            oq_web_page_error(req, MHD_HTTP_BAD_REQUEST, "limit: expected 1 to 200");
            return -1;
        }
        f->limit = (uint32_t)n;
    }
    return 0;
}

static void s_filter_link(oq_web_buf_t *b, const s_filter_t *f, const char *base)
{
    oq_web_buf_printf(b, "%s?limit=%u", base, f->limit);
    const struct {
        const char *key, *value;
    } parts[] = {{"queue", f->queue}, {"type", f->type}, {"q", f->text}, {"older", f->older}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (parts[i].value && *parts[i].value) {
            oq_web_buf_printf(b, "&amp;%s=", parts[i].key);
            oq_web_buf_urlencode(b, parts[i].value, strlen(parts[i].value));
        }
}

static void s_filter_form(oq_web_buf_t *b, const s_filter_t *f, const char *base)
{
    oq_web_buf_printf(b, "<form method=\"get\" action=\"%s\" class=\"filter\">", base);
    const struct {
        const char *key, *label, *value;
    } parts[] = {{"queue", "queue", f->queue},
                 {"type", "type", f->type},
                 {"q", f->review ? "reason contains" : "error contains", f->text},
                 {"older", "older than (min)", f->older}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        oq_web_buf_printf(b, "<label>%s <input name=\"%s\" value=\"", parts[i].label, parts[i].key);
        if (parts[i].value)
            oq_web_buf_escape(b, parts[i].value, strlen(parts[i].value));
        oq_web_buf_puts(b, "\"></label> ");
    }
    oq_web_buf_printf(b,
                      "<input type=\"hidden\" name=\"limit\" value=\"%u\">"
                      "<button type=\"submit\">filter</button></form>",
                      f->limit);
}

static void s_store_page(oq_web_req_t *req, bool review)
{
    s_filter_t f;
    if (s_filter(req, review, &f) < 0)
        return;
    oq_client_t *client = oq_web_broker_client(req->web->broker);
    oq_web_buf_t *b = &req->body;
    const char *base = review ? "/review" : "/failed";
    s_head(req, review ? "Review" : "Failed", review ? "review" : "failed");
    if (review)
        oq_web_buf_puts(b, "<h1>Review</h1><p class=\"hint\">Jobs whose handler could not know "
                           "the outcome (an external call that may or may not have taken "
                           "effect). They use no try and wait here until a person resolves "
                           "them.</p>");
    else
        oq_web_buf_puts(b, "<h1>Failed</h1>");
    s_filter_form(b, &f, base);
    /* A filter on type, text or age is applied to the broker's pages
       here, so a page may need several of the broker's: at most
       OQ_WEB_FILTER_PAGES of them, then the page ends with what it has and
       its cursor goes on from there. The store comes oldest first, so the
       first job younger than the age filter ends the list. */
    bool filtered = (f.type && *f.type) || (f.text && *f.text) || f.before_ms > 0;
    uint32_t shown = 0;
    uint64_t total = 0, next = 0;
    int64_t next_at = -1;
    bool more = false, head_done = false, young = false;
    uint64_t after = f.after;
    int64_t after_at = f.after_at;
    for (int page = 0; page < OQ_WEB_FILTER_PAGES && shown < f.limit; page++) {
        oq_msg_t reply;
        uint32_t want = filtered ? OQ_MAX_FAILED_LIST : f.limit - shown;
        int rc = review ? oq_client_review_page(client, f.queue, after ? after_at : 0, after, want,
                                                req->web->timeout_ms, &reply)
                        : oq_client_failed_cursor(client, f.queue, after ? after_at : 0, after,
                                                  want, req->web->timeout_ms, &reply);
        if (rc < 0) {
            s_broker_error(req, review ? "review" : "failed");
            return;
        }
        const msgpack_object *root = &reply.root;
        total = s_uint(root, "total");
        if (!head_done) {
            oq_web_buf_printf(b, "<p class=\"summary\"><b id=\"total\">%" PRIu64 "</b> %s%s", total,
                              review ? "jobs in review" : "failed jobs",
                              f.queue ? " in this queue" : "");
            if (!review) {
                const char *q = f.queue ? f.queue : "";
                const char *const fields[] = {"queue", q, NULL};
                oq_web_buf_puts(b, " ");
                s_action_form(req, "retry_all", f.queue ? "retry all of this queue" : "retry all",
                              "act", fields);
                s_action_form(req, "flush", f.queue ? "flush this queue" : "flush all",
                              "act danger", fields);
            }
            oq_web_buf_puts(b, "</p><table id=\"jobs\"><thead><tr><th>id</th><th>type</th>"
                               "<th>queue</th><th>attempt</th>");
            oq_web_buf_printf(b,
                              "<th>%s</th><th>%s</th><th>payload</th><th></th></tr></thead>"
                              "<tbody>",
                              review ? "in review since" : "failed at",
                              review ? "reason" : "last error");
            head_done = true;
        }
        const msgpack_object *jobs = oq_proto_map_get(root, "jobs");
        uint32_t n = jobs && jobs->type == MSGPACK_OBJECT_ARRAY ? jobs->via.array.size : 0;
        uint32_t i = 0;
        for (; i < n && shown < f.limit; i++) {
            const msgpack_object *job = &jobs->via.array.ptr[i];
            uint64_t id = s_uint(job, "id");
            int64_t at = (int64_t)s_uint(job, review ? "review_at" : "failed_at");
            if (f.before_ms > 0 && at >= f.before_ms) {
                young = true;
                break;
            }
            after = id;
            after_at = at;
            if (filtered && !s_match(&f, job))
                continue;
            shown++;
            char idtext[24];
            snprintf(idtext, sizeof idtext, "%" PRIu64, id);
            oq_web_buf_printf(b, "<tr id=\"job-%s\"><td><a href=\"/%s?id=%s\">%s</a></td><td>",
                              idtext, review ? "review/show" : "job", idtext, idtext);
            s_field(b, job, "type");
            oq_web_buf_puts(b, "</td><td>");
            s_field(b, job, "queue");
            oq_web_buf_puts(b, "</td><td>");
            s_field(b, job, "attempt");
            oq_web_buf_puts(b, " of ");
            s_field(b, job, "max_tries");
            oq_web_buf_puts(b, "</td><td>");
            s_time(b, job, review ? "review_at" : "failed_at");
            oq_web_buf_puts(b, "</td><td class=\"text\">");
            s_field(b, job, review ? "reason" : "error");
            oq_web_buf_puts(b, "</td><td><details><summary>show</summary>");
            s_payload(b, oq_proto_map_get(job, "payload"), OQ_WEB_PAYLOAD_PREVIEW_BYTES);
            oq_web_buf_puts(b, "</details></td><td class=\"actions\">");
            const char *const fields[] = {"id", idtext, NULL};
            if (review)
                oq_web_buf_printf(b, "<a class=\"act\" href=\"/review/show?id=%s\">resolve</a>",
                                  idtext);
            else {
                s_action_form(req, "retry", "retry", "act", fields);
                s_action_form(req, "forget", "forget", "act danger", fields);
            }
            oq_web_buf_puts(b, "</td></tr>");
        }
        more = !young && (i < n || oq_proto_map_get(root, "next") != NULL);
        next = after;
        next_at = after_at;
        oq_proto_msg_release(&reply);
        if (!more)
            break;
    }
    oq_web_buf_puts(b, "</tbody></table>");
    if (shown == 0)
        oq_web_buf_printf(b, "<p id=\"empty\">no %s here</p>",
                          review ? "job waits for review" : "failed job");
    oq_web_buf_puts(b, "<p class=\"pager\">");
    if (f.after) {
        oq_web_buf_puts(b, "<a href=\"");
        s_filter_link(b, &f, base);
        oq_web_buf_puts(b, "\">first page</a> ");
    }
    if (more && next) {
        oq_web_buf_puts(b, "<a id=\"next\" href=\"");
        s_filter_link(b, &f, base);
        oq_web_buf_printf(b, "&amp;after=%" PRIu64 "&amp;after_at=%" PRId64 "\">next page</a>",
                          next, next_at);
    }
    oq_web_buf_puts(b, "</p>");
    s_foot(req);
}

void oq_web_page_failed(oq_web_req_t *req)
{
    s_store_page(req, false);
}

void oq_web_page_review(oq_web_req_t *req)
{
    s_store_page(req, true);
}

/* The id argument. 0, or -1 after an error page. */
static int s_id(oq_web_req_t *req, uint64_t *id)
{
    bool bad = false;
    const char *text = oq_web_arg(req, "id", &bad);
    if (bad || !text || oq_config_uint(text, 1, UINT64_MAX, id) < 0) {
        oq_web_page_error(req, MHD_HTTP_BAD_REQUEST, "expected id: a job id, 1 or more");
        return -1;
    }
    return 0;
}

void oq_web_page_review_show(oq_web_req_t *req)
{
    uint64_t id;
    if (s_id(req, &id) < 0)
        return;
    oq_client_t *client = oq_web_broker_client(req->web->broker);
    oq_msg_t reply;
    if (oq_client_review_show(client, id, req->web->timeout_ms, &reply) < 0) {
        s_broker_error(req, "review_show");
        return;
    }
    const msgpack_object *job = oq_proto_map_get(&reply.root, "job");
    oq_web_buf_t *b = &req->body;
    char idtext[24];
    snprintf(idtext, sizeof idtext, "%" PRIu64, id);
    s_head(req, "Review", "review");
    oq_web_buf_printf(b, "<h1>Job %s in review</h1><dl class=\"job\">", idtext);
    static const char *const keys[] = {"state", "type", "queue", "attempt", "max_tries", "reason"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        oq_web_buf_printf(b, "<dt>%s</dt><dd id=\"f-%s\">", keys[i], keys[i]);
        s_field(b, job, keys[i]);
        oq_web_buf_puts(b, "</dd>");
    }
    oq_web_buf_puts(b, "<dt>in review since</dt><dd>");
    s_time(b, job, "review_at");
    oq_web_buf_puts(b, "</dd></dl><h2>Payload</h2>");
    s_payload(b, oq_proto_map_get(job, "payload"), OQ_WEB_MAX_PAGE_BYTES / 4);
    const msgpack_object *res = oq_proto_map_get(job, "resolution");
    if (res) {
        oq_web_buf_puts(b, "<h2>Resolution</h2><dl class=\"job\" id=\"resolution\"><dt>action"
                           "</dt><dd>");
        s_field(b, res, "action");
        oq_web_buf_puts(b, "</dd><dt>note</dt><dd>");
        s_field(b, res, "note");
        oq_web_buf_puts(b, "</dd><dt>at</dt><dd>");
        s_time(b, res, "resolved_at");
        oq_web_buf_puts(b, "</dd></dl>");
    }
    if (s_str_is(oq_proto_map_get(job, "state"), "review", 6) &&
        req->user->role == OQ_WEB_ROLE_ADMIN) {
        oq_web_buf_printf(b,
                          "<h2>Resolve</h2><form method=\"post\" action=\"/action\" "
                          "id=\"resolve\" class=\"resolve\">"
                          "<input type=\"hidden\" name=\"csrf\" value=\"%s\">"
                          "<input type=\"hidden\" name=\"op\" value=\"resolve\">"
                          "<input type=\"hidden\" name=\"id\" value=\"%s\">"
                          "<label>note (for the record, at most %d bytes)<br>"
                          "<textarea name=\"note\" maxlength=\"%d\" rows=\"3\" "
                          "cols=\"60\"></textarea></label><br>"
                          "<button type=\"submit\" name=\"action\" value=\"done\" class=\"act\">"
                          "done: the effect is there</button> "
                          "<button type=\"submit\" name=\"action\" value=\"retry\" class=\"act\">"
                          "retry: run it again</button> "
                          "<button type=\"submit\" name=\"action\" value=\"fail\" "
                          "class=\"act danger\">fail: give up</button></form>",
                          req->user->csrf, idtext, OQ_MAX_REVIEW_NOTE_LEN, OQ_MAX_REVIEW_NOTE_LEN);
    }
    s_foot(req);
    oq_proto_msg_release(&reply);
}

/* ---- a job by id ------------------------------------------------------- */

void oq_web_page_job(oq_web_req_t *req)
{
    bool bad = false;
    const char *text = oq_web_arg(req, "id", &bad);
    oq_web_buf_t *b = &req->body;
    if (!bad && (!text || !*text)) {
        s_head(req, "Job by id", "job");
        oq_web_buf_puts(b, "<h1>Job by id</h1><form method=\"get\" action=\"/job\">"
                           "<label>id <input name=\"id\" inputmode=\"numeric\"></label> "
                           "<button type=\"submit\">show</button></form>");
        s_foot(req);
        return;
    }
    uint64_t id;
    if (s_id(req, &id) < 0)
        return;
    oq_client_t *client = oq_web_broker_client(req->web->broker);
    oq_wait_state_t state;
    char error[OQ_MAX_ERROR_LEN + 1] = "";
    if (oq_client_wait(client, id, 0, req->web->timeout_ms, &state, error, sizeof error) < 0) {
        s_broker_error(req, "job");
        return;
    }
    char idtext[24];
    snprintf(idtext, sizeof idtext, "%" PRIu64, id);
    s_head(req, "Job", "job");
    const char *name =
        state == OQ_WAIT_PENDING ? "waiting or running" : oq_proto_wait_state_name(state);
    oq_web_buf_printf(b,
                      "<h1>Job %s</h1><dl class=\"job\"><dt>state</dt><dd id=\"f-state\">%s"
                      "</dd>",
                      idtext, name);
    if (error[0]) {
        oq_web_buf_printf(b, "<dt>%s</dt><dd id=\"f-error\">",
                          state == OQ_WAIT_REVIEW ? "reason" : "error");
        oq_web_buf_escape(b, error, strlen(error));
        oq_web_buf_puts(b, "</dd>");
    }
    oq_web_buf_puts(b, "</dl>");
    const char *const fields[] = {"id", idtext, NULL};
    if (state == OQ_WAIT_REVIEW)
        oq_web_buf_printf(b,
                          "<p><a class=\"act\" href=\"/review/show?id=%s\">review and resolve"
                          "</a></p>",
                          idtext);
    else if (state == OQ_WAIT_FAILED) {
        s_action_form(req, "retry", "retry", "act", fields);
        s_action_form(req, "forget", "forget", "act danger", fields);
    } else if (state == OQ_WAIT_PENDING)
        s_action_form(req, "cancel", "cancel (if it has not started)", "act danger", fields);
    s_foot(req);
}

/* ---- actions ----------------------------------------------------------- */

/* The page that asks to confirm op: the same fields again, with confirm. */
static void s_confirm(oq_web_req_t *req, const char *op, const char *question)
{
    oq_web_buf_t *b = &req->body;
    s_head(req, "Confirm", "");
    oq_web_buf_puts(b, "<h1>Confirm</h1><p id=\"question\">");
    oq_web_buf_escape(b, question, strlen(question));
    oq_web_buf_printf(b,
                      "</p><form method=\"post\" action=\"/action\" id=\"confirm\">"
                      "<input type=\"hidden\" name=\"csrf\" value=\"%s\">"
                      "<input type=\"hidden\" name=\"op\" value=\"%s\">"
                      "<input type=\"hidden\" name=\"confirm\" value=\"yes\">",
                      req->user->csrf, op);
    static const char *const keep[] = {"id", "queue", "note", "action"};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        const char *v = oq_web_arg(req, keep[i], NULL);
        if (!v)
            continue;
        oq_web_buf_printf(b, "<input type=\"hidden\" name=\"%s\" value=\"", keep[i]);
        oq_web_buf_escape(b, v, strlen(v));
        oq_web_buf_puts(b, "\">");
    }
    /* back to the list, not history.back(): the pages' policy allows no
       script but live.js */
    oq_web_buf_printf(b,
                      "<button type=\"submit\" class=\"act danger\" id=\"yes\">yes, do it"
                      "</button> <a href=\"%s\">no, go back</a></form>",
                      strcmp(op, "cancel") == 0 ? "/job" : "/failed");
    s_foot(req);
}

static void s_done(oq_web_req_t *req, const char *what, const char *back)
{
    oq_web_buf_t *b = &req->body;
    s_head(req, "Done", "");
    oq_web_buf_puts(b, "<h1>Done</h1><p id=\"done\">");
    oq_web_buf_escape(b, what, strlen(what));
    oq_web_buf_printf(b, "</p><p><a href=\"%s\">back</a></p>", back);
    s_foot(req);
}

void oq_web_page_action(oq_web_req_t *req)
{
    const char *op = oq_web_arg(req, "op", NULL);
    const char *queue = oq_web_arg(req, "queue", NULL);
    const char *confirm = oq_web_arg(req, "confirm", NULL);
    bool confirmed = confirm && strcmp(confirm, "yes") == 0;
    if (queue && !*queue)
        queue = NULL;
    oq_client_t *client = oq_web_broker_client(req->web->broker);
    int timeout = req->web->timeout_ms;
    const char *who = req->user->name;
    char what[1400];
    if (!op) {
        oq_web_page_error(req, MHD_HTTP_BAD_REQUEST, "the form names no op");
        return;
    }
    if (strcmp(op, "retry_all") == 0 || strcmp(op, "flush") == 0) {
        bool flush = op[0] == 'f';
        if (!confirmed) {
            snprintf(what, sizeof what, "%s every failed job%s%s%s?",
                     flush ? "Delete for good" : "Retry, with a fresh retry budget,",
                     queue ? " of queue " : "", queue ? queue : "", queue ? "" : " of every queue");
            s_confirm(req, op, what);
            return;
        }
        uint64_t count = 0;
        int rc = flush ? oq_client_flush(client, queue, timeout, &count)
                       : oq_client_requeue_all(client, queue, timeout, &count);
        oq_info("web: %s: %s queue %s: %s", who, op, queue ? queue : "(all)",
                rc == 0 ? "done" : oq_client_error(client));
        if (rc < 0) {
            s_broker_error(req, op);
            return;
        }
        snprintf(what, sizeof what, "%s %" PRIu64 " failed jobs.", flush ? "Deleted" : "Retried",
                 count);
        s_done(req, what, "/failed");
        return;
    }
    uint64_t id;
    if (s_id(req, &id) < 0)
        return;
    int rc;
    if (strcmp(op, "retry") == 0) {
        rc = oq_client_requeue(client, id, timeout);
        snprintf(what, sizeof what, "Job %" PRIu64 " is ready again, with a fresh retry budget.",
                 id);
    } else if (strcmp(op, "forget") == 0 || strcmp(op, "cancel") == 0) {
        bool forget = op[0] == 'f';
        if (!confirmed) {
            snprintf(what, sizeof what, "%s job %" PRIu64 "?",
                     forget ? "Delete from the failed store for good" : "Cancel (never run)", id);
            s_confirm(req, op, what);
            return;
        }
        rc = forget ? oq_client_forget(client, id, timeout) : oq_client_cancel(client, id, timeout);
        snprintf(what, sizeof what, "Job %" PRIu64 " %s.", id,
                 forget ? "is deleted from the failed store" : "is cancelled");
    } else if (strcmp(op, "resolve") == 0) {
        const char *action_text = oq_web_arg(req, "action", NULL);
        const char *note = oq_web_arg(req, "note", NULL);
        oq_review_action_t action;
        if (!action_text ||
            oq_proto_review_action_parse(action_text, strlen(action_text), &action) < 0) {
            oq_web_page_error(req, MHD_HTTP_BAD_REQUEST, "action: expected done, retry or fail");
            return;
        }
        if (note && strlen(note) > OQ_MAX_REVIEW_NOTE_LEN) {
            oq_web_page_error(req, MHD_HTTP_BAD_REQUEST, "the note is over 1,024 bytes");
            return;
        }
        rc = oq_client_resolve(client, id, action, note, timeout);
        snprintf(what, sizeof what, "Job %" PRIu64 " is resolved: %s.", id, action_text);
    } else {
        oq_web_page_error(req, MHD_HTTP_BAD_REQUEST,
                          "op: expected retry, forget, retry_all, flush, resolve or cancel");
        return;
    }
    oq_info("web: %s: %s job %" PRIu64 ": %s", who, op, id,
            rc == 0 ? "done" : oq_client_error(client));
    if (rc < 0) {
        s_broker_error(req, op);
        return;
    }
    s_done(req, what, strcmp(op, "resolve") == 0 ? "/review" : "/failed");
}
