/*  chaos_config.h: what one onceq-chaos run is asked to do, as parsed from
    its flags (chaos_main.c). Plain data: every module reads the part it
    needs and none changes it. */
#ifndef ONCEQ_CHAOS_CONFIG_H
#define ONCEQ_CHAOS_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint64_t seed; /* the one number that makes the orders and the schedule */

    /* the load */
    uint32_t jobs;           /* dispatches in all, re-dispatches included */
    uint32_t customers;      /* each gets a balance row at start */
    double rate;             /* dispatches per second; 0: unpaced */
    uint32_t redispatch_pct; /* share of dispatches that repeat an earlier order */
    const char *job_type;    /* grant_points, or grant_points_unguarded to see a failure */
    const char *queue;
    int64_t id_base;  /* customer and order ids start above it */
    bool id_base_set; /* --id-base given */

    /* the deployment: attach to one, or start our own (the default) */
    bool attach;            /* --broker given: start no broker and no workers */
    const char *front;      /* broker front endpoint (attach) */
    const char *back;       /* broker back endpoint (attach; for the malformed bursts) */
    const char *database;   /* libpq conninfo; NULL: our own cluster via pg.sh */
    const char *bin_dir;    /* where onceq-broker, onceq-worker and onceq are; NULL: ours */
    const char *pg_script;  /* deploy/pg.sh; NULL: found as described in procs.h */
    const char *dir;        /* the run directory; NULL: a fresh one under $TMPDIR */
    bool insecure;          /* plaintext: our broker runs --insecure (attach: no keys given) */
    const char *key;        /* attach: our secret key for the front socket (an admin's) */
    const char *worker_key; /* attach: a worker's secret key, for the back socket's bursts */
    const char *broker_key; /* attach: the broker's public key file */
    bool keep;              /* keep the run directory after a clean run too */
    uint32_t workers;       /* worker processes under one supervisor */
    uint32_t heartbeat_ms, liveness;
    double retry_after_s; /* the broker's lease length (own broker) */
    double job_timeout_s; /* each job's timeout; 0: the queue's default */
    uint32_t max_tries, backoff_s;
    uint32_t hold_ms;               /* test_pause_in_txn_ms on every job; 0: none */
    uint32_t commit_pause_ms;       /* test_pause_after_commit_ms of commit-window orders */
    bool hooks;                     /* send test_* keys (own workers run with ONCEQ_TEST_HOOKS=1) */
    const char *const *worker_args; /* extra arguments for our workers (--worker-arg), borrowed */
    size_t worker_arg_count;

    /* the shipments: each dispatch of an order also requests its shipment */
    bool carrier;              /* dispatch request_shipment jobs and judge the carrier */
    const char *carrier_url;   /* attach: their carrier's base URL; own: NULL (ours) */
    const char *ship_type;     /* request_shipment */
    const char *ship_queue;    /* the shipments' queue */
    uint32_t ship_tries;       /* each shipment job's retry budget */
    double carrier_error_rate; /* the carrier's 503s all through the run */
    double carrier_drop_rate;  /* the carrier's replies dropped after processing, all through */

    /* the faults */
    uint32_t kills, commit_kills, self_kills, pauses, broker_kills, db_restarts, bursts;
    uint32_t burst_frames;
    uint32_t pause_ms;       /* how long a worker stays stopped */
    uint32_t broker_down_ms; /* how long a killed broker stays down */
    uint32_t carrier_stalls, carrier_error_bursts, carrier_delay_bursts;
    uint32_t carrier_fault_ms; /* how long a carrier stall or burst lasts */

    uint32_t settle_s; /* wait this long at most for the jobs to settle */
    bool verbose;      /* every fault as it happens */
} oq_chaos_config_t;

#endif
