/*  engine_fixture.c: the engine on a hand-moved clock, for its unit tests. */
#include "engine_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static int64_t s_fake_now(void *ctx)
{
    return ((ef_time_t *)ctx)->now;
}

static int64_t s_fake_wall(void *ctx)
{
    return EF_WALL_BASE_MS + ((ef_time_t *)ctx)->now;
}

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

int ef_setup(void **state)
{
    static ef_fixture_t f;
    memset(&f, 0, sizeof f);
    f.clock = (oq_clock_t){s_fake_now, s_fake_wall, &f.time};
    oq_engine_config_t config = oq_engine_config_default();
    config.retry_after_ms = EF_RETRY_AFTER_MS;
    config.timeout_ms = EF_TIMEOUT_MS;
    config.margin_ms = EF_MARGIN_MS;
    config.backoff_ms = EF_BACKOFF_MS;
    config.max_jobs = EF_MAX_JOBS;
    f.engine = oq_engine_new(&config, &f.clock);
    assert_non_null(f.engine);
    *state = &f;
    return 0;
}

int ef_teardown(void **state)
{
    ef_fixture_t *f = *state;
    oq_engine_destroy(&f->engine);
    assert_null(f->engine);
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
