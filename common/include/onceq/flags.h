/*  onceq/flags.h: one table of a binary's flags. Each flag is declared once
    (long name, environment variable, kind, bounds, help text, default,
    destination) and this module does the rest: getopt parsing, the
    environment fallback, strict conversion with a bounds check, an error
    that names the flag or variable, the value and what was expected, and
    the options block of --help. A value comes from its flag, else from its
    environment variable (set and not empty), else from the default.

        static uint32_t heartbeat_ms;
        static const oq_flag_t flags[] = {
            {.name = "heartbeat-ms", .env = "ONCEQ_HEARTBEAT_MS", .kind = OQ_FLAG_MS,
             .arg = "N", .min = 10, .max = 60000, .def = "1000", .dest = &heartbeat_ms,
             .help = "heartbeat interval"},
        };
        int rc = oq_flags_parse("prog", flags, OQ_FLAGS_COUNT(flags), argc, argv);

    Errors go to stderr as `PROG: invalid --heartbeat-ms "5": expected
    milliseconds from 10 to 60000` (or `invalid ONCEQ_HEARTBEAT_MS "5": ...`
    when the value came from the environment). */
#ifndef ONCEQ_FLAGS_H
#define ONCEQ_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Flags one table may hold. */
#define OQ_FLAGS_MAX 96

/* The kinds of value, each with the type its destination points to. */
typedef enum {
    OQ_FLAG_SECTION,  /* no flag: a heading in --help (help is its text) */
    OQ_FLAG_STRING,   /* const char * (borrowed from argv or the environment) */
    OQ_FLAG_UINT,     /* uint64_t in [min, max] */
    OQ_FLAG_U32,      /* uint32_t in [min, max] */
    OQ_FLAG_MS,       /* uint32_t milliseconds in [min, max] */
    OQ_FLAG_SECONDS,  /* int64_t milliseconds from seconds ("90", "0.25"), [min, max] in ms */
    OQ_FLAG_DOUBLE,   /* double in [dmin, dmax] */
    OQ_FLAG_BOOL,     /* bool; the flag takes no value; the variable is 1/0/true/false/yes/no */
    OQ_FLAG_ENUM,     /* int: the index of the value in words */
    OQ_FLAG_ENDPOINT, /* const char *: tcp://HOST:PORT or ipc://PATH */
    OQ_FLAG_CUSTOM,   /* parse(value, dest, ...) decides */
} oq_flag_kind_t;

/* Where a flag's value came from. */
typedef enum {
    OQ_FLAG_SRC_NONE = 0, /* nowhere: the default, or dest untouched */
    OQ_FLAG_SRC_ENV,      /* its environment variable */
    OQ_FLAG_SRC_ARG,      /* the command line */
} oq_flag_src_t;

/* A custom parser: 0 with dest filled, or -1. It may write a reason into
   why (why_len bytes); otherwise the error says the flag's `expected`. */
typedef int (*oq_flag_parse_fn)(const char *value, void *dest, char *why, size_t why_len);

typedef struct {
    const char *name; /* long name without "--" */
    const char *env;  /* environment fallback, or NULL for none */
    oq_flag_kind_t kind;
    const char *arg;          /* the value's name in --help ("N", "URL"); unused for BOOL */
    const char *help;         /* what it does; wrapped in --help */
    const char *def;          /* default value text, parsed like a value; NULL: dest untouched */
    const char *def_text;     /* what --help calls the default when def is NULL ("the host name") */
    void *dest;               /* see oq_flag_kind_t */
    uint64_t min, max;        /* UINT, U32, MS; SECONDS in ms */
    double dmin, dmax;        /* DOUBLE */
    const char *const *words; /* ENUM: NULL-terminated */
    oq_flag_parse_fn parse;   /* CUSTOM */
    const char *expected;     /* replaces the generated "expected ..." text (CUSTOM: required) */
    bool repeat;              /* CUSTOM only: parse every occurrence, in order (e.g. --queue) */
    bool stop;          /* BOOL only: when given, parsing stops and returns 1 (--help, --version) */
    oq_flag_src_t *src; /* optional: where the value came from */
} oq_flag_t;

#define OQ_FLAGS_COUNT(table) (sizeof(table) / sizeof((table)[0]))

/* Parse argv against the table: every flag from the command line, then
   for each flag not given its environment variable, else its default.
   Returns 0 when all values are valid, 1 when a `stop` flag was given (the
   rest is then not converted), -1 after printing an error to stderr
   (unknown flag, missing value, unexpected argument, bad value). */
int oq_flags_parse(const char *program, const oq_flag_t *flags, size_t count, int argc,
                   char **argv);

/* Write the options block of --help: each flag with its value name, help
   text, environment variable in brackets and default in parentheses. */
void oq_flags_help(const oq_flag_t *flags, size_t count, FILE *out);

/* tcp://HOST:PORT (port 1 to 65535) or ipc://PATH. */
bool oq_flags_endpoint_valid(const char *endpoint);

/* True if binding endpoint reaches this machine only: ipc:// or inproc://,
   or tcp:// on 127.0.0.0/8, [::1] or localhost. */
bool oq_flags_endpoint_local(const char *endpoint);

/* The parser of --log-level (dest: an oq_log_level_t), for OQ_FLAG_LOG_LEVEL. */
int oq_flags_parse_log_level(const char *value, void *dest, char *why, size_t why_len);

/* The --log-level entry every binary's table has (ONCEQ_LOG_LEVEL). */
#define OQ_FLAG_LOG_LEVEL(level_ptr)                                                               \
    {                                                                                              \
        .name = "log-level", .env = "ONCEQ_LOG_LEVEL", .kind = OQ_FLAG_CUSTOM, .arg = "LEVEL",     \
        .parse = oq_flags_parse_log_level, .expected = "debug, info, warn or error",               \
        .def = "info", .dest = (level_ptr), .help = "debug, info, warn or error"                   \
    }

#endif
