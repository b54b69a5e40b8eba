/*  test_limits: the broker's memory is bounded by bytes, not only by jobs,
    and what it restores from its journal meets the limits and rules given
    at this start.

    (i)   A flood of 256 KiB payloads with no worker ends in "full" under
          --max-bytes, the broker's RSS stays near the limit, and a worker
          that connects afterwards drains everything.
    (ii)  A journal holding more than a smaller --max-bytes is replayed
          whole: nothing confirmed is refused, new dispatches are.
    (iii) A restored job whose timeout breaks a shortened retry_after is
          clamped and logged.
    (iv)  A worker that sent drain and then ready is sent jobs again.
    (v)   `onceq failed list` pages by id with --after.
    (vi)  Under an open-file limit of 256, peers past their handshake fill
          the connection cap and one more is refused, the broker does not
          spin, a peer connected before is still served, and new peers are
          taken again once they close. (Idle connections that never finish
          a handshake cannot fill the cap: tests/hostile.) */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "harness.h"
#include "payloads.h"
#include "onceq/limits.h"

#define S_MAX_BYTES     (8 * 1024 * 1024)
#define S_MAX_BYTES_ARG "8388608"
#define S_SMALL_MAX_ARG "1048576"
#define S_BLOB_BYTES    (OQ_MAX_PAYLOAD_BYTES - 16) /* payload {b: bin} just under the limit */
#define S_FLOOD_MAX     200                         /* dispatches sent at most; full comes first */
#define S_EXTRA_REFUSED 64                          /* the flood goes on after full */
#define S_RSS_SLACK_KIB (24 * 1024) /* allocator, libzmq and journal buffers beyond the limit */
/* Under AddressSanitizer the RSS holds redzones and a quarantine of freed
   blocks (256 MiB by default), not the broker's own memory: the bound is
   checked in the plain build only. */
#ifdef ONCEQ_SANITIZED
#define S_RSS_BOUNDED false
#else
#define S_RSS_BOUNDED true
#endif
#define S_FAILED_JOBS       5
#define S_NOFILE            "256"  /* the broker's open-file limit in the descriptor test */
#define S_PEERS             320    /* connected one by one, each pinging: more than it can hold */
#define S_PEER_PONG_MS      5000   /* a peer under the cap is answered within this */
#define S_PEER_RECONNECT_MS 600000 /* a refused peer does not come back during the test */
#define S_CPU_SAMPLE_MS     2000
#define S_SETTLE_SAMPLE_MS  500
#define S_MAX_CPU_PCT       30 /* a spinning broker takes a whole core */

static int s_setup(void **state)
{
    *state = it_new("limits");
    return *state ? 0 : -1;
}

/* Dispatch one job with a payload of blob_len bytes; returns the reply's
   command, with the error code and text in *code and text. */
static oq_cmd_t s_dispatch_blob(it_t *it, const char *type, size_t blob_len, uint64_t *id,
                                oq_err_t *code, char *text, size_t text_len)
{
    msgpack_sbuffer payload, buf;
    msgpack_sbuffer_init(&payload);
    msgpack_sbuffer_init(&buf);
    oq_payload_blob(&payload, blob_len);
    oq_job_msg_t job = {.type = oq_str(type),
                        .payload = (const uint8_t *)payload.data,
                        .payload_len = payload.size};
    int64_t req = it_req(it);
    oq_proto_encode_dispatch(&buf, req, &job);
    oq_msg_t reply;
    assert_int_equal(it_call(it, &buf, req, &reply, IT_WAIT_MS), 0);
    oq_cmd_t cmd = reply.cmd;
    *id = reply.id;
    *code = reply.err_code;
    if (text_len)
        snprintf(text, text_len, "%.*s", (int)reply.err_text.len,
                 reply.err_text.ptr ? reply.err_text.ptr : "");
    oq_proto_msg_release(&reply);
    msgpack_sbuffer_destroy(&payload);
    msgpack_sbuffer_destroy(&buf);
    return cmd;
}

static bool s_failed_at_least(const it_stats_t *s, const void *arg)
{
    return s->failed >= *(const uint64_t *)arg;
}

static void s_restart(it_t *it, const char *const flags[])
{
    it_signal(it->broker, SIGTERM);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);
    assert_true(it_start_broker(it, flags) > 0);
}

static void test_payload_flood_ends_in_full_and_a_late_worker_drains_it(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--max-bytes", S_MAX_BYTES_ARG, "--fsync", "off", NULL};
    pid_t broker = it_start_broker(it, flags);
    assert_true(broker > 0);
    assert_int_equal(it_broker_stat(it, "max_bytes"), S_MAX_BYTES);
    long rss_start = it_rss_kib(broker);

    uint64_t accepted = 0, id;
    oq_err_t code = OQ_ERR_NONE;
    char text[OQ_MAX_ERROR_LEN + 1] = "";
    oq_cmd_t cmd = OQ_CMD_UNKNOWN;
    for (int i = 0; i < S_FLOOD_MAX; i++) {
        cmd = s_dispatch_blob(it, "noop", S_BLOB_BYTES, &id, &code, text, sizeof text);
        if (cmd != OQ_CMD_DISPATCHED)
            break;
        accepted++;
    }
    assert_int_equal(cmd, OQ_CMD_ERROR);
    assert_int_equal(code, OQ_ERR_FULL);
    assert_non_null(strstr(text, "--max-bytes"));
    assert_non_null(strstr(text, S_MAX_BYTES_ARG));
    uint64_t held = it_broker_stat(it, "bytes");
    /* Refused before the limit, and only when the next job would pass it. */
    assert_true(held <= S_MAX_BYTES);
    assert_true(accepted > 0);
    assert_true(held + held / accepted > S_MAX_BYTES);

    /* The flood goes on: every dispatch is refused, memory stays put. */
    for (int i = 0; i < S_EXTRA_REFUSED; i++) {
        assert_int_equal(s_dispatch_blob(it, "noop", S_BLOB_BYTES, &id, &code, NULL, 0),
                         OQ_CMD_ERROR);
        assert_int_equal(code, OQ_ERR_FULL);
    }
    long rss_full = it_rss_kib(broker);
    print_message("flood: %llu accepted, %llu bytes held, RSS %ld KiB at start, %ld KiB at full\n",
                  (unsigned long long)accepted, (unsigned long long)held, rss_start, rss_full);
    if (S_RSS_BOUNDED)
        assert_true(rss_full - rss_start < S_MAX_BYTES / 1024 + S_RSS_SLACK_KIB);

    /* A worker that connects now drains everything; the bytes are freed. */
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_at_least, &accepted, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.done, accepted);
    assert_int_equal(s.ready + s.leased + s.delayed + s.failed, 0);
    assert_int_equal(it_broker_stat(it, "bytes"), 0);
    assert_int_equal(s_dispatch_blob(it, "noop", S_BLOB_BYTES, &id, &code, NULL, 0),
                     OQ_CMD_DISPATCHED);
}

static void test_journal_over_the_byte_limit_replays_whole(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--max-bytes", S_MAX_BYTES_ARG, NULL};
    assert_true(it_start_broker(it, flags) > 0);
    uint64_t accepted = 0, id;
    oq_err_t code;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(s_dispatch_blob(it, "noop", S_BLOB_BYTES, &id, &code, NULL, 0),
                         OQ_CMD_DISPATCHED);
        accepted++;
    }
    uint64_t held = it_broker_stat(it, "bytes");
    assert_true(held > 1024 * 1024);

    /* Restart with a limit below what the journal holds. */
    const char *smaller[] = {"--max-bytes", S_SMALL_MAX_ARG, NULL};
    s_restart(it, smaller);
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.ready, accepted); /* every confirmed job is back */
    assert_int_equal(it_broker_stat(it, "bytes"), held);
    assert_int_equal(it_log_count(it, "broker", "over --max-bytes"), 1);
    assert_int_equal(s_dispatch_blob(it, "noop", 1, &id, &code, NULL, 0), OQ_CMD_ERROR);
    assert_int_equal(code, OQ_ERR_FULL);
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    assert_true(it_wait_stats(it, it_done_at_least, &accepted, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s_dispatch_blob(it, "noop", 1, &id, &code, NULL, 0), OQ_CMD_DISPATCHED);
}

static void test_restored_timeout_is_clamped_to_a_shorter_retry_after(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--retry-after", "60", "--timeout", "50", NULL};
    assert_true(it_start_broker(it, flags) > 0);
    assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
    assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
    /* The lease is shortened to 20 s: a 50 s handler would overlap its
       own redelivery. The jobs are kept with the longest legal timeout. */
    const char *shorter[] = {"--retry-after", "20", "--timeout", "10", NULL};
    s_restart(it, shorter);
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.ready, 2);
    assert_int_equal(it_log_count(it, "broker", "2 restored job(s) had a timeout (up to 50 s)"), 1);
    assert_int_equal(it_log_count(it, "broker", "their timeout is now 15 s"), 1);
    /* The same through --queue, which is applied before the replay. */
    const char *queue[] = {"--retry-after", "20",           "--timeout", "10",
                           "--queue",       "default:12:5", NULL};
    s_restart(it, queue);
    assert_int_equal(it_log_count(it, "broker", "their timeout is now 7 s"), 1);
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.ready, 2);
}

static void test_queue_flag_with_no_legal_timeout_names_the_retry_after(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--queue", "bad:5:5", NULL};
    assert_true(it_start_broker(it, flags) < 0);
    assert_int_equal(it_log_count(it, "broker", "at most 0 s"), 0);
    assert_int_equal(it_log_count(it, "broker", "raise retry_after to at least 10 s"), 1);
}

static void test_ready_after_drain_gets_jobs_again(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    void *w = it_socket(it, ZMQ_DEALER, it->back);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready(&buf, 0, "drainer", 1);
    zmq_send(w, buf.data, buf.size, 0);
    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_simple(&buf, OQ_CMD_DRAIN, -1);
    zmq_send(w, buf.data, buf.size, 0);
    msgpack_sbuffer_clear(&buf);
    oq_proto_encode_ready(&buf, 1, "drainer", 1);
    zmq_send(w, buf.data, buf.size, 0);
    uint64_t id = it_dispatch(it, "noop", NULL, NULL);
    /* Read until the job arrives (welcome and heartbeats may come first). */
    bool got = false;
    int64_t end = it_now_ms() + IT_WAIT_MS;
    while (!got && it_now_ms() < end) {
        zmq_pollitem_t item = {w, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, 100) <= 0)
            continue;
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        zmq_msg_recv(&frame, w, 0);
        oq_msg_t msg;
        oq_err_t code;
        char reason[256];
        if (oq_proto_decode(&msg, zmq_msg_data(&frame), zmq_msg_size(&frame), &code, reason,
                            sizeof reason) == 0 &&
            msg.cmd == OQ_CMD_JOB) {
            assert_int_equal(msg.job.id, id);
            got = true;
        }
        oq_proto_msg_release(&msg);
        zmq_msg_close(&frame);
    }
    assert_true(got);
    msgpack_sbuffer_destroy(&buf);
}

/* Run `onceq failed list ARGS --json` and return its output (free it). */
static char *s_failed_list(it_t *it, const char *log, const char *after)
{
    const char *argv[] = {it_bin("onceq"), "--broker", it->front, "failed", "list", "--limit", "2",
                          "--after",       after,      "--json",  NULL};
    pid_t pid = it_spawn(it, log, argv);
    assert_true(pid > 0);
    int status = it_wait_exit(pid, IT_WAIT_MS);
    assert_true(status >= 0 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    return it_read_log(it, log);
}

static void test_failed_list_pages_with_after(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    msgpack_sbuffer payload;
    msgpack_sbuffer_init(&payload);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    oq_proto_pack_cstr(&pk, "permanent");
    msgpack_pack_true(&pk);
    uint64_t ids[S_FAILED_JOBS];
    for (int i = 0; i < S_FAILED_JOBS; i++)
        ids[i] = it_dispatch(it, "fail", &payload, NULL);
    msgpack_sbuffer_destroy(&payload);
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    it_stats_t s;
    uint64_t want = S_FAILED_JOBS;
    assert_true(it_wait_stats(it, s_failed_at_least, &want, IT_WAIT_MS, &s) >= 0);

    char key[64];
    char *page = s_failed_list(it, "page1", "0");
    snprintf(key, sizeof key, "\"next\":%llu", (unsigned long long)ids[1]);
    assert_non_null(strstr(page, key));
    assert_non_null(strstr(page, "\"total\":5"));
    snprintf(key, sizeof key, "\"id\":%llu", (unsigned long long)ids[2]);
    assert_null(strstr(page, key));
    free(page);

    char after[32];
    snprintf(after, sizeof after, "%llu", (unsigned long long)ids[3]);
    page = s_failed_list(it, "page3", after);
    snprintf(key, sizeof key, "\"id\":%llu", (unsigned long long)ids[4]);
    assert_non_null(strstr(page, key));
    assert_null(strstr(page, "\"next\""));
    free(page);
}

static bool s_ping(it_t *it, int timeout_ms)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(it);
    oq_proto_encode_simple(&buf, OQ_CMD_PING, req);
    oq_msg_t reply;
    int rc = it_call(it, &buf, req, &reply, timeout_ms);
    msgpack_sbuffer_destroy(&buf);
    bool ok = rc == 0 && reply.cmd == OQ_CMD_PONG;
    oq_proto_msg_release(&reply);
    return ok;
}

/* CPU time (user + system) of pid in clock ticks. */
static long s_cpu_ticks(pid_t pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    char *p = strrchr(line, ')');
    assert_non_null(p);
    long utime = 0, stime = 0;
    /* After ")": the state, ten fields, then utime and stime (proc(5)). */
    assert_int_equal(
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime), 2);
    return utime + stime;
}

/* The share of one core pid used over the next sample_ms, in percent. */
static long s_cpu_pct(pid_t pid, int sample_ms)
{
    long before = s_cpu_ticks(pid);
    int64_t start = it_now_ms();
    usleep((useconds_t)sample_ms * 1000);
    long ticks = s_cpu_ticks(pid) - before;
    int64_t elapsed_ms = it_now_ms() - start;
    return ticks * 1000 * 100 / sysconf(_SC_CLK_TCK) / (elapsed_ms > 0 ? elapsed_ms : 1);
}

static void test_descriptor_exhaustion_refuses_new_peers_without_spinning(void **state)
{
    it_t *it = *state;
    /* This process holds the idle connections: give it room. */
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_true(rl.rlim_cur > 2 * S_PEERS + 64);

    char command[1024];
    snprintf(command, sizeof command,
             "ulimit -n " S_NOFILE " && exec %s --front %s --back %s --no-journal",
             it_bin("onceq-broker"), it->front, it->back);
    const char *argv[] = {"/bin/sh", "-c", command, NULL};
    it->broker = it_spawn(it, "broker", argv);
    assert_true(it->broker > 0);
    int64_t end = it_now_ms() + IT_WAIT_MS;
    while (!s_ping(it, 200) && it_now_ms() < end)
        ;
    assert_true(s_ping(it, IT_WAIT_MS)); /* connected before the others */
    assert_int_equal(it_log_count(it, "broker", "open-file limit " S_NOFILE " (was"), 1);

    /* One at a time, so that none is still in its handshake when the
       next comes: the cap is met by peers past theirs, and refused. */
    static void *peers[S_PEERS];
    int count = 0, answered = 0;
    int64_t peers_end = it_now_ms() + IT_WAIT_MS;
    while (count < S_PEERS && it_now_ms() < peers_end &&
           !it_log_count(it, "broker", "refusing new peers:")) {
        void *peer = zmq_socket(it->zctx, ZMQ_DEALER);
        assert_non_null(peer);
        int zero = 0, reconnect_ms = S_PEER_RECONNECT_MS;
        zmq_setsockopt(peer, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(peer, ZMQ_RECONNECT_IVL, &reconnect_ms, sizeof reconnect_ms);
        zmq_setsockopt(peer, ZMQ_CURVE_SERVERKEY, it->broker_pair.public_z85, OQ_KEY_Z85_LEN);
        zmq_setsockopt(peer, ZMQ_CURVE_PUBLICKEY, it->pairs[IT_ROLE_PRODUCER].public_z85,
                       OQ_KEY_Z85_LEN);
        zmq_setsockopt(peer, ZMQ_CURVE_SECRETKEY, it->pairs[IT_ROLE_PRODUCER].secret_z85,
                       OQ_KEY_Z85_LEN);
        assert_int_equal(zmq_connect(peer, it->front), 0);
        peers[count++] = peer;
        msgpack_sbuffer buf;
        msgpack_sbuffer_init(&buf);
        oq_proto_encode_simple(&buf, OQ_CMD_PING, it_req(it));
        it_send(peer, &buf);
        msgpack_sbuffer_destroy(&buf);
        oq_msg_t pong;
        if (it_expect(peer, OQ_CMD_PONG, &pong, S_PEER_PONG_MS) == 0) {
            answered++;
            oq_proto_msg_release(&pong);
        }
    }
    assert_int_equal(it_wait_log(it, "broker", "refusing new peers:", 1, IT_WAIT_MS), 0);
    assert_true(answered > 0 && answered < count);

    /* No spin. The refusals take a moment (on a loaded machine, longer);
       after that the broker must sleep while the peers stay, where libzmq
       alone would retry accept() for ever. */
    int64_t settle_end = it_now_ms() + IT_WAIT_MS;
    while (s_cpu_pct(it->broker, S_SETTLE_SAMPLE_MS) >= S_MAX_CPU_PCT && it_now_ms() < settle_end)
        ;
    long pct = s_cpu_pct(it->broker, S_CPU_SAMPLE_MS);
    print_message("broker CPU with %d peers connected, %d refused: %ld%%\n", answered,
                  count - answered, pct);
    assert_true(pct < S_MAX_CPU_PCT);
    /* A peer connected before is served as usual. */
    assert_true(s_ping(it, IT_WAIT_MS));

    for (int i = 0; i < count; i++)
        zmq_close(peers[i]);
    assert_int_equal(it_wait_log(it, "broker", "accepting new peers again", 1, IT_WAIT_MS), 0);
    /* A new peer is taken again: a real worker runs a real job. */
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
    it_stats_t s;
    uint64_t one = 1;
    assert_true(it_wait_stats(it, it_done_at_least, &one, IT_WAIT_MS, &s) >= 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_payload_flood_ends_in_full_and_a_late_worker_drains_it,
                                        s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_journal_over_the_byte_limit_replays_whole, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_restored_timeout_is_clamped_to_a_shorter_retry_after,
                                        s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_queue_flag_with_no_legal_timeout_names_the_retry_after,
                                        s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_ready_after_drain_gets_jobs_again, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_failed_list_pages_with_after, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(
            test_descriptor_exhaustion_refuses_new_peers_without_spinning, s_setup, it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
