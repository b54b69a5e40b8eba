/*  test_bad_input: malformed, oversized and unknown messages on both broker
    sockets each get an error reply of the right code, and the broker keeps
    serving: afterwards a job still runs end to end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zmq.h>

#include "harness.h"
#include "payloads.h"

static int s_setup(void **state)
{
    *state = it_new("badinput");
    return *state ? 0 : -1;
}

/* Send frames and return the reply's command, with the error code in *code.
   OQ_CMD_UNKNOWN if nothing came back within the timeout. */
static oq_cmd_t s_exchange(void *sock, const void *const *frames, const size_t *sizes, size_t count,
                           oq_err_t *code, int timeout_ms)
{
    for (size_t i = 0; i < count; i++)
        zmq_send(sock, frames[i], sizes[i], i + 1 < count ? ZMQ_SNDMORE : 0);
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, timeout_ms) <= 0)
        return OQ_CMD_UNKNOWN;
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    zmq_msg_recv(&frame, sock, 0);
    oq_msg_t reply;
    oq_err_t decode_code;
    char reason[256];
    oq_cmd_t cmd = OQ_CMD_UNKNOWN;
    if (oq_proto_decode(&reply, zmq_msg_data(&frame), zmq_msg_size(&frame), &decode_code, reason,
                        sizeof reason) == 0) {
        cmd = reply.cmd;
        *code = reply.err_code;
        if (cmd == OQ_CMD_ERROR)
            assert_true(reply.err_text.len > 0); /* every error says why */
    }
    oq_proto_msg_release(&reply);
    zmq_msg_close(&frame);
    return cmd;
}

static oq_err_t s_error_for(void *sock, const void *data, size_t size)
{
    const void *frames[] = {data};
    size_t sizes[] = {size};
    oq_err_t code = OQ_ERR_NONE;
    oq_cmd_t cmd = s_exchange(sock, frames, sizes, 1, &code, 5000);
    assert_int_equal(cmd, OQ_CMD_ERROR);
    return code;
}

/* A map {v:V, cmd:CMD} plus optional extra raw pairs. */
static void s_map(msgpack_sbuffer *buf, int v, const char *cmd)
{
    msgpack_packer pk;
    msgpack_sbuffer_clear(buf);
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    oq_proto_pack_cstr(&pk, "v");
    msgpack_pack_int(&pk, v);
    oq_proto_pack_cstr(&pk, "cmd");
    oq_proto_pack_cstr(&pk, cmd);
}

static void s_bad_inputs(void *sock, bool front)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);

    assert_int_equal(s_error_for(sock, "GET / HTTP/1.1\r\n\r\n", 18), OQ_ERR_MALFORMED);
    static const uint8_t truncated[] = {0x82, 0xa1, 'v', 0x01, 0xa3, 'c'};
    assert_int_equal(s_error_for(sock, truncated, sizeof truncated), OQ_ERR_MALFORMED);
    static const uint8_t huge_array[] = {0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(s_error_for(sock, huge_array, sizeof huge_array), OQ_ERR_MALFORMED);
    static const uint8_t reserved[] = {0x81, 0xa1, 'x', 0xc1};
    assert_int_equal(s_error_for(sock, reserved, sizeof reserved), OQ_ERR_MALFORMED);

    /* Oversized: 2 MiB, over the 1 MiB frame limit but under the wire cap. */
    size_t big = 2 * 1024 * 1024;
    uint8_t *blob = calloc(1, big);
    blob[0] = 0x81;
    assert_int_equal(s_error_for(sock, blob, big), OQ_ERR_TOO_LARGE);
    free(blob);

    s_map(&buf, 1, "no_such_command");
    assert_int_equal(s_error_for(sock, buf.data, buf.size), OQ_ERR_UNKNOWN_COMMAND);
    s_map(&buf, 2, "ping");
    assert_int_equal(s_error_for(sock, buf.data, buf.size), OQ_ERR_BAD_VERSION);
    /* A command of the other socket. */
    s_map(&buf, 1, front ? "heartbeat" : "dispatch");
    assert_int_equal(s_error_for(sock, buf.data, buf.size), OQ_ERR_UNKNOWN_COMMAND);

    /* Two body frames. */
    s_map(&buf, 1, "ping");
    const void *frames[] = {buf.data, buf.data};
    size_t sizes[] = {buf.size, buf.size};
    oq_err_t code = OQ_ERR_NONE;
    assert_int_equal(s_exchange(sock, frames, sizes, 2, &code, 5000), OQ_CMD_ERROR);
    assert_int_equal(code, OQ_ERR_MALFORMED);

    if (front) {
        oq_job_msg_t job = {.type = oq_str("has space")};
        msgpack_sbuffer_clear(&buf);
        oq_proto_encode_dispatch(&buf, 5, &job);
        assert_int_equal(s_error_for(sock, buf.data, buf.size), OQ_ERR_BAD_REQUEST);
    } else {
        oq_ack_msg_t ack = {.id = 1, .attempt = 1, .outcome = OQ_OUTCOME_OK};
        msgpack_sbuffer_clear(&buf);
        oq_proto_encode_ack(&buf, &ack);
        /* corrupt the outcome "ok" -> "xk" */
        char *ok = memmem(buf.data, buf.size, "\xa2ok", 3);
        assert_non_null(ok);
        ok[1] = 'x';
        assert_int_equal(s_error_for(sock, buf.data, buf.size), OQ_ERR_BAD_REQUEST);
        /* A heartbeat from a stranger is told to register. */
        s_map(&buf, 1, "heartbeat");
        const void *hb[] = {buf.data};
        size_t hb_size[] = {buf.size};
        assert_int_equal(s_exchange(sock, hb, hb_size, 1, &code, 5000), OQ_CMD_RECONNECT);
        /* So is a touch (docs/protocol.md §6, touch). */
        oq_ack_msg_t touch = {.id = 1, .attempt = 1, .lease = 7, .has_lease = true};
        msgpack_sbuffer_clear(&buf);
        oq_proto_encode_touch(&buf, &touch);
        const void *tf[] = {buf.data};
        size_t tf_size[] = {buf.size};
        assert_int_equal(s_exchange(sock, tf, tf_size, 1, &code, 5000), OQ_CMD_RECONNECT);
    }
    msgpack_sbuffer_destroy(&buf);
}

static void test_bad_messages_get_errors_and_broker_keeps_serving(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    void *front = it_socket(it, ZMQ_DEALER, it->front);
    void *back = it_socket(it, ZMQ_DEALER, it->back);
    assert_non_null(front);
    assert_non_null(back);
    s_bad_inputs(front, true);
    s_bad_inputs(back, false);

    /* A frame beyond the wire cap is not buffered: libzmq drops that peer.
       The broker itself goes on. */
    size_t huge = 5 * 1024 * 1024;
    uint8_t *blob = calloc(1, huge);
    zmq_send(front, blob, huge, 0);
    free(blob);

    /* A REQ peer (empty delimiter frame) is answered in its envelope. */
    void *req = it_socket(it, ZMQ_REQ, it->front);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_simple(&buf, OQ_CMD_PING, 1);
    const void *frames[] = {buf.data};
    size_t sizes[] = {buf.size};
    oq_err_t code;
    assert_int_equal(s_exchange(req, frames, sizes, 1, &code, 5000), OQ_CMD_PONG);
    msgpack_sbuffer_destroy(&buf);

    /* Still serving: a real worker runs a real job. */
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
    uint64_t one = 1;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_is, &one, IT_WAIT_MS, &s) >= 0);
    char *log = it_read_log(it, "broker");
    assert_null(strstr(log, "AddressSanitizer"));
    free(log);
}

/* A dispatch with req whose payload map {b: bin} is blob_len bytes of blob. */
static void s_big_dispatch(msgpack_sbuffer *buf, int64_t req, size_t blob_len)
{
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    oq_payload_blob(&payload, blob_len);
    oq_job_msg_t job = {.type = oq_str("noop"),
                        .payload = (const uint8_t *)payload.data,
                        .payload_len = payload.size};
    msgpack_sbuffer_clear(buf);
    oq_proto_encode_dispatch(buf, req, &job);
    msgpack_sbuffer_destroy(&payload);
}

static void test_too_large_echoes_req(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_msg_t reply;
    /* A frame over 1 MiB: refused before it is decoded, yet matched to its
       request (it_call waits for this req only). */
    int64_t req = it_req(it);
    s_big_dispatch(&buf, req, 2 * 1024 * 1024);
    assert_int_equal(it_call(it, &buf, req, &reply, IT_WAIT_MS), 0);
    assert_int_equal(reply.cmd, OQ_CMD_ERROR);
    assert_int_equal(reply.err_code, OQ_ERR_TOO_LARGE);
    assert_true(reply.has_req);
    assert_int_equal(reply.req, req);
    oq_proto_msg_release(&reply);
    /* A payload over 256 KiB in a frame under 1 MiB. */
    req = it_req(it);
    s_big_dispatch(&buf, req, 300 * 1024);
    assert_int_equal(it_call(it, &buf, req, &reply, IT_WAIT_MS), 0);
    assert_int_equal(reply.err_code, OQ_ERR_TOO_LARGE);
    assert_int_equal(reply.req, req);
    oq_proto_msg_release(&reply);
    msgpack_sbuffer_destroy(&buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_messages_get_errors_and_broker_keeps_serving,
                                        s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_too_large_echoes_req, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
