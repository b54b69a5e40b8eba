/*  engine_fixture.h: the broker's engine (broker/engine.h) on a clock the
    test moves by hand, for the unit tests of its state machine
    (test_engine, test_job_keys): a fresh engine per test with short fixed
    timers, and a deliver callback that records what the engine sent, or
    fails for one worker. No sockets and no sleeps: a lease runs out because
    the test says the time has passed. cmocka is its framework. Its names
    are short (ef_, EF_), like the integration harness's it_, because the
    tests use them on almost every line. */
#ifndef ONCEQ_TEST_ENGINE_FIXTURE_H
#define ONCEQ_TEST_ENGINE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* The engine's timers in every test. */
#define EF_RETRY_AFTER_MS 10000
#define EF_TIMEOUT_MS     4000
#define EF_MARGIN_MS      2000
#define EF_BACKOFF_MS     1000
#define EF_MAX_JOBS       100
/* The wall clock is this plus the test's monotonic now. */
#define EF_WALL_BASE_MS 1700000000000LL
/* Deliveries recorded per test at most. */
#define EF_MAX_SENT 64

/* One delivery the engine asked for. */
typedef struct {
    char worker; /* first byte of the worker identity */
    uint64_t id;
    uint32_t attempt;
    uint64_t lease;
} ef_delivery_t;

/* The clock the test moves: milliseconds since the test began. */
typedef struct {
    int64_t now;
} ef_time_t;

typedef struct {
    ef_time_t time;   /* set time.now to move the clock */
    oq_clock_t clock; /* the engine's clock, reading time */
    oq_engine_t *engine;
    ef_delivery_t sent[EF_MAX_SENT];
    size_t sent_count;
    char unreachable; /* deliveries to this worker fail */
} ef_fixture_t;

/* A cmocka setup: a fresh engine at time 0; *state is the fixture. */
int ef_setup(void **state);

/* A cmocka teardown: destroys the engine. */
int ef_teardown(void **state);

/* An oq_engine_pump callback (ctx: the fixture): records the delivery in
   sent, or returns -1 for the unreachable worker. */
int ef_deliver(void *ctx, const oq_worker_view_t *w, const oq_job_view_t *job);

/* A worker named by one byte, with credit; fails the test if refused. */
oq_worker_t *ef_worker(ef_fixture_t *f, char name, uint32_t credit);

/* The token of the delivery (id, attempt), as its worker got it; 0 if
   there was no such delivery. */
uint64_t ef_lease(const ef_fixture_t *f, uint64_t id, uint32_t attempt);

#endif
