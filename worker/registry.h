/*  registry.h: what the runtime reads of a registry beyond the public API
    (onceq/worker.h): the flags the handlers added, which oq_worker_main
    parses with its own, and the resources handlers declared, probed and
    released on the worker's main thread. Not exported. */
#ifndef ONCEQ_WORKER_REGISTRY_H
#define ONCEQ_WORKER_REGISTRY_H

#include <stddef.h>

#include "onceq/flags.h"
#include "onceq/worker.h"

/* The flags added with oq_registry_add_flag, in order; *count of them.
   Borrowed from the registry. */
const oq_flag_t *oq_registry_flags(const oq_registry_t *self, size_t *count);

/* Probe the resource of type: 0 if it answers, -1 with reason if not, 1 if
   the type declared no probe (nothing to check). */
int oq_registry_probe(const oq_registry_t *self, const char *type, char *reason, size_t reason_len);

/* Release every declared resource, each (release, ctx) pair once. Returns
   how many release calls were made. */
size_t oq_registry_release_all(const oq_registry_t *self);

/* The batch function of type (oq_registry_set_batch): 0 with fn, the
   handler's state and the most jobs per call, or -1 if it has none. */
int oq_registry_find_batch(const oq_registry_t *self, const char *type, oq_batch_fn *fn,
                           void **state, size_t *max_jobs);

#endif
