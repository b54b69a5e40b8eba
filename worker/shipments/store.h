/*  store.h: the shipment_requests table (deploy/sql/0003_shipments.sql), one
    row per order: what was asked of the carrier under which key, how many
    calls were made, and where it stands (requested, confirmed with the
    carrier's reference, failed or review with the reason). Two short
    transactions bracket each call; none is open while the call runs. */
#ifndef ONCEQ_SHIPMENTS_STORE_H
#define ONCEQ_SHIPMENTS_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "onceq/effects.h"
#include "shipments/classify.h"
#include "shipments/request.h"

/* What the record held when a call was about to be made. */
typedef struct {
    char status[16];                                   /* as it was before this call */
    char reference[OQ_SHIPMENT_MAX_REFERENCE_LEN + 1]; /* "" when none */
    bool same_request; /* the record's request is this one (as JSON values) */
    int64_t attempts;  /* calls made for the order, this one included */
} oq_shipment_record_t;

/* Before a call: the order's row is made if there is none (status
   requested, this request), a failed row takes this request (the carrier
   refused the old one), and the call is counted. *record says what the
   row held. 0, or -1 with error. */
int oq_shipment_store_begin(oq_effects_t *effects, const oq_shipment_request_t *request,
                            oq_shipment_record_t *record, oq_pg_error_t *error);

/* After a call: the outcome goes on the record. Confirmed sets the
   reference; failed, retry (status requested) and review set the reason.
   A confirmed row is changed only by a review (the carrier contradicted
   it: the reference stays for the person). 0, or -1 with error. */
int oq_shipment_store_finish(oq_effects_t *effects, int64_t order_id,
                             const oq_shipment_outcome_t *outcome, oq_pg_error_t *error);

#endif
