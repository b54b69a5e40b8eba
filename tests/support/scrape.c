/*  scrape.c: a broker's /metrics over HTTP (scrape.h). */
#include "scrape.h"

#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>

typedef struct {
    char *text; /* what came so far, NUL-terminated */
    size_t len;
} s_body_t;

static size_t s_collect(char *data, size_t size, size_t n, void *ctx)
{
    s_body_t *body = ctx;
    char *grown = realloc(body->text, body->len + size * n + 1);
    if (!grown)
        return 0; /* curl ends the transfer with an error */
    memcpy(grown + body->len, data, size * n);
    body->len += size * n;
    grown[body->len] = 0;
    body->text = grown;
    return size * n;
}

char *oq_scrape_get(const char *url, long timeout_s, long *status, const char **error)
{
    CURL *curl = curl_easy_init();
    if (!curl) {
        *error = "curl_easy_init failed";
        return NULL;
    }
    s_body_t body = {calloc(1, 1), 0};
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, timeout_s);
    CURLcode rc = curl_easy_perform(curl);
    if (rc == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(curl);
    if (rc != CURLE_OK || !body.text) {
        *error = rc != CURLE_OK ? curl_easy_strerror(rc) : "out of memory";
        free(body.text);
        return NULL;
    }
    return body.text;
}

double oq_scrape_value(const char *text, const char *series)
{
    size_t len = strlen(series);
    for (const char *line = text; line && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, series, len) == 0 && line[len] == ' ')
            return strtod(line + len + 1, NULL);
    }
    return -1;
}
