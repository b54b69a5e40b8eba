/*  shipments.c: a chained hash table of shipments by idempotency key, plus
    an array in creation order for listing and for finding a shipment by its
    reference (the reference's counter minus the first one is its index). */
#include "shipments.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_REFERENCE_PREFIX "SHP-"
#define S_MIN_BUCKETS      64
#define S_MIN_ALL          64
#define S_FNV_OFFSET       0xcbf29ce484222325ULL
#define S_FNV_PRIME        0x100000001b3ULL
#define S_ERR_LEN          256
#define S_FIRST_PRINTABLE  0x20
#define S_LAST_PRINTABLE   0x7e

typedef struct s_shipment {
    struct s_shipment *next; /* the hash chain */
    char *key;               /* the Idempotency-Key */
    char reference[OQ_CARRIER_MAX_REFERENCE_LEN];
    int64_t order_id;
    json_t *request;    /* the first request's body: later bodies must equal it */
    char *answer;       /* the first answer's JSON text, replayed as is */
    uint64_t requests;  /* POSTs with this key that reached the store */
    uint64_t replays;   /* of which answered with the saved answer */
    uint64_t conflicts; /* of which refused: another body (422) */
    uint64_t dropped;   /* answers about it processed and never sent */
} s_shipment_t;

struct oq_shipments {
    s_shipment_t **buckets; /* by key hash; a power of two */
    size_t bucket_count;
    s_shipment_t **all; /* in creation order: index = counter - first_ref */
    size_t count;
    size_t all_cap;
    uint64_t max;
    uint64_t first_ref;
};

static uint64_t s_hash(const char *key)
{
    /* FNV-1a: keys come from the carrier's own clients, a mock on loopback;
       no flooding defence is needed. */
    uint64_t h = S_FNV_OFFSET;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * S_FNV_PRIME;
    return h;
}

oq_shipments_t *oq_shipments_new(uint64_t max, uint64_t first_ref)
{
    assert(max > 0);
    oq_shipments_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->bucket_count = S_MIN_BUCKETS;
    self->buckets = calloc(self->bucket_count, sizeof *self->buckets);
    if (!self->buckets) {
        free(self);
        return NULL;
    }
    self->max = max;
    self->first_ref = first_ref;
    return self;
}

static void s_shipment_free(s_shipment_t *s)
{
    free(s->key);
    json_decref(s->request);
    free(s->answer);
    free(s);
}

void oq_shipments_destroy(oq_shipments_t **self_p)
{
    assert(self_p);
    oq_shipments_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->count; i++)
        s_shipment_free(self->all[i]);
    free(self->all);
    free(self->buckets);
    free(self);
    *self_p = NULL;
}

int oq_shipments_check_key(const char *key, char *err, size_t err_len)
{
    size_t len = strlen(key);
    if (len == 0) {
        snprintf(err, err_len, "Idempotency-Key is empty");
        return -1;
    }
    if (len > OQ_CARRIER_MAX_KEY_LEN) {
        snprintf(err, err_len, "Idempotency-Key is %zu bytes long; at most %d are allowed", len,
                 OQ_CARRIER_MAX_KEY_LEN);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < S_FIRST_PRINTABLE || c > S_LAST_PRINTABLE) {
            snprintf(err, err_len,
                     "Idempotency-Key has a byte 0x%02x at offset %zu; only printable ASCII is "
                     "allowed",
                     c, i);
            return -1;
        }
    }
    return 0;
}

static s_shipment_t *s_lookup(const oq_shipments_t *self, const char *key)
{
    s_shipment_t *s = self->buckets[s_hash(key) & (self->bucket_count - 1)];
    while (s && strcmp(s->key, key) != 0)
        s = s->next;
    return s;
}

/* Double the buckets once there are as many shipments as buckets, so
   chains stay short. A failed allocation keeps the old table: slower, not
   wrong. */
static void s_maybe_grow(oq_shipments_t *self)
{
    if (self->count < self->bucket_count)
        return;
    size_t n = self->bucket_count * 2;
    s_shipment_t **b = calloc(n, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < self->bucket_count; i++) {
        s_shipment_t *s = self->buckets[i];
        while (s) {
            s_shipment_t *next = s->next;
            size_t j = s_hash(s->key) & (n - 1);
            s->next = b[j];
            b[j] = s;
            s = next;
        }
    }
    free(self->buckets);
    self->buckets = b;
    self->bucket_count = n;
}

/* ---- answers ---- */

static char *s_error_body(const char *code, const char *message, const char *reference)
{
    json_t *o = json_pack("{s:s, s:s}", "error", code, "message", message);
    if (o && reference && *reference)
        json_object_set_new(o, "reference", json_string(reference));
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

static int s_answer_error(oq_shipments_answer_t *answer, oq_shipments_outcome_t outcome,
                          unsigned status, const char *code, const char *message,
                          const char *reference)
{
    answer->outcome = outcome;
    answer->status = status;
    answer->body = s_error_body(code, message, reference);
    snprintf(answer->reference, sizeof answer->reference, "%s", reference ? reference : "");
    return answer->body ? 0 : -1;
}

/* ---- the request schema (docs/carrier.md) ---- */

static int s_check_items(json_t *items, char *err, size_t err_len)
{
    if (!json_is_array(items)) {
        snprintf(err, err_len, "\"items\" must be an array");
        return -1;
    }
    if (json_array_size(items) > OQ_CARRIER_MAX_ITEMS) {
        snprintf(err, err_len, "\"items\" has %zu entries; at most %d are allowed",
                 json_array_size(items), OQ_CARRIER_MAX_ITEMS);
        return -1;
    }
    size_t i;
    json_t *item;
    json_array_foreach(items, i, item)
    {
        if (!json_is_object(item)) {
            snprintf(err, err_len, "items[%zu] must be an object", i);
            return -1;
        }
        const char *name;
        json_t *v;
        json_object_foreach(item, name, v)
        {
            if (strcmp(name, "sku") != 0 && strcmp(name, "qty") != 0) {
                snprintf(err, err_len, "items[%zu] has an unknown field \"%.64s\"", i, name);
                return -1;
            }
        }
        json_t *sku = json_object_get(item, "sku");
        if (!json_is_string(sku) || json_string_length(sku) == 0 ||
            json_string_length(sku) > OQ_CARRIER_MAX_SKU_LEN) {
            snprintf(err, err_len, "items[%zu].sku must be a string of 1 to %d bytes", i,
                     OQ_CARRIER_MAX_SKU_LEN);
            return -1;
        }
        json_t *qty = json_object_get(item, "qty");
        if (!json_is_integer(qty) || json_integer_value(qty) < 1 ||
            json_integer_value(qty) > OQ_CARRIER_MAX_ITEM_QTY) {
            snprintf(err, err_len, "items[%zu].qty must be an integer from 1 to %d", i,
                     OQ_CARRIER_MAX_ITEM_QTY);
            return -1;
        }
    }
    return 0;
}

/* 0 if request is a valid shipment request, else -1 with a reason that
   names the field. */
static int s_check_request(json_t *request, char *err, size_t err_len)
{
    if (!json_is_object(request)) {
        snprintf(err, err_len, "the body must be a JSON object");
        return -1;
    }
    const char *name;
    json_t *v;
    json_object_foreach(request, name, v)
    {
        if (strcmp(name, "order_id") != 0 && strcmp(name, "address") != 0 &&
            strcmp(name, "items") != 0) {
            snprintf(err, err_len, "unknown field \"%.64s\"", name);
            return -1;
        }
    }
    json_t *order = json_object_get(request, "order_id");
    if (!json_is_integer(order) || json_integer_value(order) < 1 ||
        json_integer_value(order) > OQ_CARRIER_MAX_ORDER_ID) {
        snprintf(err, err_len, "\"order_id\" must be an integer from 1 to %lld",
                 (long long)OQ_CARRIER_MAX_ORDER_ID);
        return -1;
    }
    json_t *address = json_object_get(request, "address");
    if (!json_is_string(address) || json_string_length(address) == 0 ||
        json_string_length(address) > OQ_CARRIER_MAX_ADDRESS_LEN) {
        snprintf(err, err_len, "\"address\" must be a string of 1 to %d bytes",
                 OQ_CARRIER_MAX_ADDRESS_LEN);
        return -1;
    }
    json_t *items = json_object_get(request, "items");
    if (items && s_check_items(items, err, err_len) < 0)
        return -1;
    return 0;
}

/* ---- submit ---- */

static s_shipment_t *s_create(oq_shipments_t *self, const char *key, json_t *request)
{
    if (self->count == self->all_cap) {
        size_t cap = self->all_cap ? self->all_cap * 2 : S_MIN_ALL;
        s_shipment_t **all = realloc(self->all, cap * sizeof *all);
        if (!all)
            return NULL;
        self->all = all;
        self->all_cap = cap;
    }
    s_shipment_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->key = strdup(key);
    uint64_t counter = self->first_ref + self->count;
    snprintf(s->reference, sizeof s->reference, S_REFERENCE_PREFIX "%0*" PRIu64,
             OQ_CARRIER_REFERENCE_DIGITS, counter);
    s->order_id = json_integer_value(json_object_get(request, "order_id"));
    json_t *answer = json_pack("{s:s, s:s, s:I, s:s}", "reference", s->reference, "idempotency_key",
                               key, "order_id", (json_int_t)s->order_id, "status", "created");
    s->answer = answer ? json_dumps(answer, JSON_COMPACT) : NULL;
    json_decref(answer);
    if (!s->key || !s->answer) {
        s_shipment_free(s);
        return NULL;
    }
    s->request = json_incref(request);
    size_t j = s_hash(key) & (self->bucket_count - 1);
    s->next = self->buckets[j];
    self->buckets[j] = s;
    self->all[self->count++] = s;
    s_maybe_grow(self);
    return s;
}

int oq_shipments_submit(oq_shipments_t *self, const char *key, const char *body, size_t len,
                        oq_shipments_answer_t *answer)
{
    assert(self && key && answer);
    memset(answer, 0, sizeof *answer);
    char err[S_ERR_LEN];
    json_error_t jerr;
    json_t *request = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!request) {
        snprintf(err, sizeof err, "the body is not JSON: %s (line %d, column %d)", jerr.text,
                 jerr.line, jerr.column);
        return s_answer_error(answer, OQ_SHIPMENTS_INVALID, 400, "invalid_json", err, NULL);
    }
    if (s_check_request(request, err, sizeof err) < 0) {
        json_decref(request);
        return s_answer_error(answer, OQ_SHIPMENTS_INVALID, 400, "invalid_request", err, NULL);
    }

    s_shipment_t *s = s_lookup(self, key);
    if (s) {
        /* The same JSON value, whatever the key order or white space: a
           client that rebuilds its body on a retry is still the same
           request. */
        bool same = json_equal(s->request, request);
        json_decref(request);
        if (!same) {
            snprintf(err, sizeof err,
                     "Idempotency-Key \"%s\" was already used with a different request (shipment "
                     "%s)",
                     key, s->reference);
            if (s_answer_error(answer, OQ_SHIPMENTS_CONFLICT, 422, "idempotency_key_reused", err,
                               s->reference) < 0)
                return -1;
            s->requests++;
            s->conflicts++;
            return 0;
        }
        answer->body = strdup(s->answer);
        if (!answer->body)
            return -1;
        answer->outcome = OQ_SHIPMENTS_REPLAYED;
        answer->status = 201;
        snprintf(answer->reference, sizeof answer->reference, "%s", s->reference);
        s->requests++;
        s->replays++;
        return 0;
    }

    if (self->count >= self->max) {
        json_decref(request);
        snprintf(err, sizeof err,
                 "the carrier holds %zu shipments, its limit (--max-shipments); no new one is "
                 "created",
                 self->count);
        return s_answer_error(answer, OQ_SHIPMENTS_FULL, 507, "capacity_reached", err, NULL);
    }
    s = s_create(self, key, request);
    json_decref(request);
    if (!s)
        return -1;
    s->requests = 1;
    answer->body = strdup(s->answer);
    if (!answer->body)
        return -1; /* the shipment exists: a retry with its key gets its answer */
    answer->outcome = OQ_SHIPMENTS_CREATED;
    answer->status = 201;
    snprintf(answer->reference, sizeof answer->reference, "%s", s->reference);
    return 0;
}

void oq_shipments_note_dropped(oq_shipments_t *self, const char *key)
{
    s_shipment_t *s = s_lookup(self, key);
    if (s)
        s->dropped++;
}

size_t oq_shipments_count(const oq_shipments_t *self)
{
    return self->count;
}

static json_t *s_to_json(const s_shipment_t *s)
{
    return json_pack("{s:s, s:s, s:I, s:O, s:I, s:I, s:I, s:I}", "reference", s->reference,
                     "idempotency_key", s->key, "order_id", (json_int_t)s->order_id, "request",
                     s->request, "requests", (json_int_t)s->requests, "replays",
                     (json_int_t)s->replays, "conflicts", (json_int_t)s->conflicts, "dropped",
                     (json_int_t)s->dropped);
}

json_t *oq_shipments_list(const oq_shipments_t *self)
{
    json_t *list = json_array();
    if (!list)
        return NULL;
    for (size_t i = 0; i < self->count; i++) {
        if (json_array_append_new(list, s_to_json(self->all[i])) < 0) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

json_t *oq_shipments_find(const oq_shipments_t *self, const char *reference)
{
    const char *digits = reference + strlen(S_REFERENCE_PREFIX);
    if (strncmp(reference, S_REFERENCE_PREFIX, strlen(S_REFERENCE_PREFIX)) != 0 || !*digits)
        return NULL;
    uint64_t counter = 0;
    for (const char *p = digits; *p; p++) {
        if (*p < '0' || *p > '9' || counter > (UINT64_MAX - 9) / 10)
            return NULL;
        counter = counter * 10 + (uint64_t)(*p - '0');
    }
    if (counter < self->first_ref || counter - self->first_ref >= self->count)
        return NULL;
    const s_shipment_t *s = self->all[counter - self->first_ref];
    /* SHP-42 and SHP-0000042 name no shipment: only the exact spelling. */
    if (strcmp(s->reference, reference) != 0)
        return NULL;
    return s_to_json(s);
}
