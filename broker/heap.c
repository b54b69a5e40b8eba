/*  heap.c: a binary min-heap of (deadline, node) entries. The deadline
    sits in the heap's own array, not in the node: comparisons while
    sifting read only the array, and a node embedded in a job is 4 bytes
    (its slot) rather than 16, which every job pays whether it is timed or
    not. Each node stores its slot so removal from the middle needs no
    search. Ties keep no particular order; callers that need FIFO among
    equal deadlines order by other means (the ready list). */
#include "heap.h"

#include <assert.h>
#include <stdlib.h>

#define S_INITIAL_CAPACITY 1024
#define S_MAX_SIZE         (UINT32_MAX - 1) /* slot is 32 bits and 0 means "not in" */

typedef struct {
    int64_t deadline_ms;
    oq_heap_node_t *node;
} s_entry_t;

struct oq_heap {
    s_entry_t *items; /* items[0] has the earliest deadline */
    size_t size;
    size_t capacity;
};

oq_heap_t *oq_heap_new(void)
{
    oq_heap_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->items = malloc(S_INITIAL_CAPACITY * sizeof *self->items);
    if (!self->items) {
        free(self);
        return NULL;
    }
    self->capacity = S_INITIAL_CAPACITY;
    return self;
}

void oq_heap_destroy(oq_heap_t **self_p)
{
    assert(self_p);
    if (*self_p) {
        for (size_t i = 0; i < (*self_p)->size; i++)
            (*self_p)->items[i].node->slot = 0;
        free((*self_p)->items);
        free(*self_p);
        *self_p = NULL;
    }
}

static void s_place(oq_heap_t *self, size_t i, s_entry_t entry)
{
    self->items[i] = entry;
    entry.node->slot = (uint32_t)(i + 1);
}

static void s_up(oq_heap_t *self, size_t i)
{
    s_entry_t entry = self->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (self->items[parent].deadline_ms <= entry.deadline_ms)
            break;
        s_place(self, i, self->items[parent]);
        i = parent;
    }
    s_place(self, i, entry);
}

static void s_down(oq_heap_t *self, size_t i)
{
    s_entry_t entry = self->items[i];
    for (;;) {
        size_t left = 2 * i + 1;
        if (left >= self->size)
            break;
        size_t child = left;
        if (left + 1 < self->size &&
            self->items[left + 1].deadline_ms < self->items[left].deadline_ms)
            child = left + 1;
        if (self->items[child].deadline_ms >= entry.deadline_ms)
            break;
        s_place(self, i, self->items[child]);
        i = child;
    }
    s_place(self, i, entry);
}

int oq_heap_push(oq_heap_t *self, oq_heap_node_t *node, int64_t deadline_ms)
{
    assert(node->slot == 0);
    if (self->size >= S_MAX_SIZE)
        return -1;
    if (self->size == self->capacity) {
        size_t capacity = self->capacity * 2;
        s_entry_t *items = realloc(self->items, capacity * sizeof *items);
        if (!items)
            return -1;
        self->items = items;
        self->capacity = capacity;
    }
    self->size++;
    s_place(self, self->size - 1, (s_entry_t){deadline_ms, node});
    s_up(self, self->size - 1);
    return 0;
}

void oq_heap_remove(oq_heap_t *self, oq_heap_node_t *node)
{
    if (node->slot == 0)
        return;
    size_t i = node->slot - 1;
    assert(i < self->size && self->items[i].node == node);
    node->slot = 0;
    self->size--;
    if (i == self->size)
        return;
    s_entry_t last = self->items[self->size];
    s_place(self, i, last);
    if (i > 0 && self->items[(i - 1) / 2].deadline_ms > last.deadline_ms)
        s_up(self, i);
    else
        s_down(self, i);
}

oq_heap_node_t *oq_heap_peek(const oq_heap_t *self)
{
    return self->size ? self->items[0].node : NULL;
}

int64_t oq_heap_deadline(const oq_heap_t *self, const oq_heap_node_t *node)
{
    assert(node->slot != 0 && node->slot <= self->size && self->items[node->slot - 1].node == node);
    return self->items[node->slot - 1].deadline_ms;
}

oq_heap_node_t *oq_heap_pop_due(oq_heap_t *self, int64_t now_ms)
{
    if (self->size == 0 || self->items[0].deadline_ms > now_ms)
        return NULL;
    oq_heap_node_t *top = self->items[0].node;
    oq_heap_remove(self, top);
    return top;
}

size_t oq_heap_size(const oq_heap_t *self)
{
    return self->size;
}

oq_heap_node_t *oq_heap_at(const oq_heap_t *self, size_t i)
{
    assert(i < self->size);
    return self->items[i].node;
}
