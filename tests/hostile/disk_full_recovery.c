/*  disk_full_recovery: a full disk recovers about a second after the
    workers drain, as docs/journal.md §8 says, also when the disk filled
    while every job was still waiting.

    An 8 MiB tmpfs holds the data dir, with a 1 MiB disk reserve. Jobs of
    4 KB are dispatched with no worker connected until the broker answers
    "unavailable": the volume is full of live jobs, so no compaction can
    reclaim anything yet. Then workers start and drain the queue, and
    dispatches are tried every 100 ms: the first must be accepted within
    S_RECOVERY_BOUND_MS of the drain, without anyone freeing space. A
    compaction that starts while half the jobs are still live finds too
    little room for its snapshot and fails; it used to be tried again only
    after 10 s, the time every full disk then took to recover.

    Needs root to mount the tmpfs; skipped (and said so) otherwise.
    unit.test_journal plays the same on a small disk through the disk seam,
    with a hand-moved clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define S_VOLUME            "size=8m"
#define S_RESERVE_BYTES     "1048576"
#define S_PAD_BYTES         4000 /* payload padding: the volume fills in ~1,800 jobs */
#define S_MAX_FILL_JOBS     20000
#define S_RETRY_MS          100
#define S_CALL_TIMEOUT_MS   10000
#define S_RECOVERY_BOUND_MS 4000 /* the docs promise about 1 s; before the fix it took 10 */

static char s_vol[300];

static int s_setup(void **state)
{
    it_t *it = it_new("disk_full_recovery");
    *state = it;
    if (!it)
        return -1;
    snprintf(s_vol, sizeof s_vol, "%s/vol", it->dir);
    return 0;
}

static int s_teardown(void **state)
{
    it_t *it = *state;
    it_kill_all(it);
    umount2(s_vol, MNT_DETACH); /* not mounted if the test was skipped */
    it_destroy(&it);
    return 0;
}

static void s_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool s_drained(const it_stats_t *s, const void *arg)
{
    (void)arg;
    return s->ready + s->delayed + s->leased == 0 && s->done > 0;
}

static void test_a_disk_filled_by_waiting_jobs_recovers_soon_after_the_drain(void **state)
{
    it_t *it = *state;
    char data_dir[320];
    snprintf(data_dir, sizeof data_dir, "%s/data", s_vol);
    assert_int_equal(mkdir(s_vol, 0755), 0);
    if (geteuid() != 0 || mount("tmpfs", s_vol, "tmpfs", 0, S_VOLUME) < 0) {
        print_message("SKIPPED, NOT RUN: cannot mount an 8 MiB tmpfs at %s (%s)\n", s_vol,
                      geteuid() != 0 ? "not root" : strerror(errno));
        skip();
    }
    const char *flags[] = {"--data-dir", data_dir, "--disk-reserve-bytes", S_RESERVE_BYTES, NULL};
    assert_true(it_start_broker(it, flags) > 0);

    /* Fill the volume with waiting jobs: no worker takes any yet. */
    uint64_t accepted = it_fill_disk(it, S_PAD_BYTES, S_MAX_FILL_JOBS, S_CALL_TIMEOUT_MS);
    oq_err_t code = OQ_ERR_NONE;

    /* Workers drain every job; then, with nobody freeing space, a dispatch
       is accepted again within the bound. */
    const char *worker_flags[] = {"--processes", "2", NULL};
    assert_true(it_start_worker(it, "workers", worker_flags) > 0);
    it_stats_t s;
    assert_true(it_wait_stats(it, s_drained, NULL, IT_WAIT_MS, &s) >= 0);
    assert_true(s.done >= accepted);
    int64_t drained = it_now_ms();
    int64_t deadline = drained + IT_WAIT_MS;
    while (it_dispatch_padded(it, S_PAD_BYTES, S_CALL_TIMEOUT_MS, &code) != OQ_CMD_DISPATCHED) {
        assert_int_equal(code, OQ_ERR_UNAVAILABLE);
        assert_true(it_now_ms() < deadline);
        s_sleep_ms(S_RETRY_MS);
    }
    int64_t took = it_now_ms() - drained;
    print_message("dispatches accepted again %lld ms after the workers drained\n", (long long)took);
    assert_true(it_log_count(it, "broker", "compacted the journal") >= 1);
    assert_true(took <= S_RECOVERY_BOUND_MS);
    it_kill_all(it);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_a_disk_filled_by_waiting_jobs_recovers_soon_after_the_drain, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
