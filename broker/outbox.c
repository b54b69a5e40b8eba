/*  outbox.c: one byte buffer used as a queue. Each reply is a small header
    (its journal position, lengths, connection, REQ delimiter flag) followed
    by the peer's identity and the encoded reply. Replies leave from the
    front; the buffer is reset when it empties and compacted when most of it
    is spent, so a broker under steady load reuses one allocation.

    Replies kept for a full pipe sit in one such queue per peer (header,
    then body), found by identity in a hash and listed in an array for the
    retries. Nothing is looked up while no peer has replies kept, so a
    broker whose peers keep up pays nothing for it. */
#include "outbox.h"

#include <assert.h>
#include <czmq.h>
#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/limits.h"

#define S_MAX_IDENTITY 255

typedef struct {
    uint64_t needs;
    int64_t req;
    uint32_t body_len;
    int32_t fd; /* the connection's descriptor, -1 if unknown */
    uint8_t identity_len;
    uint8_t delimiter;
} s_head_t;

/* A reply kept for a full pipe: the header, then the body. */
typedef struct {
    uint32_t body_len;
    uint8_t delimiter;
} s_kept_t;

/* The replies kept for one peer, oldest first from offset start. */
typedef struct {
    msgpack_sbuffer buf;
    size_t start;
    size_t count;
    size_t at; /* its place in oq_outbox.peers */
    int fd;
    size_t identity_len;
    uint8_t identity[S_MAX_IDENTITY];
    char key[2 * S_MAX_IDENTITY + 1]; /* the identity in hex, its key in by_identity */
} s_peer_t;

struct oq_outbox {
    msgpack_sbuffer buf; /* waiting replies, from offset start */
    size_t start;
    size_t count;
    size_t max;
    uint64_t newest_needs;
    zhashx_t *by_identity; /* hex identity -> s_peer_t (borrowed: owned by peers) */
    s_peer_t **peers;      /* peers with replies kept */
    size_t peer_count, peer_room;
    oq_outbox_cut_fn cut;
    void *cut_ctx;
    oq_outbox_stats_t stats;
};

oq_outbox_t *oq_outbox_new(size_t max_replies, oq_outbox_cut_fn cut, void *ctx)
{
    oq_outbox_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    msgpack_sbuffer_init(&self->buf);
    self->max = max_replies;
    self->cut = cut;
    self->cut_ctx = ctx;
    self->by_identity = zhashx_new();
    if (!self->by_identity) {
        free(self);
        return NULL;
    }
    return self;
}

static void s_peer_free(s_peer_t *peer)
{
    msgpack_sbuffer_destroy(&peer->buf);
    free(peer);
}

void oq_outbox_destroy(oq_outbox_t **self_p)
{
    assert(self_p);
    oq_outbox_t *self = *self_p;
    if (!self)
        return;
    msgpack_sbuffer_destroy(&self->buf);
    for (size_t i = 0; i < self->peer_count; i++)
        s_peer_free(self->peers[i]);
    free(self->peers);
    zhashx_destroy(&self->by_identity);
    free(self);
    *self_p = NULL;
}

int oq_outbox_add(oq_outbox_t *self, uint64_t needs, int64_t req, const void *identity,
                  size_t identity_len, int fd, bool delimiter, const void *body, size_t body_len)
{
    assert(identity_len <= S_MAX_IDENTITY && body_len <= UINT32_MAX);
    if (self->count >= self->max)
        return -1;
    s_head_t head;
    memset(&head, 0, sizeof head); /* no stray padding bytes in the buffer */
    head.needs = needs;
    head.req = req;
    head.body_len = (uint32_t)body_len;
    head.fd = fd;
    head.identity_len = (uint8_t)identity_len;
    head.delimiter = delimiter;
    size_t before = self->buf.size;
    if (msgpack_sbuffer_write(&self->buf, (const char *)&head, sizeof head) < 0 ||
        msgpack_sbuffer_write(&self->buf, identity, identity_len) < 0 ||
        msgpack_sbuffer_write(&self->buf, body, body_len) < 0) {
        self->buf.size = before;
        return -1;
    }
    self->count++;
    self->newest_needs = needs;
    return 0;
}

size_t oq_outbox_flush(oq_outbox_t *self, uint64_t durable, oq_outbox_send_fn send, void *ctx)
{
    size_t sent = 0;
    while (self->count) {
        s_head_t head;
        const char *at = self->buf.data + self->start;
        memcpy(&head, at, sizeof head);
        if (head.needs > durable)
            break;
        const char *identity = at + sizeof head;
        oq_outbox_send(self, identity, head.identity_len, head.fd, head.delimiter,
                       identity + head.identity_len, head.body_len, send, ctx);
        self->start += sizeof head + head.identity_len + head.body_len;
        self->count--;
        sent++;
    }
    if (self->count == 0) {
        msgpack_sbuffer_clear(&self->buf);
        self->start = 0;
        self->newest_needs = 0;
    } else if (self->start > self->buf.size / 2) {
        memmove(self->buf.data, self->buf.data + self->start, self->buf.size - self->start);
        self->buf.size -= self->start;
        self->start = 0;
    }
    return sent;
}

size_t oq_outbox_reject(oq_outbox_t *self, oq_outbox_reject_fn reject, void *ctx)
{
    size_t count = self->count;
    size_t at = self->start;
    for (size_t i = 0; i < count; i++) {
        s_head_t head;
        memcpy(&head, self->buf.data + at, sizeof head);
        reject(ctx, self->buf.data + at + sizeof head, head.identity_len, head.delimiter, head.req);
        at += sizeof head + head.identity_len + head.body_len;
    }
    msgpack_sbuffer_clear(&self->buf);
    self->start = 0;
    self->count = 0;
    self->newest_needs = 0;
    return count;
}

size_t oq_outbox_count(const oq_outbox_t *self)
{
    return self->count;
}

uint64_t oq_outbox_needs(const oq_outbox_t *self)
{
    return self->count ? self->newest_needs : 0;
}

/* ---- replies kept for full pipes ------------------------------------------ */

static void s_hex(const void *identity, size_t len, char out[2 * S_MAX_IDENTITY + 1])
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *b = identity;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * len] = 0;
}

static s_peer_t *s_peer_find(oq_outbox_t *self, const void *identity, size_t identity_len)
{
    if (self->peer_count == 0)
        return NULL;
    char key[2 * S_MAX_IDENTITY + 1];
    s_hex(identity, identity_len, key);
    return zhashx_lookup(self->by_identity, key);
}

static size_t s_peer_bytes(const s_peer_t *peer)
{
    return peer->buf.size - peer->start;
}

/* Forget peer and what is kept for it. */
static void s_peer_remove(oq_outbox_t *self, s_peer_t *peer)
{
    self->stats.kept -= peer->count;
    self->stats.kept_bytes -= s_peer_bytes(peer);
    zhashx_delete(self->by_identity, peer->key);
    s_peer_t *last = self->peers[--self->peer_count];
    self->peers[peer->at] = last;
    last->at = peer->at;
    self->stats.kept_peers = self->peer_count;
    s_peer_free(peer);
}

/* A new, empty queue for a peer. NULL if memory runs out. */
static s_peer_t *s_peer_add(oq_outbox_t *self, const void *identity, size_t identity_len, int fd)
{
    if (self->peer_count == self->peer_room) {
        size_t room = self->peer_room ? 2 * self->peer_room : 16;
        s_peer_t **peers = realloc(self->peers, room * sizeof *peers);
        if (!peers)
            return NULL;
        self->peers = peers;
        self->peer_room = room;
    }
    s_peer_t *peer = calloc(1, sizeof *peer);
    if (!peer)
        return NULL;
    msgpack_sbuffer_init(&peer->buf);
    peer->fd = fd;
    peer->identity_len = identity_len;
    memcpy(peer->identity, identity, identity_len);
    s_hex(identity, identity_len, peer->key);
    if (zhashx_insert(self->by_identity, peer->key, peer) < 0) {
        s_peer_free(peer);
        return NULL;
    }
    peer->at = self->peer_count;
    self->peers[self->peer_count++] = peer;
    self->stats.kept_peers = self->peer_count;
    return peer;
}

/* Cut peer off: drop what is kept for it and tell the broker. */
static void s_cut(oq_outbox_t *self, s_peer_t *peer)
{
    size_t replies = peer->count, bytes = s_peer_bytes(peer);
    self->stats.peers_cut++;
    self->stats.cut_replies += replies;
    if (self->cut)
        self->cut(self->cut_ctx, peer->identity, peer->identity_len, peer->fd, replies, bytes);
    s_peer_remove(self, peer);
}

/* The peer holding the most kept bytes. */
static s_peer_t *s_biggest(oq_outbox_t *self)
{
    s_peer_t *big = NULL;
    for (size_t i = 0; i < self->peer_count; i++)
        if (!big || s_peer_bytes(self->peers[i]) > s_peer_bytes(big))
            big = self->peers[i];
    return big;
}

/* Keep a reply for peer (NULL: a new one). 0, or -1 if it was not kept:
   memory ran out, or the peer was cut off at a bound. */
static int s_keep(oq_outbox_t *self, s_peer_t *peer, const void *identity, size_t identity_len,
                  int fd, bool delimiter, const void *body, size_t body_len)
{
    size_t need = sizeof(s_kept_t) + body_len;
    self->stats.full_pipes++;
    if (peer && s_peer_bytes(peer) + need > OQ_MAX_KEPT_BYTES_PER_PEER) {
        s_cut(self, peer);
        return -1;
    }
    /* All peers together: the one holding most goes, which may be this one. */
    while (self->stats.kept_bytes + need > OQ_MAX_KEPT_BYTES && self->peer_count) {
        s_peer_t *big = s_biggest(self);
        bool mine = big == peer;
        s_cut(self, big);
        if (mine)
            return -1;
    }
    if (!peer && !(peer = s_peer_add(self, identity, identity_len, fd)))
        return -1;
    s_kept_t head;
    memset(&head, 0, sizeof head);
    head.body_len = (uint32_t)body_len;
    head.delimiter = delimiter;
    size_t before = peer->buf.size;
    if (msgpack_sbuffer_write(&peer->buf, (const char *)&head, sizeof head) < 0 ||
        msgpack_sbuffer_write(&peer->buf, body, body_len) < 0) {
        peer->buf.size = before;
        if (peer->count == 0)
            s_peer_remove(self, peer);
        return -1;
    }
    if (fd >= 0)
        peer->fd = fd;
    peer->count++;
    self->stats.kept++;
    self->stats.kept_bytes += need;
    return 0;
}

int oq_outbox_send(oq_outbox_t *self, const void *identity, size_t identity_len, int fd,
                   bool delimiter, const void *body, size_t body_len, oq_outbox_send_fn send,
                   void *ctx)
{
    assert(identity_len <= S_MAX_IDENTITY && body_len <= UINT32_MAX);
    s_peer_t *peer = s_peer_find(self, identity, identity_len);
    if (!peer) {
        if (send(ctx, identity, identity_len, delimiter, body, body_len) == 0)
            return 0;
        if (errno != EAGAIN)
            return -1;
    }
    return s_keep(self, peer, identity, identity_len, fd, delimiter, body, body_len);
}

/* Send what is kept for peer until its pipe is full. Returns how many
   went; *gone is set if the peer could not be reached. */
static size_t s_retry_peer(s_peer_t *peer, oq_outbox_stats_t *stats, oq_outbox_send_fn send,
                           void *ctx, bool *gone)
{
    size_t sent = 0;
    *gone = false;
    while (peer->count) {
        s_kept_t head;
        const char *at = peer->buf.data + peer->start;
        memcpy(&head, at, sizeof head);
        if (send(ctx, peer->identity, peer->identity_len, head.delimiter, at + sizeof head,
                 head.body_len) < 0) {
            *gone = errno != EAGAIN;
            break;
        }
        size_t len = sizeof head + head.body_len;
        peer->start += len;
        peer->count--;
        stats->kept--;
        stats->kept_bytes -= len;
        sent++;
    }
    if (peer->count && peer->start > peer->buf.size / 2) {
        memmove(peer->buf.data, peer->buf.data + peer->start, peer->buf.size - peer->start);
        peer->buf.size -= peer->start;
        peer->start = 0;
    }
    return sent;
}

size_t oq_outbox_retry(oq_outbox_t *self, oq_outbox_send_fn send, void *ctx)
{
    size_t sent = 0;
    /* Backwards: a peer removed takes the last one's place, already done. */
    for (size_t i = self->peer_count; i-- > 0;) {
        s_peer_t *peer = self->peers[i];
        bool gone;
        sent += s_retry_peer(peer, &self->stats, send, ctx, &gone);
        if (gone || peer->count == 0)
            s_peer_remove(self, peer);
    }
    return sent;
}

size_t oq_outbox_forget_fd(oq_outbox_t *self, int fd)
{
    size_t dropped = 0;
    for (size_t i = self->peer_count; fd >= 0 && i-- > 0;) {
        if (self->peers[i]->fd == fd) {
            dropped += self->peers[i]->count;
            s_peer_remove(self, self->peers[i]);
        }
    }
    return dropped;
}

oq_outbox_stats_t oq_outbox_stats(const oq_outbox_t *self)
{
    return self->stats;
}
