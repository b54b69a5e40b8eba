/*  mpcheck.c: one pass over the bytes with an explicit stack of "values still
    to read" per open container; no recursion, so depth is a plain counter. */
#include "mpcheck.h"

#include <stdint.h>
#include <stdio.h>

static uint64_t s_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

int oq_mpcheck(const void *data, size_t size, int max_depth, char *reason, size_t reason_len)
{
    const uint8_t *p = data;
    size_t pos = 0;
    uint64_t pending[64]; /* values left to read in each open container */
    int depth = 0;
    if (max_depth > 63)
        max_depth = 63;
    uint64_t top_left = 1; /* exactly one top-level object */

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(reason, reason_len, __VA_ARGS__);                                                 \
        return -1;                                                                                 \
    } while (0)
#define NEED(n)                                                                                    \
    do {                                                                                           \
        if (size - pos < (size_t)(n))                                                              \
            FAIL("truncated msgpack at byte %zu", pos);                                            \
    } while (0)

    while (top_left > 0 || depth > 0) {
        if (depth > 0 && pending[depth - 1] == 0) {
            depth--;
            continue;
        }
        if (depth > 0)
            pending[depth - 1]--;
        else
            top_left--;

        NEED(1);
        uint8_t b = p[pos++];
        uint64_t skip = 0;     /* bytes of data that follow */
        uint64_t children = 0; /* values inside, for containers */
        int container = 0;

        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            skip = 0;
        } else if (b >= 0x80 && b <= 0x8f) {
            children = 2 * (uint64_t)(b & 0x0f);
            container = 1;
        } else if (b >= 0x90 && b <= 0x9f) {
            children = b & 0x0f;
            container = 1;
        } else if (b >= 0xa0 && b <= 0xbf) {
            skip = b & 0x1f;
        } else {
            switch (b) {
            case 0xc4:
            case 0xd9:
                NEED(1);
                skip = s_be(p + pos, 1);
                pos += 1;
                break;
            case 0xc5:
            case 0xda:
                NEED(2);
                skip = s_be(p + pos, 2);
                pos += 2;
                break;
            case 0xc6:
            case 0xdb:
                NEED(4);
                skip = s_be(p + pos, 4);
                pos += 4;
                break;
            case 0xc7:
                NEED(1);
                skip = s_be(p + pos, 1) + 1;
                pos += 1;
                break;
            case 0xc8:
                NEED(2);
                skip = s_be(p + pos, 2) + 1;
                pos += 2;
                break;
            case 0xc9:
                NEED(4);
                skip = s_be(p + pos, 4) + 1;
                pos += 4;
                break;
            case 0xca:
                skip = 4;
                break;
            case 0xcb:
                skip = 8;
                break;
            case 0xcc:
            case 0xd0:
                skip = 1;
                break;
            case 0xcd:
            case 0xd1:
                skip = 2;
                break;
            case 0xce:
            case 0xd2:
                skip = 4;
                break;
            case 0xcf:
            case 0xd3:
                skip = 8;
                break;
            case 0xd4:
                skip = 2;
                break;
            case 0xd5:
                skip = 3;
                break;
            case 0xd6:
                skip = 5;
                break;
            case 0xd7:
                skip = 9;
                break;
            case 0xd8:
                skip = 17;
                break;
            case 0xdc:
                NEED(2);
                children = s_be(p + pos, 2);
                pos += 2;
                container = 1;
                break;
            case 0xdd:
                NEED(4);
                children = s_be(p + pos, 4);
                pos += 4;
                container = 1;
                break;
            case 0xde:
                NEED(2);
                children = 2 * s_be(p + pos, 2);
                pos += 2;
                container = 1;
                break;
            case 0xdf:
                NEED(4);
                children = 2 * s_be(p + pos, 4);
                pos += 4;
                container = 1;
                break;
            default:
                FAIL("reserved msgpack type byte 0x%02x at byte %zu", b, pos - 1);
            }
        }
        if (container) {
            /* Every value takes at least one byte: a count the rest of the
               input cannot hold is a lie, refused before anyone allocates. */
            if (children > size - pos)
                FAIL("container at byte %zu declares %llu values, only %zu bytes follow", pos,
                     (unsigned long long)children, size - pos);
            /* An empty container nests as deep as a full one: msgpack-c's
               unpacker stack counts both, so both count here. */
            if (depth >= max_depth)
                FAIL("msgpack nested deeper than %d", max_depth);
            if (children > 0)
                pending[depth++] = children;
        } else {
            NEED(skip);
            pos += skip;
        }
    }
    if (pos != size)
        FAIL("%zu bytes of trailing data after the message", size - pos);
    return 0;
#undef NEED
#undef FAIL
}
