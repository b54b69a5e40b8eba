/*  carrier.c: the HTTP call. What decides between "nothing was sent" and
    "outcome unknown" is whether libcurl sent any of the request: its
    CURLINFO_REQUEST_SIZE is the bytes of request it issued, 0 while the
    connection was never made. A timeout with bytes sent, an empty reply
    (the carrier's dropped reply: CURLE_GOT_NOTHING) or a connection reset
    while waiting are all "the carrier may have done it". */
#include "shipments/carrier.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define S_PATH       "/shipments"
#define S_URL_LEN    2048
#define S_HEADER_LEN (OQ_SHIPMENT_MAX_KEY_LEN + 32)
#define S_REPLAYED   "idempotent-replayed:"

typedef struct {
    char *data;
    size_t len;
} s_buffer_t;

void oq_carrier_global_init(void)
{
    static bool done;
    if (!done)
        curl_global_init(CURL_GLOBAL_DEFAULT);
    done = true;
}

const char *oq_carrier_transport_name(oq_carrier_transport_t transport)
{
    static const char *names[] = {"answered",    "refused",   "dns",
                                  "unreachable", "no_answer", "bad_url"};
    return transport <= OQ_CARRIER_BAD_URL ? names[transport] : "unknown";
}

int oq_carrier_check_url(const char *url, char *why, size_t why_len)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL;
    int rc = -1;
    CURLUcode code = u ? curl_url_set(u, CURLUPART_URL, url, 0) : CURLUE_OUT_OF_MEMORY;
    if (code != CURLUE_OK)
        snprintf(why, why_len, "an http:// or https:// URL (this one does not parse: %s)",
                 curl_url_strerror(code));
    else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
             (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0))
        snprintf(why, why_len, "an http:// or https:// URL, not %s://", scheme ? scheme : "?");
    else if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host[0])
        snprintf(why, why_len, "an http:// or https:// URL with a host");
    else
        rc = 0;
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    return rc;
}

static size_t s_on_body(char *data, size_t size, size_t count, void *ctx)
{
    s_buffer_t *b = ctx;
    size_t n = size * count, room = OQ_SHIPMENT_MAX_ANSWER_BYTES - b->len;
    size_t take = n < room ? n : room;
    if (take) {
        memcpy(b->data + b->len, data, take);
        b->len += take;
    }
    return n; /* the rest is dropped, not an error */
}

static size_t s_on_header(char *data, size_t size, size_t count, void *ctx)
{
    oq_carrier_answer_t *a = ctx;
    size_t n = size * count, prefix = strlen(S_REPLAYED);
    if (n > prefix && strncasecmp(data, S_REPLAYED, prefix) == 0) {
        const char *v = data + prefix;
        while (*v == ' ' || *v == '\t')
            v++;
        a->replayed = strncasecmp(v, "true", 4) == 0;
    }
    return n;
}

/* reference, error and message from a JSON answer; nothing if it is not one. */
static void s_read_answer(const s_buffer_t *b, oq_carrier_answer_t *a)
{
    json_t *o = json_loadb(b->data, b->len, 0, NULL);
    if (!json_is_object(o)) {
        if (b->len)
            snprintf(a->message, sizeof a->message, "%.*s", (int)(b->len < 200 ? b->len : 200),
                     b->data);
        json_decref(o);
        return;
    }
    const char *s;
    if ((s = json_string_value(json_object_get(o, "reference"))))
        snprintf(a->reference, sizeof a->reference, "%s", s);
    if ((s = json_string_value(json_object_get(o, "error"))))
        snprintf(a->error, sizeof a->error, "%s", s);
    if ((s = json_string_value(json_object_get(o, "message"))))
        snprintf(a->message, sizeof a->message, "%s", s);
    json_decref(o);
}

static void s_transport(CURL *curl, CURLcode code, const char *detail, oq_carrier_answer_t *a)
{
    long sent = 0;
    curl_easy_getinfo(curl, CURLINFO_REQUEST_SIZE, &sent);
    a->timed_out = code == CURLE_OPERATION_TIMEDOUT;
    snprintf(a->message, sizeof a->message, "%s", detail[0] ? detail : curl_easy_strerror(code));
    switch (code) {
    case CURLE_COULDNT_CONNECT: {
        /* Refused, or no route: nothing went out either way. */
        long os_errno = 0;
        curl_easy_getinfo(curl, CURLINFO_OS_ERRNO, &os_errno);
        a->transport = os_errno == ECONNREFUSED ? OQ_CARRIER_REFUSED : OQ_CARRIER_UNREACHABLE;
        break;
    }
    case CURLE_COULDNT_RESOLVE_HOST:
        a->transport = OQ_CARRIER_DNS;
        break;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
        a->transport = OQ_CARRIER_BAD_URL;
        break;
    default:
        /* A timeout while connecting, or a TLS failure before the request:
           nothing of the request went out. Anything after: unknown. */
        a->transport = sent > 0 ? OQ_CARRIER_NO_ANSWER : OQ_CARRIER_UNREACHABLE;
        break;
    }
}

void oq_carrier_post(const char *base_url, const char *key, const char *body, int64_t connect_ms,
                     int64_t total_ms, oq_carrier_answer_t *answer)
{
    memset(answer, 0, sizeof *answer);
    char url[S_URL_LEN], header[S_HEADER_LEN], detail[CURL_ERROR_SIZE] = "";
    size_t base = strlen(base_url);
    while (base > 0 && base_url[base - 1] == '/')
        base--;
    if ((size_t)snprintf(url, sizeof url, "%.*s" S_PATH, (int)base, base_url) >= sizeof url) {
        answer->transport = OQ_CARRIER_BAD_URL;
        snprintf(answer->message, sizeof answer->message, "the carrier URL is too long");
        return;
    }
    snprintf(header, sizeof header, "Idempotency-Key: %s", key);
    s_buffer_t got = {malloc(OQ_SHIPMENT_MAX_ANSWER_BYTES), 0};
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, header);
    headers = curl_slist_append(headers, "Content-Type: application/json");
    /* No "Expect: 100-continue" round trip for a small body. */
    headers = curl_slist_append(headers, "Expect:");
    if (!got.data || !curl || !headers) {
        answer->transport = OQ_CARRIER_UNREACHABLE;
        snprintf(answer->message, sizeof answer->message, "out of memory before the call");
        goto done;
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long)connect_ms);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)total_ms);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L); /* a worker with threads: no SIGALRM */
    curl_easy_setopt(curl, CURLOPT_PROXY, "");    /* never an environment proxy */
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, detail);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, s_on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &got);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, s_on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, answer);
    CURLcode code = curl_easy_perform(curl);
    if (code != CURLE_OK) {
        s_transport(curl, code, detail, answer);
        goto done;
    }
    answer->transport = OQ_CARRIER_ANSWERED;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer->status);
    s_read_answer(&got, answer);
done:
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    free(got.data);
}
