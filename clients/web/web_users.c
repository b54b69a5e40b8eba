/*  web_users.c: the users file and each user's CSRF token (web_users.h).

    Checking a password costs what its hash makes it cost (yescrypt and
    sha512crypt take milliseconds on purpose), and the browser sends it
    with every request, so the last good pair is remembered per user: a
    request whose password is the one that passed last time is let in
    without hashing again. What is remembered is a BLAKE2b digest of the
    password under a key random at start, never the password. */
#include "web_users.h"

#include <crypt.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Longest line of the users file, in bytes. */
#define S_MAX_LINE_BYTES 1024

typedef struct {
    oq_web_user_t user;
    unsigned char good[crypto_generichash_BYTES]; /* digest of the last good password */
    bool has_good;                                /* good is set */
} s_entry_t;

struct oq_web_users {
    s_entry_t entries[OQ_WEB_MAX_USERS];
    size_t count;
    unsigned char key[crypto_generichash_KEYBYTES]; /* for the digests of good passwords */
};

static int s_fail(char *reason, size_t reason_len, const char *path, unsigned line, const char *why)
{
    if (line)
        snprintf(reason, reason_len, "users file %s, line %u: %s", path, line, why);
    else
        snprintf(reason, reason_len, "users file %s: %s", path, why);
    return -1;
}

/* One line "NAME ROLE HASH" into entry. 0, or -1 with why. */
static int s_parse_line(char *line, s_entry_t *entry, const char **why)
{
    char *save = NULL;
    char *name = strtok_r(line, " \t", &save);
    char *role = strtok_r(NULL, " \t", &save);
    char *hash = strtok_r(NULL, " \t", &save);
    if (!name || !role || !hash || strtok_r(NULL, " \t", &save)) {
        *why = "expected NAME ROLE HASH (ROLE admin or viewer, HASH from openssl passwd -6)";
        return -1;
    }
    if (strlen(name) > OQ_WEB_MAX_USER_LEN || strchr(name, ':')) {
        *why = "a user name is at most 64 bytes, without ':'";
        return -1;
    }
    if (strcmp(role, "admin") == 0)
        entry->user.role = OQ_WEB_ROLE_ADMIN;
    else if (strcmp(role, "viewer") == 0)
        entry->user.role = OQ_WEB_ROLE_VIEWER;
    else {
        *why = "the role is admin or viewer";
        return -1;
    }
    if (hash[0] != '$' || strlen(hash) > OQ_WEB_MAX_HASH_LEN) {
        *why = "the hash is a crypt(3) hash starting with '$' (openssl passwd -6)";
        return -1;
    }
    snprintf(entry->user.name, sizeof entry->user.name, "%s", name);
    snprintf(entry->user.hash, sizeof entry->user.hash, "%s", hash);
    unsigned char raw[OQ_WEB_CSRF_BYTES];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2hex(entry->user.csrf, sizeof entry->user.csrf, raw, sizeof raw);
    return 0;
}

oq_web_users_t *oq_web_users_load(const char *path, char *reason, size_t reason_len)
{
    if (sodium_init() < 0) {
        s_fail(reason, reason_len, path, 0, "libsodium did not start");
        return NULL;
    }
    FILE *file = fopen(path, "r");
    if (!file) {
        s_fail(reason, reason_len, path, 0, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(file), &st) < 0 || (st.st_mode & (S_IRWXG | S_IRWXO))) {
        s_fail(reason, reason_len, path, 0,
               "readable by group or others: chmod 600 it (it holds password hashes)");
        fclose(file);
        return NULL;
    }
    oq_web_users_t *self = calloc(1, sizeof *self);
    if (!self) {
        s_fail(reason, reason_len, path, 0, "out of memory");
        fclose(file);
        return NULL;
    }
    randombytes_buf(self->key, sizeof self->key);
    char line[S_MAX_LINE_BYTES];
    unsigned number = 0;
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, file)) {
        number++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            rc = s_fail(reason, reason_len, path, number, "line too long");
            break;
        }
        line[strcspn(line, "\r\n")] = 0;
        char *start = line + strspn(line, " \t");
        if (!*start || *start == '#')
            continue;
        if (self->count == OQ_WEB_MAX_USERS) {
            rc = s_fail(reason, reason_len, path, number, "more than 256 users");
            break;
        }
        const char *why = NULL;
        s_entry_t *entry = &self->entries[self->count];
        if (s_parse_line(start, entry, &why) < 0) {
            rc = s_fail(reason, reason_len, path, number, why);
            break;
        }
        for (size_t i = 0; i < self->count; i++)
            if (strcmp(self->entries[i].user.name, entry->user.name) == 0)
                rc = s_fail(reason, reason_len, path, number, "a user named twice");
        self->count++;
    }
    fclose(file);
    if (rc == 0 && self->count == 0)
        rc = s_fail(reason, reason_len, path, 0, "no users");
    if (rc < 0)
        oq_web_users_destroy(&self);
    return self;
}

void oq_web_users_destroy(oq_web_users_t **self_p)
{
    oq_web_users_t *self = *self_p;
    if (!self)
        return;
    sodium_memzero(self, sizeof *self);
    free(self);
    *self_p = NULL;
}

const oq_web_user_t *oq_web_users_check(const oq_web_users_t *self, const char *name,
                                        const char *password)
{
    if (!name || !password || strlen(password) > OQ_WEB_MAX_PASSWORD_LEN)
        return NULL;
    s_entry_t *entry = NULL;
    for (size_t i = 0; i < self->count; i++)
        if (strcmp(self->entries[i].user.name, name) == 0)
            entry = (s_entry_t *)&self->entries[i];
    if (!entry)
        return NULL;
    unsigned char digest[crypto_generichash_BYTES];
    crypto_generichash(digest, sizeof digest, (const unsigned char *)password, strlen(password),
                       self->key, sizeof self->key);
    if (entry->has_good && sodium_memcmp(digest, entry->good, sizeof digest) == 0)
        return &entry->user;
    struct crypt_data data;
    memset(&data, 0, sizeof data);
    const char *hashed = crypt_r(password, entry->user.hash, &data);
    size_t len = strlen(entry->user.hash);
    if (!hashed || hashed[0] == '*' || strlen(hashed) != len ||
        sodium_memcmp(hashed, entry->user.hash, len) != 0)
        return NULL;
    memcpy(entry->good, digest, sizeof digest);
    entry->has_good = true;
    return &entry->user;
}

bool oq_web_users_csrf_ok(const oq_web_user_t *user, const char *token)
{
    size_t len = strlen(user->csrf);
    return token && strlen(token) == len && sodium_memcmp(token, user->csrf, len) == 0;
}

const char *oq_web_role_name(oq_web_role_t role)
{
    return role == OQ_WEB_ROLE_ADMIN ? "admin" : "viewer";
}
