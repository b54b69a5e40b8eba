/*  fault_plan.c: splitmix64 (Steele, Lea and Flood; a public domain
    algorithm, written here from its published description) drives the
    draws: one 64-bit state, good enough for fault rates, and the same
    numbers on every machine. Not for secrets. */
#include "fault_plan.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#define S_GOLDEN_GAMMA 0x9e3779b97f4a7c15ULL
#define S_MIX_1        0xbf58476d1ce4e5b9ULL
#define S_MIX_2        0x94d049bb133111ebULL
#define S_UNIT_BITS    53 /* a double's mantissa: uniform in [0, 1) */

static uint64_t s_next(uint64_t *x)
{
    uint64_t z = (*x += S_GOLDEN_GAMMA);
    z = (z ^ (z >> 30)) * S_MIX_1;
    z = (z ^ (z >> 27)) * S_MIX_2;
    return z ^ (z >> 31);
}

/* True with probability rate: 0 never draws true, 1 always does. */
static bool s_chance(uint64_t *x, double rate)
{
    double u = (double)(s_next(x) >> (64 - S_UNIT_BITS)) / (double)(1ULL << S_UNIT_BITS);
    return u < rate;
}

void oq_fault_plan_init(oq_fault_plan_t *plan, const oq_fault_settings_t *settings, uint64_t seed)
{
    assert(plan && settings);
    plan->settings = *settings;
    plan->seed = seed;
    plan->state = seed;
}

oq_fault_draw_t oq_fault_plan_draw(oq_fault_plan_t *plan)
{
    oq_fault_draw_t d;
    d.error = s_chance(&plan->state, plan->settings.error_rate);
    d.drop = s_chance(&plan->state, plan->settings.drop_reply_rate);
    return d;
}

int oq_fault_plan_parse_rate(const char *text, double *rate)
{
    /* strtod alone would take " 0.5", "0x1p-1" and "infinity". */
    if (!text || !((*text >= '0' && *text <= '9') || *text == '.'))
        return -1;
    for (const char *p = text; *p; p++)
        if (*p == 'x' || *p == 'X')
            return -1;
    char *end;
    errno = 0;
    double r = strtod(text, &end);
    if (errno || *end || !isfinite(r) || r < 0 || r > 1)
        return -1;
    *rate = r;
    return 0;
}
