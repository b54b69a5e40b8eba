/*  siphash.h: SipHash-2-4 with a 128-bit output, a keyed hash. The broker
    remembers dispatch ids as 16-byte digests rather than as strings: a
    fixed-size entry is what keeps the dedupe table small next to the jobs.
    The key is random per journal, so no producer can aim a digest at
    another producer's dispatch id. */
#ifndef ONCEQ_SIPHASH_H
#define ONCEQ_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

#define OQ_SIPHASH_KEY_BYTES    16
#define OQ_SIPHASH_DIGEST_BYTES 16

/* The 128-bit SipHash-2-4 of data[len] under key, into out (the byte order
   of the reference implementation). */
void oq_siphash128(const uint8_t key[OQ_SIPHASH_KEY_BYTES], const void *data, size_t len,
                   uint8_t out[OQ_SIPHASH_DIGEST_BYTES]);

#endif
