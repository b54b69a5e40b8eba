/*  web_broker.h: onceq-web's connection to the broker, over the C client
    (onceq/client.h) as an admin, with CURVE when keys are given. --broker
    may list several endpoints, comma-separated: a request that gets no
    answer moves the connection to the next one, so that a page shows the
    broker that answers. Following the leader of several brokers comes with
    the HA mode; until then the list is a fallback in order. */
#ifndef ONCEQ_WEB_BROKER_H
#define ONCEQ_WEB_BROKER_H

#include <stddef.h>

#include "onceq/client.h"

/* Endpoints one --broker list may hold. */
#define OQ_WEB_MAX_BROKERS 8

typedef struct oq_web_broker oq_web_broker_t;

/* Parse list ("tcp://a:7750,tcp://b:7750") and connect to its first
   endpoint; key and broker_key are the secret and the broker's public key
   files, both or neither. NULL with reason when an endpoint or key is bad. */
oq_web_broker_t *oq_web_broker_new(const char *list, const char *key, const char *broker_key,
                                   char *reason, size_t reason_len);

/* Close, free, and set *self_p to NULL. */
void oq_web_broker_destroy(oq_web_broker_t **self_p);

/* The client to send a request on. Borrowed. */
oq_client_t *oq_web_broker_client(oq_web_broker_t *self);

/* After a request on the client failed: with no answer at all (a timeout,
   not a broker's error) connect to the next endpoint of the list. */
void oq_web_broker_failed(oq_web_broker_t *self);

/* The endpoint in use. Borrowed. */
const char *oq_web_broker_endpoint(const oq_web_broker_t *self);

#endif
