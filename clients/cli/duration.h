/*  duration.h: durations on the onceq tool's command line and in its
    output: a whole number and a unit, "30d", "12h", "90m", "45s". Parsed
    into seconds within bounds the caller gives; printed as the largest
    units that add up ("1d12h", "1h30m", "45s"). */
#ifndef ONCEQ_CLI_DURATION_H
#define ONCEQ_CLI_DURATION_H

#include <stddef.h>
#include <stdint.h>

/* The longest text oq_cli_duration_format writes, with its NUL. */
#define OQ_CLI_DURATION_TEXT_LEN 48

/* Parse text ("30d", "12h", "90m", "45s") into *seconds, which must lie in
   [min_s, max_s]. 0, or -1 with why (naming the limit it broke, or the
   form it wants). */
int oq_cli_duration_parse(const char *text, int64_t min_s, int64_t max_s, int64_t *seconds,
                          char *why, size_t why_len);

/* Write seconds as "1d2h3m4s" (zero parts left out; "0s" for 0) into out. */
void oq_cli_duration_format(int64_t seconds, char *out, size_t out_len);

#endif
