/*  web_broker.c: see web_broker.h. */
#include "web_broker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/flags.h"
#include "onceq/log.h"

/* Longest endpoint, in bytes. */
#define S_MAX_ENDPOINT_LEN 256

struct oq_web_broker {
    char endpoints[OQ_WEB_MAX_BROKERS][S_MAX_ENDPOINT_LEN];
    size_t count;
    size_t current;  /* the endpoint in use */
    const char *key; /* secret key file, or NULL: plaintext */
    const char *broker_key;
    oq_client_t *client; /* connected to endpoints[current] */
};

/* Connect to endpoints[current]; the old client is replaced only once the
   new one is made, so a failure leaves the connection there was. */
static int s_connect(oq_web_broker_t *self, char *reason, size_t reason_len)
{
    oq_client_t *client = oq_client_new(self->endpoints[self->current]);
    if (!client) {
        snprintf(reason, reason_len, "cannot use broker endpoint '%s'",
                 self->endpoints[self->current]);
        return -1;
    }
    if (self->key && oq_client_set_curve_files(client, self->key, self->broker_key) < 0) {
        snprintf(reason, reason_len, "%s", oq_client_error(client));
        oq_client_destroy(&client);
        return -1;
    }
    oq_client_destroy(&self->client);
    self->client = client;
    return 0;
}

oq_web_broker_t *oq_web_broker_new(const char *list, const char *key, const char *broker_key,
                                   char *reason, size_t reason_len)
{
    if (!key != !broker_key) {
        snprintf(reason, reason_len, "CURVE needs both --key and --broker-key; only %s is set",
                 key ? "--key" : "--broker-key");
        return NULL;
    }
    oq_web_broker_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(reason, reason_len, "out of memory");
        return NULL;
    }
    self->key = key;
    self->broker_key = broker_key;
    const char *at = list;
    while (*at) {
        size_t len = strcspn(at, ",");
        if (self->count == OQ_WEB_MAX_BROKERS || len == 0 || len >= S_MAX_ENDPOINT_LEN) {
            snprintf(reason, reason_len,
                     "--broker: expected at most %d endpoints, comma-separated, each "
                     "tcp://HOST:PORT or ipc://PATH",
                     OQ_WEB_MAX_BROKERS);
            free(self);
            return NULL;
        }
        memcpy(self->endpoints[self->count], at, len);
        self->endpoints[self->count][len] = 0;
        if (!oq_flags_endpoint_valid(self->endpoints[self->count])) {
            snprintf(reason, reason_len, "--broker: '%s' is not tcp://HOST:PORT or ipc://PATH",
                     self->endpoints[self->count]);
            free(self);
            return NULL;
        }
        self->count++;
        at += len;
        if (*at == ',')
            at++;
    }
    if (self->count == 0 || s_connect(self, reason, reason_len) < 0) {
        if (self->count == 0)
            snprintf(reason, reason_len, "--broker: no endpoint given");
        free(self);
        return NULL;
    }
    return self;
}

void oq_web_broker_destroy(oq_web_broker_t **self_p)
{
    oq_web_broker_t *self = *self_p;
    if (!self)
        return;
    oq_client_destroy(&self->client);
    free(self);
    *self_p = NULL;
}

oq_client_t *oq_web_broker_client(oq_web_broker_t *self)
{
    return self->client;
}

void oq_web_broker_failed(oq_web_broker_t *self)
{
    if (oq_client_error_code(self->client) != OQ_ERR_NONE || self->count < 2)
        return; /* the broker answered, or there is no other to try */
    size_t from = self->current;
    self->current = (self->current + 1) % self->count;
    char reason[256];
    if (s_connect(self, reason, sizeof reason) < 0) {
        /* the endpoints and keys were good at start: a key file that went
           away since. Stay on the old connection and say why. */
        oq_warn("broker %s: %s", self->endpoints[self->current], reason);
        self->current = from;
        return;
    }
    oq_warn("broker %s gave no answer: trying %s", self->endpoints[from],
            self->endpoints[self->current]);
}

const char *oq_web_broker_endpoint(const oq_web_broker_t *self)
{
    return self->endpoints[self->current];
}
