/*  engine_fixture.h: the broker's engine (broker/engine.h) on a clock the
    test moves by hand, for the unit tests of its state machine
    (test_engine, test_job_keys) and of what keeps it across a restart
    (test_journal, test_compact). No sockets and no sleeps: a lease runs out
    because the test says the time has passed. cmocka is its framework. Its
    names are short (ef_, EF_), like the integration harness's it_, because
    the tests use them on almost every line.

    Two setups share the fixture. ef_setup gives a fresh engine with short
    fixed timers and a deliver callback that records what the engine sent,
    or fails for one worker. ef_setup_journal gives a data directory in a
    fresh temp dir and a disk seam the test can make fail; ef_open then
    opens the journal there and replays it into a new engine, and calling
    it again is a restart.

    Jobs are built with EF_JOB (also where a test has an engine of its
    own, as test_metrics_text): the fields a test names, over the defaults
    every test would otherwise spell out (type "noop", queue "default", an
    empty map as payload), with the has_* flag of each optional field set
    because the test gave it. */
#ifndef ONCEQ_TEST_ENGINE_FIXTURE_H
#define ONCEQ_TEST_ENGINE_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "compact.h"
#include "engine.h"
#include "journal.h"
#include "replay.h"

/* The engine's timers in every ef_setup test. */
#define EF_RETRY_AFTER_MS 10000
#define EF_TIMEOUT_MS     4000
#define EF_MARGIN_MS      2000
#define EF_BACKOFF_MS     1000
#define EF_MAX_JOBS       100
/* The wall clock is this plus the test's monotonic now. */
#define EF_WALL_BASE_MS 1700000000000LL
/* Deliveries recorded per test at most. */
#define EF_MAX_SENT 64
/* ef_setup_journal: the monotonic clock when the test begins, and the
   journal's fsync interval. */
#define EF_JOURNAL_START_MS  1000
#define EF_FSYNC_INTERVAL_MS 50

/* What a test says of a job; every field it leaves zero takes its default,
   and an optional field given sets its has_* flag. */
typedef struct {
    uint64_t id;            /* restores only; 0 in a dispatch */
    const char *type;       /* NULL: "noop" */
    const char *queue;      /* NULL: "default" */
    const uint8_t *payload; /* NULL: an empty map (payload_len is then 1) */
    size_t payload_len;
    uint32_t max_tries;                       /* 0: the queue's */
    int64_t timeout_ms;                       /* 0: the queue's */
    int64_t delay_ms;                         /* 0: ready at once */
    int32_t priority;                         /* 0: the default band */
    int64_t backoff_ms[OQ_MAX_BACKOFF_STEPS]; /* the steps up to the first 0; none: the queue's */
    const char *dispatch_id;                  /* NULL: none */
    const char *unique_key;                   /* NULL: none */
    int64_t unique_for_ms;                    /* with unique_key; 0: while the job lives */
    const char *overlap_key;                  /* NULL: none */
} ef_job_t;

/* The dispatch message for spec; its strings and payload stay borrowed. */
oq_job_msg_t ef_job_msg(const ef_job_t *spec);

/* A job as a test names it: EF_JOB(.type = "fail", .max_tries = 3). */
#define EF_JOB(...) ef_job_msg(&(ef_job_t){__VA_ARGS__})

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

/* The disk under the journal (ef_setup_journal): real writes and fsyncs
   that fail when the test says so, counted. */
typedef struct {
    int write_errno;     /* non-zero: pwrite fails with it */
    size_t write_budget; /* with write_errno: bytes written before failing */
    int fsync_errno;     /* non-zero: fsync fails with it */
    int writes, fsyncs;  /* calls so far (fsyncs: the ones that succeeded) */
    off_t last_offset;   /* of the latest pwrite */
    uint64_t free_bytes; /* what the file system reports free (0: plenty) */
} ef_disk_t;

typedef struct {
    ef_time_t time;   /* set time.now to move the clock */
    oq_clock_t clock; /* the engine's clock, reading time */
    oq_engine_t *engine;
    ef_delivery_t sent[EF_MAX_SENT];
    size_t sent_count;
    char unreachable; /* deliveries to this worker fail */
    /* ef_setup_journal only */
    char dir[256];                      /* the data directory: a fresh temp dir, removed after */
    ef_disk_t disk;                     /* what the disk seam does */
    oq_disk_ops_t ops;                  /* the seam, over disk; a test may replace it */
    oq_fsync_t policy;                  /* ef_open's journal policy: always unless set */
    oq_engine_config_t config;          /* ef_open's engine: the defaults, backoff 1 s */
    oq_journal_t *journal;              /* after ef_open */
    oq_compact_config_t compact_config; /* non-zero min_bytes: ef_open adds a compactor */
    oq_compact_t *compact;
    uint64_t reserve_bytes; /* the disk reserve of a broker a test starts (0: its default) */
} ef_fixture_t;

/* A cmocka setup: a fresh engine at time 0; *state is the fixture. */
int ef_setup(void **state);

/* Replace the engine with one of the broker's default limits under the
   fixture's lease timers (retry_after, timeout, margin), holding max_bytes
   and max_jobs (0: the default): for the tests of the memory limits.
   f->config is then its config. */
void ef_engine_bytes(ef_fixture_t *f, uint64_t max_bytes, size_t max_jobs);

/* A cmocka teardown: destroys the engine (and what ef_open made) and
   the fixture; removes the data directory if there is one. */
int ef_teardown(void **state);

/* A cmocka setup: a data directory, the disk seam and the clock at
   EF_JOURNAL_START_MS, no engine yet (ef_open makes it); *state is the
   fixture. Its teardown is ef_teardown. */
int ef_setup_journal(void **state);

/* Open the journal in dir (repair: a damaged header is rebuilt) and replay
   it into a new engine with config, attach the journal's hooks and, if
   compact_config asks, a compactor: 0, or -1 with reason filled. Whatever
   was open is closed first, so a second call is a restart. */
int ef_open(ef_fixture_t *f, bool repair, oq_replay_report_t *report, char *reason,
            size_t reason_len);

/* ef_open without repair that fails the test if it fails; report may be
   NULL. */
void ef_open_ok(ef_fixture_t *f, oq_replay_report_t *report);

/* Close the compactor, the journal and the engine (as a stop does). */
void ef_close(ef_fixture_t *f);

/* A path inside dir. Borrowed until the next call. */
const char *ef_path(ef_fixture_t *f, const char *name);

/* An oq_engine_pump callback (ctx: the fixture): records the delivery in
   sent, or returns -1 for the unreachable worker. */
int ef_deliver(void *ctx, const oq_worker_view_t *w, const oq_job_view_t *job);

/* Dispatch job; fails the test if the engine refuses it. The new job's id
   (or, for a repeated dispatch id or unique key, the earlier job's). */
uint64_t ef_dispatch(ef_fixture_t *f, const oq_job_msg_t *job);

/* A worker named by one byte, with credit; fails the test if refused. */
oq_worker_t *ef_worker(ef_fixture_t *f, char name, uint32_t credit);

/* Lease every ready job to the worker called name (added if missing),
   delivering them nowhere: its credit becomes OQ_MAX_CREDIT. */
oq_worker_t *ef_lease_all(ef_fixture_t *f, char name);

/* The ack a worker sends for job id's attempt with the token the engine
   gave it (none if the job is gone), error "it broke"; what the engine
   made of it. */
oq_ack_effect_t ef_ack_leased(ef_fixture_t *f, oq_worker_t *w, uint64_t id, uint32_t attempt,
                              oq_outcome_t outcome);

/* Fails the test unless job id is in state ("ready", "leased", ...: as
   oq_engine_job_state names it) at attempt; state NULL: the job is gone. */
void ef_expect(ef_fixture_t *f, uint64_t id, const char *state, uint32_t attempt);

/* The token of the delivery (id, attempt), as its worker got it; 0 if
   there was no such delivery. */
uint64_t ef_lease(const ef_fixture_t *f, uint64_t id, uint32_t attempt);

#endif
