/*  harness.c: processes, endpoints, keys, a raw protocol client and polling
    waits for the integration tests. */
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <libpq-fe.h>
#include <zmq.h>

#include "onceq/paths.h"
#include "payloads.h"
#include "support.h"

#define S_POLL_MS      20
#define S_BROKER_UP_MS 10000
#define S_CALL_MS      5000
#define S_PATH_LEN     512

static const char *const s_role_names[IT_ROLES] = {"producer", "worker", "admin", "stranger"};
/* The directory of DIR/keys each role's public key goes in; the stranger's
   goes nowhere. */
static const char *const s_role_dirs[IT_ROLES] = {"producers", "workers", "admins", NULL};

/* Every pid any fixture started, for the at-exit sweep. */
static pid_t s_pids[IT_MAX_PROCS * 4];
static size_t s_pid_count;
static bool s_atexit_set;

/* The processes of a cluster it_freeze_pg stopped, to continue in
   it_thaw_pg, it_destroy or at exit. A server has a handful (postmaster,
   its helpers, a backend per connection); max_connections is 200 at most
   in these tests. */
#define S_MAX_FROZEN 256
static pid_t s_frozen[S_MAX_FROZEN];
static size_t s_frozen_count;

static void s_thaw_all(void)
{
    for (size_t i = 0; i < s_frozen_count; i++)
        kill(s_frozen[i], SIGCONT);
    s_frozen_count = 0;
}

int64_t it_now_ms(void)
{
    return oq_support_now_ms();
}

static void s_kill_all(void)
{
    for (size_t i = 0; i < s_pid_count; i++) {
        if (s_pids[i] > 0) {
            kill(s_pids[i], SIGCONT);
            kill(s_pids[i], SIGKILL);
            waitpid(s_pids[i], NULL, 0);
            s_pids[i] = 0;
        }
    }
    s_pid_count = 0;
}

static void s_forget(pid_t pid)
{
    for (size_t i = 0; i < s_pid_count; i++)
        if (s_pids[i] == pid)
            s_pids[i] = 0;
}

const char *it_bin(const char *name)
{
    static char path[512];
    /* The test binaries are built next to the others (build/bin). */
    char here[400];
    const char *dir = getenv("ONCEQ_BIN_DIR");
    if (!dir || !*dir)
        dir = oq_paths_exe_dir(here, sizeof here) == 0 ? here : ".";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

void it_use_worker(it_t *self, const char *name)
{
    self->worker_bin = name;
}

static int s_mkdir(const char *path)
{
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* The broker's pair in DIR/keys, a pair per role whose secret file is in
   DIR/client-keys and whose public file is in DIR/keys/ROLES/. */
static int s_make_keys(it_t *self)
{
    char reason[S_PATH_LEN], dir[sizeof self->dir + 16];
    snprintf(self->keys_dir, sizeof self->keys_dir, "%s/keys", self->dir);
    snprintf(self->broker_key, sizeof self->broker_key, "%s/broker.key", self->keys_dir);
    snprintf(dir, sizeof dir, "%s/client-keys", self->dir);
    if (s_mkdir(self->keys_dir) < 0 || s_mkdir(dir) < 0 ||
        oq_keys_generate(&self->broker_pair) < 0 ||
        oq_keys_save(&self->broker_pair, self->keys_dir, "broker", false, reason, sizeof reason) <
            0)
        return -1;
    for (int r = 0; r < IT_ROLES; r++) {
        char role_dir[S_PATH_LEN], from[S_PATH_LEN + 64];
        snprintf(self->secret_files[r], sizeof self->secret_files[r], "%s/%s.key_secret", dir,
                 s_role_names[r]);
        if (oq_keys_generate(&self->pairs[r]) < 0 ||
            oq_keys_save(&self->pairs[r], dir, s_role_names[r], false, reason, sizeof reason) < 0)
            return -1;
        if (!s_role_dirs[r])
            continue;
        snprintf(role_dir, sizeof role_dir, "%s/%s", self->keys_dir, s_role_dirs[r]);
        snprintf(from, sizeof from, "%s/%s.key", dir, s_role_names[r]);
        if (s_mkdir(role_dir) < 0 || rename(from, it_allowed_key_file(self, (it_role_t)r)) < 0)
            return -1;
    }
    return 0;
}

/* For the processes a test spawns itself (the onceq tool speaks as admin). */
static void s_export_keys(const it_t *self)
{
    setenv("ONCEQ_KEYS", self->keys_dir, 1);
    setenv("ONCEQ_KEY", self->secret_files[IT_ROLE_ADMIN], 1);
    setenv("ONCEQ_WORKER_KEY", self->secret_files[IT_ROLE_WORKER], 1);
    setenv("ONCEQ_BROKER_KEY", self->broker_key, 1);
}

/* A socket as role (IT_ROLE_PLAIN, or any role of an insecure fixture: no
   CURVE), connected to endpoint, linger 0. */
static void *s_open(it_t *self, it_role_t role, int type, const char *endpoint)
{
    void *sock = zmq_socket(self->zctx, type);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    if (role < IT_ROLES && !self->insecure) {
        const oq_keypair_t *pair = &self->pairs[role];
        zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, self->broker_pair.public_z85, OQ_KEY_Z85_LEN);
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pair->public_z85, OQ_KEY_Z85_LEN);
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, pair->secret_z85, OQ_KEY_Z85_LEN);
    }
    if (zmq_connect(sock, endpoint) < 0) {
        zmq_close(sock);
        return NULL;
    }
    return sock;
}

it_t *it_new(const char *name)
{
    if (!s_atexit_set) {
        atexit(s_kill_all);
        atexit(s_thaw_all);
        s_atexit_set = true;
    }
    signal(SIGPIPE, SIG_IGN);
    it_t *self = calloc(1, sizeof *self);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "onceq-%s", name);
    if (oq_support_temp_dir(prefix, self->dir, sizeof self->dir) < 0) {
        free(self);
        return NULL;
    }
    snprintf(self->front, sizeof self->front, "tcp://127.0.0.1:%d", oq_support_free_port());
    snprintf(self->back, sizeof self->back, "tcp://127.0.0.1:%d", oq_support_free_port());
    self->worker_bin = IT_WORKER;
    self->zctx = zmq_ctx_new();
    if (s_make_keys(self) < 0) {
        fprintf(stderr, "harness: cannot make the test's keys in %s\n", self->dir);
        abort();
    }
    s_export_keys(self);
    self->client = s_open(self, IT_ROLE_ADMIN, ZMQ_DEALER, self->front);
    self->next_req = 1;
    return self;
}

void it_destroy(it_t **self_p)
{
    it_t *self = *self_p;
    if (!self)
        return;
    s_kill_all();
    s_thaw_all(); /* a frozen server would not stop */
    if (self->db)
        PQfinish(self->db);
    char script[512];
    if (self->pg_dir[0] && oq_support_pg_script(script, sizeof script) == 0) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "bash '%s' stop '%s' >/dev/null 2>&1", script, self->pg_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "harness: could not stop the cluster in %s\n", self->pg_dir);
    }
    for (size_t i = 0; i < self->socket_count; i++)
        zmq_close(self->sockets[i]);
    zmq_close(self->client);
    zmq_ctx_term(self->zctx);
    if (!getenv("ONCEQ_KEEP_TEST_DIR")) {
        if (oq_support_remove_tree(self->dir) < 0)
            fprintf(stderr, "harness: could not remove %s\n", self->dir);
    } else {
        fprintf(stderr, "harness: kept %s\n", self->dir);
    }
    free(self);
    *self_p = NULL;
}

int it_teardown(void **state)
{
    it_t *it = *state;
    it_destroy(&it);
    return 0;
}

it_t *it_new_pg(const char *name)
{
    it_t *self = it_new(name);
    if (self && it_start_pg(self) < 0)
        it_destroy(&self);
    return self;
}

int it_kill_teardown(void **state)
{
    it_kill_all(*state);
    return 0;
}

void it_send(void *sock, msgpack_sbuffer *buf)
{
    assert_true(zmq_send(sock, buf->data, buf->size, 0) >= 0);
    msgpack_sbuffer_clear(buf);
}

int it_expect(void *sock, oq_cmd_t cmd, oq_msg_t *msg, int timeout_ms)
{
    int64_t end = it_now_ms() + timeout_ms;
    while (it_now_ms() < end) {
        zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, 50) <= 0)
            continue;
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, sock, 0) < 0) {
            zmq_msg_close(&frame);
            continue;
        }
        oq_err_t code;
        char why[256];
        int rc = oq_proto_decode(msg, zmq_msg_data(&frame), zmq_msg_size(&frame), &code, why,
                                 sizeof why);
        zmq_msg_close(&frame);
        if (rc == 0 && msg->cmd == cmd)
            return 0;
        oq_proto_msg_release(msg);
    }
    return -1;
}

int it_recv(void *sock, oq_msg_t *msg, int timeout_ms)
{
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, timeout_ms) != 1)
        return -1;
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    assert_true(zmq_msg_recv(&frame, sock, 0) >= 0);
    oq_err_t code;
    char why[256];
    int rc =
        oq_proto_decode(msg, zmq_msg_data(&frame), zmq_msg_size(&frame), &code, why, sizeof why);
    zmq_msg_close(&frame);
    if (rc != 0)
        fail_msg("an undecodable message: %s", why);
    return 0;
}

void *it_socket(it_t *self, int type, const char *endpoint)
{
    return it_socket_as(self, strcmp(endpoint, self->back) == 0 ? IT_ROLE_WORKER : IT_ROLE_ADMIN,
                        type, endpoint);
}

void *it_socket_as(it_t *self, it_role_t role, int type, const char *endpoint)
{
    if (self->socket_count == sizeof self->sockets / sizeof self->sockets[0])
        return NULL;
    void *sock = s_open(self, role, type, endpoint);
    if (sock)
        self->sockets[self->socket_count++] = sock;
    return sock;
}

void *it_worker_socket(it_t *self, it_role_t role, uint32_t credit, const char *name)
{
    void *sock = it_socket_as(self, role, ZMQ_DEALER, self->back);
    assert_non_null(sock);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready(&buf, credit, name, 1);
    it_send(sock, &buf);
    msgpack_sbuffer_destroy(&buf);
    oq_msg_t msg;
    assert_int_equal(it_expect(sock, OQ_CMD_WELCOME, &msg, IT_WAIT_MS), 0);
    oq_proto_msg_release(&msg);
    return sock;
}

void it_send_ack(void *sock, const oq_ack_msg_t *ack)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ack(&buf, ack);
    it_send(sock, &buf);
    msgpack_sbuffer_destroy(&buf);
}

void it_close_socket(it_t *self, void *sock)
{
    for (size_t i = 0; i < self->socket_count; i++) {
        if (self->sockets[i] == sock) {
            self->sockets[i] = self->sockets[--self->socket_count];
            break;
        }
    }
    zmq_close(sock);
}

void it_insecure(it_t *self)
{
    self->insecure = true;
    zmq_close(self->client);
    self->client = s_open(self, IT_ROLE_PLAIN, ZMQ_DEALER, self->front);
    unsetenv("ONCEQ_KEYS");
    unsetenv("ONCEQ_KEY");
    unsetenv("ONCEQ_WORKER_KEY");
    unsetenv("ONCEQ_BROKER_KEY");
}

const char *it_key_file(const it_t *self, it_role_t role)
{
    assert_true(role < IT_ROLES);
    return self->secret_files[role];
}

const char *it_allowed_key_file(const it_t *self, it_role_t role)
{
    static char path[S_PATH_LEN];
    assert_true(role < IT_ROLES);
    snprintf(path, sizeof path, "%s/%s/%s.key", self->keys_dir,
             s_role_dirs[role] ? s_role_dirs[role] : "producers", s_role_names[role]);
    return path;
}

pid_t it_spawn(it_t *self, const char *log, const char *const argv[])
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.log", self->dir, log);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        setpgid(0, 0); /* own group: a test's SIGINT never reaches it by accident */
        /* If the test itself is killed (a ctest timeout), take this with it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "harness: cannot exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (pid > 0 && s_pid_count < sizeof s_pids / sizeof s_pids[0])
        s_pids[s_pid_count++] = pid;
    return pid;
}

void it_signal(pid_t pid, int sig)
{
    kill(pid, sig);
}

int it_wait_exit(pid_t pid, int timeout_ms)
{
    int64_t end = it_now_ms() + timeout_ms;
    do {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            s_forget(pid);
            return status;
        }
        if (r < 0)
            return -1;
        oq_support_sleep_ms(S_POLL_MS);
    } while (it_now_ms() < end);
    return -1;
}

int64_t it_req(it_t *self)
{
    return (int64_t)self->next_req++;
}

int it_call(it_t *self, msgpack_sbuffer *request, int64_t req, oq_msg_t *reply, int timeout_ms)
{
    memset(reply, 0, sizeof *reply);
    if (zmq_send(self->client, request->data, request->size, 0) < 0)
        return -1;
    int64_t end = it_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = end - it_now_ms();
        if (left <= 0)
            return -1;
        zmq_pollitem_t item = {self->client, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, (long)left) <= 0)
            continue;
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        zmq_msg_recv(&frame, self->client, 0);
        oq_err_t code;
        char reason[256];
        int rc = oq_proto_decode(reply, zmq_msg_data(&frame), zmq_msg_size(&frame), &code, reason,
                                 sizeof reason);
        zmq_msg_close(&frame);
        if (rc == 0 && reply->has_req && (int64_t)reply->req == req)
            return 0;
        oq_proto_msg_release(reply); /* a stale reply: keep waiting */
    }
}

uint64_t it_dispatch(it_t *self, const char *type, const msgpack_sbuffer *payload,
                     const oq_job_msg_t *options)
{
    oq_job_msg_t job;
    if (options)
        job = *options;
    else
        memset(&job, 0, sizeof job);
    job.type = oq_str(type);
    if (!job.queue.ptr)
        job.queue = oq_str(OQ_DEFAULT_QUEUE);
    if (payload) {
        job.payload = (const uint8_t *)payload->data;
        job.payload_len = payload->size;
    }
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(self);
    oq_proto_encode_dispatch(&buf, req, &job);
    oq_msg_t reply;
    int rc = it_call(self, &buf, req, &reply, S_CALL_MS);
    msgpack_sbuffer_destroy(&buf);
    uint64_t id = 0;
    if (rc == 0 && reply.cmd == OQ_CMD_DISPATCHED)
        id = reply.id;
    else if (rc == 0)
        fprintf(stderr, "dispatch refused: %.*s\n", (int)reply.err_text.len, reply.err_text.ptr);
    oq_proto_msg_release(&reply);
    return id;
}

void it_payload_uint(msgpack_sbuffer *buf, const char *key, uint64_t value)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    oq_proto_pack_cstr(&pk, key);
    msgpack_pack_uint64(&pk, value);
}

oq_cmd_t it_dispatch_padded(it_t *self, size_t pad_bytes, int timeout_ms, oq_err_t *code)
{
    msgpack_sbuffer payload, request;
    msgpack_sbuffer_init(&payload);
    msgpack_sbuffer_init(&request);
    oq_payload_pad(&payload, pad_bytes);
    oq_job_msg_t job = {.type = oq_str("noop"),
                        .payload = (const uint8_t *)payload.data,
                        .payload_len = payload.size};
    int64_t req = it_req(self);
    oq_proto_encode_dispatch(&request, req, &job);
    oq_msg_t reply;
    assert_int_equal(it_call(self, &request, req, &reply, timeout_ms), 0);
    oq_cmd_t cmd = reply.cmd;
    *code = reply.err_code;
    oq_proto_msg_release(&reply);
    msgpack_sbuffer_destroy(&payload);
    msgpack_sbuffer_destroy(&request);
    return cmd;
}

uint64_t it_fill_disk(it_t *self, size_t pad_bytes, uint64_t max_jobs, int timeout_ms)
{
    oq_err_t code = OQ_ERR_NONE;
    uint64_t accepted = 0;
    while (accepted < max_jobs &&
           it_dispatch_padded(self, pad_bytes, timeout_ms, &code) == OQ_CMD_DISPATCHED)
        accepted++;
    assert_true(accepted < max_jobs);
    assert_int_equal(code, OQ_ERR_UNAVAILABLE);
    print_message("the volume filled after %llu accepted dispatches\n",
                  (unsigned long long)accepted);
    return accepted;
}

int it_stats_reply(it_t *self, oq_msg_t *reply, int timeout_ms)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(self);
    oq_proto_encode_simple(&buf, OQ_CMD_STATS, req);
    int rc = it_call(self, &buf, req, reply, timeout_ms);
    msgpack_sbuffer_destroy(&buf);
    if (rc < 0 || reply->cmd != OQ_CMD_STATS) {
        oq_proto_msg_release(reply);
        return -1;
    }
    return 0;
}

bool it_stats_page(const oq_msg_t *reply, size_t *listed, size_t *pages, uint64_t *after,
                   size_t max_pages)
{
    assert_int_equal(reply->cmd, OQ_CMD_STATS);
    const msgpack_object *workers = oq_proto_map_get(&reply->root, "workers");
    assert_non_null(workers);
    assert_true(workers->via.array.size > 0);
    *listed += workers->via.array.size;
    (*pages)++;
    const msgpack_object *next = oq_proto_map_get(&reply->root, "workers_next");
    if (!next)
        return false;
    assert_true(next->via.u64 > *after);
    *after = next->via.u64;
    assert_true(*pages <= max_pages);
    return true;
}

uint64_t it_stat(it_t *self, const char *section, const char *key)
{
    oq_msg_t reply;
    if (it_stats_reply(self, &reply, IT_WAIT_MS) < 0)
        fail_msg("no stats reply for %s.%s", section, key);
    const msgpack_object *o = oq_proto_map_get(oq_proto_map_get(&reply.root, section), key);
    bool found = o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
    uint64_t value = found ? o->via.u64 : 0;
    oq_proto_msg_release(&reply);
    if (!found)
        fail_msg("stats has no %s.%s", section, key);
    return value;
}

uint64_t it_broker_stat(it_t *self, const char *key)
{
    return it_stat(self, "broker", key);
}

void it_cancel(it_t *self, uint64_t id)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(self);
    oq_proto_encode_job_id(&buf, OQ_CMD_CANCEL, req, id);
    oq_msg_t reply;
    int rc = it_call(self, &buf, req, &reply, S_CALL_MS);
    msgpack_sbuffer_destroy(&buf);
    if (rc < 0 || reply.cmd != OQ_CMD_CANCELLED)
        fail_msg("job %llu was not cancelled (%s)", (unsigned long long)id,
                 rc < 0 ? "no answer" : "refused");
    oq_proto_msg_release(&reply);
}

int it_stats(it_t *self, it_stats_t *s)
{
    memset(s, 0, sizeof *s);
    oq_msg_t reply;
    if (it_stats_reply(self, &reply, S_CALL_MS) < 0)
        return -1;
    const msgpack_object *q = oq_statsr_entry(&reply.root, "queues", "default");
    s->ready = oq_statsr_u64(q, "ready");
    s->delayed = oq_statsr_u64(q, "delayed");
    s->leased = oq_statsr_u64(q, "leased");
    s->failed = oq_statsr_u64(q, "failed");
    s->dispatched = oq_statsr_u64(q, "dispatched");
    s->done = oq_statsr_u64(q, "done");
    s->retried = oq_statsr_u64(q, "retried");
    s->redelivered = oq_statsr_u64(q, "redelivered");
    s->late_acks = oq_statsr_u64(q, "late_acks");
    s->ignored_acks = oq_statsr_u64(q, "ignored_acks");
    s->duplicates = oq_statsr_u64(q, "duplicates");
    s->review = oq_statsr_u64(q, "review");
    s->waiting = oq_statsr_u64(q, "waiting");
    s->returned = oq_statsr_u64(q, "returned");
    const msgpack_object *t = oq_statsr_entry(&reply.root, "types", self->stats_type);
    s->type_done = oq_statsr_u64(t, "done");
    s->type_applied = oq_statsr_u64(t, "applied");
    s->type_duplicates = oq_statsr_u64(t, "duplicates");
    s->type_failed = oq_statsr_u64(t, "failed");
    oq_statsr_workers(&reply.root, s->worker, &s->workers, IT_MAX_WORKERS);
    const msgpack_object *broker = oq_proto_map_get(&reply.root, "broker");
    s->unknown_acks = oq_statsr_u64(broker, "unknown_acks");
    s->workers_unavailable = oq_statsr_u64(broker, "workers_unavailable");
    oq_proto_msg_release(&reply);
    return 0;
}

int64_t it_wait_stats(it_t *self, it_cond_fn cond, const void *arg, int timeout_ms,
                      it_stats_t *stats)
{
    int64_t start = it_now_ms();
    for (;;) {
        if (it_stats(self, stats) == 0 && cond(stats, arg))
            return it_now_ms() - start;
        if (it_now_ms() - start > timeout_ms)
            return -1;
        oq_support_sleep_ms(S_POLL_MS);
    }
}

bool it_done_is(const it_stats_t *stats, const void *arg)
{
    return stats->done == *(const uint64_t *)arg;
}

bool it_done_at_least(const it_stats_t *stats, const void *arg)
{
    return stats->done >= *(const uint64_t *)arg;
}

bool it_ready_is(const it_stats_t *stats, const void *arg)
{
    return stats->ready == *(const uint64_t *)arg;
}

bool it_leased_is(const it_stats_t *stats, const void *arg)
{
    return stats->leased == *(const uint64_t *)arg;
}

bool it_workers_are(const it_stats_t *stats, const void *arg)
{
    return stats->workers == *(const uint64_t *)arg;
}

bool it_workers_at_least(const it_stats_t *stats, const void *arg)
{
    return stats->workers >= *(const uint64_t *)arg;
}

static bool s_pong(it_t *self)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    int64_t req = it_req(self);
    oq_proto_encode_simple(&buf, OQ_CMD_PING, req);
    oq_msg_t reply;
    int rc = it_call(self, &buf, req, &reply, 200);
    msgpack_sbuffer_destroy(&buf);
    bool ok = rc == 0 && reply.cmd == OQ_CMD_PONG;
    oq_proto_msg_release(&reply);
    return ok;
}

void it_fresh_data_dir(it_t *self)
{
    self->data_gen++;
}

pid_t it_start_broker(it_t *self, const char *const extra[])
{
    const char *argv[48] = {it_bin("onceq-broker"), "--front", self->front, "--back", self->back};
    size_t n = 5;
    /* The journal goes in the test's own dir unless the test says where. */
    bool own_dir = false;
    for (size_t i = 0; extra && extra[i]; i++)
        own_dir |= strcmp(extra[i], "--data-dir") == 0 || strcmp(extra[i], "--no-journal") == 0;
    char data_dir[sizeof self->dir + 24];
    if (!own_dir) {
        if (self->data_gen)
            snprintf(data_dir, sizeof data_dir, "%s/data-%u", self->dir, self->data_gen);
        else
            snprintf(data_dir, sizeof data_dir, "%s/data", self->dir);
        argv[n++] = "--data-dir";
        argv[n++] = data_dir;
    }
    bool own_auth = false;
    for (size_t i = 0; extra && extra[i]; i++)
        own_auth |= strcmp(extra[i], "--keys") == 0 || strcmp(extra[i], "--insecure") == 0;
    if (!own_auth && self->insecure) {
        argv[n++] = "--insecure";
    } else if (!own_auth) {
        argv[n++] = "--keys";
        argv[n++] = self->keys_dir;
    }
    for (size_t i = 0; extra && extra[i] && n < 47; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    self->broker = it_spawn(self, "broker", argv);
    int64_t end = it_now_ms() + S_BROKER_UP_MS;
    while (it_now_ms() < end) {
        if (s_pong(self))
            return self->broker;
        if (waitpid(self->broker, NULL, WNOHANG) == self->broker)
            break;
    }
    return -1;
}

pid_t it_start_worker(it_t *self, const char *log, const char *const extra[])
{
    const char *argv[48] = {it_bin(self->worker_bin), "--broker", self->back};
    size_t n = 3;
    if (!self->insecure) {
        argv[n++] = "--key";
        argv[n++] = self->secret_files[IT_ROLE_WORKER];
        argv[n++] = "--broker-key";
        argv[n++] = self->broker_key;
    }
    for (size_t i = 0; extra && extra[i] && n < 47; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    return it_spawn(self, log, argv);
}

pid_t it_start_worker_counted(it_t *self, const char *log, const char *const extra[],
                              uint64_t workers)
{
    pid_t pid = it_start_worker(self, log, extra);
    it_stats_t stats;
    if (pid <= 0 || it_wait_stats(self, it_workers_are, &workers, IT_WAIT_MS, &stats) < 0)
        return -1;
    return pid;
}

char *it_read_log(it_t *self, const char *log)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.log", self->dir, log);
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    size_t got = fread(text, 1, (size_t)size, f);
    text[got] = 0;
    fclose(f);
    return text;
}

char *it_cli(it_t *self, const char *log, int want_exit, ...)
{
    const char *argv[IT_CLI_MAX_ARGS + 4] = {it_bin("onceq"), "--broker", self->front};
    size_t n = 3;
    va_list args;
    va_start(args, want_exit);
    const char *arg;
    while ((arg = va_arg(args, const char *)) != NULL) {
        if (n == IT_CLI_MAX_ARGS + 3)
            fail_msg("it_cli: more than %d arguments", IT_CLI_MAX_ARGS);
        argv[n++] = arg;
    }
    va_end(args);
    argv[n] = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/%s.log", self->dir, log);
    remove(path);
    pid_t pid = it_spawn(self, log, argv);
    assert_true(pid > 0);
    int status = it_wait_exit(pid, IT_WAIT_MS);
    char *out = it_read_log(self, log);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != want_exit)
        fail_msg("onceq %s %s (%s): exit %d, wanted %d: %s", argv[3] ? argv[3] : "",
                 argv[3] && argv[4] ? argv[4] : "", log,
                 status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1, want_exit, out);
    return out;
}

void it_expect_output(char *out, const char *needle)
{
    if (!strstr(out, needle))
        fail_msg("expected \"%s\" in: %s", needle, out);
    free(out);
}

long it_rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    fclose(f);
    assert_true(kib > 0);
    return kib;
}

unsigned it_metrics_port(it_t *self)
{
    assert_int_equal(it_wait_log(self, "broker", "metrics: GET", 1, IT_WAIT_MS), 0);
    char *log = it_read_log(self, "broker");
    const char *at = strstr(log, "metrics: GET");
    assert_non_null(at);
    at = strstr(at, "(port ");
    assert_non_null(at);
    unsigned port = (unsigned)strtoul(at + 6, NULL, 10);
    free(log);
    assert_true(port > 0);
    return port;
}

void it_count_ok_lines(const char *log, uint64_t first_id, uint32_t *counts, size_t n)
{
    for (const char *p = strstr(log, "job "); p; p = strstr(p + 1, "job ")) {
        char *end;
        unsigned long long id = strtoull(p + 4, &end, 10);
        if (end == p + 4 || *end != ' ')
            continue;
        const char *eol = strchr(p, '\n');
        const char *ok = strstr(p, "outcome=ok");
        if (!ok || (eol && ok > eol))
            continue;
        if (id >= first_id && id < first_id + n)
            counts[id - first_id]++;
    }
}

size_t it_log_count(it_t *self, const char *log, const char *needle)
{
    char *text = it_read_log(self, log);
    size_t n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    free(text);
    return n;
}

int it_wait_log(it_t *self, const char *log, const char *needle, size_t count, int timeout_ms)
{
    int64_t end = it_now_ms() + timeout_ms;
    while (it_log_count(self, log, needle) < count) {
        if (it_now_ms() > end)
            return -1;
        oq_support_sleep_ms(S_POLL_MS);
    }
    return 0;
}

void it_kill_all(it_t *self)
{
    (void)self;
    s_kill_all();
}

/* Run pg.sh start (create on the first call) with the fixture's port and
   options. */
static int s_pg_start(it_t *self)
{
    char script[512];
    if (oq_support_pg_script(script, sizeof script) < 0) {
        fprintf(stderr, "harness: deploy/pg.sh not found next to the test binary\n");
        return -1;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "ONCEQ_PG_PORT=%d ONCEQ_PG_SERVER_OPTS='%s' ONCEQ_BIN='%s' bash '%s' start '%s' "
             ">> '%s/pg.log' 2>&1",
             self->pg_port, self->pg_opts, it_bin("onceq"), script, self->pg_dir, self->dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "harness: the cluster did not start; see %s/pg.log\n", self->dir);
        return -1;
    }
    return 0;
}

int it_start_pg(it_t *self)
{
    return it_start_pg_with(self, NULL);
}

int it_start_pg_with(it_t *self, const char *server_opts)
{
    /* The server runs as the postgres user when we are root: it must be
       able to reach its directory. */
    chmod(self->dir, 0755);
    snprintf(self->pg_dir, sizeof self->pg_dir, "%s/pg", self->dir);
    snprintf(self->pg_opts, sizeof self->pg_opts, "%s", server_opts ? server_opts : "");
    self->pg_port = oq_support_free_port();
    if (s_pg_start(self) < 0)
        return -1;
    int port = self->pg_port;
    oq_support_pg_url(self->pg_dir, port, self->db_url, sizeof self->db_url);
    setenv("ONCEQ_DATABASE_URL", self->db_url, 1);
    self->db = PQconnectdb(self->db_url);
    if (PQstatus(self->db) != CONNECTION_OK) {
        fprintf(stderr, "harness: %s", PQerrorMessage(self->db));
        return -1;
    }
    return 0;
}

int it_stop_pg(it_t *self)
{
    char script[512];
    if (!self->pg_dir[0] || oq_support_pg_script(script, sizeof script) < 0)
        return -1;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "bash '%s' stop '%s' >> '%s/pg.log' 2>&1", script, self->pg_dir,
             self->dir);
    return system(cmd) == 0 ? 0 : -1;
}

int it_restart_pg(it_t *self)
{
    if (!self->pg_dir[0] || s_pg_start(self) < 0)
        return -1;
    PQreset(self->db);
    if (PQstatus(self->db) != CONNECTION_OK) {
        fprintf(stderr, "harness: %s", PQerrorMessage(self->db));
        return -1;
    }
    return 0;
}

/* The postmaster's pid: the first line of DIR/pg/data/postmaster.pid. */
static pid_t s_postmaster(const it_t *self)
{
    char path[S_PATH_LEN];
    snprintf(path, sizeof path, "%s/data/postmaster.pid", self->pg_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long pid = -1;
    if (fscanf(f, "%ld", &pid) != 1)
        pid = -1;
    fclose(f);
    return pid > 1 ? (pid_t)pid : -1;
}

int it_freeze_pg(it_t *self)
{
    if (!self->pg_dir[0] || s_frozen_count > 0)
        return -1;
    pid_t postmaster = s_postmaster(self);
    if (postmaster < 0 || kill(postmaster, SIGSTOP) < 0)
        return -1;
    s_frozen[s_frozen_count++] = postmaster;
    /* Stopped, the postmaster forks no child: the list is complete. */
    char path[S_PATH_LEN];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)postmaster, (int)postmaster);
    FILE *f = fopen(path, "r");
    if (!f) {
        s_thaw_all();
        return -1;
    }
    long child;
    while (s_frozen_count < S_MAX_FROZEN && fscanf(f, "%ld", &child) == 1)
        if (kill((pid_t)child, SIGSTOP) == 0)
            s_frozen[s_frozen_count++] = (pid_t)child;
    fclose(f);
    return (int)s_frozen_count;
}

void it_thaw_pg(it_t *self)
{
    (void)self;
    s_thaw_all();
}

void it_sql(it_t *self, const char *sql)
{
    PGresult *res = PQexec(self->db, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fail_msg("SQL failed: %s: %s", sql, PQerrorMessage(self->db));
    PQclear(res);
}

int64_t it_sql_int(it_t *self, const char *sql)
{
    PGresult *res = PQexec(self->db, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
        fail_msg("SQL failed: %s: %s", sql, PQerrorMessage(self->db));
    int64_t v = PQgetisnull(res, 0, 0) ? 0 : strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return v;
}
