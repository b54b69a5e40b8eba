/*  throttle.h: say a thing about one key at most once per interval. The
    broker logs a refused handshake once per unknown key per minute: a peer
    that retries every 100 ms with a key nobody allowed must not fill the
    log, and neither must a thousand peers with a thousand keys. So the
    table has a fixed number of slots; a key that finds none free (every
    slot holds a key said within the interval) is not said, only counted,
    and the caller reports that count in one line when it likes. */
#ifndef ONCEQ_BROKER_THROTTLE_H
#define ONCEQ_BROKER_THROTTLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OQ_THROTTLE_KEY_MAX 32 /* bytes of a key; longer keys are cut */

typedef struct oq_throttle oq_throttle_t;

/* A table of slots keys, each quiet for interval_ms once said. NULL if
   out of memory. */
oq_throttle_t *oq_throttle_new(size_t slots, int64_t interval_ms);

/* Free it and set *self_p to NULL. */
void oq_throttle_destroy(oq_throttle_t **self_p);

/* True if key may be said now (not said within the interval, and a slot
   is free); then it counts as said at now_ms. False otherwise, and the
   occurrence is counted as suppressed. */
bool oq_throttle_allow(oq_throttle_t *self, const void *key, size_t len, int64_t now_ms);

/* Occurrences suppressed since the last call; resets the count. */
uint64_t oq_throttle_take_suppressed(oq_throttle_t *self);

#endif
