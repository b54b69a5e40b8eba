/*  report.c: the loop's numbers, for the "stats" command (front.c) and for
    GET /metrics. The engine counts its own (stats.h reads them); these are
    the journal's, auth's, the waits' and the outbox's, gathered in one
    place so that stats and the metrics never disagree. */
#include <time.h>

#include "broker_internal.h"
#include "metrics.h"
#include "onceq/limits.h"
#include "onceq/log.h"

/* The outbox's replies kept for full pipes. */
static oq_stats_replies_t s_replies(const oq_broker_t *self)
{
    oq_outbox_stats_t o = oq_outbox_stats(self->outbox);
    return (oq_stats_replies_t){.kept = o.kept,
                                .kept_bytes = o.kept_bytes,
                                .kept_peers = o.kept_peers,
                                .full_pipes = o.full_pipes,
                                .peers_cut = o.peers_cut,
                                .cut_replies = o.cut_replies};
}

void oq_report_gather(oq_broker_t *self, oq_stats_journal_t *journal, oq_stats_auth_t *auth,
                      oq_stats_waits_t *waits, oq_stats_replies_t *replies)
{
    oq_stats_journal_t j = {
        .enabled = self->journal != NULL,
        .dispatch_ids = oq_engine_dispatch_ids(self->engine),
        .dedupe_hits = oq_engine_dedupe_hits(self->engine),
        .dedupe_evicted = oq_engine_dedupe_evicted(self->engine),
        .dedupe_window_held_ms = (uint64_t)oq_engine_dedupe_window_held_ms(self->engine),
        .error = "",
        .fsync = "none",
    };
    if (self->journal) {
        j.fsync = oq_fsync_name(oq_journal_policy(self->journal));
        j.bytes = oq_journal_file_bytes(self->journal);
        j.live_bytes = oq_compact_live_bytes(self->compact);
        j.fsyncs = oq_journal_fsyncs(self->journal);
        j.failures = oq_journal_failures(self->journal);
        j.backlog_bytes = oq_journal_backlog_bytes(self->journal);
        j.compactions = oq_compact_count(self->compact);
        j.error = oq_journal_error(self->journal);
    }
    oq_stats_auth_t a = {.curve = self->keys != NULL, .forbidden = self->forbidden};
    if (self->auth) {
        a.handshakes = oq_auth_accepted(self->auth);
        a.unknown_keys = oq_auth_refused_unknown(self->auth);
    }
    for (int role = OQ_ROLE_NONE + 1; self->keys && role < OQ_ROLE_COUNT_; role++) {
        a.keys[role] = oq_keystore_count(self->keys, (oq_role_t)role);
        if (self->peers) {
            a.connected[role] = oq_peers_count(self->peers, (oq_role_t)role);
            a.max[role] = oq_peers_max(self->peers, (oq_role_t)role);
            /* At the handshake or at the first message. */
            a.refused_full += oq_peers_refused(self->peers, (oq_role_t)role);
        }
    }
    *journal = j;
    *auth = a;
    *waits = (oq_stats_waits_t){
        .held = oq_waiters_count(self->waiters),
        .max = oq_waiters_max(self->waiters),
        .max_per_peer = oq_waiters_max_per_peer(self->waiters),
        .max_per_key = oq_waiters_max_per_key(self->waiters),
        .closed = oq_waiters_closed(self->waiters),
    };
    *replies = s_replies(self);
}

/* At most every OQ_METRICS_RENDER_MS (metrics_http.h): a scrape never
   waits for the loop, and the loop never waits for a scrape. Rendering
   grows with the queues and types (some 6 us each), so the next one waits
   at least OQ_METRICS_RENDER_SPACING times as long as this one took: the
   loop spends at most 1 / OQ_METRICS_RENDER_SPACING of its time on it. */
void oq_report_publish_metrics(oq_broker_t *self, int64_t now)
{
    if (!self->metrics || now < self->next_metrics_ms)
        return;
    struct timespec started, ended;
    clock_gettime(CLOCK_MONOTONIC, &started);
    oq_stats_journal_t j;
    oq_stats_auth_t a;
    oq_stats_waits_t w;
    oq_stats_replies_t r;
    oq_report_gather(self, &j, &a, &w, &r);
    oq_metrics_source_t source = {
        .engine = self->engine,
        .journal = &j,
        .auth = &a,
        .messages = &self->messages,
        .waits = &w,
        .replies = &r,
        .fsync_latency = self->journal ? oq_journal_fsync_latency(self->journal) : NULL,
        .uptime_ms = now - self->started_ms,
    };
    size_t len = 0;
    char *text = oq_metrics_render(&source, &len);
    clock_gettime(CLOCK_MONOTONIC, &ended);
    int64_t took_ms =
        (ended.tv_sec - started.tv_sec) * 1000 + (ended.tv_nsec - started.tv_nsec) / 1000000;
    int64_t wait_ms = took_ms * OQ_METRICS_RENDER_SPACING;
    self->next_metrics_ms = now + (wait_ms > OQ_METRICS_RENDER_MS ? wait_ms : OQ_METRICS_RENDER_MS);
    if (!text) {
        oq_warn("metrics: out of memory rendering them; the previous text is served");
        return;
    }
    oq_metrics_http_publish(self->metrics, &text, len);
}
