/*  onceq/config.h: parsing of command-line values and their environment
    fallbacks, shared by every binary so that "1.5" seconds or a backoff list
    means the same everywhere. All parsers are strict: trailing junk, empty
    text and out-of-range values are refused. */
#ifndef ONCEQ_CONFIG_H
#define ONCEQ_CONFIG_H

#include <stdint.h>

/* flag_value if set, else the environment variable env if set and not empty,
   else fallback. Borrowed. */
const char *oq_config_str(const char *flag_value, const char *env, const char *fallback);

/* Parse an unsigned integer in [min, max]. 0 on success, -1 otherwise. */
int oq_config_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out);

/* Parse seconds ("90", "0.25") into milliseconds in [0, max_ms]. 0 or -1. */
int oq_config_seconds(const char *text, int64_t max_ms, int64_t *ms);

/* Parse a backoff list of seconds ("10,60,300") into ms[], at most max steps;
 *n gets the count. 0 or -1. */
int oq_config_backoff(const char *text, int64_t *ms, uint32_t max, uint32_t *n);

#endif
