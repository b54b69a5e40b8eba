/*  flags.c: one flag table -> getopt, environment fallback, strict values,
    errors that name their source, and the --help block. */
#include "onceq/flags.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/config.h"
#include "onceq/log.h"

#define S_MAX_PORT     65535
#define S_OPT_BASE     1000 /* getopt values above every short option */
#define S_WHY_LEN      256
#define S_ORIGIN_LEN   128
#define S_HELP_COL     25 /* where a flag's text starts in --help */
#define S_HELP_WIDTH   79
#define S_HELP_TEXT    1024
#define S_EXPECTED_LEN 512

bool oq_flags_endpoint_valid(const char *endpoint)
{
    if (!endpoint)
        return false;
    if (strncmp(endpoint, "ipc://", 6) == 0)
        return endpoint[6] != 0;
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return false;
    const char *host = endpoint + 6;
    const char *colon = strrchr(host, ':');
    uint64_t port;
    return colon && colon > host && oq_config_uint(colon + 1, 1, S_MAX_PORT, &port) == 0;
}

bool oq_flags_endpoint_local(const char *endpoint)
{
    if (!endpoint)
        return false;
    if (strncmp(endpoint, "ipc://", 6) == 0 || strncmp(endpoint, "inproc://", 9) == 0)
        return true;
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return false;
    const char *host = endpoint + 6;
    const char *colon = strrchr(host, ':');
    if (!colon)
        return false;
    size_t len = (size_t)(colon - host);
    if ((len == 9 && strncmp(host, "localhost", 9) == 0) ||
        (len == 5 && strncmp(host, "[::1]", 5) == 0))
        return true;
    /* 127.a.b.c: four numbers, the first 127. */
    unsigned parts[4];
    char tail;
    char ip[16];
    if (len == 0 || len >= sizeof ip)
        return false;
    memcpy(ip, host, len);
    ip[len] = 0;
    if (sscanf(ip, "%3u.%3u.%3u.%3u%c", &parts[0], &parts[1], &parts[2], &parts[3], &tail) != 4)
        return false;
    for (int i = 0; i < 4; i++)
        if (parts[i] > 255)
            return false;
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)ip[i]) && ip[i] != '.')
            return false;
    return parts[0] == 127;
}

/* "a, b or c" from a NULL-terminated word list. */
static void s_words(const char *const *words, char *out, size_t len)
{
    size_t n = 0;
    while (words[n])
        n++;
    out[0] = 0;
    size_t used = 0;
    for (size_t i = 0; i < n && used < len; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
        int w = snprintf(out + used, len - used, "%s%s", sep, words[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* What a valid value of the flag looks like, for errors. */
static void s_expected(const oq_flag_t *f, char *out, size_t len)
{
    if (f->expected) {
        snprintf(out, len, "%s", f->expected);
        return;
    }
    switch (f->kind) {
    case OQ_FLAG_UINT:
    case OQ_FLAG_U32:
        snprintf(out, len, "a whole number from %" PRIu64 " to %" PRIu64, f->min, f->max);
        break;
    case OQ_FLAG_MS:
        snprintf(out, len, "milliseconds from %" PRIu64 " to %" PRIu64, f->min, f->max);
        break;
    case OQ_FLAG_SECONDS:
        snprintf(out, len, "seconds from %g to %g", (double)f->min / 1000.0,
                 (double)f->max / 1000.0);
        break;
    case OQ_FLAG_DOUBLE:
        snprintf(out, len, "a number from %g to %g", f->dmin, f->dmax);
        break;
    case OQ_FLAG_BOOL:
        snprintf(out, len, "1, 0, true, false, yes or no");
        break;
    case OQ_FLAG_ENUM:
        s_words(f->words, out, len);
        break;
    case OQ_FLAG_ENDPOINT:
        snprintf(out, len, "tcp://HOST:PORT or ipc://PATH");
        break;
    default:
        snprintf(out, len, "a valid value");
        break;
    }
}

/* Convert one value into f->dest. 0 or -1 (why may say more). */
static int s_convert(const oq_flag_t *f, const char *v, char *why, size_t why_len)
{
    uint64_t u;
    switch (f->kind) {
    case OQ_FLAG_STRING:
        *(const char **)f->dest = v;
        return 0;
    case OQ_FLAG_UINT:
        if (oq_config_uint(v, f->min, f->max, &u) < 0)
            return -1;
        *(uint64_t *)f->dest = u;
        return 0;
    case OQ_FLAG_U32:
    case OQ_FLAG_MS:
        assert(f->max <= UINT32_MAX);
        if (oq_config_uint(v, f->min, f->max, &u) < 0)
            return -1;
        *(uint32_t *)f->dest = (uint32_t)u;
        return 0;
    case OQ_FLAG_SECONDS: {
        int64_t ms;
        if (oq_config_seconds(v, (int64_t)f->max, &ms) < 0 || ms < (int64_t)f->min)
            return -1;
        *(int64_t *)f->dest = ms;
        return 0;
    }
    case OQ_FLAG_DOUBLE: {
        /* Only a digit or a point may start it: strtod would take blanks,
           signs, "inf" and "nan". */
        if (!isdigit((unsigned char)v[0]) && v[0] != '.')
            return -1;
        errno = 0;
        char *end;
        double d = strtod(v, &end);
        if (errno || *end || !isfinite(d) || d < f->dmin || d > f->dmax)
            return -1;
        *(double *)f->dest = d;
        return 0;
    }
    case OQ_FLAG_BOOL:
        if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes")) {
            *(bool *)f->dest = true;
            return 0;
        }
        if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no")) {
            *(bool *)f->dest = false;
            return 0;
        }
        return -1;
    case OQ_FLAG_ENUM:
        for (int i = 0; f->words[i]; i++) {
            if (strcmp(v, f->words[i]) == 0) {
                *(int *)f->dest = i;
                return 0;
            }
        }
        return -1;
    case OQ_FLAG_ENDPOINT:
        if (!oq_flags_endpoint_valid(v))
            return -1;
        *(const char **)f->dest = v;
        return 0;
    case OQ_FLAG_CUSTOM:
        return f->parse(v, f->dest, why, why_len);
    case OQ_FLAG_SECTION:
        break;
    }
    return -1;
}

/* Convert, or print the error naming origin (a flag or a variable). */
static int s_apply(const char *program, const oq_flag_t *f, const char *origin, const char *v)
{
    char why[S_WHY_LEN] = "";
    if (s_convert(f, v, why, sizeof why) == 0)
        return 0;
    char expected[S_EXPECTED_LEN];
    if (why[0])
        snprintf(expected, sizeof expected, "%s", why);
    else
        s_expected(f, expected, sizeof expected);
    fprintf(stderr, "%s: invalid %s \"%s\": expected %s\n", program, origin, v, expected);
    return -1;
}

static void s_check_table(const oq_flag_t *flags, size_t count)
{
    assert(count <= OQ_FLAGS_MAX);
    for (size_t i = 0; i < count; i++) {
        const oq_flag_t *f = &flags[i];
        if (f->kind == OQ_FLAG_SECTION)
            continue;
        assert(f->name && f->dest);
        assert(f->kind != OQ_FLAG_ENUM || f->words);
        assert(f->kind != OQ_FLAG_CUSTOM || (f->parse && f->expected));
        assert(!f->repeat || f->kind == OQ_FLAG_CUSTOM);
        assert(!f->stop || f->kind == OQ_FLAG_BOOL);
        (void)f;
    }
}

int oq_flags_parse(const char *program, const oq_flag_t *flags, size_t count, int argc, char **argv)
{
    s_check_table(flags, count);
    struct option options[OQ_FLAGS_MAX + 1];
    const char *raw[OQ_FLAGS_MAX] = {0};
    bool given[OQ_FLAGS_MAX] = {0};
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (flags[i].kind == OQ_FLAG_SECTION)
            continue;
        options[n++] = (struct option){
            flags[i].name, flags[i].kind == OQ_FLAG_BOOL ? no_argument : required_argument, NULL,
            S_OPT_BASE + (int)i};
        if (flags[i].src)
            *flags[i].src = OQ_FLAG_SRC_NONE;
    }
    options[n] = (struct option){0, 0, 0, 0};

    /* optind 0 makes glibc start over, so a table can be parsed twice in
       one process (tests). opterr 0: the errors below name the flag. */
    optind = 0;
    opterr = 0;
    bool stop = false;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", options, NULL)) != -1) {
        if (opt == ':') {
            fprintf(stderr, "%s: %s needs a value (see --help)\n", program, argv[optind - 1]);
            return -1;
        }
        if (opt < S_OPT_BASE || opt >= S_OPT_BASE + (int)count) {
            fprintf(stderr, "%s: unknown flag \"%s\" (see --help)\n", program, argv[optind - 1]);
            return -1;
        }
        const oq_flag_t *f = &flags[opt - S_OPT_BASE];
        given[opt - S_OPT_BASE] = true;
        if (f->src)
            *f->src = OQ_FLAG_SRC_ARG;
        if (f->kind == OQ_FLAG_BOOL) {
            *(bool *)f->dest = true;
            stop |= f->stop;
        } else if (f->repeat) {
            char origin[S_ORIGIN_LEN];
            snprintf(origin, sizeof origin, "--%s", f->name);
            if (s_apply(program, f, origin, optarg) < 0)
                return -1;
        } else {
            raw[opt - S_OPT_BASE] = optarg; /* the last one wins */
        }
    }
    if (stop)
        return 1;
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument \"%s\" (see --help)\n", program, argv[optind]);
        return -1;
    }

    for (size_t i = 0; i < count; i++) {
        const oq_flag_t *f = &flags[i];
        if (f->kind == OQ_FLAG_SECTION)
            continue;
        char origin[S_ORIGIN_LEN];
        const char *v = NULL;
        if (raw[i]) {
            snprintf(origin, sizeof origin, "--%s", f->name);
            v = raw[i];
        } else if (given[i]) {
            continue; /* a BOOL or repeated flag, done above */
        } else if (f->env && (v = getenv(f->env)) && *v) {
            snprintf(origin, sizeof origin, "%s", f->env);
            if (f->src)
                *f->src = OQ_FLAG_SRC_ENV;
        } else if (f->def) {
            /* A bad default is the table's bug; say so like any value. */
            snprintf(origin, sizeof origin, "default of --%s", f->name);
            v = f->def;
        } else {
            continue;
        }
        if (s_apply(program, f, origin, v) < 0)
            return -1;
    }
    return 0;
}

/* Append text to the help line being built, wrapping at S_HELP_WIDTH. */
static void s_wrap(FILE *out, const char *text, int *col)
{
    const char *p = text;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        size_t word = strcspn(p, " ");
        if (*col > S_HELP_COL && *col + 1 + (int)word > S_HELP_WIDTH) {
            fprintf(out, "\n%*s", S_HELP_COL, "");
            *col = S_HELP_COL;
        } else if (*col > S_HELP_COL) {
            fputc(' ', out);
            (*col)++;
        }
        fprintf(out, "%.*s", (int)word, p);
        *col += (int)word;
        p += word;
    }
}

void oq_flags_help(const oq_flag_t *flags, size_t count, FILE *out)
{
    for (size_t i = 0; i < count; i++) {
        const oq_flag_t *f = &flags[i];
        if (f->kind == OQ_FLAG_SECTION) {
            fprintf(out, "%s%s\n", i ? "\n" : "", f->help);
            continue;
        }
        int col = fprintf(out, "  --%s", f->name);
        if (f->kind != OQ_FLAG_BOOL && f->arg)
            col += fprintf(out, " %s", f->arg);
        if (col >= S_HELP_COL - 1) {
            fprintf(out, "\n");
            col = 0;
        }
        fprintf(out, "%*s", S_HELP_COL - col, "");
        col = S_HELP_COL;
        char text[S_HELP_TEXT];
        int used = snprintf(text, sizeof text, "%s", f->help ? f->help : "");
        if (f->env && used >= 0 && (size_t)used < sizeof text)
            used += snprintf(text + used, sizeof text - (size_t)used, " [%s]", f->env);
        const char *def = f->def_text ? f->def_text : f->def;
        if (def && used >= 0 && (size_t)used < sizeof text)
            snprintf(text + used, sizeof text - (size_t)used, " (default %s)", def);
        s_wrap(out, text, &col);
        fputc('\n', out);
    }
}

int oq_flags_parse_log_level(const char *value, void *dest, char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    return oq_log_parse_level(value, dest);
}
