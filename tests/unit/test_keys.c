/*  test_keys.c: key files (onceq/keys.h): a pair written loads back, the
    secret file is 0600, czmq's zcert reads ours and we read czmq's, and
    every kind of bad file is refused with a reason naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <czmq.h>

#include "onceq/keys.h"
#include "support.h"

#define S_PATH_LEN 512

static char s_dir[256];
static char s_reason[512];

static int s_setup(void **state)
{
    (void)state;
    return oq_support_temp_dir("onceq-keys", s_dir, sizeof s_dir);
}

static int s_teardown(void **state)
{
    (void)state;
    return oq_support_remove_tree(s_dir);
}

static void s_path(char *out, const char *file)
{
    snprintf(out, S_PATH_LEN, "%s/%s", s_dir, file);
}

static void s_write(const char *file, const char *text)
{
    char path[S_PATH_LEN];
    s_path(path, file);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_z85_checks(void **state)
{
    (void)state;
    oq_keypair_t pair;
    assert_int_equal(oq_keys_generate(&pair), 0);
    assert_true(oq_keys_z85_valid(pair.public_z85, strlen(pair.public_z85)));
    assert_true(oq_keys_z85_valid(pair.secret_z85, strlen(pair.secret_z85)));
    assert_false(oq_keys_z85_valid(pair.public_z85, 39));
    char bad[OQ_KEY_Z85_LEN + 1];
    memcpy(bad, pair.public_z85, sizeof bad);
    bad[7] = '"'; /* not in the alphabet */
    assert_false(oq_keys_z85_valid(bad, OQ_KEY_Z85_LEN));
    bad[7] = ' ';
    assert_false(oq_keys_z85_valid(bad, OQ_KEY_Z85_LEN));
    uint8_t raw[OQ_KEY_BYTES];
    char back[OQ_KEY_Z85_LEN + 1];
    assert_int_equal(oq_keys_decode(pair.public_z85, raw), 0);
    oq_keys_encode(raw, back);
    assert_string_equal(back, pair.public_z85);
    assert_int_equal(oq_keys_decode("short", raw), -1);
}

static void test_names(void **state)
{
    (void)state;
    assert_true(oq_keys_name_valid("broker"));
    assert_true(oq_keys_name_valid("worker-01.host_a"));
    assert_false(oq_keys_name_valid(""));
    assert_false(oq_keys_name_valid(".hidden"));
    assert_false(oq_keys_name_valid("a/b"));
    assert_false(oq_keys_name_valid("a b"));
    char longer[OQ_KEY_NAME_MAX + 2];
    memset(longer, 'k', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    assert_false(oq_keys_name_valid(longer));
}

static void test_save_and_load(void **state)
{
    (void)state;
    oq_keypair_t pair, loaded;
    assert_int_equal(oq_keys_generate(&pair), 0);
    assert_int_equal(oq_keys_save(&pair, s_dir, "alice", false, s_reason, sizeof s_reason), 0);
    char path[S_PATH_LEN];
    s_path(path, "alice.key_secret");
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(oq_keys_load_pair(path, &loaded, s_reason, sizeof s_reason), 0);
    assert_string_equal(loaded.public_z85, pair.public_z85);
    assert_string_equal(loaded.secret_z85, pair.secret_z85);
    char pub[OQ_KEY_Z85_LEN + 1];
    assert_int_equal(oq_keys_load_public(path, pub, s_reason, sizeof s_reason), 0);
    assert_string_equal(pub, pair.public_z85);
    s_path(path, "alice.key");
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    assert_int_equal(oq_keys_load_public(path, pub, s_reason, sizeof s_reason), 0);
    assert_string_equal(pub, pair.public_z85);
    /* The public file is not a pair. */
    assert_int_equal(oq_keys_load_pair(path, &loaded, s_reason, sizeof s_reason), -1);
    assert_non_null(strstr(s_reason, "no secret-key"));
}

static void test_no_overwrite(void **state)
{
    (void)state;
    oq_keypair_t first, second, loaded;
    assert_int_equal(oq_keys_generate(&first), 0);
    assert_int_equal(oq_keys_generate(&second), 0);
    assert_int_equal(oq_keys_save(&first, s_dir, "bob", false, s_reason, sizeof s_reason), 0);
    assert_int_equal(oq_keys_save(&second, s_dir, "bob", false, s_reason, sizeof s_reason), -1);
    assert_non_null(strstr(s_reason, "exists already"));
    char path[S_PATH_LEN];
    s_path(path, "bob.key_secret");
    assert_int_equal(oq_keys_load_pair(path, &loaded, s_reason, sizeof s_reason), 0);
    assert_string_equal(loaded.public_z85, first.public_z85);
    assert_int_equal(oq_keys_save(&second, s_dir, "bob", true, s_reason, sizeof s_reason), 0);
    assert_int_equal(oq_keys_load_pair(path, &loaded, s_reason, sizeof s_reason), 0);
    assert_string_equal(loaded.public_z85, second.public_z85);
    assert_int_equal(oq_keys_save(&second, s_dir, "../x", false, s_reason, sizeof s_reason), -1);
}

/* czmq reads what we write, and we read what czmq writes. */
static void test_zcert_interop(void **state)
{
    (void)state;
    oq_keypair_t pair, loaded;
    assert_int_equal(oq_keys_generate(&pair), 0);
    assert_int_equal(oq_keys_save(&pair, s_dir, "ours", false, s_reason, sizeof s_reason), 0);
    char path[S_PATH_LEN];
    s_path(path, "ours.key_secret");
    zcert_t *cert = zcert_load(path);
    assert_non_null(cert);
    assert_string_equal(zcert_public_txt(cert), pair.public_z85);
    assert_string_equal(zcert_secret_txt(cert), pair.secret_z85);
    zcert_destroy(&cert);

    cert = zcert_new();
    assert_non_null(cert);
    zcert_set_meta(cert, "name", "%s", "theirs");
    s_path(path, "theirs.key");
    assert_int_equal(zcert_save(cert, path), 0);
    s_path(path, "theirs.key_secret");
    assert_int_equal(oq_keys_load_pair(path, &loaded, s_reason, sizeof s_reason), 0);
    assert_string_equal(loaded.public_z85, zcert_public_txt(cert));
    assert_string_equal(loaded.secret_z85, zcert_secret_txt(cert));
    char pub[OQ_KEY_Z85_LEN + 1];
    s_path(path, "theirs.key");
    assert_int_equal(oq_keys_load_public(path, pub, s_reason, sizeof s_reason), 0);
    assert_string_equal(pub, zcert_public_txt(cert));
    zcert_destroy(&cert);
}

static void s_expect_refused(const char *file, const char *why)
{
    char path[S_PATH_LEN];
    s_path(path, file);
    oq_keypair_t pair;
    char pub[OQ_KEY_Z85_LEN + 1];
    s_reason[0] = 0;
    int rc = strstr(file, "_secret") ? oq_keys_load_pair(path, &pair, s_reason, sizeof s_reason)
                                     : oq_keys_load_public(path, pub, s_reason, sizeof s_reason);
    assert_int_equal(rc, -1);
    if (!strstr(s_reason, why) || !strstr(s_reason, path))
        fail_msg("refusing %s: expected \"%s\" in \"%s\"", file, why, s_reason);
}

static void test_bad_files(void **state)
{
    (void)state;
    oq_keypair_t a, b;
    assert_int_equal(oq_keys_generate(&a), 0);
    assert_int_equal(oq_keys_generate(&b), 0);
    char text[1024];

    s_expect_refused("missing.key", "cannot read");
    s_write("empty.key", "");
    s_expect_refused("empty.key", "no public-key");
    s_write("prose.key", "hello, this is not a key\n");
    s_expect_refused("prose.key", "no public-key");
    /* A key outside the curve section is not the key. */
    snprintf(text, sizeof text, "metadata\n    public-key = \"%s\"\n", a.public_z85);
    s_write("outside.key", text);
    s_expect_refused("outside.key", "no public-key");
    s_write("short.key", "curve\n    public-key = \"abc\"\n");
    s_expect_refused("short.key", "line 2: public-key is not one key");
    snprintf(text, sizeof text, "curve\n    public-key = \"%s\" trailing\n", a.public_z85);
    s_write("trailing.key", text);
    s_expect_refused("trailing.key", "line 2");
    snprintf(text, sizeof text, "curve\n    public-key = \"%s\"\n    public-key = \"%s\"\n",
             a.public_z85, b.public_z85);
    s_write("twice.key", text);
    s_expect_refused("twice.key", "a second public-key");
    /* A secret that is not the public key's. */
    snprintf(text, sizeof text, "curve\n    public-key = \"%s\"\n    secret-key = \"%s\"\n",
             a.public_z85, b.secret_z85);
    s_write("mixed.key_secret", text);
    s_expect_refused("mixed.key_secret", "does not belong");
    char big[OQ_KEY_FILE_MAX + 16];
    memset(big, '#', sizeof big - 1);
    big[sizeof big - 1] = 0;
    s_write("big.key", big);
    s_expect_refused("big.key", "larger than");

    /* Bare values and comments are read like zcert's. */
    snprintf(text, sizeof text,
             "# a comment\n\nmetadata\n    name = \"x\"\ncurve\n    public-key = %s\n",
             a.public_z85);
    s_write("bare.key", text);
    char path[S_PATH_LEN], pub[OQ_KEY_Z85_LEN + 1];
    s_path(path, "bare.key");
    assert_int_equal(oq_keys_load_public(path, pub, s_reason, sizeof s_reason), 0);
    assert_string_equal(pub, a.public_z85);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_z85_checks),
        cmocka_unit_test(test_names),
        cmocka_unit_test_setup_teardown(test_save_and_load, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_no_overwrite, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_zcert_interop, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_bad_files, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
