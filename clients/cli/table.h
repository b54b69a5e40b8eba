/*  table.h: a plain-text table for terminal output. Cells are collected row
    by row and printed with each column padded to its widest cell, so the
    numbers of several queues line up however large they grow. */
#ifndef ONCEQ_CLI_TABLE_H
#define ONCEQ_CLI_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct oq_table oq_table_t;

/* A table of `columns` columns, left-aligned, or NULL if out of memory. */
oq_table_t *oq_table_new(size_t columns);

/* Free the table and its cells, and set *self_p to NULL. */
void oq_table_destroy(oq_table_t **self_p);

/* Align a column's cells to the right (for numbers). */
void oq_table_align_right(oq_table_t *self, size_t column);

/* Append one cell (copied); every `columns` cells make a row. Control
   characters are shown as spaces so that one row stays one line. 0 or -1. */
int oq_table_add(oq_table_t *self, const char *text);

/* oq_table_add with printf formatting. */
int oq_table_addf(oq_table_t *self, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* Print the rows, columns two spaces apart; the last column is not padded. */
void oq_table_print(const oq_table_t *self, FILE *out);

#endif
