/*  worklog.c: the log is read in chunks from a kept offset; a line counts
    once it ends in a newline (a worker writes each line with one write on
    an O_APPEND file, so lines of different processes never mix). The lines
    it knows, after "<stamp> onceq-test-worker <level>: ":

      test hook: pid P runs job J attempt A (order O)
      test hook: pausing after commit for MS ms (job J, order O, pid P)
      test hook: SIGKILL after commit (job J, order O, pid P)
      job J type=T attempt=A outcome=X ms=N
      job J: order O was already granted; nothing changed

    Runs and completions are kept in arrays (bounded) and sorted once at the
    end; the queries run per kill, a few hundred at most. */
#include "worklog.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "chaos_limits.h"

#define S_STAMP_LEN 24 /* 2024-06-01T12:00:00.000Z */
#define S_TYPE_LEN  64
#define S_WORD_LEN  16

typedef struct {
    int64_t t_ms;
    uint64_t job_id;
    pid_t pid;
} s_run_t;

typedef struct {
    uint64_t job_id;
    int64_t t_ms;
} s_done_t;

struct oq_worklog {
    char *path;    /* the log, owned */
    int fd;        /* -1 until the file exists */
    char *buf;     /* a chunk, plus the unfinished line of the last one */
    size_t used;   /* bytes in buf */
    s_run_t *runs; /* in log order until finish, then by (pid, t) */
    size_t run_count, run_cap;
    s_done_t *done; /* ok completions; by (job, t) after finish */
    size_t done_count, done_cap;
    oq_worklog_death_t *deaths; /* the supervisor's lines on ended workers */
    size_t death_count, death_cap;
    size_t already; /* "was already granted" lines */
    size_t retries; /* outcome=retry lines */
};

int64_t oq_worklog_now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

oq_worklog_t *oq_worklog_new(const char *path)
{
    assert(path);
    oq_worklog_t *self = calloc(1, sizeof *self);
    assert(self);
    self->path = strdup(path);
    self->buf = malloc(OQ_CHAOS_LOG_CHUNK_BYTES + OQ_CHAOS_MAX_LOG_LINE);
    assert(self->path && self->buf);
    self->fd = -1;
    return self;
}

void oq_worklog_destroy(oq_worklog_t **self_p)
{
    assert(self_p);
    oq_worklog_t *self = *self_p;
    if (!self)
        return;
    if (self->fd >= 0)
        close(self->fd);
    free(self->path);
    free(self->buf);
    free(self->runs);
    free(self->done);
    free(self->deaths);
    free(self);
    *self_p = NULL;
}

/* Grow an array by half (at least 1024), within OQ_CHAOS_MAX_LOG_RECORDS.
   0, or -1 at the bound: the record is dropped and the figures that use it
   are lower bounds, which the table says. */
static int s_grow(void **items, size_t *cap, size_t count, size_t size)
{
    if (count < *cap)
        return 0;
    if (*cap >= OQ_CHAOS_MAX_LOG_RECORDS)
        return -1;
    size_t next = *cap ? *cap + *cap / 2 : 1024;
    void *grown = realloc(*items, next * size);
    if (!grown)
        return -1;
    *items = grown;
    *cap = next;
    return 0;
}

/* "2024-06-01T12:00:00.123Z" to Unix ms; -1 if it is not one. */
static int64_t s_stamp_ms(const char *line)
{
    struct tm tm = {0};
    int ms;
    if (sscanf(line, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000 + ms;
}

/* The supervisor's "worker pid=P exited with status N ..." or "... was
   killed by signal N ...": true with the pid and the status (-N for a
   signal). */
static bool s_death(const char *text, int *pid, int *status)
{
    if (sscanf(text, "worker pid=%d exited with status %d", pid, status) == 2)
        return true;
    int signo;
    if (sscanf(text, "worker pid=%d was killed by signal %d", pid, &signo) == 2) {
        *status = -signo;
        return true;
    }
    return false;
}

/* "job J: order O was already granted...": the whole phrase, since sscanf
   counts the conversions made and would take any "job J: order O ..." line
   (the shipment handler's among them) for one. */
static bool s_already_granted(const char *text)
{
    uint64_t job;
    int64_t order;
    int end = 0;
    return sscanf(text, "job %" SCNu64 ": order %" SCNd64 " was already granted%n", &job, &order,
                  &end) == 2 &&
           end > 0;
}

static void s_line(oq_worklog_t *self, const char *line, oq_worklog_fn fn, void *ctx)
{
    int64_t t_ms = s_stamp_ms(line);
    const char *text = strstr(line, ": ");
    if (t_ms < 0 || !text)
        return;
    text += 2;
    uint64_t job;
    int64_t order;
    int pid;
    unsigned attempt;
    int status;
    uint64_t ms;
    char type[S_TYPE_LEN], outcome[S_WORD_LEN];
    if (sscanf(text, "test hook: pid %d runs job %" SCNu64 " attempt %u (order %" SCNd64 ")", &pid,
               &job, &attempt, &order) == 4) {
        if (s_grow((void **)&self->runs, &self->run_cap, self->run_count, sizeof *self->runs) == 0)
            self->runs[self->run_count++] = (s_run_t){t_ms, job, (pid_t)pid};
    } else if (sscanf(text, "job %" SCNu64 " type=%63s attempt=%u outcome=%15s", &job, type,
                      &attempt, outcome) == 4) {
        if (strcmp(outcome, "ok") == 0) {
            if (s_grow((void **)&self->done, &self->done_cap, self->done_count,
                       sizeof *self->done) == 0)
                self->done[self->done_count++] = (s_done_t){job, t_ms};
        } else if (strcmp(outcome, "retry") == 0) {
            self->retries++;
        }
    } else if (s_already_granted(text)) {
        self->already++;
    } else if (s_death(text, &pid, &status)) {
        if (s_grow((void **)&self->deaths, &self->death_cap, self->death_count,
                   sizeof *self->deaths) == 0)
            self->deaths[self->death_count++] = (oq_worklog_death_t){(pid_t)pid, status};
    } else if (sscanf(text,
                      "test hook: pausing after commit for %" SCNu64 " ms (job %" SCNu64
                      ", order %" SCNd64 ", pid %d)",
                      &ms, &job, &order, &pid) == 4) {
        oq_worklog_event_t ev = {OQ_WORKLOG_PAUSED_AFTER_COMMIT, t_ms, job, order, (pid_t)pid};
        if (fn)
            fn(ctx, &ev);
    } else if (sscanf(text,
                      "test hook: SIGKILL after commit (job %" SCNu64 ", order %" SCNd64
                      ", pid %d)",
                      &job, &order, &pid) == 3) {
        oq_worklog_event_t ev = {OQ_WORKLOG_SELF_KILLED, t_ms, job, order, (pid_t)pid};
        if (fn)
            fn(ctx, &ev);
    }
}

int oq_worklog_poll(oq_worklog_t *self, oq_worklog_fn fn, void *ctx)
{
    if (self->fd < 0) {
        self->fd = open(self->path, O_RDONLY | O_CLOEXEC);
        if (self->fd < 0)
            return errno == ENOENT ? 0 : -1;
    }
    ssize_t got = read(self->fd, self->buf + self->used, OQ_CHAOS_LOG_CHUNK_BYTES);
    if (got <= 0)
        return got == 0 || errno == EINTR ? 0 : -1;
    self->used += (size_t)got;
    size_t start = 0;
    for (size_t i = 0; i < self->used; i++) {
        if (self->buf[i] != '\n')
            continue;
        self->buf[i] = 0;
        if (i - start < OQ_CHAOS_MAX_LOG_LINE)
            s_line(self, self->buf + start, fn, ctx);
        start = i + 1;
    }
    /* Keep the unfinished line; one longer than any we read is dropped. */
    size_t rest = self->used - start;
    if (rest >= OQ_CHAOS_MAX_LOG_LINE)
        rest = 0;
    memmove(self->buf, self->buf + self->used - rest, rest);
    self->used = rest;
    return (int)got;
}

static int s_run_order(const void *a, const void *b)
{
    const s_run_t *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->t_ms < y->t_ms ? -1 : x->t_ms > y->t_ms;
}

static int s_done_order(const void *a, const void *b)
{
    const s_done_t *x = a, *y = b;
    if (x->job_id != y->job_id)
        return x->job_id < y->job_id ? -1 : 1;
    return x->t_ms < y->t_ms ? -1 : x->t_ms > y->t_ms;
}

void oq_worklog_finish(oq_worklog_t *self)
{
    if (self->runs)
        qsort(self->runs, self->run_count, sizeof *self->runs, s_run_order);
    if (self->done)
        qsort(self->done, self->done_count, sizeof *self->done, s_done_order);
}

int oq_worklog_done_after(const oq_worklog_t *self, uint64_t job_id, int64_t t_ms, int64_t *done_ms)
{
    /* The first completion of job_id, then forward to the first at or
       after t_ms (a job completes once, rarely more: a late ack). */
    size_t lo = 0, hi = self->done_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (self->done[mid].job_id < job_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < self->done_count && self->done[i].job_id == job_id; i++) {
        if (self->done[i].t_ms >= t_ms) {
            *done_ms = self->done[i].t_ms;
            return 0;
        }
    }
    return -1;
}

int oq_worklog_held_job(const oq_worklog_t *self, pid_t pid, int64_t t_ms, uint64_t *job_id)
{
    /* The last run of pid that started at or before t_ms. */
    size_t lo = 0, hi = self->run_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const s_run_t *r = &self->runs[mid];
        if (r->pid < pid || (r->pid == pid && r->t_ms <= t_ms))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || self->runs[lo - 1].pid != pid)
        return -1;
    const s_run_t *run = &self->runs[lo - 1];
    /* Done before the kill: the process was between jobs (or had taken one
       it had not started), so the kill held nothing we know of. */
    int64_t done_ms;
    if (oq_worklog_done_after(self, run->job_id, run->t_ms, &done_ms) == 0 && done_ms < t_ms)
        return -1;
    *job_id = run->job_id;
    return 0;
}

size_t oq_worklog_deaths(const oq_worklog_t *self, const oq_worklog_death_t **deaths)
{
    *deaths = self->deaths;
    return self->death_count;
}

size_t oq_worklog_runs(const oq_worklog_t *self)
{
    return self->run_count;
}

size_t oq_worklog_already(const oq_worklog_t *self)
{
    return self->already;
}

size_t oq_worklog_retries(const oq_worklog_t *self)
{
    return self->retries;
}
