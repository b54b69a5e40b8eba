/*  test_durability: the broker's durability, from outside.

    (i)   A producer streams dispatches with --fsync always; the broker is
          SIGKILLed mid-stream and started again on the same data dir. Every
          dispatch the producer saw confirmed is there, and after workers
          drain the queue each ran exactly once ("job <id> ... outcome=ok").
          Dispatches in flight at the kill may or may not exist.
    (ii)  The same while compactions run: a bouncing worker (it answers
          every job with a retry) makes the journal grow faster than the
          live jobs, and a small --compact-min-bytes compacts it mid-stream.
    (iii) A dispatch_id sent again after a restart maps to the same job, also
          through `onceq dispatch --dispatch-id`.
    (iv)  Lazy Pirate: `onceq dispatch` against a stopped broker times out,
          resends with the same dispatch_id, and gets one job when the broker
          comes back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <zmq.h>

#include "harness.h"
#include "support.h"

#define S_CONFIRMED_BEFORE_KILL 400   /* confirmations the stream waits for before the kill */
#define S_WINDOW                16    /* dispatches in flight */
#define S_STREAM_MS             20000 /* the stream gives up after this long */
#define S_AFTER_KILL_MS         200   /* replies already on their way are still read */
#define S_MAX_IDS               100000
#define S_MAX_TRIES             "1000"
#define S_COMPACT_MIN_BYTES     "8192"
#define S_COMPACT_RATIO         "2"
#define S_BOUNCE_CREDIT         64
#define S_BEAT_MS               300
#define S_CLI_TIMEOUT_MS        "300"
#define S_CLI_RETRIES           "30"
#define S_PAUSE_MS              1000
#define S_POLL_MS               5

static int s_setup(void **state)
{
    *state = it_new("durability");
    return *state ? 0 : -1;
}

/* One message from sock if there is one: 1 with *msg (release it), 0 if none. */
static int s_recv(void *sock, oq_msg_t *msg)
{
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&frame);
        return 0;
    }
    oq_err_t code;
    char why[256];
    int rc =
        oq_proto_decode(msg, zmq_msg_data(&frame), zmq_msg_size(&frame), &code, why, sizeof why);
    zmq_msg_close(&frame);
    if (rc < 0)
        fail_msg("undecodable message: %s", why);
    return 1;
}

/* The bouncing worker: answers every job with a retry, so the journal
   gains LEASED and RETRY records while no job ever runs. */
typedef struct {
    void *sock;
    int64_t beat_at;
    uint64_t bounced;
} s_bouncer_t;

static void s_bounce(s_bouncer_t *b, msgpack_sbuffer *buf)
{
    oq_msg_t msg;
    while (s_recv(b->sock, &msg)) {
        if (msg.cmd == OQ_CMD_JOB) {
            oq_ack_msg_t ack = {.id = msg.job.id,
                                .attempt = msg.job.attempt,
                                .outcome = OQ_OUTCOME_RETRY,
                                .error = oq_str("bounced"),
                                .credit = 1,
                                .lease = msg.job.lease,
                                .has_lease = true};
            oq_proto_encode_ack(buf, &ack);
            it_send(b->sock, buf);
            b->bounced++;
        }
        oq_proto_msg_release(&msg);
    }
    if (it_now_ms() >= b->beat_at) {
        oq_proto_encode_simple(buf, OQ_CMD_HEARTBEAT, -1);
        it_send(b->sock, buf);
        b->beat_at = it_now_ms() + S_BEAT_MS;
    }
}

typedef struct {
    uint64_t ids[S_MAX_IDS];
    size_t count;
    uint64_t max_id;
} s_confirmed_t;

static void s_note(s_confirmed_t *c, const oq_msg_t *msg)
{
    if (msg->cmd != OQ_CMD_DISPATCHED) {
        char text[256];
        oq_str_copy(msg->err_text, text, sizeof text);
        fail_msg("dispatch refused: %s: %s", oq_proto_err_name(msg->err_code), text);
    }
    assert_true(c->count < S_MAX_IDS);
    c->ids[c->count++] = msg->id;
    if (msg->id > c->max_id)
        c->max_id = msg->id;
}

/* Stream dispatches through a socket of our own (so that what is in flight
   at the kill can be dropped), S_WINDOW at a time, until enough are
   confirmed; then SIGKILL the broker with requests still in flight and take
   the replies already on their way. */
static void s_stream_and_kill(it_t *it, s_confirmed_t *c, s_bouncer_t *bouncer, size_t window)
{
    void *sock = it_socket_as(it, IT_ROLE_PRODUCER, ZMQ_DEALER, it->front);
    assert_non_null(sock);
    msgpack_sbuffer buf, payload;
    msgpack_sbuffer_init(&buf);
    msgpack_sbuffer_init(&payload);
    size_t sent = 0;
    int64_t deadline = it_now_ms() + S_STREAM_MS;
    while (c->count < S_CONFIRMED_BEFORE_KILL) {
        assert_true(it_now_ms() < deadline);
        while (sent - c->count < window) {
            it_payload_uint(&payload, "n", sent);
            oq_job_msg_t job = {.type = oq_str("noop"),
                                .payload = (const uint8_t *)payload.data,
                                .payload_len = payload.size};
            oq_proto_encode_dispatch(&buf, (int64_t)++sent, &job);
            it_send(sock, &buf);
            msgpack_sbuffer_clear(&payload);
        }
        zmq_pollitem_t items[2] = {{sock, 0, ZMQ_POLLIN, 0},
                                   {bouncer ? bouncer->sock : NULL, 0, ZMQ_POLLIN, 0}};
        zmq_poll(items, bouncer ? 2 : 1, S_POLL_MS);
        oq_msg_t msg;
        while (s_recv(sock, &msg)) {
            s_note(c, &msg);
            oq_proto_msg_release(&msg);
        }
        if (bouncer)
            s_bounce(bouncer, &buf);
    }
    it_signal(it->broker, SIGKILL);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);
    int64_t until = it_now_ms() + S_AFTER_KILL_MS;
    while (it_now_ms() < until) {
        oq_msg_t msg;
        while (s_recv(sock, &msg)) {
            s_note(c, &msg);
            oq_proto_msg_release(&msg);
        }
        oq_support_sleep_ms(10);
    }
    print_message("confirmed %zu of %zu dispatches before the kill\n", c->count, sent);
    it_close_socket(it, sock); /* what was still queued in it is dropped, never sent */
    msgpack_sbuffer_destroy(&buf);
    msgpack_sbuffer_destroy(&payload);
}

static bool s_drained(const it_stats_t *s, const void *arg)
{
    (void)arg;
    return s->ready + s->delayed + s->leased == 0 && s->done > 0;
}

/* After the restart: every confirmed job is held; workers drain the queue;
   each confirmed job ran exactly once. */
static void s_check_exactly_once(it_t *it, const s_confirmed_t *c)
{
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_true(s.ready + s.delayed >= c->count);
    const char *worker_flags[] = {"--processes", "2", NULL};
    pid_t workers = it_start_worker(it, "workers", worker_flags);
    assert_true(workers > 0);
    assert_true(it_wait_stats(it, s_drained, NULL, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(s.failed, 0);
    assert_true(s.done >= c->count);
    it_signal(workers, SIGTERM);
    assert_true(it_wait_exit(workers, IT_WAIT_MS) >= 0);

    uint32_t *runs = calloc(c->max_id + 1, sizeof *runs);
    char *log = it_read_log(it, "workers");
    it_count_ok_lines(log, 0, runs, c->max_id + 1);
    for (size_t i = 0; i < c->count; i++)
        if (runs[c->ids[i]] != 1)
            fail_msg("confirmed job %llu ran %u times", (unsigned long long)c->ids[i],
                     runs[c->ids[i]]);
    free(runs);
    free(log);
}

static void test_confirmed_dispatches_survive_sigkill(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--fsync", "always", "--max-tries", S_MAX_TRIES, NULL};
    assert_true(it_start_broker(it, flags) > 0);
    static s_confirmed_t c;
    memset(&c, 0, sizeof c);
    s_stream_and_kill(it, &c, NULL, S_WINDOW);
    assert_true(it_start_broker(it, flags) > 0);
    s_check_exactly_once(it, &c);
    assert_true(it_log_count(it, "broker", "replayed") == 2);
}

static void test_confirmed_dispatches_survive_sigkill_across_compactions(void **state)
{
    it_t *it = *state;
    const char *flags[] = {"--fsync",
                           "always",
                           "--max-tries",
                           S_MAX_TRIES,
                           "--backoff",
                           "0",
                           "--compact-min-bytes",
                           S_COMPACT_MIN_BYTES,
                           "--compact-ratio",
                           S_COMPACT_RATIO,
                           NULL};
    assert_true(it_start_broker(it, flags) > 0);
    s_bouncer_t bouncer = {.sock = it_socket(it, ZMQ_DEALER, it->back)};
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready(&buf, S_BOUNCE_CREDIT, "bouncer", 1);
    it_send(bouncer.sock, &buf);
    msgpack_sbuffer_destroy(&buf);

    static s_confirmed_t c;
    memset(&c, 0, sizeof c);
    /* One dispatch at a time: the bouncer gets many deliveries in between. */
    s_stream_and_kill(it, &c, &bouncer, 1);
    print_message("bounced %llu deliveries\n", (unsigned long long)bouncer.bounced);
    size_t compactions = it_log_count(it, "broker", "compacted the journal");
    print_message("%zu compactions before the kill\n", compactions);
    assert_true(compactions >= 1);
    zmq_disconnect(bouncer.sock, it->back); /* leaves the jobs to the real workers */

    assert_true(it_start_broker(it, flags) > 0);
    s_check_exactly_once(it, &c);
    /* The live jobs are gone: the next compaction can shrink the file. */
    assert_true(it_stat(it, "journal", "bytes") > 0);
}

/* Run `onceq dispatch` and return the id it printed (0 if none). */
static uint64_t s_cli_dispatch(it_t *it, const char *log, const char *dispatch_id,
                               const char *timeout_ms, const char *retries)
{
    char *out = it_cli(it, log, 0, "dispatch", "noop", "--dispatch-id", dispatch_id, "--timeout-ms",
                       timeout_ms, "--retries", retries, NULL);
    uint64_t id = strtoull(out, NULL, 10);
    free(out);
    return id;
}

static void test_dispatch_id_maps_to_the_same_job_after_a_restart(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    uint64_t first = s_cli_dispatch(it, "cli1", "order-7:grant", "5000", "0");
    assert_true(first > 0);
    uint64_t other = it_dispatch(it, "noop", NULL, NULL);
    assert_true(other > first);

    it_signal(it->broker, SIGKILL);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);
    assert_true(it_start_broker(it, NULL) > 0);

    assert_int_equal(s_cli_dispatch(it, "cli2", "order-7:grant", "5000", "0"), first);
    oq_job_msg_t options = {.dispatch_id = oq_str("order-7:grant")};
    assert_int_equal(it_dispatch(it, "noop", NULL, &options), first);
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.dispatched, 0); /* nothing new was queued */
    assert_int_equal(s.ready, 2);
    assert_int_equal(it_stat(it, "journal", "dedupe_hits"), 2);
    /* A new id is a new job, numbered after everything before the kill. */
    options.dispatch_id = oq_str("order-8:grant");
    assert_true(it_dispatch(it, "noop", NULL, &options) > other);
}

/* The journal's live size in stats is what a snapshot would take, which
   the compaction thresholds use too: the dispatch ids count, so a journal
   of done jobs with ids kept for their window is not shown as empty. */
static void test_live_bytes_count_the_dispatch_ids(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    enum { S_IDS = 200 };
    for (int i = 0; i < S_IDS; i++) {
        char id[32];
        snprintf(id, sizeof id, "order-%d:grant", i);
        oq_job_msg_t options = {.dispatch_id = oq_str(id)};
        assert_true(it_dispatch(it, "noop", NULL, &options) > 0);
    }
    assert_true(it_start_worker(it, "worker", NULL) > 0);
    uint64_t done = S_IDS;
    it_stats_t s;
    assert_true(it_wait_stats(it, it_done_is, &done, IT_WAIT_MS, &s) >= 0);
    assert_int_equal(it_stat(it, "journal", "dispatch_ids"), S_IDS);
    /* Each id's record holds at least its 16-byte digest. */
    uint64_t live = it_stat(it, "journal", "live_bytes");
    if (live < (uint64_t)S_IDS * 16)
        fail_msg("live_bytes %llu with %d dispatch ids held", (unsigned long long)live, S_IDS);
}

/* The journal holds payloads in plaintext: the data directory the broker
   makes is its user's alone (0700), and so is every file in it (0600),
   whatever the umask lets through. */
static void test_data_dir_and_journal_are_the_brokers_alone(void **state)
{
    it_t *it = *state;
    mode_t umask_before = umask(0);
    pid_t broker = it_start_broker(it, NULL);
    umask(umask_before);
    assert_true(broker > 0);
    for (int i = 0; i < 50; i++)
        assert_true(it_dispatch(it, "noop", NULL, NULL) > 0);
    it_signal(it->broker, SIGTERM);
    assert_true(it_wait_exit(it->broker, IT_WAIT_MS) >= 0);

    char data[sizeof it->dir + 16];
    snprintf(data, sizeof data, "%s/data", it->dir);
    struct stat st;
    assert_int_equal(stat(data, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    DIR *dir = opendir(data);
    assert_non_null(dir);
    int files = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        char path[sizeof data + 256];
        snprintf(path, sizeof path, "%s/%s", data, e->d_name);
        assert_int_equal(lstat(path, &st), 0);
        if (!S_ISREG(st.st_mode))
            continue;
        files++;
        if ((st.st_mode & 07777) != 0600)
            fail_msg("%s is mode %o, not 0600", e->d_name, (unsigned)(st.st_mode & 07777));
    }
    closedir(dir);
    assert_true(files >= 2); /* the journal and the lease key at least */
}

static void test_lazy_pirate_resends_until_the_broker_answers(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    it_signal(it->broker, SIGSTOP);
    const char *argv[] = {it_bin("onceq"),  "--broker",      it->front,     "dispatch",
                          "noop",           "--dispatch-id", "pirate-1",    "--timeout-ms",
                          S_CLI_TIMEOUT_MS, "--retries",     S_CLI_RETRIES, NULL};
    pid_t cli = it_spawn(it, "pirate", argv);
    oq_support_sleep_ms(S_PAUSE_MS); /* a few timeouts, each followed by a resend */
    it_signal(it->broker, SIGCONT);
    int status = it_wait_exit(cli, IT_WAIT_MS);
    assert_true(status >= 0 && WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char *out = it_read_log(it, "pirate");
    uint64_t id = strtoull(out, NULL, 10);
    free(out);
    assert_true(id > 0);
    it_stats_t s;
    assert_int_equal(it_stats(it, &s), 0);
    assert_int_equal(s.dispatched, 1); /* every copy of the request made one job */
    assert_true(it_stat(it, "journal", "dedupe_hits") >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_confirmed_dispatches_survive_sigkill, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(
            test_confirmed_dispatches_survive_sigkill_across_compactions, s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_dispatch_id_maps_to_the_same_job_after_a_restart,
                                        s_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_live_bytes_count_the_dispatch_ids, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_data_dir_and_journal_are_the_brokers_alone, s_setup,
                                        it_teardown),
        cmocka_unit_test_setup_teardown(test_lazy_pirate_resends_until_the_broker_answers, s_setup,
                                        it_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
