/*  test_web_parts: onceq-web's modules that need no server: the users file
    (web_users.h: what it refuses, the password and CSRF checks), the page
    buffer (web_buf.h: escaping, the page limit) and the guard on guessing
    passwords (web_guard.h: the count per address and its window). */
#include <crypt.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "web_buf.h"
#include "web_guard.h"
#include "web_users.h"

static char s_path[64];

/* Write text to a fresh file of mode mode; its path in s_path. */
static void s_file(const char *text, mode_t mode)
{
    snprintf(s_path, sizeof s_path, "/tmp/onceq-web-users-XXXXXX");
    int fd = mkstemp(s_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(chmod(s_path, mode), 0);
}

static void s_refused(const char *text, mode_t mode, const char *needle)
{
    s_file(text, mode);
    char reason[512] = "";
    oq_web_users_t *users = oq_web_users_load(s_path, reason, sizeof reason);
    unlink(s_path);
    assert_null(users);
    if (!strstr(reason, needle))
        fail_msg("expected \"%s\" in: %s", needle, reason);
}

static void test_users_file(void **state)
{
    (void)state;
    struct crypt_data data;
    memset(&data, 0, sizeof data);
    char hash[256];
    snprintf(hash, sizeof hash, "%s", crypt_r("s3cret", "$6$unitsalt$", &data));
    char text[1024];
    snprintf(text, sizeof text, "# who\n\nalice admin %s\n  vic viewer %s\n", hash, hash);

    s_refused(text, 0644, "readable by group or others");
    s_refused("alice owner $6$x$y\n", 0600, "the role is admin or viewer");
    s_refused("alice admin\n", 0600, "expected NAME ROLE HASH");
    s_refused("alice admin plaintext\n", 0600, "crypt(3) hash");
    s_refused("a:b admin $6$x$y\n", 0600, "without ':'");
    s_refused("a admin $6$x$y\na viewer $6$x$y\n", 0600, "a user named twice");
    s_refused("# nobody\n", 0600, "no users");

    s_file(text, 0600);
    char reason[512] = "";
    oq_web_users_t *users = oq_web_users_load(s_path, reason, sizeof reason);
    unlink(s_path);
    assert_non_null(users);
    const oq_web_user_t *alice = oq_web_users_check(users, "alice", "s3cret");
    assert_non_null(alice);
    assert_int_equal(alice->role, OQ_WEB_ROLE_ADMIN);
    /* the second check of the same password takes the remembered digest */
    assert_ptr_equal(oq_web_users_check(users, "alice", "s3cret"), alice);
    assert_null(oq_web_users_check(users, "alice", "s3cret "));
    assert_null(oq_web_users_check(users, "alice", ""));
    assert_null(oq_web_users_check(users, "mallory", "s3cret"));
    assert_null(oq_web_users_check(users, NULL, NULL));
    const oq_web_user_t *vic = oq_web_users_check(users, "vic", "s3cret");
    assert_non_null(vic);
    assert_int_equal(vic->role, OQ_WEB_ROLE_VIEWER);
    /* each user's own CSRF token, of its full length */
    assert_int_equal(strlen(alice->csrf), OQ_WEB_CSRF_BYTES * 2);
    assert_string_not_equal(alice->csrf, vic->csrf);
    assert_true(oq_web_users_csrf_ok(alice, alice->csrf));
    assert_false(oq_web_users_csrf_ok(alice, vic->csrf));
    assert_false(oq_web_users_csrf_ok(alice, NULL));
    /* The token less its last character. */
    char cut[OQ_WEB_CSRF_BYTES * 2 + 1];
    memcpy(cut, alice->csrf, OQ_WEB_CSRF_BYTES * 2 - 1);
    cut[OQ_WEB_CSRF_BYTES * 2 - 1] = 0;
    assert_false(oq_web_users_csrf_ok(alice, cut));
    oq_web_users_destroy(&users);
    assert_null(users);
}

static void test_buf_escapes_and_stops_at_its_limit(void **state)
{
    (void)state;
    oq_web_buf_t b = {0};
    oq_web_buf_escape(&b, "<a href=\"x\">'&'</a>\0z", 21);
    assert_string_equal(b.data,
                        "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;\xef\xbf\xbdz");
    oq_web_buf_reset(&b);
    oq_web_buf_urlencode(&b, "a b&c=d/é", strlen("a b&c=d/é"));
    assert_string_equal(b.data, "a%20b%26c%3Dd%2F%C3%A9");
    oq_web_buf_reset(&b);
    static char chunk[65536];
    memset(chunk, 'x', sizeof chunk);
    for (size_t i = 0; i < OQ_WEB_MAX_PAGE_BYTES / sizeof chunk + 1; i++)
        oq_web_buf_add(&b, chunk, sizeof chunk);
    assert_true(oq_web_buf_failed(&b));
    assert_true(b.len < OQ_WEB_MAX_PAGE_BYTES);
    oq_web_buf_reset(&b);
    assert_false(oq_web_buf_failed(&b));
    oq_web_buf_printf(&b, "%0600d", 7); /* longer than the small buffer */
    assert_int_equal(b.len, 600);
    size_t len;
    char *text = oq_web_buf_take(&b, &len);
    assert_int_equal(len, 600);
    assert_int_equal(text[599], '7');
    free(text);
}

static void test_guard_counts_failures_per_address_in_a_window(void **state)
{
    (void)state;
    static oq_web_guard_t guard;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    struct sockaddr_in b = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002)};
    int64_t t = 1000000;
    for (int i = 0; i < OQ_WEB_MAX_LOGIN_FAILURES; i++) {
        assert_true(oq_web_guard_allows(&guard, (struct sockaddr *)&a, t + i));
        oq_web_guard_failed(&guard, (struct sockaddr *)&a, t + i);
    }
    assert_false(oq_web_guard_allows(&guard, (struct sockaddr *)&a, t + 100));
    assert_true(oq_web_guard_allows(&guard, (struct sockaddr *)&b, t + 100));
    assert_true(oq_web_guard_allows(&guard, (struct sockaddr *)&a, t + OQ_WEB_LOGIN_WINDOW_MS));
    /* a full table drops the oldest window, never refuses to count */
    for (uint32_t i = 0; i < OQ_WEB_GUARD_SLOTS + 10; i++) {
        struct sockaddr_in c = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x0a000000 + i)};
        oq_web_guard_failed(&guard, (struct sockaddr *)&c, t + 200 + i);
    }
    oq_web_guard_failed(&guard, NULL, t + 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_users_file),
        cmocka_unit_test(test_buf_escapes_and_stops_at_its_limit),
        cmocka_unit_test(test_guard_counts_failures_per_address_in_a_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
