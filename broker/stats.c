/*  stats.c: encoding of the stats and failed replies. Both are built in two
    passes where a count must precede the items (msgpack arrays carry their
    length up front). A stats reply lists its workers a page at a time, so
    that its size and the time it takes stay bounded whatever the workers
    registered (onceq/limits.h, OQ_STATS_WORKERS_BYTES). */
#include "stats.h"

#include <stdlib.h>

#include "onceq/limits.h"
#include "onceq/proto.h"

#define S_QUEUE_FIELDS   18
#define S_WORKER_FIELDS  11
#define S_JOB_FIELDS     8
#define S_TYPE_FIELDS    8
#define S_JOURNAL_FIELDS 13
#define S_BROKER_FIELDS  12
#define S_AUTH_FIELDS    8
#define S_ROLES          3 /* producers, workers, admins: oq_role_t 1 to 3 */
#define S_HORIZON_FIELDS 4
/* A queue's held job whose own runs span longest: id, type, max_tries, attempt, backoff. */
#define S_HORIZON_JOB_FIELDS 5
#define S_MESSAGES_FIELDS    6
#define S_WAITS_FIELDS       5
#define S_REPLIES_FIELDS     6

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

static void s_pack_worker(msgpack_packer *pk, const oq_worker_view_t *w)
{
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

/* A page of workers, packed apart first: the array's length comes first,
   and the page ends at its limit or its bytes, whichever comes first. */
typedef struct {
    msgpack_sbuffer buf;
    msgpack_packer pk;
    uint32_t limit, count;
    uint64_t last_seq; /* of the last worker packed */
    bool more;         /* a worker was left for the next page */
} s_worker_page_t;

static bool s_page_worker(void *ctx, const oq_worker_view_t *w)
{
    s_worker_page_t *page = ctx;
    if (page->count == page->limit || page->buf.size >= OQ_STATS_WORKERS_BYTES) {
        page->more = page->limit > 0; /* a page of none has no next one */
        return false;
    }
    s_pack_worker(&page->pk, w);
    page->count++;
    page->last_seq = w->seq;
    return true;
}

/* The summary of the workers by name, at most OQ_STATS_WORKER_NAMES. */
typedef struct {
    msgpack_packer *pk;
    size_t left;
} s_names_t;

static bool s_pack_name(void *ctx, const char *name, uint32_t workers, uint32_t unavailable)
{
    s_names_t *names = ctx;
    if (names->left == 0)
        return false;
    names->left--;
    msgpack_pack_map(names->pk, 3);
    s_key(names->pk, "name");
    oq_proto_pack_cstr(names->pk, name);
    s_kv_u64(names->pk, "workers", workers);
    s_kv_u64(names->pk, "unavailable", unavailable);
    return true;
}

/* {producers, workers, admins} from an array indexed by role. */
static void s_pack_roles(msgpack_packer *pk, const char *key, const size_t by_role[4])
{
    static const char *const names[S_ROLES] = {"producers", "workers", "admins"};
    s_key(pk, key);
    msgpack_pack_map(pk, S_ROLES);
    for (int i = 0; i < S_ROLES; i++)
        s_kv_u64(pk, names[i], by_role[i + 1]);
}

static void s_pack_auth(msgpack_packer *pk, const oq_stats_auth_t *auth)
{
    s_key(pk, "auth");
    msgpack_pack_map(pk, S_AUTH_FIELDS);
    s_key(pk, "curve");
    if (auth->curve)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
    s_kv_u64(pk, "handshakes", auth->handshakes);
    s_kv_u64(pk, "unknown_keys", auth->unknown_keys);
    s_kv_u64(pk, "refused_full", auth->refused_full);
    s_kv_u64(pk, "forbidden", auth->forbidden);
    s_pack_roles(pk, "keys", auth->keys);
    s_pack_roles(pk, "connected", auth->connected);
    s_pack_roles(pk, "max", auth->max);
}

static void s_pack_messages(msgpack_packer *pk, const oq_stats_messages_t *m)
{
    s_key(pk, "messages");
    msgpack_pack_map(pk, S_MESSAGES_FIELDS);
    s_kv_u64(pk, "job_sent", m->job_sent);
    s_kv_u64(pk, "jobs_sent", m->jobs_sent);
    s_kv_u64(pk, "jobs_entries", m->jobs_entries);
    s_kv_u64(pk, "ack_received", m->ack_received);
    s_kv_u64(pk, "acks_received", m->acks_received);
    s_kv_u64(pk, "acks_entries", m->acks_entries);
}

static void s_pack_waits(msgpack_packer *pk, const oq_stats_waits_t *w)
{
    s_key(pk, "waits");
    msgpack_pack_map(pk, S_WAITS_FIELDS);
    s_kv_u64(pk, "held", w->held);
    s_kv_u64(pk, "max", w->max);
    s_kv_u64(pk, "max_per_peer", w->max_per_peer);
    s_kv_u64(pk, "max_per_key", w->max_per_key);
    s_kv_u64(pk, "closed", w->closed);
}

static void s_pack_replies(msgpack_packer *pk, const oq_stats_replies_t *r)
{
    s_key(pk, "replies");
    msgpack_pack_map(pk, S_REPLIES_FIELDS);
    s_kv_u64(pk, "kept", r->kept);
    s_kv_u64(pk, "kept_bytes", r->kept_bytes);
    s_kv_u64(pk, "kept_peers", r->kept_peers);
    s_kv_u64(pk, "full_pipes", r->full_pipes);
    s_kv_u64(pk, "peers_cut", r->peers_cut);
    s_kv_u64(pk, "cut_replies", r->cut_replies);
}

void oq_stats_encode(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine, int64_t uptime_ms,
                     const oq_stats_journal_t *journal, const oq_stats_auth_t *auth,
                     const oq_stats_messages_t *messages, const oq_stats_waits_t *waits,
                     const oq_stats_replies_t *replies, uint64_t workers_after,
                     uint32_t workers_limit)
{
    s_worker_page_t page = {.limit = workers_limit};
    msgpack_sbuffer_init(&page.buf);
    msgpack_packer_init(&page.pk, &page.buf, msgpack_sbuffer_write);
    oq_engine_worker_page(engine, workers_after, s_page_worker, &page);

    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_STATS, req, page.more ? 12 : 11);
    s_pack_auth(&pk, auth);
    s_pack_messages(&pk, messages);
    s_pack_waits(&pk, waits);
    s_pack_replies(&pk, replies);

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
    s_kv_u64(&pk, "dedupe_window_held_ms", journal->dedupe_window_held_ms);

    /* Unique and overlap keys (docs/protocol.md, "unique_key"). */
    oq_keys_stats_t keys;
    oq_engine_keys_stats(engine, &keys);
    s_key(&pk, "keys");
    msgpack_pack_map(&pk, 5);
    s_kv_u64(&pk, "unique_keys", keys.unique_keys);
    s_kv_u64(&pk, "unique_hits", keys.unique_hits);
    s_kv_u64(&pk, "unique_evicted", keys.unique_evicted);
    s_kv_u64(&pk, "overlap_held", keys.overlap_held);
    s_kv_u64(&pk, "overlap_waiting", keys.overlap_waiting);

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
        s_kv_u64(&pk, "review", s.review);
        s_kv_u64(&pk, "waiting", s.waiting);
        s_kv_u64(&pk, "dispatched", s.dispatched);
        s_kv_u64(&pk, "done", s.done);
        s_kv_u64(&pk, "retried", s.retried);
        s_kv_u64(&pk, "redelivered", s.redelivered);
        s_kv_u64(&pk, "late_acks", s.late_acks);
        s_kv_u64(&pk, "ignored_acks", s.ignored_acks);
        s_kv_u64(&pk, "duplicates", s.duplicates);
        s_kv_u64(&pk, "cancelled", s.cancelled);
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
    msgpack_pack_array(&pk, page.count);
    if (page.buf.size)
        msgpack_sbuffer_write(buf, page.buf.data, page.buf.size);
    msgpack_sbuffer_destroy(&page.buf);
    if (page.more)
        s_kv_u64(&pk, "workers_next", page.last_seq);

    size_t names = oq_engine_worker_names_count(engine);
    s_names_t summary = {&pk, names < OQ_STATS_WORKER_NAMES ? names : OQ_STATS_WORKER_NAMES};
    s_key(&pk, "worker_names");
    msgpack_pack_array(&pk, summary.left);
    oq_engine_worker_names(engine, s_pack_name, &summary);

    s_key(&pk, "broker");
    msgpack_pack_map(&pk, S_BROKER_FIELDS);
    s_kv_u64(&pk, "uptime_ms", uptime_ms > 0 ? (uint64_t)uptime_ms : 0);
    s_kv_u64(&pk, "fenced_acks", oq_engine_fenced_acks(engine));
    s_kv_u64(&pk, "stale_touches", oq_engine_stale_touches(engine));
    s_kv_u64(&pk, "jobs", oq_engine_job_count(engine));
    s_kv_u64(&pk, "bytes", oq_engine_bytes(engine));
    s_kv_u64(&pk, "max_bytes", oq_engine_max_bytes(engine));
    s_kv_u64(&pk, "held_bytes", oq_engine_held_bytes(engine));
    s_kv_u64(&pk, "workers", oq_engine_worker_count(engine));
    s_kv_u64(&pk, "worker_names", names);
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

static void s_pack_horizon(msgpack_packer *pk, const oq_queue_horizon_t *h)
{
    msgpack_pack_map(pk, S_HORIZON_FIELDS + (h->job.id != 0));
    s_key(pk, "name");
    oq_proto_pack_cstr(pk, h->name);
    s_kv_seconds(pk, "retry_after", h->retry_after_ms);
    s_kv_u64(pk, "max_tries", h->max_tries);
    s_kv_seconds(pk, "backoff", h->backoff_ms);
    if (h->job.id) {
        s_key(pk, "job");
        msgpack_pack_map(pk, S_HORIZON_JOB_FIELDS);
        s_kv_u64(pk, "id", h->job.id);
        s_key(pk, "type");
        oq_proto_pack_cstr(pk, h->job.type);
        s_kv_u64(pk, "max_tries", h->job.max_tries);
        s_kv_u64(pk, "attempt", h->job.attempt);
        s_kv_seconds(pk, "backoff", h->job.backoff_ms);
    }
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

/* A page of the failed store (review false) or of the review store, each
   job packed by pack, with the cursor of the next page, the last job shown
   by (time, id), while more remain. */
static void s_encode_store_page(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine, bool review,
                                const char *queue, const oq_failed_cursor_t *after, uint32_t limit,
                                void (*pack)(void *ctx, const oq_job_view_t *job))
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    static oq_job_view_t views[OQ_MAX_FAILED_LIST];
    s_page_t page = {views, 0};
    bool more = false;
    size_t total =
        review ? oq_engine_review_page(engine, queue, after, limit, s_collect, &page, &more)
               : oq_engine_failed_page(engine, queue, after, limit, s_collect, &page, &more);
    oq_proto_begin(&pk, review ? OQ_CMD_REVIEW : OQ_CMD_FAILED, req, more ? 4 : 2);
    s_kv_u64(&pk, "total", total);
    if (more) {
        const oq_job_view_t *last = &page.jobs[page.count - 1];
        s_kv_u64(&pk, "next", last->id);
        s_kv_u64(&pk, "next_at", last->failed_at_ms > 0 ? (uint64_t)last->failed_at_ms : 0);
    }
    s_key(&pk, "jobs");
    msgpack_pack_array(&pk, page.count);
    for (size_t i = 0; i < page.count; i++)
        pack(&pk, &page.jobs[i]);
}

void oq_stats_encode_failed(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine,
                            const char *queue, const oq_failed_cursor_t *after, uint32_t limit)
{
    s_encode_store_page(buf, req, engine, false, queue, after, limit, s_pack_failed);
}

void oq_stats_encode_horizon(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine,
                             int64_t dedupe_window_ms)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    size_t count = oq_engine_queue_count(engine);
    oq_queue_horizon_t *queues = count ? calloc(count, sizeof *queues) : NULL;
    if (count && !queues) {
        oq_proto_encode_error(buf, req, OQ_ERR_INTERNAL, "out of memory");
        return;
    }
    if (count)
        oq_engine_horizons(engine, queues);
    oq_queue_horizon_t defaults;
    oq_engine_default_horizon(engine, &defaults);
    int64_t oldest = oq_engine_oldest_failed_ms(engine);
    oq_proto_begin(&pk, OQ_CMD_HORIZON, req, 5);
    s_kv_seconds(&pk, "dedupe_window", dedupe_window_ms);
    s_kv_seconds(&pk, "unique_for", oq_engine_unique_longest_window_ms(engine));
    s_kv_u64(&pk, "oldest_failed_at", oldest > 0 ? (uint64_t)oldest : 0);
    s_key(&pk, "defaults");
    s_pack_horizon(&pk, &defaults);
    s_key(&pk, "queues");
    msgpack_pack_array(&pk, count);
    for (size_t i = 0; i < count; i++)
        s_pack_horizon(&pk, &queues[i]);
    free(queues);
}

/* ---- the review store ---- */

static void s_pack_review(void *ctx, const oq_job_view_t *job)
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
    s_key(pk, "reason");
    oq_proto_pack_cstr(pk, job->error ? job->error : "");
    s_kv_u64(pk, "review_at", job->failed_at_ms > 0 ? (uint64_t)job->failed_at_ms : 0);
    s_key(pk, "payload");
    msgpack_pack_str_body(pk, job->payload, job->payload_len); /* already msgpack */
}

void oq_stats_encode_review(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine,
                            const char *queue, const oq_failed_cursor_t *after, uint32_t limit)
{
    s_encode_store_page(buf, req, engine, true, queue, after, limit, s_pack_review);
}

/* The job's fields from its resolution, for a job the broker no longer
   holds. */
static void s_pack_resolution(msgpack_packer *pk, const oq_resolution_t *r)
{
    msgpack_pack_map(pk, 4);
    s_key(pk, "action");
    oq_proto_pack_cstr(pk, oq_proto_review_action_name(r->action));
    s_key(pk, "note");
    oq_proto_pack_cstr(pk, r->note);
    s_kv_u64(pk, "resolved_at", r->resolved_at_ms > 0 ? (uint64_t)r->resolved_at_ms : 0);
    s_kv_u64(pk, "attempt", r->attempt);
}

int oq_stats_encode_review_show(msgpack_sbuffer *buf, int64_t req, oq_engine_t *engine, uint64_t id)
{
    oq_job_view_t view;
    bool held = oq_engine_job_view(engine, id, &view) == 0;
    bool in_review = held && view.state == OQ_STATE_REVIEW;
    const oq_resolution_t *r = oq_engine_review_resolution(engine, id);
    if (!in_review && !r)
        return -1;
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    oq_proto_begin(&pk, OQ_CMD_REVIEW_SHOW, req, 1);
    s_key(&pk, "job");
    /* id, type, queue, state, reason, review_at; attempt and max_tries and
       the payload while held; the resolution if one is remembered. */
    msgpack_pack_map(&pk, 6 + (held ? 3 : 0) + (r ? 1 : 0));
    s_kv_u64(&pk, "id", id);
    s_key(&pk, "type");
    oq_proto_pack_cstr(&pk, held ? view.type : r->type);
    s_key(&pk, "queue");
    oq_proto_pack_cstr(&pk, held ? view.queue : r->queue);
    /* review: waiting for a person; otherwise the state the resolution
       left it in, or "done" once the broker no longer holds it. */
    s_key(&pk, "state");
    oq_proto_pack_cstr(&pk, held ? oq_engine_job_state(engine, id) : "done");
    s_key(&pk, "reason");
    oq_proto_pack_cstr(&pk, in_review ? (view.error ? view.error : "") : r->reason);
    int64_t at = in_review ? view.failed_at_ms : r->reviewed_at_ms;
    s_kv_u64(&pk, "review_at", at > 0 ? (uint64_t)at : 0);
    if (held) {
        s_kv_u64(&pk, "attempt", view.attempt);
        s_kv_u64(&pk, "max_tries", view.max_tries);
        s_key(&pk, "payload");
        msgpack_pack_str_body(&pk, view.payload, view.payload_len);
    }
    if (r) {
        s_key(&pk, "resolution");
        s_pack_resolution(&pk, r);
    }
    return 0;
}
