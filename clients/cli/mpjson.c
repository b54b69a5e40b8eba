/*  mpjson.c: JSON <-> msgpack for the command line tool. */
#include "mpjson.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- JSON -> msgpack --------------------------------------------------- */

const char *oq_mpjson_kind(const json_t *value)
{
    switch (json_typeof(value)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* Checked before packing anything so that a refused value leaves no half
   written map behind in the caller's buffer. */
static bool s_depth_ok(json_t *value, int depth_left)
{
    if (!json_is_object(value) && !json_is_array(value))
        return true;
    if (depth_left <= 0)
        return false;
    if (json_is_array(value)) {
        size_t i;
        json_t *item;
        json_array_foreach(value, i, item)
        {
            if (!s_depth_ok(item, depth_left - 1))
                return false;
        }
        return true;
    }
    const char *key;
    json_t *item;
    json_object_foreach(value, key, item)
    {
        if (!s_depth_ok(item, depth_left - 1))
            return false;
    }
    return true;
}

static void s_pack(msgpack_packer *pk, json_t *value)
{
    switch (json_typeof(value)) {
    case JSON_OBJECT: {
        msgpack_pack_map(pk, json_object_size(value));
        const char *key;
        size_t key_len;
        json_t *item;
        json_object_keylen_foreach(value, key, key_len, item)
        {
            msgpack_pack_str(pk, key_len);
            msgpack_pack_str_body(pk, key, key_len);
            s_pack(pk, item);
        }
        break;
    }
    case JSON_ARRAY: {
        msgpack_pack_array(pk, json_array_size(value));
        size_t i;
        json_t *item;
        json_array_foreach(value, i, item)
        {
            s_pack(pk, item);
        }
        break;
    }
    case JSON_STRING: {
        size_t n = json_string_length(value);
        msgpack_pack_str(pk, n);
        msgpack_pack_str_body(pk, json_string_value(value), n);
        break;
    }
    case JSON_INTEGER:
        /* msgpack-c packs a non-negative int64 as a uint in the smallest
           width, which is what every other msgpack producer does too. */
        msgpack_pack_int64(pk, json_integer_value(value));
        break;
    case JSON_REAL:
        msgpack_pack_double(pk, json_real_value(value));
        break;
    case JSON_TRUE:
        msgpack_pack_true(pk);
        break;
    case JSON_FALSE:
        msgpack_pack_false(pk);
        break;
    case JSON_NULL:
        msgpack_pack_nil(pk);
        break;
    }
}

int oq_mpjson_pack(msgpack_packer *pk, json_t *value, int max_depth, char *why, size_t why_len)
{
    if (!s_depth_ok(value, max_depth)) {
        snprintf(why, why_len, "%s nested deeper than %d levels", oq_mpjson_kind(value), max_depth);
        return -1;
    }
    s_pack(pk, value);
    return 0;
}

/* ---- msgpack -> JSON --------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (at most n bytes), or 0. */
static size_t s_utf8_seq(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        if (c == 0xed)
            hi = 0x9f; /* UTF-16 surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        if (c == 0xf4)
            hi = 0x8f; /* above U+10FFFF */
    } else
        return 0;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

/* A copy of p[n] with every byte that is not part of valid UTF-8 replaced by
   U+FFFD, or NULL if out of memory. Caller frees. */
static char *s_utf8_clean(const char *p, size_t n, size_t *out_len)
{
    static const char replacement[] = "\xef\xbf\xbd";
    const size_t rep_len = sizeof replacement - 1;
    char *out = malloc(n * rep_len + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len = s_utf8_seq((const unsigned char *)p + i, n - i);
        if (len == 0) {
            memcpy(out + o, replacement, rep_len);
            o += rep_len;
            i++;
        } else {
            memcpy(out + o, p + i, len);
            o += len;
            i += len;
        }
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

static json_t *s_string(const char *p, size_t n)
{
    json_t *s = json_stringn(p, n);
    if (s)
        return s;
    size_t clean_len;
    char *clean = s_utf8_clean(p, n, &clean_len);
    if (!clean)
        return NULL;
    s = json_stringn(clean, clean_len);
    free(clean);
    return s;
}

static json_t *s_base64(const char *p, size_t n)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *b = (const unsigned char *)p;
    char *out = malloc((n + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)b[i + 1] << 8;
        if (i + 2 < n)
            v |= b[i + 2];
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? alphabet[v & 63] : '=';
    }
    json_t *s = json_stringn(out, o);
    free(out);
    return s;
}

/* A map key as JSON object key text: a string as itself, anything else as
   its JSON text (1 -> "1", [1,2] -> "[1,2]"). Caller frees. */
static char *s_key_text(const msgpack_object *key, size_t *len)
{
    if (key->type == MSGPACK_OBJECT_STR)
        return s_utf8_clean(key->via.str.ptr, key->via.str.size, len);
    json_t *value = oq_mpjson_from_object(key);
    if (!value)
        return NULL;
    char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(value);
    if (text)
        *len = strlen(text);
    return text;
}

json_t *oq_mpjson_from_object(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return json_null();
    case MSGPACK_OBJECT_BOOLEAN:
        return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 <= (uint64_t)INT64_MAX)
            return json_integer((json_int_t)o->via.u64);
        else {
            char digits[24];
            snprintf(digits, sizeof digits, "%" PRIu64, o->via.u64);
            return json_string(digits);
        }
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        /* JSON has no NaN or infinity. */
        return isfinite(o->via.f64) ? json_real(o->via.f64) : json_null();
    case MSGPACK_OBJECT_STR:
        return s_string(o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_BIN:
        return s_base64(o->via.bin.ptr, o->via.bin.size);
    case MSGPACK_OBJECT_EXT:
        return json_pack("{s:i, s:o}", "ext", (json_int_t)o->via.ext.type, "data",
                         s_base64(o->via.ext.ptr, o->via.ext.size));
    case MSGPACK_OBJECT_ARRAY: {
        json_t *array = json_array();
        for (uint32_t i = 0; array && i < o->via.array.size; i++) {
            json_t *item = oq_mpjson_from_object(&o->via.array.ptr[i]);
            if (!item || json_array_append_new(array, item) < 0) {
                json_decref(array);
                return NULL;
            }
        }
        return array;
    }
    case MSGPACK_OBJECT_MAP: {
        json_t *object = json_object();
        for (uint32_t i = 0; object && i < o->via.map.size; i++) {
            size_t key_len = 0;
            char *key = s_key_text(&o->via.map.ptr[i].key, &key_len);
            json_t *item = key ? oq_mpjson_from_object(&o->via.map.ptr[i].val) : NULL;
            int rc = item ? json_object_setn_new(object, key, key_len, item) : -1;
            free(key);
            if (rc < 0) {
                json_decref(object);
                return NULL;
            }
        }
        return object;
    }
    }
    return json_null();
}
