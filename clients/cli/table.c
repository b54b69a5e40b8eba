/*  table.c: aligned plain-text tables. */
#include "table.h"

#include <assert.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Space between two columns. */
#define S_GAP "  "
/* Longest cell kept by oq_table_addf; longer text is cut. */
#define S_MAX_FORMATTED 2048

struct oq_table {
    size_t columns; /* cells per row */
    bool *right;    /* per column: right-aligned */
    char **cells;   /* row-major, owned */
    size_t count;   /* cells added */
    size_t alloc;   /* room in cells */
};

oq_table_t *oq_table_new(size_t columns)
{
    assert(columns > 0);
    oq_table_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->columns = columns;
    self->right = calloc(columns, sizeof *self->right);
    if (!self->right) {
        free(self);
        return NULL;
    }
    return self;
}

void oq_table_destroy(oq_table_t **self_p)
{
    assert(self_p);
    oq_table_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->count; i++)
        free(self->cells[i]);
    free(self->cells);
    free(self->right);
    free(self);
    *self_p = NULL;
}

void oq_table_align_right(oq_table_t *self, size_t column)
{
    assert(self && column < self->columns);
    self->right[column] = true;
}

int oq_table_add(oq_table_t *self, const char *text)
{
    assert(self && text);
    if (self->count == self->alloc) {
        size_t alloc = self->alloc ? self->alloc * 2 : self->columns * 8;
        char **cells = realloc(self->cells, alloc * sizeof *cells);
        if (!cells)
            return -1;
        self->cells = cells;
        self->alloc = alloc;
    }
    char *copy = strdup(text);
    if (!copy)
        return -1;
    for (char *c = copy; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = ' ';
    self->cells[self->count++] = copy;
    return 0;
}

int oq_table_addf(oq_table_t *self, const char *format, ...)
{
    char text[S_MAX_FORMATTED];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    return oq_table_add(self, text);
}

/* Width on a terminal, counting UTF-8 code points (continuation bytes add
   nothing). Wide CJK characters are counted as one; good enough here. */
static size_t s_width(const char *text)
{
    size_t width = 0;
    for (const unsigned char *c = (const unsigned char *)text; *c; c++)
        if ((*c & 0xc0) != 0x80)
            width++;
    return width;
}

void oq_table_print(const oq_table_t *self, FILE *out)
{
    assert(self);
    size_t *widths = calloc(self->columns, sizeof *widths);
    if (!widths)
        return;
    for (size_t i = 0; i < self->count; i++) {
        size_t w = s_width(self->cells[i]);
        if (w > widths[i % self->columns])
            widths[i % self->columns] = w;
    }
    for (size_t i = 0; i < self->count; i++) {
        size_t column = i % self->columns;
        bool last = column == self->columns - 1 || i == self->count - 1;
        size_t pad = widths[column] - s_width(self->cells[i]);
        if (self->right[column])
            fprintf(out, "%*s%s", (int)pad, "", self->cells[i]);
        else
            fprintf(out, "%s%*s", self->cells[i], last ? 0 : (int)pad, "");
        fputs(last ? "\n" : S_GAP, out);
    }
    free(widths);
}
