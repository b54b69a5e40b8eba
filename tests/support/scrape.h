/*  scrape.h: reading a broker's /metrics over HTTP, for the tests that
    check what it serves. One GET with libcurl into a string, and the value
    of one sample in the Prometheus text format, so that a test compares
    numbers instead of parsing the text itself. */
#ifndef ONCEQ_TEST_SCRAPE_H
#define ONCEQ_TEST_SCRAPE_H

/* GET url within timeout_s seconds: the body (caller frees) with the HTTP
   status in *status, or NULL with curl's reason in *error (static text).
   The caller has called curl_global_init. */
char *oq_scrape_get(const char *url, long timeout_s, long *status, const char **error);

/* The value of the sample named exactly series ("name" or
   "name{labels}") in a metrics text, or -1 if the text has none. */
double oq_scrape_value(const char *text, const char *series);

#endif
