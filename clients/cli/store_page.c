/*  store_page.c: a page of the failed or the review store as a table. */
#include "store_page.h"

#include <inttypes.h>
#include <stdio.h>

#include "cli.h"
#include "onceq/limits.h"
#include "table.h"

#define S_CELL_LEN 128

static int s_add_job(oq_table_t *table, const msgpack_object *job, const oq_cli_store_page_t *page)
{
    char id[S_CELL_LEN], type[S_CELL_LEN], queue[S_CELL_LEN], attempt[S_CELL_LEN];
    char max_tries[S_CELL_LEN], at[S_CELL_LEN], text[OQ_MAX_ERROR_LEN + 1];
    oq_cli_format_value(oq_proto_map_get(job, "id"), id, sizeof id);
    oq_cli_format_value(oq_proto_map_get(job, "type"), type, sizeof type);
    oq_cli_format_value(oq_proto_map_get(job, "queue"), queue, sizeof queue);
    oq_cli_format_value(oq_proto_map_get(job, "attempt"), attempt, sizeof attempt);
    oq_cli_format_value(oq_proto_map_get(job, "max_tries"), max_tries, sizeof max_tries);
    oq_cli_format_value(oq_proto_map_get(job, page->text_key), text, sizeof text);
    uint64_t ms;
    if (oq_cli_get_uint(job, page->time_key, &ms) == 0 && ms > 0)
        oq_cli_format_time((int64_t)ms, at, sizeof at);
    else
        snprintf(at, sizeof at, "-");
    int rc = oq_table_add(table, id);
    rc |= oq_table_add(table, type);
    rc |= oq_table_add(table, queue);
    rc |= oq_table_addf(table, "%s/%s", attempt, max_tries);
    rc |= oq_table_add(table, at);
    rc |= oq_table_add(table, text);
    return rc;
}

int oq_cli_print_store_page(const msgpack_object *reply, const oq_cli_store_page_t *page)
{
    const msgpack_object *jobs = oq_proto_map_get(reply, "jobs");
    uint32_t shown = jobs && jobs->type == MSGPACK_OBJECT_ARRAY ? jobs->via.array.size : 0;
    uint64_t total = shown;
    oq_cli_get_uint(reply, "total", &total);
    if (shown == 0) {
        if (total)
            printf("no %s on this page (%" PRIu64 " in all)\n", page->noun, total);
        else
            printf("no %s\n", page->noun);
        return OQ_CLI_EXIT_OK;
    }
    const char *headers[] = {
        "ID", "TYPE", "QUEUE", "ATTEMPT", page->time_header, page->text_header};
    const size_t columns = sizeof headers / sizeof headers[0];
    oq_table_t *table = oq_table_new(columns);
    int rc = table ? 0 : -1;
    for (size_t c = 0; rc == 0 && c < columns; c++)
        rc |= oq_table_add(table, headers[c]);
    if (rc == 0) {
        oq_table_align_right(table, 0);
        oq_table_align_right(table, 3);
    }
    for (uint32_t i = 0; rc == 0 && i < shown; i++)
        rc |= s_add_job(table, &jobs->via.array.ptr[i], page);
    if (rc == 0)
        oq_table_print(table, stdout);
    oq_table_destroy(&table);
    if (rc != 0) {
        fprintf(stderr, "onceq: out of memory\n");
        return OQ_CLI_EXIT_REFUSED;
    }
    uint64_t next, next_at = 0;
    if (oq_cli_get_uint(reply, "next", &next) == 0) {
        oq_cli_get_uint(reply, "next_at", &next_at);
        printf("\n%" PRIu32 " of %" PRIu64 " %s shown; the next page: --after %" PRIu64 "@%" PRIu64
               "\n",
               shown, total, page->noun, next, next_at);
    } else if (total > shown)
        printf("\n%" PRIu32 " of %" PRIu64 " %s shown (the last page)\n", shown, total, page->noun);
    return OQ_CLI_EXIT_OK;
}
