/*  test_keystore.c: the broker's key directory (broker/keystore.h): the
    broker's pair and the public keys of each role, looked up by key; what
    is ignored (secret files, other files, a missing role directory) and
    what is refused with a reason (no broker pair, a bad key file, one key
    in two roles). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "keystore.h"
#include "support.h"

#define S_PATH_LEN 512

static char s_dir[256];
static char s_reason[1024];

static int s_setup(void **state)
{
    (void)state;
    if (oq_support_temp_dir("onceq-keystore", s_dir, sizeof s_dir) < 0)
        return -1;
    oq_keypair_t broker;
    oq_keys_generate(&broker);
    return oq_keys_save(&broker, s_dir, "broker", false, s_reason, sizeof s_reason);
}

static int s_teardown(void **state)
{
    (void)state;
    return oq_support_remove_tree(s_dir);
}

/* A new key, its public file in DIR/sub (created), secret in DIR/secrets. */
static void s_allow(oq_keypair_t *pair, const char *sub, const char *name)
{
    char dir[S_PATH_LEN], secrets[S_PATH_LEN], from[S_PATH_LEN + 80], to[S_PATH_LEN + 80];
    snprintf(dir, sizeof dir, "%s/%s", s_dir, sub);
    snprintf(secrets, sizeof secrets, "%s/secrets", s_dir);
    mkdir(dir, 0755);
    mkdir(secrets, 0755);
    assert_int_equal(oq_keys_generate(pair), 0);
    assert_int_equal(oq_keys_save(pair, secrets, name, true, s_reason, sizeof s_reason), 0);
    snprintf(from, sizeof from, "%s/%s.key", secrets, name);
    snprintf(to, sizeof to, "%s/%s.key", dir, name);
    assert_int_equal(rename(from, to), 0);
}

static void s_write(const char *file, const char *text)
{
    char path[S_PATH_LEN];
    snprintf(path, sizeof path, "%s/%s", s_dir, file);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_roles_by_key(void **state)
{
    (void)state;
    oq_keypair_t p, w, a, stranger;
    s_allow(&p, "producers", "orders");
    s_allow(&w, "workers", "pool-1");
    s_allow(&a, "admins", "ops");
    assert_int_equal(oq_keys_generate(&stranger), 0);
    /* Ignored: other files, hidden files, and a secret put here by mistake. */
    s_write("producers/README", "the producers' keys\n");
    s_write("producers/.hidden.key", "not read\n");
    char secret[S_PATH_LEN], copy[S_PATH_LEN];
    snprintf(secret, sizeof secret, "%s/secrets/pool-1.key_secret", s_dir);
    snprintf(copy, sizeof copy, "%s/workers/pool-1.key_secret", s_dir);
    assert_int_equal(link(secret, copy), 0);

    oq_keystore_t *ks = oq_keystore_load(s_dir, s_reason, sizeof s_reason);
    if (!ks)
        fail_msg("%s", s_reason);
    const char *name;
    assert_int_equal(oq_keystore_role_z85(ks, p.public_z85, &name), OQ_ROLE_PRODUCER);
    assert_string_equal(name, "orders");
    assert_int_equal(oq_keystore_role_z85(ks, w.public_z85, &name), OQ_ROLE_WORKER);
    assert_string_equal(name, "pool-1");
    assert_int_equal(oq_keystore_role_z85(ks, a.public_z85, NULL), OQ_ROLE_ADMIN);
    assert_int_equal(oq_keystore_role_z85(ks, stranger.public_z85, &name), OQ_ROLE_NONE);
    assert_string_equal(name, "");
    assert_int_equal(oq_keystore_role_z85(ks, "not z85", NULL), OQ_ROLE_NONE);
    /* The broker's own key is no peer's. */
    assert_int_equal(oq_keystore_role_z85(ks, oq_keystore_broker(ks)->public_z85, NULL),
                     OQ_ROLE_NONE);
    assert_int_equal(oq_keystore_count(ks, OQ_ROLE_PRODUCER), 1);
    assert_int_equal(oq_keystore_count(ks, OQ_ROLE_WORKER), 1);
    assert_int_equal(oq_keystore_count(ks, OQ_ROLE_ADMIN), 1);
    uint8_t raw[OQ_KEY_BYTES];
    assert_int_equal(oq_keys_decode(w.public_z85, raw), 0);
    assert_int_equal(oq_keystore_role(ks, raw, NULL), OQ_ROLE_WORKER);
    oq_keystore_destroy(&ks);
    assert_null(ks);
}

static void test_missing_role_dirs_and_copies(void **state)
{
    (void)state;
    oq_keypair_t w;
    s_allow(&w, "workers", "one");
    /* The same public key twice in one role is a copy, not an error. */
    char from[S_PATH_LEN], to[S_PATH_LEN];
    snprintf(from, sizeof from, "%s/workers/one.key", s_dir);
    snprintf(to, sizeof to, "%s/workers/one-copy.key", s_dir);
    assert_int_equal(link(from, to), 0);
    oq_keystore_t *ks = oq_keystore_load(s_dir, s_reason, sizeof s_reason);
    if (!ks)
        fail_msg("%s", s_reason);
    assert_int_equal(oq_keystore_count(ks, OQ_ROLE_WORKER), 1);
    assert_int_equal(oq_keystore_count(ks, OQ_ROLE_PRODUCER), 0);
    oq_keystore_destroy(&ks);
}

static void test_refusals(void **state)
{
    (void)state;
    oq_keypair_t p;
    s_allow(&p, "producers", "orders");
    /* One key, two roles. */
    char from[S_PATH_LEN], to[S_PATH_LEN];
    mkdir(strcat(strcpy(to, s_dir), "/admins"), 0755);
    snprintf(from, sizeof from, "%s/producers/orders.key", s_dir);
    snprintf(to, sizeof to, "%s/admins/orders-too.key", s_dir);
    assert_int_equal(link(from, to), 0);
    assert_null(oq_keystore_load(s_dir, s_reason, sizeof s_reason));
    assert_non_null(strstr(s_reason, "producers/orders.key and admins/orders-too.key"));
    unlink(to);

    /* A file named .key that is no key: refused, named. */
    s_write("producers/bad.key", "hello\n");
    assert_null(oq_keystore_load(s_dir, s_reason, sizeof s_reason));
    assert_non_null(strstr(s_reason, "producers/bad.key"));
    s_write("producers/bad.key", "");
    snprintf(to, sizeof to, "%s/producers/bad.key", s_dir);
    unlink(to);

    /* No broker pair: refused, with the command that makes one. */
    char pair[S_PATH_LEN];
    snprintf(pair, sizeof pair, "%s/broker.key_secret", s_dir);
    unlink(pair);
    assert_null(oq_keystore_load(s_dir, s_reason, sizeof s_reason));
    assert_non_null(strstr(s_reason, "onceq keygen --dir"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roles_by_key, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_missing_role_dirs_and_copies, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
