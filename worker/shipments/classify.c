/*  classify.c: the table of classify.h. The one idea behind it: only an
    answer that proves something settles the request. A 2xx proves the
    shipment exists; a 4xx other than 422 proves the carrier refused it;
    a refused connection or a 5xx proves, as far as anyone can, that
    nothing happened yet, so another try is safe and may succeed. Silence
    after the request went out proves nothing: the same key makes another
    try safe, and when the tries run out the question goes to a person
    rather than being answered by a guess. So does an answer that
    contradicts what the record already holds. */
#include "shipments/classify.h"

#include <stdio.h>
#include <string.h>

const char *oq_shipment_verdict_name(oq_shipment_verdict_t verdict)
{
    static const char *names[] = {"confirmed", "failed", "retry", "review"};
    return verdict <= OQ_SHIPMENT_REVIEW ? names[verdict] : "unknown";
}

#define S_SET(out, v, ...)                                                                         \
    do {                                                                                           \
        (out)->verdict = (v);                                                                      \
        snprintf((out)->reason, sizeof(out)->reason, __VA_ARGS__);                                 \
    } while (0)

/* " (error): message" from the carrier's answer, as far as it said. */
static void s_said(const oq_carrier_answer_t *a, char *out, size_t out_len)
{
    snprintf(out, out_len, "%s%s%s%s%s", a->error[0] ? " (" : "", a->error, a->error[0] ? ")" : "",
             a->message[0] ? ": " : "", a->message);
}

static void s_answered(const oq_carrier_answer_t *a, const char *key, const char *recorded,
                       bool last_try, oq_shipment_outcome_t *out)
{
    char said[700];
    s_said(a, said, sizeof said);
    long status = a->status;
    if (status >= 200 && status < 300) {
        if (!a->reference[0]) {
            S_SET(out, OQ_SHIPMENT_REVIEW,
                  "carrier answered HTTP %ld for key %s without a shipment reference%s: whether "
                  "the shipment exists cannot be told",
                  status, key, said);
        } else if (recorded && recorded[0] && strcmp(recorded, a->reference) != 0) {
            S_SET(out, OQ_SHIPMENT_REVIEW,
                  "carrier answered shipment %s for key %s, but the record holds %s: the same "
                  "key names two shipments (did the carrier lose its memory?)",
                  a->reference, key, recorded);
        } else {
            out->verdict = OQ_SHIPMENT_CONFIRMED;
            out->replayed = a->replayed;
            snprintf(out->reference, sizeof out->reference, "%s", a->reference);
        }
        return;
    }
    if (status == 422) {
        S_SET(out, OQ_SHIPMENT_REVIEW,
              "carrier answered HTTP 422 for key %s: the key was used for a different request%s%s%s"
              "%s; the record and the carrier disagree",
              key, a->reference[0] ? " (its shipment: " : "", a->reference,
              a->reference[0] ? ")" : "", said);
        return;
    }
    if (status >= 400 && status < 500) {
        S_SET(out, OQ_SHIPMENT_FAILED, "carrier refused the request with HTTP %ld%s", status, said);
        return;
    }
    if (status >= 500 && status < 600) {
        if (last_try)
            S_SET(out, OQ_SHIPMENT_FAILED, "carrier answered HTTP %ld%s, and no tries are left",
                  status, said);
        else
            S_SET(out, OQ_SHIPMENT_RETRY, "carrier answered HTTP %ld%s", status, said);
        return;
    }
    S_SET(out, OQ_SHIPMENT_REVIEW,
          "carrier answered HTTP %ld for key %s, which says nothing about the shipment%s", status,
          key, said);
}

void oq_shipment_classify(const oq_carrier_answer_t *answer, const char *key, const char *recorded,
                          bool last_try, oq_shipment_outcome_t *out)
{
    memset(out, 0, sizeof *out);
    const char *detail = answer->message;
    switch (answer->transport) {
    case OQ_CARRIER_ANSWERED:
        s_answered(answer, key, recorded, last_try, out);
        return;
    case OQ_CARRIER_BAD_URL:
        S_SET(out, OQ_SHIPMENT_FAILED, "the carrier URL cannot be used: %s", detail);
        return;
    case OQ_CARRIER_REFUSED:
    case OQ_CARRIER_DNS:
    case OQ_CARRIER_UNREACHABLE: {
        const char *what = answer->transport == OQ_CARRIER_REFUSED ? "connection refused"
                           : answer->transport == OQ_CARRIER_DNS   ? "host name not resolved"
                           : answer->timed_out                     ? "no connection in time"
                                                                   : "not reachable";
        if (last_try)
            S_SET(out, OQ_SHIPMENT_FAILED,
                  "carrier not reached (%s: %s); nothing was sent, and no tries are left", what,
                  detail);
        else
            S_SET(out, OQ_SHIPMENT_RETRY, "carrier not reached (%s: %s); nothing was sent", what,
                  detail);
        return;
    }
    case OQ_CARRIER_NO_ANSWER:
        if (last_try)
            S_SET(out, OQ_SHIPMENT_REVIEW,
                  "no answer from the carrier after the request with key %s went out (%s), on "
                  "the last try: whether the shipment exists is unknown",
                  key, detail);
        else
            S_SET(out, OQ_SHIPMENT_RETRY,
                  "no answer from the carrier after the request with key %s went out (%s): "
                  "outcome unknown, trying again with the same key",
                  key, detail);
        return;
    }
    S_SET(out, OQ_SHIPMENT_REVIEW, "an outcome of the call this handler does not know");
}
