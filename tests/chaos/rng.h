/*  rng.h: the deterministic random numbers of a chaos run. One seed gives
    the same orders and the same fault schedule on every machine: the
    generator is xoshiro256** seeded through splitmix64, and each user (the
    orders, the schedule, the victims, the malformed frames) draws from its
    own stream so that changing one fault count does not change the orders.
    A value type: no allocation, copy it freely. */
#ifndef ONCEQ_CHAOS_RNG_H
#define ONCEQ_CHAOS_RNG_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} oq_rng_t;

/* The independent streams of one seed. */
typedef enum {
    OQ_RNG_ORDERS = 1,
    OQ_RNG_SCHEDULE,
    OQ_RNG_VICTIMS,
    OQ_RNG_FRAMES,
} oq_rng_stream_t;

/* Seed rng with stream `stream` of seed. */
void oq_rng_seed(oq_rng_t *rng, uint64_t seed, oq_rng_stream_t stream);

/* The next 64 random bits. */
uint64_t oq_rng_next(oq_rng_t *rng);

/* Uniform in [0, n); n > 0. Unbiased (rejection). */
uint64_t oq_rng_below(oq_rng_t *rng, uint64_t n);

/* True with probability pct / 100. */
bool oq_rng_percent(oq_rng_t *rng, uint32_t pct);

/* A seed from the operating system, for a run without --seed. 0 or -1. */
int oq_rng_os_seed(uint64_t *seed);

#endif
