/*  stats_reader.h: reading a broker's stats reply (docs/protocol.md,
    `stats`), shared by the integration harness and the chaos harness: a
    counter of a map, a list's entry by name, and a page of workers. Every
    reader tolerates what a reply leaves out (an older broker, a queue that
    does not exist yet): an absent counter reads 0, an absent entry NULL. */
#ifndef ONCEQ_TEST_STATS_READER_H
#define ONCEQ_TEST_STATS_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

/* map[key] as an unsigned integer; 0 if map is NULL, or key is absent or
   not one. */
uint64_t oq_statsr_u64(const msgpack_object *map, const char *key);

/* map[key] as a number (a float, or an unsigned integer); 0 otherwise. */
double oq_statsr_double(const msgpack_object *map, const char *key);

/* map[key] if it is an array, or NULL. Borrowed from map. */
const msgpack_object *oq_statsr_array(const msgpack_object *map, const char *key);

/* The entry of root[list] (an array of maps: "queues", "types") whose
   "name" is name, or NULL. Borrowed from root. */
const msgpack_object *oq_statsr_entry(const msgpack_object *root, const char *list,
                                      const char *name);

/* The sum of key over every entry of root[list]. */
uint64_t oq_statsr_sum(const msgpack_object *root, const char *list, const char *key);

/* One worker of a page of root["workers"]. */
typedef struct {
    uint32_t pid;
    uint32_t leased;
    uint32_t credit; /* jobs the broker may still send it */
} oq_statsr_worker_t;

/* Append this reply's page of workers to out, from out[*count] up to
   out[max - 1]; *count grows by what was read. */
void oq_statsr_workers(const msgpack_object *root, oq_statsr_worker_t *out, size_t *count,
                       size_t max);

#endif
