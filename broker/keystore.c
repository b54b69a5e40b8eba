/*  keystore.c: the key directory, read into one sorted array of public
    keys, looked up by binary search (a lookup per message). */
#include "keystore.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onceq/limits.h"
#include "onceq/log.h"

#define S_PATH_LEN 4096

typedef struct {
    uint8_t key[OQ_KEY_BYTES];
    oq_role_t role;
    char name[OQ_KEY_NAME_MAX + 1]; /* the file's name without .key, cut to fit */
} s_entry_t;

struct oq_keystore {
    oq_keypair_t broker;
    s_entry_t *entries; /* sorted by key */
    size_t count, cap;
    size_t per_role[OQ_ROLE_COUNT_];
};

static int s_compare(const void *a, const void *b)
{
    return memcmp(((const s_entry_t *)a)->key, ((const s_entry_t *)b)->key, OQ_KEY_BYTES);
}

static int s_compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool s_ends_with(const char *text, const char *suffix)
{
    size_t n = strlen(text), m = strlen(suffix);
    return n > m && strcmp(text + n - m, suffix) == 0;
}

static int s_add(oq_keystore_t *self, const uint8_t key[OQ_KEY_BYTES], oq_role_t role,
                 const char *name, char *reason, size_t reason_len)
{
    if (self->count == OQ_MAX_KEYS) {
        snprintf(reason, reason_len, "more than %d keys", OQ_MAX_KEYS);
        return -1;
    }
    if (self->count == self->cap) {
        size_t cap = self->cap ? self->cap * 2 : 64;
        s_entry_t *grown = realloc(self->entries, cap * sizeof *grown);
        if (!grown) {
            snprintf(reason, reason_len, "out of memory");
            return -1;
        }
        self->entries = grown;
        self->cap = cap;
    }
    s_entry_t *e = &self->entries[self->count++];
    memcpy(e->key, key, OQ_KEY_BYTES);
    e->role = role;
    snprintf(e->name, sizeof e->name, "%s", name);
    return 0;
}

/* Every NAME.key in DIR/<plural of role>, in name order. A missing
   directory holds no keys. */
static int s_read_role(oq_keystore_t *self, const char *dir, oq_role_t role, char *reason,
                       size_t reason_len)
{
    char path[S_PATH_LEN];
    snprintf(path, sizeof path, "%s/%s", dir, oq_role_plural(role));
    DIR *d = opendir(path);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        snprintf(reason, reason_len, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t count = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (s_ends_with(e->d_name, OQ_KEY_SECRET_EXT)) {
            oq_warn("%s/%s is a secret key file in a directory of allowed public keys: it is "
                    "ignored; a secret file belongs only with its owner",
                    path, e->d_name);
            continue;
        }
        if (!s_ends_with(e->d_name, OQ_KEY_PUBLIC_EXT))
            continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            char **grown = realloc(names, cap * sizeof *grown);
            if (!grown) {
                rc = -1;
                snprintf(reason, reason_len, "out of memory");
                break;
            }
            names = grown;
        }
        if (!(names[count] = strdup(e->d_name))) {
            rc = -1;
            snprintf(reason, reason_len, "out of memory");
            break;
        }
        count++;
    }
    closedir(d);
    if (rc == 0 && count > 1)
        qsort(names, count, sizeof *names, s_compare_names);
    for (size_t i = 0; rc == 0 && i < count; i++) {
        char file[S_PATH_LEN + 256], z85[OQ_KEY_Z85_LEN + 1];
        snprintf(file, sizeof file, "%s/%s", path, names[i]);
        uint8_t key[OQ_KEY_BYTES];
        if (oq_keys_load_public(file, z85, reason, reason_len) < 0 ||
            oq_keys_decode(z85, key) < 0) {
            rc = -1;
            break;
        }
        names[i][strlen(names[i]) - strlen(OQ_KEY_PUBLIC_EXT)] = 0;
        rc = s_add(self, key, role, names[i], reason, reason_len);
    }
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
    return rc;
}

oq_keystore_t *oq_keystore_load(const char *dir, char *reason, size_t reason_len)
{
    assert(dir);
    oq_keystore_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(reason, reason_len, "out of memory");
        return NULL;
    }
    char path[S_PATH_LEN];
    snprintf(path, sizeof path, "%s/%s%s", dir, OQ_KEY_BROKER_NAME, OQ_KEY_SECRET_EXT);
    char why[512];
    if (oq_keys_load_pair(path, &self->broker, why, sizeof why) < 0) {
        snprintf(reason, reason_len, "%s (make the broker's pair with: onceq keygen --dir %s %s)",
                 why, dir, OQ_KEY_BROKER_NAME);
        goto fail;
    }
    struct stat st;
    if (stat(path, &st) == 0 && (st.st_mode & 077))
        oq_warn("%s is readable by others (mode %03o): anyone who reads it can pose as the "
                "broker; chmod 600 it",
                path, (unsigned)(st.st_mode & 0777));
    for (int role = OQ_ROLE_NONE + 1; role < OQ_ROLE_COUNT_; role++)
        if (s_read_role(self, dir, (oq_role_t)role, reason, reason_len) < 0)
            goto fail;
    if (self->count > 1)
        qsort(self->entries, self->count, sizeof *self->entries, s_compare);
    /* One key, one role; the same key twice in one role is only a copy. */
    size_t kept = 0;
    for (size_t i = 0; i < self->count; i++) {
        s_entry_t *e = &self->entries[i];
        if (kept && s_compare(&self->entries[kept - 1], e) == 0) {
            s_entry_t *first = &self->entries[kept - 1];
            if (first->role != e->role) {
                char z85[OQ_KEY_Z85_LEN + 1];
                oq_keys_encode(e->key, z85);
                snprintf(reason, reason_len,
                         "key %s is both %s/%s.key and %s/%s.key: a key has one role; use a key "
                         "per role",
                         z85, oq_role_plural(first->role), first->name, oq_role_plural(e->role),
                         e->name);
                goto fail;
            }
            continue;
        }
        self->entries[kept++] = *e;
    }
    self->count = kept;
    for (size_t i = 0; i < self->count; i++)
        self->per_role[self->entries[i].role]++;
    return self;
fail:
    oq_keystore_destroy(&self);
    return NULL;
}

void oq_keystore_destroy(oq_keystore_t **self_p)
{
    assert(self_p);
    oq_keystore_t *self = *self_p;
    if (!self)
        return;
    memset(&self->broker, 0, sizeof self->broker);
    free(self->entries);
    free(self);
    *self_p = NULL;
}

const oq_keypair_t *oq_keystore_broker(const oq_keystore_t *self)
{
    return &self->broker;
}

oq_role_t oq_keystore_role(const oq_keystore_t *self, const uint8_t key[OQ_KEY_BYTES],
                           const char **name)
{
    s_entry_t probe;
    memcpy(probe.key, key, OQ_KEY_BYTES);
    const s_entry_t *e =
        self->count ? bsearch(&probe, self->entries, self->count, sizeof *self->entries, s_compare)
                    : NULL;
    if (name)
        *name = e ? e->name : "";
    return e ? e->role : OQ_ROLE_NONE;
}

oq_role_t oq_keystore_role_z85(const oq_keystore_t *self, const char *z85, const char **name)
{
    uint8_t key[OQ_KEY_BYTES];
    if (!z85 || oq_keys_decode(z85, key) < 0) {
        if (name)
            *name = "";
        return OQ_ROLE_NONE;
    }
    return oq_keystore_role(self, key, name);
}

size_t oq_keystore_count(const oq_keystore_t *self, oq_role_t role)
{
    return role > OQ_ROLE_NONE && role < OQ_ROLE_COUNT_ ? self->per_role[role] : 0;
}
