/*  peers.c: an array indexed by descriptor. Descriptors are small and
    dense (the kernel hands out the lowest free one), so the array is as
    long as the highest descriptor seen, grown by doubling. */
#include "peers.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/log.h"

#define S_MAX_FD (1 << 22) /* descriptors beyond this are not tracked */

typedef struct {
    bool bound;
    oq_side_t side;
    oq_role_t role;
    uint8_t key[OQ_KEY_BYTES];
    uint8_t *identity; /* malloc'd */
    size_t identity_len;
} s_peer_t;

struct oq_peers {
    s_peer_t *by_fd;
    size_t len; /* slots in by_fd */
    size_t count[OQ_ROLE_COUNT_];
    size_t max[OQ_ROLE_COUNT_];
    bool full[OQ_ROLE_COUNT_]; /* refusing: logged */
    uint64_t refused[OQ_ROLE_COUNT_];
};

oq_peers_t *oq_peers_new(const size_t max[OQ_ROLE_COUNT_])
{
    oq_peers_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    memcpy(self->max, max, sizeof self->max);
    return self;
}

void oq_peers_destroy(oq_peers_t **self_p)
{
    assert(self_p);
    oq_peers_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->len; i++)
        free(self->by_fd[i].identity);
    free(self->by_fd);
    free(self);
    *self_p = NULL;
}

static void s_unbind(oq_peers_t *self, s_peer_t *p)
{
    if (!p->bound)
        return;
    oq_role_t role = p->role;
    self->count[role]--;
    free(p->identity);
    memset(p, 0, sizeof *p);
    if (self->full[role] && self->count[role] < self->max[role]) {
        oq_info("accepting new %s again: %zu connected, the limit is %zu (%llu refused so far)",
                oq_role_plural(role), self->count[role], self->max[role],
                (unsigned long long)self->refused[role]);
        self->full[role] = false;
    }
}

/* The slot of fd, growing the array to hold it; NULL beyond S_MAX_FD or
   out of memory. */
static s_peer_t *s_slot(oq_peers_t *self, int fd)
{
    if (fd < 0 || fd >= S_MAX_FD)
        return NULL;
    if ((size_t)fd >= self->len) {
        size_t len = self->len ? self->len : 64;
        while (len <= (size_t)fd)
            len *= 2;
        s_peer_t *grown = realloc(self->by_fd, len * sizeof *grown);
        if (!grown)
            return NULL;
        memset(grown + self->len, 0, (len - self->len) * sizeof *grown);
        self->by_fd = grown;
        self->len = len;
    }
    return &self->by_fd[fd];
}

int oq_peers_bind(oq_peers_t *self, int fd, oq_side_t side, oq_role_t role,
                  const uint8_t key[OQ_KEY_BYTES], const void *identity, size_t identity_len)
{
    assert(self && role > OQ_ROLE_NONE && role < OQ_ROLE_COUNT_);
    s_peer_t *p = s_slot(self, fd);
    if (!p)
        return 0; /* untracked: counted against --max-conns only */
    if (p->bound && p->role == role && memcmp(p->key, key, OQ_KEY_BYTES) == 0)
        return 0;
    /* A descriptor reused before its close was reported, or a key whose
       role a reload changed: bound afresh. */
    s_unbind(self, p);
    if (self->count[role] >= self->max[role])
        return -1;
    uint8_t *copy = identity_len ? malloc(identity_len) : NULL;
    if (identity_len && !copy)
        return 0; /* out of memory: served, not counted */
    if (copy)
        memcpy(copy, identity, identity_len);
    p->bound = true;
    p->side = side;
    p->role = role;
    memcpy(p->key, key, OQ_KEY_BYTES);
    p->identity = copy;
    p->identity_len = identity_len;
    self->count[role]++;
    return 0;
}

void oq_peers_forget(oq_peers_t *self, int fd)
{
    assert(self);
    if (fd >= 0 && (size_t)fd < self->len)
        s_unbind(self, &self->by_fd[fd]);
}

bool oq_peers_room(const oq_peers_t *self, oq_role_t role)
{
    return role > OQ_ROLE_NONE && role < OQ_ROLE_COUNT_ && self->count[role] < self->max[role];
}

size_t oq_peers_count(const oq_peers_t *self, oq_role_t role)
{
    return role > OQ_ROLE_NONE && role < OQ_ROLE_COUNT_ ? self->count[role] : 0;
}

size_t oq_peers_max(const oq_peers_t *self, oq_role_t role)
{
    return role > OQ_ROLE_NONE && role < OQ_ROLE_COUNT_ ? self->max[role] : 0;
}

void oq_peers_refusing(oq_peers_t *self, oq_role_t role)
{
    assert(role > OQ_ROLE_NONE && role < OQ_ROLE_COUNT_);
    self->refused[role]++;
    if (self->full[role])
        return;
    self->full[role] = true;
    oq_warn("refusing new %s: %zu connected, the limit (--max-%s); connected ones are served",
            oq_role_plural(role), self->count[role], oq_role_plural(role));
}

uint64_t oq_peers_refused(const oq_peers_t *self, oq_role_t role)
{
    return role > OQ_ROLE_NONE && role < OQ_ROLE_COUNT_ ? self->refused[role] : 0;
}

void oq_peers_each(const oq_peers_t *self, void (*fn)(void *ctx, const oq_peer_view_t *peer),
                   void *ctx)
{
    for (size_t i = 0; i < self->len; i++) {
        const s_peer_t *p = &self->by_fd[i];
        if (!p->bound)
            continue;
        oq_peer_view_t view = {(int)i, p->side, p->role, p->key, p->identity, p->identity_len};
        fn(ctx, &view);
    }
}
