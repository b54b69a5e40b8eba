/*  log.c: stderr logging. One fprintf per line, so lines from several
    processes sharing a terminal or file do not interleave mid-line. */
#include "onceq/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static const char *s_program = "onceq";
static oq_log_level_t s_level = OQ_LOG_INFO;
static const char *s_names[] = {"debug", "info", "warn", "error"};

void oq_log_init(const char *program)
{
    s_program = program;
}

void oq_log_set_level(oq_log_level_t level)
{
    s_level = level;
}

int oq_log_parse_level(const char *text, oq_log_level_t *level)
{
    for (int i = 0; i <= OQ_LOG_ERROR; i++) {
        if (strcmp(text, s_names[i]) == 0) {
            *level = (oq_log_level_t)i;
            return 0;
        }
    }
    return -1;
}

int oq_log_enabled(oq_log_level_t level)
{
    return level >= s_level;
}

void oq_log(oq_log_level_t level, const char *format, ...)
{
    if (level < s_level)
        return;
    char text[2048];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(stderr, "%s.%03dZ %s %s: %s\n", stamp, (int)(tv.tv_usec / 1000), s_program,
            s_names[level], text);
}
