/*  siphash.c: SipHash-2-4-128 after the specification by Aumasson and
    Bernstein: two compression rounds per 8-byte word, four finalisation
    rounds per output half; the 128-bit variant marks v1 with 0xee at the
    start and the two halves with 0xee and 0xdd. */
#include "siphash.h"

#define S_C_ROUNDS 2
#define S_D_ROUNDS 4
#define S_WORD     8

static uint64_t s_rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

static uint64_t s_load64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = S_WORD - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void s_store64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < S_WORD; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void s_round(uint64_t v[4])
{
    v[0] += v[1];
    v[1] = s_rotl(v[1], 13);
    v[1] ^= v[0];
    v[0] = s_rotl(v[0], 32);
    v[2] += v[3];
    v[3] = s_rotl(v[3], 16);
    v[3] ^= v[2];
    v[0] += v[3];
    v[3] = s_rotl(v[3], 21);
    v[3] ^= v[0];
    v[2] += v[1];
    v[1] = s_rotl(v[1], 17);
    v[1] ^= v[2];
    v[2] = s_rotl(v[2], 32);
}

static void s_compress(uint64_t v[4], uint64_t m)
{
    v[3] ^= m;
    for (int i = 0; i < S_C_ROUNDS; i++)
        s_round(v);
    v[0] ^= m;
}

void oq_siphash128(const uint8_t key[OQ_SIPHASH_KEY_BYTES], const void *data, size_t len,
                   uint8_t out[OQ_SIPHASH_DIGEST_BYTES])
{
    uint64_t k0 = s_load64(key), k1 = s_load64(key + S_WORD);
    uint64_t v[4] = {
        k0 ^ 0x736f6d6570736575ULL,
        k1 ^ 0x646f72616e646f6dULL ^ 0xee,
        k0 ^ 0x6c7967656e657261ULL,
        k1 ^ 0x7465646279746573ULL,
    };
    const uint8_t *p = data;
    size_t words = len / S_WORD;
    for (size_t i = 0; i < words; i++, p += S_WORD)
        s_compress(v, s_load64(p));
    /* The last word: the remaining bytes, with the length's low byte on top. */
    uint64_t last = (uint64_t)(len & 0xff) << 56;
    for (size_t i = 0; i < len % S_WORD; i++)
        last |= (uint64_t)p[i] << (8 * i);
    s_compress(v, last);

    v[2] ^= 0xee;
    for (int i = 0; i < S_D_ROUNDS; i++)
        s_round(v);
    s_store64(out, v[0] ^ v[1] ^ v[2] ^ v[3]);
    v[1] ^= 0xdd;
    for (int i = 0; i < S_D_ROUNDS; i++)
        s_round(v);
    s_store64(out + S_WORD, v[0] ^ v[1] ^ v[2] ^ v[3]);
}
