/*  journal_header_damage: one flipped bit in any field of the journal's
    header is refused with a message naming --repair, and --repair brings
    back every confirmed job.

    Jobs are dispatched (one with a dispatch_id), half of them cancelled,
    and the broker stops cleanly. Then, for each header field in turn
    (magic, format version, flags, created at, dedupe key, reserved, CRC),
    the journal and its durable mark are put back as they were and one bit
    of the field is flipped: a plain start must exit 1 naming the damage
    and --repair; a start with --repair must hold every job still
    confirmed, map the dispatch_id to its first job, and leave a journal
    that the next plain start reads. The counts of both are printed. A
    damaged header used to be fatal, --repair or not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define S_JOBS        400 /* dispatched; every other one is cancelled */
#define S_LIVE        (S_JOBS / 2)
#define S_LOG_LEN     64
#define S_PATH_LEN    400
#define S_DISPATCH_ID "order-1:grant"

/* The header's fields (docs/journal.md §2): where each starts, its size. */
static const struct {
    const char *name;
    int offset, size;
} s_fields[] = {
    {"magic", 0, 8},        {"format version", 8, 4}, {"flags", 12, 4}, {"created at", 16, 8},
    {"dedupe key", 24, 16}, {"reserved", 40, 4},      {"CRC", 44, 4},
};
#define S_FIELDS ((int)(sizeof s_fields / sizeof s_fields[0]))

static int s_setup(void **state)
{
    *state = it_new("journal_header_damage");
    return *state ? 0 : -1;
}

/* A whole file into a malloc'd buffer. */
static uint8_t *s_read_file(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    *size = (size_t)st.st_size;
    uint8_t *data = malloc(*size ? *size : 1);
    assert_non_null(data);
    assert_int_equal(pread(fd, data, *size, 0), (ssize_t)*size);
    close(fd);
    return data;
}

static void s_write_file(const char *path, const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, size), (ssize_t)size);
    close(fd);
}

static void s_stop_broker(it_t *it)
{
    it_signal(it->broker, SIGTERM);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) == 0);
}

/* A plain start on the damaged journal: true if it exits 1 naming the
   damage and --repair. */
static bool s_refused_naming_repair(it_t *it, const char *data_dir, int field)
{
    char log[S_LOG_LEN];
    snprintf(log, sizeof log, "refused-%d", field);
    const char *argv[] = {it_bin("onceq-broker"), "--front", it->front, "--back",     it->back,
                          "--data-dir",           data_dir,  "--keys",  it->keys_dir, NULL};
    pid_t pid = it_spawn(it, log, argv);
    assert_true(pid > 0);
    int status = it_wait_exit(pid, IT_WAIT_MS);
    bool refused = status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 1;
    bool named = it_log_count(it, log, "--repair") >= 1 && it_log_count(it, log, "damaged") >= 1;
    if (!refused || !named)
        print_message("%s: the plain start %s%s\n", s_fields[field].name,
                      refused ? "was refused" : "was not refused",
                      named ? "" : " without naming the damage and --repair");
    return refused && named;
}

/* A start with --repair: true if it serves every confirmed job and the
   dispatch_id still maps to its job. */
static bool s_recovered(it_t *it, int field, uint64_t first)
{
    const char *repair[] = {"--repair", NULL};
    if (it_start_broker(it, repair) < 0) {
        print_message("%s: --repair did not start\n", s_fields[field].name);
        return false;
    }
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    oq_job_msg_t again = {.dispatch_id = oq_str(S_DISPATCH_ID)};
    uint64_t id = it_dispatch(it, "noop", NULL, &again);
    s_stop_broker(it);
    if (s.ready != S_LIVE || id != first) {
        print_message(
            "%s: --repair kept %llu of %d jobs; the dispatch_id maps to %llu, first %llu\n",
            s_fields[field].name, (unsigned long long)s.ready, S_LIVE, (unsigned long long)id,
            (unsigned long long)first);
        return false;
    }
    return true;
}

static void test_a_flipped_header_bit_is_refused_naming_repair_and_repaired(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    oq_job_msg_t once = {.dispatch_id = oq_str(S_DISPATCH_ID)};
    uint64_t first = it_dispatch(it, "noop", NULL, &once);
    for (int i = 1; i < S_JOBS; i++) {
        uint64_t id = it_dispatch(it, "noop", NULL, NULL);
        if (i % 2)
            it_cancel(it, id);
    }
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.ready, S_LIVE);
    s_stop_broker(it);

    char data_dir[S_PATH_LEN], journal[S_PATH_LEN + 16], mark[S_PATH_LEN + 16];
    snprintf(data_dir, sizeof data_dir, "%s/data", it->dir);
    snprintf(journal, sizeof journal, "%s/journal", data_dir);
    snprintf(mark, sizeof mark, "%s/journal.durable", data_dir);
    size_t journal_size, mark_size;
    uint8_t *pristine = s_read_file(journal, &journal_size);
    uint8_t *pristine_mark = s_read_file(mark, &mark_size);

    int refused = 0, recovered = 0;
    for (int f = 0; f < S_FIELDS; f++) {
        uint8_t *damaged = malloc(journal_size);
        memcpy(damaged, pristine, journal_size);
        damaged[s_fields[f].offset + s_fields[f].size / 2] ^= (uint8_t)(1u << (f % 8));
        s_write_file(journal, damaged, journal_size);
        s_write_file(mark, pristine_mark, mark_size);
        free(damaged);
        refused += s_refused_naming_repair(it, data_dir, f);
        recovered += s_recovered(it, f, first);
    }
    print_message("one flipped bit in each of %d header fields: %d refused naming --repair, %d "
                  "recovered by --repair with all %d jobs\n",
                  S_FIELDS, refused, recovered, S_LIVE);
    assert_int_equal(refused, S_FIELDS);
    assert_int_equal(recovered, S_FIELDS);

    /* The last repair left a sound journal: a plain start reads it. */
    assert_true(it_start_broker(it, NULL) > 0);
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.ready, S_LIVE);
    s_stop_broker(it);
    free(pristine);
    free(pristine_mark);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_a_flipped_header_bit_is_refused_naming_repair_and_repaired, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
