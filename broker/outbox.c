/*  outbox.c: one byte buffer used as a queue. Each reply is a small header
    (its journal position, lengths, REQ delimiter flag) followed by the
    peer's identity and the encoded reply. Replies leave from the front; the
    buffer is reset when it empties and compacted when most of it is spent,
    so a broker under steady load reuses one allocation. */
#include "outbox.h"

#include <assert.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_IDENTITY 255

typedef struct {
    uint64_t needs;
    int64_t req;
    uint32_t body_len;
    uint8_t identity_len;
    uint8_t delimiter;
} s_head_t;

struct oq_outbox {
    msgpack_sbuffer buf; /* waiting replies, from offset start */
    size_t start;
    size_t count;
    size_t max;
    uint64_t newest_needs;
};

oq_outbox_t *oq_outbox_new(size_t max_replies)
{
    oq_outbox_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    msgpack_sbuffer_init(&self->buf);
    self->max = max_replies;
    return self;
}

void oq_outbox_destroy(oq_outbox_t **self_p)
{
    assert(self_p);
    oq_outbox_t *self = *self_p;
    if (!self)
        return;
    msgpack_sbuffer_destroy(&self->buf);
    free(self);
    *self_p = NULL;
}

int oq_outbox_add(oq_outbox_t *self, uint64_t needs, int64_t req, const void *identity,
                  size_t identity_len, bool delimiter, const void *body, size_t body_len)
{
    assert(identity_len <= S_MAX_IDENTITY && body_len <= UINT32_MAX);
    if (self->count >= self->max)
        return -1;
    s_head_t head;
    memset(&head, 0, sizeof head); /* no stray padding bytes in the buffer */
    head.needs = needs;
    head.req = req;
    head.body_len = (uint32_t)body_len;
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
        send(ctx, identity, head.identity_len, head.delimiter, identity + head.identity_len,
             head.body_len);
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
