/*  keystore.h: the broker's keys, read from one directory (--keys DIR):

        DIR/broker.key_secret   the broker's own pair (onceq keygen --dir DIR broker)
        DIR/producers/NAME.key  public keys allowed to produce
        DIR/workers/NAME.key    public keys allowed to work
        DIR/admins/NAME.key     public keys allowed to administer

    A key belongs to one role: the same key in two of the directories is
    refused, as is a file that is not a key. A store is read whole and never
    changes; a reload (SIGHUP) reads a new one and, only if that succeeds,
    the broker swaps it in, so a broken edit keeps the keys in force. */
#ifndef ONCEQ_BROKER_KEYSTORE_H
#define ONCEQ_BROKER_KEYSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "onceq/keys.h"
#include "roles.h"

typedef struct oq_keystore oq_keystore_t;

/* Read dir. NULL with a reason naming the file at fault. */
oq_keystore_t *oq_keystore_load(const char *dir, char *reason, size_t reason_len);

/* Free it and set *self_p to NULL. */
void oq_keystore_destroy(oq_keystore_t **self_p);

/* The broker's own pair. Borrowed. */
const oq_keypair_t *oq_keystore_broker(const oq_keystore_t *self);

/* The role of a public key (32 bytes), or OQ_ROLE_NONE if the store does
   not allow it; *name (if name is not NULL) gets the key's file name
   without .key, borrowed, or "" for none. */
oq_role_t oq_keystore_role(const oq_keystore_t *self, const uint8_t key[OQ_KEY_BYTES],
                           const char **name);

/* The same for a key in Z85 (40 characters); OQ_ROLE_NONE if it is not one. */
oq_role_t oq_keystore_role_z85(const oq_keystore_t *self, const char *z85, const char **name);

/* Keys allowed for role. */
size_t oq_keystore_count(const oq_keystore_t *self, oq_role_t role);

#endif
