/*  metrics.c: rendering of the Prometheus text format. Each family is
    written whole (HELP, TYPE, then its samples) because the format forbids
    interleaving families; the per-queue and per-type loops therefore run
    once per family, which costs little next to a scrape interval. */
#include "metrics.h"

#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>

#include "onceq/limits.h"

#define S_US_PER_S 1e6
#define S_MS_PER_S 1e3

/* A label value, escaped as the format requires (\\, \" and \n). */
static void s_label(FILE *out, const char *value)
{
    if (!strpbrk(value, "\\\"\n")) {
        fputs(value, out);
        return;
    }
    for (const char *c = value; *c; c++) {
        if (*c == '\\' || *c == '"')
            fputc('\\', out);
        if (*c == '\n') {
            fputs("\\n", out);
            continue;
        }
        fputc(*c, out);
    }
}

static void s_family(FILE *out, const char *name, const char *type, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void s_sample(FILE *out, const char *name, uint64_t value)
{
    fprintf(out, "%s %llu\n", name, (unsigned long long)value);
}

static void s_metric(FILE *out, const char *name, const char *type, const char *help,
                     uint64_t value)
{
    s_family(out, name, type, help);
    s_sample(out, name, value);
}

/* ---- per queue ---- */

typedef uint64_t (*s_queue_field_fn)(const oq_queue_stats_t *s, const oq_engine_t *e, size_t i);

#define S_QUEUE_FIELD(field)                                                                       \
    static uint64_t s_q_##field(const oq_queue_stats_t *s, const oq_engine_t *e, size_t i)         \
    {                                                                                              \
        (void)e;                                                                                   \
        (void)i;                                                                                   \
        return s->field;                                                                           \
    }
S_QUEUE_FIELD(ready)
S_QUEUE_FIELD(delayed)
S_QUEUE_FIELD(leased)
S_QUEUE_FIELD(failed)
S_QUEUE_FIELD(review)
S_QUEUE_FIELD(waiting)
S_QUEUE_FIELD(dispatched)
S_QUEUE_FIELD(done)
S_QUEUE_FIELD(retried)
S_QUEUE_FIELD(redelivered)
S_QUEUE_FIELD(late_acks)
S_QUEUE_FIELD(ignored_acks)
S_QUEUE_FIELD(duplicates)
S_QUEUE_FIELD(cancelled)
S_QUEUE_FIELD(returned)

static uint64_t s_q_expired(const oq_queue_stats_t *s, const oq_engine_t *e, size_t i)
{
    (void)s;
    return oq_engine_queue_expired(e, i);
}

typedef struct {
    const char *name, *type, *help;
    s_queue_field_fn get;
} s_queue_metric_t;

static const s_queue_metric_t s_queue_metrics[] = {
    {"onceq_queue_ready_jobs", "gauge", "Jobs ready to be handed out now.", s_q_ready},
    {"onceq_queue_delayed_jobs", "gauge", "Jobs waiting for their delay or backoff now.",
     s_q_delayed},
    {"onceq_queue_leased_jobs", "gauge", "Jobs held by a worker now.", s_q_leased},
    {"onceq_queue_failed_jobs", "gauge", "Jobs in the failed store now.", s_q_failed},
    {"onceq_queue_review_jobs", "gauge", "Jobs in review (outcome unknown, waiting for a person).",
     s_q_review},
    {"onceq_queue_waiting_jobs", "gauge",
     "Ready jobs waiting because another job holds their overlap key.", s_q_waiting},
    {"onceq_queue_dispatched_total", "counter", "Jobs dispatched.", s_q_dispatched},
    {"onceq_queue_done_total", "counter", "Jobs completed.", s_q_done},
    {"onceq_queue_retries_total", "counter", "Retry outcomes.", s_q_retried},
    {"onceq_queue_redeliveries_total", "counter",
     "Deliveries of a job whose previous lease ended without an ack.", s_q_redelivered},
    {"onceq_queue_lease_expiries_total", "counter", "Leases that ran out.", s_q_expired},
    {"onceq_queue_late_acks_total", "counter", "Jobs completed by the ok of an earlier delivery.",
     s_q_late_acks},
    {"onceq_queue_ignored_acks_total", "counter",
     "Acks of a job done already or of a delivery not current.", s_q_ignored_acks},
    {"onceq_queue_duplicates_total", "counter",
     "Runs whose effect the unique guard absorbed (already_applied).", s_q_duplicates},
    {"onceq_queue_cancelled_total", "counter", "Ready or delayed jobs withdrawn by an operator.",
     s_q_cancelled},
    {"onceq_queue_returned_total", "counter",
     "Jobs handed back unrun without using a try (return, unavailable).", s_q_returned},
};

static void s_render_queues(FILE *out, oq_engine_t *engine)
{
    size_t queues = oq_engine_queue_count(engine);
    for (size_t m = 0; m < sizeof s_queue_metrics / sizeof s_queue_metrics[0]; m++) {
        const s_queue_metric_t *qm = &s_queue_metrics[m];
        s_family(out, qm->name, qm->type, qm->help);
        for (size_t i = 0; i < queues; i++) {
            oq_queue_stats_t s;
            oq_engine_queue_stats(engine, i, &s);
            fprintf(out, "%s{queue=\"", qm->name);
            s_label(out, s.name);
            fprintf(out, "\"} %llu\n", (unsigned long long)qm->get(&s, engine, i));
        }
    }
}

/* One histogram's samples: cumulative buckets, +Inf, sum (seconds), count. */
static void s_histogram(FILE *out, const char *name, const char *label, const char *value,
                        const oq_histogram_t *h)
{
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= h->bounds; b++) {
        cumulative += h->counts[b];
        fprintf(out, "%s_bucket{", name);
        if (label) {
            fprintf(out, "%s=\"", label);
            s_label(out, value);
            fputs("\",", out);
        }
        if (b < h->bounds)
            fprintf(out, "le=\"%g\"} %llu\n", (double)h->bounds_us[b] / S_US_PER_S,
                    (unsigned long long)cumulative);
        else
            fprintf(out, "le=\"+Inf\"} %llu\n", (unsigned long long)cumulative);
    }
    const char *open = label ? "{" : "";
    const char *close = label ? "\"}" : "";
    fprintf(out, "%s_sum%s%s%s", name, open, label ? label : "", label ? "=\"" : "");
    if (label)
        s_label(out, value);
    fprintf(out, "%s %.6f\n", close, (double)h->sum_us / S_US_PER_S);
    fprintf(out, "%s_count%s%s%s", name, open, label ? label : "", label ? "=\"" : "");
    if (label)
        s_label(out, value);
    fprintf(out, "%s %llu\n", close, (unsigned long long)h->count);
}

static void s_render_latency(FILE *out, oq_engine_t *engine)
{
    static const char name[] = "onceq_queue_job_duration_seconds";
    s_family(out, name, "histogram",
             "From dispatch to the ok ack, of jobs dispatched since the broker started.");
    size_t queues = oq_engine_queue_count(engine);
    for (size_t i = 0; i < queues; i++) {
        oq_queue_stats_t s;
        oq_engine_queue_stats(engine, i, &s);
        s_histogram(out, name, "queue", s.name, oq_engine_queue_latency(engine, i));
    }
}

/* ---- per type ---- */

typedef struct {
    const char *name, *type, *help;
    size_t offset; /* of the uint64_t in oq_type_stats_t */
} s_type_metric_t;

#define S_TYPE_AT(field) offsetof(oq_type_stats_t, field)

static const s_type_metric_t s_type_metrics[] = {
    {"onceq_type_done_total", "counter", "Jobs of the type completed.", S_TYPE_AT(done)},
    {"onceq_type_applied_total", "counter", "Ok acks whose effect was written (applied).",
     S_TYPE_AT(applied)},
    {"onceq_type_duplicates_total", "counter",
     "Ok acks whose effect the unique guard absorbed (already_applied).", S_TYPE_AT(duplicates)},
    {"onceq_type_failed_total", "counter", "Jobs of the type that went to the failed store.",
     S_TYPE_AT(failed)},
    {"onceq_type_ready_jobs", "gauge", "Jobs of the type ready now.", S_TYPE_AT(ready)},
    {"onceq_type_workers", "gauge", "Connected workers that take the type.", S_TYPE_AT(workers)},
    {"onceq_type_unhandled_jobs", "gauge",
     "Jobs of the type ready now with no connected worker taking it.", S_TYPE_AT(unhandled)},
};

static void s_render_types(FILE *out, oq_engine_t *engine)
{
    size_t types = oq_engine_type_count(engine);
    for (size_t m = 0; m < sizeof s_type_metrics / sizeof s_type_metrics[0]; m++) {
        const s_type_metric_t *tm = &s_type_metrics[m];
        s_family(out, tm->name, tm->type, tm->help);
        for (size_t i = 0; i < types; i++) {
            oq_type_stats_t t;
            oq_engine_type_stats(engine, i, &t);
            uint64_t value = *(const uint64_t *)((const char *)&t + tm->offset);
            fprintf(out, "%s{type=\"", tm->name);
            s_label(out, t.name);
            fprintf(out, "\"} %llu\n", (unsigned long long)value);
        }
    }
}

/* ---- the broker, the journal, auth ---- */

static void s_render_broker(FILE *out, const oq_metrics_source_t *src)
{
    oq_engine_t *engine = src->engine;
    fprintf(out, "# HELP onceq_build_info The broker's version.\n# TYPE onceq_build_info gauge\n"
                 "onceq_build_info{version=\"");
    s_label(out, ONCEQ_VERSION);
    fputs("\"} 1\n", out);
    s_family(out, "onceq_uptime_seconds", "gauge", "Time since the broker started.");
    fprintf(out, "onceq_uptime_seconds %.3f\n",
            src->uptime_ms > 0 ? (double)src->uptime_ms / S_MS_PER_S : 0.0);
    s_metric(out, "onceq_jobs", "gauge", "Live jobs held (every state).",
             oq_engine_job_count(engine));
    s_metric(out, "onceq_jobs_bytes", "gauge",
             "Bytes of live jobs held (part of onceq_held_bytes).", oq_engine_bytes(engine));
    s_metric(out, "onceq_jobs_max_bytes", "gauge",
             "The byte limit on what the broker holds (--max-bytes).", oq_engine_max_bytes(engine));
    s_metric(out, "onceq_held_bytes", "gauge",
             "Bytes held against --max-bytes: jobs, keys, dispatch ids, workers, waits.",
             oq_engine_held_bytes(engine));
    s_metric(out, "onceq_workers_connected", "gauge", "Workers connected now.",
             oq_engine_worker_count(engine));
    s_metric(out, "onceq_workers_unavailable", "gauge",
             "Workers paused because their database is unavailable.",
             oq_engine_workers_unavailable(engine));
    s_metric(out, "onceq_workers_dead_total", "counter",
             "Workers declared dead after missing their heartbeats.",
             oq_engine_workers_dead(engine));
    s_metric(out, "onceq_fenced_acks_total", "counter",
             "Acks without a valid lease token (changed nothing).", oq_engine_fenced_acks(engine));
    s_metric(out, "onceq_stale_touches_total", "counter",
             "Touches of a lease not current or not the sender's.",
             oq_engine_stale_touches(engine));
    s_metric(out, "onceq_unknown_acks_total", "counter",
             "Acks for jobs the broker neither holds nor remembers.",
             oq_engine_unknown_acks(engine));
}

static void s_render_journal(FILE *out, const oq_metrics_source_t *src)
{
    const oq_stats_journal_t *j = src->journal;
    s_metric(out, "onceq_journal_enabled", "gauge", "1 with a journal, 0 with --no-journal.",
             j->enabled);
    s_metric(out, "onceq_journal_failing", "gauge",
             "1 while journal writes or fsyncs fail (records wait in memory).", j->error[0] != 0);
    s_metric(out, "onceq_journal_bytes", "gauge", "Size of the journal file.", j->bytes);
    s_metric(out, "onceq_journal_live_bytes", "gauge",
             "What a snapshot of the live jobs would take.", j->live_bytes);
    s_metric(out, "onceq_journal_backlog_bytes", "gauge", "Bytes appended and not durable yet.",
             j->backlog_bytes);
    s_metric(out, "onceq_journal_fsyncs_total", "counter", "Journal fsyncs done.", j->fsyncs);
    s_metric(out, "onceq_journal_failures_total", "counter",
             "Journal writes or fsyncs that failed.", j->failures);
    s_metric(out, "onceq_journal_compactions_total", "counter", "Journal compactions done.",
             j->compactions);
    static const char fsync_name[] = "onceq_journal_fsync_duration_seconds";
    s_family(out, fsync_name, "histogram", "How long the journal file's fsyncs took.");
    oq_histogram_t none;
    oq_histogram_init(&none, oq_histogram_fsync_us, oq_histogram_fsync_count);
    s_histogram(out, fsync_name, NULL, NULL, src->fsync_latency ? src->fsync_latency : &none);
    s_metric(out, "onceq_dedupe_ids", "gauge", "Dispatch ids remembered for deduplication.",
             j->dispatch_ids);
    s_metric(out, "onceq_dedupe_hits_total", "counter",
             "Dispatches answered with the job of an earlier dispatch id.", j->dedupe_hits);
    s_metric(out, "onceq_dedupe_evicted_total", "counter",
             "Dispatch ids forgotten before their window ended (table full).", j->dedupe_evicted);
    s_family(out, "onceq_dedupe_window_held_seconds", "gauge",
             "The window dispatch ids are held for now (below --dedupe-window when ids were "
             "forgotten early).");
    fprintf(out, "onceq_dedupe_window_held_seconds %.3f\n",
            (double)j->dedupe_window_held_ms / S_MS_PER_S);
}

static void s_render_auth(FILE *out, const oq_stats_auth_t *a)
{
    s_metric(out, "onceq_auth_curve", "gauge", "1 when the sockets speak CURVE, 0 in plaintext.",
             a->curve);
    s_metric(out, "onceq_auth_handshakes_total", "counter", "CURVE handshakes accepted.",
             a->handshakes);
    s_metric(out, "onceq_auth_unknown_keys_total", "counter",
             "CURVE handshakes refused: key not allowed.", a->unknown_keys);
    s_metric(out, "onceq_auth_refused_full_total", "counter",
             "Handshakes or connections refused: role at its limit.", a->refused_full);
    s_metric(out, "onceq_auth_forbidden_total", "counter",
             "Commands refused for the sender's key or role.", a->forbidden);
    static const char *const roles[] = {NULL, "producer", "worker", "admin"};
    s_family(out, "onceq_connections", "gauge", "Connections of each role now (with keys).");
    for (int r = 1; r < 4; r++)
        fprintf(out, "onceq_connections{role=\"%s\"} %zu\n", roles[r], a->connected[r]);
}

/* ---- the back socket's messages ---- */

/* A message of each command that carries deliveries or acks, and what it
   carried: sum(entries) / sum(messages) over job and jobs (or ack and
   acks) is the batching ratio. */
static void s_render_messages(FILE *out, const oq_stats_messages_t *m)
{
    static const char messages[] = "onceq_worker_messages_total";
    static const char entries[] = "onceq_worker_message_entries_total";
    s_family(out, messages, "counter",
             "Messages to workers that carry deliveries (job, jobs) and from them that carry acks "
             "(ack, acks).");
    fprintf(out, "%s{cmd=\"job\"} %llu\n", messages, (unsigned long long)m->job_sent);
    fprintf(out, "%s{cmd=\"jobs\"} %llu\n", messages, (unsigned long long)m->jobs_sent);
    fprintf(out, "%s{cmd=\"ack\"} %llu\n", messages, (unsigned long long)m->ack_received);
    fprintf(out, "%s{cmd=\"acks\"} %llu\n", messages, (unsigned long long)m->acks_received);
    s_family(out, entries, "counter",
             "Deliveries or acks those messages carried (a job or an ack message carries one).");
    fprintf(out, "%s{cmd=\"job\"} %llu\n", entries, (unsigned long long)m->job_sent);
    fprintf(out, "%s{cmd=\"jobs\"} %llu\n", entries, (unsigned long long)m->jobs_entries);
    fprintf(out, "%s{cmd=\"ack\"} %llu\n", entries, (unsigned long long)m->ack_received);
    fprintf(out, "%s{cmd=\"acks\"} %llu\n", entries, (unsigned long long)m->acks_entries);
}

/* ---- waits ---- */

static void s_render_waits(FILE *out, const oq_stats_waits_t *w)
{
    s_metric(out, "onceq_waits_held", "gauge",
             "Waits for a job to end held now (answered when it ends or they time out).", w->held);
    s_metric(out, "onceq_waits_max", "gauge", "The most waits held at once, in all.", w->max);
    s_metric(out, "onceq_waits_max_per_connection", "gauge",
             "The most waits held at once from one connection.", w->max_per_peer);
    s_metric(out, "onceq_waits_max_per_key", "gauge",
             "The most waits held at once from all the connections of one key.", w->max_per_key);
    s_metric(out, "onceq_waits_closed_total", "counter",
             "Waits forgotten because their connection closed, since start.", w->closed);
}

/* ---- replies kept for full pipes ---- */

static void s_render_replies(FILE *out, const oq_stats_replies_t *r)
{
    if (!r)
        return;
    s_metric(out, "onceq_replies_kept", "gauge",
             "Replies to producers kept because their pipe was full, sent as it drains.", r->kept);
    s_metric(out, "onceq_replies_kept_bytes", "gauge", "The bytes of the replies kept now.",
             r->kept_bytes);
    s_metric(out, "onceq_replies_full_pipe_total", "counter",
             "Replies that met a full pipe to a producer and were kept, since start.",
             r->full_pipes);
    s_metric(out, "onceq_reply_peers_cut_total", "counter",
             "Producer connections cut off because they read none of their replies, since "
             "start.",
             r->peers_cut);
    s_metric(out, "onceq_replies_cut_total", "counter",
             "Replies dropped with the connections cut off, since start.", r->cut_replies);
}

char *oq_metrics_render(const oq_metrics_source_t *source, size_t *len)
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    if (!out)
        return NULL;
    __fsetlocking(out, FSETLOCKING_BYCALLER); /* the stream is this call's alone */
    s_render_broker(out, source);
    s_render_messages(out, source->messages);
    s_render_waits(out, source->waits);
    s_render_replies(out, source->replies);
    s_render_queues(out, source->engine);
    s_render_latency(out, source->engine);
    s_render_types(out, source->engine);
    s_render_journal(out, source);
    s_render_auth(out, source->auth);
    if (ferror(out)) {
        fclose(out);
        free(text);
        return NULL;
    }
    if (fclose(out) != 0) {
        free(text);
        return NULL;
    }
    *len = size;
    return text;
}
