/*  broker.h: onceq-broker's event loop. One thread, two ROUTER sockets
    (front: producers and admin; back: workers) and the engine. The loop
    sleeps until the nearest deadline (a job timer or the next heartbeat),
    reads what arrived in batches, applies it to the engine, then hands ready
    jobs to workers with credit. */
#ifndef ONCEQ_BROKER_H
#define ONCEQ_BROKER_H

#include <stddef.h>

#include "engine.h"
#include "onceq/clock.h"

typedef struct {
    const char *front_endpoint;
    const char *back_endpoint;
    int heartbeat_ms; /* interval of heartbeats both ways */
    int liveness;     /* intervals of silence before a worker is dead */
    oq_engine_config_t engine;
} oq_broker_config_t;

typedef struct oq_broker oq_broker_t;

/* Bind both sockets. NULL with a reason (e.g. "address in use") on failure. */
oq_broker_t *oq_broker_new(const oq_broker_config_t *config, const oq_clock_t *clock, char *reason,
                           size_t reason_len);

/* Close the sockets, free everything, set *self_p to NULL. */
void oq_broker_destroy(oq_broker_t **self_p);

/* The engine, for configuring queues before oq_broker_run. Borrowed. */
oq_engine_t *oq_broker_engine(oq_broker_t *self);

/* Serve until SIGINT or SIGTERM. Returns 0 on a clean stop, -1 on a fatal
   socket error. */
int oq_broker_run(oq_broker_t *self);

#endif
