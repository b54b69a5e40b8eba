/*  lease_key.c: the lease key file of the data directory (lease_key.h). */
#include "lease_key.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include <sys/random.h>
#include <unistd.h>

#include "journal.h"

/* Bytes of the key file's path, and of its temporary twin's (".tmp" more). */
#define S_MAX_PATH_BYTES 4096
#define S_MAX_TMP_BYTES  (S_MAX_PATH_BYTES + 104)

int oq_lease_key_load(const char *dir, uint8_t key[OQ_LEASE_KEY_BYTES], char *reason,
                      size_t reason_len)
{
    char path[S_MAX_PATH_BYTES];
    snprintf(path, sizeof path, "%s/%s", dir, OQ_LEASE_KEY_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, key, OQ_LEASE_KEY_BYTES);
        close(fd);
        if (n == OQ_LEASE_KEY_BYTES)
            return 0;
        snprintf(reason, reason_len,
                 "lease key %s is %zd bytes, expected %d (remove it to make a new one; acks of "
                 "jobs delivered before will then be ignored)",
                 path, n, OQ_LEASE_KEY_BYTES);
        return -1;
    }
    if (errno != ENOENT)
        goto fail;
    if (getrandom(key, OQ_LEASE_KEY_BYTES, 0) != OQ_LEASE_KEY_BYTES)
        goto fail;
    char tmp[S_MAX_TMP_BYTES];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, OQ_JOURNAL_FILE_MODE);
    if (fd < 0)
        goto fail;
    if (write(fd, key, OQ_LEASE_KEY_BYTES) != OQ_LEASE_KEY_BYTES || fsync(fd) < 0) {
        close(fd);
        goto fail;
    }
    close(fd);
    if (rename(tmp, path) < 0)
        goto fail;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
fail:
    snprintf(reason, reason_len, "cannot keep the lease key in %s: %s", path, strerror(errno));
    return -1;
}
