/*  curve.h: the CURVE keys of a chaos run. With our own broker they are
    made in the run directory, in the layout the broker's --keys reads
    (RUN/keys: its pair and producers/, workers/, admins/; the secret files
    of the harness's own keys in RUN/client-keys). Attached to a deployment
    they are read from --key (the front socket: dispatches, stats and the
    failed store want an admin key), --worker-key (the back socket's
    malformed bursts) and --broker-key. With --insecure, or attached
    without keys, the run is plaintext. */
#ifndef ONCEQ_CHAOS_CURVE_H
#define ONCEQ_CHAOS_CURVE_H

#include <stdbool.h>
#include <stddef.h>

#include "onceq/client.h"
#include "onceq/keys.h"

#define OQ_CURVE_PATH_LEN 4200

typedef struct {
    bool on;                                    /* false: plaintext */
    oq_keypair_t front;                         /* the harness on the front socket (an admin key) */
    oq_keypair_t back;                          /* on the back socket (a worker key); empty: none */
    char broker[OQ_KEY_Z85_LEN + 1];            /* the broker's public key */
    char keys_dir[OQ_CURVE_PATH_LEN];           /* own broker: its --keys */
    char worker_secret[OQ_CURVE_PATH_LEN + 64]; /* own workers: their --key */
    char broker_public[OQ_CURVE_PATH_LEN + 64]; /* own workers: their --broker-key */
} oq_curve_t;

/* Make a broker pair, an admin and a worker key in run_dir (see above).
   0, or -1 with the reason on stderr. */
int oq_curve_make(oq_curve_t *self, const char *run_dir);

/* Read the keys of an existing deployment. back_file may be NULL: the
   bursts then speak to the back socket with the front key, and the broker
   answers them "forbidden". 0, or -1 with the reason on stderr. */
int oq_curve_load(oq_curve_t *self, const char *front_file, const char *back_file,
                  const char *broker_file);

/* Set the keys on a socket not yet connected, as the harness on the front
   (back false) or the back socket. Nothing when off. 0 or -1. */
int oq_curve_apply(const oq_curve_t *self, void *sock, bool back);

/* The same for a client. 0 or -1. */
int oq_curve_client(const oq_curve_t *self, oq_client_t *client);

#endif
