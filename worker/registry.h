/*  registry.h: what the runtime asks of the registry beyond the public API
    (onceq/worker.h): the resources handlers declared, probed and released
    on the job thread. */
#ifndef ONCEQ_WORKER_REGISTRY_H
#define ONCEQ_WORKER_REGISTRY_H

#include <stddef.h>

#include "onceq/worker.h"

/* Probe the resource of type: 0 if it answers, -1 with reason if not, 1 if
   the type declared no probe (nothing to check). */
int oq_registry_probe(const oq_registry_t *self, const char *type, char *reason, size_t reason_len);

/* Release every declared resource, each (release, ctx) pair once. Returns
   how many release calls were made. */
size_t oq_registry_release_all(const oq_registry_t *self);

#endif
