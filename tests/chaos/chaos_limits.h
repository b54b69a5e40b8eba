/*  chaos_limits.h: every default, bound and timer of onceq-chaos in one
    place, with its unit in the name. The defaults are the bounded run the
    test suite makes (chaos.bounded); OQ_CHAOS_LONG_* are what --long sets.
    docs/chaos.md quotes them; change both together. */
#ifndef ONCEQ_CHAOS_LIMITS_H
#define ONCEQ_CHAOS_LIMITS_H

/* ---- the load ---- */
#define OQ_CHAOS_DEFAULT_JOBS           3000
#define OQ_CHAOS_DEFAULT_CUSTOMERS      50
#define OQ_CHAOS_DEFAULT_RATE           100 /* dispatches per second; 0: as fast as answered */
#define OQ_CHAOS_DEFAULT_REDISPATCH_PCT 15  /* share of dispatches that repeat an earlier order */
#define OQ_CHAOS_DEFAULT_WORKERS        4
#define OQ_CHAOS_DEFAULT_JOB_TYPE       "grant_points"
#define OQ_CHAOS_DEFAULT_QUEUE          "chaos"
#define OQ_CHAOS_MAX_JOBS               5000000
#define OQ_CHAOS_MAX_CUSTOMERS          1000000
#define OQ_CHAOS_MAX_ORDER_POINTS       100 /* an order grants 1 .. this many points */
/* A re-dispatch repeats one of the last few orders this often (in percent),
   so that two runs of one order meet while both are in flight; otherwise an
   order from anywhere earlier, which meets the grant already written. */
#define OQ_CHAOS_RECENT_ORDERS     8
#define OQ_CHAOS_RECENT_ORDERS_PCT 50

/* ---- the jobs (own deployment) ---- */
#define OQ_CHAOS_DEFAULT_HEARTBEAT_MS  250
#define OQ_CHAOS_DEFAULT_LIVENESS      3
#define OQ_CHAOS_DEFAULT_RETRY_AFTER_S 10
#define OQ_CHAOS_DEFAULT_JOB_TIMEOUT_S 4 /* below retry_after by the broker's 5 s margin */
#define OQ_CHAOS_DEFAULT_MAX_TRIES     20
#define OQ_CHAOS_DEFAULT_BACKOFF_S     1
/* Every grant holds its transaction open this long after its INSERT (the
   test_pause_in_txn_ms hook), as a slower real handler would, so that a
   kill lands inside a transaction rather than between jobs. */
#define OQ_CHAOS_DEFAULT_HOLD_MS 10
/* How long a commit-window order sits after its COMMIT, before its ack: the
   time the harness has to see the line and SIGKILL the process. Below the
   job timeout, or the worker's watchdog would end the job first. */
#define OQ_CHAOS_DEFAULT_COMMIT_PAUSE_MS 2500
#define OQ_CHAOS_WORKER_STOP_S           10 /* --stop-timeout of the pool */

/* ---- the faults (defaults: the bounded run) ---- */
#define OQ_CHAOS_DEFAULT_KILLS        12 /* SIGKILL of a worker holding a job */
#define OQ_CHAOS_DEFAULT_COMMIT_KILLS 5  /* SIGKILL between COMMIT and ack */
#define OQ_CHAOS_DEFAULT_SELF_KILLS   3  /* the worker SIGKILLs itself after COMMIT */
#define OQ_CHAOS_DEFAULT_PAUSES       3  /* SIGSTOP past retry_after, then SIGCONT */
#define OQ_CHAOS_DEFAULT_BROKER_KILLS 1
#define OQ_CHAOS_DEFAULT_DB_RESTARTS  1
#define OQ_CHAOS_DEFAULT_BURSTS       3
#define OQ_CHAOS_DEFAULT_BURST_FRAMES 50 /* malformed frames per socket per burst */
#define OQ_CHAOS_MAX_FAULTS           100000
#define OQ_CHAOS_MAX_BURST_FRAMES     100000
/* Faults fall between these shares of the dispatches (percent): not
   before the pool is warm, and not so late that nothing is left to hit. */
#define OQ_CHAOS_FAULTS_FROM_PCT 5
#define OQ_CHAOS_FAULTS_TO_PCT   90
/* A stopped worker stays stopped this much longer than retry_after. */
#define OQ_CHAOS_PAUSE_BEYOND_MS 2000
/* A killed broker stays down this long before it is started again. */
#define OQ_CHAOS_BROKER_DOWN_MS 500
/* Order hooks keep out of the dispatches of this long after a broker kill
   or a database restart (schedule.c says why). */
#define OQ_CHAOS_HOOK_SHADOW_MS 8000

/* ---- the shipments (the carrier, onceq-carrier) ---- */
#define OQ_CHAOS_DEFAULT_SHIP_TYPE  "request_shipment"
#define OQ_CHAOS_DEFAULT_SHIP_QUEUE "chaos-shipments"
/* The carrier's faults all through the run, as in the demo: this share of
   POST /shipments answered 503, and this share processed with the reply
   dropped (outcome unknown to the handler). */
#define OQ_CHAOS_DEFAULT_CARRIER_ERROR_RATE 0.05
#define OQ_CHAOS_DEFAULT_CARRIER_DROP_RATE  0.05
#define OQ_CHAOS_DEFAULT_CARRIER_STALLS     1    /* SIGSTOP the carrier, then SIGCONT */
#define OQ_CHAOS_DEFAULT_CARRIER_ERRORS     1    /* every POST answered 503 for a while */
#define OQ_CHAOS_DEFAULT_CARRIER_DELAYS     1    /* every reply later than the handler waits */
#define OQ_CHAOS_DEFAULT_CARRIER_FAULT_MS   3000 /* how long a stall or burst lasts */
/* A delay burst holds every reply this much longer than the job's timeout,
   so that each call of the burst ends in "no answer in time" after the
   request went out: the outcome-unknown case, retried under the same key. */
#define OQ_CHAOS_CARRIER_DELAY_BEYOND_MS 500
#define OQ_CHAOS_CARRIER_UP_MS           10000    /* the carrier must print its port by then */
#define OQ_CHAOS_CARRIER_CALL_MS         5000     /* one request to the carrier's API */
#define OQ_CHAOS_MAX_SHIPMENTS           10000000 /* the carrier's own bound */

/* ---- the long run (--long) ---- */
#define OQ_CHAOS_LONG_JOBS           100000
#define OQ_CHAOS_LONG_RATE           200
#define OQ_CHAOS_LONG_KILLS          200
#define OQ_CHAOS_LONG_COMMIT_KILLS   60
#define OQ_CHAOS_LONG_SELF_KILLS     40
#define OQ_CHAOS_LONG_PAUSES         20
#define OQ_CHAOS_LONG_BROKER_KILLS   10
#define OQ_CHAOS_LONG_DB_RESTARTS    10
#define OQ_CHAOS_LONG_BURSTS         50
#define OQ_CHAOS_LONG_CARRIER_FAULTS 10 /* of each carrier kind */

/* ---- the dispatcher ---- */
#define OQ_CHAOS_WINDOW          64    /* dispatches awaiting their answer at most */
#define OQ_CHAOS_RESEND_MS       2000  /* no answer by then: the same request again */
#define OQ_CHAOS_UNAVAILABLE_MS  200   /* after "unavailable" or "full": try again this soon */
#define OQ_CHAOS_GIVE_UP_MS      30000 /* no answer by then: the dispatch is unconfirmed */
#define OQ_CHAOS_DISPATCH_ID_LEN 48

/* ---- waits and polls ---- */
#define OQ_CHAOS_LOOP_MS          20     /* longest sleep of the main loop */
#define OQ_CHAOS_STATS_EVERY_MS   250    /* broker stats while the run goes on */
#define OQ_CHAOS_CALL_MS          2000   /* one stats, failed or ping request */
#define OQ_CHAOS_PING_MS          100    /* one ping while waiting for a broker to come up */
#define OQ_CHAOS_VICTIM_WAIT_MS   15000  /* look this long for a worker holding a job */
#define OQ_CHAOS_VICTIM_POLL_MS   50     /* and at most this often */
#define OQ_CHAOS_BROKER_UP_MS     30000  /* a (re)started broker must answer by then */
#define OQ_CHAOS_WORKERS_UP_MS    30000  /* the pool must have registered by then */
#define OQ_CHAOS_DB_RESTART_MS    120000 /* pg.sh restart must be done by then */
#define OQ_CHAOS_DEFAULT_SETTLE_S 120    /* after the last dispatch and fault */
#define OQ_CHAOS_STOP_MS          15000  /* a process asked to stop gets this long */
#define OQ_CHAOS_SETUP_CMD_MS     180000 /* pg.sh start, stop */

/* ---- bounds of what the harness keeps ---- */
#define OQ_CHAOS_MAX_WORKERS     1024               /* workers read from one stats reply */
#define OQ_CHAOS_MAX_WORKER_ARGS 32                 /* --worker-arg given at most */
#define OQ_CHAOS_MAX_VIOLATIONS  20                 /* violations printed; all are counted */
#define OQ_CHAOS_MAX_LOG_LINE    4096               /* longer worker log lines are skipped */
#define OQ_CHAOS_LOG_CHUNK_BYTES (1024 * 1024)      /* read per poll of the worker log */
#define OQ_CHAOS_MAX_LOG_RECORDS (50 * 1000 * 1000) /* runs or completions kept */
#define OQ_CHAOS_SCHEDULE_SHOWN  8 /* positions printed per kind; all in schedule.txt */

#endif
