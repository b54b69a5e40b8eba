/*  builtin.c: the test handlers every onceq-worker carries. They exercise the
    paths a real handler can take (success, a slow job, a retryable or a
    permanent failure, a process dying mid-job), so that the broker, the
    supervisor and the chaos tests have something to drive without a
    database.

      noop  {}                                   ok
      sleep {ms: uint, touch_ms?: uint}          sleeps ms, then ok; touches the
                                                 lease every touch_ms meanwhile
      fail  {permanent?: bool, message?: str, release_ms?: uint}
                                                 retry (or fail if permanent; or
                                                 release: retry after release_ms)
      crash {}                                   aborts the process mid-job */
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "onceq/log.h"
#include "onceq/worker.h"

#define S_NS_PER_MS  1000000L
#define S_NS_PER_SEC 1000000000L

static void s_noop(const oq_job_t *job, void *state, oq_report_t *report)
{
    oq_report_ok(report, OQ_RESULT_NONE);
}

/* Sleep until an absolute point on the monotonic clock, so that a signal
   that interrupts the sleep does not stretch it. */
static void s_sleep_ms(uint64_t ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(ms / 1000);
    until.tv_nsec += (long)(ms % 1000) * S_NS_PER_MS;
    if (until.tv_nsec >= S_NS_PER_SEC) {
        until.tv_sec++;
        until.tv_nsec -= S_NS_PER_SEC;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
        ;
}

static void s_sleep(const oq_job_t *job, void *state, oq_report_t *report)
{
    uint64_t ms;
    /* A sleep longer than the longest job timeout could only end in the
       watchdog; refusing it says so at once. */
    if (oq_payload_uint(job, "ms", &ms) < 0 || ms > (uint64_t)OQ_MAX_TIMEOUT_MS) {
        oq_report_fail(report,
                       "sleep: payload field \"ms\" must be a whole number of milliseconds "
                       "from 0 to %lld",
                       (long long)OQ_MAX_TIMEOUT_MS);
        return;
    }
    uint64_t touch_ms = 0;
    if (oq_payload_get(job, "touch_ms") &&
        (oq_payload_uint(job, "touch_ms", &touch_ms) < 0 || touch_ms == 0)) {
        oq_report_fail(report, "sleep: payload field \"touch_ms\" must be a whole number of "
                               "milliseconds above 0");
        return;
    }
    /* A long job that makes progress: touch between slices of the sleep. */
    while (touch_ms && ms > touch_ms) {
        s_sleep_ms(touch_ms);
        ms -= touch_ms;
        oq_job_touch(job);
    }
    s_sleep_ms(ms);
    oq_report_ok(report, OQ_RESULT_NONE);
}

static void s_fail(const oq_job_t *job, void *state, oq_report_t *report)
{
    bool permanent = false;
    if (oq_payload_get(job, "permanent") && oq_payload_bool(job, "permanent", &permanent) < 0) {
        oq_report_fail(report, "fail: payload field \"permanent\" must be true or false");
        return;
    }
    oq_str_t message = {NULL, 0};
    if (oq_payload_get(job, "message") && oq_payload_str(job, "message", &message) < 0) {
        oq_report_fail(report, "fail: payload field \"message\" must be a string");
        return;
    }
    /* An empty message would reach the broker as no error at all. */
    if (message.len == 0)
        message = oq_str(permanent ? "failed on purpose (permanent)" : "failed on purpose");
    uint64_t release_ms = 0;
    bool release = oq_payload_get(job, "release_ms") != NULL;
    if (release && (oq_payload_uint(job, "release_ms", &release_ms) < 0 ||
                    release_ms > (uint64_t)OQ_MAX_DELAY_MS)) {
        oq_report_fail(report,
                       "fail: payload field \"release_ms\" must be a whole number of "
                       "milliseconds from 0 to %lld",
                       (long long)OQ_MAX_DELAY_MS);
        return;
    }
    if (permanent)
        oq_report_fail(report, "%.*s", (int)message.len, message.ptr);
    else if (release)
        oq_report_release(report, (int64_t)release_ms, "%.*s", (int)message.len, message.ptr);
    else
        oq_report_retry(report, "%.*s", (int)message.len, message.ptr);
}

static void s_crash(const oq_job_t *job, void *state, oq_report_t *report)
{
    oq_warn("crash: aborting the process in the middle of job %llu, on purpose",
            (unsigned long long)job->id);
    /* The crash is the test; a core file of it would only litter the
       working directory. */
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    abort();
}

void oq_builtin_register(oq_registry_t *self)
{
    static const struct {
        const char *type;
        oq_handler_fn fn;
    } builtins[] = {
        {"noop", s_noop},
        {"sleep", s_sleep},
        {"fail", s_fail},
        {"crash", s_crash},
    };
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (oq_registry_add(self, builtins[i].type, builtins[i].fn, NULL) < 0)
            oq_error("the built-in handler \"%s\" is not available", builtins[i].type);
}
