/*  report.c: what handlers use to read their payload and to say how the job
    went (the oq_payload_* and oq_report_* helpers of onceq/worker.h). */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "keeper.h"
#include "onceq/worker.h"

void oq_report_ok(oq_report_t *report, oq_result_t result)
{
    assert(report);
    report->outcome = OQ_OUTCOME_OK;
    report->result = result;
    report->error[0] = 0;
    report->has_delay = false;
}

/* Cut a string that vsnprintf truncated back to the last whole UTF-8
   character, so that a long message never ends in half a character. */
static void s_trim_utf8(char *text, size_t len)
{
    size_t start = len;
    /* Step back over continuation bytes (10xxxxxx) to the lead byte. */
    while (start > 0 && len - start < 4 && ((unsigned char)text[start - 1] & 0xc0) == 0x80)
        start--;
    if (start == 0)
        return;
    unsigned char lead = (unsigned char)text[start - 1];
    size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (start - 1 + need > len)
        text[start - 1] = 0;
}

static void s_failure(oq_report_t *report, oq_outcome_t outcome, const char *format, va_list args)
{
    assert(report);
    report->outcome = outcome;
    report->result = OQ_RESULT_NONE;
    report->has_delay = false;
    int n = vsnprintf(report->error, sizeof report->error, format, args);
    if (n < 0)
        report->error[0] = 0;
    else if ((size_t)n >= sizeof report->error)
        s_trim_utf8(report->error, sizeof report->error - 1);
}

void oq_report_retry(oq_report_t *report, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    s_failure(report, OQ_OUTCOME_RETRY, format, args);
    va_end(args);
}

void oq_report_fail(oq_report_t *report, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    s_failure(report, OQ_OUTCOME_FAIL, format, args);
    va_end(args);
}

void oq_report_review(oq_report_t *report, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    s_failure(report, OQ_OUTCOME_REVIEW, format, args);
    va_end(args);
}

static int64_t s_clamp_delay(int64_t delay_ms)
{
    return delay_ms < 0 ? 0 : delay_ms > OQ_MAX_DELAY_MS ? OQ_MAX_DELAY_MS : delay_ms;
}

void oq_report_release(oq_report_t *report, int64_t delay_ms, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    s_failure(report, OQ_OUTCOME_RETRY, format, args);
    va_end(args);
    report->delay_ms = s_clamp_delay(delay_ms);
    report->has_delay = true;
}

void oq_report_return(oq_report_t *report, int64_t delay_ms, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    s_failure(report, OQ_OUTCOME_RETURN, format, args);
    va_end(args);
    report->delay_ms = s_clamp_delay(delay_ms);
    report->has_delay = report->delay_ms > 0;
}

void oq_report_unavailable(oq_report_t *report, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    s_failure(report, OQ_OUTCOME_UNAVAILABLE, format, args);
    va_end(args);
}

int oq_job_touch(const oq_job_t *job)
{
    assert(job);
    /* The worker's keeper, which queues it for whoever holds the link; a
       job built by hand (a test) has none. */
    if (!job->runtime_)
        return -1;
    return oq_keeper_touch(job->runtime_, job->id);
}

const msgpack_object *oq_payload_get(const oq_job_t *job, const char *key)
{
    assert(job);
    assert(key);
    return oq_proto_map_get(job->payload, key);
}

int oq_payload_uint(const oq_job_t *job, const char *key, uint64_t *out)
{
    const msgpack_object *o = oq_payload_get(job, key);
    if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return -1;
    *out = o->via.u64;
    return 0;
}

int oq_payload_int(const oq_job_t *job, const char *key, int64_t *out)
{
    const msgpack_object *o = oq_payload_get(job, key);
    if (!o)
        return -1;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
        *out = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = o->via.i64;
    else
        return -1;
    return 0;
}

int oq_payload_str(const oq_job_t *job, const char *key, oq_str_t *out)
{
    const msgpack_object *o = oq_payload_get(job, key);
    if (!o || o->type != MSGPACK_OBJECT_STR)
        return -1;
    out->ptr = o->via.str.ptr;
    out->len = o->via.str.size;
    return 0;
}

int oq_payload_bool(const oq_job_t *job, const char *key, bool *out)
{
    const msgpack_object *o = oq_payload_get(job, key);
    if (!o || o->type != MSGPACK_OBJECT_BOOLEAN)
        return -1;
    *out = o->via.boolean;
    return 0;
}
