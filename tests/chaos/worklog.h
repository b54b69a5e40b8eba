/*  worklog.h: what the worker pool wrote to its log, read as it grows. The
    workers' test hooks (docs/points.md) name the job, the order and the
    process in their lines, and every worker logs one line per finished job;
    from these the harness learns when a process sits between COMMIT and ack
    (to kill it there), which job a killed process held, and when each job
    completed. Times are the lines' own UTC stamps in Unix milliseconds,
    comparable with oq_worklog_now_ms. */
#ifndef ONCEQ_CHAOS_WORKLOG_H
#define ONCEQ_CHAOS_WORKLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Lines the harness acts on at once. */
typedef enum {
    OQ_WORKLOG_PAUSED_AFTER_COMMIT, /* "test hook: pausing after commit ..." */
    OQ_WORKLOG_SELF_KILLED,         /* "test hook: SIGKILL after commit ..." */
} oq_worklog_kind_t;

typedef struct {
    oq_worklog_kind_t kind;
    int64_t t_ms;
    uint64_t job_id;
    int64_t order_id;
    pid_t pid;
} oq_worklog_event_t;

typedef void (*oq_worklog_fn)(void *ctx, const oq_worklog_event_t *event);

typedef struct oq_worklog oq_worklog_t;

/* A reader of the log at path (copied); the file may not exist yet. */
oq_worklog_t *oq_worklog_new(const char *path);

/* Close, free, and set *self_p to NULL. */
void oq_worklog_destroy(oq_worklog_t **self_p);

/* Read what was appended since the last call (at most a chunk), record
   runs and completions, and call fn for each event line. The bytes read
   (0: nothing new), or -1 if the file cannot be read. */
int oq_worklog_poll(oq_worklog_t *self, oq_worklog_fn fn, void *ctx);

/* Sort what was recorded for the queries below; call after the last poll. */
void oq_worklog_finish(oq_worklog_t *self);

/* The job pid was running at t_ms: the last one it started before t_ms
   that no worker reported done between its start and t_ms. 0 with *job_id,
   or -1 if it held none we know of. Needs oq_worklog_finish. */
int oq_worklog_held_job(const oq_worklog_t *self, pid_t pid, int64_t t_ms, uint64_t *job_id);

/* When job_id was first reported ok at or after t_ms. 0 with *done_ms, or
   -1 if never. Needs oq_worklog_finish. */
int oq_worklog_done_after(const oq_worklog_t *self, uint64_t job_id, int64_t t_ms,
                          int64_t *done_ms);

/* Handler runs started (deliveries that reached the handler). */
size_t oq_worklog_runs(const oq_worklog_t *self);

/* Runs that found the grant already on record (duplicates absorbed). */
size_t oq_worklog_already(const oq_worklog_t *self);

/* Lines of the log's own kinds seen: handler runs that ended in retry. */
size_t oq_worklog_retries(const oq_worklog_t *self);

/* A worker process's end, as its supervisor logged it. */
typedef struct {
    pid_t pid;
    int status; /* its exit status, or -signal if a signal ended it */
} oq_worklog_death_t;

/* The worker processes that ended, in log order. Borrowed; *deaths is
   valid until the next poll. */
size_t oq_worklog_deaths(const oq_worklog_t *self, const oq_worklog_death_t **deaths);

/* Unix time now in ms, on the clock the log stamps use. */
int64_t oq_worklog_now_ms(void);

#endif
