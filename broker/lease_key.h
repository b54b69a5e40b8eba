/*  lease_key.h: the broker's lease key, one of the data directory's files
    beside the journal. Every delivery's lease token is a MAC under this
    key (engine_acks.c); keeping the key across restarts is what lets a
    worker's late ack after a broker restart still count. It is 128 random
    bits in DIR/OQ_LEASE_KEY_FILE, made on the first start: written to a
    temporary file of mode OQ_JOURNAL_FILE_MODE, fsynced, renamed into
    place and the directory fsynced, so a crash leaves either no key or
    the whole key. */
#ifndef ONCEQ_BROKER_LEASE_KEY_H
#define ONCEQ_BROKER_LEASE_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "onceq/limits.h"

/* Read the key from DIR/OQ_LEASE_KEY_FILE into key, or make it there if
   the file does not exist. 0, or -1 with a reason (a file of the wrong
   size, a directory that cannot be written). */
int oq_lease_key_load(const char *dir, uint8_t key[OQ_LEASE_KEY_BYTES], char *reason,
                      size_t reason_len);

#endif
