/*  load.h: the orders of a chaos run and their dispatch. C customers get a
    balance row; M dispatches are drawn from the seed up front, each a new
    order (random customer, 1 .. OQ_CHAOS_MAX_ORDER_POINTS points) or, for
    the given share, the same order again, as a double-clicked button or a
    retried request would send it. Orders at the schedule's hook positions
    carry their hook (pause or SIGKILL after COMMIT).

    Dispatches go out at the given rate through one DEALER, pipelined (at
    most OQ_CHAOS_WINDOW unanswered). Each carries a dispatch_id; with no
    answer in time the very same request is sent again, and after
    OQ_CHAOS_GIVE_UP_MS without one it is recorded as unconfirmed: it may or
    may not be queued, so its order's grant is optional for the verdict,
    unless another dispatch of the order was confirmed. A late answer still
    confirms it. Ids: customers id_base+1 .. id_base+C, orders above.

    With shipments on, every dispatch of an order (re-dispatches too, as a
    confirmation sends both) is followed by a request_shipment dispatch of
    the same order, {order_id, address}, the address made from the order id
    so that every dispatch of one order is the same request to the carrier.
    Both go out at the same moment, each with its own dispatch_id, and are
    resolved independently. */
#ifndef ONCEQ_CHAOS_LOAD_H
#define ONCEQ_CHAOS_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "chaos_config.h"
#include "curve.h"
#include "onceq/limits.h"
#include "schedule.h"

/* One order and what became of its dispatches. */
typedef struct {
    int64_t order_id;
    int64_t customer_id;
    uint32_t points;
    oq_fault_kind_t hook; /* COMMIT_KILL, SELF_KILL, or OQ_FAULT_KIND_COUNT_ */
    uint32_t dispatches;  /* made of this order */
    uint32_t confirmed;   /* answered with a job id */
    uint32_t unconfirmed; /* given up without an answer */
    uint32_t refused;     /* answered with an error */
    uint64_t job_id;      /* of its first confirmed dispatch, for the messages; 0: none */
    /* its request_shipment dispatches, counted as above */
    uint32_t ship_dispatches, ship_confirmed, ship_unconfirmed, ship_refused;
    uint64_t ship_job_id;
} oq_order_t;

typedef struct {
    uint32_t sent; /* dispatches started */
    uint32_t confirmed, unconfirmed, refused;
    uint32_t redispatches;              /* dispatches of an order dispatched before */
    uint32_t resends;                   /* requests sent again after a silence */
    uint32_t late;                      /* unconfirmed ones confirmed by a late answer */
    int64_t first_sent_ms;              /* monotonic */
    int64_t last_answer_ms;             /* monotonic: when the last dispatch was resolved */
    char refusal[OQ_MAX_ERROR_LEN + 1]; /* the first refusal, for the report */
    /* the request_shipment dispatches (none without shipments) */
    uint32_t ship_sent, ship_confirmed, ship_unconfirmed, ship_refused, ship_late;
} oq_load_counts_t;

typedef struct oq_load oq_load_t;

/* Draw the run's orders and dispatches from config->seed. Never NULL. */
oq_load_t *oq_load_new(const oq_chaos_config_t *config, const oq_schedule_t *schedule,
                       int64_t id_base);

/* Close the socket, free, and set *self_p to NULL. */
void oq_load_destroy(oq_load_t **self_p);

/* Give the customers their balance rows, after checking that no customer or
   grant in the run's id ranges exists yet (a rerun with the same
   --id-base against the same database would mix two runs). 0, or -1 with
   the reason in err. */
int oq_load_prepare_db(oq_load_t *self, PGconn *db, char *err, size_t err_len);

/* True if the run dispatches shipments. */
bool oq_load_ships(const oq_load_t *self);

/* Connect the DEALER to the broker's front endpoint, with curve's front
   key. 0 or -1. */
int oq_load_connect(oq_load_t *self, const char *front, const oq_curve_t *curve);

/* The DEALER, for zmq_poll (ZMQ_POLLIN: call oq_load_receive). */
void *oq_load_socket(const oq_load_t *self);

/* Send what is due at now_ms (monotonic), resend what went unanswered,
   give up what went unanswered too long. */
void oq_load_pump(oq_load_t *self, int64_t now_ms);

/* Read every answer waiting on the socket. */
void oq_load_receive(oq_load_t *self, int64_t now_ms);

/* When oq_load_pump next has something to do (monotonic ms). */
int64_t oq_load_next_ms(const oq_load_t *self, int64_t now_ms);

/* True once every dispatch has been sent and resolved. */
bool oq_load_done(const oq_load_t *self);

/* The counts so far (sent: dispatch positions started, the grants; the
   shipments counted apart). */
void oq_load_counts(const oq_load_t *self, oq_load_counts_t *counts);

/* The orders: how many, each by index, and one by its id (NULL if the id is
   not one of the run's orders or was never dispatched). Borrowed. */
size_t oq_load_order_count(const oq_load_t *self);
const oq_order_t *oq_load_order(const oq_load_t *self, size_t index);
const oq_order_t *oq_load_find(const oq_load_t *self, int64_t order_id);

/* The address in order_id's shipment payload (into buf). */
void oq_load_ship_address(int64_t order_id, char *buf, size_t len);

/* The id ranges of the run: customers [*c_lo, *c_hi], orders [*o_lo, *o_hi]. */
void oq_load_ranges(const oq_load_t *self, int64_t *c_lo, int64_t *c_hi, int64_t *o_lo,
                    int64_t *o_hi);

#endif
