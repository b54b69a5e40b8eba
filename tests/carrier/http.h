/*  http.h: onceq-carrier's HTTP server, on libmicrohttpd. One thread runs
    everything: the server library in its "external" mode (epoll) inside
    this module's own poll loop, the shipments and the faults. A reply held
    back by --delay-ms suspends its connection and the loop resumes it when
    its time comes, so a delayed reply never holds up another request, and
    no lock is needed anywhere. docs/carrier.md is the API. */
#ifndef ONCEQ_CARRIER_HTTP_H
#define ONCEQ_CARRIER_HTTP_H

#include <stdint.h>

#include "fault_plan.h"

typedef struct oq_http oq_http_t;

typedef struct {
    const char *bind;       /* an IPv4 or IPv6 address to listen on */
    uint16_t port;          /* 0: the system picks one */
    uint64_t max_shipments; /* shipments held at most */
    uint64_t first_ref;     /* the counter of the first shipment's reference */
    oq_fault_settings_t faults;
    uint64_t seed; /* of the fault draws */
} oq_http_config_t;

/* A server listening as configured. NULL with the reason logged (an
   address that does not parse, a port in use, out of memory). */
oq_http_t *oq_http_new(const oq_http_config_t *config);

/* Answer the replies still waiting out a delay, stop listening, forget
   every shipment, and set *self_p to NULL. */
void oq_http_destroy(oq_http_t **self_p);

/* "127.0.0.1:7760" or "[::1]:7760", with the port actually bound. Borrowed. */
const char *oq_http_address(const oq_http_t *self);

/* Serve until stop_fd is readable (a signalfd, a pipe). 0 then, -1 if the
   server library failed. */
int oq_http_run(oq_http_t *self, int stop_fd);

#endif
