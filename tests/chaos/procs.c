/*  procs.c: fork/exec with the output in a log of the run directory, a
    process group of its own (a Ctrl-C at the terminal reaches the harness,
    which then stops everything in order, rather than every process at
    once) and PR_SET_PDEATHSIG, so that a harness killed outright takes the
    broker and the pool with it. The cluster is a daemon of pg_ctl's and
    outlives us by design; the guardian covers it: a child blocked reading a
    pipe whose only writer is the harness, which runs `pg.sh stop` once the
    read returns end-of-file, however the harness ended. */
#include "procs.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
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

#include "chaos_limits.h"
#include "onceq/paths.h"
#include "support.h"

#define S_PATH_LEN      PATH_MAX
#define S_SUFFIX_LEN    32 /* room for "/onceq-broker" and the like after a path */
#define S_CMD_LEN       (S_PATH_LEN + 4 * S_SUFFIX_LEN) /* a path in a command or NAME=path */
#define S_ENDPOINT_LEN  64
#define S_URL_LEN       (PATH_MAX + 128)
#define S_MAX_ARGS      64
#define S_MAX_ENV       8
#define S_WAIT_SLICE_MS 20
#define S_HELP_BYTES    16384
#define S_NUM_LEN       32

struct oq_procs {
    const oq_chaos_config_t *config; /* borrowed */
    const oq_curve_t *curve;         /* borrowed: the keys the broker and workers get */
    char run_dir[S_PATH_LEN];        /* logs and data of everything started */
    char bin_dir[S_PATH_LEN];        /* where the three binaries are */
    char pg_script[S_PATH_LEN];      /* deploy/pg.sh */
    char broker_bin[S_PATH_LEN + S_SUFFIX_LEN], worker_bin[S_PATH_LEN + S_SUFFIX_LEN],
        onceq_bin[S_PATH_LEN + S_SUFFIX_LEN], carrier_bin[S_PATH_LEN + S_SUFFIX_LEN];
    char front[S_ENDPOINT_LEN], back[S_ENDPOINT_LEN]; /* the broker's, on free ports */
    char worker_log[S_PATH_LEN + S_SUFFIX_LEN];       /* every worker appends to it */
    bool durable;                                     /* the broker has a journal */

    /* the cluster */
    char pg_dir[S_PATH_LEN + S_SUFFIX_LEN]; /* RUN/pg */
    int pg_port;                            /* its loopback port */
    char db_url[S_URL_LEN];                 /* its conninfo, once started */
    bool pg_started;                        /* stop it in destroy */
    pid_t pg_restart;                       /* a running `pg.sh restart`, or 0 */
    pid_t guardian;                         /* stops the cluster if we die, or 0 */
    int guardian_fd;                        /* our end of its pipe, or -1 */

    pid_t carrier;                       /* 0 when not running */
    bool carrier_stopped;                /* we sent it SIGSTOP and no SIGCONT */
    char carrier_url[S_ENDPOINT_LEN];    /* "http://127.0.0.1:PORT", once it listens */
    pid_t broker;                        /* 0 when not running */
    pid_t supervisor;                    /* 0 when not running */
    pid_t stopped[OQ_CHAOS_MAX_WORKERS]; /* workers we sent SIGSTOP and no SIGCONT */
    size_t stopped_count;
};

static bool s_executable(const char *path)
{
    return access(path, X_OK) == 0;
}

static bool s_readable(const char *path)
{
    return access(path, R_OK) == 0;
}

/* Wait up to timeout_ms for pid; its wait status, or -1 if it is still
   running (or is not our child). */
static int s_wait(pid_t pid, int64_t timeout_ms)
{
    int64_t end = oq_support_now_ms() + timeout_ms;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        if (r < 0 && errno != EINTR)
            return -1;
        if (oq_support_now_ms() >= end)
            return -1;
        oq_support_sleep_ms(S_WAIT_SLICE_MS);
    }
}

/* Ask pid to stop with sig, wait, then SIGKILL. 0 if it went on its own. */
static int s_stop(pid_t pid, int sig, int64_t timeout_ms)
{
    kill(pid, sig);
    if (s_wait(pid, timeout_ms) != -1)
        return 0;
    kill(pid, SIGKILL);
    s_wait(pid, timeout_ms);
    return -1;
}

/* ---- spawning --------------------------------------------------------- */

/* fork and exec argv with its output appended to RUN/log and env (NAME=VALUE
   strings) added. die_with_us: PR_SET_PDEATHSIG. Returns the pid or -1. */
static pid_t s_spawn(oq_procs_t *self, const char *log, const char *const argv[],
                     const char *const env[], bool die_with_us)
{
    char path[S_PATH_LEN + 32];
    snprintf(path, sizeof path, "%s/%s", self->run_dir, log);
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) {
        if (pid < 0)
            fprintf(stderr, "onceq-chaos: cannot fork for %s: %s\n", argv[0], strerror(errno));
        return pid;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    setpgid(0, 0);
    if (die_with_us) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
    }
    /* What we ignore or block would stay so across exec. */
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (size_t i = 0; env && env[i]; i++)
        putenv((char *)env[i]);
    execv(argv[0], (char *const *)argv);
    fprintf(stderr, "onceq-chaos: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* The environment pg.sh needs: its port and the onceq binary it migrates
   with. Fills the two strings and returns env. */
static const char *const *s_pg_env(const oq_procs_t *self, char *port, size_t port_len, char *bin,
                                   size_t bin_len, const char *env[3])
{
    snprintf(port, port_len, "ONCEQ_PG_PORT=%d", self->pg_port);
    snprintf(bin, bin_len, "ONCEQ_BIN=%s", self->onceq_bin);
    env[0] = port;
    env[1] = bin;
    env[2] = NULL;
    return env;
}

/* Run pg.sh cmd [mode] and wait for it up to timeout_ms. Its exit status,
   or -1. */
static int s_pg_sh(oq_procs_t *self, const char *cmd, const char *mode, int64_t timeout_ms)
{
    char port[S_NUM_LEN + S_SUFFIX_LEN], bin[S_CMD_LEN];
    const char *env[3];
    const char *argv[] = {"/bin/bash", self->pg_script, cmd, self->pg_dir, mode, NULL};
    /* A start dies with us (the guardian then stops what it began); a stop
       must run to its end. */
    bool die_with_us = strcmp(cmd, "stop") != 0;
    pid_t pid = s_spawn(self, "pg.log", argv,
                        s_pg_env(self, port, sizeof port, bin, sizeof bin, env), die_with_us);
    if (pid < 0)
        return -1;
    int status = s_wait(pid, timeout_ms);
    if (status == -1) {
        kill(pid, SIGKILL);
        s_wait(pid, OQ_CHAOS_STOP_MS);
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The guardian: blocks until every copy of the pipe's write end is closed
   (we exited, however), then stops the cluster. Its own session, so that
   the terminal's Ctrl-C does not end it before it has done that. */
static void s_start_guardian(oq_procs_t *self)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return;
    char port[S_NUM_LEN + S_SUFFIX_LEN], bin[S_CMD_LEN];
    const char *env[3];
    s_pg_env(self, port, sizeof port, bin, sizeof bin, env);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[1]);
        setsid();
        signal(SIGINT, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        char byte;
        for (;;) {
            ssize_t r = read(fds[0], &byte, 1);
            if (r == 0 || (r < 0 && errno != EINTR))
                break;
        }
        for (size_t i = 0; env[i]; i++)
            putenv((char *)env[i]);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, STDOUT_FILENO);
            dup2(devnull, STDERR_FILENO);
        }
        execl("/bin/bash", "bash", self->pg_script, "stop", self->pg_dir, (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    if (pid < 0) {
        close(fds[1]);
        return;
    }
    self->guardian = pid;
    self->guardian_fd = fds[1];
}

/* ---- lifecycle -------------------------------------------------------- */

static int s_find_pg_script(oq_procs_t *self)
{
    /* --pg-script, or ONCEQ_PG_SCRIPT (chaos_main.c's flag table) */
    const char *candidates[2] = {self->config->pg_script, NULL};
    /* Next to this binary: the installed share/onceq/pg.sh, or from the
       build tree its link to the checkout's (onceq/paths.h), so an older
       copy elsewhere never shadows the one that matches. */
    char found[S_PATH_LEN];
    if (oq_paths_data("pg.sh", found, sizeof found) == 0)
        candidates[1] = found;
    for (size_t i = 0; i < 2; i++) {
        if (candidates[i] && s_readable(candidates[i])) {
            snprintf(self->pg_script, sizeof self->pg_script, "%s", candidates[i]);
            return 0;
        }
    }
    fprintf(stderr,
            "onceq-chaos: deploy/pg.sh not found (looked for %s); pass --pg-script PATH or "
            "--database URL\n",
            candidates[1] ? candidates[1] : "share/onceq/pg.sh next to this binary");
    return -1;
}

static int s_find_bins(oq_procs_t *self)
{
    if (self->config->bin_dir) {
        snprintf(self->bin_dir, sizeof self->bin_dir, "%s", self->config->bin_dir);
    } else {
        if (oq_paths_exe_dir(self->bin_dir, sizeof self->bin_dir) < 0) {
            fprintf(stderr, "onceq-chaos: cannot find my own path; pass --bin-dir\n");
            return -1;
        }
    }
    snprintf(self->broker_bin, sizeof self->broker_bin, "%s/onceq-broker", self->bin_dir);
    snprintf(self->worker_bin, sizeof self->worker_bin, "%s/onceq-test-worker", self->bin_dir);
    snprintf(self->onceq_bin, sizeof self->onceq_bin, "%s/onceq", self->bin_dir);
    snprintf(self->carrier_bin, sizeof self->carrier_bin, "%s/onceq-carrier", self->bin_dir);
    const char *bins[] = {self->broker_bin, self->worker_bin, self->onceq_bin, self->carrier_bin};
    size_t needed = sizeof bins / sizeof bins[0] - !self->config->carrier;
    for (size_t i = 0; i < needed; i++) {
        if (!s_executable(bins[i])) {
            fprintf(stderr, "onceq-chaos: %s not found or not executable (use --bin-dir)\n",
                    bins[i]);
            return -1;
        }
    }
    return 0;
}

/* Journal support is a flag of the broker's; a broker built before it has
   no --data-dir in its help. */
static bool s_has_journal(const oq_procs_t *self)
{
    char cmd[S_CMD_LEN];
    snprintf(cmd, sizeof cmd, "'%s' --help 2>&1", self->broker_bin);
    FILE *p = popen(cmd, "r");
    if (!p)
        return false;
    char *text = calloc(1, S_HELP_BYTES);
    assert(text);
    size_t got = fread(text, 1, S_HELP_BYTES - 1, p);
    text[got] = 0;
    pclose(p);
    bool found = strstr(text, "--data-dir") != NULL;
    free(text);
    return found;
}

oq_procs_t *oq_procs_new(const oq_chaos_config_t *config, const oq_curve_t *curve,
                         const char *run_dir)
{
    assert(config && curve && run_dir);
    oq_procs_t *self = calloc(1, sizeof *self);
    assert(self);
    self->config = config;
    self->curve = curve;
    self->guardian_fd = -1;
    snprintf(self->run_dir, sizeof self->run_dir, "%s", run_dir);
    snprintf(self->worker_log, sizeof self->worker_log, "%s/workers.log", run_dir);
    if (s_find_bins(self) < 0 || (!config->database && s_find_pg_script(self) < 0)) {
        free(self);
        return NULL;
    }
    int front = oq_support_free_port(), back = oq_support_free_port();
    if (front < 0 || back < 0 || front == back) {
        fprintf(stderr, "onceq-chaos: no free loopback ports\n");
        free(self);
        return NULL;
    }
    snprintf(self->front, sizeof self->front, "tcp://127.0.0.1:%d", front);
    snprintf(self->back, sizeof self->back, "tcp://127.0.0.1:%d", back);
    self->durable = s_has_journal(self);
    return self;
}

void oq_procs_destroy(oq_procs_t **self_p)
{
    assert(self_p);
    oq_procs_t *self = *self_p;
    if (!self)
        return;
    if (self->supervisor)
        oq_procs_stop_workers(self);
    if (self->carrier) {
        if (self->carrier_stopped)
            kill(self->carrier, SIGCONT);
        s_stop(self->carrier, SIGTERM, OQ_CHAOS_STOP_MS);
        self->carrier = 0;
    }
    if (self->broker) {
        s_stop(self->broker, SIGTERM, OQ_CHAOS_STOP_MS);
        self->broker = 0;
    }
    if (self->pg_restart) {
        s_wait(self->pg_restart, OQ_CHAOS_DB_RESTART_MS);
        self->pg_restart = 0;
    }
    if (self->pg_started && s_pg_sh(self, "stop", NULL, OQ_CHAOS_SETUP_CMD_MS) != 0)
        fprintf(stderr, "onceq-chaos: could not stop the cluster in %s\n", self->pg_dir);
    if (self->guardian_fd >= 0)
        close(self->guardian_fd); /* the guardian finds it stopped and exits */
    if (self->guardian)
        s_wait(self->guardian, OQ_CHAOS_SETUP_CMD_MS);
    free(self);
    *self_p = NULL;
}

const char *oq_procs_front(const oq_procs_t *self)
{
    return self->front;
}

const char *oq_procs_back(const oq_procs_t *self)
{
    return self->back;
}

const char *oq_procs_worker_log(const oq_procs_t *self)
{
    return self->worker_log;
}

bool oq_procs_broker_durable(const oq_procs_t *self)
{
    return self->durable;
}

/* ---- the cluster ------------------------------------------------------ */

int oq_procs_start_pg(oq_procs_t *self)
{
    assert(!self->pg_started);
    /* As root the server runs as postgres, which must reach its directory. */
    chmod(self->run_dir, 0755);
    snprintf(self->pg_dir, sizeof self->pg_dir, "%s/pg", self->run_dir);
    self->pg_port = oq_support_free_port();
    if (self->pg_port < 0)
        return -1;
    self->pg_started = true; /* from here on, stop it whatever happens */
    s_start_guardian(self);
    int rc = s_pg_sh(self, "start", NULL, OQ_CHAOS_SETUP_CMD_MS);
    if (rc != 0) {
        fprintf(stderr, "onceq-chaos: the cluster did not start (pg.sh start: %d); see %s/pg.log\n",
                rc, self->run_dir);
        return -1;
    }
    oq_support_pg_url(self->pg_dir, self->pg_port, self->db_url, sizeof self->db_url);
    return 0;
}

const char *oq_procs_database_url(const oq_procs_t *self)
{
    return self->db_url[0] ? self->db_url : NULL;
}

int oq_procs_restart_pg(oq_procs_t *self, bool immediate)
{
    if (!self->pg_started || self->pg_restart)
        return -1;
    char port[S_NUM_LEN + S_SUFFIX_LEN], bin[S_CMD_LEN];
    const char *env[3];
    const char *argv[] = {
        "/bin/bash", self->pg_script, "restart", self->pg_dir, immediate ? "immediate" : "fast",
        NULL};
    pid_t pid = s_spawn(self, "pg.log", argv,
                        s_pg_env(self, port, sizeof port, bin, sizeof bin, env), true);
    if (pid < 0)
        return -1;
    self->pg_restart = pid;
    return 0;
}

bool oq_procs_pg_restarting(oq_procs_t *self, int *status)
{
    if (!self->pg_restart)
        return false;
    int st;
    pid_t r = waitpid(self->pg_restart, &st, WNOHANG);
    if (r == 0)
        return true;
    self->pg_restart = 0;
    if (status)
        *status = r == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return false;
}

/* ---- the broker ------------------------------------------------------- */

int oq_procs_start_broker(oq_procs_t *self)
{
    if (self->broker)
        return -1;
    const oq_chaos_config_t *c = self->config;
    char hb[S_NUM_LEN], liveness[S_NUM_LEN], retry_after[S_NUM_LEN], timeout[S_NUM_LEN];
    char data_dir[S_PATH_LEN + 16];
    snprintf(hb, sizeof hb, "%u", c->heartbeat_ms);
    snprintf(liveness, sizeof liveness, "%u", c->liveness);
    snprintf(retry_after, sizeof retry_after, "%g", c->retry_after_s);
    snprintf(timeout, sizeof timeout, "%g", c->job_timeout_s);
    snprintf(data_dir, sizeof data_dir, "%s/broker-data", self->run_dir);
    const char *argv[S_MAX_ARGS] = {self->broker_bin, "--front",        self->front, "--back",
                                    self->back,       "--heartbeat-ms", hb,          "--liveness",
                                    liveness,         "--retry-after",  retry_after, "--timeout",
                                    timeout,          "--log-level",    "info"};
    size_t n = 15;
    if (self->curve->on) {
        argv[n++] = "--keys";
        argv[n++] = self->curve->keys_dir;
    } else {
        argv[n++] = "--insecure";
    }
    if (self->durable) {
        argv[n++] = "--data-dir";
        argv[n++] = data_dir;
        argv[n++] = "--fsync";
        argv[n++] = "always";
    }
    argv[n] = NULL;
    pid_t pid = s_spawn(self, "broker.log", argv, NULL, true);
    if (pid < 0)
        return -1;
    self->broker = pid;
    return 0;
}

int oq_procs_kill_broker(oq_procs_t *self)
{
    if (!self->broker)
        return -1;
    kill(self->broker, SIGKILL);
    s_wait(self->broker, OQ_CHAOS_STOP_MS);
    self->broker = 0;
    return 0;
}

bool oq_procs_broker_died(oq_procs_t *self, int *status)
{
    if (!self->broker)
        return false;
    int st;
    if (waitpid(self->broker, &st, WNOHANG) != self->broker)
        return false;
    self->broker = 0;
    if (status)
        *status = st;
    return true;
}

/* ---- the carrier ------------------------------------------------------ */

/* The port in the carrier's "listening on 127.0.0.1:PORT" line of
   RUN/carrier.log; 0 while there is none. */
static int s_carrier_port(const oq_procs_t *self)
{
    char path[S_PATH_LEN + S_SUFFIX_LEN], line[S_CMD_LEN];
    snprintf(path, sizeof path, "%s/carrier.log", self->run_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int port = 0;
    while (!port && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "listening on 127.0.0.1:");
        if (at)
            port = atoi(at + strlen("listening on 127.0.0.1:"));
    }
    fclose(f);
    return port;
}

int oq_procs_start_carrier(oq_procs_t *self)
{
    if (self->carrier)
        return -1;
    const oq_chaos_config_t *c = self->config;
    char seed[S_NUM_LEN], errors[S_NUM_LEN], drops[S_NUM_LEN], most[S_NUM_LEN];
    snprintf(seed, sizeof seed, "%" PRIu64, c->seed);
    snprintf(errors, sizeof errors, "%g", c->carrier_error_rate);
    snprintf(drops, sizeof drops, "%g", c->carrier_drop_rate);
    /* One shipment per order at most: never the carrier's 507. */
    uint64_t orders = c->jobs < OQ_CHAOS_MAX_SHIPMENTS ? c->jobs : OQ_CHAOS_MAX_SHIPMENTS;
    snprintf(most, sizeof most, "%" PRIu64, orders);
    const char *argv[] = {self->carrier_bin,
                          "--bind",
                          "127.0.0.1",
                          "--port",
                          "0",
                          "--seed",
                          seed,
                          "--error-rate",
                          errors,
                          "--drop-reply-rate",
                          drops,
                          "--max-shipments",
                          most,
                          "--log-level",
                          "info",
                          NULL};
    pid_t pid = s_spawn(self, "carrier.log", argv, NULL, true);
    if (pid < 0)
        return -1;
    self->carrier = pid;
    int64_t end = oq_support_now_ms() + OQ_CHAOS_CARRIER_UP_MS;
    while (oq_support_now_ms() < end) {
        int port = s_carrier_port(self);
        if (port > 0) {
            snprintf(self->carrier_url, sizeof self->carrier_url, "http://127.0.0.1:%d", port);
            return 0;
        }
        if (oq_procs_carrier_died(self))
            break;
        oq_support_sleep_ms(S_WAIT_SLICE_MS);
    }
    fprintf(stderr, "onceq-chaos: the carrier did not start within %d ms (see %s/carrier.log)\n",
            OQ_CHAOS_CARRIER_UP_MS, self->run_dir);
    return -1;
}

const char *oq_procs_carrier_url(const oq_procs_t *self)
{
    return self->carrier_url[0] ? self->carrier_url : NULL;
}

int oq_procs_signal_carrier(oq_procs_t *self, int sig)
{
    if (!self->carrier || kill(self->carrier, sig) < 0)
        return -1;
    if (sig == SIGSTOP || sig == SIGCONT)
        self->carrier_stopped = sig == SIGSTOP;
    return 0;
}

bool oq_procs_carrier_died(oq_procs_t *self)
{
    if (!self->carrier || waitpid(self->carrier, NULL, WNOHANG) != self->carrier)
        return false;
    self->carrier = 0;
    self->carrier_stopped = false;
    return true;
}

/* ---- the workers ------------------------------------------------------ */

int oq_procs_start_workers(oq_procs_t *self)
{
    if (self->supervisor)
        return -1;
    const oq_chaos_config_t *c = self->config;
    char processes[S_NUM_LEN], hb[S_NUM_LEN], stop[S_NUM_LEN];
    snprintf(processes, sizeof processes, "%u", c->workers);
    snprintf(hb, sizeof hb, "%u", c->heartbeat_ms);
    snprintf(stop, sizeof stop, "%d", OQ_CHAOS_WORKER_STOP_S);
    const char *url = c->database ? c->database : self->db_url;
    const char *argv[S_MAX_ARGS] = {self->worker_bin,
                                    "--broker",
                                    self->back,
                                    "--processes",
                                    processes,
                                    "--heartbeat-ms",
                                    hb,
                                    "--stop-timeout",
                                    stop,
                                    "--name",
                                    "chaos",
                                    "--database",
                                    url,
                                    "--log-level",
                                    "info"};
    size_t n = 15;
    if (self->curve->on) {
        argv[n++] = "--key";
        argv[n++] = self->curve->worker_secret;
        argv[n++] = "--broker-key";
        argv[n++] = self->curve->broker_public;
    }
    if (self->carrier_url[0]) {
        argv[n++] = "--carrier-url";
        argv[n++] = self->carrier_url;
    }
    /* Last, so that they may also override ours (--log-level, ...). */
    for (size_t i = 0; i < c->worker_arg_count && n < S_MAX_ARGS - 1; i++)
        argv[n++] = c->worker_args[i];
    argv[n] = NULL;
    /* The carrier's URL in the environment too, for the test-only handlers
       that have no flag of their own (request_shipment_unkeyed). */
    char carrier_env[S_ENDPOINT_LEN + S_SUFFIX_LEN];
    snprintf(carrier_env, sizeof carrier_env, "ONCEQ_CARRIER_URL=%s", self->carrier_url);
    const char *env[] = {c->hooks ? "ONCEQ_TEST_HOOKS=1" : "ONCEQ_TEST_HOOKS=0",
                         self->carrier_url[0] ? carrier_env : NULL, NULL};
    pid_t pid = s_spawn(self, "workers.log", argv, env, true);
    if (pid < 0)
        return -1;
    self->supervisor = pid;
    return 0;
}

bool oq_procs_workers_died(oq_procs_t *self)
{
    if (!self->supervisor)
        return false;
    if (waitpid(self->supervisor, NULL, WNOHANG) != self->supervisor)
        return false;
    self->supervisor = 0;
    return true;
}

int oq_procs_stop_workers(oq_procs_t *self)
{
    for (size_t i = 0; i < self->stopped_count; i++)
        if (oq_procs_owns_worker(self, self->stopped[i]))
            kill(self->stopped[i], SIGCONT);
    self->stopped_count = 0;
    if (!self->supervisor)
        return 0;
    /* The supervisor gives its workers --stop-timeout to finish their jobs;
       ours waits that and a margin before it uses force. */
    int rc = s_stop(self->supervisor, SIGTERM,
                    (int64_t)OQ_CHAOS_WORKER_STOP_S * 1000 + OQ_CHAOS_STOP_MS);
    self->supervisor = 0;
    return rc;
}

bool oq_procs_owns_worker(const oq_procs_t *self, pid_t pid)
{
    if (!self->supervisor || pid <= 0)
        return false;
    char path[S_NUM_LEN + 16], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = 0;
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses,
       so read from the last ')'. */
    const char *end = strrchr(text, ')');
    char state;
    int ppid;
    if (!end || sscanf(end + 1, " %c %d", &state, &ppid) != 2)
        return false;
    return ppid == self->supervisor && state != 'Z';
}

int oq_procs_signal_worker(oq_procs_t *self, pid_t pid, int sig)
{
    if (!oq_procs_owns_worker(self, pid))
        return -1;
    if (kill(pid, sig) < 0)
        return -1;
    if (sig == SIGSTOP && self->stopped_count < OQ_CHAOS_MAX_WORKERS)
        self->stopped[self->stopped_count++] = pid;
    if (sig == SIGCONT || sig == SIGKILL) {
        for (size_t i = 0; i < self->stopped_count; i++) {
            if (self->stopped[i] == pid) {
                self->stopped[i] = self->stopped[--self->stopped_count];
                break;
            }
        }
    }
    return 0;
}
