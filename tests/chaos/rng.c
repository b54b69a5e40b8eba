/*  rng.c: splitmix64 to spread a seed into state, xoshiro256** to draw
    (Blackman and Vigna; both public domain algorithms, written here from
    their published description). Not for secrets: for reproducible chaos. */
#include "rng.h"

#include <assert.h>
#include <sys/random.h>

#define S_GOLDEN_GAMMA 0x9e3779b97f4a7c15ULL

static uint64_t s_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += S_GOLDEN_GAMMA);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t s_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void oq_rng_seed(oq_rng_t *rng, uint64_t seed, oq_rng_stream_t stream)
{
    assert(rng);
    /* The stream number moves the splitmix64 starting point by a multiple
       of an odd constant: streams of one seed never share a state word. */
    uint64_t x = seed ^ ((uint64_t)stream * 0xd1b54a32d192ed03ULL);
    for (int i = 0; i < 4; i++)
        rng->s[i] = s_splitmix64(&x);
}

uint64_t oq_rng_next(oq_rng_t *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = s_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = s_rotl(s[3], 45);
    return result;
}

uint64_t oq_rng_below(oq_rng_t *rng, uint64_t n)
{
    assert(n > 0);
    /* Reject the top partial block so every value is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = oq_rng_next(rng);
    while (x >= limit);
    return x % n;
}

bool oq_rng_percent(oq_rng_t *rng, uint32_t pct)
{
    return oq_rng_below(rng, 100) < pct;
}

int oq_rng_os_seed(uint64_t *seed)
{
    return getrandom(seed, sizeof *seed, 0) == (ssize_t)sizeof *seed ? 0 : -1;
}
