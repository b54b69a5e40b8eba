/*  test_job_layout: how a job is laid out in its one allocation (the
    broker's engine_model.h): the header, the payload right behind it, and
    its own backoff steps 8-aligned past the payload, none overlapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine_model.h"

/* glibc's chunk for a request: 8 bytes of its own, rounded up to 16. */
static size_t s_malloc_chunk(size_t request)
{
    return (request + 8 + 15) & ~(size_t)15;
}

static void test_a_100_byte_job_takes_at_most_176_bytes(void **state)
{
    (void)state;
    assert_true(offsetof(oq_eng_job_t, payload) <= OQ_ENG_JOB_HEADER_BYTES);
    assert_int_equal(oq_eng_job_bytes(100, 0), offsetof(oq_eng_job_t, payload) + 100);
    assert_true(s_malloc_chunk(oq_eng_job_bytes(100, 0)) <= 176);
}

/* The fields that share a byte keep their values apart. */
static void test_state_and_flags_share_a_byte_without_mixing(void **state)
{
    (void)state;
    oq_eng_job_t job;
    memset(&job, 0, sizeof job);
    job.backoff_len = OQ_MAX_BACKOFF_STEPS;
    for (int s = OQ_ENG_NEW; s <= OQ_ENG_DONE; s++) {
        for (int flags = 0; flags < 4; flags++) {
            job.state = (uint8_t)s;
            job.returned = flags & 1;
            job.timed = (flags >> 1) & 1;
            assert_int_equal(job.state, s);
            assert_int_equal(job.returned, flags & 1);
            assert_int_equal(job.timed, (flags >> 1) & 1);
            assert_int_equal(job.backoff_len, OQ_MAX_BACKOFF_STEPS);
        }
    }
    job.priority = -OQ_MAX_PRIORITY;
    assert_int_equal(job.priority, -OQ_MAX_PRIORITY);
    job.attempt = OQ_ENG_MAX_ATTEMPT;
    job.max_tries = OQ_MAX_TRIES_LIMIT;
    assert_int_equal(job.attempt, OQ_ENG_MAX_ATTEMPT);
    assert_int_equal(job.max_tries, OQ_MAX_TRIES_LIMIT);
}

static void test_backoff_steps_sit_aligned_past_the_payload(void **state)
{
    (void)state;
    for (size_t len = 0; len < 40; len++) {
        size_t at = oq_eng_job_backoff_at(len);
        size_t payload_end = offsetof(oq_eng_job_t, payload) + len;
        assert_int_equal(at % 8, 0);
        assert_true(at >= payload_end && at < payload_end + 8);
        assert_int_equal(oq_eng_job_bytes(len, 0), payload_end);
        assert_int_equal(oq_eng_job_bytes(len, 3), at + 3 * sizeof(int64_t));
    }
}

static void test_payload_and_steps_keep_their_values(void **state)
{
    (void)state;
    const int64_t steps[3] = {1000, 60000, OQ_MAX_BACKOFF_MS};
    for (size_t len = 0; len < 20; len++) {
        oq_eng_job_t *job = calloc(1, oq_eng_job_bytes(len, 3));
        assert_non_null(job);
        job->payload_len = (uint32_t)len;
        job->backoff_len = 3;
        memset(job->payload, 0xAB, len);
        memcpy(oq_eng_job_backoff(job), steps, sizeof steps);
        for (size_t i = 0; i < len; i++)
            assert_int_equal(job->payload[i], 0xAB);
        assert_memory_equal(oq_eng_job_backoff(job), steps, sizeof steps);
        job->backoff_len = 0;
        assert_null(oq_eng_job_backoff(job));
        free(job);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_100_byte_job_takes_at_most_176_bytes),
        cmocka_unit_test(test_state_and_flags_share_a_byte_without_mixing),
        cmocka_unit_test(test_backoff_steps_sit_aligned_past_the_payload),
        cmocka_unit_test(test_payload_and_steps_keep_their_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
