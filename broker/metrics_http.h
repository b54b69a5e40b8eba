/*  metrics_http.h: the HTTP endpoint that serves GET /metrics. It is an
    actor: libmicrohttpd runs it in its own thread, which never touches the
    engine. The broker's loop renders the text (metrics.c) at most every
    OQ_METRICS_RENDER_MS and publishes it over an inproc socket that keeps
    only the newest text (ZMQ_CONFLATE), so a scrape, a slow client or a
    flood of them costs the loop nothing beyond the rendering itself. */
#ifndef ONCEQ_METRICS_HTTP_H
#define ONCEQ_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

typedef struct oq_metrics_http oq_metrics_http_t;

/* Listen on addr, "IP:PORT" ("127.0.0.1:9751", "[::1]:9751"; port 0 picks
   a free one) and serve from a thread of its own. NULL with reason (a bad
   address, the port in use, out of memory). */
oq_metrics_http_t *oq_metrics_http_new(const char *addr, char *reason, size_t reason_len);

/* Stop the thread, close the socket, free everything; set *self_p to NULL. */
void oq_metrics_http_destroy(oq_metrics_http_t **self_p);

/* The port it listens on. */
uint16_t oq_metrics_http_port(const oq_metrics_http_t *self);

/* Hand the text rendered by oq_metrics_render (len bytes) to the server,
   which owns it from now on; *text_p is set to NULL. Never blocks: an
   older text not served yet is dropped. */
void oq_metrics_http_publish(oq_metrics_http_t *self, char **text_p, size_t len);

#endif
