/*  crc32c.c: slicing-by-8. One 256-entry table per byte position lets the
    loop fold eight input bytes per step with eight lookups, several times
    faster than the one-byte loop, which replaying a journal of a million jobs
    notices. The reflected polynomial is 0x82F63B78; the CRC is kept inverted
    between calls, as the standard defines it (check value of "123456789":
    0xE3069283). */
#include "crc32c.h"

#include <stdbool.h>
#include <string.h>

#define S_POLY_REFLECTED 0x82F63B78u
#define S_TABLES         8
#define S_TABLE_SIZE     256
#define S_BITS_PER_BYTE  8

static uint32_t s_table[S_TABLES][S_TABLE_SIZE];
static bool s_ready;

static void s_init(void)
{
    for (uint32_t n = 0; n < S_TABLE_SIZE; n++) {
        uint32_t crc = n;
        for (int k = 0; k < S_BITS_PER_BYTE; k++)
            crc = (crc & 1) ? (crc >> 1) ^ S_POLY_REFLECTED : crc >> 1;
        s_table[0][n] = crc;
    }
    for (uint32_t n = 0; n < S_TABLE_SIZE; n++)
        for (int t = 1; t < S_TABLES; t++)
            s_table[t][n] = (s_table[t - 1][n] >> 8) ^ s_table[0][s_table[t - 1][n] & 0xff];
    s_ready = true;
}

/* Little-endian 32-bit load that does not care about alignment. */
static uint32_t s_load32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t oq_crc32c(uint32_t crc, const void *data, size_t len)
{
    if (!s_ready)
        s_init();
    const uint8_t *p = data;
    crc = ~crc;
    while (len >= 8) {
        uint32_t lo = s_load32(p) ^ crc;
        uint32_t hi = s_load32(p + 4);
        crc = s_table[7][lo & 0xff] ^ s_table[6][(lo >> 8) & 0xff] ^ s_table[5][(lo >> 16) & 0xff] ^
              s_table[4][lo >> 24] ^ s_table[3][hi & 0xff] ^ s_table[2][(hi >> 8) & 0xff] ^
              s_table[1][(hi >> 16) & 0xff] ^ s_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ s_table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}
