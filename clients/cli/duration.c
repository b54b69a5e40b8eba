/*  duration.c: parsing and printing durations for the onceq tool. */
#include "duration.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define S_MINUTE_S 60
#define S_HOUR_S   (60 * S_MINUTE_S)
#define S_DAY_S    (24 * S_HOUR_S)
/* Digits taken before the unit: more would overflow long before any bound. */
#define S_MAX_DIGITS 12

static int64_t s_unit_s(char unit)
{
    switch (unit) {
    case 's':
        return 1;
    case 'm':
        return S_MINUTE_S;
    case 'h':
        return S_HOUR_S;
    case 'd':
        return S_DAY_S;
    default:
        return 0;
    }
}

int oq_cli_duration_parse(const char *text, int64_t min_s, int64_t max_s, int64_t *seconds,
                          char *why, size_t why_len)
{
    char lo[OQ_CLI_DURATION_TEXT_LEN], hi[OQ_CLI_DURATION_TEXT_LEN];
    oq_cli_duration_format(min_s, lo, sizeof lo);
    oq_cli_duration_format(max_s, hi, sizeof hi);
    size_t len = strlen(text), digits = strspn(text, "0123456789");
    int64_t unit = len >= 2 ? s_unit_s(text[len - 1]) : 0;
    if (digits == 0 || digits != len - 1 || unit == 0) {
        snprintf(why, why_len,
                 "'%s' is not a duration: a whole number and a unit, s, m, h or d (e.g. 30d, "
                 "12h, 90m, 45s), from %s to %s",
                 text, lo, hi);
        return -1;
    }
    int64_t n = 0;
    bool too_long = digits > S_MAX_DIGITS;
    for (size_t i = 0; !too_long && i < digits; i++)
        n = n * 10 + (text[i] - '0');
    if (too_long || n > max_s / unit) {
        snprintf(why, why_len, "'%s' is longer than the limit of %s", text, hi);
        return -1;
    }
    if (n * unit < min_s) {
        snprintf(why, why_len, "'%s' is shorter than the least of %s", text, lo);
        return -1;
    }
    *seconds = n * unit;
    return 0;
}

void oq_cli_duration_format(int64_t seconds, char *out, size_t out_len)
{
    static const struct {
        char unit;
        int64_t s;
    } parts[] = {{'d', S_DAY_S}, {'h', S_HOUR_S}, {'m', S_MINUTE_S}, {'s', 1}};
    if (out_len == 0)
        return;
    out[0] = 0;
    if (seconds <= 0) {
        snprintf(out, out_len, "0s");
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0] && n < out_len; i++) {
        int64_t count = seconds / parts[i].s;
        seconds %= parts[i].s;
        if (count)
            n += (size_t)snprintf(out + n, out_len - n, "%" PRId64 "%c", count, parts[i].unit);
    }
}
