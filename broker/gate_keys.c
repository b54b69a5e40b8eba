/*  gate_keys.c: the keys the gate judges by. With --keys they are read at
    start, before the ZAP handler (auth.h) that answers handshakes by them
    is bound; SIGHUP reads them again. A key that lost its role is refused
    from its next message on (gate.c), and a worker connected with it is
    dropped at once so its leases go back. */
#include <stdio.h>
#include <string.h>

#include "broker_internal.h"
#include "onceq/limits.h"
#include "onceq/log.h"

static void s_log_keys(const oq_keystore_t *keys, const char *dir, const char *what)
{
    oq_info("keys %s from %s: %zu producer(s), %zu worker(s), %zu admin(s); broker key %s", what,
            dir, oq_keystore_count(keys, OQ_ROLE_PRODUCER), oq_keystore_count(keys, OQ_ROLE_WORKER),
            oq_keystore_count(keys, OQ_ROLE_ADMIN), oq_keystore_broker(keys)->public_z85);
    if (!oq_keystore_count(keys, OQ_ROLE_PRODUCER) && !oq_keystore_count(keys, OQ_ROLE_WORKER) &&
        !oq_keystore_count(keys, OQ_ROLE_ADMIN))
        oq_warn("no public keys in %s/producers, %s/workers or %s/admins: every peer is refused",
                dir, dir, dir);
}

int oq_gate_keys_start(oq_broker_t *self, char *reason, size_t reason_len)
{
    const char *dir = self->config.keys_dir;
    if (!dir)
        return 0;
    char why[1024];
    self->keys = oq_keystore_load(dir, why, sizeof why);
    if (!self->keys) {
        snprintf(reason, reason_len, "cannot read the keys in %s: %s", dir, why);
        return -1;
    }
    s_log_keys(self->keys, dir, "read");
    self->forbidden_log = oq_throttle_new(OQ_AUTH_LOG_KEYS, OQ_AUTH_LOG_INTERVAL_MS);
    if (!self->forbidden_log) {
        snprintf(reason, reason_len, "out of memory");
        return -1;
    }
    self->auth = oq_auth_new(self->ctx, self->keys, self->clock, reason, reason_len);
    return self->auth ? 0 : -1;
}

typedef struct {
    oq_broker_t *broker;
    size_t lost; /* connections whose key lost the role they spoke with */
} s_sweep_t;

static void s_sweep_one(void *ctx, const oq_peer_view_t *peer)
{
    s_sweep_t *sweep = ctx;
    oq_broker_t *self = sweep->broker;
    if (oq_keystore_role(self->keys, peer->key, NULL) == peer->role)
        return;
    sweep->lost++;
    if (peer->side != OQ_SIDE_BACK)
        return;
    oq_worker_t *w = oq_engine_worker_find(self->engine, peer->identity, peer->identity_len);
    if (w)
        oq_engine_worker_remove(self->engine, &w, "key revoked");
}

int oq_broker_reload_keys(oq_broker_t *self)
{
    const char *dir = self->config.keys_dir;
    if (!self->keys) {
        oq_info("no keys to read again: running --insecure");
        return 0;
    }
    char why[1024];
    oq_keystore_t *fresh = oq_keystore_load(dir, why, sizeof why);
    if (!fresh) {
        oq_error("keys not read again, the ones in force stay: %s", why);
        return -1;
    }
    if (strcmp(oq_keystore_broker(fresh)->public_z85, oq_keystore_broker(self->keys)->public_z85))
        oq_warn("%s/%s%s holds a new pair: the sockets keep the broker's key %s until a restart",
                dir, OQ_KEY_BROKER_NAME, OQ_KEY_SECRET_EXT,
                oq_keystore_broker(self->keys)->public_z85);
    oq_keystore_t *old = self->keys;
    self->keys = fresh;
    oq_auth_set_store(self->auth, fresh);
    oq_keystore_destroy(&old);
    s_log_keys(fresh, dir, "read again");
    if (self->peers) {
        s_sweep_t sweep = {self, 0};
        oq_peers_each(self->peers, s_sweep_one, &sweep);
        if (sweep.lost)
            oq_info("%zu connected peer(s) lost their role: their commands are refused from now "
                    "on",
                    sweep.lost);
    }
    return 0;
}
