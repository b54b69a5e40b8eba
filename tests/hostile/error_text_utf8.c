/*  error_text_utf8: an error that quotes what a peer sent is valid UTF-8.
    A raw worker sends ready with a type and a queue name that are not
    UTF-8, and a producer a command name that is not: each error's message
    is a msgpack str a strict decoder reads (valid UTF-8), with the bytes
    shown as \xNN, where they were copied raw. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include <cmocka.h>

#include "harness.h"
#include "wire_raw.h"

#define S_PEER_WAIT_MS 10000

static int s_setup(void **state)
{
    *state = it_new("error_utf8");
    return *state ? 0 : -1;
}

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, at most
   U+10FFFF. */
static bool s_utf8_valid(const unsigned char *p, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char c = p[i];
        size_t more;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            more = 1, cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            more = 2, cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            more = 3, cp = c & 0x07;
        } else {
            return false;
        }
        for (size_t k = 1; k <= more; k++) {
            if (i + k >= len || (p[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + k] & 0x3f);
        }
        if ((more == 2 && cp < 0x800) || (more == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += more + 1;
    }
    return true;
}

/* The next error on sock: its message must be valid UTF-8 and contain want. */
static void s_expect_utf8_error(void *sock, const char *want)
{
    oq_msg_t msg;
    assert_int_equal(it_expect(sock, OQ_CMD_ERROR, &msg, S_PEER_WAIT_MS), 0);
    char text[OQ_MAX_ERROR_LEN + 1];
    oq_str_copy(msg.err_text, text, sizeof text);
    bool valid = s_utf8_valid((const unsigned char *)msg.err_text.ptr, msg.err_text.len);
    oq_proto_msg_release(&msg);
    if (!valid)
        fail_msg("the error's message is not valid UTF-8: %s", text);
    if (!strstr(text, want))
        fail_msg("expected \"%s\" in: %s", want, text);
}

static void test_error_text_utf8(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    void *w = it_socket(it, ZMQ_DEALER, it->back);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_wire_raw_ready(&buf, "types", "no\xff\xfeop", 6);
    it_send(w, &buf);
    s_expect_utf8_error(w, "\"no\\xff\\xfeop\"");
    oq_wire_raw_ready(&buf, "queues", "q\xc3", 2);
    it_send(w, &buf);
    s_expect_utf8_error(w, "\"q\\xc3\"");

    /* An unknown command's name is quoted the same way. */
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    oq_proto_pack_cstr(&pk, "v");
    msgpack_pack_uint32(&pk, 1);
    oq_proto_pack_cstr(&pk, "req");
    msgpack_pack_uint32(&pk, 7);
    oq_proto_pack_cstr(&pk, "cmd");
    msgpack_pack_str(&pk, 3);
    msgpack_pack_str_body(&pk, "x\xe2\x82", 3);
    it_send(it->client, &buf);
    s_expect_utf8_error(it->client, "unknown command \"x\\xe2\\x82\"");
    msgpack_sbuffer_destroy(&buf);

    /* The broker serves on. */
    uint64_t id = it_dispatch(it, "noop", NULL, NULL);
    assert_true(id > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_error_text_utf8, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
