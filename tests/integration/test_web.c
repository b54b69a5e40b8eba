/*  test_web: onceq-web against the real broker, over CURVE as an admin,
    spoken to over HTTP as a browser would (libcurl), with a raw worker
    socket so that each job fails or goes to review exactly when the test
    says.

    (i)   Without a login, or with a wrong password, every page is 401.
    (ii)  The overview shows the queue's counts as the broker's stats has
          them (failed 1, review 1); the failed page lists the job with
          its error, filtered by type, error text and age, the review page
          with its reason.
    (iii) An action without the user's CSRF token is 403, a viewer's is
          403 and a viewer's pages hold no action form; the admin's retry
          puts the failed job back (the worker gets it again), its resolve
          with a note takes the review job out of the review store (and
          `onceq review show` has the note).
    (iv)  Bad input gets an error page, never a crash: an unknown id 404,
          an id that is no number 400, a query over the header limit 414,
          a value over 256 bytes 400, a form that is not a form 400, a body
          over the limit 413, an unknown page 404; onceq-web and the broker
          answer after all of it.
    (v)   Ten failed logins from one address within a minute, and it is
          answered 429 without a check, the right password too. */
#include <crypt.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "harness.h"
#include "onceq/limits.h"

#define S_CALL_MS        5000
#define S_HTTP_TIMEOUT_S 20
#define S_PASSWORD       "correct horse"

static int s_setup(void **state)
{
    *state = it_new("web");
    return *state ? 0 : -1;
}

typedef struct {
    char *text;
    size_t len;
} s_body_t;

static size_t s_collect(char *data, size_t size, size_t n, void *ctx)
{
    s_body_t *body = ctx;
    char *grown = realloc(body->text, body->len + size * n + 1);
    if (!grown)
        return 0;
    memcpy(grown + body->len, data, size * n);
    body->len += size * n;
    grown[body->len] = 0;
    body->text = grown;
    return size * n;
}

/* GET (form NULL) or POST form to port's path as user (NULL: no login);
   content_type replaces the form's. The body (caller frees), the status
   in *status. */
static char *s_http(unsigned port, const char *path, const char *user, const char *password,
                    const char *form, const char *content_type, long *status)
{
    char url[200100];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
    CURL *curl = curl_easy_init();
    assert_non_null(curl);
    s_body_t body = {calloc(1, 1), 0};
    struct curl_slist *headers = NULL;
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, (long)S_HTTP_TIMEOUT_S);
    if (user) {
        curl_easy_setopt(curl, CURLOPT_USERNAME, user);
        curl_easy_setopt(curl, CURLOPT_PASSWORD, password);
    }
    if (form)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, form);
    if (content_type) {
        char line[128];
        snprintf(line, sizeof line, "Content-Type: %s", content_type);
        headers = curl_slist_append(headers, line);
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    }
    CURLcode rc = curl_easy_perform(curl);
    if (rc != CURLE_OK)
        fail_msg("%s %s: %s", form ? "POST" : "GET", path, curl_easy_strerror(rc));
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return body.text;
}

/* A page that must answer want and hold needle (NULL: anything). */
static char *s_expect(unsigned port, const char *path, const char *user, const char *form,
                      long want, const char *needle)
{
    long status = 0;
    char *text = s_http(port, path, user, user ? S_PASSWORD : NULL, form, NULL, &status);
    if (status != want)
        fail_msg("%s %s as %s: HTTP %ld, wanted %ld:\n%.2000s", form ? "POST" : "GET", path,
                 user ? user : "nobody", status, want, text);
    if (needle && !strstr(text, needle))
        fail_msg("%s %s: no \"%s\" in:\n%.4000s", form ? "POST" : "GET", path, needle, text);
    return text;
}

static void s_expect_free(unsigned port, const char *path, const char *user, const char *form,
                          long want, const char *needle)
{
    free(s_expect(port, path, user, form, want, needle));
}

/* The users file: alice admin, vic viewer, both with S_PASSWORD. */
static void s_users(it_t *it, char *path, size_t len)
{
    snprintf(path, len, "%s/users", it->dir);
    struct crypt_data data;
    memset(&data, 0, sizeof data);
    const char *hash = crypt_r(S_PASSWORD, "$6$onceqtestsalt$", &data);
    assert_non_null(hash);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "# test users\nalice admin %s\nvic viewer %s\n", hash, hash);
    fclose(f);
    assert_int_equal(chmod(path, 0600), 0);
}

static unsigned s_start_web(it_t *it)
{
    char users[400];
    s_users(it, users, sizeof users);
    const char *argv[] = {it_bin("onceq-web"),
                          "--users",
                          users,
                          "--broker",
                          it->front,
                          "--key",
                          it_key_file(it, IT_ROLE_ADMIN),
                          "--broker-key",
                          it->broker_key,
                          "--listen",
                          "127.0.0.1:0",
                          NULL};
    assert_true(it_spawn(it, "web", argv) > 0);
    assert_int_equal(it_wait_log(it, "web", "(port ", 1, IT_WAIT_MS), 0);
    char *log = it_read_log(it, "web");
    const char *at = strstr(log, "(port ");
    unsigned port = (unsigned)strtoul(at + 6, NULL, 10);
    free(log);
    assert_true(port > 0);
    return port;
}

static void *s_worker(it_t *it)
{
    void *w = it_socket(it, ZMQ_DEALER, it->back);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ready(&buf, 1, "raw", 1);
    it_send(w, &buf);
    msgpack_sbuffer_destroy(&buf);
    oq_msg_t msg;
    assert_int_equal(it_expect(w, OQ_CMD_WELCOME, &msg, S_CALL_MS), 0);
    oq_proto_msg_release(&msg);
    return w;
}

/* The raw worker takes job id and reports outcome with text. */
static void s_run(void *w, uint64_t id, oq_outcome_t outcome, const char *text)
{
    oq_msg_t job;
    assert_int_equal(it_expect(w, OQ_CMD_JOB, &job, S_CALL_MS), 0);
    assert_int_equal(job.job.id, id);
    oq_ack_msg_t ack = {
        .id = job.job.id,
        .attempt = job.job.attempt,
        .outcome = outcome,
        .error = oq_str(text ? text : ""),
        .credit = 1,
        .lease = job.job.lease,
        .has_lease = true,
    };
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    oq_proto_encode_ack(&buf, &ack);
    it_send(w, &buf);
    msgpack_sbuffer_destroy(&buf);
    oq_proto_msg_release(&job);
}

/* The CSRF token on a page (the value of the first csrf field). */
static void s_csrf(const char *page, char *out, size_t len)
{
    const char *at = strstr(page, "name=\"csrf\" value=\"");
    if (!at)
        fail_msg("no CSRF token on the page:\n%.2000s", page);
    at += strlen("name=\"csrf\" value=\"");
    size_t n = strcspn(at, "\"");
    assert_true(n > 0 && n < len);
    memcpy(out, at, n);
    out[n] = 0;
}

static void test_pages_login_csrf_actions_and_bad_input(void **state)
{
    it_t *it = *state;
    assert_true(it_start_broker(it, NULL) > 0);
    unsigned port = s_start_web(it);
    void *w = s_worker(it);
    oq_job_msg_t options = {.max_tries = 1, .has_max_tries = true};
    uint64_t failed_id = it_dispatch(it, "noop", NULL, &options);
    uint64_t review_id = it_dispatch(it, "noop", NULL, &options);
    s_run(w, failed_id, OQ_OUTCOME_FAIL, "boom: the card was declined");
    s_run(w, review_id, OQ_OUTCOME_REVIEW, "carrier timed out");
    it_stats_t stats;
    int64_t end = it_now_ms() + IT_WAIT_MS;
    do
        assert_int_equal(it_stats(it, &stats), 0);
    while ((stats.failed != 1 || stats.review != 1) && it_now_ms() < end);
    assert_int_equal(stats.failed, 1);
    assert_int_equal(stats.review, 1);

    /* (i) a login for everything */
    long status = 0;
    free(s_http(port, "/", NULL, NULL, NULL, NULL, &status));
    assert_int_equal(status, 401);
    free(s_http(port, "/failed", "alice", "wrong", NULL, NULL, &status));
    assert_int_equal(status, 401);
    free(s_http(port, "/static/style.css", NULL, NULL, NULL, NULL, &status));
    assert_int_equal(status, 401);

    /* (ii) the counts and the stores */
    char *page = s_expect(port, "/", "alice", NULL, 200, "<td data-col=\"name\">");
    assert_non_null(strstr(page, "<td data-col=\"failed\">1</td>"));
    assert_non_null(strstr(page, "<td data-col=\"review\">1</td>"));
    free(page);
    char path[256], form[512], id[24], csrf[128];
    snprintf(id, sizeof id, "job-%llu", (unsigned long long)failed_id);
    page = s_expect(port, "/failed", "alice", NULL, 200, id);
    assert_non_null(strstr(page, "boom: the card was declined"));
    s_csrf(page, csrf, sizeof csrf);
    free(page);
    s_expect_free(port, "/review", "alice", NULL, 200, "carrier timed out");
    s_expect_free(port, "/failed?type=noop&q=card", "alice", NULL, 200, id);
    s_expect_free(port, "/failed?type=fail", "alice", NULL, 200, "no failed job here");
    s_expect_free(port, "/failed?older=60", "alice", NULL, 200, "no failed job here");
    s_expect_free(port, "/failed?older=0", "alice", NULL, 400, "older: expected minutes");
    page = s_expect(port, "/workers", "alice", NULL, 200, "<td>raw</td>");
    assert_non_null(strstr(page, "<td data-col=\"state\">ready</td>"));
    assert_null(strstr(page, "class=\"bad\""));
    free(page);
    s_expect_free(port, "/static/live.js", "vic", NULL, 200, "X-Onceq-Live");

    /* (iii) actions: CSRF, roles, and what they do */
    snprintf(form, sizeof form, "op=retry&id=%llu", (unsigned long long)failed_id);
    s_expect_free(port, "/action", "alice", form, 403, "CSRF");
    snprintf(form, sizeof form, "op=retry&id=%llu&csrf=%s", (unsigned long long)failed_id,
             "00112233445566778899aabbccddeeff0011223344556677");
    s_expect_free(port, "/action", "alice", form, 403, "CSRF");
    snprintf(form, sizeof form, "op=retry&id=%llu&csrf=%s", (unsigned long long)failed_id, csrf);
    s_expect_free(port, "/action", "vic", form, 403, "viewer");
    page = s_expect(port, "/failed", "vic", NULL, 200, id);
    assert_null(strstr(page, "method=\"post\""));
    free(page);
    /* what cannot be undone asks first, and does nothing until confirmed */
    char confirm_form[512];
    snprintf(confirm_form, sizeof confirm_form, "op=flush&csrf=%s", csrf);
    page = s_expect(port, "/action", "alice", confirm_form, 200, "Delete for good");
    assert_non_null(strstr(page, "name=\"confirm\" value=\"yes\""));
    free(page);
    snprintf(confirm_form, sizeof confirm_form, "op=forget&id=%llu&csrf=%s",
             (unsigned long long)failed_id, csrf);
    s_expect_free(port, "/action", "alice", confirm_form, 200, "id=\"question\"");
    assert_int_equal(it_stats(it, &stats), 0);
    assert_int_equal(stats.failed, 1);
    s_expect_free(port, "/action", "alice", form, 200, "ready again");
    s_run(w, failed_id, OQ_OUTCOME_OK, NULL);
    s_expect_free(port, "/failed", "alice", NULL, 200, "no failed job here");

    snprintf(path, sizeof path, "/review/show?id=%llu", (unsigned long long)review_id);
    page = s_expect(port, path, "alice", NULL, 200, "carrier timed out");
    assert_non_null(strstr(page, "id=\"resolve\""));
    free(page);
    snprintf(form, sizeof form, "op=resolve&id=%llu&action=done&note=SHP-42+delivered&csrf=%s",
             (unsigned long long)review_id, csrf);
    s_expect_free(port, "/action", "alice", form, 200, "is resolved: done");
    s_expect_free(port, "/review", "alice", NULL, 200, "no job waits for review");
    char idtext[24];
    snprintf(idtext, sizeof idtext, "%llu", (unsigned long long)review_id);
    char *out = it_cli(it, "review-show", 0, "review", "show", idtext, NULL);
    it_expect_output(out, "SHP-42 delivered");
    assert_int_equal(it_log_count(it, "web", "alice: resolve job"), 1);
    assert_int_equal(it_log_count(it, "web", "alice: retry job"), 1);

    /* (iv) bad input */
    s_expect_free(port, "/job?id=987654321", "alice", NULL, 404, "never issued");
    s_expect_free(port, "/job?id=abc", "alice", NULL, 400, "expected id");
    s_expect_free(port, "/review/show?id=-1", "alice", NULL, 400, "expected id");
    s_expect_free(port, "/failed?limit=100000", "alice", NULL, 400, "limit");
    static char huge[100100];
    memcpy(huge, "/failed?q=", 10);
    memset(huge + 10, 'a', sizeof huge - 11);
    free(s_http(port, huge, "alice", S_PASSWORD, NULL, NULL, &status));
    assert_int_equal(status, 414);
    char longish[400] = "/failed?q=";
    memset(longish + 10, 'b', 300);
    s_expect_free(port, longish, "alice", NULL, 400, "over 256 bytes");
    free(s_http(port, "/action", "alice", S_PASSWORD, "{\"op\":\"retry\"}", "application/json",
                &status));
    assert_int_equal(status, 400);
    static char big[40000];
    memset(big, 'x', sizeof big - 1);
    memcpy(big, "note=", 5);
    free(s_http(port, "/action", "alice", S_PASSWORD, big, NULL, &status));
    assert_int_equal(status, 413);
    snprintf(form, sizeof form, "op=explode&id=1&csrf=%s", csrf);
    s_expect_free(port, "/action", "alice", form, 400, "op: expected");
    s_expect_free(port, "/nope", "alice", NULL, 404, "no such page");
    s_expect_free(port, "/action", "alice", NULL, 405, "POST");
    s_expect_free(port, "/", "vic", NULL, 200, "Overview");
    assert_int_equal(it_stats(it, &stats), 0);

    /* (v) guessing: after 10 failed logins from one address within a
       minute (one was above), it is answered 429 without a check, the
       right password too */
    int failures = 1;
    for (; failures < 20; failures++) {
        free(s_http(port, "/", "alice", "guess", NULL, NULL, &status));
        if (status == 429)
            break;
        assert_int_equal(status, 401);
    }
    assert_int_equal(failures, 10);
    free(s_http(port, "/", "alice", S_PASSWORD, NULL, NULL, &status));
    assert_int_equal(status, 429);
    free(s_http(port, "/", NULL, NULL, NULL, NULL, &status));
    assert_int_equal(status, 401);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pages_login_csrf_actions_and_bad_input, s_setup,
                                        it_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
