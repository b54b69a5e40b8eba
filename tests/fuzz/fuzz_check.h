/*  fuzz_check.h: what every libFuzzer target here shares: the entry point
    libFuzzer calls, and the check that turns a broken rule into a crash
    (abort), which is what libFuzzer reports and keeps the input of. */
#ifndef ONCEQ_FUZZ_CHECK_H
#define ONCEQ_FUZZ_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort unless cond holds: a finding, kept by libFuzzer as a crash input. */
#define OQ_FUZZ_CHECK(cond)                                                                        \
    do {                                                                                           \
        if (!(cond))                                                                               \
            abort();                                                                               \
    } while (0)

#endif
