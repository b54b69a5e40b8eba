/*  verdict.h: the checks that end a chaos run, and its table. Every check
    reads the database or the broker, never the harness's own counters
    alone: those only say what was asked for (which orders were dispatched
    and confirmed), the database and the broker say what happened.

    - exactly one grant row per order that has one, for the run's orders
      only, each with the order's customer and points;
    - every order with a confirmed dispatch has its grant, unless one of its
      jobs sits in the failed store with a reason; an order none of whose
      dispatches was confirmed may have its grant or not (never two);
    - every balance equals the sum of its grant rows and what the orders
      imply; a balance above its grants is points added twice: a double
      grant, which the UNIQUE guard exists to prevent;
    - the broker never counted more grants applied than orders granted;
    - at the end no job is leased and, if the run settled, none is waiting;
    - with shipments, from the carrier's own GET /shipments: every order
      with a confirmed request_shipment dispatch has exactly one shipment,
      or a job of it waits in the review store with a reason (or sits in
      the failed store with one); no order has two shipments, no shipment
      has a key other than shipment-request:{order_id} or a request other
      than the order's; and every confirmed row of shipment_requests names
      the carrier's shipment of its order.
    Violations are counted; the first OQ_CHAOS_MAX_VIOLATIONS are kept with
    their details. */
#ifndef ONCEQ_CHAOS_VERDICT_H
#define ONCEQ_CHAOS_VERDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <libpq-fe.h>

#include "carrier_client.h"
#include "chaos_config.h"
#include "load.h"
#include "observe.h"
#include "schedule.h"
#include "worklog.h"

typedef struct oq_faults oq_faults_t; /* faults.h includes this header */

/* What the table reports besides the checks' own findings. */
typedef struct {
    const oq_chaos_config_t *config;
    const oq_schedule_t *schedule;
    const oq_load_t *load;
    const oq_observe_totals_t *totals; /* broker counters over the run */
    const oq_worklog_t *worklog;       /* NULL in attach mode; finished */
    const oq_faults_t *faults;
    const char *kills_path;    /* write every kill and its job's fate here; NULL: no */
    double heartbeat_window_s; /* heartbeat interval x liveness */
    double retry_after_s;
    double run_s; /* first dispatch to settled (or to the deadline) */
    bool settled; /* every job done or failed before the deadline */
} oq_verdict_report_t;

typedef struct oq_verdict oq_verdict_t;

/* An empty verdict. Never NULL. */
oq_verdict_t *oq_verdict_new(void);

/* Free and set *self_p to NULL. */
void oq_verdict_destroy(oq_verdict_t **self_p);

/* Record a violation (printf-style). */
void oq_verdict_violation(oq_verdict_t *self, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Record a note for the report: a fault skipped and why, a figure that is a
   lower bound, ... (printf-style). */
void oq_verdict_note(oq_verdict_t *self, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Violations so far. */
size_t oq_verdict_count(const oq_verdict_t *self);

/* The broker's part: the final stats (nothing leased; nothing waiting if
   settled) and the failed store (which orders failed, with what reason);
   queue is the grants' queue; with a ship_queue (NULL: none) its failed
   and review stores too.
   Call before oq_verdict_check_db. 0, or -1 if the broker did not answer
   (itself a violation). */
int oq_verdict_check_broker(oq_verdict_t *self, oq_observe_t *observe, const oq_load_t *load,
                            bool settled, const char *queue, const char *ship_queue);

/* The carrier's part: its GET /shipments against the orders, the broker's
   review and failed stores of the shipments' queue (read by
   oq_verdict_check_broker) and the handler's rows in db. Call after
   oq_verdict_check_broker. 0, or -1 if the carrier or the database could
   not be read (itself a violation). */
int oq_verdict_check_carrier(oq_verdict_t *self, oq_carrier_client_t *carrier, PGconn *db,
                             const oq_load_t *load);

/* The database's part, on db. applied: the grants the broker counted as
   applied during the run, or UINT64_MAX if unknown (a broker shared with
   other producers). 0, or -1 if the database could not be read (itself a
   violation). */
int oq_verdict_check_db(oq_verdict_t *self, PGconn *db, const oq_load_t *load, uint64_t applied);

/* Print the table, the notes, the violations and the final word to out
   (what it finds on the way, such as worker exits we did not cause, joins
   the notes). */
void oq_verdict_print(oq_verdict_t *self, FILE *out, const oq_verdict_report_t *report);

#endif
