/*  web_buf.h: a growing text buffer for the pages onceq-web renders, with
    HTML escaping. A page is bounded (OQ_WEB_MAX_PAGE_BYTES): past it the
    buffer stops growing and says so, and the page is refused whole rather
    than cut in the middle of a tag. Out of memory is the same: the caller
    checks oq_web_buf_failed once, at the end. */
#ifndef ONCEQ_WEB_BUF_H
#define ONCEQ_WEB_BUF_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>

/* Largest page onceq-web renders: 4 MiB (a page of the failed store holds
   at most OQ_WEB_PAGE_MAX jobs, each with its payload cut short). */
#define OQ_WEB_MAX_PAGE_BYTES (4u * 1024 * 1024)

typedef struct {
    char *data;  /* NUL-terminated text, or NULL before the first append */
    size_t len;  /* bytes in data, without the NUL */
    size_t cap;  /* bytes allocated */
    bool failed; /* out of memory or over OQ_WEB_MAX_PAGE_BYTES */
} oq_web_buf_t;

/* Append len bytes as they are. */
void oq_web_buf_add(oq_web_buf_t *self, const char *text, size_t len);
/* Append a C string as it is (markup). */
void oq_web_buf_puts(oq_web_buf_t *self, const char *text);
/* Append formatted text as it is: the caller escapes what it inserts. */
void oq_web_buf_printf(oq_web_buf_t *self, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Append len bytes escaped for HTML text and attribute values. */
void oq_web_buf_escape(oq_web_buf_t *self, const char *text, size_t len);
/* Append a msgpack string, or a scalar's text, escaped; "-" for NULL. */
void oq_web_buf_value(oq_web_buf_t *self, const msgpack_object *o);
/* Append len bytes percent-encoded for a URL's query. */
void oq_web_buf_urlencode(oq_web_buf_t *self, const char *text, size_t len);
/* True once an append failed: the text is not whole. */
bool oq_web_buf_failed(const oq_web_buf_t *self);
/* Hand the text over (caller frees) and empty the buffer. */
char *oq_web_buf_take(oq_web_buf_t *self, size_t *len);
/* Free the text. */
void oq_web_buf_reset(oq_web_buf_t *self);

#endif
