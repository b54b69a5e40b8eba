/*  web_users.h: who may use onceq-web. A users file holds one person a
    line, "NAME ROLE HASH": ROLE is "admin" (every page and every action)
    or "viewer" (every page, no action), HASH a crypt(3) hash of the
    password as `openssl passwd -6` or `mkpasswd -m yescrypt` print it.
    Browsers send the name and password by HTTP basic authentication; the
    file holds no password, and one readable by others than its owner is
    refused. Each user gets a CSRF token of its own, random at start, that
    every action must carry back. */
#ifndef ONCEQ_WEB_USERS_H
#define ONCEQ_WEB_USERS_H

#include <stdbool.h>
#include <stddef.h>

/* Users one file may hold. */
#define OQ_WEB_MAX_USERS 256
/* Longest user name, in bytes. */
#define OQ_WEB_MAX_USER_LEN 64
/* Longest password checked, in bytes (a longer one is refused unread). */
#define OQ_WEB_MAX_PASSWORD_LEN 256
/* Longest hash, in bytes. */
#define OQ_WEB_MAX_HASH_LEN 256
/* Random bytes of a CSRF token (hex on the page: twice as many characters). */
#define OQ_WEB_CSRF_BYTES 24

typedef enum {
    OQ_WEB_ROLE_VIEWER, /* reads every page */
    OQ_WEB_ROLE_ADMIN,  /* and acts: retry, forget, flush, resolve, cancel */
} oq_web_role_t;

typedef struct {
    char name[OQ_WEB_MAX_USER_LEN + 1];
    oq_web_role_t role;
    char hash[OQ_WEB_MAX_HASH_LEN + 1];
    char csrf[OQ_WEB_CSRF_BYTES * 2 + 1]; /* this user's token, hex */
} oq_web_user_t;

typedef struct oq_web_users oq_web_users_t;

/* Read path. NULL with reason[reason_len] naming the file and line when it
   cannot be read, is readable by group or others, or a line is bad. */
oq_web_users_t *oq_web_users_load(const char *path, char *reason, size_t reason_len);

/* Free, and set *self_p to NULL. */
void oq_web_users_destroy(oq_web_users_t **self_p);

/* The user name with password, or NULL (unknown name, wrong password).
   Borrowed, valid while self is. */
const oq_web_user_t *oq_web_users_check(const oq_web_users_t *self, const char *name,
                                        const char *password);

/* True if token is user's CSRF token (compared in constant time). */
bool oq_web_users_csrf_ok(const oq_web_user_t *user, const char *token);

/* "admin" or "viewer". */
const char *oq_web_role_name(oq_web_role_t role);

#endif
