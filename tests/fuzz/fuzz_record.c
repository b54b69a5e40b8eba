/*  fuzz_record.c: libFuzzer target for the journal's record decoder, which
    reads what a disk hands back after a crash. Any bytes must frame and
    decode, or be refused with a reason, never crash or read out of bounds;
    a decoded record must hold to the limits, and a decoded DISPATCHED must
    survive its own re-encoding unchanged. See README.md to run it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "crc32c.h"
#include "record.h"

/* Encode a decoded DISPATCHED again (through the view the journal encodes
   from) and compare the bytes. */
static void s_check_reencode(const oq_record_t *rec, const uint8_t *frame, size_t frame_bytes)
{
    char type[OQ_MAX_NAME_LEN + 1], queue[OQ_MAX_NAME_LEN + 1];
    oq_str_copy(rec->job.type, type, sizeof type);
    oq_str_copy(rec->job.queue, queue, sizeof queue);
    oq_job_view_t view = {
        .id = rec->id,
        .type = type,
        .queue = queue,
        .payload = rec->job.payload,
        .payload_len = rec->job.payload_len,
        .max_tries = rec->job.max_tries,
        .timeout_ms = rec->job.timeout_ms,
        .backoff_ms = rec->job.backoff_len ? rec->job.backoff_ms : NULL,
        .backoff_len = rec->job.backoff_len,
        .priority = rec->job.priority,
        .not_before_ms = rec->at_ms,
    };
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    OQ_FUZZ_CHECK(oq_record_dispatched(&buf, &view, rec->job.dispatch_id, rec->dispatched_at_ms) ==
                  0);
    OQ_FUZZ_CHECK(buf.size == frame_bytes && memcmp(buf.data, frame, frame_bytes) == 0);
    msgpack_sbuffer_destroy(&buf);
}

/* Encode a decoded KEYS again and compare the bytes. */
static void s_check_keys(const oq_record_t *rec, const uint8_t *frame, size_t frame_bytes)
{
    char unique[OQ_MAX_JOB_KEY_LEN + 1], overlap[OQ_MAX_JOB_KEY_LEN + 1];
    OQ_FUZZ_CHECK(rec->unique_key.len <= OQ_MAX_JOB_KEY_LEN &&
                  rec->overlap_key.len <= OQ_MAX_JOB_KEY_LEN);
    oq_str_copy(rec->unique_key, unique, sizeof unique);
    oq_str_copy(rec->overlap_key, overlap, sizeof overlap);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    OQ_FUZZ_CHECK(oq_record_keys(&buf, rec->id, unique, rec->unique_until_ms, rec->window_only,
                                 overlap) == 0);
    OQ_FUZZ_CHECK(buf.size == frame_bytes && memcmp(buf.data, frame, frame_bytes) == 0);
    msgpack_sbuffer_destroy(&buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    oq_record_header_t header;
    char why[256];
    oq_record_header_decode(data, size, &header, why, sizeof why);

    /* The input is a record's type and body: frame it as the journal would,
       so the fuzzer need not find CRCs; then the raw bytes as they are. */
    msgpack_sbuffer framed;
    msgpack_sbuffer_init(&framed);
    uint8_t head[OQ_RECORD_FRAME_BYTES] = {(uint8_t)size, (uint8_t)(size >> 8),
                                           (uint8_t)(size >> 16), (uint8_t)(size >> 24)};
    uint32_t crc = oq_crc32c(0, data, size);
    for (int i = 0; i < 4; i++)
        head[4 + i] = (uint8_t)(crc >> (8 * i));
    msgpack_sbuffer_write(&framed, (const char *)head, sizeof head);
    if (size)
        msgpack_sbuffer_write(&framed, (const char *)data, size);
    const uint8_t *inputs[2] = {(const uint8_t *)framed.data, data};
    size_t sizes[2] = {framed.size, size};
    for (int k = 0; k < 2; k++) {
        /* A copy of exactly the bytes, so AddressSanitizer sees any over-read. */
        uint8_t *copy = malloc(sizes[k] ? sizes[k] : 1);
        memcpy(copy, inputs[k], sizes[k]);
        size_t frame_bytes;
        oq_frame_t status = oq_record_frame(copy, sizes[k], &frame_bytes);
        oq_record_t rec;
        if (status == OQ_FRAME_OK &&
            oq_record_decode(copy, frame_bytes, &rec, why, sizeof why) == 0) {
            OQ_FUZZ_CHECK(frame_bytes <= sizes[k] && rec.id != 0);
            if (rec.type == OQ_RECORD_FAILED)
                OQ_FUZZ_CHECK(rec.error.len <= OQ_MAX_ERROR_LEN);
            if (rec.type == OQ_RECORD_DISPATCHED) {
                OQ_FUZZ_CHECK(rec.job.payload_len <= OQ_MAX_PAYLOAD_BYTES);
                OQ_FUZZ_CHECK(rec.job.backoff_len <= OQ_MAX_BACKOFF_STEPS);
                OQ_FUZZ_CHECK(oq_proto_name_valid(rec.job.type.ptr, rec.job.type.len));
                s_check_reencode(&rec, copy, frame_bytes);
            }
            if (rec.type == OQ_RECORD_KEYS)
                s_check_keys(&rec, copy, frame_bytes);
        }
        free(copy);
    }
    msgpack_sbuffer_destroy(&framed);
    return 0;
}
