/*  test_iocpus: --io-cpus. The list is parsed against the CPUs this process
    may run on, with a reason for each way it can be wrong; applied to a
    fresh context, it confines the I/O thread libzmq starts with the first
    socket to those CPUs, and an empty list leaves it where it was. */
#include <sched.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include <cmocka.h>

#include "onceq/iocpus.h"
#include "support.h"

/* The lowest and highest CPU this process may run on. */
static void s_allowed(int *lowest, int *highest, int *count)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    *lowest = *highest = -1;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) {
            if (*lowest < 0)
                *lowest = i;
            *highest = i;
        }
    *count = CPU_COUNT(&set);
}

static void s_refused(const char *value, const char *needle)
{
    oq_io_cpus_t cpus = {.count = 3};
    char why[256] = "";
    assert_int_equal(oq_io_cpus_parse(value, &cpus, why, sizeof why), -1);
    assert_int_equal(cpus.count, 3); /* untouched */
    if (!strstr(why, needle))
        fail_msg("\"%s\": expected \"%s\" in: %s", value, needle, why);
}

static void test_parse(void **state)
{
    (void)state;
    int lowest, highest, count;
    s_allowed(&lowest, &highest, &count);
    oq_io_cpus_t cpus = {.count = 5};
    char why[256], text[64];
    assert_int_equal(oq_io_cpus_parse("", &cpus, why, sizeof why), 0);
    assert_int_equal(cpus.count, 0);
    snprintf(text, sizeof text, "%d,%d", highest, lowest);
    assert_int_equal(oq_io_cpus_parse(text, &cpus, why, sizeof why), 0);
    assert_int_equal(cpus.count, 2);
    assert_int_equal(cpus.cpu[0], highest);
    assert_int_equal(cpus.cpu[1], lowest);

    s_refused("x", "comma-separated list");
    s_refused("-1", "comma-separated list");
    s_refused("0,,1", "comma-separated list");
    s_refused("0;1", "comma-separated list");
    s_refused("0,", "trailing comma");
    snprintf(text, sizeof text, "%d", CPU_SETSIZE);
    s_refused(text, "may run on");
    snprintf(text, sizeof text, "%d", highest + 1 < CPU_SETSIZE ? highest + 1 : CPU_SETSIZE);
    s_refused(text, "may run on");
    char many[4 * (OQ_MAX_IO_CPUS + 1) + 1] = "";
    for (int i = 0; i <= OQ_MAX_IO_CPUS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s%d", i ? "," : "", lowest);
    s_refused(many, "at most");
}

#define S_THREAD_WAIT_TRIES 500 /* x 10 ms: libzmq starts and names its thread on its own */

static int s_thread_cpus(const char *name, char *out, size_t out_len)
{
    for (int i = 0; i < S_THREAD_WAIT_TRIES; i++) {
        if (oq_support_thread_cpus(0, name, out, out_len) == 0)
            return 0;
        oq_support_sleep_us(10000);
    }
    return -1;
}

static void test_apply_pins_the_io_thread(void **state)
{
    (void)state;
    int lowest, highest, count;
    s_allowed(&lowest, &highest, &count);
    char text[16], seen[64] = "";
    snprintf(text, sizeof text, "%d", highest);
    oq_io_cpus_t cpus;
    char why[256];
    assert_int_equal(oq_io_cpus_parse(text, &cpus, why, sizeof why), 0);
    void *ctx = zmq_ctx_new();
    assert_int_equal(oq_io_cpus_apply(ctx, &cpus), 0);
    void *sock = zmq_socket(ctx, ZMQ_DEALER); /* starts the I/O thread */
    assert_non_null(sock);
    assert_int_equal(s_thread_cpus("ZMQbg/IO/0", seen, sizeof seen), 0);
    assert_string_equal(seen, text);
    zmq_close(sock);
    zmq_ctx_term(ctx);

    /* none: the thread may run wherever the process may */
    oq_io_cpus_t none = {0};
    ctx = zmq_ctx_new();
    assert_int_equal(oq_io_cpus_apply(ctx, &none), 0);
    sock = zmq_socket(ctx, ZMQ_DEALER);
    char all[64];
    assert_int_equal(s_thread_cpus("ZMQbg/IO/0", seen, sizeof seen), 0);
    snprintf(all, sizeof all, count == 1 ? "%d" : "%d-%d", lowest, highest);
    if (count == highest - lowest + 1)
        assert_string_equal(seen, all);
    zmq_close(sock);
    zmq_ctx_term(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_apply_pins_the_io_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
