/*  stats.c: encoding of the stats and failed replies. Both are built in two
    passes where a count must precede the items (msgpack arrays carry their
    length up front). */
#include "stats.h"

#include "onceq/proto.h"

#define S_QUEUE_FIELDS   15
#define S_WORKER_FIELDS  11
#define S_JOB_FIELDS     8
#define S_TYPE_FIELDS    8
#define S_JOURNAL_FIELDS 12
#define S_BROKER_FIELDS  10

static void s_key(msgpack_packer *pk, const char *key)
{
    oq_proto_pack_cstr(pk, key);
}

static void s_kv_u64(msgpack_packer *pk, const char *key, uint64_t value)
{
    s_key(pk, key);
    msgpack_pack_uint64(pk, value);
}

static void s_kv_seconds(msgpack_packer *pk, const char *key, int64_t ms)
{
    s_key(pk, key);
    msgpack_pack_double(pk, (double)ms / 1000.0);
}

static void s_pack_worker(void *ctx, const oq_worker_view_t *w)
{
    msgpack_packer *pk = ctx;
    static const char digits[] = "0123456789abcdef";
    char hex[513];
    const uint8_t *b = w->identity;
    for (size_t i = 0; i < w->identity_len; i++) {
        hex[2 * i] = digits[b[i] >> 4];
        hex[2 * i + 1] = digits[b[i] & 15];
    }
    hex[2 * w->identity_len] = 0;
    msgpack_pack_map(pk, S_WORKER_FIELDS);
    s_key(pk, "id");
    oq_proto_pack_cstr(pk, hex);
    s_key(pk, "name");
    oq_proto_pack_cstr(pk, w->name);
    s_kv_u64(pk, "pid", w->pid);
    s_kv_u64(pk, "credit", w->credit);
    s_kv_u64(pk, "leased", w->leased);
    s_kv_u64(pk, "idle_ms", w->idle_ms > 0 ? (uint64_t)w->idle_ms : 0);
    /* Empty lists: every type, every queue. */
    s_key(pk, "types");
    msgpack_pack_array(pk, w->type_count);
    for (uint32_t i = 0; i < w->type_count; i++)
        oq_proto_pack_cstr(pk, oq_engine_worker_type(w, i));
    s_key(pk, "queues");
    msgpack_pack_array(pk, w->queue_count);
    for (uint32_t i = 0; i < w->queue_count; i++)
        oq_proto_pack_cstr(pk, oq_engine_worker_queue(w, i));
    /* ready, or unavailable: paused while what its jobs need is down */
    s_key(pk, "state");
    oq_proto_pack_cstr(pk, oq_proto_status_name(w->status));
    s_kv_u64(pk, "state_ms", w->status_ms > 0 ? (uint64_t)w->status_ms : 0);
    s_key(pk, "error");
    oq_proto_pack_cstr(pk, w->status_error);
}

void oq_stats_encode(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine, int64_t uptime_ms,
                     const oq_stats_journal_t *journal)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_STATS, req, 5);

    s_key(&pk, "journal");
    msgpack_pack_map(&pk, S_JOURNAL_FIELDS);
    s_key(&pk, "enabled");
    if (journal->enabled)
        msgpack_pack_true(&pk);
    else
        msgpack_pack_false(&pk);
    s_key(&pk, "fsync");
    oq_proto_pack_cstr(&pk, journal->fsync);
    s_kv_u64(&pk, "bytes", journal->bytes);
    s_kv_u64(&pk, "live_bytes", journal->live_bytes);
    s_kv_u64(&pk, "fsyncs", journal->fsyncs);
    s_kv_u64(&pk, "failures", journal->failures);
    s_kv_u64(&pk, "compactions", journal->compactions);
    s_kv_u64(&pk, "backlog_bytes", journal->backlog_bytes);
    s_key(&pk, "error");
    oq_proto_pack_cstr(&pk, journal->error);
    s_kv_u64(&pk, "dispatch_ids", journal->dispatch_ids);
    s_kv_u64(&pk, "dedupe_hits", journal->dedupe_hits);
    s_kv_u64(&pk, "dedupe_evicted", journal->dedupe_evicted);

    size_t queues = oq_engine_queue_count(engine);
    s_key(&pk, "queues");
    msgpack_pack_array(&pk, queues);
    for (size_t i = 0; i < queues; i++) {
        oq_queue_stats_t s;
        oq_engine_queue_stats(engine, i, &s);
        msgpack_pack_map(&pk, S_QUEUE_FIELDS);
        s_key(&pk, "name");
        oq_proto_pack_cstr(&pk, s.name);
        s_kv_u64(&pk, "ready", s.ready);
        s_kv_u64(&pk, "delayed", s.delayed);
        s_kv_u64(&pk, "leased", s.leased);
        s_kv_u64(&pk, "failed", s.failed);
        s_kv_u64(&pk, "dispatched", s.dispatched);
        s_kv_u64(&pk, "done", s.done);
        s_kv_u64(&pk, "retried", s.retried);
        s_kv_u64(&pk, "redelivered", s.redelivered);
        s_kv_u64(&pk, "late_acks", s.late_acks);
        s_kv_u64(&pk, "ignored_acks", s.ignored_acks);
        s_kv_u64(&pk, "duplicates", s.duplicates);
        s_kv_u64(&pk, "returned", s.returned);
        s_kv_seconds(&pk, "retry_after", s.retry_after_ms);
        s_kv_seconds(&pk, "timeout", s.timeout_ms);
    }

    size_t types = oq_engine_type_count(engine);
    s_key(&pk, "types");
    msgpack_pack_array(&pk, types);
    for (size_t i = 0; i < types; i++) {
        oq_type_stats_t t;
        oq_engine_type_stats(engine, i, &t);
        msgpack_pack_map(&pk, S_TYPE_FIELDS);
        s_key(&pk, "name");
        oq_proto_pack_cstr(&pk, t.name);
        s_kv_u64(&pk, "done", t.done);
        s_kv_u64(&pk, "applied", t.applied);
        s_kv_u64(&pk, "duplicates", t.duplicates);
        s_kv_u64(&pk, "failed", t.failed);
        s_kv_u64(&pk, "ready", t.ready);
        s_kv_u64(&pk, "workers", t.workers);
        s_kv_u64(&pk, "unhandled", t.unhandled);
    }

    s_key(&pk, "workers");
    msgpack_pack_array(&pk, oq_engine_worker_count(engine));
    oq_engine_worker_each(engine, s_pack_worker, &pk);

    s_key(&pk, "broker");
    msgpack_pack_map(&pk, S_BROKER_FIELDS);
    s_kv_u64(&pk, "uptime_ms", uptime_ms > 0 ? (uint64_t)uptime_ms : 0);
    s_kv_u64(&pk, "fenced_acks", oq_engine_fenced_acks(engine));
    s_kv_u64(&pk, "stale_touches", oq_engine_stale_touches(engine));
    s_kv_u64(&pk, "jobs", oq_engine_job_count(engine));
    s_kv_u64(&pk, "bytes", oq_engine_bytes(engine));
    s_kv_u64(&pk, "max_bytes", oq_engine_max_bytes(engine));
    s_kv_u64(&pk, "workers", oq_engine_worker_count(engine));
    s_kv_u64(&pk, "workers_unavailable", oq_engine_workers_unavailable(engine));
    s_kv_u64(&pk, "unknown_acks", oq_engine_unknown_acks(engine));
    s_key(&pk, "version");
    oq_proto_pack_cstr(&pk, ONCEQ_VERSION);
}

static void s_pack_failed(void *ctx, const oq_job_view_t *job)
{
    msgpack_packer *pk = ctx;
    msgpack_pack_map(pk, S_JOB_FIELDS);
    s_kv_u64(pk, "id", job->id);
    s_key(pk, "type");
    oq_proto_pack_cstr(pk, job->type);
    s_key(pk, "queue");
    oq_proto_pack_cstr(pk, job->queue);
    s_kv_u64(pk, "attempt", job->attempt);
    s_kv_u64(pk, "max_tries", job->max_tries);
    s_key(pk, "error");
    oq_proto_pack_cstr(pk, job->error ? job->error : "");
    s_kv_u64(pk, "failed_at", job->failed_at_ms > 0 ? (uint64_t)job->failed_at_ms : 0);
    s_key(pk, "payload");
    msgpack_pack_str_body(pk, job->payload, job->payload_len); /* already msgpack */
}

typedef struct {
    oq_job_view_t *jobs;
    size_t count;
} s_page_t;

/* The page is collected before it is packed: the array's length comes first. */
static void s_collect(void *ctx, const oq_job_view_t *job)
{
    s_page_t *page = ctx;
    page->jobs[page->count++] = *job;
}

void oq_stats_encode_failed(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine,
                            const char *queue, uint64_t after, uint32_t limit)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    static oq_job_view_t views[OQ_MAX_FAILED_LIST];
    s_page_t page = {views, 0};
    bool more = false;
    size_t total = oq_engine_failed_page(engine, queue, after, limit, s_collect, &page, &more);
    oq_proto_begin(&pk, OQ_CMD_FAILED, req, more ? 3 : 2);
    s_kv_u64(&pk, "total", total);
    if (more)
        s_kv_u64(&pk, "next", page.jobs[page.count - 1].id);
    s_key(&pk, "jobs");
    msgpack_pack_array(&pk, page.count);
    for (size_t i = 0; i < page.count; i++)
        s_pack_failed(&pk, &page.jobs[i]);
}
