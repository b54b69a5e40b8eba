/*  mpcheck.h: structural validation of untrusted msgpack before it reaches
    the msgpack-c unpacker. msgpack-c allocates a container's elements from the
    length the peer declares, before it reads them; this pass refuses any
    declared length the remaining bytes cannot hold, any nesting deeper than a
    limit, reserved type bytes and trailing garbage, so the unpacker only ever
    sees input whose allocations are bounded by its size. */
#ifndef ONCEQ_MPCHECK_H
#define ONCEQ_MPCHECK_H

#include <stddef.h>

/* Check that data[size] is exactly one well-formed msgpack object nested at
   most max_depth deep. Returns 0, or -1 with a reason in reason[reason_len]. */
int oq_mpcheck(const void *data, size_t size, int max_depth, char *reason, size_t reason_len);

#endif
