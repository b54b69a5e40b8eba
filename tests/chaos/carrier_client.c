/*  carrier_client.c: libcurl for the requests (one easy handle, reused),
    jansson for the bodies. Every request has a total timeout of
    OQ_CHAOS_CARRIER_CALL_MS: a stalled carrier makes a call fail, never
    hang the harness. */
#include "carrier_client.h"

#include <assert.h>
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos_limits.h"

#define S_ERROR_LEN 2048
#define S_URL_LEN   256
/* The largest body read from the carrier: its shipment list at its own
   bound of shipments, with room for every request's body. */
#define S_MAX_BODY_BYTES ((size_t)2 << 30)

struct oq_carrier_client {
    char base[S_URL_LEN]; /* the carrier's base URL */
    CURL *curl;           /* reused between requests */
    char *body;           /* the last answer */
    size_t body_len, body_cap;
    char error[S_ERROR_LEN]; /* the last failure */
};

oq_carrier_client_t *oq_carrier_client_new(const char *base_url)
{
    assert(base_url);
    oq_carrier_client_t *self = calloc(1, sizeof *self);
    assert(self);
    snprintf(self->base, sizeof self->base, "%s", base_url);
    size_t len = strlen(self->base);
    if (len > 0 && self->base[len - 1] == '/')
        self->base[len - 1] = 0;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    self->curl = curl_easy_init();
    assert(self->curl);
    return self;
}

void oq_carrier_client_destroy(oq_carrier_client_t **self_p)
{
    assert(self_p);
    oq_carrier_client_t *self = *self_p;
    if (!self)
        return;
    curl_easy_cleanup(self->curl);
    curl_global_cleanup();
    free(self->body);
    free(self);
    *self_p = NULL;
}

const char *oq_carrier_client_error(const oq_carrier_client_t *self)
{
    return self->error;
}

static size_t s_on_body(char *data, size_t size, size_t count, void *arg)
{
    oq_carrier_client_t *self = arg;
    size_t n = size * count;
    if (self->body_len + n + 1 > S_MAX_BODY_BYTES)
        return 0; /* libcurl then fails the transfer */
    if (self->body_len + n + 1 > self->body_cap) {
        size_t cap = self->body_cap ? self->body_cap : 4096;
        while (cap < self->body_len + n + 1)
            cap *= 2;
        char *grown = realloc(self->body, cap);
        if (!grown)
            return 0;
        self->body = grown;
        self->body_cap = cap;
    }
    memcpy(self->body + self->body_len, data, n);
    self->body_len += n;
    self->body[self->body_len] = 0;
    return n;
}

/* One request; the answer's body in self->body. 0 on a 2xx, else -1. */
static int s_request(oq_carrier_client_t *self, const char *method, const char *path,
                     const char *send)
{
    char url[S_URL_LEN + 64];
    snprintf(url, sizeof url, "%s%s", self->base, path);
    self->body_len = 0;
    CURL *c = self->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)OQ_CHAOS_CARRIER_CALL_MS);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, self);
    struct curl_slist *headers = NULL;
    if (send) {
        headers = curl_slist_append(headers, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, send);
    }
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(headers);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
        snprintf(self->error, sizeof self->error, "%s %s: %s", method, url, curl_easy_strerror(rc));
        return -1;
    }
    if (status < 200 || status > 299) {
        snprintf(self->error, sizeof self->error, "%s %s: status %ld: %.200s", method, url, status,
                 self->body ? self->body : "");
        return -1;
    }
    if (!self->body) /* an empty body: make it a string all the same */
        s_on_body("", 1, 0, self);
    return 0;
}

int oq_carrier_client_set_faults(oq_carrier_client_t *self, double error_rate, double drop_rate,
                                 uint32_t delay_ms)
{
    char send[256];
    snprintf(send, sizeof send,
             "{\"error_rate\": %.6f, \"drop_reply_rate\": %.6f, \"delay_ms\": %u}", error_rate,
             drop_rate, delay_ms);
    return s_request(self, "PUT", "/faults", send);
}

static uint64_t s_u64(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

static const char *s_str(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

int oq_carrier_client_shipments(oq_carrier_client_t *self, oq_carrier_shipment_fn fn, void *ctx,
                                oq_carrier_totals_t *totals)
{
    if (s_request(self, "GET", "/shipments", NULL) < 0)
        return -1;
    json_error_t jerr;
    json_t *root = json_loadb(self->body, self->body_len, 0, &jerr);
    const json_t *list = json_object_get(root, "shipments");
    if (!json_is_array(list)) {
        snprintf(self->error, sizeof self->error,
                 "GET %s/shipments: not the documented answer (%s)", self->base,
                 root ? "no shipments array" : jerr.text);
        json_decref(root);
        return -1;
    }
    const json_t *t = json_object_get(root, "totals");
    *totals = (oq_carrier_totals_t){
        .posts = s_u64(t, "posts"),
        .created = s_u64(t, "created"),
        .replayed = s_u64(t, "replayed"),
        .conflicts = s_u64(t, "conflicts"),
        .invalid = s_u64(t, "invalid"),
        .injected_errors = s_u64(t, "injected_errors"),
        .dropped_replies = s_u64(t, "dropped_replies"),
        .delayed_replies = s_u64(t, "delayed_replies"),
    };
    size_t i;
    const json_t *s;
    json_array_foreach(list, i, s)
    {
        oq_carrier_shipment_t shipment = {
            .order_id = (int64_t)s_u64(s, "order_id"),
            .key = s_str(s, "idempotency_key"),
            .reference = s_str(s, "reference"),
            .address = s_str(json_object_get(s, "request"), "address"),
            .requests = (uint32_t)s_u64(s, "requests"),
            .dropped = (uint32_t)s_u64(s, "dropped"),
        };
        fn(ctx, &shipment);
    }
    json_decref(root);
    return 0;
}
