/*  test_supervisor.c: the supervisor's restart delay, which doubles for a
    worker that dies again soon and starts over after a stable run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "onceq/limits.h"
#include "onceq/log.h"
#include "supervisor.h"
#include "worker_limits.h"

static void test_supervisor_restart_delay(void **unused)
{
    assert_int_equal(oq_supervisor_restart_delay(0, 10), OQ_SUPERVISOR_RESTART_MS);
    assert_int_equal(oq_supervisor_restart_delay(0, 100000), OQ_SUPERVISOR_RESTART_MS);
    /* Dying again within a second doubles it, up to the cap. */
    int64_t delay = OQ_SUPERVISOR_RESTART_MS;
    for (int i = 0; i < 10; i++) {
        int64_t next = oq_supervisor_restart_delay(delay, OQ_SUPERVISOR_STABLE_MS - 1);
        assert_true(next == delay * 2 || next == OQ_SUPERVISOR_RESTART_MAX_MS);
        delay = next;
    }
    assert_int_equal(delay, OQ_SUPERVISOR_RESTART_MAX_MS);
    /* A worker that ran stably starts over. */
    assert_int_equal(oq_supervisor_restart_delay(delay, OQ_SUPERVISOR_STABLE_MS),
                     OQ_SUPERVISOR_RESTART_MS);
}

int main(void)
{
    /* The worker logs its decisions; keep only errors. */
    oq_log_init("test_supervisor");
    oq_log_set_level(OQ_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_supervisor_restart_delay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
