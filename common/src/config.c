/*  config.c: strict parsers for flags and environment values. */
#include "onceq/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *oq_config_str(const char *flag_value, const char *env, const char *fallback)
{
    if (flag_value)
        return flag_value;
    const char *v = env ? getenv(env) : NULL;
    if (v && *v)
        return v;
    return fallback;
}

int oq_config_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    /* strtoull skips blanks and accepts a sign (" -1" wraps to 2^64-1): only
       a digit may start the text. */
    if (!text || !isdigit((unsigned char)*text))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int oq_config_seconds(const char *text, int64_t max_ms, int64_t *ms)
{
    if (!text || !*text || *text == '-' || *text == '+')
        return -1;
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (errno || *end || !isfinite(v) || v < 0 || v * 1000.0 > (double)max_ms)
        return -1;
    *ms = (int64_t)llround(v * 1000.0);
    return 0;
}

int oq_config_backoff(const char *text, int64_t *ms, uint32_t max, uint32_t *n)
{
    if (!text || !*text)
        return -1;
    char copy[512];
    if (strlen(text) >= sizeof copy)
        return -1;
    strcpy(copy, text);
    uint32_t count = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (count >= max || oq_config_seconds(tok, 30LL * 24 * 3600 * 1000, &ms[count]) < 0)
            return -1;
        count++;
    }
    if (count == 0 || text[strlen(text) - 1] == ',' || text[0] == ',' || strstr(text, ",,"))
        return -1;
    *n = count;
    return 0;
}
