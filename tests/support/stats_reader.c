/*  stats_reader.c: see stats_reader.h. */
#include "stats_reader.h"

#include "onceq/proto.h"

uint64_t oq_statsr_u64(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = map ? oq_proto_map_get(map, key) : NULL;
    return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

double oq_statsr_double(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = map ? oq_proto_map_get(map, key) : NULL;
    if (!o)
        return 0;
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
        return o->via.f64;
    return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (double)o->via.u64 : 0;
}

const msgpack_object *oq_statsr_array(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = map ? oq_proto_map_get(map, key) : NULL;
    return o && o->type == MSGPACK_OBJECT_ARRAY ? o : NULL;
}

const msgpack_object *oq_statsr_entry(const msgpack_object *root, const char *list,
                                      const char *name)
{
    const msgpack_object *entries = oq_statsr_array(root, list);
    for (uint32_t i = 0; name && entries && i < entries->via.array.size; i++) {
        const msgpack_object *e = &entries->via.array.ptr[i];
        const msgpack_object *n =
            e->type == MSGPACK_OBJECT_MAP ? oq_proto_map_get(e, "name") : NULL;
        if (n && n->type == MSGPACK_OBJECT_STR &&
            oq_str_eq((oq_str_t){n->via.str.ptr, n->via.str.size}, name))
            return e;
    }
    return NULL;
}

uint64_t oq_statsr_sum(const msgpack_object *root, const char *list, const char *key)
{
    const msgpack_object *entries = oq_statsr_array(root, list);
    uint64_t sum = 0;
    for (uint32_t i = 0; entries && i < entries->via.array.size; i++)
        if (entries->via.array.ptr[i].type == MSGPACK_OBJECT_MAP)
            sum += oq_statsr_u64(&entries->via.array.ptr[i], key);
    return sum;
}

void oq_statsr_workers(const msgpack_object *root, oq_statsr_worker_t *out, size_t *count,
                       size_t max)
{
    const msgpack_object *workers = oq_statsr_array(root, "workers");
    for (uint32_t i = 0; workers && i < workers->via.array.size && *count < max; i++) {
        const msgpack_object *w = &workers->via.array.ptr[i];
        if (w->type != MSGPACK_OBJECT_MAP)
            continue;
        out[*count] = (oq_statsr_worker_t){
            .pid = (uint32_t)oq_statsr_u64(w, "pid"),
            .leased = (uint32_t)oq_statsr_u64(w, "leased"),
            .credit = (uint32_t)oq_statsr_u64(w, "credit"),
        };
        (*count)++;
    }
}
