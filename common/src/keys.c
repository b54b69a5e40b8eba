/*  keys.c: key pairs in czmq's zcert text format.

    Reading takes the ZPL that zcert writes and no more: a line that starts
    with '#' (after blanks) is a comment, a line starting in column 0 opens
    a section ("metadata", "curve"), an indented `name = value` line belongs
    to the section above it. The value is quoted ("..." or '...') as zcert
    writes it, or bare to the end of the line. Z85 uses '#', so a '#' after
    a value is not taken for a comment. Only `public-key` and `secret-key`
    of the curve section are read; everything else is ignored, as zcert
    ignores metadata it does not know. */
#include "onceq/keys.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define S_PATH_LEN  4096
#define S_STAMP_LEN 32
#define S_TEXT_LEN  1024

static const char s_z85_alphabet[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    ".-:+=^!/*?&<>()[]{}@%$#";

bool oq_keys_z85_valid(const char *text, size_t len)
{
    if (!text || len != OQ_KEY_Z85_LEN)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!text[i] || !strchr(s_z85_alphabet, text[i]))
            return false;
    return true;
}

int oq_keys_decode(const char *z85, uint8_t key[OQ_KEY_BYTES])
{
    if (!z85 || !oq_keys_z85_valid(z85, strlen(z85)))
        return -1;
    return zmq_z85_decode(key, z85) ? 0 : -1;
}

void oq_keys_encode(const uint8_t key[OQ_KEY_BYTES], char z85[OQ_KEY_Z85_LEN + 1])
{
    zmq_z85_encode(z85, key, OQ_KEY_BYTES);
}

int oq_keys_generate(oq_keypair_t *pair)
{
    assert(pair);
    memset(pair, 0, sizeof *pair);
    return zmq_curve_keypair(pair->public_z85, pair->secret_z85) == 0 ? 0 : -1;
}

bool oq_keys_name_valid(const char *name)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > OQ_KEY_NAME_MAX || name[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

/* ---- writing ------------------------------------------------------------ */

/* Write text to path through path.tmp, with exactly mode, fsynced. */
static int s_write_file(const char *path, const char *text, mode_t mode, bool overwrite,
                        char *reason, size_t reason_len)
{
    if (!overwrite && access(path, F_OK) == 0) {
        snprintf(reason, reason_len, "%s exists already (remove it first to replace it)", path);
        return -1;
    }
    char tmp[S_PATH_LEN + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        goto fail;
    size_t len = strlen(text);
    /* The umask may have taken bits away; a secret file must be 0600 whatever
       it says, and a public one readable. */
    if (fchmod(fd, mode) < 0 || write(fd, text, len) != (ssize_t)len || fsync(fd) < 0) {
        close(fd);
        unlink(tmp);
        goto fail;
    }
    close(fd);
    if (rename(tmp, path) < 0) {
        unlink(tmp);
        goto fail;
    }
    return 0;
fail:
    snprintf(reason, reason_len, "cannot write %s: %s", path, strerror(errno));
    return -1;
}

int oq_keys_save(const oq_keypair_t *pair, const char *dir, const char *name, bool overwrite,
                 char *reason, size_t reason_len)
{
    assert(pair && dir && name);
    if (!oq_keys_name_valid(name)) {
        snprintf(reason, reason_len,
                 "invalid key name \"%s\": 1 to %d characters of A-Z a-z 0-9 _ . -, not "
                 "starting with a dot",
                 name, OQ_KEY_NAME_MAX);
        return -1;
    }
    if (!oq_keys_z85_valid(pair->public_z85, strlen(pair->public_z85)) ||
        !oq_keys_z85_valid(pair->secret_z85, strlen(pair->secret_z85))) {
        snprintf(reason, reason_len, "not a key pair: each key must be 40 characters of Z85");
        return -1;
    }
    char stamp[S_STAMP_LEN];
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", gmtime_r(&now, &tm));
    char public_path[S_PATH_LEN], secret_path[S_PATH_LEN];
    snprintf(public_path, sizeof public_path, "%s/%s%s", dir, name, OQ_KEY_PUBLIC_EXT);
    snprintf(secret_path, sizeof secret_path, "%s/%s%s", dir, name, OQ_KEY_SECRET_EXT);
    /* Both checked before either is written: a new secret next to an old
       public key would be a pair that does not match. */
    const char *paths[] = {secret_path, public_path};
    for (int i = 0; i < 2 && !overwrite; i++) {
        if (access(paths[i], F_OK) == 0) {
            snprintf(reason, reason_len, "%s exists already (remove it first to replace it)",
                     paths[i]);
            return -1;
        }
    }
    char text[S_TEXT_LEN];
    snprintf(text, sizeof text,
             "#   ****  Generated on %s UTC by onceq keygen  ****\n"
             "#   ZeroMQ CURVE **Secret** Certificate\n"
             "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n"
             "\n"
             "metadata\n"
             "curve\n"
             "    public-key = \"%s\"\n"
             "    secret-key = \"%s\"\n",
             stamp, pair->public_z85, pair->secret_z85);
    /* The secret first: a public key whose secret was never written would
       be a key nobody can use. */
    if (s_write_file(secret_path, text, OQ_KEY_SECRET_MODE, overwrite, reason, reason_len) < 0)
        return -1;
    snprintf(text, sizeof text,
             "#   ****  Generated on %s UTC by onceq keygen  ****\n"
             "#   ZeroMQ CURVE Public Certificate\n"
             "#   Exchange securely, or use a secure mechanism to verify the contents\n"
             "#   of this file after exchange.\n"
             "\n"
             "metadata\n"
             "curve\n"
             "    public-key = \"%s\"\n",
             stamp, pair->public_z85);
    if (s_write_file(public_path, text, OQ_KEY_PUBLIC_MODE, overwrite, reason, reason_len) < 0)
        return -1;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

/* ---- reading ------------------------------------------------------------ */

/* The whole file, NUL-terminated, malloc'd; NULL with a reason. */
static char *s_slurp(const char *path, char *reason, size_t reason_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(reason, reason_len, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = malloc(OQ_KEY_FILE_MAX + 1);
    size_t got = 0;
    ssize_t n = 0;
    while (text && got <= OQ_KEY_FILE_MAX &&
           (n = read(fd, text + got, OQ_KEY_FILE_MAX + 1 - got)) > 0)
        got += (size_t)n;
    int err = errno;
    close(fd);
    if (!text) {
        snprintf(reason, reason_len, "cannot read %s: out of memory", path);
        return NULL;
    }
    if (n < 0) {
        snprintf(reason, reason_len, "cannot read %s: %s", path, strerror(err));
        free(text);
        return NULL;
    }
    if (got > OQ_KEY_FILE_MAX) {
        snprintf(reason, reason_len, "%s is larger than %d bytes: not a key file", path,
                 OQ_KEY_FILE_MAX);
        free(text);
        return NULL;
    }
    text[got] = 0;
    if (memchr(text, 0, got)) {
        snprintf(reason, reason_len, "%s holds NUL bytes: not a key file", path);
        free(text);
        return NULL;
    }
    return text;
}

/* The value of `name = value` in line (after the name), into out; -1 if
   it is not a single Z85 key. */
static int s_value(const char *at, const char *end, char out[OQ_KEY_Z85_LEN + 1])
{
    while (at < end && (*at == ' ' || *at == '\t'))
        at++;
    if (at == end || *at != '=')
        return -1;
    at++;
    while (at < end && (*at == ' ' || *at == '\t'))
        at++;
    const char *stop;
    if (at < end && (*at == '"' || *at == '\'')) {
        char quote = *at++;
        stop = memchr(at, quote, (size_t)(end - at));
        if (!stop)
            return -1;
        for (const char *p = stop + 1; p < end; p++)
            if (*p != ' ' && *p != '\t' && *p != '\r')
                return -1;
    } else {
        stop = end;
        while (stop > at && (stop[-1] == ' ' || stop[-1] == '\t' || stop[-1] == '\r'))
            stop--;
    }
    size_t len = (size_t)(stop - at);
    if (!oq_keys_z85_valid(at, len))
        return -1;
    memcpy(out, at, len);
    out[len] = 0;
    return 0;
}

/* Read both keys of the curve section; each absent one is left empty. */
static int s_parse(const char *path, const char *text, oq_keypair_t *pair, char *reason,
                   size_t reason_len)
{
    memset(pair, 0, sizeof *pair);
    bool in_curve = false;
    int line_no = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        if (!end)
            end = line + strlen(line);
        line_no++;
        const char *at = line;
        while (at < end && (*at == ' ' || *at == '\t'))
            at++;
        bool indented = at > line;
        if (at < end && *at != '#' && *at != '\r') {
            if (!indented) {
                size_t len = (size_t)(end - at);
                while (len && (at[len - 1] == ' ' || at[len - 1] == '\r'))
                    len--;
                in_curve = len == 5 && memcmp(at, "curve", 5) == 0;
            } else if (in_curve) {
                static const char *const names[] = {"public-key", "secret-key"};
                char *dests[] = {pair->public_z85, pair->secret_z85};
                for (int i = 0; i < 2; i++) {
                    size_t n = strlen(names[i]);
                    if ((size_t)(end - at) < n || memcmp(at, names[i], n) != 0 ||
                        (at + n < end && at[n] != ' ' && at[n] != '\t' && at[n] != '='))
                        continue;
                    if (dests[i][0]) {
                        snprintf(reason, reason_len, "%s: line %d: a second %s", path, line_no,
                                 names[i]);
                        return -1;
                    }
                    if (s_value(at + n, end, dests[i]) < 0) {
                        snprintf(reason, reason_len,
                                 "%s: line %d: %s is not one key of 40 Z85 characters in quotes",
                                 path, line_no, names[i]);
                        return -1;
                    }
                }
            }
        }
        line = *end ? end + 1 : end;
    }
    if (!pair->public_z85[0]) {
        snprintf(reason, reason_len,
                 "%s: no public-key in a curve section: not a key file (onceq keygen makes "
                 "them)",
                 path);
        return -1;
    }
    return 0;
}

int oq_keys_load_pair(const char *path, oq_keypair_t *pair, char *reason, size_t reason_len)
{
    assert(path && pair);
    char *text = s_slurp(path, reason, reason_len);
    if (!text)
        return -1;
    int rc = s_parse(path, text, pair, reason, reason_len);
    free(text);
    if (rc < 0)
        return -1;
    if (!pair->secret_z85[0]) {
        snprintf(reason, reason_len,
                 "%s holds no secret-key: give the secret file (NAME%s), not the public one", path,
                 OQ_KEY_SECRET_EXT);
        memset(pair, 0, sizeof *pair);
        return -1;
    }
    char derived[OQ_KEY_Z85_LEN + 1];
    if (zmq_curve_public(derived, pair->secret_z85) != 0 ||
        strcmp(derived, pair->public_z85) != 0) {
        snprintf(reason, reason_len,
                 "%s: its secret-key does not belong to the public-key written next to it", path);
        memset(pair, 0, sizeof *pair);
        return -1;
    }
    return 0;
}

int oq_keys_load_public(const char *path, char public_z85[OQ_KEY_Z85_LEN + 1], char *reason,
                        size_t reason_len)
{
    assert(path && public_z85);
    char *text = s_slurp(path, reason, reason_len);
    if (!text)
        return -1;
    oq_keypair_t pair;
    int rc = s_parse(path, text, &pair, reason, reason_len);
    free(text);
    if (rc < 0)
        return -1;
    memcpy(public_z85, pair.public_z85, sizeof pair.public_z85);
    memset(&pair, 0, sizeof pair);
    return 0;
}
