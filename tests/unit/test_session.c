/*  test_session.c: the worker's side of the protocol as a state machine
    (session.h), driven with a clock moved by hand: registration and
    heartbeats, acks and their resends, touches, the watchdog, stalls,
    SIGTERM, a paused worker's probes, prefetch (fixed and auto), held jobs
    handed back, and batches of held jobs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "onceq/clock.h"
#include "onceq/limits.h"
#include "onceq/log.h"
#include "session.h"
#include "worker_limits.h"

/* ---- session ------------------------------------------------------------- */

#define S_HB 100 /* ms: heartbeat the tests' broker announces */

static oq_action_t s_next(oq_session_t *session, oq_action_kind_t kind)
{
    oq_action_t action;
    assert_int_equal(oq_session_next(session, &action), 0);
    assert_int_equal(action.kind, kind);
    return action;
}

static oq_action_t s_next_send(oq_session_t *session, oq_cmd_t cmd)
{
    oq_action_t action = s_next(session, OQ_ACTION_SEND);
    assert_string_equal(oq_proto_cmd_name(action.cmd), oq_proto_cmd_name(cmd));
    return action;
}

static void s_no_action(oq_session_t *session)
{
    oq_action_t action;
    assert_int_equal(oq_session_next(session, &action), -1);
}

static void s_receive(oq_session_t *session, oq_cmd_t cmd, int64_t now)
{
    oq_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.cmd = cmd;
    msg.heartbeat_ms = S_HB;
    msg.liveness = 3;
    msg.err_text = oq_str("unknown worker");
    oq_session_on_message(session, &msg, now);
}

/* The worker's jobs, as the session gets them: it never reads them, only
   gives them back in START_JOB and DROP_HELD, so one slot per id will do. */
#define S_JOB_SLOTS 256
static oq_runner_job_t s_jobs[S_JOB_SLOTS];
static bool s_taken; /* the session took the last delivery */

static oq_runner_job_t *s_job(uint64_t id)
{
    return &s_jobs[id % S_JOB_SLOTS];
}

static void s_deliver_job(oq_session_t *session, const oq_job_msg_t *envelope, int64_t now)
{
    s_taken = oq_session_on_job(session, envelope, s_job(envelope->id), now);
}

/* The last delivery was taken and held, not started. */
static void s_was_held(oq_session_t *session)
{
    assert_true(s_taken);
    assert_true(oq_session_held(session) > 0);
}

static void s_deliver(oq_session_t *session, uint64_t id, int64_t timeout_ms, int64_t now)
{
    oq_job_msg_t job;
    memset(&job, 0, sizeof job);
    job.id = id;
    job.attempt = 1;
    job.type = oq_str("sleep");
    job.has_timeout = true;
    job.timeout_ms = timeout_ms;
    s_deliver_job(session, &job, now);
}

static void s_finish(oq_session_t *session, uint64_t id, oq_outcome_t outcome, int64_t now)
{
    oq_job_done_t done;
    memset(&done, 0, sizeof done);
    done.id = id;
    done.attempt = 1;
    done.elapsed_ms = 5;
    done.report.outcome = outcome;
    if (outcome != OQ_OUTCOME_OK)
        snprintf(done.report.error, sizeof done.report.error, "it broke");
    oq_session_on_done(session, &done, now);
}

/* A session that connected at 0 and was welcomed at 1. */
static oq_session_t *s_session_up(void)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_UP);
    return session;
}

/* A delivery with a lease token, as a broker that fences acks sends it. */
static void s_deliver_leased(oq_session_t *session, uint64_t id, uint64_t lease, int64_t timeout_ms,
                             int64_t now)
{
    oq_job_msg_t job;
    memset(&job, 0, sizeof job);
    job.id = id;
    job.attempt = 1;
    job.type = oq_str("sleep");
    job.has_timeout = true;
    job.timeout_ms = timeout_ms;
    job.lease = lease;
    job.has_lease = true;
    s_deliver_job(session, &job, now);
}

static void test_session_ack_and_resend_echo_the_lease(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver_leased(session, 21, 0xfeedface12345678ULL, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish(session, 21, OQ_OUTCOME_OK, 20);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_true(ack.ack.has_lease);
    assert_true(ack.ack.lease == 0xfeedface12345678ULL);
    /* The link drops before anything is heard: the resent ack, on a fresh
       socket (a new identity), still carries the token. */
    oq_session_on_send_error(session, 30);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_on_tick(session, 30 + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    s_next_send(session, OQ_CMD_READY);
    ack = s_next_send(session, OQ_CMD_ACK);
    assert_true(ack.ack.has_lease);
    assert_true(ack.ack.lease == 0xfeedface12345678ULL);
    oq_session_destroy(&session);
}

static void test_session_touch_restarts_the_watchdog(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver_leased(session, 22, 77, 1000, 100);
    s_next(session, OQ_ACTION_START_JOB);
    assert_int_equal(oq_session_deadline(session), S_HB);
    /* Touches come faster than the limit: only the first one counts. */
    assert_true(oq_session_on_touch(session, 22, 100 + OQ_WORKER_TOUCH_MIN_MS));
    oq_action_t touch = s_next_send(session, OQ_CMD_TOUCH);
    assert_int_equal(touch.ack.id, 22);
    assert_int_equal(touch.ack.attempt, 1);
    assert_true(touch.ack.lease == 77);
    assert_false(oq_session_on_touch(session, 22, 100 + OQ_WORKER_TOUCH_MIN_MS + 1));
    assert_false(oq_session_on_touch(session, 99, 100 + 3 * OQ_WORKER_TOUCH_MIN_MS)); /* not its */
    s_no_action(session);
    /* Touching every 900 ms keeps a 1 s job alive for 5 s. */
    int64_t t = 100 + OQ_WORKER_TOUCH_MIN_MS + 900;
    for (; t < 5000; t += 900) {
        s_receive(session, OQ_CMD_HEARTBEAT, t);
        oq_session_on_tick(session, t);
        assert_true(oq_session_on_touch(session, 22, t));
        oq_action_t action;
        while (oq_session_next(session, &action) == 0)
            assert_int_equal(action.kind, OQ_ACTION_SEND); /* touches and heartbeats only */
        assert_int_equal(oq_session_deadline(session) <= t + 1000, true);
    }
    assert_true(oq_session_busy(session));
    /* Without touches the watchdog fires a timeout after the last one. */
    int64_t last = t - 900;
    s_receive(session, OQ_CMD_HEARTBEAT, last + 999);
    oq_session_on_tick(session, last + 999);
    oq_action_t action;
    while (oq_session_next(session, &action) == 0)
        assert_false(action.kind == OQ_ACTION_SEND && action.cmd == OQ_CMD_ACK);
    s_receive(session, OQ_CMD_HEARTBEAT, last + 1000);
    oq_session_on_tick(session, last + 1000);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_TIMEOUT);
    oq_session_destroy(&session);
}

static void test_session_touch_needs_a_link(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver_leased(session, 23, 5, 1000, 100);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_send_error(session, 200);
    s_next(session, OQ_ACTION_CLOSE);
    /* The broker would not hear it: the watchdog must not move either. */
    assert_false(oq_session_on_touch(session, 23, 600));
    s_no_action(session);
    assert_int_equal(oq_session_deadline(session), 200 + OQ_RECONNECT_MIN_MS);
    oq_session_on_tick(session, 1100);
    s_next(session, OQ_ACTION_CONNECT);
    oq_session_destroy(&session);
}

static void test_session_release_and_return_carry_their_delay(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver_leased(session, 24, 9, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    oq_job_done_t done;
    memset(&done, 0, sizeof done);
    done.id = 24;
    done.attempt = 1;
    oq_report_release(&done.report, 1500, "busy %d", 1);
    oq_session_on_done(session, &done, 20);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_RETRY);
    assert_true(ack.ack.has_delay);
    assert_int_equal(ack.ack.delay_ms, 1500);
    assert_int_equal(ack.ack.credit, 1);

    s_receive(session, OQ_CMD_HEARTBEAT, 30);
    s_deliver_leased(session, 25, 10, 60000, 40);
    s_next(session, OQ_ACTION_START_JOB);
    memset(&done, 0, sizeof done);
    done.id = 25;
    done.attempt = 1;
    oq_report_return(&done.report, 0, "no handler for job type %s", "x");
    oq_session_on_done(session, &done, 50);
    ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_RETURN);
    assert_false(ack.ack.has_delay);
    assert_true(ack.ack.lease == 10);
    oq_session_destroy(&session);
}

/* The next action that is not a heartbeat (a test spanning seconds keeps
   the link up by hearing from the broker; the session heartbeats meanwhile). */
static oq_action_t s_next_real(oq_session_t *session)
{
    oq_action_t action;
    do
        assert_int_equal(oq_session_next(session, &action), 0);
    while (action.kind == OQ_ACTION_SEND && action.cmd == OQ_CMD_HEARTBEAT);
    return action;
}

static void s_no_real_action(oq_session_t *session)
{
    oq_action_t action;
    while (oq_session_next(session, &action) == 0)
        assert_true(action.kind == OQ_ACTION_SEND && action.cmd == OQ_CMD_HEARTBEAT);
}

/* Time passes with the broker heard from: a tick at now. */
static void s_tick_alive(oq_session_t *session, int64_t now)
{
    s_receive(session, OQ_CMD_HEARTBEAT, now);
    oq_session_on_tick(session, now);
}

/* Tick at each deadline, the broker heard from, until a probe is asked
   for; returns when (heartbeats come due in between). */
static int64_t s_until_probe(oq_session_t *session, const char *type)
{
    for (int i = 0; i < 1000; i++) {
        int64_t now = oq_session_deadline(session);
        s_tick_alive(session, now);
        oq_action_t action;
        while (oq_session_next(session, &action) == 0) {
            if (action.kind == OQ_ACTION_PROBE) {
                assert_string_equal(action.type, type);
                s_no_real_action(session);
                return now;
            }
            assert_true(action.kind == OQ_ACTION_SEND && action.cmd == OQ_CMD_HEARTBEAT);
        }
    }
    fail_msg("no probe came");
    return -1;
}

static oq_probe_done_t s_probed(int result, const char *reason)
{
    oq_probe_done_t probed;
    memset(&probed, 0, sizeof probed);
    probed.result = result;
    snprintf(probed.reason, sizeof probed.reason, "%s", reason);
    return probed;
}

/* The database is down: the job goes back without a try and without
   credit, the broker hears the worker is paused and why, probes come after
   a doubling, jittered pause, a job sent meanwhile is handed back too, and
   once a probe answers the worker says ready and gives its credit again. */
static void test_session_unavailable_pauses_and_probes(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver_leased(session, 41, 99, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    oq_job_done_t done;
    memset(&done, 0, sizeof done);
    done.id = 41;
    done.attempt = 1;
    oq_report_unavailable(&done.report, "sleep: database unavailable (connection): refused");
    oq_session_on_done(session, &done, 20);
    oq_action_t status = s_next_send(session, OQ_CMD_STATUS);
    assert_int_equal(status.state, OQ_STATUS_UNAVAILABLE);
    assert_int_equal(status.state_ms, 0);
    assert_string_equal(status.error, "sleep: database unavailable (connection): refused");
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_UNAVAILABLE);
    assert_int_equal(ack.ack.credit, 0);
    assert_true(ack.ack.lease == 99);
    s_no_action(session);
    assert_true(oq_session_unavailable(session));

    /* The first probe within [min/2, min] of the pause. */
    int64_t at = oq_session_deadline(session);
    assert_true(at >= 20 + OQ_WORKER_PROBE_MIN_MS / 2 && at <= 20 + OQ_WORKER_PROBE_MIN_MS);
    oq_session_on_tick(session, at - 1);
    s_no_real_action(session);
    s_tick_alive(session, at);
    oq_action_t probe = s_next_real(session);
    assert_int_equal(probe.kind, OQ_ACTION_PROBE);
    assert_string_equal(probe.type, "sleep");
    s_no_real_action(session);

    /* A job sent while paused (a broker's credit race) goes back, no try. */
    s_deliver_leased(session, 42, 7, 60000, at + 1);
    ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_UNAVAILABLE);
    assert_int_equal(ack.ack.credit, 0);
    assert_non_null(strstr(ack.ack.error.ptr, "worker is paused")); /* NUL-terminated copy */
    s_no_action(session);

    /* The probe fails: the broker hears the new reason, the pause doubles. */
    oq_probe_done_t probed = s_probed(-1, "cannot connect to the database: shutting down");
    int64_t now = at + 2;
    oq_session_on_probed(session, &probed, now);
    status = s_next_send(session, OQ_CMD_STATUS);
    assert_int_equal(status.state, OQ_STATUS_UNAVAILABLE);
    assert_int_equal(status.state_ms, now - 20);
    assert_string_equal(status.error, "cannot connect to the database: shutting down");
    s_no_action(session);

    /* The next probe comes within [2 min / 2, 2 min]; after many failures
       the pause stays within [max / 2, max]. */
    at = s_until_probe(session, "sleep");
    assert_true(at >= now + OQ_WORKER_PROBE_MIN_MS && at <= now + 2 * OQ_WORKER_PROBE_MIN_MS);
    for (int i = 0; i < 20; i++) {
        now = at;
        oq_session_on_probed(session, &probed, now);
        s_next_send(session, OQ_CMD_STATUS);
        s_no_real_action(session);
        at = s_until_probe(session, "sleep");
        assert_true(at - now <= OQ_WORKER_PROBE_MAX_MS);
    }
    assert_true(at - now >= OQ_WORKER_PROBE_MAX_MS / 2);

    /* It answers: ready, and the credit comes back. */
    now = at;
    probed = s_probed(0, "");
    oq_session_on_probed(session, &probed, now + 3);
    status = s_next_send(session, OQ_CMD_STATUS);
    assert_int_equal(status.state, OQ_STATUS_READY);
    assert_string_equal(status.error, "");
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    assert_false(oq_session_unavailable(session));
    s_deliver(session, 43, 60000, now + 4);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_destroy(&session);
}

/* A broker that does not know the worker (a fresh socket) hears at once
   that it is paused, and gets no credit from it. */
static void test_session_paused_worker_registers_paused(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 51, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish(session, 51, OQ_OUTCOME_UNAVAILABLE, 20);
    s_next_send(session, OQ_CMD_STATUS);
    s_next_send(session, OQ_CMD_ACK);
    s_no_action(session);
    /* The broker asks for a new ready (it restarted). */
    s_receive(session, OQ_CMD_RECONNECT, 30);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    assert_int_equal(s_next_send(session, OQ_CMD_STATUS).state, OQ_STATUS_UNAVAILABLE);
    s_no_action(session);
    oq_session_destroy(&session);
}

/* SIGTERM during a probe: the probe finishes (it is bounded), then exit. */
static void test_session_sigterm_while_probing(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 61, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish(session, 61, OQ_OUTCOME_UNAVAILABLE, 20);
    s_next_send(session, OQ_CMD_STATUS);
    s_next_send(session, OQ_CMD_ACK);
    int64_t at = s_until_probe(session, "sleep");
    oq_session_on_signal(session, at + 1);
    s_next_send(session, OQ_CMD_DRAIN);
    s_no_action(session);
    oq_probe_done_t probed = s_probed(-1, "still down");
    oq_session_on_probed(session, &probed, at + 2);
    s_next_send(session, OQ_CMD_STATUS);
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    oq_session_destroy(&session);
}

/* After idle_release_ms without a job, the handlers release their
   connections, once per idle period; a worker that never ran a job has
   nothing to release. */
static void test_session_idle_release(void **unused)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3, .idle_release_ms = 1000};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    s_next_send(session, OQ_CMD_READY);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_tick_alive(session, 5000);
    s_no_real_action(session);

    s_deliver(session, 71, 60000, 5000);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish(session, 71, OQ_OUTCOME_OK, 5100);
    s_next_send(session, OQ_CMD_ACK);
    assert_true(oq_session_deadline(session) <= 5100 + 1000);
    s_tick_alive(session, 6099);
    s_no_real_action(session);
    s_tick_alive(session, 6100);
    assert_int_equal(s_next_real(session).kind, OQ_ACTION_RELEASE);
    s_no_real_action(session);
    s_tick_alive(session, 9000);
    s_no_real_action(session);
    oq_session_destroy(&session);
}

static void test_session_registers_and_heartbeats(void **unused)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3};
    oq_session_t *session = oq_session_new(&config, 0);
    assert_int_equal(oq_session_link(session), OQ_LINK_DOWN);
    assert_int_equal(oq_session_deadline(session), 0); /* connect at once */
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_REGISTERING);

    /* No heartbeat before welcome: the broker does not know us yet. */
    oq_session_on_tick(session, 1500);
    s_no_action(session);

    /* Welcome: its heartbeat replaces ours. */
    s_receive(session, OQ_CMD_WELCOME, 1600);
    assert_int_equal(oq_session_link(session), OQ_LINK_UP);
    assert_int_equal(oq_session_heartbeat_ms(session), S_HB);
    assert_int_equal(oq_session_deadline(session), S_HB); /* the ready at 0 was the last send */
    oq_session_on_tick(session, 1600);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    oq_session_on_tick(session, 1600 + S_HB - 1);
    s_no_action(session);
    s_receive(session, OQ_CMD_HEARTBEAT, 1650);
    oq_session_on_tick(session, 1600 + S_HB);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    oq_session_destroy(&session);
    assert_null(session);
}

static void test_session_silent_broker_reconnects_with_backoff(void **unused)
{
    oq_session_t *session = s_session_up();
    int64_t now = 1;
    int64_t expected_ms = OQ_RECONNECT_MIN_MS;
    for (int round = 0; round < 8; round++) {
        /* Keep heartbeating: sending is not hearing. */
        for (int64_t t = now + S_HB; t < now + 3 * S_HB; t += S_HB) {
            oq_session_on_tick(session, t);
            if (oq_session_link(session) == OQ_LINK_UP)
                s_next_send(session, OQ_CMD_HEARTBEAT);
            s_no_action(session);
        }
        now += 3 * S_HB;
        oq_session_on_tick(session, now);
        s_next(session, OQ_ACTION_CLOSE);
        s_no_action(session);
        assert_int_equal(oq_session_link(session), OQ_LINK_DOWN);
        assert_int_equal(oq_session_deadline(session), now + expected_ms);
        oq_session_on_tick(session, now + expected_ms - 1);
        s_no_action(session);
        now += expected_ms;
        oq_session_on_tick(session, now);
        s_next(session, OQ_ACTION_CONNECT); /* a fresh socket: a new identity */
        assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
        s_no_action(session);
        expected_ms *= 2;
        if (expected_ms > OQ_RECONNECT_MAX_MS)
            expected_ms = OQ_RECONNECT_MAX_MS;
    }
    assert_int_equal(expected_ms, OQ_RECONNECT_MAX_MS);

    /* A welcome resets the backoff. */
    s_receive(session, OQ_CMD_WELCOME, now);
    now += 3 * S_HB;
    oq_session_on_tick(session, now);
    s_next(session, OQ_ACTION_CLOSE);
    assert_int_equal(oq_session_deadline(session), now + OQ_RECONNECT_MIN_MS);
    oq_session_destroy(&session);
}

static void test_session_job_is_acked_with_credit(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 7, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_no_action(session);
    assert_true(oq_session_busy(session));

    s_finish(session, 7, OQ_OUTCOME_RETRY, 20);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    s_no_action(session);
    assert_int_equal(ack.ack.id, 7);
    assert_int_equal(ack.ack.attempt, 1);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_RETRY);
    assert_int_equal(ack.ack.credit, 1);
    assert_true(oq_str_eq(ack.ack.error, "it broke"));
    assert_false(oq_session_busy(session));
    oq_session_destroy(&session);
}

static void test_session_job_done_while_down_is_acked_after_reconnect(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 8, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_tick(session, 10 + 3 * S_HB - 1);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    oq_session_on_tick(session, 10 + 3 * S_HB); /* silent since 10 */
    s_next(session, OQ_ACTION_CLOSE);
    s_no_action(session);

    s_finish(session, 8, OQ_OUTCOME_OK, 400);
    s_no_action(session); /* no link: owed */

    oq_session_on_tick(session, 10 + 3 * S_HB + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    /* The ack gives the credit back; the ready must not add a second. */
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 8);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_OK);
    assert_int_equal(ack.ack.credit, 1);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_unconfirmed_ack_is_sent_again(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 9, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish(session, 9, OQ_OUTCOME_OK, 20);
    s_next_send(session, OQ_CMD_ACK);

    /* Nothing heard since the ack: it may have died with the socket. */
    oq_session_on_tick(session, 10 + 3 * S_HB);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_on_tick(session, 10 + 3 * S_HB + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 9);
    s_no_action(session);

    /* Heard after it: settled, not sent again on the next link. */
    int64_t now = 10 + 3 * S_HB + OQ_RECONNECT_MIN_MS;
    s_receive(session, OQ_CMD_WELCOME, now + 1);
    now += 1 + 3 * S_HB;
    oq_session_on_tick(session, now);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_on_tick(session, now + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_reconnect_offers_free_credit_once(void **unused)
{
    oq_session_t *session = s_session_up();
    /* Idle: one credit. */
    s_receive(session, OQ_CMD_RECONNECT, 10);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_REGISTERING);
    /* A second reconnect before welcome answers something sent before that
       ready: another ready would double the credit. */
    s_receive(session, OQ_CMD_RECONNECT, 11);
    s_no_action(session);
    s_receive(session, OQ_CMD_WELCOME, 12);
    assert_int_equal(oq_session_link(session), OQ_LINK_UP);

    /* Busy: no credit now, the ack brings it. */
    s_deliver(session, 10, 60000, 20);
    s_next(session, OQ_ACTION_START_JOB);
    s_receive(session, OQ_CMD_RECONNECT, 30);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    s_receive(session, OQ_CMD_WELCOME, 31);
    s_finish(session, 10, OQ_OUTCOME_OK, 40);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_watchdog_reports_timeout_and_exits(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 11, 1000, 100);
    s_next(session, OQ_ACTION_START_JOB);
    assert_int_equal(oq_session_deadline(session), S_HB); /* a heartbeat first */
    for (int64_t t = 100; t < 1100; t += S_HB) {
        s_receive(session, OQ_CMD_HEARTBEAT, t);
        oq_session_on_tick(session, t + S_HB - 1);
        oq_action_t action;
        while (oq_session_next(session, &action) == 0)
            assert_int_equal(action.kind, OQ_ACTION_SEND); /* heartbeats only */
    }
    oq_session_on_tick(session, 1100);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 11);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_TIMEOUT);
    assert_int_equal(ack.ack.credit, 0);
    assert_true(oq_str_eq(ack.ack.error, "handler ran past its timeout of 1 s"));
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, OQ_EXIT_TIMEOUT);
    s_no_action(session);
    assert_true(oq_session_exiting(session));
    /* Nothing happens after the exit. */
    s_finish(session, 11, OQ_OUTCOME_OK, 1200);
    oq_session_on_tick(session, 99999);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_stall_is_not_silence_nor_handler_time(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 12, 2000, 10);
    s_next(session, OQ_ACTION_START_JOB);

    /* SIGSTOP at 50, SIGCONT at 10050: the worker wakes 10 s late. */
    oq_session_on_stall(session, 10000, 10050);
    oq_session_on_tick(session, 10050);
    s_next_send(session, OQ_CMD_HEARTBEAT); /* overdue, and it is all */
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_UP);
    assert_true(oq_session_busy(session));

    /* The handler then finishes and its ack goes out, lease or no lease. */
    s_finish(session, 12, OQ_OUTCOME_OK, 10060);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.outcome, OQ_OUTCOME_OK);
    s_no_action(session);

    /* The time limit still holds for running time. */
    s_deliver(session, 13, 2000, 10100);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_stall(session, 500, 10700);
    s_receive(session, OQ_CMD_HEARTBEAT, 12599);
    oq_session_on_tick(session, 12599);
    oq_action_t action;
    while (oq_session_next(session, &action) == 0)
        assert_int_equal(action.kind, OQ_ACTION_SEND);
    oq_session_on_tick(session, 12600);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.outcome, OQ_OUTCOME_TIMEOUT);
    oq_session_destroy(&session);
}

static void test_session_stall_extends_only_what_it_stalled(void **unused)
{
    oq_session_t *session = s_session_up();
    /* A job that arrived after the stall, in the same turn, was not
       stalled: its time limit starts when it arrived. */
    s_deliver(session, 20, 1000, 5000);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_stall(session, 4000, 5000);
    s_receive(session, OQ_CMD_HEARTBEAT, 5900);
    oq_session_on_tick(session, 5999);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    oq_session_on_tick(session, 6000);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.outcome, OQ_OUTCOME_TIMEOUT);
    oq_session_destroy(&session);

    /* Silence since 1, a stall of 200 ms before 250: silent since 201. */
    session = s_session_up();
    oq_session_on_stall(session, 200, 250);
    oq_session_on_tick(session, 201 + 3 * S_HB - 1);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    oq_session_on_tick(session, 201 + 3 * S_HB);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_destroy(&session);

    /* A stall longer than the time since the last tick moves nothing
       past now. */
    session = s_session_up();
    oq_session_on_stall(session, 5000, 250);
    oq_session_on_tick(session, 250 + 3 * S_HB - 1);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    oq_session_on_tick(session, 250 + 3 * S_HB);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_destroy(&session);
}

static void test_session_sigterm_when_idle(void **unused)
{
    oq_session_t *session = s_session_up();
    oq_session_on_signal(session, 10);
    s_next_send(session, OQ_CMD_DRAIN);
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_sigterm_finishes_the_job_first(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 14, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_signal(session, 20);
    s_next_send(session, OQ_CMD_DRAIN);
    s_no_action(session);
    oq_session_on_signal(session, 21); /* a second signal changes nothing */
    s_no_action(session);

    /* A delivery the broker sent before it read the drain is handed back. */
    s_deliver(session, 15, 60000, 25);
    oq_action_t refused = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(refused.ack.id, 15);
    assert_int_equal(refused.ack.outcome, OQ_OUTCOME_RETRY);
    assert_int_equal(refused.ack.credit, 0);
    s_no_action(session);

    s_finish(session, 14, OQ_OUTCOME_OK, 30);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 14);
    assert_int_equal(ack.ack.credit, 0); /* stopping: no new job */
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_sigterm_without_a_link(void **unused)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3};
    /* Idle and disconnected: nothing to tell anyone. */
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_on_signal(session, 0);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    s_no_action(session);
    oq_session_destroy(&session);

    /* Busy, and the link is lost: the ack still gets its chance. */
    session = s_session_up();
    s_deliver(session, 16, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    oq_session_on_signal(session, 20);
    s_next_send(session, OQ_CMD_DRAIN);
    oq_session_on_tick(session, 10 + 3 * S_HB);
    s_next(session, OQ_ACTION_CLOSE);
    s_finish(session, 16, OQ_OUTCOME_OK, 320);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 16);
    assert_int_equal(ack.ack.credit, 0);
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_refuses_a_second_job(void **unused)
{
    oq_session_t *session = s_session_up();
    s_deliver(session, 17, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver(session, 18, 60000, 11);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 18);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_RETRY);
    assert_int_equal(ack.ack.credit, 0);
    s_no_action(session);
    assert_true(oq_session_busy(session));
    s_finish(session, 17, OQ_OUTCOME_OK, 20);
    ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 17);
    assert_int_equal(ack.ack.credit, 1);
    oq_session_destroy(&session);
}

static void test_session_bad_job_fails_and_returns_credit(void **unused)
{
    oq_session_t *session = s_session_up();
    oq_session_on_bad_job(session, 19, 2, "field \"type\" must be a string", 10);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 19);
    assert_int_equal(ack.ack.attempt, 2);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_FAIL);
    assert_int_equal(ack.ack.credit, 1);
    assert_non_null(strstr(ack.ack.error.ptr, "\"type\""));
    s_no_action(session);
    assert_false(oq_session_busy(session));
    oq_session_destroy(&session);
}

static void test_session_any_message_is_a_sign_of_life(void **unused)
{
    oq_session_t *session = s_session_up();
    s_receive(session, OQ_CMD_ERROR, 250); /* logged, nothing sent */
    s_receive(session, OQ_CMD_PONG, 260);  /* unexpected, ignored */
    oq_session_on_garbage(session, 280);   /* did not decode */
    s_no_action(session);
    oq_session_on_tick(session, 280 + 3 * S_HB - 1);
    s_next_send(session, OQ_CMD_HEARTBEAT);
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_UP);
    oq_session_on_tick(session, 280 + 3 * S_HB);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_destroy(&session);
}

static void test_session_send_error_drops_the_link(void **unused)
{
    oq_session_t *session = s_session_up();
    oq_session_on_send_error(session, 10);
    s_next(session, OQ_ACTION_CLOSE);
    s_no_action(session);
    assert_int_equal(oq_session_link(session), OQ_LINK_DOWN);
    assert_int_equal(oq_session_deadline(session), 10 + OQ_RECONNECT_MIN_MS);
    oq_session_destroy(&session);
}

/* ---- session: prefetch ---------------------------------------------------- */

/* A session with prefetch p, connected at 0 and welcomed at 1: its ready
   offers all p. */
static oq_session_t *s_session_prefetch(uint32_t prefetch)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3, .prefetch = prefetch};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, prefetch);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_no_action(session);
    return session;
}

static void test_session_prefetch_holds_then_starts_in_order(void **unused)
{
    oq_session_t *session = s_session_prefetch(3);
    s_deliver_leased(session, 1, 11, 60000, 10);
    assert_false(s_next(session, OQ_ACTION_START_JOB).held);
    s_deliver_leased(session, 2, 12, 60000, 11);
    s_was_held(session);
    s_deliver_leased(session, 3, 13, 60000, 12);
    s_was_held(session);
    s_no_action(session);
    assert_int_equal(oq_session_held(session), 2);

    /* Beyond the credit: refused as with one job at a time. */
    s_deliver_leased(session, 4, 14, 60000, 13);
    oq_action_t refused = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(refused.ack.id, 4);
    assert_int_equal(refused.ack.credit, 0);
    s_no_action(session);

    /* Each end gives a credit back and starts the oldest held job at once,
       before any message from the broker: the acks wait to be settled
       together. */
    s_finish(session, 1, OQ_OUTCOME_OK, 20);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 1);
    assert_int_equal(ack.ack.credit, 1);
    assert_true(s_next(session, OQ_ACTION_START_JOB).held);
    s_no_action(session);
    assert_int_equal(oq_session_held(session), 1);
    s_finish(session, 2, OQ_OUTCOME_OK, 30);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 2);
    assert_true(s_next(session, OQ_ACTION_START_JOB).held);
    s_finish(session, 3, OQ_OUTCOME_OK, 40);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 3);
    s_no_action(session);
    assert_false(oq_session_busy(session));

    /* The link drops before the broker was heard: all four acks unsettled
       go again, and the new ready offers none of what three of them give
       back (the refusal gives none). */
    oq_session_on_send_error(session, 50);
    s_next(session, OQ_ACTION_CLOSE);
    oq_session_on_tick(session, 50 + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 0);
    uint64_t ids = 0;
    for (int i = 0; i < 4; i++) {
        oq_action_t again = s_next_send(session, OQ_CMD_ACK);
        assert_int_equal(again.ack.credit, again.ack.id == 4 ? 0 : 1);
        ids |= 1u << again.ack.id;
    }
    assert_int_equal(ids, (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4));
    s_no_action(session);
    oq_session_destroy(&session);
}

/* The jobs of one "jobs" message, as the worker hands them over: each job
   the session takes comes back once, in the START_JOB that runs it or the
   DROP_HELD that lets it go, the very job it was given (the worker keeps
   no list of its own); an entry among them that did not decode is failed
   alone, by its id, attempt and lease, and gives its credit back, while
   the jobs around it run. */
static void test_session_jobs_of_a_message_come_back_once_around_a_bad_one(void **unused)
{
    oq_session_t *session = s_session_prefetch(4);
    s_deliver_leased(session, 1, 101, 60000, 10);
    assert_true(s_taken);
    oq_action_t start = s_next(session, OQ_ACTION_START_JOB);
    assert_false(start.held);
    assert_int_equal(start.count, 1);
    assert_ptr_equal(start.jobs[0], s_job(1));
    oq_session_on_bad_job_leased(session, 2, 1, true, 102, "field \"payload\" must be a map", 10);
    oq_action_t failed = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(failed.ack.id, 2);
    assert_true(failed.ack.has_lease && failed.ack.lease == 102);
    assert_int_equal(failed.ack.outcome, OQ_OUTCOME_FAIL);
    assert_int_equal(failed.ack.credit, 1);
    assert_true(oq_str_eq(failed.ack.error, "the worker could not decode the job: field "
                                            "\"payload\" must be a map"));
    s_deliver_leased(session, 3, 103, 60000, 10);
    s_was_held(session);
    s_deliver_leased(session, 4, 104, 60000, 10);
    s_was_held(session);
    s_no_action(session);
    assert_int_equal(oq_session_held(session), 2);

    /* Job 1 ends: the oldest held one starts, the job it was given. */
    s_finish(session, 1, OQ_OUTCOME_OK, 20);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 1);
    start = s_next(session, OQ_ACTION_START_JOB);
    assert_true(start.held);
    assert_int_equal(start.count, 1);
    assert_ptr_equal(start.jobs[0], s_job(3));

    /* SIGTERM: job 4 goes back, and so does its job, to be freed. */
    oq_session_on_signal(session, 30);
    s_next_send(session, OQ_CMD_DRAIN);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 4);
    assert_ptr_equal(s_next(session, OQ_ACTION_DROP_HELD).job, s_job(4));
    s_no_action(session);
    assert_null(oq_session_take_held(session));
    s_finish(session, 3, OQ_OUTCOME_OK, 40);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 3);
    s_next_send(session, OQ_CMD_DISCONNECT);
    s_next(session, OQ_ACTION_EXIT);
    s_no_action(session);
    oq_session_destroy(&session);
}

/* A job refused is not taken: it stays the worker's, and no action gives
   it back. A worker whose loop ends with jobs held takes them out to free
   them. */
static void test_session_refused_job_stays_the_workers(void **unused)
{
    oq_session_t *session = s_session_prefetch(2);
    s_deliver_leased(session, 1, 101, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 102, 60000, 10);
    s_was_held(session);
    s_deliver_leased(session, 3, 103, 60000, 10); /* beyond the credit */
    assert_false(s_taken);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 3);
    s_no_action(session);
    assert_ptr_equal(oq_session_take_held(session), s_job(2));
    assert_null(oq_session_take_held(session));
    assert_int_equal(oq_session_held(session), 0);
    oq_session_destroy(&session);
}

static void test_session_prefetch_stop_hands_held_jobs_back(void **unused)
{
    oq_session_t *session = s_session_prefetch(3);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 60000, 11);
    s_was_held(session);
    s_deliver_leased(session, 3, 13, 60000, 12);
    s_was_held(session);

    /* SIGTERM: the held jobs go back at once, unrun, marked held (no try
       used, the type kept), with no credit; the running one finishes. */
    oq_session_on_signal(session, 20);
    s_next_send(session, OQ_CMD_DRAIN);
    for (uint64_t id = 2; id <= 3; id++) {
        oq_action_t back = s_next_send(session, OQ_CMD_ACK);
        assert_int_equal(back.ack.id, id);
        assert_int_equal(back.ack.outcome, OQ_OUTCOME_RETURN);
        assert_true(back.ack.held);
        assert_true(back.ack.lease == 10 + id);
        assert_int_equal(back.ack.credit, 0);
        s_next(session, OQ_ACTION_DROP_HELD);
    }
    s_no_action(session);
    assert_int_equal(oq_session_held(session), 0);
    s_finish(session, 1, OQ_OUTCOME_OK, 30);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 1);
    assert_false(ack.ack.held);
    assert_int_equal(ack.ack.credit, 0);
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, 0);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_prefetch_long_wait_is_touched_or_handed_back(void **unused)
{
    oq_session_t *session = s_session_prefetch(3);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 1000, 10); /* a 1 s timeout */
    s_was_held(session);
    s_deliver_leased(session, 3, 13, 60000, 10);
    s_was_held(session);

    /* Job 1 ran 600 ms: job 2 waited more than half its timeout and goes
       back for a fresh lease, giving its credit back; job 3 starts with a
       touch that restarts its lease. */
    s_tick_alive(session, 300);
    s_tick_alive(session, 600);
    while (oq_session_next(session, &(oq_action_t){0}) == 0)
        ;
    s_finish(session, 1, OQ_OUTCOME_OK, 610);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 1);
    oq_action_t back = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(back.ack.id, 2);
    assert_int_equal(back.ack.outcome, OQ_OUTCOME_RETURN);
    assert_true(back.ack.held);
    assert_int_equal(back.ack.credit, 1);
    s_next(session, OQ_ACTION_DROP_HELD);
    assert_true(s_next(session, OQ_ACTION_START_JOB).held);
    oq_action_t touch = s_next_send(session, OQ_CMD_TOUCH);
    assert_int_equal(touch.ack.id, 3);
    assert_true(touch.ack.lease == 13);
    s_no_action(session);
    /* The watchdog runs from the start, not from the delivery. */
    s_finish(session, 3, OQ_OUTCOME_OK, 620);
    oq_session_destroy(&session);
}

static void test_session_prefetch_jobs_behind_a_long_one_go_back(void **unused)
{
    oq_session_t *session = s_session_prefetch(3);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 60000, 20);
    s_was_held(session);
    s_deliver_leased(session, 3, 13, 60000, 20);
    s_was_held(session);
    s_no_action(session);
    /* Job 1 has run OQ_WORKER_HOLD_MAX_MS: what waits behind it goes back
       unrun for a free worker, and its credit stays back. */
    int64_t now = 10 + OQ_WORKER_HOLD_MAX_MS;
    s_receive(session, OQ_CMD_HEARTBEAT, now);
    oq_session_on_tick(session, now);
    for (uint64_t id = 2; id <= 3; id++) {
        oq_action_t back = s_next_send(session, OQ_CMD_ACK);
        assert_int_equal(back.ack.id, id);
        assert_int_equal(back.ack.outcome, OQ_OUTCOME_RETURN);
        assert_true(back.ack.held);
        assert_int_equal(back.ack.credit, 0);
        s_next(session, OQ_ACTION_DROP_HELD);
    }
    oq_action_t action;
    while (oq_session_next(session, &action) == 0)
        assert_int_equal(action.cmd, OQ_CMD_HEARTBEAT);
    /* When it ends, its own credit comes back with its ack, the others'
       with a ready. */
    s_finish(session, 1, OQ_OUTCOME_OK, now + 500);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 2);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_prefetch_lost_link_drops_held_jobs(void **unused)
{
    oq_session_t *session = s_session_prefetch(4);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 60000, 11);
    s_was_held(session);
    /* The broker forgot us: it gave the held job's lease back itself. */
    s_receive(session, OQ_CMD_RECONNECT, 20);
    s_next(session, OQ_ACTION_DROP_HELD);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 3);
    s_no_action(session);
    s_receive(session, OQ_CMD_WELCOME, 21);
    s_deliver_leased(session, 3, 13, 60000, 22);
    s_was_held(session);
    /* The link is lost: the same, and the running job's ack waits. */
    oq_session_on_send_error(session, 30);
    s_next(session, OQ_ACTION_CLOSE);
    s_next(session, OQ_ACTION_DROP_HELD);
    s_no_action(session);
    assert_int_equal(oq_session_held(session), 0);
    s_finish(session, 1, OQ_OUTCOME_OK, 40);
    s_no_action(session);
    oq_session_on_tick(session, 30 + OQ_RECONNECT_MIN_MS);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 3);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_prefetch_pause_hands_held_jobs_back(void **unused)
{
    oq_session_t *session = s_session_prefetch(2);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 60000, 11);
    s_was_held(session);
    oq_job_done_t done;
    memset(&done, 0, sizeof done);
    done.id = 1;
    done.attempt = 1;
    oq_report_unavailable(&done.report, "sleep: database unavailable");
    oq_session_on_done(session, &done, 20);
    s_next_send(session, OQ_CMD_STATUS);
    oq_action_t back = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(back.ack.id, 2);
    assert_int_equal(back.ack.outcome, OQ_OUTCOME_RETURN);
    assert_true(back.ack.held);
    assert_int_equal(back.ack.credit, 0);
    s_next(session, OQ_ACTION_DROP_HELD);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 1);
    assert_int_equal(ack.ack.outcome, OQ_OUTCOME_UNAVAILABLE);
    assert_int_equal(ack.ack.credit, 0);
    s_no_action(session);
    oq_session_destroy(&session);
}

/* ---- session: prefetch auto ------------------------------------------------ */

/* A session with --prefetch auto up to cap, connected at 0 and welcomed
   at 1: before any job has run it offers one credit. */
static oq_session_t *s_session_auto(uint32_t cap)
{
    oq_session_config_t config = {
        .heartbeat_ms = 1000, .liveness = 3, .prefetch = cap, .prefetch_auto = true};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 1);
    return session;
}

/* The report of a job whose handler ran run_us. */
static void s_finish_us(oq_session_t *session, uint64_t id, int64_t run_us, int64_t now)
{
    oq_job_done_t done;
    memset(&done, 0, sizeof done);
    done.id = id;
    done.attempt = 1;
    done.call_us = run_us;
    done.elapsed_ms = run_us / 1000;
    done.report.outcome = OQ_OUTCOME_OK;
    oq_session_on_done(session, &done, now);
}

static void test_session_prefetch_auto_credit_follows_run_times(void **unused)
{
    oq_session_t *session = s_session_auto(8);
    /* A short job: the limit grows to 2; its ack gives its credit back
       and a ready the new one. */
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_finish_us(session, 1, 50, 11);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 2);

    /* Both credits used: one runs, one is held; the next short job grows
       it to 3, the held one starts, and one more credit goes out. */
    s_deliver_leased(session, 2, 12, 60000, 12);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 3, 13, 60000, 12);
    s_was_held(session);
    s_finish_us(session, 2, 50, 13);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    assert_true(s_next(session, OQ_ACTION_START_JOB).held);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 3);

    /* A job of a second: the limit falls to 1 at once, and with two
       credits still at the broker its ack gives none back. */
    s_finish_us(session, 3, 1000000, 1020);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 0);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 1);

    /* The broker uses the two it had: both are taken, and the credit
       comes back only once the worker is down to the limit. */
    s_deliver_leased(session, 4, 14, 60000, 1030);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 5, 15, 60000, 1030);
    s_was_held(session);
    s_finish_us(session, 4, 50, 1031);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 0);
    assert_true(s_next(session, OQ_ACTION_START_JOB).held);
    s_no_action(session);
    s_finish_us(session, 5, 50, 1032);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 1);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 1);

    /* Short jobs one at a time bring it back up to the cap, never past. */
    uint32_t credit = 1; /* at the broker */
    for (uint64_t id = 6; id < 200; id++) {
        assert_true(credit >= 1);
        s_deliver_leased(session, id, id, 60000, 1040);
        credit--;
        s_next(session, OQ_ACTION_START_JOB);
        s_finish_us(session, id, 50, 1040);
        oq_action_t action;
        while (oq_session_next(session, &action) == 0) {
            assert_int_equal(action.kind, OQ_ACTION_SEND);
            credit += action.cmd == OQ_CMD_ACK ? action.ack.credit : action.credit;
        }
        assert_int_equal(credit, oq_session_limit(session));
    }
    assert_int_equal(oq_session_limit(session), 8);

    /* A new registration offers the whole limit. */
    s_receive(session, OQ_CMD_RECONNECT, 1050);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 8);
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_prefetch_auto_jobs_behind_a_long_one_go_back_soon(void **unused)
{
    oq_session_t *session = s_session_auto(8);
    for (uint64_t id = 1; id <= 3; id++) {
        s_deliver_leased(session, id, id, 60000, 10);
        s_next(session, OQ_ACTION_START_JOB);
        s_finish_us(session, id, 50, 10);
        while (oq_session_next(session, &(oq_action_t){0}) == 0)
            ;
    }
    assert_int_equal(oq_session_limit(session), 4);
    s_deliver_leased(session, 4, 14, 60000, 20);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 5, 15, 60000, 20);
    s_was_held(session);
    /* Job 4 runs past what the average promised: the held one goes back
       after OQ_WORKER_PREFETCH_AUTO_HOLD_MS, not a second, its credit
       kept back. */
    assert_int_equal(oq_session_deadline(session), 20 + OQ_WORKER_PREFETCH_AUTO_HOLD_MS);
    s_tick_alive(session, 20 + OQ_WORKER_PREFETCH_AUTO_HOLD_MS - 1);
    s_no_action(session);
    s_tick_alive(session, 20 + OQ_WORKER_PREFETCH_AUTO_HOLD_MS);
    oq_action_t back = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(back.ack.id, 5);
    assert_int_equal(back.ack.outcome, OQ_OUTCOME_RETURN);
    assert_true(back.ack.held);
    assert_int_equal(back.ack.credit, 0);
    s_next(session, OQ_ACTION_DROP_HELD);
    s_no_action(session);
    /* It ends after 2 s: the limit is 1, and the two credits still at the
       broker are more than that: nothing comes back. */
    s_finish_us(session, 4, 2000000, 2020);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.credit, 0);
    s_no_action(session);
    assert_int_equal(oq_session_limit(session), 1);
    oq_session_destroy(&session);
}

/* Jobs of 3 ms, one at a time, under --prefetch auto: the limit they
   reach when type "sleep" has a batch function of up to batch_most. */
static uint32_t s_auto_limit_after_3ms_jobs(size_t batch_most)
{
    oq_session_config_t config = {.heartbeat_ms = 1000,
                                  .liveness = 3,
                                  .prefetch = OQ_WORKER_PREFETCH_AUTO_CAP,
                                  .prefetch_auto = true,
                                  .batch = 16};
    oq_session_t *session = oq_session_new(&config, 0);
    if (batch_most > 1)
        oq_session_set_batch(session, "sleep", batch_most);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 1);
    s_receive(session, OQ_CMD_WELCOME, 1);
    for (uint64_t id = 1; id <= 100; id++) {
        s_deliver_leased(session, id, id, 60000, 10);
        s_next(session, OQ_ACTION_START_JOB);
        s_finish_us(session, id, 3000, 10);
        while (oq_session_next(session, &(oq_action_t){0}) == 0)
            ;
    }
    uint32_t limit = oq_session_limit(session);
    oq_session_destroy(&session);
    return limit;
}

static void test_session_prefetch_auto_holds_a_batch_of_a_batch_type(void **unused)
{
    (void)unused;
    /* Without a batch function, 3 ms jobs hold one behind the running one
       within the 4 ms budget; with one that takes 256 (capped by --batch
       at 16), the held ones would run in one call: a full batch of 16 is
       held behind the running job. */
    assert_int_equal(s_auto_limit_after_3ms_jobs(1), 2);
    assert_int_equal(s_auto_limit_after_3ms_jobs(256), 17);

    /* The most it may hold grows with the batch, up to its own cap; a
       fixed --prefetch is left as it is. */
    oq_session_config_t config = {.heartbeat_ms = 1000,
                                  .liveness = 3,
                                  .prefetch = OQ_WORKER_PREFETCH_AUTO_CAP,
                                  .prefetch_auto = true,
                                  .batch = OQ_WORKER_MAX_BATCH};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_set_batch(session, "sleep", 4);
    assert_int_equal(oq_session_prefetch(session), OQ_WORKER_PREFETCH_AUTO_CAP);
    oq_session_set_batch(session, "other", OQ_WORKER_MAX_BATCH);
    assert_int_equal(oq_session_prefetch(session), OQ_WORKER_PREFETCH_AUTO_BATCH_CAP);
    oq_session_destroy(&session);
    config.prefetch_auto = false;
    config.prefetch = 3;
    session = oq_session_new(&config, 0);
    oq_session_set_batch(session, "sleep", OQ_WORKER_MAX_BATCH);
    assert_int_equal(oq_session_prefetch(session), 3);
    oq_session_destroy(&session);
}

static void test_session_batch_starts_held_jobs_of_a_type_together(void **unused)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3, .prefetch = 5, .batch = 3};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_set_batch(session, "sleep", 8); /* capped by --batch at 3 */
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    assert_int_equal(s_next_send(session, OQ_CMD_READY).credit, 5);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_deliver_leased(session, 1, 11, 60000, 10);
    assert_int_equal(s_next(session, OQ_ACTION_START_JOB).count, 1);
    for (uint64_t id = 2; id <= 5; id++) {
        s_deliver_leased(session, id, 10 + id, id == 3 ? 1000 : 60000, 11);
        s_was_held(session);
    }
    s_finish(session, 1, OQ_OUTCOME_OK, 20);
    s_next_send(session, OQ_CMD_ACK);
    oq_action_t start = s_next(session, OQ_ACTION_START_JOB);
    assert_true(start.held);
    assert_int_equal(start.count, 3);
    s_no_action(session);
    assert_int_equal(oq_session_held(session), 1);

    /* Each job is acked on its own, in any order; the next start waits
       for the last of the batch. */
    s_finish(session, 3, OQ_OUTCOME_OK, 30);
    oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(ack.ack.id, 3);
    assert_true(ack.ack.lease == 13);
    s_no_action(session);
    s_finish(session, 2, OQ_OUTCOME_RETRY, 30);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 2);
    s_no_action(session);
    assert_true(oq_session_busy(session));
    s_finish(session, 4, OQ_OUTCOME_OK, 30);
    assert_int_equal(s_next_send(session, OQ_CMD_ACK).ack.id, 4);
    start = s_next(session, OQ_ACTION_START_JOB);
    assert_int_equal(start.count, 1); /* one left: alone */
    s_no_action(session);
    oq_session_destroy(&session);
}

static void test_session_batch_timeout_reports_every_job(void **unused)
{
    oq_session_config_t config = {.heartbeat_ms = 1000, .liveness = 3, .prefetch = 3, .batch = 8};
    oq_session_t *session = oq_session_new(&config, 0);
    oq_session_set_batch(session, "sleep", 8);
    oq_session_on_tick(session, 0);
    s_next(session, OQ_ACTION_CONNECT);
    s_next_send(session, OQ_CMD_READY);
    s_receive(session, OQ_CMD_WELCOME, 1);
    s_deliver_leased(session, 1, 11, 60000, 10);
    s_next(session, OQ_ACTION_START_JOB);
    s_deliver_leased(session, 2, 12, 500, 10);
    s_was_held(session);
    s_deliver_leased(session, 3, 13, 500, 10);
    s_was_held(session);
    s_finish(session, 1, OQ_OUTCOME_OK, 20);
    s_next_send(session, OQ_CMD_ACK);
    assert_int_equal(s_next(session, OQ_ACTION_START_JOB).count, 2);
    s_receive(session, OQ_CMD_HEARTBEAT, 520);
    oq_session_on_tick(session, 520);
    for (uint64_t id = 2; id <= 3; id++) {
        oq_action_t ack = s_next_send(session, OQ_CMD_ACK);
        assert_int_equal(ack.ack.outcome, OQ_OUTCOME_TIMEOUT);
        assert_int_equal(ack.ack.credit, 0);
    }
    s_next_send(session, OQ_CMD_DISCONNECT);
    assert_int_equal(s_next(session, OQ_ACTION_EXIT).status, OQ_EXIT_TIMEOUT);
    oq_session_destroy(&session);
}

int main(void)
{
    /* The worker logs its decisions; keep only errors. */
    oq_log_init("test_session");
    oq_log_set_level(OQ_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_unavailable_pauses_and_probes),
        cmocka_unit_test(test_session_paused_worker_registers_paused),
        cmocka_unit_test(test_session_sigterm_while_probing),
        cmocka_unit_test(test_session_idle_release),
        cmocka_unit_test(test_session_registers_and_heartbeats),
        cmocka_unit_test(test_session_ack_and_resend_echo_the_lease),
        cmocka_unit_test(test_session_touch_restarts_the_watchdog),
        cmocka_unit_test(test_session_touch_needs_a_link),
        cmocka_unit_test(test_session_release_and_return_carry_their_delay),
        cmocka_unit_test(test_session_silent_broker_reconnects_with_backoff),
        cmocka_unit_test(test_session_job_is_acked_with_credit),
        cmocka_unit_test(test_session_job_done_while_down_is_acked_after_reconnect),
        cmocka_unit_test(test_session_unconfirmed_ack_is_sent_again),
        cmocka_unit_test(test_session_reconnect_offers_free_credit_once),
        cmocka_unit_test(test_session_watchdog_reports_timeout_and_exits),
        cmocka_unit_test(test_session_stall_is_not_silence_nor_handler_time),
        cmocka_unit_test(test_session_stall_extends_only_what_it_stalled),
        cmocka_unit_test(test_session_sigterm_when_idle),
        cmocka_unit_test(test_session_sigterm_finishes_the_job_first),
        cmocka_unit_test(test_session_sigterm_without_a_link),
        cmocka_unit_test(test_session_refuses_a_second_job),
        cmocka_unit_test(test_session_bad_job_fails_and_returns_credit),
        cmocka_unit_test(test_session_any_message_is_a_sign_of_life),
        cmocka_unit_test(test_session_send_error_drops_the_link),
        cmocka_unit_test(test_session_prefetch_holds_then_starts_in_order),
        cmocka_unit_test(test_session_prefetch_stop_hands_held_jobs_back),
        cmocka_unit_test(test_session_jobs_of_a_message_come_back_once_around_a_bad_one),
        cmocka_unit_test(test_session_refused_job_stays_the_workers),
        cmocka_unit_test(test_session_prefetch_long_wait_is_touched_or_handed_back),
        cmocka_unit_test(test_session_prefetch_jobs_behind_a_long_one_go_back),
        cmocka_unit_test(test_session_prefetch_lost_link_drops_held_jobs),
        cmocka_unit_test(test_session_prefetch_pause_hands_held_jobs_back),
        cmocka_unit_test(test_session_prefetch_auto_credit_follows_run_times),
        cmocka_unit_test(test_session_prefetch_auto_jobs_behind_a_long_one_go_back_soon),
        cmocka_unit_test(test_session_prefetch_auto_holds_a_batch_of_a_batch_type),
        cmocka_unit_test(test_session_batch_starts_held_jobs_of_a_type_together),
        cmocka_unit_test(test_session_batch_timeout_reports_every_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
