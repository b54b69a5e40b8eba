/*  test_mpcheck.c: the structural check that stands between untrusted bytes
    and msgpack-c's unpacker (common/src/mpcheck.c). What it accepts msgpack-c
    must unpack completely; what it refuses is truncated, lies about a length,
    nests too deep, uses the reserved byte 0xc1 or has bytes after the object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <msgpack.h>

#include "mpcheck.h"

#define DEPTH 32

typedef struct {
    const char *name;
    const char *bytes;
    size_t len;
} s_case_t;

#define B(name, bytes)                                                                             \
    {                                                                                              \
        name, bytes, sizeof bytes - 1                                                              \
    }

/* Run the check on a heap copy, so that AddressSanitizer sees any over-read. */
static int s_check(const void *data, size_t len, int max_depth, char *why, size_t why_len)
{
    void *copy = malloc(len ? len : 1);
    memcpy(copy, data, len);
    int rc = oq_mpcheck(copy, len, max_depth, why, why_len);
    free(copy);
    return rc;
}

static void s_accepts(const char *name, const void *data, size_t len, int max_depth)
{
    char why[160] = "";
    if (s_check(data, len, max_depth, why, sizeof why) != 0)
        fail_msg("%s: refused: %s", name, why);
    /* ... and msgpack-c agrees that it is exactly one object. */
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    msgpack_unpack_return rc = msgpack_unpack_next(&u, data, len, &off);
    if (rc != MSGPACK_UNPACK_SUCCESS || off != len)
        fail_msg("%s: accepted, but msgpack-c says %d after %zu of %zu bytes", name, rc, off, len);
    msgpack_unpacked_destroy(&u);
}

static void s_refuses(const char *name, const void *data, size_t len, int max_depth)
{
    char why[160];
    memset(why, 'Z', sizeof why);
    if (s_check(data, len, max_depth, why, sizeof why) != -1)
        fail_msg("%s: accepted", name);
    if (!memchr(why, 0, sizeof why) || why[0] == 0)
        fail_msg("%s: no reason given", name);
}

/* One object of each msgpack format, with lengths in every width. */
static const s_case_t s_valid[] = {
    B("nil", "\xc0"),
    B("false", "\xc2"),
    B("true", "\xc3"),
    B("positive fixint 0", "\x00"),
    B("positive fixint 127", "\x7f"),
    B("negative fixint -1", "\xff"),
    B("negative fixint -32", "\xe0"),
    B("uint8", "\xcc\xff"),
    B("uint16", "\xcd\xff\xff"),
    B("uint32", "\xce\xff\xff\xff\xff"),
    B("uint64", "\xcf\xff\xff\xff\xff\xff\xff\xff\xff"),
    B("int8", "\xd0\x80"),
    B("int16", "\xd1\x80\x00"),
    B("int32", "\xd2\x80\x00\x00\x00"),
    B("int64", "\xd3\x80\x00\x00\x00\x00\x00\x00\x00"),
    B("float32", "\xca\x3e\x80\x00\x00"),
    B("float64", "\xcb\x3f\xd0\x00\x00\x00\x00\x00\x00"),
    B("fixstr empty", "\xa0"),
    B("fixstr", "\xa3"
                "abc"),
    B("fixstr 31", "\xbf"
                   "0123456789012345678901234567890"),
    B("str8", "\xd9\x03"
              "abc"),
    B("str8 empty", "\xd9\x00"),
    B("str16", "\xda\x00\x03"
               "abc"),
    B("str32", "\xdb\x00\x00\x00\x03"
               "abc"),
    B("bin8", "\xc4\x02\x00\xff"),
    B("bin8 empty", "\xc4\x00"),
    B("bin16", "\xc5\x00\x02\x00\xff"),
    B("bin32", "\xc6\x00\x00\x00\x02\x00\xff"),
    B("fixext1", "\xd4\x01\xaa"),
    B("fixext2", "\xd5\x01\xaa\xbb"),
    B("fixext4", "\xd6\xff\x00\x00\x00\x00"), /* a timestamp */
    B("fixext8", "\xd7\x01\x00\x00\x00\x00\x00\x00\x00\x00"),
    B("fixext16", "\xd8\x01\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"),
    B("ext8", "\xc7\x03\x05"
              "abc"),
    B("ext8 empty", "\xc7\x00\x05"),
    B("ext16", "\xc8\x00\x03\x05"
               "abc"),
    B("ext32", "\xc9\x00\x00\x00\x03\x05"
               "abc"),
    B("fixarray empty", "\x90"),
    B("fixarray", "\x93\x01\xc0\xa1x"),
    B("array16", "\xdc\x00\x02\x01\x02"),
    B("array32", "\xdd\x00\x00\x00\x02\x01\x02"),
    B("array16 empty", "\xdc\x00\x00"),
    B("fixmap empty", "\x80"),
    B("fixmap", "\x82\xa1k\x01\xa1m\x90"),
    B("map16", "\xde\x00\x01\xa1k\x01"),
    B("map32", "\xdf\x00\x00\x00\x01\xa1k\x01"),
    B("map32 empty", "\xdf\x00\x00\x00\x00"),
    B("map with non-str keys", "\x83\x01\x02\x90\x80\xc0\xc3"),
    B("siblings", "\x93\x91\x01\x91\x02\x81\x01\x91\x03"),
    B("everything", "\x8a\xa1n\xc0\xa1"
                    "b\xc3\xa1i\xd3\x80\x00\x00\x00\x00\x00\x00\x00"
                    "\xa1"
                    "f\xcb\x3f\xd0\x00\x00\x00\x00\x00\x00\xa1s\xd9\x02hi"
                    "\xa1"
                    "B\xc5\x00\x01\x07\xa1x\xc7\x01\x02\x03\xa1"
                    "a\x92\x01\x90"
                    "\xa1m\x81\x80\x91\xa0\xa1"
                    "e\xd6\xff\x00\x00\x00\x00"),
};

static void test_accepts_every_type(void **state)
{
    for (size_t k = 0; k < sizeof s_valid / sizeof s_valid[0]; k++)
        s_accepts(s_valid[k].name, s_valid[k].bytes, s_valid[k].len, DEPTH);
}

/* Long bodies in the 16- and 32-bit forms, built with msgpack-c's packer. */
static void test_accepts_long_bodies(void **state)
{
    const size_t sizes[] = {255, 256, 65535, 65536, 100000};
    char *body = calloc(1, 100000);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        msgpack_sbuffer buf;
        msgpack_sbuffer_init(&buf);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 4);
        msgpack_pack_str(&pk, sizes[k]);
        msgpack_pack_str_body(&pk, body, sizes[k]);
        msgpack_pack_bin(&pk, sizes[k]);
        msgpack_pack_bin_body(&pk, body, sizes[k]);
        msgpack_pack_ext(&pk, sizes[k], 9);
        msgpack_pack_ext_body(&pk, body, sizes[k]);
        msgpack_pack_array(&pk, (uint32_t)sizes[k]);
        for (size_t e = 0; e < sizes[k]; e++)
            msgpack_pack_nil(&pk);
        char name[32];
        snprintf(name, sizeof name, "bodies of %zu", sizes[k]);
        s_accepts(name, buf.data, buf.size, DEPTH);
        msgpack_sbuffer_destroy(&buf);
    }
    free(body);
}

/* Every proper prefix of every valid object is refused. */
static void test_refuses_every_truncation(void **state)
{
    for (size_t k = 0; k < sizeof s_valid / sizeof s_valid[0]; k++) {
        for (size_t n = 0; n < s_valid[k].len; n++) {
            char name[96];
            snprintf(name, sizeof name, "%s cut to %zu bytes", s_valid[k].name, n);
            s_refuses(name, s_valid[k].bytes, n, DEPTH);
        }
    }
}

/* A container's count or a body's length that the remaining bytes cannot
   hold: refused before msgpack-c would allocate for it. */
static const s_case_t s_lying[] = {
    B("str8 200 of 3", "\xd9\xc8"
                       "abc"),
    B("str16 65535 of 3", "\xda\xff\xff"
                          "abc"),
    B("str32 2^32-1", "\xdb\xff\xff\xff\xff"
                      "abc"),
    B("fixstr 5 of 2", "\xa5"
                       "ab"),
    B("bin8 2 of 1", "\xc4\x02\x00"),
    B("bin32 2^32-1", "\xc6\xff\xff\xff\xff\x00"),
    B("ext8 3 of 2", "\xc7\x03\x05"
                     "ab"),
    B("ext32 2^32-1", "\xc9\xff\xff\xff\xff\x05\x00"),
    B("fixext16 of 4", "\xd8\x01\x00\x01\x02"),
    B("fixarray 3 of 2", "\x93\x01\x01"),
    B("array16 65535", "\xdc\xff\xff\x01\x01\x01"),
    B("array32 2^32-1", "\xdd\xff\xff\xff\xff\x01"),
    B("fixmap 1 with a key only", "\x81\xa1k"),
    B("map16 65535", "\xde\xff\xff\xa1k\x01"),
    B("map32 2^32-1", "\xdf\xff\xff\xff\xff\xa1k\x01"),
    B("map32 2^31 pairs, count doubled", "\xdf\x80\x00\x00\x00\x01\x01"),
    B("nested lie", "\x91\x91\xdd\x00\x01\x00\x00\x01"),
};

static void test_refuses_lying_lengths(void **state)
{
    for (size_t k = 0; k < sizeof s_lying / sizeof s_lying[0]; k++)
        s_refuses(s_lying[k].name, s_lying[k].bytes, s_lying[k].len, DEPTH);
    /* The boundary: a count the bytes can just hold is fine. */
    s_accepts("fixarray 3 of 3", "\x93\x01\x01\x01", 4, DEPTH);
    s_accepts("fixmap 1 of 1", "\x81\x01\x01", 3, DEPTH);
}

/* levels nested arrays (the outermost is level 1), innermost holding an int
   or, if empty_inside, nothing. */
static size_t s_nest(char *out, int levels, int empty_inside)
{
    size_t n = 0;
    for (int k = 0; k < levels; k++)
        out[n++] = (k == levels - 1 && empty_inside) ? '\x90' : '\x91';
    if (!empty_inside)
        out[n++] = '\x01';
    return n;
}

static void test_depth_limit_boundary(void **state)
{
    char buf[1200];
    const int limits[] = {1, 2, 5, DEPTH, 63};
    for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++) {
        int max = limits[k];
        for (int empty = 0; empty <= 1; empty++) {
            char name[64];
            snprintf(name, sizeof name, "%d levels%s, limit %d", max, empty ? " (empty)" : "", max);
            size_t n = s_nest(buf, max, empty);
            char why[160];
            if (oq_mpcheck(buf, n, max, why, sizeof why) != 0)
                fail_msg("%s: refused: %s", name, why);
            snprintf(name, sizeof name, "%d levels%s, limit %d", max + 1, empty ? " (empty)" : "",
                     max);
            n = s_nest(buf, max + 1, empty);
            s_refuses(name, buf, n, max);
        }
    }
    /* Maps count like arrays: {k:{k:1}} is two levels. */
    s_accepts("two maps", "\x81\x01\x81\x01\x01", 5, 2);
    s_refuses("two maps, limit 1", "\x81\x01\x81\x01\x01", 5, 1);
    /* A map key may be a container, and it nests too. */
    s_refuses("array as map key, limit 1", "\x81\x91\x01\x01", 4, 1);
    /* Scalars have no depth: a bare int passes a limit of 0. */
    s_accepts("int at limit 0", "\x01", 1, 0);
    s_refuses("empty array at limit 0", "\x90", 1, 0);
    /* Siblings do not add up. */
    s_accepts("siblings at limit 2", "\x93\x91\x01\x91\x02\x90", 6, 2);
}

/* At OQ_MAX_DEPTH (32), what the check accepts is exactly what msgpack-c's
   fixed unpack stack can hold. */
static void test_depth_matches_msgpack_c(void **state)
{
    char buf[64];
    for (int empty = 0; empty <= 1; empty++) {
        size_t n = s_nest(buf, DEPTH, empty);
        s_accepts("32 levels", buf, n, DEPTH);
    }
}

/* Bug: an empty container did not count toward the depth, so 32 levels with
   an empty 33rd passed the check and then failed in msgpack-c. */
static void test_empty_container_counts_toward_depth(void **state)
{
    char buf[64];
    size_t n = s_nest(buf, DEPTH + 1, 1);
    s_refuses("33 levels, the last empty", buf, n, DEPTH);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    assert_int_not_equal(msgpack_unpack_next(&u, buf, n, &off), MSGPACK_UNPACK_SUCCESS);
    msgpack_unpacked_destroy(&u);
}

/* Far deeper than the stack inside the check, with a limit above it. */
static void test_deep_input_does_not_overflow(void **state)
{
    char buf[1200];
    for (int levels = 60; levels <= 1000; levels += 1) {
        size_t n = s_nest(buf, levels, levels % 2);
        char why[160];
        int rc = oq_mpcheck(buf, n, 1000, why, sizeof why);
        /* The check's own stack holds 63 levels, whatever the limit asked. */
        if (rc != (levels > 63 ? -1 : 0))
            fail_msg("%d levels: rc %d", levels, rc);
    }
    memset(buf, '\x91', sizeof buf);
    s_refuses("1200 open arrays", buf, sizeof buf, 1000);
}

static void test_refuses_trailing_data(void **state)
{
    s_refuses("int then int", "\x01\x02", 2, DEPTH);
    s_refuses("map then NUL", "\x80\x00", 2, DEPTH);
    s_refuses("array then nil", "\x90\xc0", 2, DEPTH);
    s_refuses("two maps", "\x81\x01\x01\x81\x01\x01", 6, DEPTH);
    s_refuses("str then junk", "\xa1x\xff", 3, DEPTH);
    for (size_t k = 0; k < sizeof s_valid / sizeof s_valid[0]; k++) {
        char buf[160];
        memcpy(buf, s_valid[k].bytes, s_valid[k].len);
        buf[s_valid[k].len] = 0;
        char name[96];
        snprintf(name, sizeof name, "%s then one byte", s_valid[k].name);
        s_refuses(name, buf, s_valid[k].len + 1, DEPTH);
    }
}

static void test_refuses_reserved_c1(void **state)
{
    s_refuses("0xc1 alone", "\xc1", 1, DEPTH);
    s_refuses("0xc1 in an array", "\x92\x01\xc1", 3, DEPTH);
    s_refuses("0xc1 as a map key", "\x81\xc1\x01", 3, DEPTH);
    s_refuses("0xc1 as a map value", "\x81\x01\xc1", 3, DEPTH);
    s_refuses("0xc1 deep", "\x91\x91\x91\x81\xa1k\xc1", 7, DEPTH);
    /* Inside a str or bin body it is only data. */
    s_accepts("0xc1 in a str", "\xa1\xc1", 2, DEPTH);
    s_accepts("0xc1 in a bin", "\xc4\x01\xc1", 3, DEPTH);
}

static void test_refuses_empty_input(void **state)
{
    s_refuses("nothing", "", 0, DEPTH);
    /* No reason buffer at all is allowed. */
    assert_int_equal(oq_mpcheck("\xc1", 1, DEPTH, NULL, 0), -1);
    assert_int_equal(oq_mpcheck("\x80", 1, DEPTH, NULL, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts_every_type),
        cmocka_unit_test(test_accepts_long_bodies),
        cmocka_unit_test(test_refuses_every_truncation),
        cmocka_unit_test(test_refuses_lying_lengths),
        cmocka_unit_test(test_depth_limit_boundary),
        cmocka_unit_test(test_depth_matches_msgpack_c),
        cmocka_unit_test(test_empty_container_counts_toward_depth),
        cmocka_unit_test(test_deep_input_does_not_overflow),
        cmocka_unit_test(test_refuses_trailing_data),
        cmocka_unit_test(test_refuses_reserved_c1),
        cmocka_unit_test(test_refuses_empty_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
