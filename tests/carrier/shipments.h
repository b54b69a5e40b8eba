/*  shipments.h: the mock carrier's shipments, in memory, by idempotency key.
    A POST's key and body go in; out comes what the carrier answers: a new
    shipment (201), the key's first answer again (a replay), a conflict (the
    key with another body, 422), an invalid body (400) or "full" (507). A
    shipment is created at most once per key, and its reference comes from a
    counter (SHP-000042), so two runs with the same requests compare. Nothing
    is written to disk: a restart forgets every shipment. Not thread-safe:
    one thread owns it (the server's event loop). */
#ifndef ONCEQ_CARRIER_SHIPMENTS_H
#define ONCEQ_CARRIER_SHIPMENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "carrier_limits.h"

typedef struct oq_shipments oq_shipments_t;

typedef enum {
    OQ_SHIPMENTS_CREATED,  /* a new shipment: 201 */
    OQ_SHIPMENTS_REPLAYED, /* the key's saved answer, sent again */
    OQ_SHIPMENTS_CONFLICT, /* the key was used with another body: 422 */
    OQ_SHIPMENTS_INVALID,  /* the body is not a valid shipment request: 400 */
    OQ_SHIPMENTS_FULL,     /* a new key with --max-shipments held: 507 */
} oq_shipments_outcome_t;

/* What the carrier answers to one POST. */
typedef struct {
    oq_shipments_outcome_t outcome;
    unsigned status; /* the HTTP status */
    char *body;      /* the JSON answer; the caller frees it (free) */
    /* The key's shipment (created, replayed, conflict), else "". */
    char reference[OQ_CARRIER_MAX_REFERENCE_LEN];
} oq_shipments_answer_t;

/* A store that holds at most max shipments, the first numbered first_ref.
   NULL if out of memory. */
oq_shipments_t *oq_shipments_new(uint64_t max, uint64_t first_ref);

/* Free every shipment and set *self_p to NULL. */
void oq_shipments_destroy(oq_shipments_t **self_p);

/* 0 if key is a usable Idempotency-Key (1 to OQ_CARRIER_MAX_KEY_LEN
   printable ASCII characters, space included), else -1 with the reason in
   err. */
int oq_shipments_check_key(const char *key, char *err, size_t err_len);

/* Answer a POST of body (len bytes, not NUL-terminated) with key, which
   oq_shipments_check_key accepted. 0 with *answer filled (free
   answer->body), -1 out of memory (nothing changed). */
int oq_shipments_submit(oq_shipments_t *self, const char *key, const char *body, size_t len,
                        oq_shipments_answer_t *answer);

/* Count an answer about key's shipment that was processed and then never
   sent (--drop-reply-rate). Nothing if key has no shipment. */
void oq_shipments_note_dropped(oq_shipments_t *self, const char *key);

/* Shipments held. */
size_t oq_shipments_count(const oq_shipments_t *self);

/* Every shipment, oldest first, as a JSON array of shipment objects
   (docs/carrier.md). Caller frees (json_decref); NULL if out of memory. */
json_t *oq_shipments_list(const oq_shipments_t *self);

/* The shipment with this reference as a JSON object, or NULL if there is
   none (or out of memory). Caller frees (json_decref). */
json_t *oq_shipments_find(const oq_shipments_t *self, const char *reference);

#endif
