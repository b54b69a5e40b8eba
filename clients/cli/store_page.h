/*  store_page.h: a page of the failed or the review store as the `onceq
    failed list` and `onceq review list` tables print it, with the cursor of
    the next page under it. */
#ifndef ONCEQ_CLI_STORE_PAGE_H
#define ONCEQ_CLI_STORE_PAGE_H

#include <msgpack.h>

/* How one store's page reads: "failed jobs" with FAILED_AT and ERROR from
   "failed_at" and "error", or "jobs in review" with REVIEW_AT and REASON. */
typedef struct {
    const char *noun;
    const char *time_key, *time_header;
    const char *text_key, *text_header;
} oq_cli_store_page_t;

/* Print the reply's jobs as a table (ID, TYPE, QUEUE, ATTEMPT, time, text),
   then how many were shown and the next page's --after cursor. An exit
   code. */
int oq_cli_print_store_page(const msgpack_object *reply, const oq_cli_store_page_t *page);

#endif
