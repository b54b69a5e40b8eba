/*  wire_raw.h: wire messages packed by hand, byte for byte, for the tests
    of what a peer may send and the codec must refuse: oq_proto's encoders
    only write what is valid, so a message with a name that is not UTF-8
    is built here instead of in each test. */
#ifndef ONCEQ_TEST_WIRE_RAW_H
#define ONCEQ_TEST_WIRE_RAW_H

#include <stddef.h>

#include <msgpack.h>

/* Append {v:1, cmd:"ready", credit:1, KEY:[NAME]} to buf, NAME being the
   len raw bytes of name (KEY "types" or "queues"). */
void oq_wire_raw_ready(msgpack_sbuffer *buf, const char *key, const char *name, size_t len);

#endif
