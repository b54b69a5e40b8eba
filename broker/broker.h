/*  broker.h: onceq-broker's event loop. One thread, two ROUTER sockets
    (front: producers and admin; back: workers) and the engine. The loop
    sleeps until the nearest deadline (a job timer, the next heartbeat, a
    batch fsync), reads what arrived in batches, applies it to the engine,
    hands ready jobs to workers with credit, and before it sleeps again makes
    the turn's journal records durable and only then sends the replies that
    depend on them (group commit). */
#ifndef ONCEQ_BROKER_H
#define ONCEQ_BROKER_H

#include <stddef.h>

#include "compact.h"
#include "engine.h"
#include "journal.h"
#include "onceq/clock.h"
#include "onceq/iocpus.h"

/* One --queue flag: a queue's lease length and default timeout. */
typedef struct {
    const char *name;
    int64_t retry_after_ms;
    int64_t timeout_ms; /* <= 0: the engine default */
} oq_broker_queue_t;

typedef struct {
    const char *front_endpoint;
    const char *back_endpoint;
    int heartbeat_ms; /* interval of heartbeats both ways */
    int liveness;     /* intervals of silence before a worker is dead */
    oq_engine_config_t engine;
    bool no_journal;             /* jobs in memory only: a restart loses them */
    oq_journal_config_t journal; /* data directory, fsync policy, disk seam */
    bool repair;                 /* keep a damaged journal's good prefix */
    oq_compact_config_t compact;
    const oq_broker_queue_t *queues; /* applied before the journal is replayed */
    size_t queue_count;
    /* Authentication (docs/operations.md). With keys_dir both sockets speak
       CURVE, and every peer's key must be allowed for its commands' role.
       Without it the broker starts only with insecure, and binds only
       loopback or ipc endpoints unless insecure_remote is set too. */
    const char *keys_dir;
    bool insecure;
    bool insecure_remote;
    size_t max_conns; /* connections at most, both sockets; 0: the open-file limit's */
    int handshake_ms; /* an unfinished handshake is dropped after this (conns.h) */
    size_t max_handshakes_per_addr; /* in their handshake from one source address; 0: no cap */
    size_t max_producers;           /* connections of each role at most (with keys) */
    size_t max_workers;
    size_t max_admins;
    const char *metrics_addr; /* serve GET /metrics on IP:PORT (metrics_http.h); NULL: off */
    oq_io_cpus_t io_cpus;     /* libzmq's I/O thread runs only on these (none: anywhere) */
} oq_broker_config_t;

/* The defaults from onceq/limits.h (journal in OQ_DEFAULT_DATA_DIR). */
oq_broker_config_t oq_broker_config_default(void);

typedef struct oq_broker oq_broker_t;

/* Configure the queues, open and replay the journal, then bind both
   sockets. NULL with a reason (a queue breaking the timeout rule, a damaged
   journal, "address in use", ...) on failure. */
oq_broker_t *oq_broker_new(const oq_broker_config_t *config, const oq_clock_t *clock, char *reason,
                           size_t reason_len);

/* Close the sockets, free everything, set *self_p to NULL. */
void oq_broker_destroy(oq_broker_t **self_p);

/* The engine, for configuring queues before oq_broker_run. Borrowed. */
oq_engine_t *oq_broker_engine(oq_broker_t *self);

/* Serve until SIGINT or SIGTERM; SIGHUP reads the keys again. Returns 0 on
   a clean stop, -1 on a fatal socket error. */
int oq_broker_run(oq_broker_t *self);

/* One loop turn with a poll of at most timeout_ms, for tests that drive
   the broker without its signal handling. 0, or -1 on a fatal error. */
int oq_broker_turn(oq_broker_t *self, long timeout_ms);

/* Read the keys directory again (what SIGHUP does): new handshakes and
   every further message are judged by the new keys; a worker whose key
   lost its role is dropped and its leases given back. A directory that
   does not load leaves the keys in force. 0, or -1 (logged). */
int oq_broker_reload_keys(oq_broker_t *self);

#endif
