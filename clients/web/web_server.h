/*  web_server.h: onceq-web's HTTP server, libmicrohttpd driven from the
    caller's loop (no thread of its own): the same thread that serves a page
    asks the broker for it and samples the history between requests. */
#ifndef ONCEQ_WEB_SERVER_H
#define ONCEQ_WEB_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "web.h"

/* Connections at once, over every address and from one address; a
   connection silent this long is closed; bytes of a request's headers. */
#define OQ_WEB_MAX_CONNS        64
#define OQ_WEB_MAX_CONNS_PER_IP 16
#define OQ_WEB_TIMEOUT_S        30
#define OQ_WEB_HEADER_BYTES     (32 * 1024)
#define OQ_WEB_BACKLOG          32

typedef struct oq_web_server oq_web_server_t;

/* Listen on addr (IP:PORT, [IPv6]:PORT). With cert and key (PEM files)
   serve HTTPS. NULL with reason. */
oq_web_server_t *oq_web_server_new(oq_web_t *web, const char *addr, const char *cert,
                                   const char *key, char *reason, size_t reason_len);

/* Stop, free, and set *self_p to NULL. */
void oq_web_server_destroy(oq_web_server_t **self_p);

/* The port it listens on. */
uint16_t oq_web_server_port(const oq_web_server_t *self);

/* Serve for at most max_wait_ms (less when libmicrohttpd has a deadline
   sooner). 0, or -1 if the server failed. */
int oq_web_server_run(oq_web_server_t *self, int max_wait_ms);

#endif
