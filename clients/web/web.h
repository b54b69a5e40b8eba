/*  web.h: what the parts of onceq-web share: the server's state (users,
    the broker connection, the history of throughput) and one request as
    the pages see it (who asks, its fields, the answer being built). The
    server (web_server.c) authenticates, reads the form and routes; each
    page and action (web_pages.c) asks the broker and renders. One thread
    does all of it, so the broker client is never shared between threads. */
#ifndef ONCEQ_WEB_H
#define ONCEQ_WEB_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "web_broker.h"
#include "web_buf.h"
#include "web_history.h"
#include "web_users.h"

/* Fields one form may carry. */
#define OQ_WEB_MAX_FIELDS 16
/* Longest field name and value, in bytes (a review note is at most
   OQ_MAX_REVIEW_NOTE_LEN, 1,024). */
#define OQ_WEB_MAX_FIELD_NAME  32
#define OQ_WEB_MAX_FIELD_BYTES 2048
/* Largest form body, in bytes: past it the request is refused (413). */
#define OQ_WEB_MAX_BODY_BYTES 16384
/* Longest query value the pages read, in bytes: past it, 400. */
#define OQ_WEB_MAX_ARG_BYTES 256
/* Jobs one page of the failed or review store shows, by default and at
   most. */
#define OQ_WEB_PAGE_DEFAULT 50
#define OQ_WEB_PAGE_MAX     200
/* Pages of the broker's store a filtered list reads at most for one page
   of its own (a filter on type or text is applied here, not by the broker):
   what bounds the time of a page whatever the store holds. */
#define OQ_WEB_FILTER_PAGES 4
/* Largest age filter, in minutes: a year. */
#define OQ_WEB_MAX_AGE_MIN 525600
/* A payload shown in a list is cut after this many bytes of JSON. */
#define OQ_WEB_PAYLOAD_PREVIEW_BYTES 4096
/* Workers the workers page lists at most (the broker's page limit). */
#define OQ_WEB_MAX_WORKERS 1000

typedef struct {
    oq_web_users_t *users;
    oq_web_broker_t *broker;
    oq_web_history_t history;
    int timeout_ms; /* for each broker request */
} oq_web_t;

typedef struct {
    char name[OQ_WEB_MAX_FIELD_NAME + 1];
    char value[OQ_WEB_MAX_FIELD_BYTES + 1];
    size_t len;
} oq_web_field_t;

typedef struct {
    oq_web_t *web;
    struct MHD_Connection *conn;
    const oq_web_user_t *user; /* who asks (authenticated) */
    const char *path;          /* the URL's path */
    bool post;                 /* a form was posted */
    oq_web_field_t fields[OQ_WEB_MAX_FIELDS];
    size_t field_count;
    bool form_bad;      /* a field over its limit, too many, or a body too large */
    size_t body_bytes;  /* of the form so far */
    bool fragment;      /* asked by live.js: the page's main part only */
    unsigned status;    /* the answer's HTTP status */
    oq_web_buf_t body;  /* the answer */
    const char *type;   /* its content type (static) */
    char location[512]; /* a redirect's target, or "" */
} oq_web_req_t;

/* A page or an action: fill req->status, req->body (or location). */
typedef void (*oq_web_page_fn)(oq_web_req_t *req);

/* A request's field (POST) or query value (GET), or NULL. A value longer
   than OQ_WEB_MAX_ARG_BYTES in a query makes *bad true (then NULL). */
const char *oq_web_arg(oq_web_req_t *req, const char *name, bool *bad);

/* The pages, in web_pages.c. */
void oq_web_page_overview(oq_web_req_t *req);
void oq_web_page_workers(oq_web_req_t *req);
void oq_web_page_failed(oq_web_req_t *req);
void oq_web_page_review(oq_web_req_t *req);
void oq_web_page_review_show(oq_web_req_t *req);
void oq_web_page_job(oq_web_req_t *req);
void oq_web_page_action(oq_web_req_t *req);
/* An error page with status and message (escaped here). */
void oq_web_page_error(oq_web_req_t *req, unsigned status, const char *message);

/* Take a sample of the broker's counters into the history. */
void oq_web_sample(oq_web_t *web);

/* The embedded assets, in web_assets.c. */
extern const char oq_web_asset_css[];
extern const char oq_web_asset_js[];

#endif
