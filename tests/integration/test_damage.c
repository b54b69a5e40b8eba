/*  test_damage: a real broker's journal damaged between runs, and a real
    full disk.

    (i)  Damage. 1,500 jobs are dispatched and confirmed, the broker stops
         cleanly, and the length field of the record about 40 KB before the
         journal's end is set to a legal value that runs past the end of the
         file. The next start is refused (exit status 1, naming the offset
         and --repair) and changes nothing; `--repair` then keeps every job
         but the damaged record's one, saves the damaged bytes to a side
         file, and the start after it is clean.
    (ii) Full disk (needs root to mount an 8 MiB tmpfs; skipped, and counted
         as not run, otherwise). The broker fills the volume while a worker
         runs every job; once refused, the worker drains, and dispatches must
         be accepted again without anyone freeing space. The time from the
         drain to the first accepted dispatch is printed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "support.h"

#define S_JOBS            1500
#define S_BACK_BYTES      40000 /* the damaged record lies this far before the end */
#define S_HEADER_BYTES    48    /* docs/journal.md, section 2 */
#define S_FRAME_BYTES     8
#define S_VOLUME          "size=8m"
#define S_RESERVE_BYTES   "1048576"
#define S_PAD_BYTES       4000 /* payload padding: the volume fills in ~2,000 jobs */
#define S_MAX_FILL_JOBS   20000
#define S_RETRY_MS        100
#define S_CALL_TIMEOUT_MS 10000

static int s_setup(void **state)
{
    *state = it_new("damage");
    return *state ? 0 : -1;
}

static int s_teardown(void **state)
{
    it_t *it = *state;
    char vol[300];
    snprintf(vol, sizeof vol, "%s/vol", it->dir);
    it_kill_all(it);
    umount2(vol, MNT_DETACH); /* not mounted unless test (ii) ran */
    it_destroy(&it);
    return 0;
}

static uint32_t s_load32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void s_stop_broker(it_t *it)
{
    it_signal(it->broker, SIGTERM);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) == 0);
}

/* Files in dir whose name starts with prefix. */
static int s_count_files(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static void test_a_damaged_journal_is_refused_and_repair_keeps_every_good_job(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    for (int i = 0; i < S_JOBS; i++)
        it_dispatch(it, "noop", NULL, NULL);
    s_stop_broker(it);

    /* Find the record about 40 KB before the end and give it a legal
       length that runs past the end of the file. */
    char path[400];
    snprintf(path, sizeof path, "%s/data/journal", it->dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    size_t size = (size_t)st.st_size;
    uint8_t *data = malloc(size);
    assert_int_equal(pread(fd, data, size, 0), (ssize_t)size);
    size_t at = S_HEADER_BYTES, records = 0, damaged = 0;
    while (at < size) {
        if (!damaged && at >= size - S_BACK_BYTES)
            damaged = at;
        at += S_FRAME_BYTES + s_load32(data + at);
        records++;
    }
    assert_int_equal(at, size);
    assert_int_equal(records, S_JOBS);
    uint32_t len = (uint32_t)(size - damaged);
    uint8_t bytes[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                        (uint8_t)(len >> 24)};
    assert_int_equal(pwrite(fd, bytes, 4, (off_t)damaged), 4);
    close(fd);
    free(data);
    print_message("damaged the length field at byte %zu of %zu\n", damaged, size);

    /* Refused, naming the offset and the way out; nothing changed. */
    char data_dir[300];
    snprintf(data_dir, sizeof data_dir, "%s/data", it->dir);
    const char *argv[] = {it_bin("onceq-broker"), "--front", it->front, "--back", it->back,
                          "--data-dir",           data_dir,  NULL};
    pid_t refused = it_spawn(it, "refused", argv);
    assert_true(refused > 0);
    int status = it_wait_exit(refused, IT_WAIT_MS);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    char where[64];
    snprintf(where, sizeof where, "is damaged at byte %zu", damaged);
    assert_int_equal(it_log_count(it, "refused", where), 1);
    assert_int_equal(it_log_count(it, "refused", "--repair"), 1);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((size_t)st.st_size, size);

    /* --repair keeps every job but the damaged record's. */
    const char *repair[] = {"--repair", NULL};
    assert_true(it_start_broker(it, repair) > 0);
    uint64_t kept = S_JOBS - 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_ready_is, &kept, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(it_log_count(it, "broker", "repair: journal"), 2);
    assert_int_equal(it_log_count(it, "broker", "kept 1499 records, skipped 1 damaged range"), 1);
    assert_int_equal(s_count_files(data_dir, "journal.damaged-"), 1);
    s_stop_broker(it);

    /* The repaired journal starts cleanly, with the same jobs. */
    assert_true(it_start_broker(it, NULL) > 0);
    assert_true(it_wait_stats(it, it_ready_is, &kept, IT_WAIT_MS, &s) >= 0);
    s_stop_broker(it);
}

static bool s_drained(const it_stats_t *s, const void *arg)
{
    (void)arg;
    return s->ready + s->delayed + s->leased == 0;
}

static void test_a_full_disk_recovers_by_itself(void **state)
{
    it_t *it = *state;
    char vol[300], data_dir[320];
    snprintf(vol, sizeof vol, "%s/vol", it->dir);
    snprintf(data_dir, sizeof data_dir, "%s/data", vol);
    assert_int_equal(mkdir(vol, 0755), 0);
    if (geteuid() != 0 || mount("tmpfs", vol, "tmpfs", 0, S_VOLUME) < 0) {
        print_message("SKIPPED, NOT RUN: cannot mount an 8 MiB tmpfs at %s (%s); the full-disk "
                      "recovery is covered by unit.test_journal only\n",
                      vol, geteuid() != 0 ? "not root" : strerror(errno));
        skip();
    }
    const char *flags[] = {"--data-dir", data_dir, "--disk-reserve-bytes", S_RESERVE_BYTES, NULL};
    assert_true(it_start_broker(it, flags) > 0);
    const char *worker_flags[] = {"--processes", "2", NULL};
    assert_true(it_start_worker(it, "workers", worker_flags) > 0);

    /* Fill the volume: dispatch until the broker says unavailable. */
    it_fill_disk(it, S_PAD_BYTES, S_MAX_FILL_JOBS, S_CALL_TIMEOUT_MS);
    oq_err_t code = OQ_ERR_NONE;

    /* The worker drains every job; then, with nobody freeing space, a
       dispatch is accepted again within the bound. */
    it_stats_t s;
    assert_true(it_wait_stats(it, s_drained, NULL, IT_WAIT_MS, &s) >= 0);
    int64_t drained = it_now_ms();
    int64_t deadline = drained + IT_WAIT_MS;
    oq_cmd_t cmd;
    while ((cmd = it_dispatch_padded(it, S_PAD_BYTES, S_CALL_TIMEOUT_MS, &code)) !=
           OQ_CMD_DISPATCHED) {
        assert_int_equal(code, OQ_ERR_UNAVAILABLE);
        assert_true(it_now_ms() < deadline);
        oq_support_sleep_ms(S_RETRY_MS);
    }
    print_message("dispatches accepted again %lld ms after the workers drained (0 live jobs)\n",
                  (long long)(it_now_ms() - drained));
    assert_true(it_log_count(it, "broker", "compacted the journal") >= 1);
    it_kill_all(it);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_a_damaged_journal_is_refused_and_repair_keeps_every_good_job, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_a_full_disk_recovers_by_itself, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
