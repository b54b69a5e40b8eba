/*  web_buf.c: see web_buf.h. */
#include "web_buf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* First allocation: most pages fit in it. */
#define S_FIRST_CAP_BYTES 16384

static bool s_reserve(oq_web_buf_t *self, size_t more)
{
    if (self->failed)
        return false;
    if (self->len + more + 1 > OQ_WEB_MAX_PAGE_BYTES) {
        self->failed = true;
        return false;
    }
    if (self->len + more + 1 <= self->cap)
        return true;
    size_t cap = self->cap ? self->cap : S_FIRST_CAP_BYTES;
    while (cap < self->len + more + 1)
        cap *= 2;
    char *data = realloc(self->data, cap);
    if (!data) {
        self->failed = true;
        return false;
    }
    self->data = data;
    self->cap = cap;
    return true;
}

void oq_web_buf_add(oq_web_buf_t *self, const char *text, size_t len)
{
    if (!s_reserve(self, len))
        return;
    memcpy(self->data + self->len, text, len);
    self->len += len;
    self->data[self->len] = 0;
}

void oq_web_buf_puts(oq_web_buf_t *self, const char *text)
{
    oq_web_buf_add(self, text, strlen(text));
}

void oq_web_buf_printf(oq_web_buf_t *self, const char *format, ...)
{
    char small[512];
    va_list args;
    va_start(args, format);
    int n = vsnprintf(small, sizeof small, format, args);
    va_end(args);
    if (n < 0) {
        self->failed = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        oq_web_buf_add(self, small, (size_t)n);
        return;
    }
    if (!s_reserve(self, (size_t)n))
        return;
    va_start(args, format);
    vsnprintf(self->data + self->len, (size_t)n + 1, format, args);
    va_end(args);
    self->len += (size_t)n;
}

void oq_web_buf_escape(oq_web_buf_t *self, const char *text, size_t len)
{
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        const char *entity = NULL;
        switch (text[i]) {
        case '&':
            entity = "&amp;";
            break;
        case '<':
            entity = "&lt;";
            break;
        case '>':
            entity = "&gt;";
            break;
        case '"':
            entity = "&quot;";
            break;
        case '\'':
            entity = "&#39;";
            break;
        case 0:
            entity = "\xef\xbf\xbd"; /* a NUL shows as U+FFFD */
            break;
        default:
            continue;
        }
        oq_web_buf_add(self, text + start, i - start);
        oq_web_buf_puts(self, entity);
        start = i + 1;
    }
    oq_web_buf_add(self, text + start, len - start);
}

void oq_web_buf_value(oq_web_buf_t *self, const msgpack_object *o)
{
    if (!o) {
        oq_web_buf_puts(self, "-");
        return;
    }
    switch (o->type) {
    case MSGPACK_OBJECT_STR:
        oq_web_buf_escape(self, o->via.str.ptr, o->via.str.size);
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        oq_web_buf_printf(self, "%" PRIu64, o->via.u64);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        oq_web_buf_printf(self, "%" PRId64, o->via.i64);
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        oq_web_buf_printf(self, "%g", o->via.f64);
        break;
    case MSGPACK_OBJECT_BOOLEAN:
        oq_web_buf_puts(self, o->via.boolean ? "yes" : "no");
        break;
    case MSGPACK_OBJECT_ARRAY:
        if (o->via.array.size == 0)
            oq_web_buf_puts(self, "*");
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i)
                oq_web_buf_puts(self, ", ");
            oq_web_buf_value(self, &o->via.array.ptr[i]);
        }
        break;
    default:
        oq_web_buf_puts(self, "-");
        break;
    }
}

void oq_web_buf_urlencode(oq_web_buf_t *self, const char *text, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            oq_web_buf_add(self, (const char *)&text[i], 1);
        } else {
            char enc[3] = {'%', hex[c >> 4], hex[c & 15]};
            oq_web_buf_add(self, enc, 3);
        }
    }
}

bool oq_web_buf_failed(const oq_web_buf_t *self)
{
    return self->failed;
}

char *oq_web_buf_take(oq_web_buf_t *self, size_t *len)
{
    if (!self->data)
        s_reserve(self, 0);
    char *data = self->data;
    *len = self->len;
    if (data)
        data[self->len] = 0;
    self->data = NULL;
    self->len = self->cap = 0;
    return data;
}

void oq_web_buf_reset(oq_web_buf_t *self)
{
    free(self->data);
    self->data = NULL;
    self->len = self->cap = 0;
    self->failed = false;
}
