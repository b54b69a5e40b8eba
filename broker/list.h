/*  list.h: an intrusive doubly-linked list. A node lives inside the struct it
    links, so moving a job between the ready, failed and lease lists never
    allocates, and removal from the middle (an ack for a job that went back to
    ready) is O(1). A list is a sentinel node pointing at itself when empty. */
#ifndef ONCEQ_LIST_H
#define ONCEQ_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct oq_link {
    struct oq_link *prev, *next;
} oq_link_t;

#define oq_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void oq_list_init(oq_link_t *list)
{
    list->prev = list->next = list;
}

static inline bool oq_list_empty(const oq_link_t *list)
{
    return list->next == list;
}

/* A node not on any list points nowhere; oq_list_linked tells. */
static inline void oq_link_clear(oq_link_t *node)
{
    node->prev = node->next = NULL;
}

static inline bool oq_list_linked(const oq_link_t *node)
{
    return node->next != NULL;
}

static inline void oq_list_insert_after(oq_link_t *at, oq_link_t *node)
{
    node->prev = at;
    node->next = at->next;
    at->next->prev = node;
    at->next = node;
}

static inline void oq_list_push_back(oq_link_t *list, oq_link_t *node)
{
    oq_list_insert_after(list->prev, node);
}

static inline void oq_list_push_front(oq_link_t *list, oq_link_t *node)
{
    oq_list_insert_after(list, node);
}

static inline void oq_list_remove(oq_link_t *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    oq_link_clear(node);
}

#endif
