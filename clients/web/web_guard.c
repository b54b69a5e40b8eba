/*  web_guard.c: see web_guard.h. */
#include "web_guard.h"

#include <netinet/in.h>
#include <string.h>

/* The address's bytes into out[16] (IPv4 in its first 4). */
static void s_key(const struct sockaddr *addr, unsigned char out[16])
{
    memset(out, 0, 16);
    if (!addr)
        return;
    if (addr->sa_family == AF_INET)
        memcpy(out, &((const struct sockaddr_in *)addr)->sin_addr, 4);
    else if (addr->sa_family == AF_INET6)
        memcpy(out, &((const struct sockaddr_in6 *)addr)->sin6_addr, 16);
}

static int s_find(const oq_web_guard_t *self, const unsigned char key[16], int64_t now_ms)
{
    for (int i = 0; i < OQ_WEB_GUARD_SLOTS; i++)
        if (self->slots[i].since_ms && now_ms - self->slots[i].since_ms < OQ_WEB_LOGIN_WINDOW_MS &&
            memcmp(self->slots[i].addr, key, 16) == 0)
            return i;
    return -1;
}

bool oq_web_guard_allows(const oq_web_guard_t *self, const struct sockaddr *addr, int64_t now_ms)
{
    unsigned char key[16];
    s_key(addr, key);
    int i = s_find(self, key, now_ms);
    return i < 0 || self->slots[i].failures < OQ_WEB_MAX_LOGIN_FAILURES;
}

void oq_web_guard_failed(oq_web_guard_t *self, const struct sockaddr *addr, int64_t now_ms)
{
    unsigned char key[16];
    s_key(addr, key);
    int i = s_find(self, key, now_ms);
    if (i < 0) {
        /* a free or expired slot, else the oldest window */
        i = 0;
        for (int j = 0; j < OQ_WEB_GUARD_SLOTS; j++) {
            if (!self->slots[j].since_ms ||
                now_ms - self->slots[j].since_ms >= OQ_WEB_LOGIN_WINDOW_MS) {
                i = j;
                break;
            }
            if (self->slots[j].since_ms < self->slots[i].since_ms)
                i = j;
        }
        memcpy(self->slots[i].addr, key, 16);
        self->slots[i].since_ms = now_ms > 0 ? now_ms : 1;
        self->slots[i].failures = 0;
    }
    self->slots[i].failures++;
}
