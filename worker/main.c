/*  main.c: onceq-worker, a thin main over oq_worker_main (libonceq-worker)
    with the built-in handlers and the points handler (grant_points)
    registered. Every flag and behaviour is the library's. */
#include <stdlib.h>
#include <string.h>

#include "onceq/log.h"
#include "onceq/worker.h"
#include "pg/txn.h"
#include "points/handler.h"

/* Test hooks are on only when this variable is exactly "1". */
#define S_ENV_TEST_HOOKS "ONCEQ_TEST_HOOKS"

/* The points handler keeps a database connection per worker process, so
   its state is made in the process that runs the jobs, on the first job,
   from the worker's --database and --isolation (oq_worker_settings): a
   connection must not cross the supervisor's fork. Until then the types
   are registered with this trampoline. The state lives until the process
   exits, which closes the connection. */
static oq_points_handler_t *s_points;
static oq_registry_t *s_points_registry; /* the points handler's own types */
static bool s_test_hooks;

static int s_points_open(void)
{
    const oq_worker_settings_t *settings = oq_worker_settings();
    oq_points_config_t config = {.test_hooks = s_test_hooks};
    if (!settings || oq_txn_isolation_parse(settings->isolation, &config.isolation) < 0)
        return -1;
    config.database_url = settings->database_url;
    s_points = oq_points_handler_new(&config);
    s_points_registry = oq_registry_new();
    return oq_points_handler_register(s_points, s_points_registry);
}

static void s_points_lazy(const oq_job_t *job, void *state, oq_report_t *report)
{
    if (!s_points_registry && s_points_open() < 0) {
        oq_report_fail(report, "the %s handler is not available", job->type);
        return;
    }
    oq_handler_fn fn;
    void *inner;
    if (oq_registry_find(s_points_registry, job->type, &fn, &inner) < 0) {
        oq_report_fail(report, "no handler for job type %s", job->type);
        return;
    }
    fn(job, inner, report);
}

int main(int argc, char **argv)
{
    const char *hooks = getenv(S_ENV_TEST_HOOKS);
    s_test_hooks = hooks && strcmp(hooks, "1") == 0;
    oq_registry_t *registry = oq_registry_new();
    oq_builtin_register(registry);
    if (oq_registry_add(registry, OQ_POINTS_JOB_TYPE, s_points_lazy, NULL) < 0 ||
        (s_test_hooks &&
         oq_registry_add(registry, OQ_POINTS_UNGUARDED_JOB_TYPE, s_points_lazy, NULL) < 0))
        oq_error("the %s handler is not available", OQ_POINTS_JOB_TYPE);
    return oq_worker_main(argc, argv, registry);
}
