/*  web_guard.h: a bound on guessing passwords. Checking one costs what its
    hash makes it cost (milliseconds, on purpose), on the one thread that
    serves every page, so an address that fails OQ_WEB_MAX_LOGIN_FAILURES
    logins within OQ_WEB_LOGIN_WINDOW_MS is answered 429 without a check
    until that window ends. The table holds OQ_WEB_GUARD_SLOTS addresses;
    when it is full the oldest window is dropped. */
#ifndef ONCEQ_WEB_GUARD_H
#define ONCEQ_WEB_GUARD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* Failed logins one address may have in a window, and the window. */
#define OQ_WEB_MAX_LOGIN_FAILURES 10
#define OQ_WEB_LOGIN_WINDOW_MS    60000
/* Addresses remembered at once. */
#define OQ_WEB_GUARD_SLOTS 256

typedef struct {
    struct {
        unsigned char addr[16]; /* IPv4 or IPv6 bytes */
        int64_t since_ms;       /* the window's start (monotonic ms), 0: free */
        uint32_t failures;      /* in this window */
    } slots[OQ_WEB_GUARD_SLOTS];
} oq_web_guard_t;

/* True while addr may try a password at now_ms. */
bool oq_web_guard_allows(const oq_web_guard_t *self, const struct sockaddr *addr, int64_t now_ms);

/* Count a failed login of addr at now_ms. */
void oq_web_guard_failed(oq_web_guard_t *self, const struct sockaddr *addr, int64_t now_ms);

#endif
