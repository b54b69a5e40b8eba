/*  load.c: the dispatcher is a small state machine per dispatch (pending,
    in flight, confirmed, unconfirmed, refused) driven by the main loop: a
    request id is the dispatch's position plus one, so an answer finds its
    dispatch directly, also a late one to a request that was sent again or
    given up on. The request, payload included, is encoded again from the
    order for every send, byte for byte the same (same dispatch_id, same
    request id), as the Lazy Pirate pattern wants.

    With shipments on, each dispatch position has two slots, the grant and
    then the shipment (slot = position x 2 + leg); both fall due together
    and a request id is the slot plus one. */
#include "load.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <zmq.h>

#include "chaos_limits.h"
#include "onceq/client.h"
#include "onceq/proto.h"
#include "rng.h"

#define S_MS_PER_S    1000
#define S_TAG_BYTES   8
#define S_NUM_LEN     32
#define S_MAX_PAYLOAD 8 /* keys in a payload at most */
enum { S_LEG_GRANT = 0, S_LEG_SHIP = 1 };
#define S_ADDRESS_LEN 64

typedef enum { S_PENDING = 0, S_IN_FLIGHT, S_CONFIRMED, S_UNCONFIRMED, S_REFUSED } s_state_t;

typedef struct {
    uint32_t order;   /* index into orders */
    uint8_t state;    /* s_state_t */
    uint8_t leg;      /* S_LEG_GRANT or S_LEG_SHIP */
    bool first;       /* the first dispatch of its order (carries its hook) */
    int64_t first_ms; /* first send */
    int64_t next_ms;  /* in flight: when to send again */
} s_dispatch_t;

struct oq_load {
    const oq_chaos_config_t *config; /* borrowed */
    int64_t id_base;                 /* ids start above it */
    oq_order_t *orders;              /* drawn up front, config->jobs at most */
    size_t order_count;
    s_dispatch_t *dispatches;         /* config->jobs x legs slots, in dispatch order */
    uint32_t legs;                    /* slots per position: 2 with shipments, else 1 */
    uint32_t slots;                   /* config->jobs x legs */
    uint32_t flight[OQ_CHAOS_WINDOW]; /* slots in flight */
    size_t in_flight;
    uint32_t next;                 /* the next slot to send */
    int64_t start_ms;              /* the first pump: position 0 is due then */
    char tag[2 * S_TAG_BYTES + 1]; /* this run's part of every dispatch_id */
    void *ctx;                     /* ZeroMQ context of our own */
    void *sock;                    /* DEALER to the broker's front */
    msgpack_sbuffer buf;           /* a request, encoded */
    msgpack_sbuffer payload;       /* its payload, encoded */
    oq_load_counts_t counts;
};

/* ---- the orders --------------------------------------------------------- */

static uint32_t s_new_order(oq_load_t *self, oq_rng_t *rng, oq_fault_kind_t hook)
{
    oq_order_t *o = &self->orders[self->order_count];
    uint32_t index = (uint32_t)self->order_count++;
    o->order_id = self->id_base + (int64_t)self->config->customers + 1 + index;
    o->customer_id = self->id_base + 1 + (int64_t)oq_rng_below(rng, self->config->customers);
    o->points = 1 + (uint32_t)oq_rng_below(rng, OQ_CHAOS_MAX_ORDER_POINTS);
    o->hook = hook;
    return index;
}

/* An earlier order: often one of the last few, so that both runs are in
   flight at once and meet in the database; otherwise any. */
static uint32_t s_earlier_order(const oq_load_t *self, oq_rng_t *rng)
{
    size_t n = self->order_count;
    if (oq_rng_percent(rng, OQ_CHAOS_RECENT_ORDERS_PCT)) {
        size_t recent = n < OQ_CHAOS_RECENT_ORDERS ? n : OQ_CHAOS_RECENT_ORDERS;
        return (uint32_t)(n - 1 - oq_rng_below(rng, recent));
    }
    return (uint32_t)oq_rng_below(rng, n);
}

static void s_draw(oq_load_t *self, const oq_schedule_t *schedule)
{
    oq_rng_t rng;
    oq_rng_seed(&rng, self->config->seed, OQ_RNG_ORDERS);
    for (uint32_t i = 0; i < self->config->jobs; i++) {
        s_dispatch_t *d = &self->dispatches[i * self->legs];
        oq_fault_kind_t hook = oq_schedule_hook_at(schedule, i);
        /* The draw for "re-dispatch?" is made at every position, so that a
           hook does not shift the orders that follow it. */
        bool again = oq_rng_percent(&rng, self->config->redispatch_pct);
        if (hook == OQ_FAULT_KIND_COUNT_ && again && self->order_count > 0) {
            d->order = s_earlier_order(self, &rng);
        } else {
            d->order = s_new_order(self, &rng, hook);
            d->first = true;
        }
        if (self->legs > 1)
            self->dispatches[i * self->legs + S_LEG_SHIP] =
                (s_dispatch_t){.order = d->order, .leg = S_LEG_SHIP, .first = d->first};
    }
}

oq_load_t *oq_load_new(const oq_chaos_config_t *config, const oq_schedule_t *schedule,
                       int64_t id_base)
{
    assert(config && schedule && config->jobs > 0 && config->customers > 0);
    oq_load_t *self = calloc(1, sizeof *self);
    assert(self);
    self->config = config;
    self->id_base = id_base;
    self->legs = config->carrier ? 2 : 1;
    self->slots = config->jobs * self->legs;
    self->orders = calloc(config->jobs, sizeof *self->orders);
    self->dispatches = calloc(self->slots, sizeof *self->dispatches);
    assert(self->orders && self->dispatches);
    msgpack_sbuffer_init(&self->buf);
    msgpack_sbuffer_init(&self->payload);
    uint8_t tag[S_TAG_BYTES] = {0};
    if (getrandom(tag, sizeof tag, 0) != (ssize_t)sizeof tag)
        memcpy(tag, &config->seed,
               sizeof tag < sizeof config->seed ? sizeof tag : sizeof config->seed);
    for (size_t i = 0; i < sizeof tag; i++)
        snprintf(self->tag + 2 * i, 3, "%02x", tag[i]);
    s_draw(self, schedule);
    return self;
}

void oq_load_destroy(oq_load_t **self_p)
{
    assert(self_p);
    oq_load_t *self = *self_p;
    if (!self)
        return;
    if (self->sock)
        zmq_close(self->sock);
    if (self->ctx)
        zmq_ctx_term(self->ctx);
    msgpack_sbuffer_destroy(&self->buf);
    msgpack_sbuffer_destroy(&self->payload);
    free(self->orders);
    free(self->dispatches);
    free(self);
    *self_p = NULL;
}

void oq_load_ranges(const oq_load_t *self, int64_t *c_lo, int64_t *c_hi, int64_t *o_lo,
                    int64_t *o_hi)
{
    *c_lo = self->id_base + 1;
    *c_hi = self->id_base + (int64_t)self->config->customers;
    *o_lo = *c_hi + 1;
    *o_hi = *c_hi + (int64_t)self->config->jobs;
}

/* ---- the database ------------------------------------------------------- */

static int s_query_count(PGconn *db, const char *sql, int64_t lo, int64_t hi, int64_t *count,
                         char *err, size_t err_len)
{
    char a[S_NUM_LEN], b[S_NUM_LEN];
    snprintf(a, sizeof a, "%" PRId64, lo);
    snprintf(b, sizeof b, "%" PRId64, hi);
    const char *params[] = {a, b};
    PGresult *res = PQexecParams(db, sql, 2, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    int rc = -1;
    if (st == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        *count = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        rc = 0;
    } else if (st == PGRES_COMMAND_OK) {
        *count = strtoll(PQcmdTuples(res), NULL, 10);
        rc = 0;
    } else {
        snprintf(err, err_len, "%s", PQerrorMessage(db));
    }
    PQclear(res);
    return rc;
}

bool oq_load_ships(const oq_load_t *self)
{
    return self->legs > 1;
}

void oq_load_ship_address(int64_t order_id, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRId64 " Chaos Street", order_id);
}

int oq_load_prepare_db(oq_load_t *self, PGconn *db, char *err, size_t err_len)
{
    int64_t c_lo, c_hi, o_lo, o_hi, n;
    oq_load_ranges(self, &c_lo, &c_hi, &o_lo, &o_hi);
    if (self->legs > 1) {
        if (s_query_count(db,
                          "SELECT count(*) FROM shipment_requests WHERE order_id BETWEEN $1 AND $2",
                          o_lo, o_hi, &n, err, err_len) < 0)
            return -1;
        if (n > 0) {
            snprintf(err, err_len,
                     "%" PRId64 " shipment requests for order ids %" PRId64 "..%" PRId64
                     " exist already; choose another --id-base",
                     n, o_lo, o_hi);
            return -1;
        }
    }
    if (s_query_count(db, "SELECT count(*) FROM point_balances WHERE customer_id BETWEEN $1 AND $2",
                      c_lo, c_hi, &n, err, err_len) < 0)
        return -1;
    if (n > 0) {
        snprintf(err, err_len,
                 "%" PRId64 " customers with ids %" PRId64 "..%" PRId64
                 " exist already; choose another --id-base",
                 n, c_lo, c_hi);
        return -1;
    }
    if (s_query_count(db, "SELECT count(*) FROM point_grants WHERE order_id BETWEEN $1 AND $2",
                      o_lo, o_hi, &n, err, err_len) < 0)
        return -1;
    if (n > 0) {
        snprintf(err, err_len,
                 "%" PRId64 " grants for order ids %" PRId64 "..%" PRId64
                 " exist already; choose another --id-base",
                 n, o_lo, o_hi);
        return -1;
    }
    if (s_query_count(db,
                      "INSERT INTO point_balances (customer_id, balance) "
                      "SELECT g, 0 FROM generate_series($1::bigint, $2::bigint) AS g",
                      c_lo, c_hi, &n, err, err_len) < 0)
        return -1;
    if (n != c_hi - c_lo + 1) {
        snprintf(err, err_len, "created %" PRId64 " customers of %" PRId64, n, c_hi - c_lo + 1);
        return -1;
    }
    return 0;
}

/* ---- dispatching -------------------------------------------------------- */

int oq_load_connect(oq_load_t *self, const char *front, const oq_curve_t *curve)
{
    self->ctx = zmq_ctx_new();
    if (!self->ctx)
        return -1;
    self->sock = zmq_socket(self->ctx, ZMQ_DEALER);
    if (!self->sock)
        return -1;
    int linger_ms = 0;
    zmq_setsockopt(self->sock, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    if (oq_curve_apply(curve, self->sock, false) < 0)
        return -1;
    return zmq_connect(self->sock, front);
}

void *oq_load_socket(const oq_load_t *self)
{
    return self->sock;
}

static void s_kv(msgpack_packer *pk, const char *key, uint64_t value)
{
    oq_proto_pack_cstr(pk, key);
    msgpack_pack_uint64(pk, value);
}

/* The payload of dispatch d: the order, and with test hooks on the trace,
   the hold inside the transaction and, on an order's first dispatch, its
   hook. Re-dispatches carry no hook: the point of those is the second run. */
static void s_payload(oq_load_t *self, const s_dispatch_t *d)
{
    const oq_chaos_config_t *c = self->config;
    const oq_order_t *o = &self->orders[d->order];
    bool hook = c->hooks && d->first && o->hook != OQ_FAULT_KIND_COUNT_;
    uint32_t keys = 3;
    if (c->hooks)
        keys += 1 + (c->hold_ms > 0) + hook;
    msgpack_sbuffer_clear(&self->payload);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &self->payload, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, keys);
    s_kv(&pk, "order_id", (uint64_t)o->order_id);
    s_kv(&pk, "customer_id", (uint64_t)o->customer_id);
    s_kv(&pk, "points", o->points);
    if (!c->hooks)
        return;
    s_kv(&pk, "test_trace", 1);
    if (c->hold_ms > 0)
        s_kv(&pk, "test_pause_in_txn_ms", c->hold_ms);
    if (hook && o->hook == OQ_FAULT_COMMIT_KILL)
        s_kv(&pk, "test_pause_after_commit_ms", c->commit_pause_ms);
    else if (hook)
        s_kv(&pk, "test_kill_after_commit_attempt", 1);
}

/* The shipment payload of dispatch d: the order and its address, the same
   on every dispatch of the order. No test keys: the handler sends what it
   does not know on to the carrier, which refuses unknown fields. */
static void s_ship_payload(oq_load_t *self, const s_dispatch_t *d)
{
    const oq_order_t *o = &self->orders[d->order];
    char address[S_ADDRESS_LEN];
    oq_load_ship_address(o->order_id, address, sizeof address);
    msgpack_sbuffer_clear(&self->payload);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &self->payload, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    s_kv(&pk, "order_id", (uint64_t)o->order_id);
    oq_proto_pack_cstr(&pk, "address");
    oq_proto_pack_cstr(&pk, address);
}

static void s_send(oq_load_t *self, uint32_t slot, int64_t now_ms)
{
    const oq_chaos_config_t *c = self->config;
    s_dispatch_t *d = &self->dispatches[slot];
    bool ship = d->leg == S_LEG_SHIP;
    uint32_t pos = slot / self->legs;
    char dispatch_id[OQ_CHAOS_DISPATCH_ID_LEN];
    if (ship) {
        s_ship_payload(self, d);
        snprintf(dispatch_id, sizeof dispatch_id, "chaos-%s-%" PRIu32 "-ship", self->tag, pos);
    } else {
        s_payload(self, d);
        snprintf(dispatch_id, sizeof dispatch_id, "chaos-%s-%" PRIu32, self->tag, pos);
    }
    oq_job_msg_t job = {
        .type = oq_str(ship ? c->ship_type : c->job_type),
        .queue = oq_str(ship ? c->ship_queue : c->queue),
        .payload = (const uint8_t *)self->payload.data,
        .payload_len = self->payload.size,
        .max_tries = ship ? c->ship_tries : c->max_tries,
        .has_max_tries = true,
        .backoff_ms = {(int64_t)c->backoff_s * S_MS_PER_S},
        .backoff_len = 1,
        .timeout_ms = (int64_t)(c->job_timeout_s * S_MS_PER_S),
        .has_timeout = c->job_timeout_s > 0,
        .dispatch_id = oq_str(dispatch_id),
    };
    msgpack_sbuffer_clear(&self->buf);
    oq_proto_encode_dispatch(&self->buf, (int64_t)slot + 1, &job);
    /* A full pipe (the broker is away and libzmq's queue is full) is the
       same as no answer: the request goes again later. */
    if (zmq_send(self->sock, self->buf.data, self->buf.size, ZMQ_DONTWAIT) < 0) {
        d->next_ms = now_ms + OQ_CHAOS_UNAVAILABLE_MS;
        return;
    }
    d->next_ms = now_ms + OQ_CHAOS_RESEND_MS;
}

static void s_unfly(oq_load_t *self, uint32_t pos)
{
    for (size_t i = 0; i < self->in_flight; i++) {
        if (self->flight[i] == pos) {
            self->flight[i] = self->flight[--self->in_flight];
            return;
        }
    }
}

/* The same transition for a shipment dispatch, on its own counts. */
static void s_resolve_ship(oq_load_t *self, s_dispatch_t *d, s_state_t state)
{
    oq_order_t *o = &self->orders[d->order];
    if (d->state == S_UNCONFIRMED) { /* a late answer */
        o->ship_unconfirmed--;
        self->counts.ship_unconfirmed--;
        self->counts.ship_late++;
    }
    d->state = (uint8_t)state;
    if (state == S_CONFIRMED) {
        o->ship_confirmed++;
        self->counts.ship_confirmed++;
    } else if (state == S_UNCONFIRMED) {
        o->ship_unconfirmed++;
        self->counts.ship_unconfirmed++;
    } else {
        o->ship_refused++;
        self->counts.ship_refused++;
    }
}

static void s_resolve(oq_load_t *self, uint32_t pos, s_state_t state, int64_t now_ms)
{
    s_dispatch_t *d = &self->dispatches[pos];
    oq_order_t *o = &self->orders[d->order];
    s_unfly(self, pos);
    if (d->leg == S_LEG_SHIP) {
        s_resolve_ship(self, d, state);
        self->counts.last_answer_ms = now_ms;
        return;
    }
    if (d->state == S_UNCONFIRMED) { /* a late answer */
        o->unconfirmed--;
        self->counts.unconfirmed--;
        self->counts.late++;
    }
    d->state = (uint8_t)state;
    switch (state) {
    case S_CONFIRMED:
        o->confirmed++;
        self->counts.confirmed++;
        break;
    case S_UNCONFIRMED:
        o->unconfirmed++;
        self->counts.unconfirmed++;
        break;
    case S_REFUSED:
        o->refused++;
        self->counts.refused++;
        break;
    default:
        assert(false);
    }
    self->counts.last_answer_ms = now_ms;
}

static int64_t s_due_ms(const oq_load_t *self, uint32_t slot)
{
    if (self->config->rate <= 0)
        return self->start_ms;
    uint32_t pos = slot / self->legs;
    return self->start_ms + (int64_t)((double)pos * S_MS_PER_S / self->config->rate);
}

void oq_load_pump(oq_load_t *self, int64_t now_ms)
{
    if (self->next == 0 && self->start_ms == 0)
        self->start_ms = now_ms;
    /* Silences first: resend, or give up. */
    for (size_t i = 0; i < self->in_flight;) {
        uint32_t pos = self->flight[i];
        s_dispatch_t *d = &self->dispatches[pos];
        if (now_ms - d->first_ms >= OQ_CHAOS_GIVE_UP_MS) {
            s_resolve(self, pos, S_UNCONFIRMED, now_ms); /* moves another into slot i */
            continue;
        }
        if (now_ms >= d->next_ms) {
            s_send(self, pos, now_ms);
            self->counts.resends++;
        }
        i++;
    }
    while (self->next < self->slots && self->in_flight < OQ_CHAOS_WINDOW &&
           now_ms >= s_due_ms(self, self->next)) {
        uint32_t slot = self->next++;
        s_dispatch_t *d = &self->dispatches[slot];
        d->state = S_IN_FLIGHT;
        d->first_ms = now_ms;
        self->flight[self->in_flight++] = slot;
        if (d->leg == S_LEG_SHIP) {
            self->orders[d->order].ship_dispatches++;
            self->counts.ship_sent++;
        } else {
            self->orders[d->order].dispatches++;
            self->counts.redispatches += !d->first;
            if (self->counts.sent++ == 0)
                self->counts.first_sent_ms = now_ms;
        }
        s_send(self, slot, now_ms);
    }
}

static void s_answer(oq_load_t *self, const oq_msg_t *msg, int64_t now_ms)
{
    if (!msg->has_req || msg->req == 0 || msg->req > self->next)
        return;
    uint32_t pos = (uint32_t)(msg->req - 1);
    s_dispatch_t *d = &self->dispatches[pos];
    if (d->state != S_IN_FLIGHT && d->state != S_UNCONFIRMED)
        return; /* an answer to a resend of one already answered */
    if (msg->cmd == OQ_CMD_DISPATCHED) {
        oq_order_t *o = &self->orders[d->order];
        uint64_t *job_id = d->leg == S_LEG_SHIP ? &o->ship_job_id : &o->job_id;
        if (!*job_id)
            *job_id = msg->id;
        s_resolve(self, pos, S_CONFIRMED, now_ms);
        return;
    }
    if (msg->cmd != OQ_CMD_ERROR)
        return;
    /* Nothing was queued; "unavailable" and "full" say: try again later. */
    if (msg->err_code == OQ_ERR_UNAVAILABLE || msg->err_code == OQ_ERR_FULL) {
        if (d->state == S_IN_FLIGHT)
            d->next_ms = now_ms + OQ_CHAOS_UNAVAILABLE_MS;
        return;
    }
    if (!self->counts.refusal[0])
        snprintf(self->counts.refusal, sizeof self->counts.refusal, "%s: %.*s",
                 oq_proto_err_name(msg->err_code), (int)msg->err_text.len, msg->err_text.ptr);
    s_resolve(self, pos, S_REFUSED, now_ms);
}

void oq_load_receive(oq_load_t *self, int64_t now_ms)
{
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    /* The broker answers in one frame; a longer message is not an answer,
       and its frames are read and dropped (libzmq hands over a message's
       frames together, so none is left for the next call). */
    bool skipping = false;
    while (zmq_msg_recv(&frame, self->sock, ZMQ_DONTWAIT) >= 0) {
        bool more = zmq_msg_more(&frame);
        if (!skipping && !more) {
            oq_msg_t msg;
            oq_err_t code;
            char why[OQ_MAX_ERROR_LEN];
            if (oq_proto_decode(&msg, zmq_msg_data(&frame), zmq_msg_size(&frame), &code, why,
                                sizeof why) == 0)
                s_answer(self, &msg, now_ms);
            oq_proto_msg_release(&msg);
        }
        skipping = more;
    }
    zmq_msg_close(&frame);
}

int64_t oq_load_next_ms(const oq_load_t *self, int64_t now_ms)
{
    int64_t next = now_ms + OQ_CHAOS_LOOP_MS;
    if (self->next < self->slots && self->in_flight < OQ_CHAOS_WINDOW) {
        int64_t due = s_due_ms(self, self->next);
        if (due < next)
            next = due;
    }
    for (size_t i = 0; i < self->in_flight; i++) {
        const s_dispatch_t *d = &self->dispatches[self->flight[i]];
        if (d->next_ms < next)
            next = d->next_ms;
    }
    return next;
}

bool oq_load_done(const oq_load_t *self)
{
    return self->next == self->slots && self->in_flight == 0;
}

void oq_load_counts(const oq_load_t *self, oq_load_counts_t *counts)
{
    *counts = self->counts;
}

size_t oq_load_order_count(const oq_load_t *self)
{
    return self->order_count;
}

const oq_order_t *oq_load_order(const oq_load_t *self, size_t index)
{
    assert(index < self->order_count);
    return &self->orders[index];
}

const oq_order_t *oq_load_find(const oq_load_t *self, int64_t order_id)
{
    int64_t first = self->id_base + (int64_t)self->config->customers + 1;
    if (order_id < first || order_id - first >= (int64_t)self->order_count)
        return NULL;
    const oq_order_t *o = &self->orders[order_id - first];
    return o->dispatches ? o : NULL;
}
