/*  registry.h: what the worker program reads of a registry beyond the
    public API (onceq/worker.h): the flags the handlers added, which
    oq_worker_main parses with its own. Not exported. */
#ifndef ONCEQ_WORKER_REGISTRY_H
#define ONCEQ_WORKER_REGISTRY_H

#include <stddef.h>

#include "onceq/flags.h"
#include "onceq/worker.h"

/* The flags added with oq_registry_add_flag, in order; *count of them.
   Borrowed from the registry. */
const oq_flag_t *oq_registry_flags(const oq_registry_t *self, size_t *count);

#endif
