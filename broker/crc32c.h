/*  crc32c.h: CRC-32C (Castagnoli), the checksum of every journal record.
    Software only and table-driven, so the journal reads the same on every
    machine; a record's CRC tells a torn or damaged record from a whole one. */
#ifndef ONCEQ_CRC32C_H
#define ONCEQ_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of data[len], continuing from crc (0 to start). Chaining
   oq_crc32c(oq_crc32c(0, a, n), b, m) equals the CRC of a followed by b.
   The tables are built on the first call, which is not thread-safe; the
   broker is one thread. */
uint32_t oq_crc32c(uint32_t crc, const void *data, size_t len);

#endif
