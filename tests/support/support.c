/*  support.c: shared test fixtures. */
#include "support.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "onceq/paths.h"

#define S_FTW_FDS 16

int64_t oq_support_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void oq_support_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

void oq_support_sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

int oq_support_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
        getsockname(fd, (struct sockaddr *)&addr, &len) == 0)
        port = ntohs(addr.sin_port);
    close(fd);
    return port;
}

int oq_support_temp_dir(const char *prefix, char *out, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    int w = snprintf(out, len, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
    if (w < 0 || (size_t)w >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkdtemp(out) ? 0 : -1;
}

static int s_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path) == 0 ? 0 : -1;
}

int oq_support_remove_tree(const char *path)
{
    return nftw(path, s_remove_one, S_FTW_FDS, FTW_DEPTH | FTW_PHYS);
}

int oq_support_pg_script(char *out, size_t len)
{
    const char *env = getenv("ONCEQ_PG_SCRIPT");
    if (env && *env) {
        int w = snprintf(out, len, "%s", env);
        return w < 0 || (size_t)w >= len ? -1 : 0;
    }
    if (oq_paths_data("pg.sh", out, len) < 0)
        return -1;
    return access(out, R_OK) == 0 ? 0 : -1;
}

void oq_support_pg_url(const char *dir, int port, char *out, size_t len)
{
    snprintf(out, len, "host=%s port=%d dbname=onceq user=onceq", dir, port);
}

int oq_support_thread_cpus(pid_t pid, const char *name, char *out, size_t len)
{
    char path[300];
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/task");
    DIR *dir = opendir(path);
    if (!dir)
        return -1;
    struct dirent *entry;
    int rc = -1;
    while (rc < 0 && (entry = readdir(dir))) {
        if (entry->d_name[0] == '.')
            continue;
        char file[600], comm[64] = "", line[256], list[64];
        snprintf(file, sizeof file, "%s/%s/comm", path, entry->d_name);
        FILE *f = fopen(file, "r");
        bool match = f && fgets(comm, sizeof comm, f) && strncmp(comm, name, strlen(name)) == 0;
        if (f)
            fclose(f);
        snprintf(file, sizeof file, "%s/%s/status", path, entry->d_name);
        f = match ? fopen(file, "r") : NULL;
        while (f && rc < 0 && fgets(line, sizeof line, f))
            if (sscanf(line, "Cpus_allowed_list: %63s", list) == 1) {
                snprintf(out, len, "%s", list);
                rc = 0;
            }
        if (f)
            fclose(f);
    }
    closedir(dir);
    return rc;
}
