/*  onceq/log.h: one-line logs to stderr, with a UTC timestamp, the program
    name and a level. The level comes from --log-level or ONCEQ_LOG_LEVEL. */
#ifndef ONCEQ_LOG_H
#define ONCEQ_LOG_H

typedef enum { OQ_LOG_DEBUG, OQ_LOG_INFO, OQ_LOG_WARN, OQ_LOG_ERROR } oq_log_level_t;

/* Set the program name shown in every line (borrowed; keep it alive). */
void oq_log_init(const char *program);

/* Set the lowest level printed. */
void oq_log_set_level(oq_log_level_t level);

/* Parse "debug", "info", "warn" or "error"; 0 on success, -1 if unknown. */
int oq_log_parse_level(const char *text, oq_log_level_t *level);

/* True if a message of this level would be printed. */
int oq_log_enabled(oq_log_level_t level);

void oq_log(oq_log_level_t level, const char *format, ...) __attribute__((format(printf, 2, 3)));

#define oq_debug(...) oq_log(OQ_LOG_DEBUG, __VA_ARGS__)
#define oq_info(...)  oq_log(OQ_LOG_INFO, __VA_ARGS__)
#define oq_warn(...)  oq_log(OQ_LOG_WARN, __VA_ARGS__)
#define oq_error(...) oq_log(OQ_LOG_ERROR, __VA_ARGS__)

#endif
