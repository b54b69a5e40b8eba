/*  keeper.c: the keeper thread and the loop's ownership.

    The main thread numbers each stretch of handler code (running: its
    number, 0 outside). The keeper wakes every patience ms and compares
    running with what it saw on its last wake: the same non-zero number
    means one handler has run at least patience ms, so it takes the loop.
    No job, short or long, makes the main thread wake the keeper or wait
    for it; a long one only costs the keeper its lock and one write to
    the wake fd.

    The hand-back is a Dekker pair on two seq_cst atomics: the keeper
    stores owned and then reads running; the main thread stores running = 0
    and then reads owned. At least one of them sees the other's store, so
    either the keeper sees the handler ended and gives the loop back at
    once, or the main thread sees the keeper holds the loop and wakes it.
    A wake that comes after the keeper already gave up is only a spare
    token in the eventfd, which makes one later turn return early.

    An idle worker would still wake the keeper every patience ms; after
    OQ_WORKER_KEEPER_IDLE_MS without a handler starting it sleeps until one
    does (deep), which the main thread sees as it enters handler code and
    signals: one wake-up after an idle spell, none while jobs keep coming.
    The same Dekker pair (deep against entered) keeps that signal from
    being lost. */
#include "keeper.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "onceq/clock.h"
#include "onceq/log.h"
#include "worker_limits.h"

struct oq_keeper {
    oq_keeper_turn_fn turn; /* one turn of the worker's loop */
    void *arg;              /* for turn */
    int wake_fd;            /* eventfd: the handler returned, or a touch waits */
    pthread_t thread;       /* runs s_run */
    pthread_mutex_t loop;   /* held by whoever owns the session and the socket */
    /* The keeper's sleep, and what ends it for good. */
    pthread_mutex_t sleep_lock;
    pthread_cond_t sleep_cond; /* on CLOCK_MONOTONIC */
    bool stopping;             /* under sleep_lock */
    _Atomic bool deep;         /* the keeper sleeps until a handler starts */
    _Atomic uint64_t entered;  /* stretches of handler code so far (main thread writes) */
    _Atomic uint64_t running;  /* the stretch of handler code running, 0 for none */
    _Atomic bool owned;        /* the keeper holds the loop */
    _Atomic int64_t patience_ms;
    _Atomic uint64_t touch_id;     /* queued by oq_job_touch, 0 for none */
    _Atomic int64_t touch_woke_ms; /* when a touch last woke the keeper */
    _Atomic int64_t stalled_ms;    /* noticed by the keeper, not yet taken */
    _Atomic uint64_t takeovers;
};

static void s_wake(oq_keeper_t *self)
{
    uint64_t one = 1;
    /* Only a full counter fails, and a full counter wakes all the same. */
    while (write(self->wake_fd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

/* Hold the loop while the same stretch of handler code runs: take it if
   it is free, run turns until the stretch ends, give it back. */
static void s_keep(oq_keeper_t *self, uint64_t stretch, bool *finished)
{
    if (pthread_mutex_trylock(&self->loop) != 0)
        return; /* the main thread holds it: the handler has returned */
    atomic_store(&self->owned, true);
    if (atomic_load(&self->running) == stretch) {
        atomic_fetch_add(&self->takeovers, 1);
        oq_debug("a handler has run %lld ms or more: the keeper holds the link",
                 (long long)atomic_load(&self->patience_ms));
        while (atomic_load(&self->running) == stretch)
            if (self->turn(self->arg, self->wake_fd) < 0) {
                *finished = true;
                break;
            }
    }
    atomic_store(&self->owned, false);
    pthread_mutex_unlock(&self->loop);
}

static void *s_run(void *arg)
{
    oq_keeper_t *self = arg;
    uint64_t seen = 0; /* running at the last wake */
    bool finished = false;
    int64_t last_ms = oq_clock_mono_us() / 1000;
    uint64_t last_entered = 0; /* entered at the last wake */
    int64_t busy_ms = last_ms; /* when a handler last ran or started */
    pthread_mutex_lock(&self->sleep_lock);
    while (!self->stopping) {
        int64_t patience_ms = atomic_load(&self->patience_ms);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += patience_ms / 1000;
        until.tv_nsec += (patience_ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        while (!self->stopping &&
               pthread_cond_timedwait(&self->sleep_cond, &self->sleep_lock, &until) == 0)
            ;
        if (self->stopping)
            break;
        pthread_mutex_unlock(&self->sleep_lock);

        int64_t now_ms = oq_clock_mono_us() / 1000;
        uint64_t running = atomic_load(&self->running);
        /* Woken this much later than asked, with a handler running: the
           process did not run (SIGSTOP), which is not the handler's time.
           Also when this handler began after the last wake: jobs shorter
           than the patience are always so, and a stop that lands in one
           is still to be left out of it (else the watchdog fires as the
           handler goes on after SIGCONT). Part of the stop may have come
           before the handler began; the session never moves a deadline
           past a fresh start now, so counting it all costs nothing. */
        int64_t late_ms = now_ms - last_ms - patience_ms;
        if (running && late_ms > OQ_WORKER_STALL_MS)
            atomic_fetch_add(&self->stalled_ms, late_ms);
        if (running && running == seen && !finished) {
            s_keep(self, running, &finished);
            now_ms = oq_clock_mono_us() / 1000;
        }
        seen = running;
        last_ms = now_ms;
        uint64_t entered = atomic_load(&self->entered);
        if (running || entered != last_entered)
            busy_ms = now_ms;
        last_entered = entered;
        pthread_mutex_lock(&self->sleep_lock);
        if (now_ms - busy_ms >= OQ_WORKER_KEEPER_IDLE_MS) {
            atomic_store(&self->deep, true);
            if (atomic_load(&self->entered) == last_entered)
                while (atomic_load(&self->deep) && !self->stopping)
                    pthread_cond_wait(&self->sleep_cond, &self->sleep_lock);
            atomic_store(&self->deep, false);
            /* The handler that woke it has only begun: it is covered from
               the next wake on, like any other. */
            seen = 0;
            last_ms = busy_ms = oq_clock_mono_us() / 1000;
        }
    }
    pthread_mutex_unlock(&self->sleep_lock);
    return NULL;
}

oq_keeper_t *oq_keeper_new(oq_keeper_turn_fn turn, void *arg, int64_t patience_ms)
{
    assert(turn);
    oq_keeper_t *self = calloc(1, sizeof *self);
    assert(self);
    self->turn = turn;
    self->arg = arg;
    atomic_init(&self->patience_ms, patience_ms < 1 ? 1 : patience_ms);
    self->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->wake_fd < 0) {
        oq_error("keeper: cannot open an eventfd: %s", strerror(errno));
        free(self);
        return NULL;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->sleep_cond, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&self->sleep_lock, NULL);
    pthread_mutex_init(&self->loop, NULL);
    pthread_mutex_lock(&self->loop);
    if (pthread_create(&self->thread, NULL, s_run, self) != 0) {
        oq_error("keeper: cannot start the thread");
        pthread_mutex_unlock(&self->loop);
        pthread_mutex_destroy(&self->loop);
        pthread_mutex_destroy(&self->sleep_lock);
        pthread_cond_destroy(&self->sleep_cond);
        close(self->wake_fd);
        free(self);
        return NULL;
    }
    pthread_setname_np(self->thread, "onceq-keeper");
    return self;
}

void oq_keeper_destroy(oq_keeper_t **self_p)
{
    assert(self_p);
    oq_keeper_t *self = *self_p;
    if (!self)
        return;
    assert(atomic_load(&self->running) == 0);
    pthread_mutex_lock(&self->sleep_lock);
    self->stopping = true;
    pthread_cond_signal(&self->sleep_cond);
    pthread_mutex_unlock(&self->sleep_lock);
    pthread_join(self->thread, NULL);
    pthread_mutex_unlock(&self->loop);
    pthread_mutex_destroy(&self->loop);
    pthread_mutex_destroy(&self->sleep_lock);
    pthread_cond_destroy(&self->sleep_cond);
    close(self->wake_fd);
    free(self);
    *self_p = NULL;
}

void oq_keeper_set_patience(oq_keeper_t *self, int64_t patience_ms)
{
    assert(self);
    atomic_store_explicit(&self->patience_ms, patience_ms < 1 ? 1 : patience_ms,
                          memory_order_relaxed);
}

void oq_keeper_leave(oq_keeper_t *self)
{
    assert(self && atomic_load(&self->running) == 0);
    uint64_t stretch = atomic_load_explicit(&self->entered, memory_order_relaxed) + 1;
    atomic_store(&self->entered, stretch);
    atomic_store(&self->running, stretch);
    if (atomic_load(&self->deep)) {
        pthread_mutex_lock(&self->sleep_lock);
        atomic_store(&self->deep, false);
        pthread_cond_signal(&self->sleep_cond);
        pthread_mutex_unlock(&self->sleep_lock);
    }
    pthread_mutex_unlock(&self->loop);
}

void oq_keeper_enter(oq_keeper_t *self)
{
    assert(self && atomic_load(&self->running) != 0);
    atomic_store(&self->running, 0);
    if (atomic_load(&self->owned))
        s_wake(self);
    pthread_mutex_lock(&self->loop);
}

int oq_keeper_touch(oq_keeper_t *self, uint64_t id)
{
    assert(self);
    atomic_store(&self->touch_id, id);
    if (atomic_load(&self->owned)) {
        int64_t now_ms = oq_clock_mono_us() / 1000;
        if (now_ms - atomic_load(&self->touch_woke_ms) >= OQ_WORKER_TOUCH_MIN_MS) {
            atomic_store(&self->touch_woke_ms, now_ms);
            s_wake(self);
        }
    }
    return 0;
}

uint64_t oq_keeper_take_touch(oq_keeper_t *self)
{
    assert(self);
    return atomic_exchange(&self->touch_id, 0);
}

int64_t oq_keeper_take_stall(oq_keeper_t *self)
{
    assert(self);
    return atomic_exchange(&self->stalled_ms, 0);
}

uint64_t oq_keeper_takeovers(const oq_keeper_t *self)
{
    assert(self);
    return atomic_load(&((oq_keeper_t *)self)->takeovers);
}
