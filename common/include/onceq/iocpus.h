/*  onceq/iocpus.h: the CPUs libzmq's I/O thread may run on (--io-cpus).
    Every message of a ZeroMQ socket passes through its context's I/O
    thread, on both ends of a hop. Left to the scheduler, that thread is
    woken wherever the kernel likes, often on the CPU of the very thread
    that just handed it the message, which it then preempts; on a machine
    with few CPUs shared by broker, workers and producers, keeping the I/O
    threads on CPUs of their own can shorten every hop (tests/bench/README.md,
    "Pinning libzmq's I/O threads"). Off by default: which CPUs pay depends
    on the machine. */
#ifndef ONCEQ_IOCPUS_H
#define ONCEQ_IOCPUS_H

#include <stddef.h>
#include <stdint.h>

#define OQ_MAX_IO_CPUS 64 /* CPUs one --io-cpus list names at most */

typedef struct {
    uint32_t count; /* 0: not pinned */
    uint32_t cpu[OQ_MAX_IO_CPUS];
} oq_io_cpus_t;

/* Parse a comma-separated list of CPU numbers ("1", "0,2"), each one this
   process may run on, into *(oq_io_cpus_t *)dest; "" leaves it empty. An
   oq_flag_parse_fn: 0, or -1 with the reason in why. */
int oq_io_cpus_parse(const char *value, void *dest, char *why, size_t why_len);

/* Pin the I/O threads of ctx, a libzmq context no socket has been made in
   yet, to cpus (nothing if it is empty). 0, or -1 (errno) if libzmq
   refuses. */
int oq_io_cpus_apply(void *ctx, const oq_io_cpus_t *cpus);

/* The --io-cpus entry of the broker's and the worker's tables (ONCEQ_IO_CPUS). */
#define OQ_FLAG_IO_CPUS(cpus_ptr)                                                                  \
    {                                                                                              \
        .name = "io-cpus", .env = "ONCEQ_IO_CPUS", .kind = OQ_FLAG_CUSTOM, .arg = "LIST",          \
        .parse = oq_io_cpus_parse, .expected = "CPU numbers this process may run on, e.g. 0,1",    \
        .def = "", .def_text = "none: where the scheduler puts it", .dest = (cpus_ptr),            \
        .help = "run libzmq's I/O thread only on these CPUs (comma-separated numbers); on a "      \
                "machine with few CPUs this can shorten every hop of a job "                       \
                "(tests/bench/README.md)"                                                          \
    }

#endif
