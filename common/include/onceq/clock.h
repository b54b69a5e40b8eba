/*  onceq/clock.h: the clock seam. Everything in onceq that reads time reads it
    through an oq_clock_t, so tests can replace the system clock with one they
    move by hand (lease expiry, backoff, heartbeats) instead of sleeping. */
#ifndef ONCEQ_CLOCK_H
#define ONCEQ_CLOCK_H

#include <stdint.h>

typedef struct oq_clock {
    int64_t (*now_ms)(void *ctx);  /* monotonic milliseconds, for deadlines */
    int64_t (*wall_ms)(void *ctx); /* Unix epoch milliseconds, for display */
    void *ctx;
} oq_clock_t;

/* The process-wide system clock (CLOCK_MONOTONIC, CLOCK_REALTIME). Borrowed. */
const oq_clock_t *oq_clock_system(void);

/* Monotonic milliseconds from the given clock. */
int64_t oq_clock_now_ms(const oq_clock_t *clock);

/* Unix epoch milliseconds from the given clock. */
int64_t oq_clock_wall_ms(const oq_clock_t *clock);

/* Monotonic microseconds from the system clock, for latency measurements. */
int64_t oq_clock_mono_us(void);

#endif
