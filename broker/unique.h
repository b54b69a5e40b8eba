/*  unique.h: unique dispatch keys (ShouldBeUnique), an optimisation that
    saves work, never what keeps the data right (docs/design.md). A job
    dispatched with a unique key holds it while it is live (ready, delayed,
    waiting or leased) and, if it has a window, until the window ends, even
    after it is done; a dispatch with a key that is held gets the holder's id.

    Keys are held per job id, so the engine only says when a job takes its
    key and when it stops being live; a key whose job is gone and whose
    window ended is forgotten (oq_unique_expire). Times are wall-clock ms,
    so windows hold across a restart. */
#ifndef ONCEQ_UNIQUE_H
#define ONCEQ_UNIQUE_H

#include <stddef.h>
#include <stdint.h>

typedef struct oq_unique oq_unique_t;

/* An empty table holding at most max_keys keys. NULL if memory runs out. */
oq_unique_t *oq_unique_new(size_t max_keys);

/* Free every key; set *self_p to NULL. */
void oq_unique_destroy(oq_unique_t **self_p);

/* The id of the job holding key (len bytes) at now_ms: one that is live,
   or whose window has not ended. 0 if the key is free. */
uint64_t oq_unique_find(oq_unique_t *self, const char *key, size_t len, int64_t now_ms);

/* Live job id takes key (copied), with a window until expires_ms (0: none,
   held only while live). A stale entry of the key is replaced. When the
   table is full the key whose window ends first among jobs no longer live
   is forgotten to make room. 0, or -1 if the key is held by another job
   (nothing changes), or the table is full of live keys, or memory runs out. */
int oq_unique_take(oq_unique_t *self, const char *key, size_t len, uint64_t id, int64_t expires_ms,
                   int64_t now_ms);

/* Remember key for job id, no longer live, until expires_ms (replay: a
   window that outlived its job). 0 (also when the window is over or the
   key is held: nothing to do), or -1 if memory runs out. */
int oq_unique_remember(oq_unique_t *self, const char *key, size_t len, uint64_t id,
                       int64_t expires_ms, int64_t now_ms);

/* Job id is no longer live (done, failed, in review, cancelled): its key
   stays held only until its window ends. No-op if it holds none. */
void oq_unique_release(oq_unique_t *self, uint64_t id, int64_t now_ms);

/* Forget the key job id holds while live, window and all (a dispatch
   that was not queued after all). No-op if it holds none. */
void oq_unique_forget(oq_unique_t *self, uint64_t id);

/* The key live job id holds (NUL-terminated, borrowed until the next
   change), with its window's end in *expires_ms (0: none); NULL if none. */
const char *oq_unique_key_of(const oq_unique_t *self, uint64_t id, int64_t *expires_ms);

/* Forget keys whose job is not live and whose window ended by now_ms.
   Returns how many. */
size_t oq_unique_expire(oq_unique_t *self, int64_t now_ms);

/* Call fn for every key held only by its window (its job is no longer
   live), for snapshots. fn must not change the table. */
void oq_unique_each_window(const oq_unique_t *self,
                           void (*fn)(void *ctx, const char *key, uint64_t id, int64_t expires_ms),
                           void *ctx);

/* The longest unique window among the keys held now, in ms (0: none): for
   a key taken here, its unique_for; for one remembered (replay), what is
   left of it. */
int64_t oq_unique_longest_window_ms(const oq_unique_t *self, int64_t now_ms);

/* Forget the key whose window ends first among those held only by their
   window (counted as evicted), to give its memory to a new job. 0, or -1
   if no key is held only by its window. */
int oq_unique_evict(oq_unique_t *self);

/* Keys held now (live and by window). */
size_t oq_unique_count(const oq_unique_t *self);

/* Keys held by live jobs. */
size_t oq_unique_live_count(const oq_unique_t *self);

/* Keys forgotten before their window ended because the table was full. */
uint64_t oq_unique_evicted(const oq_unique_t *self);

#endif
