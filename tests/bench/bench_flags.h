/*  bench_flags.h: the benchmarks' command lines, on the product's flag
    table (onceq/flags.h) as the broker's, the worker's and the CLI's are.
    A bench declares its flags once; this module adds --help, prints the
    usage text with the table's options block, and keeps the exit codes
    alike. Two kinds of row recur and live here once: the --mode, --runs
    and --bytes of the transport benches (chain-rtt, transport-rtt), and
    the load options
    that onceq-bench and the peer benches (beanstalk-bench, redis-bench)
    share, with the same names, bounds and defaults, so that both sides of
    a comparison are driven alike. */
#ifndef ONCEQ_BENCH_FLAGS_H
#define ONCEQ_BENCH_FLAGS_H

#include <stdbool.h>
#include <stddef.h>

#include "onceq/flags.h"

#define OQ_BENCH_STR_(x) #x
#define OQ_BENCH_STR(x)  OQ_BENCH_STR_(x) /* a number macro as a string, for defaults */

/* A bench's exit status after a usage error (as the product's binaries). */
#define OQ_BENCH_EXIT_USAGE 2

/* A row of a whole number from min_ to max_ (ptr: a uint64_t *) with a
   default (a number, or a macro that is one): the shape of most bench
   options, one row to a line as in a command table. */
#define OQ_BENCH_UINT(name_, arg_, min_, max_, def_, ptr, help_)                                   \
    {                                                                                              \
        .name = (name_), .kind = OQ_FLAG_UINT, .arg = (arg_), .min = (min_), .max = (max_),        \
        .def = OQ_BENCH_STR(def_), .dest = (ptr), .help = (help_)                                  \
    }

/* Parse argv against flags, with a --help row added. usage is printed
   above the options block and epilogue (or NULL) below it. 0: run; 1:
   --help was printed (exit 0); -1: an error was printed (exit
   OQ_BENCH_EXIT_USAGE). */
int oq_bench_flags_parse(const char *program, const char *usage, const char *epilogue,
                         const oq_flag_t *flags, size_t count, int argc, char **argv);

/* ---- --mode, repeatable: which of a bench's modes run ---- */

typedef struct {
    const char *const *names; /* the modes, count of them; "all" names every one */
    int count;
    bool *chosen; /* count entries, set by each --mode */
    bool given;   /* whether any --mode was */
} oq_bench_modes_t;

/* An OQ_FLAG_CUSTOM parser (dest: an oq_bench_modes_t) for a repeated
   --mode: one mode's name, or all; the row's expected text lists them. */
int oq_bench_modes_parse(const char *value, void *dest, char *why, size_t why_len);

/* After parsing: every mode, if --mode was not given. */
void oq_bench_modes_settle(oq_bench_modes_t *modes);

/* The --mode row (ptr: an oq_bench_modes_t *); list: the modes as a
   sentence, "tcp, zmq-tcp or all". */
#define OQ_BENCH_FLAG_MODE(ptr, list)                                                              \
    {                                                                                              \
        .name = "mode", .kind = OQ_FLAG_CUSTOM, .arg = "M", .parse = oq_bench_modes_parse,         \
        .repeat = true, .expected = (list), .def_text = "all", .dest = (ptr),                      \
        .help = list "; may be given more than once"                                               \
    }

/* The rows of the transport benches' runs (each row's ptr: a uint64_t *). */
#define OQ_BENCH_DEFAULT_RUNS  5
#define OQ_BENCH_DEFAULT_BYTES 100
#define OQ_BENCH_MAX_RUNS      101
#define OQ_BENCH_MAX_BYTES     65536

#define OQ_BENCH_FLAG_RUNS(ptr)                                                                    \
    OQ_BENCH_UINT("runs", "N", 1, OQ_BENCH_MAX_RUNS, OQ_BENCH_DEFAULT_RUNS, ptr,                   \
                  "runs per mode, 1 to " OQ_BENCH_STR(OQ_BENCH_MAX_RUNS) "; medians are printed")
#define OQ_BENCH_FLAG_BYTES(ptr)                                                                   \
    OQ_BENCH_UINT("bytes", "N", 1, OQ_BENCH_MAX_BYTES, OQ_BENCH_DEFAULT_BYTES, ptr,                \
                  "message size, 1 to " OQ_BENCH_STR(OQ_BENCH_MAX_BYTES))

/* ---- the load options of the producers and their peers ---- */

#define OQ_BENCH_DEFAULT_JOBS         20000
#define OQ_BENCH_DEFAULT_WINDOW       64
#define OQ_BENCH_DEFAULT_LATENCY_JOBS 500
#define OQ_BENCH_DEFAULT_WARMUP_JOBS  200
#define OQ_BENCH_DEFAULT_GAP_US       1000
#define OQ_BENCH_DEFAULT_DEADLINE_S   300
#define OQ_BENCH_MAX_JOBS             10000000
#define OQ_BENCH_MAX_WINDOW           10000
#define OQ_BENCH_MAX_GAP_US           1000000
#define OQ_BENCH_MAX_DEADLINE_S       3600
#define OQ_BENCH_MAX_PRODUCERS        64

/* Each row's ptr is a uint64_t *. */
#define OQ_BENCH_FLAG_JOBS(ptr)                                                                    \
    OQ_BENCH_UINT("jobs", "N", 1, OQ_BENCH_MAX_JOBS, OQ_BENCH_DEFAULT_JOBS, ptr,                   \
                  "jobs in the throughput phase")
/* help: "unanswered dispatches at most" or the peer's word for them. */
#define OQ_BENCH_FLAG_WINDOW(ptr, help_text)                                                       \
    OQ_BENCH_UINT("window", "W", 1, OQ_BENCH_MAX_WINDOW, OQ_BENCH_DEFAULT_WINDOW, ptr, help_text)
#define OQ_BENCH_FLAG_LATENCY_JOBS(ptr)                                                            \
    OQ_BENCH_UINT("latency-jobs", "M", 0, OQ_BENCH_MAX_JOBS, OQ_BENCH_DEFAULT_LATENCY_JOBS, ptr,   \
                  "jobs in the latency phase, 0 to skip")
#define OQ_BENCH_FLAG_WARMUP(ptr)                                                                  \
    OQ_BENCH_UINT("warmup", "N", 0, OQ_BENCH_MAX_JOBS, OQ_BENCH_DEFAULT_WARMUP_JOBS, ptr,          \
                  "jobs run first and not measured")
#define OQ_BENCH_FLAG_GAP_US(ptr)                                                                  \
    OQ_BENCH_UINT("gap-us", "U", 0, OQ_BENCH_MAX_GAP_US, OQ_BENCH_DEFAULT_GAP_US, ptr,             \
                  "microseconds of pause between two latency jobs")
#define OQ_BENCH_FLAG_DEADLINE(ptr)                                                                \
    OQ_BENCH_UINT("deadline", "S", 1, OQ_BENCH_MAX_DEADLINE_S, OQ_BENCH_DEFAULT_DEADLINE_S, ptr,   \
                  "give up after S seconds in all")
/* help: what the processes do, e.g. "processes dispatching the throughput
   phase, each with its own connection and window". */
#define OQ_BENCH_FLAG_PRODUCERS(ptr, help_text)                                                    \
    OQ_BENCH_UINT("producers", "N", 1, OQ_BENCH_MAX_PRODUCERS, 1, ptr, help_text)

#endif
