/*  throttle.c: a small table scanned whole. It is consulted once per
    refused handshake, and a handshake costs far more than a scan of a few
    hundred slots. */
#include "throttle.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t key[OQ_THROTTLE_KEY_MAX];
    size_t len;      /* 0: free */
    int64_t said_ms; /* when it was last said */
} s_slot_t;

struct oq_throttle {
    s_slot_t *slots;
    size_t count;
    int64_t interval_ms;
    uint64_t suppressed;
};

oq_throttle_t *oq_throttle_new(size_t slots, int64_t interval_ms)
{
    assert(slots > 0 && interval_ms > 0);
    oq_throttle_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->slots = calloc(slots, sizeof *self->slots);
    if (!self->slots) {
        free(self);
        return NULL;
    }
    self->count = slots;
    self->interval_ms = interval_ms;
    return self;
}

void oq_throttle_destroy(oq_throttle_t **self_p)
{
    assert(self_p);
    oq_throttle_t *self = *self_p;
    if (!self)
        return;
    free(self->slots);
    free(self);
    *self_p = NULL;
}

bool oq_throttle_allow(oq_throttle_t *self, const void *key, size_t len, int64_t now_ms)
{
    assert(self && key);
    if (len > OQ_THROTTLE_KEY_MAX)
        len = OQ_THROTTLE_KEY_MAX;
    if (len == 0) {
        key = "";
        len = 1;
    }
    s_slot_t *free_slot = NULL;
    for (size_t i = 0; i < self->count; i++) {
        s_slot_t *s = &self->slots[i];
        bool quiet = s->len && now_ms - s->said_ms < self->interval_ms;
        if (s->len == len && memcmp(s->key, key, len) == 0) {
            if (quiet) {
                self->suppressed++;
                return false;
            }
            s->said_ms = now_ms;
            return true;
        }
        if (!quiet && !free_slot)
            free_slot = s;
    }
    if (!free_slot) {
        self->suppressed++;
        return false;
    }
    memcpy(free_slot->key, key, len);
    free_slot->len = len;
    free_slot->said_ms = now_ms;
    return true;
}

uint64_t oq_throttle_take_suppressed(oq_throttle_t *self)
{
    assert(self);
    uint64_t n = self->suppressed;
    self->suppressed = 0;
    return n;
}
