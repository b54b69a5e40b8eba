/*  onceq/keys.h: CurveZMQ key pairs and the files that hold them. A key is
    32 bytes, written as 40 characters of Z85. Files use czmq's zcert text
    format, so keys made by `onceq keygen` and by czmq's zcert_save (or
    zmq's curve_keygen pasted into one) serve either way:

        NAME.key          the public key, to hand out
        NAME.key_secret   public and secret key, mode 0600, never handed out

    Both files are a few lines of ZPL: comments (#), a "metadata" section and
    a "curve" section with `public-key = "..."` (and in the secret file
    `secret-key = "..."`). Loading is strict: a key that is not 40 valid Z85
    characters, a secret key whose public key is not the one written next to
    it, or a file without the key are refused with a reason naming the file. */
#ifndef ONCEQ_KEYS_H
#define ONCEQ_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OQ_KEY_BYTES       32 /* a Curve25519 key */
#define OQ_KEY_Z85_LEN     40 /* the same in Z85 */
#define OQ_KEY_PUBLIC_EXT  ".key"
#define OQ_KEY_SECRET_EXT  ".key_secret"
#define OQ_KEY_NAME_MAX    64       /* a key's NAME: 1..64 of [A-Za-z0-9_.-], not starting with . */
#define OQ_KEY_FILE_MAX    4096     /* a key file larger than this is refused */
#define OQ_KEY_SECRET_MODE 0600     /* the secret file's mode */
#define OQ_KEY_PUBLIC_MODE 0644     /* the public file's mode */
#define OQ_KEY_DIR_MODE    0755     /* directories keygen creates */
#define OQ_KEY_BROKER_NAME "broker" /* DIR/broker.key_secret: the broker's own pair */

/* A key pair in Z85, NUL-terminated. secret is empty for a public key
   alone. */
typedef struct {
    char public_z85[OQ_KEY_Z85_LEN + 1];
    char secret_z85[OQ_KEY_Z85_LEN + 1];
} oq_keypair_t;

/* A fresh random pair. 0, or -1 (libzmq without CURVE support). */
int oq_keys_generate(oq_keypair_t *pair);

/* True if text[0..len) is exactly 40 characters of the Z85 alphabet. */
bool oq_keys_z85_valid(const char *text, size_t len);

/* Z85 to 32 bytes and back. 0, or -1 if z85 is not a valid key. */
int oq_keys_decode(const char *z85, uint8_t key[OQ_KEY_BYTES]);
void oq_keys_encode(const uint8_t key[OQ_KEY_BYTES], char z85[OQ_KEY_Z85_LEN + 1]);

/* True if name is a valid key NAME (it becomes file names). */
bool oq_keys_name_valid(const char *name);

/* Write DIR/NAME.key (mode 0644) and DIR/NAME.key_secret (mode 0600),
   each to a temporary name first and renamed into place. Existing files
   are replaced only with overwrite. 0, or -1 with a reason. */
int oq_keys_save(const oq_keypair_t *pair, const char *dir, const char *name, bool overwrite,
                 char *reason, size_t reason_len);

/* Read a key pair from a secret file (NAME.key_secret). The secret key
   must give the public key written next to it. 0, or -1 with a reason. */
int oq_keys_load_pair(const char *path, oq_keypair_t *pair, char *reason, size_t reason_len);

/* Read the public key of a public or a secret file into public_z85. 0, or
   -1 with a reason. */
int oq_keys_load_public(const char *path, char public_z85[OQ_KEY_Z85_LEN + 1], char *reason,
                        size_t reason_len);

#endif
