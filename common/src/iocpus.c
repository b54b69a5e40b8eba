/*  iocpus.c: the CPUs libzmq's I/O thread may run on (onceq/iocpus.h). */
#include "onceq/iocpus.h"

#include <assert.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

int oq_io_cpus_parse(const char *value, void *dest, char *why, size_t why_len)
{
    oq_io_cpus_t *cpus = dest;
    oq_io_cpus_t out = {0};
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) < 0) {
        snprintf(why, why_len, "cannot read the CPUs this process may run on: %s", strerror(errno));
        return -1;
    }
    const char *at = value;
    while (*at) {
        char *end;
        errno = 0;
        unsigned long cpu = strtoul(at, &end, 10);
        if (end == at || errno || (*end && *end != ',') || at[0] == '-' || at[0] == '+') {
            snprintf(why, why_len, "a comma-separated list of CPU numbers, e.g. 0,2");
            return -1;
        }
        if (cpu >= CPU_SETSIZE || !CPU_ISSET((int)cpu, &allowed)) {
            snprintf(why, why_len, "CPUs this process may run on: %lu is not one of its %d", cpu,
                     CPU_COUNT(&allowed));
            return -1;
        }
        if (out.count == OQ_MAX_IO_CPUS) {
            snprintf(why, why_len, "at most %d CPUs", OQ_MAX_IO_CPUS);
            return -1;
        }
        out.cpu[out.count++] = (uint32_t)cpu;
        at = *end ? end + 1 : end;
        if (*end && !*at) {
            snprintf(why, why_len, "a list of CPU numbers without a trailing comma");
            return -1;
        }
    }
    *cpus = out;
    return 0;
}

int oq_io_cpus_apply(void *ctx, const oq_io_cpus_t *cpus)
{
    assert(ctx && cpus);
    for (uint32_t i = 0; i < cpus->count; i++)
        if (zmq_ctx_set(ctx, ZMQ_THREAD_AFFINITY_CPU_ADD, (int)cpus->cpu[i]) < 0)
            return -1;
    return 0;
}
