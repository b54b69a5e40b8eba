/*  onceq/proto.h: the wire protocol v1 codec (docs/protocol.md is the
    specification). Every message is one ZeroMQ frame holding one msgpack map
    with "v" (the protocol version) and "cmd" (the command name). The decoder
    enforces every limit in onceq/limits.h and never trusts a length it has
    not checked against the bytes that are really there.

    Decoded strings and the payload are borrowed from the oq_msg_t; they stay
    valid until oq_proto_msg_release(). */
#ifndef ONCEQ_PROTO_H
#define ONCEQ_PROTO_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onceq/limits.h"

typedef enum {
    OQ_CMD_UNKNOWN = 0,
    /* producer or admin -> broker front */
    OQ_CMD_DISPATCH,
    OQ_CMD_STATS,
    OQ_CMD_FAILED,
    OQ_CMD_PING,
    /* broker front -> producer or admin (OQ_CMD_STATS and OQ_CMD_FAILED are
       also the reply names) */
    OQ_CMD_DISPATCHED,
    OQ_CMD_PONG,
    OQ_CMD_ERROR, /* on both sockets */
    /* worker -> broker back */
    OQ_CMD_READY,
    OQ_CMD_HEARTBEAT, /* both ways */
    OQ_CMD_ACK,
    OQ_CMD_DRAIN,
    OQ_CMD_DISCONNECT,
    /* broker back -> worker */
    OQ_CMD_WELCOME,
    OQ_CMD_JOB,
    OQ_CMD_RECONNECT,
    /* added later, kept last so that the values above do not move */
    OQ_CMD_REQUEUE,  /* front: a failed job back to ready */
    OQ_CMD_REQUEUED, /* its reply */
    OQ_CMD_TOUCH,    /* worker -> broker: restart the lease of a running job */
    /* admin commands on the failed store and waiting jobs (front), each
       followed by its reply */
    OQ_CMD_FORGET,       /* delete a failed job for good */
    OQ_CMD_FORGOTTEN,    /* its reply */
    OQ_CMD_FLUSH,        /* delete every failed job (of one queue) */
    OQ_CMD_FLUSHED,      /* its reply: count */
    OQ_CMD_REQUEUE_ALL,  /* every failed job (of one queue) back to ready */
    OQ_CMD_REQUEUED_ALL, /* its reply: count */
    OQ_CMD_CANCEL,       /* withdraw a ready or delayed job */
    OQ_CMD_CANCELLED,    /* its reply */
    OQ_CMD_HORIZON,      /* what bounds a duplicate's arrival (request and reply) */
    /* front: the review store (docs/protocol.md, "review") */
    OQ_CMD_REVIEW,      /* list the jobs waiting for review; also its reply */
    OQ_CMD_REVIEW_SHOW, /* one job of the review store, open or resolved; also its reply */
    OQ_CMD_RESOLVE,     /* a person's decision on a job in review */
    OQ_CMD_RESOLVED,    /* its reply */
    OQ_CMD_STATUS,      /* worker -> broker: ready, or paused while what it needs is down */
    /* several in one message (docs/protocol.md, "Several jobs or acks per
       message"); read each entry with oq_proto_decode_entry */
    OQ_CMD_JOBS,   /* broker -> worker: deliveries, to a worker whose ready allowed them */
    OQ_CMD_ACKS,   /* worker -> broker: acks, to a broker whose welcome allowed them */
    OQ_CMD_WAIT,   /* front: answer once this job has ended, or its timeout has passed */
    OQ_CMD_WAITED, /* its reply: the job's end state, or pending */
    /* front: delete failed jobs older than an age, a bounded number per
       request (docs/protocol.md, "prune_failed") */
    OQ_CMD_PRUNE_FAILED,
    OQ_CMD_PRUNED_FAILED, /* its reply: count, and more while others are due */
    /* front: cancel the waiting jobs of one queue, a bounded number per
       request (docs/protocol.md, "clear") */
    OQ_CMD_CLEAR,
    OQ_CMD_CLEARED, /* its reply: count, and more while others wait */
    /* front: batches (docs/protocol.md, "dispatch_batch" and "batch") */
    OQ_CMD_DISPATCH_BATCH,   /* jobs with then / catch / finally */
    OQ_CMD_BATCH_DISPATCHED, /* its reply: batch, first, count */
    OQ_CMD_BATCH,            /* admin: op show, list or cancel; also its reply */
    OQ_CMD_CHAIN,            /* admin: a job's place in its chain; also its reply */
    OQ_CMD_COUNT_
} oq_cmd_t;

/* Error codes of an "error" reply. */
typedef enum {
    OQ_ERR_NONE = 0,
    OQ_ERR_MALFORMED,       /* not one msgpack map, or bad framing */
    OQ_ERR_TOO_LARGE,       /* a frame, payload or string over its limit */
    OQ_ERR_BAD_VERSION,     /* "v" missing or not OQ_PROTO_VERSION */
    OQ_ERR_UNKNOWN_COMMAND, /* "cmd" unknown, or not valid on this socket */
    OQ_ERR_BAD_REQUEST,     /* a field missing, of the wrong type or out of range */
    OQ_ERR_TIMEOUT_RULE,    /* job timeout not shorter than retry_after - margin */
    OQ_ERR_FULL,            /* the broker holds its maximum of jobs or queues */
    OQ_ERR_INTERNAL,
    OQ_ERR_UNAVAILABLE, /* the broker cannot make the request durable now (disk error) */
    OQ_ERR_NOT_FOUND,   /* admin: no such job (done, or never dispatched) */
    OQ_ERR_WRONG_STATE, /* admin: the job's state does not allow the command */
    OQ_ERR_FORBIDDEN,   /* the sender's key is not allowed this command (or no longer at all) */
    OQ_ERR_COUNT_
} oq_err_t;

typedef enum {
    OQ_OUTCOME_OK = 1,
    OQ_OUTCOME_RETRY,
    OQ_OUTCOME_FAIL,
    OQ_OUTCOME_TIMEOUT,
    OQ_OUTCOME_RETURN, /* handed back unrun: no try used */
    OQ_OUTCOME_REVIEW, /* outcome unknown: kept for a person, never retried on its own */
    /* handed back unrun because something the job needs (its database) is
       down: no try used, and the type stays with the worker */
    OQ_OUTCOME_UNAVAILABLE
} oq_outcome_t;

/* A worker's state, as its status message tells the broker. */
typedef enum {
    OQ_STATUS_READY = 1,   /* takes jobs as its credit allows */
    OQ_STATUS_UNAVAILABLE, /* paused: what its jobs need is down; it takes none */
} oq_worker_status_t;

/* What a person decides about a job in review (`resolve`). */
typedef enum {
    OQ_REVIEW_DONE = 1, /* the effect is there (or not needed): the job is complete */
    OQ_REVIEW_RETRY,    /* run it again: ready, with attempt 0 and its full budget */
    OQ_REVIEW_FAIL,     /* give up: to the failed store, with the note */
} oq_review_action_t;

/* What a "waited" reply says of its job (docs/protocol.md, "wait"). */
typedef enum {
    OQ_WAIT_PENDING = 1, /* not ended within the wait's timeout */
    OQ_WAIT_DONE,        /* completed (or no longer held, and not known to have ended otherwise) */
    OQ_WAIT_FAILED,      /* in the failed store (or deleted from it) */
    OQ_WAIT_REVIEW,      /* in the review store: a person decides */
    OQ_WAIT_CANCELLED,   /* withdrawn by an operator before it ran */
} oq_wait_state_t;

typedef enum { OQ_RESULT_NONE = 0, OQ_RESULT_APPLIED, OQ_RESULT_ALREADY_APPLIED } oq_result_t;

/* A length-delimited string borrowed from a message. Not NUL-terminated. */
typedef struct {
    const char *ptr;
    size_t len;
} oq_str_t;

/* The job envelope: what a producer dispatches and what a worker receives.
   has_* flags tell which optional fields were present on the wire. */
typedef struct {
    uint64_t id; /* 0 in a dispatch; set by the broker */
    oq_str_t type;
    oq_str_t queue;
    const uint8_t *payload; /* encoded msgpack map, never NULL after decode */
    size_t payload_len;
    uint32_t attempt; /* deliveries so far, 1 on the first */
    uint32_t max_tries;
    int64_t backoff_ms[OQ_MAX_BACKOFF_STEPS];
    uint32_t backoff_len;
    int64_t timeout_ms;
    int64_t delay_ms;
    int32_t priority;
    uint64_t lease; /* delivery only: the token an ack or touch echoes */
    bool has_max_tries, has_timeout, has_delay, has_priority, has_lease;
    /* Dispatch only: the producer's id for this dispatch (empty: none). On
       the wire it sits next to "job" in the dispatch message; a repeat within
       the broker's window is answered with the first dispatch's job id. */
    oq_str_t dispatch_id;
    /* Dispatch only, optional (docs/protocol.md, "unique_key"): while a job
       with unique_key is queued, delayed or leased, or within unique_for_ms
       of its dispatch (0: "done", only while it is), a dispatch with the
       same key is answered with that job's id. At most one job per
       overlap_key is leased at a time. Empty: none. */
    oq_str_t unique_key;
    int64_t unique_for_ms;
    oq_str_t overlap_key;
} oq_job_msg_t;

/* A worker's report on one delivery. */
typedef struct {
    uint64_t id;
    uint32_t attempt;
    oq_outcome_t outcome;
    oq_result_t result; /* only with OQ_OUTCOME_OK */
    oq_str_t error;     /* only with the other outcomes; may be empty */
    uint32_t credit;    /* jobs the worker can take in addition, usually 1 */
    uint64_t lease;     /* the delivery's token, echoed (has_lease) */
    int64_t delay_ms;   /* retry or return: ready after this instead of the backoff */
    bool has_lease, has_delay;
    /* return only: a job the worker held (prefetched) and hands back unrun;
       the worker still handles its type */
    bool held;
} oq_ack_msg_t;

/* One decoded message. Fields beyond cmd are filled for the commands that
   carry them; see docs/protocol.md. */
typedef struct {
    oq_cmd_t cmd;
    bool has_req;
    uint64_t req;     /* request id, echoed in front-socket replies */
    oq_job_msg_t job; /* dispatch, job */
    oq_ack_msg_t ack; /* ack; touch (id, attempt, lease) */
    uint64_t id;      /* dispatched, requeue, requeued, forget, forgotten, cancel, cancelled,
                         review_show, resolve, resolved, wait, waited */
    int64_t wait_ms;  /* wait: how long to wait (OQ_DEFAULT_WAIT_MS when absent); dispatch:
                         its "wait" (has_wait); prune_failed: its "older_than" */
    bool has_wait;    /* dispatch: answer with "waited" once the job has ended */
    oq_wait_state_t wait_state; /* waited: the job's end state, or pending */
    uint64_t count;             /* flushed, requeued_all, pruned_failed: how many jobs */
    bool unique;     /* dispatched: the id is an earlier job's, holding the same unique_key */
    uint32_t credit; /* ready */
    /* ready: deliveries the worker takes in one "jobs" message (1 when
       absent: one "job" message each), 1 ... OQ_MAX_JOBS_PER_MSG */
    uint32_t jobs_per_msg;
    /* welcome: acks the broker takes in one "acks" message (0 when absent:
       the broker knows no "acks"), 1 ... OQ_MAX_ACKS_PER_MSG */
    uint32_t acks_per_msg;
    /* jobs, acks: the entries, an array of 1 ... OQ_MAX_JOBS_PER_MSG (or
       OQ_MAX_ACKS_PER_MSG) maps, each decoded on its own with
       oq_proto_decode_entry. NULL for other commands. */
    const msgpack_object *entries;
    oq_str_t name; /* ready: worker name; failed, review, flush, requeue_all, prune_failed:
                      queue filter */
    uint32_t pid;  /* ready */
    /* ready: the job types the worker handles and the queues it serves (in
       priority order), each a msgpack array of valid names checked against
       OQ_MAX_WORKER_TYPES / OQ_MAX_WORKER_QUEUES; NULL when absent (every
       type, every queue). Read them with oq_proto_list_at. */
    const msgpack_object *types, *queues;
    uint32_t limit;   /* failed, review; stats: workers listed at most; prune_failed
                         (OQ_MAX_PRUNE_PER_CALL when absent) */
    uint64_t after;   /* failed, review: the cursor's job id (0: from the start); stats: the
                         workers' cursor (workers_next of the previous page) */
    int64_t after_at; /* failed: the cursor's failure time (has_after_at) */
    bool has_after_at;
    oq_worker_status_t status;       /* status: the worker's state */
    int64_t status_ms;               /* status: how long it has been in it */
    uint32_t heartbeat_ms, liveness; /* welcome */
    oq_err_t err_code;               /* error */
    oq_str_t err_text; /* error, reconnect; status: the last error; waited: the job's error or
                          reason (failed, review), empty otherwise */
    /* dispatch_batch: its jobs are the entries (read each with
       oq_proto_decode_job_object), its callbacks these maps (NULL: none,
       by oq_batch_callback_t: then, catch, finally), allow_failures its
       flag; batch_dispatched: id is the batch, after its first job, count
       its jobs; batch: name is the op, id the batch (0 with list) */
    const msgpack_object *callbacks[3];
    bool allow_failures;
    /* dispatch: its "chain" (the links after the job, read each with
       oq_proto_decode_job_object; NULL: none) and "chain_catch" (NULL:
       none); chain: id is the job */
    const msgpack_object *chain, *chain_catch;
    msgpack_object root; /* the whole decoded map (for stats and failed replies) */
    /* private */
    msgpack_unpacked unpacked_;
    msgpack_sbuffer payload_;
    bool live_;
} oq_msg_t;

/* Decode one frame into msg. Returns 0, or -1 with *code and a reason in
   reason[reason_len] (always NUL-terminated). Whether it succeeds or fails,
   release msg with oq_proto_msg_release() afterwards. */
int oq_proto_decode(oq_msg_t *msg, const void *data, size_t size, oq_err_t *code, char *reason,
                    size_t reason_len);

/* Free what a decoded message holds. Safe on a zeroed or released message. */
void oq_proto_msg_release(oq_msg_t *msg);

/* Entries of a decoded "jobs" or "acks" message; 0 for any other. */
uint32_t oq_proto_entry_count(const oq_msg_t *msg);

/* Decode entry i (< oq_proto_entry_count) of a "jobs" or "acks" message
   into entry as if it had come alone, as a "job" or an "ack" message:
   entry->cmd is OQ_CMD_JOB or OQ_CMD_ACK, with the same checks and limits.
   Returns 0, or -1 with *code and reason as oq_proto_decode. Strings are
   borrowed from msg; release entry with oq_proto_msg_release (before msg)
   whether it succeeds or fails. */
int oq_proto_decode_entry(const oq_msg_t *msg, uint32_t i, oq_msg_t *entry, oq_err_t *code,
                          char *reason, size_t reason_len);

/* Decode one frame as oq_proto_decode does, but leave the job of a "job"
   message undecoded (msg->job empty), for oq_proto_decode_delivery, as
   the entries of a "jobs" message are: a worker decodes each delivery
   once. */
int oq_proto_decode_shallow(oq_msg_t *msg, const void *data, size_t size, oq_err_t *code,
                            char *reason, size_t reason_len);

/* A delivery decoded for the worker that runs it: the job of a "job"
   message (i ignored), or entry i of a "jobs" message, with the checks and
   limits of a "job" message, its payload not packed again but left where
   it is in msg's tree: *payload is that map (an empty one for a job
   without a payload), and job->payload is NULL. Strings and *payload are
   borrowed from msg. Returns 0, or -1 with *code and reason as
   oq_proto_decode. */
int oq_proto_decode_delivery(const oq_msg_t *msg, uint32_t i, oq_job_msg_t *job,
                             const msgpack_object **payload, oq_err_t *code, char *reason,
                             size_t reason_len);

/* The id, attempt and lease token of entry i of a "jobs" or "acks" message,
   or of the job of a "job" message (i ignored), as far as they can be read
   whatever else is wrong with it: 0, or -1 without a valid id and attempt.
   Used to name a refused entry and to fail a job that does not decode. */
int oq_proto_entry_ids(const oq_msg_t *msg, uint32_t i, uint64_t *id, uint32_t *attempt,
                       bool *has_lease, uint64_t *lease);

/* Decode one job map of a dispatch_batch (an entry, or a callback) as
   the job of a "dispatch", its payload packed into packed (initialised
   here; destroy it whether this succeeds or fails). Strings are borrowed
   from the message the map is in. 0, or -1 with *code and reason. */
int oq_proto_decode_job_object(const msgpack_object *map, oq_job_msg_t *job,
                               msgpack_sbuffer *packed, oq_err_t *code, char *reason,
                               size_t reason_len);

/* Names on the wire. Borrowed static strings. */
const char *oq_proto_cmd_name(oq_cmd_t cmd);
const char *oq_proto_err_name(oq_err_t code);
const char *oq_proto_outcome_name(oq_outcome_t outcome);
const char *oq_proto_result_name(oq_result_t result);
const char *oq_proto_status_name(oq_worker_status_t status);
const char *oq_proto_wait_state_name(oq_wait_state_t state);

/* Look up a name; 0 on success, -1 if unknown. */
int oq_proto_outcome_parse(const char *name, size_t len, oq_outcome_t *outcome);

/* "done", "retry" or "fail"; "unknown" for another value. Static. */
const char *oq_proto_review_action_name(oq_review_action_t action);

/* Look up a review action by name; 0 on success, -1 if unknown. */
int oq_proto_review_action_parse(const char *name, size_t len, oq_review_action_t *action);

/* The fields of a decoded "resolve" or "resolved": the action, and the
   note (empty when absent; borrowed from msg). 0, or -1 if msg is not one
   of the two. The decoder has checked both already. */
int oq_proto_resolve_get(const oq_msg_t *msg, oq_review_action_t *action, oq_str_t *note);

/* True if name is a valid job type or queue name: 1..OQ_MAX_NAME_LEN bytes
   of [A-Za-z0-9_.:-]. */
bool oq_proto_name_valid(const char *name, size_t len);

/* True if id is a valid dispatch_id: 1..OQ_MAX_DISPATCH_ID_LEN bytes of
   printable ASCII without spaces (0x21..0x7e). */
bool oq_proto_dispatch_id_valid(const char *id, size_t len);

/* True if key is a valid unique_key or overlap_key: 1..OQ_MAX_JOB_KEY_LEN
   bytes of printable ASCII without spaces (0x21..0x7e). */
bool oq_proto_job_key_valid(const char *key, size_t len);

/* Item i of a decoded name list (ready's types or queues). */
oq_str_t oq_proto_list_at(const msgpack_object *list, uint32_t i);

/* Number of items of a decoded name list; 0 for NULL. */
uint32_t oq_proto_list_size(const msgpack_object *list);

/* oq_str_t from a C string (borrowed). */
oq_str_t oq_str(const char *text);

/* Copy s into out[out_len] with a terminating NUL, cutting if needed. */
void oq_str_copy(oq_str_t s, char *out, size_t out_len);

/* Peer input as an error text may quote it: s into out[out_len] with a
   terminating NUL, every byte outside printable ASCII (0x20..0x7e), and the
   backslash and the double quote, written as \xNN, so that the text is
   valid UTF-8 (a msgpack str any strict decoder reads) and shows what was
   sent. Cut before an escape that would not fit, never inside one. Every
   error text that quotes what a peer sent goes through it. Returns the
   length written. OQ_PROTO_QUOTED_BYTES(n) holds n bytes quoted. */
#define OQ_PROTO_QUOTE_MAX_BYTES 4 /* "\xNN": what one byte may take */
#define OQ_PROTO_QUOTED_BYTES(n) ((size_t)(n)*OQ_PROTO_QUOTE_MAX_BYTES + 1)
size_t oq_proto_quote(oq_str_t s, char *out, size_t out_len);

/* True if s equals the C string text. */
bool oq_str_eq(oq_str_t s, const char *text);

/*  Encoders. Each appends one complete message to buf (which the caller
    initialises with msgpack_sbuffer_init and frees with msgpack_sbuffer_destroy
    or msgpack_sbuffer_clear). A negative req means "no request id". */
void oq_proto_encode_dispatch(msgpack_sbuffer *buf, int64_t req, const oq_job_msg_t *job);
/* "dispatch" that also waits, up to wait_ms (0 ... OQ_MAX_WAIT_MS; sent as
   seconds), for the job to end: answered with "waited". */
void oq_proto_encode_dispatch_wait(msgpack_sbuffer *buf, int64_t req, const oq_job_msg_t *job,
                                   int64_t wait_ms);
void oq_proto_encode_dispatched(msgpack_sbuffer *buf, int64_t req, uint64_t id);
/* "dispatched" answering a dispatch whose unique_key an earlier job holds:
   id is that job's, and the reply says "unique": true. */
void oq_proto_encode_dispatched_unique(msgpack_sbuffer *buf, int64_t req, uint64_t id);
/* "requeue" (a request) or "requeued" (its reply), both carrying a job id. */
void oq_proto_encode_requeue(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, uint64_t id);
void oq_proto_encode_error(msgpack_sbuffer *buf, int64_t req, oq_err_t code, const char *text);
/* Commands without fields: stats, ping, pong, heartbeat, drain, disconnect. */
void oq_proto_encode_simple(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req);
/* A "stats" request whose reply lists at most limit workers (0: none),
   those registered after the cursor after (0: from the first). */
void oq_proto_encode_stats(msgpack_sbuffer *buf, int64_t req, uint64_t after, uint32_t limit);
void oq_proto_encode_failed_request(msgpack_sbuffer *buf, int64_t req, const char *queue,
                                    uint32_t limit);

/* The same with a cursor: only jobs after job after (0: no cursor), whose
   failure time the broker looks up. */
void oq_proto_encode_failed_page(msgpack_sbuffer *buf, int64_t req, const char *queue,
                                 uint64_t after, uint32_t limit);

/* The same with a whole cursor: only jobs after (after_at, after) in the
   failed store's order (failure time, then id), as a reply's next_at and
   next give it. */
void oq_proto_encode_failed_cursor(msgpack_sbuffer *buf, int64_t req, const char *queue,
                                   int64_t after_at, uint64_t after, uint32_t limit);

/* dispatch_batch: jobs[0 .. count-1], the callbacks (by then, catch,
   finally; NULL: none), allow_failures, and dispatch_id (empty: none). */
void oq_proto_encode_dispatch_batch(msgpack_sbuffer *buf, int64_t req, const oq_job_msg_t *jobs,
                                    size_t count, const oq_job_msg_t *const callbacks[3],
                                    bool allow_failures, oq_str_t dispatch_id);

/* dispatch of job with the links after it (links[0 .. count-1]) and
   chain_catch (NULL: none), docs/protocol.md "chain". */
void oq_proto_encode_dispatch_chain(msgpack_sbuffer *buf, int64_t req, const oq_job_msg_t *job,
                                    const oq_job_msg_t *links, size_t count,
                                    const oq_job_msg_t *chain_catch);

/* batch_dispatched: the batch, its first job and how many. */
void oq_proto_encode_batch_dispatched(msgpack_sbuffer *buf, int64_t req, uint64_t batch,
                                      uint64_t first, uint64_t count);

/* batch: op "show", "list" or "cancel", of batch id (0 with list). */
void oq_proto_encode_batch_request(msgpack_sbuffer *buf, int64_t req, const char *op, uint64_t id);

/* A message carrying one job id: forget, forgotten, cancel, cancelled. */
void oq_proto_encode_job_id(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, uint64_t id);

/* flush or requeue_all, of one queue (NULL: every queue). */
void oq_proto_encode_queue_op(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, const char *queue);

/* flushed or requeued_all: how many jobs. */
void oq_proto_encode_count(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, uint64_t count);
/* "prune_failed" {older_than, queue?, limit?}: delete up to limit (1 ...
   OQ_MAX_PRUNE_PER_CALL; 0: leave it out, the broker's maximum) failed
   jobs of queue (NULL: every queue) that failed more than older_than_ms
   ago (sent as seconds). */
void oq_proto_encode_prune_failed(msgpack_sbuffer *buf, int64_t req, const char *queue,
                                  int64_t older_than_ms, uint32_t limit);
/* "pruned_failed" {count, more}: how many were deleted, and whether more
   failed jobs of that age remain (send the request again). The decoder
   checks "more"; read it with oq_proto_map_get on the reply's root. */
void oq_proto_encode_pruned_failed(msgpack_sbuffer *buf, int64_t req, uint64_t count, bool more);
/* "clear" {queue, limit?}: cancel up to limit (1 ... OQ_MAX_CLEAR_PER_CALL;
   0: leave it out, the broker's maximum) of the jobs of queue that have
   not started (ready, delayed, waiting for their overlap key). */
void oq_proto_encode_clear(msgpack_sbuffer *buf, int64_t req, const char *queue, uint32_t limit);
/* "cleared" {count, more}: how many were cancelled, and whether others of
   the queue still wait (send the request again). Read "more" as for
   pruned_failed. */
void oq_proto_encode_cleared(msgpack_sbuffer *buf, int64_t req, uint64_t count, bool more);
/* "review": a page of the review store, as failed_cursor (after_at < 0:
   the job id alone). */
void oq_proto_encode_review_page(msgpack_sbuffer *buf, int64_t req, const char *queue,
                                 int64_t after_at, uint64_t after, uint32_t limit);
/* "review_show" {id}: one job of the review store. */
void oq_proto_encode_review_show(msgpack_sbuffer *buf, int64_t req, uint64_t id);
/* "resolve" (a request) or "resolved" (its reply) {id, action, note?}; note
   NULL or "" for none (cut at OQ_MAX_REVIEW_NOTE_LEN). */
void oq_proto_encode_resolve(msgpack_sbuffer *buf, oq_cmd_t cmd, int64_t req, uint64_t id,
                             oq_review_action_t action, const char *note);
void oq_proto_encode_ready(msgpack_sbuffer *buf, uint32_t credit, const char *name, uint32_t pid);
/* ready with the worker's job types and queues (either list may be NULL:
   absent, meaning every type or every queue). */
void oq_proto_encode_ready_routed(msgpack_sbuffer *buf, uint32_t credit, const char *name,
                                  uint32_t pid, const char *const *types, size_t type_count,
                                  const char *const *queues, size_t queue_count);
/* touch {id, attempt, lease}: ack's id, attempt and lease are used. */
void oq_proto_encode_touch(msgpack_sbuffer *buf, const oq_ack_msg_t *touch);
/* status {state, since, error?}: since_ms is how long the worker has been in
   that state (clamped to OQ_MAX_DELAY_MS); error (NULL or "": none) is cut
   at OQ_MAX_ERROR_LEN bytes. */
void oq_proto_encode_status(msgpack_sbuffer *buf, oq_worker_status_t status, int64_t since_ms,
                            const char *error);
/* ready, routed, saying the worker takes up to jobs_per_msg deliveries in
   one "jobs" message (1: the key is left out; one "job" message each). */
void oq_proto_encode_ready_multi(msgpack_sbuffer *buf, uint32_t credit, const char *name,
                                 uint32_t pid, const char *const *types, size_t type_count,
                                 const char *const *queues, size_t queue_count,
                                 uint32_t jobs_per_msg);
void oq_proto_encode_welcome(msgpack_sbuffer *buf, uint32_t heartbeat_ms, uint32_t liveness);
/* welcome saying the broker takes up to acks_per_msg acks in one "acks"
   message (0: the key is left out). */
void oq_proto_encode_welcome_acks(msgpack_sbuffer *buf, uint32_t heartbeat_ms, uint32_t liveness,
                                  uint32_t acks_per_msg);
void oq_proto_encode_ack(msgpack_sbuffer *buf, const oq_ack_msg_t *ack);
/* "acks" {acks:[...]}: count (1 ... OQ_MAX_ACKS_PER_MSG) acks in one message. */
void oq_proto_encode_acks(msgpack_sbuffer *buf, const oq_ack_msg_t *acks, size_t count);
void oq_proto_encode_job(msgpack_sbuffer *buf, const oq_job_msg_t *job);
/* "jobs" {jobs:[...]}: count (1 ... OQ_MAX_JOBS_PER_MSG) deliveries in one
   message; the caller keeps the message within OQ_MAX_JOBS_MSG_BYTES. */
void oq_proto_encode_jobs(msgpack_sbuffer *buf, const oq_job_msg_t *jobs, size_t count);
void oq_proto_encode_reconnect(msgpack_sbuffer *buf, const char *reason);
/* "wait" {id, timeout}: answer once job id has ended, or after timeout_ms
   (0 ... OQ_MAX_WAIT_MS; sent as seconds). */
void oq_proto_encode_wait(msgpack_sbuffer *buf, int64_t req, uint64_t id, int64_t timeout_ms);
/* "waited" {id, state, error?}: error (NULL or "": none) is the failed
   job's error or the reason a job is in review, cut at OQ_MAX_ERROR_LEN. */
void oq_proto_encode_waited(msgpack_sbuffer *buf, int64_t req, uint64_t id, oq_wait_state_t state,
                            const char *error);

/* Start a message with `extra` more key/value pairs after v, cmd and (if
   req >= 0) req; the caller packs those pairs with pk. Used for the stats and
   failed replies, whose bodies the broker builds itself. */
void oq_proto_begin(msgpack_packer *pk, oq_cmd_t cmd, int64_t req, uint32_t extra);

/* Pack a C string as a msgpack str. */
void oq_proto_pack_cstr(msgpack_packer *pk, const char *text);

/* Pack a length-delimited string as a msgpack str. */
void oq_proto_pack_str(msgpack_packer *pk, oq_str_t s);

/* Look up key in a decoded map; NULL if absent or obj is not a map. */
const msgpack_object *oq_proto_map_get(const msgpack_object *obj, const char *key);

#endif
