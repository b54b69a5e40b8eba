/*  fault_plan.h: the faults of onceq-carrier, drawn from a seeded generator
    so that the same seed and the same sequence of requests give the same
    faults. Every POST /shipments draws twice, whatever the settings (an
    injected 503, then a dropped reply), so changing one rate never shifts
    the other's draws. A value type: no allocation. */
#ifndef ONCEQ_CARRIER_FAULT_PLAN_H
#define ONCEQ_CARRIER_FAULT_PLAN_H

#include <stdbool.h>
#include <stdint.h>

/* What the faults are set to (flags at start, PUT /faults later). */
typedef struct {
    double error_rate;      /* share of POSTs answered 503 before processing, 0 to 1 */
    double drop_reply_rate; /* share processed and then closed without an answer, 0 to 1 */
    uint32_t delay_ms;      /* every POST's answer waits this long after processing */
} oq_fault_settings_t;

/* The faults of one request. */
typedef struct {
    bool error; /* answer 503, do nothing */
    bool drop;  /* process, then close the connection without an answer */
} oq_fault_draw_t;

typedef struct {
    oq_fault_settings_t settings;
    uint64_t state; /* splitmix64 */
    uint64_t seed;
} oq_fault_plan_t;

/* Start a plan with these settings and this seed. */
void oq_fault_plan_init(oq_fault_plan_t *plan, const oq_fault_settings_t *settings, uint64_t seed);

/* The faults of the next POST. */
oq_fault_draw_t oq_fault_plan_draw(oq_fault_plan_t *plan);

/* Parse a rate: a decimal from 0 to 1 ("0", "0.25", "1"). 0 or -1. */
int oq_fault_plan_parse_rate(const char *text, double *rate);

#endif
