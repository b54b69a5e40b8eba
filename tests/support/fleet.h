/*  fleet.h: many simulated workers on the broker's back socket, for the
    tests that need thousands of them (the hostile tier's stats tests).
    Each is a raw TCP connection speaking ZMTP 3.0 as a DEALER with the
    NULL mechanism, registered by one "ready" the test encodes: one
    descriptor per worker and no libzmq socket, so 10,000 of them fit one
    test process. The broker holds them as it holds real workers. Plaintext
    only: the fixture must be insecure (it_insecure). */
#ifndef ONCEQ_TEST_FLEET_H
#define ONCEQ_TEST_FLEET_H

#include <stddef.h>
#include <sys/types.h>

#include "harness.h"

typedef struct it_fleet it_fleet_t;

/* Start the fixture's broker as a fleet needs it, and wait until it
   answers: no journal; heartbeats a minute apart with a liveness of ten,
   so that silent workers stay registered for the test's life; and no cap
   on one address's connections in their handshake, since the fleet opens
   its connections from one address faster than real workers would. The
   pid (asserted started). */
pid_t it_fleet_broker(it_t *it);

/* count workers connected to endpoint ("tcp://127.0.0.1:PORT"), each
   having sent ready (an encoded "ready" message) and been answered
   "welcome" within timeout_ms in all. NULL if one was not (logged). Free
   with it_fleet_destroy. */
it_fleet_t *it_fleet_new(const char *endpoint, size_t count, const void *ready, size_t ready_len,
                         int timeout_ms);

/* Close every connection (the broker then forgets the workers); NULL
 *self_p. */
void it_fleet_destroy(it_fleet_t **self_p);

#endif
