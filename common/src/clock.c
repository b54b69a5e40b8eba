/*  clock.c: the system implementation of the clock seam. */
#include "onceq/clock.h"

#include <time.h>

static int64_t s_read(clockid_t id, int64_t per_sec, int64_t nsec_div)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * per_sec + ts.tv_nsec / nsec_div;
}

static int64_t s_system_now_ms(void *ctx)
{
    (void)ctx;
    return s_read(CLOCK_MONOTONIC, 1000, 1000000);
}

static int64_t s_system_wall_ms(void *ctx)
{
    (void)ctx;
    return s_read(CLOCK_REALTIME, 1000, 1000000);
}

static const oq_clock_t s_system = {s_system_now_ms, s_system_wall_ms, 0};

const oq_clock_t *oq_clock_system(void)
{
    return &s_system;
}

int64_t oq_clock_now_ms(const oq_clock_t *clock)
{
    return clock->now_ms(clock->ctx);
}

int64_t oq_clock_wall_ms(const oq_clock_t *clock)
{
    return clock->wall_ms(clock->ctx);
}

int64_t oq_clock_mono_us(void)
{
    return s_read(CLOCK_MONOTONIC, 1000000, 1000);
}
