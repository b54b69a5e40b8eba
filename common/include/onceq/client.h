/*  onceq/client.h: the producer and admin client. One client is one DEALER
    connection to the broker's front socket; requests carry a request id and a
    reply is matched to its request by that id, so a late reply to a request
    that timed out is recognised and dropped. Not thread-safe: use one client
    per thread.

    Dispatches follow the Lazy Pirate pattern: each carries a dispatch_id,
    and when no answer comes in time the very same request (same id) is sent
    again, a bounded number of times. The broker answers a dispatch_id it has
    seen with the first job's id, so a resend never queues a second job. */
#ifndef ONCEQ_CLIENT_H
#define ONCEQ_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "onceq/keys.h"
#include "onceq/proto.h"

typedef struct oq_client oq_client_t;

/* Connect to the broker's front endpoint (e.g. "tcp://127.0.0.1:7750").
   Returns NULL if the endpoint is invalid. The connection itself is made in
   the background; a broker that is down shows as a request timeout. */
oq_client_t *oq_client_new(const char *endpoint);

/* Close the connection, drop unsent messages, free, and set *self_p to NULL. */
void oq_client_destroy(oq_client_t **self_p);

/* Speak CURVE from now on: pair is this client's key pair (its public key
   must be in one of the broker's key directories), broker_public the
   broker's public key, both in Z85. The connection is made again (call it
   before the first request). 0, or -1 (see oq_client_error) if a key is
   not 40 characters of Z85 or libzmq lacks CURVE. docs/protocol.md §1. */
int oq_client_set_curve(oq_client_t *self, const oq_keypair_t *pair, const char *broker_public);

/* The same from files: secret_file a NAME.key_secret (onceq keygen),
   broker_key_file the broker's public key file (broker.key; a secret file
   serves too). 0, or -1 with the reason naming the file. */
int oq_client_set_curve_files(oq_client_t *self, const char *secret_file,
                              const char *broker_key_file);

/* Dispatch one job: wait up to timeout_ms for the broker's answer, and
   without one send the same request again, up to the retries set with
   oq_client_set_retries (default OQ_DEFAULT_CLIENT_RETRIES). job->dispatch_id
   is sent if set; if empty, a new random one is made for this call. Returns
   0 with the job id in *id, or -1 (see oq_client_error). The answer means
   the job is durable under the broker's fsync policy. */
int oq_client_dispatch(oq_client_t *self, const oq_job_msg_t *job, int timeout_ms, uint64_t *id);

/* oq_client_dispatch that also tells whether the broker answered with an
   earlier job holding the dispatch's unique_key (*unique true: nothing new
   was queued, *id is that job's). */
int oq_client_dispatch_reply(oq_client_t *self, const oq_job_msg_t *job, int timeout_ms,
                             uint64_t *id, bool *unique);

/* Dispatch one job and wait until it has ended, for at most wait_ms (0 ...
   OQ_MAX_WAIT_MS), in one request: the wait travels with the dispatch, so
   the answer needs no round trip between them (docs/protocol.md, "Dispatch
   and wait in one request"). Sent and resent as oq_client_dispatch, each
   send waiting wait_ms + timeout_ms for the answer. 0 with the job's id in
   *id, whether the dispatch named a unique key's holder in *unique (may be
   NULL), and the wait's outcome in *state and error[error_len] as
   oq_client_wait gives them (OQ_WAIT_PENDING: the job is queued and had
   not ended in time); or -1 (see oq_client_error). A broker that answers
   "dispatched" instead (one from before this, a unique key's holder, a
   wait it cannot hold) gets a wait for the id; if only that wait fails,
   *id is set all the same (0 otherwise): the job is queued. */
int oq_client_dispatch_wait(oq_client_t *self, const oq_job_msg_t *job, int64_t wait_ms,
                            int timeout_ms, uint64_t *id, bool *unique, oq_wait_state_t *state,
                            char *error, size_t error_len);

/* Dispatch a batch (docs/workflows.md): jobs[0 .. count-1] (1 ...
   OQ_MAX_BATCH_JOBS, none with a dispatch_id or unique_key), and the
   callbacks by then, catch, finally (callbacks may be NULL, and so may
   each of its three), run as docs/protocol.md "dispatch_batch" says.
   dispatch_id (NULL: a new random one for this call) makes a resend,
   which this call makes after silence as oq_client_dispatch does, return
   the first batch. 0 with *batch and *first (its jobs are first ...
   first + count - 1, in order), once durable; or -1 (oq_client_error). */
int oq_client_dispatch_batch(oq_client_t *self, const oq_job_msg_t *jobs, size_t count,
                             const oq_job_msg_t *const *callbacks, bool allow_failures,
                             const char *dispatch_id, int timeout_ms, uint64_t *batch,
                             uint64_t *first);

/* Dispatch job with the links that follow it (links[0 .. count-1], 0 ...
   OQ_MAX_CHAIN_LINKS) and chain_catch (NULL: none), docs/workflows.md
   "Chains": sent and resent as oq_client_dispatch. 0 with the first job's
   id in *id once durable, or -1. */
int oq_client_dispatch_chain(oq_client_t *self, const oq_job_msg_t *job, const oq_job_msg_t *links,
                             size_t count, const oq_job_msg_t *chain_catch, int timeout_ms,
                             uint64_t *id);

/* The "chain" admin command: job id's place in its chain, into *reply
   (root, place, total, due, links, chain_catch), or -1 (not_found: no
   chain held for it). */
int oq_client_chain(oq_client_t *self, uint64_t id, int timeout_ms, oq_msg_t *reply);

/* The "batch" admin command: op "show" or "cancel" of batch id, or "list"
   (id 0). 0 with the reply in *reply (release it with
   oq_proto_msg_release; its root has "batch", or "batches" and "total",
   and for cancel "withdrawn"), or -1. */
int oq_client_batch(oq_client_t *self, const char *op, uint64_t id, int timeout_ms,
                    oq_msg_t *reply);

/* How many times oq_client_dispatch sends a request again after a timeout
   (0 to OQ_MAX_CLIENT_RETRIES; larger values are capped). */
void oq_client_set_retries(oq_client_t *self, uint32_t retries);

/* Write a new random dispatch id (OQ_DISPATCH_ID_RANDOM_BYTES in hex) into
   out[out_len]. 0, or -1 if out is too small or no randomness is to be had. */
int oq_client_new_dispatch_id(char *out, size_t out_len);

/* Put a failed job back to ready with a fresh retry budget. 0 once the
   broker has made that durable, or -1 (see oq_client_error). */
int oq_client_requeue(oq_client_t *self, uint64_t id, int timeout_ms);

/* Ask for the broker's statistics. Returns 0 with the decoded "stats" reply
   in *reply (release it with oq_proto_msg_release), or -1. */
int oq_client_stats(oq_client_t *self, int timeout_ms, oq_msg_t *reply);

/* The same, with at most limit workers listed (0: none), those registered
   after the cursor after (0: from the first). The reply's "workers_next",
   present while more remain, is the after of the next page. */
int oq_client_stats_page(oq_client_t *self, uint64_t after, uint32_t limit, int timeout_ms,
                         oq_msg_t *reply);

/* List failed jobs, optionally of one queue (NULL for all), at most limit.
   Returns 0 with the decoded "failed" reply in *reply, or -1. */
int oq_client_failed(oq_client_t *self, const char *queue, uint32_t limit, int timeout_ms,
                     oq_msg_t *reply);

/* One page of failed jobs in id order: those with an id above after (0:
   from the first). The reply's "next", present while more remain, is the
   after of the next page. */
int oq_client_failed_page(oq_client_t *self, const char *queue, uint64_t after, uint32_t limit,
                          int timeout_ms, oq_msg_t *reply);

/* One page of failed jobs after the cursor (after_at, after): failure
   time and job id, as the previous reply's "next_at" and "next" give them.
   after_at < 0 sends the job id alone (the broker looks its time up). */
int oq_client_failed_cursor(oq_client_t *self, const char *queue, int64_t after_at, uint64_t after,
                            uint32_t limit, int timeout_ms, oq_msg_t *reply);

/* ---- admin commands on the failed store and waiting jobs ----------------
   Each returns 0 once the broker has made the change durable, or -1 (see
   oq_client_error; oq_client_error_code is OQ_ERR_NOT_FOUND for a job the
   broker does not hold, OQ_ERR_WRONG_STATE for one in another state). */

/* Delete failed job id from the failed store for good. */
int oq_client_forget(oq_client_t *self, uint64_t id, int timeout_ms);

/* Delete every failed job of queue (NULL: all); *count gets how many. */
int oq_client_flush(oq_client_t *self, const char *queue, int timeout_ms, uint64_t *count);

/* Requeue every failed job of queue (NULL: all) with a fresh retry budget;
 *count gets how many. */
int oq_client_requeue_all(oq_client_t *self, const char *queue, int timeout_ms, uint64_t *count);

/* Delete failed jobs of queue (NULL: all) that failed more than
   older_than_ms ago (OQ_MIN_PRUNE_AGE_MS ... OQ_MAX_PRUNE_AGE_MS), at most
   limit of them (0: the broker's maximum, OQ_MAX_PRUNE_PER_CALL). *count
   gets how many; *more is true while others of that age remain: call
   again until it is false. */
int oq_client_prune_failed(oq_client_t *self, const char *queue, int64_t older_than_ms,
                           uint32_t limit, int timeout_ms, uint64_t *count, bool *more);

/* Withdraw a ready or delayed job: it is not delivered again. A leased job
   is refused (its effect may be under way). */
int oq_client_cancel(oq_client_t *self, uint64_t id, int timeout_ms);

/* Cancel the jobs of queue that have not started (ready, delayed, waiting
   for an overlap key), as a cancel of each: at most limit of them (0: the
   broker's maximum, OQ_MAX_CLEAR_PER_CALL) in one request. *count gets how
   many; *more is true while others wait: call again until it is false
   (one call is one bounded request; the loop is the caller's, so that it
   can stop or report between steps). Leased jobs are never cancelled. */
int oq_client_clear(oq_client_t *self, const char *queue, uint32_t limit, int timeout_ms,
                    uint64_t *count, bool *more);

/* Ask what bounds the time a duplicate of a held job can still arrive:
   0 with the decoded "horizon" reply in *reply (release it), or -1. */
int oq_client_horizon(oq_client_t *self, int timeout_ms, oq_msg_t *reply);
/* One page of the jobs waiting for review, the oldest first, after the
   cursor (after_at, after) as oq_client_failed_cursor (the reply is a
   "review"; after 0: from the first). */
int oq_client_review_page(oq_client_t *self, const char *queue, int64_t after_at, uint64_t after,
                          uint32_t limit, int timeout_ms, oq_msg_t *reply);

/* One job of the review store, waiting or resolved: 0 with the decoded
   "review_show" reply in *reply (its "job"), or -1 (an unknown job is a
   not_found naming it). */
int oq_client_review_show(oq_client_t *self, uint64_t id, int timeout_ms, oq_msg_t *reply);

/* Resolve a job in review with action and a note for the record (NULL or
   "": none). 0 once the broker has made the resolution durable, or -1 (a
   job resolved already or held in another state is a wrong_state naming
   it, one the broker does not know a not_found). */
int oq_client_resolve(oq_client_t *self, uint64_t id, oq_review_action_t action, const char *note,
                      int timeout_ms);

/* Wait until job id has ended, for at most wait_ms (0 ... OQ_MAX_WAIT_MS;
   0: only ask): 0 with *state, OQ_WAIT_PENDING if it had not ended by
   then, and for a failed job its error, for one in review its reason, in
   error[error_len] ("" otherwise; error may be NULL); or -1 (see
   oq_client_error): not_found for an id the broker never issued, full
   while it holds too many waits, or no answer within wait_ms + timeout_ms.
   A wait changes nothing, so a caller may simply wait again. */
int oq_client_wait(oq_client_t *self, uint64_t id, int64_t wait_ms, int timeout_ms,
                   oq_wait_state_t *state, char *error, size_t error_len);

/* Round trip a ping. 0 if the broker answered in time, -1 otherwise. */
int oq_client_ping(oq_client_t *self, int timeout_ms);

/* The last failure: the broker's error code (OQ_ERR_NONE for a local failure
   such as a timeout) and its text. Borrowed; valid until the next call. */
oq_err_t oq_client_error_code(const oq_client_t *self);
const char *oq_client_error(const oq_client_t *self);

#endif
