/*  malformed.h: messages that are not the protocol, for the bursts a chaos
    run sends to both broker sockets: bad msgpack, a reserved byte, lengths
    the frame cannot hold, nesting past the limit, bytes after the map, two
    frames, an empty frame, a missing or wrong version, an unknown command,
    fields of the wrong type or over their limit. None of them is a request
    the broker may carry out (each is built so that it cannot be one, even
    by chance), so a burst can change nothing but the broker's error
    counters; docs/protocol.md says each gets an error and that the broker
    serves on. */
#ifndef ONCEQ_CHAOS_MALFORMED_H
#define ONCEQ_CHAOS_MALFORMED_H

#include <msgpack.h>
#include <stddef.h>

#include "rng.h"

typedef enum {
    OQ_MALFORMED_FRONT, /* producers' socket */
    OQ_MALFORMED_BACK,  /* workers' socket */
} oq_malformed_socket_t;

/* Replace buf's content with one malformed message for socket, drawn from
   rng. *split is 0 for one frame, or where to cut buf into two frames. */
void oq_malformed_make(oq_rng_t *rng, oq_malformed_socket_t socket, msgpack_sbuffer *buf,
                       size_t *split);

#endif
