/*  curve.c: making, reading and applying a run's keys. */
#include "curve.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

static int s_mkdir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    fprintf(stderr, "onceq-chaos: cannot create %s: %s\n", path, strerror(errno));
    return -1;
}

/* A fresh pair NAME in dir; its public file moved into allow_dir. */
static int s_make(oq_keypair_t *pair, const char *dir, const char *name, const char *allow_dir)
{
    char reason[OQ_CURVE_PATH_LEN + 256];
    if (oq_keys_generate(pair) < 0 || oq_keys_save(pair, dir, name, true, reason, sizeof reason)) {
        fprintf(stderr, "onceq-chaos: cannot make the key %s: %s\n", name,
                pair->public_z85[0] ? reason : "no CURVE in this libzmq");
        return -1;
    }
    if (!allow_dir)
        return 0;
    char from[OQ_CURVE_PATH_LEN + 128], to[OQ_CURVE_PATH_LEN + 128];
    snprintf(from, sizeof from, "%s/%s%s", dir, name, OQ_KEY_PUBLIC_EXT);
    snprintf(to, sizeof to, "%s/%s%s", allow_dir, name, OQ_KEY_PUBLIC_EXT);
    if (s_mkdir(allow_dir) < 0 || rename(from, to) < 0) {
        fprintf(stderr, "onceq-chaos: cannot move %s to %s: %s\n", from, to, strerror(errno));
        return -1;
    }
    return 0;
}

int oq_curve_make(oq_curve_t *self, const char *run_dir)
{
    memset(self, 0, sizeof *self);
    char clients[OQ_CURVE_PATH_LEN], allow[OQ_CURVE_PATH_LEN + 16];
    oq_keypair_t broker;
    snprintf(self->keys_dir, sizeof self->keys_dir, "%s/keys", run_dir);
    snprintf(clients, sizeof clients, "%s/client-keys", run_dir);
    if (s_mkdir(self->keys_dir) < 0 || s_mkdir(clients) < 0 ||
        s_make(&broker, self->keys_dir, OQ_KEY_BROKER_NAME, NULL) < 0)
        return -1;
    snprintf(allow, sizeof allow, "%s/admins", self->keys_dir);
    if (s_make(&self->front, clients, "chaos-admin", allow) < 0)
        return -1;
    snprintf(allow, sizeof allow, "%s/workers", self->keys_dir);
    if (s_make(&self->back, clients, "chaos-worker", allow) < 0)
        return -1;
    snprintf(self->broker, sizeof self->broker, "%s", broker.public_z85);
    snprintf(self->worker_secret, sizeof self->worker_secret, "%s/chaos-worker%s", clients,
             OQ_KEY_SECRET_EXT);
    snprintf(self->broker_public, sizeof self->broker_public, "%s/%s%s", self->keys_dir,
             OQ_KEY_BROKER_NAME, OQ_KEY_PUBLIC_EXT);
    self->on = true;
    return 0;
}

int oq_curve_load(oq_curve_t *self, const char *front_file, const char *back_file,
                  const char *broker_file)
{
    memset(self, 0, sizeof *self);
    char reason[OQ_CURVE_PATH_LEN + 256];
    if (oq_keys_load_pair(front_file, &self->front, reason, sizeof reason) < 0 ||
        (back_file && oq_keys_load_pair(back_file, &self->back, reason, sizeof reason) < 0) ||
        oq_keys_load_public(broker_file, self->broker, reason, sizeof reason) < 0) {
        fprintf(stderr, "onceq-chaos: %s\n", reason);
        return -1;
    }
    self->on = true;
    return 0;
}

int oq_curve_apply(const oq_curve_t *self, void *sock, bool back)
{
    if (!self->on)
        return 0;
    const oq_keypair_t *pair = back && self->back.public_z85[0] ? &self->back : &self->front;
    return zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, self->broker, OQ_KEY_Z85_LEN) ||
                   zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pair->public_z85, OQ_KEY_Z85_LEN) ||
                   zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, pair->secret_z85, OQ_KEY_Z85_LEN)
               ? -1
               : 0;
}

int oq_curve_client(const oq_curve_t *self, oq_client_t *client)
{
    return self->on ? oq_client_set_curve(client, &self->front, self->broker) : 0;
}
