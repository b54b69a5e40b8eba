/*  job_thread.c: the actor that runs handlers. Two frames go to the thread
    for each request (a fixed-size header saying what to do, then for a job
    the encoded payload map, empty otherwise); one fixed-size oq_job_event_t
    comes back for a job or a probe (a release has no answer); an empty
    frame tells it to stop. For a job the thread decodes the payload, finds
    the handler, runs it and times it. A batch is as many job requests in a
    row, each header saying how many there are: the thread reads them all,
    calls the type's batch function once, and answers one event per job. */
#include "job_thread.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "onceq/clock.h"
#include "onceq/log.h"
#include "registry.h"

/* Each job thread has a context of its own, so the name need not be unique. */
#define S_ENDPOINT "inproc://onceq-job-thread"

typedef enum {
    S_RUN_JOB,     /* run a job's handler */
    S_RUN_PROBE,   /* probe the resource of type */
    S_RUN_RELEASE, /* release every resource */
} s_kind_t;

/* The header frame of one request: for a job, the envelope fields a
   handler sees; for a probe, the type. */
typedef struct {
    s_kind_t kind;
    uint64_t id;
    uint32_t attempt;
    uint32_t max_tries;
    int64_t timeout_ms;
    uint32_t batch; /* a job: how many jobs its batch has (1: none) */
    char type[OQ_MAX_NAME_LEN + 1];
    char queue[OQ_MAX_NAME_LEN + 1];
} s_request_t;

struct oq_job_thread {
    void *ctx;               /* this actor's own context (see job_thread.h) */
    void *pipe;              /* main thread's end of the PAIR pipe */
    pthread_t thread;        /* runs s_run */
    oq_registry_t *registry; /* read only by the job thread once it runs */
};

/* Make a handler's report one the broker can use: a handler that set no
   outcome, or failed without saying why, is reported as such. */
static void s_check_report(oq_report_t *report, const char *type)
{
    switch (report->outcome) {
    case OQ_OUTCOME_OK:
        report->error[0] = 0;
        break;
    case OQ_OUTCOME_RETRY:
    case OQ_OUTCOME_FAIL:
    case OQ_OUTCOME_RETURN:
    case OQ_OUTCOME_REVIEW:
    case OQ_OUTCOME_UNAVAILABLE:
        report->result = OQ_RESULT_NONE;
        if (report->error[0] == 0)
            oq_report_fail(report, "the %s handler reported %s without a message", type,
                           oq_proto_outcome_name(report->outcome));
        break;
    default:
        oq_report_fail(report, "the %s handler returned without reporting an outcome", type);
        break;
    }
}

static void s_execute(const oq_registry_t *registry, void *pipe, const s_request_t *request,
                      const void *payload, size_t payload_len, oq_job_done_t *done)
{
    memset(done, 0, sizeof *done);
    done->id = request->id;
    done->attempt = request->attempt;

    msgpack_unpacked unpacked;
    msgpack_unpacked_init(&unpacked);
    size_t offset = 0;
    oq_handler_fn fn;
    void *state;
    if (msgpack_unpack_next(&unpacked, payload, payload_len, &offset) != MSGPACK_UNPACK_SUCCESS ||
        unpacked.data.type != MSGPACK_OBJECT_MAP) {
        oq_report_fail(&done->report, "the job's payload is not a msgpack map");
    } else if (oq_registry_find(registry, request->type, &fn, &state) < 0) {
        /* Sent a type it never announced (an older broker, a bug): hand it
           back without using a try, for a worker that handles it. */
        oq_report_return(&done->report, 0, "no handler for job type %s", request->type);
    } else {
        oq_job_t job = {
            .id = request->id,
            .type = request->type,
            .queue = request->queue,
            .attempt = request->attempt,
            .max_tries = request->max_tries,
            .timeout_ms = request->timeout_ms,
            .payload = &unpacked.data,
            .runtime_ = pipe,
        };
        int64_t started_us = oq_clock_mono_us();
        fn(&job, state, &done->report);
        done->elapsed_ms = (oq_clock_mono_us() - started_us) / 1000;
        s_check_report(&done->report, request->type);
    }
    msgpack_unpacked_destroy(&unpacked);
}

/* The jobs of one batch, as the thread received them. */
typedef struct {
    s_request_t request;
    zmq_msg_t payload;
    msgpack_unpacked unpacked;
    oq_job_t job;
} s_batch_job_t;

/* Run a batch of count jobs of one type: the ones whose payload decodes go
   to the type's batch function in one call (the handler if it is only
   one, or if the type has no batch function), in order; each gets its
   own report in done. */
static void s_execute_batch(const oq_registry_t *registry, void *pipe, s_batch_job_t *jobs,
                            size_t count, oq_job_done_t *done)
{
    const char *type = jobs[0].request.type;
    const oq_job_t *calls[OQ_WORKER_MAX_BATCH];
    size_t index[OQ_WORKER_MAX_BATCH];
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        memset(&done[i], 0, sizeof done[i]);
        done[i].id = jobs[i].request.id;
        done[i].attempt = jobs[i].request.attempt;
        msgpack_unpacked_init(&jobs[i].unpacked);
        size_t offset = 0;
        if (msgpack_unpack_next(&jobs[i].unpacked, zmq_msg_data(&jobs[i].payload),
                                zmq_msg_size(&jobs[i].payload),
                                &offset) != MSGPACK_UNPACK_SUCCESS ||
            jobs[i].unpacked.data.type != MSGPACK_OBJECT_MAP) {
            oq_report_fail(&done[i].report, "the job's payload is not a msgpack map");
            continue;
        }
        const s_request_t *r = &jobs[i].request;
        jobs[i].job = (oq_job_t){
            .id = r->id,
            .type = r->type,
            .queue = r->queue,
            .attempt = r->attempt,
            .max_tries = r->max_tries,
            .timeout_ms = r->timeout_ms,
            .payload = &jobs[i].unpacked.data,
            .runtime_ = pipe,
        };
        calls[n] = &jobs[i].job;
        index[n++] = i;
    }
    oq_batch_fn batch;
    oq_handler_fn fn;
    void *state;
    size_t most;
    if (n >= 2 && oq_registry_find_batch(registry, type, &batch, &state, &most) == 0) {
        oq_report_t *reports = calloc(n, sizeof *reports);
        assert(reports);
        int64_t started_us = oq_clock_mono_us();
        batch(calls, n, state, reports);
        int64_t elapsed_ms = (oq_clock_mono_us() - started_us) / 1000;
        for (size_t k = 0; k < n; k++) {
            oq_job_done_t *d = &done[index[k]];
            d->report = reports[k];
            d->elapsed_ms = elapsed_ms;
            if (d->report.outcome == 0)
                oq_report_retry(&d->report, "the batch left no report for this job");
            s_check_report(&d->report, type);
        }
        free(reports);
    } else if (n > 0 && oq_registry_find(registry, type, &fn, &state) == 0) {
        for (size_t k = 0; k < n; k++) {
            oq_job_done_t *d = &done[index[k]];
            int64_t started_us = oq_clock_mono_us();
            fn(calls[k], state, &d->report);
            d->elapsed_ms = (oq_clock_mono_us() - started_us) / 1000;
            s_check_report(&d->report, type);
        }
    } else {
        for (size_t k = 0; k < n; k++)
            oq_report_return(&done[index[k]].report, 0, "no handler for job type %s", type);
    }
    for (size_t i = 0; i < count; i++)
        msgpack_unpacked_destroy(&jobs[i].unpacked);
}

static int s_recv(void *socket, zmq_msg_t *msg)
{
    while (zmq_msg_recv(msg, socket, 0) < 0)
        if (errno != EINTR)
            return -1;
    return 0;
}

/* The first job of a batch is in (request, payload): read the others,
   run them all, answer each. -1 if the pipe closed. */
static int s_run_batch(oq_job_thread_t *self, void *pipe, const s_request_t *request,
                       zmq_msg_t *payload)
{
    size_t count = request->batch;
    assert(count <= OQ_WORKER_MAX_BATCH);
    s_batch_job_t *jobs = calloc(count, sizeof *jobs);
    oq_job_done_t *done = calloc(count, sizeof *done);
    assert(jobs && done);
    jobs[0].request = *request;
    zmq_msg_init(&jobs[0].payload);
    zmq_msg_move(&jobs[0].payload, payload);
    zmq_msg_close(payload);
    size_t got = 1;
    int rc = 0;
    for (; got < count; got++) {
        zmq_msg_t header;
        zmq_msg_init(&header);
        zmq_msg_init(&jobs[got].payload);
        if (s_recv(pipe, &header) < 0 || s_recv(pipe, &jobs[got].payload) < 0) {
            zmq_msg_close(&header);
            zmq_msg_close(&jobs[got].payload);
            rc = -1;
            break;
        }
        /* All from oq_job_thread_start_batch in this process. */
        assert(zmq_msg_size(&header) == sizeof(s_request_t));
        memcpy(&jobs[got].request, zmq_msg_data(&header), sizeof jobs[got].request);
        zmq_msg_close(&header);
    }
    if (rc == 0) {
        s_execute_batch(self->registry, pipe, jobs, count, done);
        for (size_t i = 0; i < count; i++) {
            oq_job_event_t event;
            memset(&event, 0, sizeof event);
            event.kind = OQ_JOB_EVENT_DONE;
            event.done = done[i];
            while (zmq_send(pipe, &event, sizeof event, 0) < 0 && errno == EINTR)
                ;
        }
    }
    for (size_t i = 0; i < got; i++)
        zmq_msg_close(&jobs[i].payload);
    free(jobs);
    free(done);
    return rc;
}

static void *s_run(void *arg)
{
    oq_job_thread_t *self = arg;
    void *pipe = zmq_socket(self->ctx, ZMQ_PAIR);
    assert(pipe);
    int rc = zmq_connect(pipe, S_ENDPOINT);
    assert(rc == 0);
    (void)rc;
    for (;;) {
        zmq_msg_t header, payload;
        zmq_msg_init(&header);
        if (s_recv(pipe, &header) < 0 || zmq_msg_size(&header) == 0) {
            zmq_msg_close(&header);
            break;
        }
        /* Both frames come from oq_job_thread_start in this process. */
        assert(zmq_msg_size(&header) == sizeof(s_request_t) && zmq_msg_more(&header));
        s_request_t request;
        memcpy(&request, zmq_msg_data(&header), sizeof request);
        zmq_msg_close(&header);
        zmq_msg_init(&payload);
        if (s_recv(pipe, &payload) < 0) {
            zmq_msg_close(&payload);
            break;
        }
        if (request.kind == S_RUN_RELEASE) {
            zmq_msg_close(&payload);
            oq_registry_release_all(self->registry);
            continue;
        }
        if (request.kind == S_RUN_JOB && request.batch > 1) {
            if (s_run_batch(self, pipe, &request, &payload) < 0)
                break;
            continue;
        }
        oq_job_event_t event;
        memset(&event, 0, sizeof event);
        if (request.kind == S_RUN_PROBE) {
            event.kind = OQ_JOB_EVENT_PROBED;
            int64_t started_us = oq_clock_mono_us();
            event.probed.result = oq_registry_probe(
                self->registry, request.type, event.probed.reason, sizeof event.probed.reason);
            event.probed.elapsed_ms = (oq_clock_mono_us() - started_us) / 1000;
        } else {
            event.kind = OQ_JOB_EVENT_DONE;
            s_execute(self->registry, pipe, &request, zmq_msg_data(&payload),
                      zmq_msg_size(&payload), &event.done);
        }
        zmq_msg_close(&payload);
        while (zmq_send(pipe, &event, sizeof event, 0) < 0 && errno == EINTR)
            ;
    }
    /* The worker stops: close what the handlers hold, so the database
       sees a clean goodbye rather than a connection that drops. */
    oq_registry_release_all(self->registry);
    zmq_close(pipe);
    return NULL;
}

oq_job_thread_t *oq_job_thread_new(oq_registry_t **registry_p)
{
    assert(registry_p && *registry_p);
    oq_job_thread_t *self = calloc(1, sizeof *self);
    assert(self);
    self->ctx = zmq_ctx_new();
    if (!self->ctx) {
        free(self);
        return NULL;
    }
    /* inproc needs no I/O thread. */
    zmq_ctx_set(self->ctx, ZMQ_IO_THREADS, 0);
    self->pipe = zmq_socket(self->ctx, ZMQ_PAIR);
    if (!self->pipe || zmq_bind(self->pipe, S_ENDPOINT) < 0) {
        oq_error("job thread: cannot open its pipe: %s", zmq_strerror(errno));
        if (self->pipe)
            zmq_close(self->pipe);
        zmq_ctx_term(self->ctx);
        free(self);
        return NULL;
    }
    self->registry = *registry_p;
    *registry_p = NULL;
    if (pthread_create(&self->thread, NULL, s_run, self) != 0) {
        oq_error("job thread: cannot start the thread");
        *registry_p = self->registry;
        zmq_close(self->pipe);
        zmq_ctx_term(self->ctx);
        free(self);
        return NULL;
    }
    pthread_setname_np(self->thread, "onceq-job");
    return self;
}

void oq_job_thread_destroy(oq_job_thread_t **self_p)
{
    assert(self_p);
    oq_job_thread_t *self = *self_p;
    if (!self)
        return;
    while (zmq_send(self->pipe, "", 0, 0) < 0 && errno == EINTR)
        ;
    pthread_join(self->thread, NULL);
    zmq_close(self->pipe);
    zmq_ctx_term(self->ctx);
    oq_registry_destroy(&self->registry);
    free(self);
    *self_p = NULL;
}

void *oq_job_thread_socket(oq_job_thread_t *self)
{
    assert(self);
    return self->pipe;
}

static int s_send_job(oq_job_thread_t *self, const oq_job_msg_t *job, uint32_t batch)
{
    s_request_t request;
    memset(&request, 0, sizeof request);
    request.kind = S_RUN_JOB;
    request.id = job->id;
    request.attempt = job->attempt;
    request.max_tries = job->has_max_tries ? job->max_tries : OQ_DEFAULT_MAX_TRIES;
    request.timeout_ms = job->has_timeout ? job->timeout_ms : OQ_DEFAULT_TIMEOUT_MS;
    request.batch = batch;
    oq_str_copy(job->type, request.type, sizeof request.type);
    oq_str_copy(job->queue.ptr ? job->queue : oq_str(OQ_DEFAULT_QUEUE), request.queue,
                sizeof request.queue);
    /* The codec always gives at least an empty map; a job built by hand
       without a payload means the same. */
    static const uint8_t empty_map = 0x80;
    const void *payload = job->payload_len ? (const void *)job->payload : &empty_map;
    size_t payload_len = job->payload_len ? job->payload_len : sizeof empty_map;
    if (zmq_send(self->pipe, &request, sizeof request, ZMQ_SNDMORE) < 0 ||
        zmq_send(self->pipe, payload, payload_len, 0) < 0) {
        oq_error("job thread: cannot hand over job %llu: %s", (unsigned long long)job->id,
                 zmq_strerror(errno));
        return -1;
    }
    return 0;
}

int oq_job_thread_start(oq_job_thread_t *self, const oq_job_msg_t *job)
{
    assert(self);
    assert(job);
    return s_send_job(self, job, 1);
}

int oq_job_thread_start_batch(oq_job_thread_t *self, const oq_job_msg_t *const *jobs, size_t count)
{
    assert(self && jobs);
    assert(count >= 1 && count <= OQ_WORKER_MAX_BATCH);
    for (size_t i = 0; i < count; i++)
        if (s_send_job(self, jobs[i], (uint32_t)count) < 0)
            return -1;
    return 0;
}

/* A request without a payload: a probe or a release. */
static int s_send_request(oq_job_thread_t *self, s_kind_t kind, const char *type)
{
    s_request_t request;
    memset(&request, 0, sizeof request);
    request.kind = kind;
    if (type)
        snprintf(request.type, sizeof request.type, "%s", type);
    if (zmq_send(self->pipe, &request, sizeof request, ZMQ_SNDMORE) < 0 ||
        zmq_send(self->pipe, "", 0, 0) < 0) {
        oq_error("job thread: cannot hand over a %s: %s", kind == S_RUN_PROBE ? "probe" : "release",
                 zmq_strerror(errno));
        return -1;
    }
    return 0;
}

int oq_job_thread_probe(oq_job_thread_t *self, const char *type)
{
    assert(self && type);
    return s_send_request(self, S_RUN_PROBE, type);
}

int oq_job_thread_release(oq_job_thread_t *self)
{
    assert(self);
    return s_send_request(self, S_RUN_RELEASE, NULL);
}

int oq_job_thread_recv(oq_job_thread_t *self, oq_job_event_t *event)
{
    assert(self && event);
    int n = zmq_recv(self->pipe, event, sizeof *event, ZMQ_DONTWAIT);
    if (n < 0)
        return -1;
    /* A touch is the job id alone (oq_job_touch); anything else a whole event. */
    _Static_assert(sizeof(oq_job_event_t) != sizeof(uint64_t), "the two frames differ in size");
    if ((size_t)n == sizeof event->touch_id) {
        uint64_t id;
        memcpy(&id, event, sizeof id);
        event->kind = OQ_JOB_EVENT_TOUCH;
        event->touch_id = id;
        return 0;
    }
    assert((size_t)n == sizeof *event);
    return 0;
}
