/*  engine_fixture.c: the engine on a hand-moved clock, for its unit tests,
    and the journal under it on a disk that fails on demand. */
#include "engine_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <unistd.h>

#include "onceq/limits.h"
#include "support.h"

/* Free bytes the disk seam reports when the test sets none: more than any
   test writes, far from overflowing a sum. */
#define S_PLENTY_BYTES (UINT64_MAX / 2)

static const uint8_t s_empty_map = 0x80;

static int64_t s_fake_now(void *ctx)
{
    return ((ef_time_t *)ctx)->now;
}

static int64_t s_fake_wall(void *ctx)
{
    return EF_WALL_BASE_MS + ((ef_time_t *)ctx)->now;
}

/* ---- jobs ---- */

oq_job_msg_t ef_job_msg(const ef_job_t *spec)
{
    oq_job_msg_t job = {.id = spec->id,
                        .type = oq_str(spec->type ? spec->type : "noop"),
                        .queue = oq_str(spec->queue ? spec->queue : "default"),
                        .payload = spec->payload ? spec->payload : &s_empty_map,
                        .payload_len = spec->payload ? spec->payload_len : 1,
                        .max_tries = spec->max_tries,
                        .has_max_tries = spec->max_tries > 0,
                        .timeout_ms = spec->timeout_ms,
                        .has_timeout = spec->timeout_ms > 0,
                        .delay_ms = spec->delay_ms,
                        .has_delay = spec->delay_ms > 0,
                        .priority = spec->priority,
                        .has_priority = spec->priority != 0,
                        .dispatch_id = oq_str(spec->dispatch_id),
                        .unique_key = oq_str(spec->unique_key),
                        .unique_for_ms = spec->unique_for_ms,
                        .overlap_key = oq_str(spec->overlap_key)};
    while (job.backoff_len < OQ_MAX_BACKOFF_STEPS && spec->backoff_ms[job.backoff_len] != 0) {
        job.backoff_ms[job.backoff_len] = spec->backoff_ms[job.backoff_len];
        job.backoff_len++;
    }
    return job;
}

uint64_t ef_dispatch(ef_fixture_t *f, const oq_job_msg_t *job)
{
    uint64_t id = 0;
    oq_err_t code = OQ_ERR_NONE;
    char reason[512];
    if (oq_engine_dispatch(f->engine, job, &id, &code, reason, sizeof reason) < 0)
        fail_msg("dispatch refused (%d): %s", (int)code, reason);
    assert_true(id > 0);
    return id;
}

/* ---- the engine alone ---- */

int ef_deliver(void *ctx, const oq_worker_view_t *w, const oq_job_view_t *job)
{
    ef_fixture_t *f = ctx;
    char who = ((const char *)w->identity)[0];
    if (who == f->unreachable)
        return -1;
    assert_true(f->sent_count < EF_MAX_SENT);
    f->sent[f->sent_count++] = (ef_delivery_t){who, job->id, job->attempt, job->lease};
    return 0;
}

static ef_fixture_t *s_new(void)
{
    ef_fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->clock = (oq_clock_t){s_fake_now, s_fake_wall, &f->time};
    return f;
}

int ef_setup(void **state)
{
    ef_fixture_t *f = s_new();
    f->config = oq_engine_config_default();
    f->config.retry_after_ms = EF_RETRY_AFTER_MS;
    f->config.timeout_ms = EF_TIMEOUT_MS;
    f->config.margin_ms = EF_MARGIN_MS;
    f->config.backoff_ms = EF_BACKOFF_MS;
    f->config.max_jobs = EF_MAX_JOBS;
    f->engine = oq_engine_new(&f->config, &f->clock);
    assert_non_null(f->engine);
    *state = f;
    return 0;
}

void ef_engine_bytes(ef_fixture_t *f, uint64_t max_bytes, size_t max_jobs)
{
    f->config = oq_engine_config_default();
    f->config.retry_after_ms = EF_RETRY_AFTER_MS;
    f->config.timeout_ms = EF_TIMEOUT_MS;
    f->config.margin_ms = EF_MARGIN_MS;
    f->config.max_bytes = max_bytes;
    if (max_jobs)
        f->config.max_jobs = max_jobs;
    oq_engine_destroy(&f->engine);
    f->engine = oq_engine_new(&f->config, &f->clock);
    assert_non_null(f->engine);
}

int ef_teardown(void **state)
{
    ef_fixture_t *f = *state;
    ef_close(f);
    assert_null(f->engine);
    if (f->dir[0] && oq_support_remove_tree(f->dir) < 0)
        fprintf(stderr, "cannot remove %s\n", f->dir);
    free(f);
    *state = NULL;
    return 0;
}

oq_worker_t *ef_worker(ef_fixture_t *f, char name, uint32_t credit)
{
    oq_worker_t *w = oq_engine_worker_add(f->engine, &name, 1, oq_str("w"), (uint32_t)name, NULL);
    assert_non_null(w);
    oq_engine_worker_credit(f->engine, w, credit);
    return w;
}

uint64_t ef_lease(const ef_fixture_t *f, uint64_t id, uint32_t attempt)
{
    for (size_t i = f->sent_count; i-- > 0;)
        if (f->sent[i].id == id && f->sent[i].attempt == attempt)
            return f->sent[i].lease;
    return 0;
}

static int s_deliver_nowhere(void *ctx, const oq_worker_view_t *w, const oq_job_view_t *job)
{
    (void)ctx;
    (void)w;
    (void)job;
    return 0;
}

oq_worker_t *ef_lease_all(ef_fixture_t *f, char name)
{
    oq_worker_t *w = oq_engine_worker_find(f->engine, &name, 1);
    if (!w)
        w = oq_engine_worker_add(f->engine, &name, 1, oq_str("w"), 1, NULL);
    assert_non_null(w);
    oq_engine_worker_credit(f->engine, w, OQ_MAX_CREDIT);
    oq_engine_pump(f->engine, s_deliver_nowhere, f);
    return w;
}

oq_ack_effect_t ef_ack_leased(ef_fixture_t *f, oq_worker_t *w, uint64_t id, uint32_t attempt,
                              oq_outcome_t outcome)
{
    oq_ack_msg_t ack = {
        .id = id, .attempt = attempt, .outcome = outcome, .error = oq_str("it broke")};
    oq_job_view_t view;
    if (oq_engine_job_view(f->engine, id, &view) == 0) {
        ack.lease = view.lease;
        ack.has_lease = true;
    }
    return oq_engine_ack(f->engine, w, NULL, &ack);
}

void ef_expect(ef_fixture_t *f, uint64_t id, const char *state, uint32_t attempt)
{
    const char *got = oq_engine_job_state(f->engine, id);
    if (!state) {
        if (got)
            fail_msg("job %llu is %s, expected gone", (unsigned long long)id, got);
        return;
    }
    if (!got || strcmp(got, state) != 0)
        fail_msg("job %llu is %s, expected %s", (unsigned long long)id, got ? got : "gone", state);
    oq_job_view_t v;
    assert_int_equal(oq_engine_job_view(f->engine, id, &v), 0);
    assert_int_equal(v.attempt, attempt);
}

/* ---- the journal under it ---- */

static ssize_t s_pwrite(void *ctx, int fd, const void *data, size_t len, off_t offset)
{
    ef_disk_t *d = ctx;
    d->writes++;
    d->last_offset = offset;
    if (d->write_errno) {
        if (d->write_budget == 0) {
            errno = d->write_errno;
            return -1;
        }
        if (len > d->write_budget)
            len = d->write_budget;
        d->write_budget -= len;
    }
    return pwrite(fd, data, len, offset);
}

static int s_fsync(void *ctx, int fd)
{
    ef_disk_t *d = ctx;
    if (d->fsync_errno) {
        errno = d->fsync_errno;
        return -1;
    }
    d->fsyncs++;
    return fsync(fd);
}

static int s_free_bytes(void *ctx, const char *dir, uint64_t *bytes)
{
    const ef_disk_t *d = ctx;
    (void)dir;
    *bytes = d->free_bytes ? d->free_bytes : S_PLENTY_BYTES;
    return 0;
}

int ef_setup_journal(void **state)
{
    ef_fixture_t *f = s_new();
    assert_int_equal(oq_support_temp_dir("onceq-unit-journal", f->dir, sizeof f->dir), 0);
    f->time.now = EF_JOURNAL_START_MS;
    f->ops = (oq_disk_ops_t){
        .pwrite = s_pwrite, .fsync = s_fsync, .ctx = &f->disk, .free_bytes = s_free_bytes};
    f->policy = OQ_FSYNC_ALWAYS;
    f->config = oq_engine_config_default();
    f->config.backoff_ms = EF_BACKOFF_MS;
    *state = f;
    return 0;
}

void ef_close(ef_fixture_t *f)
{
    oq_compact_destroy(&f->compact);
    if (f->engine)
        oq_engine_set_hooks(f->engine, NULL);
    oq_journal_destroy(&f->journal);
    oq_engine_destroy(&f->engine);
}

int ef_open(ef_fixture_t *f, bool repair, oq_replay_report_t *report, char *reason,
            size_t reason_len)
{
    ef_close(f);
    f->engine = oq_engine_new(&f->config, &f->clock);
    assert_non_null(f->engine);
    oq_journal_config_t jc = {f->dir, f->policy, EF_FSYNC_INTERVAL_MS, &f->ops, 0, repair};
    f->journal = oq_journal_new(&jc, &f->clock, reason, reason_len);
    if (!f->journal)
        return -1;
    if (oq_replay_run(f->journal, f->engine, &f->clock, repair, report, reason, reason_len) < 0)
        return -1;
    oq_engine_hooks_t hooks = oq_journal_hooks(f->journal);
    oq_engine_set_hooks(f->engine, &hooks);
    oq_engine_batches_settle(f->engine); /* as the broker does after replay */
    oq_engine_chains_settle(f->engine);
    if (f->compact_config.min_bytes) {
        f->compact = oq_compact_new(&f->compact_config, f->journal, f->engine, &f->clock);
        assert_non_null(f->compact);
    }
    return 0;
}

void ef_open_ok(ef_fixture_t *f, oq_replay_report_t *report)
{
    char reason[4096];
    oq_replay_report_t ignored;
    if (ef_open(f, false, report ? report : &ignored, reason, sizeof reason) < 0)
        fail_msg("open: %s", reason);
}

const char *ef_path(ef_fixture_t *f, const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", f->dir, name);
    return path;
}
