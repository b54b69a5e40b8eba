/*  supervisor.c: fork, wait, restart. The parent blocks SIGCHLD, SIGTERM and
    SIGINT and sleeps in sigtimedwait until a signal or the next restart is
    due, so there is no signal handler and no race between a child's death and
    the wait for it. Children are reaped on every wake, not only on SIGCHLD,
    because signals of one kind coalesce. */
#include "supervisor.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "onceq/clock.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "worker_limits.h"

typedef struct {
    pid_t pid;          /* 0 while not running */
    int64_t started_ms; /* when pid was started */
    int64_t restart_ms; /* not running: when to start it again */
    int64_t delay_ms;   /* the delay before its last restart, 0 before the first */
} s_child_t;

typedef struct {
    const oq_supervisor_config_t *config;
    oq_supervisor_child_fn child;
    void *arg;
    s_child_t *children; /* config->processes slots */
    sigset_t signals;    /* SIGCHLD, SIGTERM, SIGINT: blocked, waited for */
    sigset_t old_mask;   /* to restore on return */
    bool stopping;       /* SIGTERM or SIGINT seen: no more restarts */
    bool killed;         /* the stop timeout passed and SIGKILL went out */
    int64_t stop_deadline_ms;
} s_supervisor_t;

int64_t oq_supervisor_restart_delay(int64_t last_delay_ms, int64_t lived_ms)
{
    if (last_delay_ms <= 0 || lived_ms >= OQ_SUPERVISOR_STABLE_MS)
        return OQ_SUPERVISOR_RESTART_MS;
    int64_t delay_ms = last_delay_ms * 2;
    return delay_ms < OQ_SUPERVISOR_RESTART_MAX_MS ? delay_ms : OQ_SUPERVISOR_RESTART_MAX_MS;
}

static int64_t s_now(void)
{
    return oq_clock_now_ms(oq_clock_system());
}

/* In the child: leave SIGTERM and SIGINT blocked (the worker reads them from
   a signalfd, which also sees one that arrived before it was opened), and
   make the child stop gracefully if the supervisor itself dies. */
static void s_become_child(s_supervisor_t *self, pid_t parent)
{
    sigset_t mask = self->old_mask;
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigdelset(&mask, SIGCHLD);
    sigprocmask(SIG_SETMASK, &mask, NULL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) /* it died before prctl took effect */
        kill(getpid(), SIGTERM);
    exit(self->child(self->arg));
}

static void s_spawn(s_supervisor_t *self, s_child_t *child, int64_t now_ms)
{
    pid_t parent = getpid();
    fflush(NULL); /* or the child would write the parent's buffered output again */
    pid_t pid = fork();
    if (pid == 0)
        s_become_child(self, parent);
    if (pid < 0) {
        child->delay_ms = oq_supervisor_restart_delay(child->delay_ms, 0);
        child->restart_ms = now_ms + child->delay_ms;
        oq_error("cannot start a worker: fork failed: %s; trying again in %lld ms", strerror(errno),
                 (long long)child->delay_ms);
        return;
    }
    child->pid = pid;
    child->started_ms = now_ms;
    oq_info("started worker pid=%d", (int)pid);
}

static void s_describe(int status, char *out, size_t out_len)
{
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        snprintf(out, out_len, "exited with status %d%s", code,
                 code == OQ_EXIT_TIMEOUT  ? " (a handler ran past its timeout)"
                 : code == OQ_EXIT_BROKEN ? " (it could not start)"
                                          : "");
    } else if (WIFSIGNALED(status)) {
        snprintf(out, out_len, "was killed by signal %d (%s)%s", WTERMSIG(status),
                 strsignal(WTERMSIG(status)), WCOREDUMP(status) ? ", core dumped" : "");
    } else {
        snprintf(out, out_len, "ended with wait status %d", status);
    }
}

static s_child_t *s_find(s_supervisor_t *self, pid_t pid)
{
    for (uint32_t i = 0; i < self->config->processes; i++)
        if (self->children[i].pid == pid)
            return &self->children[i];
    return NULL;
}

static void s_reap(s_supervisor_t *self, int64_t now_ms)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        s_child_t *child = s_find(self, pid);
        if (!child)
            continue; /* not one of ours (inherited across exec) */
        char how[128];
        s_describe(status, how, sizeof how);
        child->pid = 0;
        if (self->stopping) {
            oq_info("worker pid=%d %s", (int)pid, how);
            continue;
        }
        child->delay_ms = oq_supervisor_restart_delay(child->delay_ms, now_ms - child->started_ms);
        child->restart_ms = now_ms + child->delay_ms;
        oq_warn("worker pid=%d %s; restarting it in %lld ms", (int)pid, how,
                (long long)child->delay_ms);
    }
}

static uint32_t s_running(const s_supervisor_t *self)
{
    uint32_t count = 0;
    for (uint32_t i = 0; i < self->config->processes; i++)
        count += self->children[i].pid != 0;
    return count;
}

static void s_signal_all(s_supervisor_t *self, int signo)
{
    for (uint32_t i = 0; i < self->config->processes; i++)
        if (self->children[i].pid)
            kill(self->children[i].pid, signo);
}

static void s_stop(s_supervisor_t *self, int signo, int64_t now_ms)
{
    if (self->stopping) {
        oq_info("received %s; already stopping", strsignal(signo));
        return;
    }
    self->stopping = true;
    self->stop_deadline_ms = now_ms + self->config->stop_timeout_ms;
    oq_info("received %s: stopping the workers (%u running; waiting up to %lld ms)",
            strsignal(signo), s_running(self), (long long)self->config->stop_timeout_ms);
    s_signal_all(self, SIGTERM);
}

/* What to do now; returns the time of the next thing to do (INT64_MAX for
   nothing but signals). */
static int64_t s_step(s_supervisor_t *self, int64_t now_ms)
{
    int64_t next_ms = INT64_MAX;
    if (self->stopping) {
        if (!self->killed && now_ms >= self->stop_deadline_ms) {
            oq_warn("workers still running after %lld ms (%u): killing them",
                    (long long)self->config->stop_timeout_ms, s_running(self));
            s_signal_all(self, SIGKILL);
            self->killed = true;
        }
        return self->killed ? INT64_MAX : self->stop_deadline_ms;
    }
    for (uint32_t i = 0; i < self->config->processes; i++) {
        s_child_t *child = &self->children[i];
        if (child->pid == 0 && now_ms >= child->restart_ms)
            s_spawn(self, child, now_ms);
        if (child->pid == 0 && child->restart_ms < next_ms)
            next_ms = child->restart_ms;
    }
    return next_ms;
}

static int s_wait(s_supervisor_t *self, int64_t wait_ms)
{
    siginfo_t info;
    if (wait_ms == INT64_MAX)
        return sigwaitinfo(&self->signals, &info);
    struct timespec timeout = {(time_t)(wait_ms / 1000), (long)(wait_ms % 1000) * 1000000L};
    return sigtimedwait(&self->signals, &info, &timeout);
}

int oq_supervisor_run(const oq_supervisor_config_t *config, oq_supervisor_child_fn child, void *arg)
{
    if (!config || !child || config->processes < 1 ||
        config->processes > OQ_SUPERVISOR_MAX_PROCESSES || config->stop_timeout_ms < 0) {
        oq_error("supervisor: processes must be 1 to %d", OQ_SUPERVISOR_MAX_PROCESSES);
        return -1;
    }
    s_supervisor_t self;
    memset(&self, 0, sizeof self);
    self.config = config;
    self.child = child;
    self.arg = arg;
    self.children = calloc(config->processes, sizeof *self.children);
    if (!self.children) {
        oq_error("supervisor: out of memory");
        return -1;
    }
    sigemptyset(&self.signals);
    sigaddset(&self.signals, SIGCHLD);
    sigaddset(&self.signals, SIGTERM);
    sigaddset(&self.signals, SIGINT);
    sigprocmask(SIG_BLOCK, &self.signals, &self.old_mask);
    oq_info("supervising %u worker processes (pid %d)", config->processes, (int)getpid());

    for (;;) {
        int64_t now_ms = s_now();
        s_reap(&self, now_ms);
        if (self.stopping && s_running(&self) == 0)
            break;
        int64_t next_ms = s_step(&self, now_ms);
        int64_t wait_ms = next_ms == INT64_MAX ? INT64_MAX : next_ms - now_ms;
        if (wait_ms < 0)
            wait_ms = 0;
        int signo = s_wait(&self, wait_ms);
        if (signo == SIGTERM || signo == SIGINT)
            s_stop(&self, signo, s_now());
    }

    oq_info("all workers stopped");
    free(self.children);
    sigprocmask(SIG_SETMASK, &self.old_mask, NULL);
    return 0;
}
