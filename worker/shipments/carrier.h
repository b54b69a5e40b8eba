/*  carrier.h: one POST /shipments to the carrier's HTTP API (docs/carrier.md)
    with libcurl, and what came of it, told apart the way classification
    needs: did the request go out at all (a refused connection or a failed
    name lookup: it did not, so nothing can have happened), and if it did,
    did an answer come back (a timeout or a closed connection after the
    request went out: the outcome is unknown). No retries here: one call,
    bounded by the two timeouts given. */
#ifndef ONCEQ_SHIPMENTS_CARRIER_H
#define ONCEQ_SHIPMENTS_CARRIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shipments/shipments_limits.h"

/* How the call ended, before any HTTP status. */
typedef enum {
    OQ_CARRIER_ANSWERED = 0, /* an HTTP answer came back (status says which) */
    OQ_CARRIER_REFUSED,      /* the connection was refused: nothing was sent */
    OQ_CARRIER_DNS,          /* the host name did not resolve: nothing was sent */
    OQ_CARRIER_UNREACHABLE,  /* no connection in time, or no route: nothing was sent */
    OQ_CARRIER_NO_ANSWER,    /* the request went out and no answer came back (a timeout,
                                a connection closed or reset): outcome unknown */
    OQ_CARRIER_BAD_URL,      /* the URL cannot be used: nothing was sent */
} oq_carrier_transport_t;

typedef struct {
    oq_carrier_transport_t transport;
    long status;    /* with ANSWERED: the HTTP status */
    bool replayed;  /* the header Idempotent-Replayed: true */
    bool timed_out; /* with NO_ANSWER or UNREACHABLE: the time ran out */
    /* From the JSON answer, "" when absent. */
    char reference[OQ_SHIPMENT_MAX_REFERENCE_LEN + 1];
    char error[64];    /* the carrier's error code */
    char message[512]; /* the carrier's message, or libcurl's for a transport failure */
} oq_carrier_answer_t;

/* Call libcurl's global set-up once, in the main thread, before any other
   thread exists (the shipment handler does it where it is made). */
void oq_carrier_global_init(void);

/* 0 if url is an http:// or https:// URL with a host that libcurl parses,
   else -1 with why, written to follow "expected" ("an http:// or https://
   URL (this one does not parse: ...)"). */
int oq_carrier_check_url(const char *url, char *why, size_t why_len);

/* POST body (JSON) to BASE_URL/shipments with Idempotency-Key: key, waiting
   at most connect_ms to connect and total_ms in all. Fills *answer; never
   fails otherwise. Proxies from the environment are not used. */
void oq_carrier_post(const char *base_url, const char *key, const char *body, int64_t connect_ms,
                     int64_t total_ms, oq_carrier_answer_t *answer);

/* "answered", "refused", "dns", "unreachable", "no_answer", "bad_url". */
const char *oq_carrier_transport_name(oq_carrier_transport_t transport);

#endif
