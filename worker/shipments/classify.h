/*  classify.h: what a carrier's answer means for a shipment request, as a
    pure function of the answer, the record and whether tries remain
    (docs/shipments.md has the table, and why each row is what it is):

      2xx with a reference             confirmed (replayed: an earlier try's)
      2xx, a reference other than      review: the same key names two
        the one recorded                 shipments
      422 (key reused, another body)   review: the answer contradicts the record
      other 4xx                        failed, with the carrier's message
      5xx                              retry (the carrier did nothing, or says
                                         so); failed once no tries remain
      refused, DNS, no route, connect  retry: nothing was sent; failed once no
        timeout                          tries remain
      no answer after the request      retry with the same key: outcome unknown;
        went out (timeout, closed)       review once no tries remain
      a bad URL                        failed
      anything else (1xx, 3xx, 2xx     review: an answer that cannot be read
        without a reference)             is no proof either way */
#ifndef ONCEQ_SHIPMENTS_CLASSIFY_H
#define ONCEQ_SHIPMENTS_CLASSIFY_H

#include <stdbool.h>

#include "onceq/limits.h"
#include "shipments/carrier.h"

typedef enum {
    OQ_SHIPMENT_CONFIRMED, /* the shipment exists: its reference is known */
    OQ_SHIPMENT_FAILED,    /* it does not, and trying again will not change that */
    OQ_SHIPMENT_RETRY,     /* try again later, with the same key */
    OQ_SHIPMENT_REVIEW,    /* nobody can tell from here: a person decides */
} oq_shipment_verdict_t;

typedef struct {
    oq_shipment_verdict_t verdict;
    bool replayed; /* CONFIRMED by the carrier's replay of an earlier try's answer */
    char reference[OQ_SHIPMENT_MAX_REFERENCE_LEN + 1]; /* CONFIRMED */
    char reason[OQ_MAX_ERROR_LEN + 1]; /* the others: one line for the record and the job */
} oq_shipment_outcome_t;

/* Classify answer, the call made with key. recorded is the reference the
   record holds from an earlier confirmation ("" or NULL: none); last_try
   says no try remains after this one. */
void oq_shipment_classify(const oq_carrier_answer_t *answer, const char *key, const char *recorded,
                          bool last_try, oq_shipment_outcome_t *out);

/* "confirmed", "failed", "retry" or "review". */
const char *oq_shipment_verdict_name(oq_shipment_verdict_t verdict);

#endif
