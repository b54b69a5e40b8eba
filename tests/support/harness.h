/*  harness.h: what every integration test needs. A fresh temp dir per test,
    the real binaries started as child processes with their output in that
    dir, loopback endpoints on ports the kernel picks, a raw DEALER that
    speaks the wire protocol, and waits with generous deadlines that poll
    for a condition instead of sleeping for a guessed time. Every process a
    test starts is killed and reaped in teardown and at exit, also when an
    assertion fails.

    CURVE by default, as in production: each fixture makes a broker pair and
    a producer, a worker and an admin key in DIR/keys (DIR/keys/producers,
    workers, admins hold the public keys; the secret files are in
    DIR/client-keys), starts the broker with --keys and every worker with
    --key and --broker-key, and exports ONCEQ_KEYS, ONCEQ_KEY (the admin's:
    the onceq tool a test runs may do anything), ONCEQ_WORKER_KEY and
    ONCEQ_BROKER_KEY for the processes a test spawns itself. The fixture's
    own DEALER (client) speaks as the admin; it_socket as the admin on the
    front and as the worker on the back. it_insecure opts out. */
#ifndef ONCEQ_HARNESS_H
#define ONCEQ_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "onceq/keys.h"
#include "onceq/proto.h"
#include "stats_reader.h"

#define IT_MAX_PROCS   32
#define IT_MAX_WORKERS 64
#define IT_WAIT_MS     30000          /* generous bound for anything a test waits on */
#define IT_WORKER      "onceq-worker" /* what it_start_worker starts by default */

/* Who a raw socket speaks as (it_socket_as). */
typedef enum {
    IT_ROLE_PRODUCER,         /* a key in DIR/keys/producers */
    IT_ROLE_WORKER,           /* a key in DIR/keys/workers */
    IT_ROLE_ADMIN,            /* a key in DIR/keys/admins */
    IT_ROLE_STRANGER,         /* a valid pair the broker was never told of */
    IT_ROLES,                 /* the keys above; IT_ROLE_PLAIN has none */
    IT_ROLE_PLAIN = IT_ROLES, /* no CURVE at all */
} it_role_t;

typedef struct {
    char dir[256];  /* this test's temp dir */
    char front[64]; /* tcp://127.0.0.1:PORT */
    char back[64];
    pid_t broker;
    void *zctx;
    void *client;      /* DEALER to front */
    void *sockets[16]; /* more sockets a test opened, closed in it_destroy */
    size_t socket_count;
    uint64_t next_req;
    char pg_dir[300]; /* the test's own PostgreSQL cluster, if started */
    char db_url[512];
    char pg_opts[256]; /* its extra server options (it_start_pg_with) */
    int pg_port;
    void *db;               /* PGconn of the test itself */
    const char *stats_type; /* job type whose counters it_stats reads, or NULL */
    const char *worker_bin; /* the binary it_start_worker starts (IT_WORKER) */
    unsigned data_gen;      /* it_start_broker's data dir: DIR/data, then DIR/data-N */
    bool insecure;          /* it_insecure: plaintext everywhere */
    char keys_dir[300];     /* DIR/keys: the broker's --keys */
    char broker_key[340];   /* DIR/keys/broker.key */
    oq_keypair_t broker_pair;
    oq_keypair_t pairs[IT_ROLES];
    char secret_files[IT_ROLES][340]; /* DIR/client-keys/ROLE.key_secret */
} it_t;

typedef struct {
    uint64_t ready, delayed, leased, failed, dispatched, done, retried, redelivered, late_acks,
        ignored_acks, duplicates;
    uint64_t review;  /* jobs in the review store */
    uint64_t waiting; /* ready, but another job holds their overlap key */
    uint64_t unknown_acks;
    uint64_t returned;            /* deliveries handed back unrun, no try used */
    uint64_t workers_unavailable; /* connected workers paused (status unavailable) */
    uint64_t type_done, type_applied, type_duplicates, type_failed; /* of it->stats_type */
    size_t workers;
    oq_statsr_worker_t worker[IT_MAX_WORKERS]; /* the first page */
} it_stats_t;

/* A new fixture: temp dir, two free loopback ports, a ZeroMQ context. */
it_t *it_new(const char *name);

/* Kill (SIGKILL) and reap every process still running, close sockets,
   remove the temp dir unless ONCEQ_KEEP_TEST_DIR is set; NULL *self_p. */
void it_destroy(it_t **self_p);

/* A cmocka teardown: it_destroy of the fixture in *state (one a setup
   made with it_new). Returns 0. */
int it_teardown(void **state);

/* it_new with a PostgreSQL cluster of its own started (it_start_pg), for
   a group of tests that share both; NULL, with nothing left running, if
   either failed. */
it_t *it_new_pg(const char *name);

/* A cmocka teardown for a test of a group that shares the fixture in
   *state: it_kill_all, so that the next test starts no process behind.
   Returns 0. */
int it_kill_teardown(void **state);

/* A socket of the given type connected to endpoint, linger 0, closed by
   it_destroy (so a failed assertion cannot leave the context hanging).
   With CURVE it speaks as the admin on the front, the worker on the back. */
void *it_socket(it_t *self, int type, const char *endpoint);

/* The same as the given role (IT_ROLE_PLAIN: no CURVE, whatever the fixture). */
void *it_socket_as(it_t *self, it_role_t role, int type, const char *endpoint);

/* Send buf's bytes as one message on a raw socket (asserting it went) and
   clear buf for the next. */
void it_send(void *sock, msgpack_sbuffer *buf);

/* The next message of the given command on a raw socket within
   timeout_ms: 0 with *msg (release it), -1 if none came. Other commands
   are skipped. */
int it_expect(void *sock, oq_cmd_t cmd, oq_msg_t *msg, int timeout_ms);

/* The next message of any command on a raw socket within timeout_ms,
   decoded: 0 with *msg (release it); -1 if none came, or fail the test if
   it does not decode. */
int it_recv(void *sock, oq_msg_t *msg, int timeout_ms);

/* A raw worker: a DEALER on the back socket as role, registered with
   "ready" (credit, name), returned once the broker's welcome came (fails
   the test if none came within IT_WAIT_MS). Closed by it_destroy. */
void *it_worker_socket(it_t *self, it_role_t role, uint32_t credit, const char *name);

/* Encode an ack and send it on a raw worker socket (asserting it went). */
void it_send_ack(void *sock, const oq_ack_msg_t *ack);

/* Close a socket of it_socket or it_socket_as before it_destroy would. */
void it_close_socket(it_t *self, void *sock);

/* Plaintext for this fixture: call before starting anything. The broker
   gets --insecure, nothing gets keys, and the ONCEQ_*KEY* variables are
   unset. */
void it_insecure(it_t *self);

/* The secret key file of a role (IT_ROLE_PRODUCER ... IT_ROLE_STRANGER), and the
   public key file a broker allows it by (DIR/keys/ROLES/ROLE.key; for
   IT_ROLE_STRANGER the path it would have in producers/). Static buffer. */
const char *it_key_file(const it_t *self, it_role_t role);
const char *it_allowed_key_file(const it_t *self, it_role_t role);

/* Path of a binary from the build: in ONCEQ_BIN_DIR if set, else next to
   the running test (build/bin). */
const char *it_bin(const char *name);

/* Make it_start_worker start this binary (a name in the build's bin
   directory), e.g. "onceq-test-worker", the worker with test-only
   handlers; the default is IT_WORKER. */
void it_use_worker(it_t *self, const char *name);

/* Start argv[0] (a name from it_bin) with its output in DIR/log.log.
   Returns the pid; the process is tracked for cleanup. */
pid_t it_spawn(it_t *self, const char *log, const char *const argv[]);

/* Start the broker with extra flags (NULL-terminated) and wait until it
   answers a ping. */
pid_t it_start_broker(it_t *self, const char *const extra[]);

/* Brokers started from now on use a new, empty data dir: a later test of a
   program that shares one fixture must not replay an earlier test's journal
   (a job whose done record a SIGKILL cut off would run again in it). */
void it_fresh_data_dir(it_t *self);

/* Start the worker (`onceq-worker`, or it_use_worker's) with extra flags
   against the broker's back socket. */
pid_t it_start_worker(it_t *self, const char *log, const char *const extra[]);

/* it_start_worker, then wait (IT_WAIT_MS at most) until the broker counts
   workers connected workers: the pid, or -1 if it did not start or the
   count was not reached. */
pid_t it_start_worker_counted(it_t *self, const char *log, const char *const extra[],
                              uint64_t workers);

/* Send a signal to a tracked pid. */
void it_signal(pid_t pid, int sig);

/* Wait up to timeout_ms for pid to exit; returns its wait status, or -1. */
int it_wait_exit(pid_t pid, int timeout_ms);

/* Send an encoded message on the front DEALER and wait for the reply with
   the same req. Returns 0 with *reply (release it), -1 on timeout. */
int it_call(it_t *self, msgpack_sbuffer *request, int64_t req, oq_msg_t *reply, int timeout_ms);

/* Next request id. */
int64_t it_req(it_t *self);

/* Dispatch a job; returns its id (asserts success). payload is JSON-free:
   a msgpack map built by the caller, or NULL for {}. */
uint64_t it_dispatch(it_t *self, const char *type, const msgpack_sbuffer *payload,
                     const oq_job_msg_t *options);

/* Build a payload map with one unsigned field. */
void it_payload_uint(msgpack_sbuffer *buf, const char *key, uint64_t value);

/* Dispatch one "noop" job whose payload pads it to about pad_bytes
   (oq_payload_pad) and wait up to timeout_ms for the reply: its command
   (DISPATCHED, or ERROR with the code in *code). Fails the test if no
   reply came. */
oq_cmd_t it_dispatch_padded(it_t *self, size_t pad_bytes, int timeout_ms, oq_err_t *code);

/* Fill the broker's disk: it_dispatch_padded until a dispatch is refused.
   Fails the test unless the refusal came before max_jobs were accepted
   and says "unavailable" (the disk reserve). Returns the jobs accepted. */
uint64_t it_fill_disk(it_t *self, size_t pad_bytes, uint64_t max_jobs, int timeout_ms);

/* The broker's whole stats reply (docs/protocol.md §5), asked on the
   fixture's admin socket: 0 with *reply (release it), or -1 if no stats
   reply came within timeout_ms (nothing to release). */
int it_stats_reply(it_t *self, oq_msg_t *reply, int timeout_ms);

/* Count one page of a stats reply's workers (docs/protocol.md, "limit",
   "after", "workers_next") into *listed and *pages, and move *after to the
   next page's cursor: true if there is a next page. Fails the test unless
   the reply is a stats reply with a non-empty list of workers, the cursor
   grows, and *pages stays within max_pages. The caller releases reply. */
bool it_stats_page(const oq_msg_t *reply, size_t *listed, size_t *pages, uint64_t *after,
                   size_t max_pages);

/* One counter of the stats reply's map section ("broker", "journal"),
   e.g. it_stat(it, "journal", "dedupe_hits"); fails the test if no stats
   reply came within IT_WAIT_MS or the counter is missing. */
uint64_t it_stat(it_t *self, const char *section, const char *key);

/* it_stat of the "broker" map (e.g. "fenced_acks"). */
uint64_t it_broker_stat(it_t *self, const char *key);

/* Cancel job id as an admin (docs/protocol.md, "cancel"); fail the test
   unless the broker answers that it is cancelled. */
void it_cancel(it_t *self, uint64_t id);

/* Read the stats of queue "default" and the workers. 0, or -1. */
int it_stats(it_t *self, it_stats_t *stats);

/* Poll stats every 20 ms until cond(stats, arg) holds or timeout_ms passes.
   Returns the elapsed ms, or -1 on timeout (stats holds the last reading). */
typedef bool (*it_cond_fn)(const it_stats_t *stats, const void *arg);
int64_t it_wait_stats(it_t *self, it_cond_fn cond, const void *arg, int timeout_ms,
                      it_stats_t *stats);

/* Conditions for it_wait_stats on one counter; arg points to a uint64_t n.
   _is holds when the counter equals n, _at_least when it has reached n. */
bool it_done_is(const it_stats_t *stats, const void *arg);
bool it_done_at_least(const it_stats_t *stats, const void *arg);
bool it_ready_is(const it_stats_t *stats, const void *arg);
bool it_leased_is(const it_stats_t *stats, const void *arg);
bool it_workers_are(const it_stats_t *stats, const void *arg);      /* connected workers == n */
bool it_workers_at_least(const it_stats_t *stats, const void *arg); /* connected workers >= n */

/* Read a whole log file from the test dir into a malloc'd string. */
char *it_read_log(it_t *self, const char *log);

/* Run `onceq --broker FRONT ARGS...` (ARGS NULL-terminated, at most
   IT_CLI_MAX_ARGS) with its output in a fresh DIR/<log>.log; fail the test
   unless it exits with want_exit. Returns its output, stdout and stderr
   (free it). */
#define IT_CLI_MAX_ARGS 28
char *it_cli(it_t *self, const char *log, int want_exit, ...);

/* Fail the test unless out contains needle; free out either way. */
void it_expect_output(char *out, const char *needle);

/* Start a PostgreSQL cluster of this fixture's own (deploy/pg.sh, on a free
   loopback port, in DIR/pg), create the database and apply the migrations;
   set ONCEQ_DATABASE_URL for the processes started afterwards. 0 or -1.
   It is stopped by it_destroy. */
int it_start_pg(it_t *self);

/* The same with extra server options, e.g. "-c max_connections=8". */
int it_start_pg_with(it_t *self, const char *server_opts);

/* Stop the fixture's cluster (pg_ctl stop -m fast: sessions are ended),
   for a test of an outage. 0 or -1. */
int it_stop_pg(it_t *self);

/* Start it again after it_stop_pg, on the same port with the same options,
   and reconnect the test's own connection. 0 or -1. */
int it_restart_pg(it_t *self);

/* Freeze the fixture's cluster as a hung server would be: SIGSTOP to the
   postmaster (its pid from DIR/pg/data/postmaster.pid) and then to each of
   its children (/proc/PID/task/PID/children), so none answers and none is
   forked meanwhile. The number of processes stopped, or -1. The test's own
   connection must not be used until it_thaw_pg. */
int it_freeze_pg(it_t *self);

/* SIGCONT to every process it_freeze_pg stopped. it_destroy, and the
   at-exit sweep, do it too, so that a failed test leaves no frozen server
   behind. */
void it_thaw_pg(it_t *self);

/* Run SQL on the fixture's database; asserts success. */
void it_sql(it_t *self, const char *sql);

/* Run a query returning one integer (NULL reads as 0); asserts success. */
int64_t it_sql_int(it_t *self, const char *sql);

/* Kill every process this fixture started (not the database). */
void it_kill_all(it_t *self);

/* The resident set (VmRSS) of process pid in KiB; fails the test if it
   cannot be read. */
long it_rss_kib(pid_t pid);

/* The port the broker's log says it serves metrics on (a broker started
   with --metrics HOST:0); fails the test if the log does not say it within
   IT_WAIT_MS. */
unsigned it_metrics_port(it_t *self);

/* Count a worker log's "job ID ... outcome=ok" lines per id: counts[i]
   for id first_id + i, i < n; other ids are passed over. */
void it_count_ok_lines(const char *log, uint64_t first_id, uint32_t *counts, size_t n);

/* Count occurrences of needle in a log. */
size_t it_log_count(it_t *self, const char *log, const char *needle);

/* Wait up to timeout_ms until needle occurs at least count times in a log.
   0, or -1 on timeout. */
int it_wait_log(it_t *self, const char *log, const char *needle, size_t count, int timeout_ms);

/* Monotonic ms. */
int64_t it_now_ms(void);

#endif
