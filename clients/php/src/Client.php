<?php
declare(strict_types=1);

namespace Onceq;

use Onceq\Exception\BrokerException;
use Onceq\Exception\ConfigException;
use Onceq\Exception\OnceqException;
use Onceq\Exception\ProtocolException;
use Onceq\Exception\TimeoutException;
use Onceq\Protocol\Check;
use Onceq\Protocol\Unreadable;

/**
 * A producer on the broker's front socket (docs/protocol.md §5).
 *
 *     $client = new Client('tcp://127.0.0.1:7750', [
 *         'key' => '/etc/onceq/me/app.key_secret',     // or public_key + secret_key (Z85)
 *         'broker_key' => '/etc/onceq/keys/broker.key', // or its Z85 public key
 *     ]);
 *     $id = $client->dispatch('grant_points', ['order_id' => 42, 'customer_id' => 7, 'points' => 120]);
 *
 * Every request is sent at most `tries` times, waiting `timeout_ms` for
 * each answer, each time on a fresh socket (the Lazy Pirate pattern). A
 * dispatch carries a dispatch id (a new random one unless given), so a
 * resend never queues the job twice. An `error` reply is thrown as the
 * BrokerException subclass of its code; no answer at all as a
 * TimeoutException.
 */
final class Client
{
    public const DEFAULT_ENDPOINT = 'tcp://127.0.0.1:7750';
    /** The most jobs one `clear` request cancels (docs/protocol.md §2). */
    public const MAX_CLEAR_PER_CALL = 1000;

    /** Jobs in one batch at most (OQ_MAX_BATCH_JOBS). */
    public const MAX_BATCH_JOBS = 10000;

    /** Dispatch options that go into the job map as they are. */
    private const JOB_OPTIONS = ['queue', 'max_tries', 'backoff', 'timeout', 'delay', 'priority',
        'unique_key', 'unique_for', 'overlap_key'];

    private ?Curve $curve;
    private int $timeoutMs;
    private int $tries;
    private ?Connection $connection = null;
    private int $nextReq;

    /**
     * @param array{key?: string, public_key?: string, secret_key?: string, broker_key?: string,
     *              timeout_ms?: int, tries?: int} $options
     *        timeout_ms: how long to wait for each answer (default 5000);
     *        tries: sends of one request in all, 1 … 100 (default 3)
     */
    public function __construct(private string $endpoint = self::DEFAULT_ENDPOINT, array $options = [])
    {
        $this->curve = Curve::fromOptions($options);
        $this->timeoutMs = (int)($options['timeout_ms'] ?? 5000);
        $this->tries = (int)($options['tries'] ?? 3);
        if ($this->timeoutMs < 1) {
            throw new ConfigException('onceq: timeout_ms must be at least 1');
        }
        if ($this->tries < 1 || $this->tries > 100) {
            throw new ConfigException('onceq: tries must be from 1 to 100');
        }
        $this->nextReq = random_int(1, 1 << 40);
    }

    /**
     * Queue one job; returns its id once the broker holds it durably.
     *
     * @param array $payload the handler's arguments (values, not objects)
     * @param array{queue?: string, delay?: int|float, max_tries?: int, backoff?: int|float|array,
     *              timeout?: int|float, priority?: int, dispatch_id?: string,
     *              unique_key?: string, unique_for?: int|float|string, overlap_key?: string,
     *              chain?: list<array>, chain_catch?: array} $options
     *        durations in seconds; backoff a list of steps (the last repeats) or one number;
     *        unique_key: while a job with this key is queued, delayed or running (or within
     *        unique_for seconds of its dispatch; 'done', the default: only while it is), a
     *        dispatch with it returns that job's id and queues nothing (ShouldBeUnique);
     *        overlap_key: never two jobs with this key running at once (WithoutOverlapping);
     *        chain: jobs ['type' => …, 'payload' => …, …] run one after another, each once, on the
     *        ok of the one before; chain_catch: a job run once if a link fails for good.
     *        Both save work; the handler's guard row is what keeps the data right.
     */
    public function dispatch(string $type, array $payload = [], array $options = []): int
    {
        return $this->dispatchReply($type, $payload, $options)['id'];
    }

    /**
     * dispatch() that also says whether the broker answered with an earlier
     * job holding the same unique_key: ['id' => int, 'unique' => bool]
     * (unique true: nothing new was queued, id is that job's).
     */
    public function dispatchReply(string $type, array $payload = [], array $options = []): array
    {
        [$fields, $dispatchId] = $this->dispatchFields($type, $payload, $options);
        $reply = $this->request('dispatch', $fields, 'dispatched', $dispatchId);
        return ['id' => self::jobId($reply), 'unique' => ($reply['unique'] ?? false) === true];
    }

    /**
     * dispatch() and wait() in one request (docs/protocol.md §5, "Dispatch and
     * wait in one request"): the wait travels with the dispatch, so the job is
     * on its way to a worker while the answer is owed, with no round trip
     * between them. Returns ['id' => int, 'unique' => bool, 'state' => …,
     * 'error' => …]: the job's id and dispatchReply()'s unique, and the wait's
     * outcome as wait() gives it ('pending': the job is queued and had not
     * ended within $timeout seconds; wait($id) again). $timeout is wait()'s
     * (0 to 3600); each send of the request waits that long on top of
     * timeout_ms, and a resend carries the same dispatch id and req, so it
     * waits for the first dispatch's job.
     *
     * A broker that answers a plain `dispatched` instead (a unique_key's
     * holder, a wait past its limits, a broker from before this) gets a
     * wait() for the id, for what is left of $timeout. If only that wait
     * fails, the job is queued all the same: the exception's getJobId()
     * names it.
     */
    public function dispatchWait(string $type, array $payload = [], array $options = [],
        int|float $timeout = 30): array
    {
        self::checkWaitTimeout($timeout);
        [$fields, $dispatchId] = $this->dispatchFields($type, $payload, $options);
        $started = hrtime(true);
        $reply = $this->request('dispatch', ['wait' => $timeout] + $fields, ['waited', 'dispatched'], $dispatchId,
            (int)ceil($timeout * 1000));
        $id = self::jobId($reply);
        $unique = ($reply['unique'] ?? false) === true;
        if ($reply['cmd'] === 'waited') {
            return ['id' => $id, 'unique' => $unique] + self::waitOutcome($reply);
        }
        $left = max(0, $timeout - (hrtime(true) - $started) / 1e9);
        try {
            return ['id' => $id, 'unique' => $unique] + $this->wait($id, $left);
        } catch (OnceqException $e) {
            throw $e->withQueuedJob($id);
        }
    }

    /**
     * Dispatch a batch (docs/workflows.md): $jobs a list of
     * ['type' => string, 'payload' => array, ...the dispatch options but
     * dispatch_id and unique_key], queued all together or not at all, and
     * $options 'then', 'catch', 'finally' (each a job as in $jobs, run by the
     * broker exactly once: then when every job is done, catch on the first
     * failure, finally when all have settled), 'allow_failures' (bool) and
     * 'dispatch_id' (a resend with it returns the same batch; a random one
     * by default). Returns ['batch' => int, 'ids' => list<int>] (the jobs'
     * ids in the order given) once the batch is durable.
     */
    public function dispatchBatch(array $jobs, array $options = []): array
    {
        $unknown = array_diff(array_keys($options), ['then', 'catch', 'finally', 'allow_failures', 'dispatch_id']);
        if ($unknown !== []) {
            throw new ConfigException('onceq: unknown batch option(s): ' . implode(', ', $unknown) .
                ' (known: then, catch, finally, allow_failures, dispatch_id)');
        }
        if ($jobs === [] || count($jobs) > self::MAX_BATCH_JOBS) {
            throw new ConfigException('onceq: a batch holds 1 to ' . self::MAX_BATCH_JOBS . ' jobs, not ' . count($jobs));
        }
        $job = function (mixed $spec, string $what): array {
            if (!is_array($spec) || !is_string($spec['type'] ?? null)) {
                throw new ConfigException("onceq: $what must be ['type' => string, 'payload' => array, ...]");
            }
            if (isset($spec['unique_key']) || isset($spec['dispatch_id'])) {
                throw new ConfigException("onceq: $what may carry neither a unique_key nor a dispatch_id " .
                    '(the batch has its own dispatch_id)');
            }
            $options = $spec;
            unset($options['type'], $options['payload']);
            [$fields] = $this->dispatchFields($spec['type'], (array)($spec['payload'] ?? []), $options);
            return $fields['job'];
        };
        $fields = ['jobs' => []];
        foreach (array_values($jobs) as $i => $spec) {
            $fields['jobs'][] = $job($spec, "job $i of the batch");
        }
        foreach (['then', 'catch', 'finally'] as $name) {
            if (isset($options[$name])) {
                $fields[$name] = $job($options[$name], "the $name callback");
            }
        }
        if (($options['allow_failures'] ?? false) === true) {
            $fields['allow_failures'] = true;
        }
        $dispatchId = (string)($options['dispatch_id'] ?? bin2hex(random_bytes(16)));
        $fields['dispatch_id'] = $dispatchId;
        $reply = $this->request('dispatch_batch', $fields, 'batch_dispatched', $dispatchId);
        foreach (['batch', 'first', 'count'] as $key) {
            if (!is_int($reply[$key] ?? null) || $reply[$key] < 1) {
                throw new ProtocolException("onceq: a batch_dispatched reply without a valid \"$key\"");
            }
        }
        return ['batch' => $reply['batch'], 'ids' => range($reply['first'], $reply['first'] + $reply['count'] - 1)];
    }

    /**
     * The broker's view of batch $id (docs/protocol.md, "batch"): its counts
     * (total, pending, done, failed, cancelled), state and the job each
     * callback was dispatched as; a NotFoundException if it is not known.
     */
    public function batch(int $id): array
    {
        return $this->request('batch', ['op' => 'show', 'id' => $id], 'batch')['batch'] ?? [];
    }

    /** Cancel batch $id: its waiting jobs are withdrawn; returns the reply's batch and withdrawn. */
    public function cancelBatch(int $id): array
    {
        $reply = $this->request('batch', ['op' => 'cancel', 'id' => $id], 'batch');
        return ['batch' => $reply['batch'] ?? [], 'withdrawn' => $reply['withdrawn'] ?? 0];
    }

    /**
     * The fields of a dispatch request and its dispatch id (the caller's, or
     * a new random one); a ConfigException for an option this does not know.
     *
     * @return array{0: array, 1: string}
     */
    private function dispatchFields(string $type, array $payload, array $options): array
    {
        $known = [...self::JOB_OPTIONS, 'dispatch_id', 'chain', 'chain_catch'];
        $unknown = array_diff(array_keys($options), $known);
        if ($unknown !== []) {
            throw new ConfigException('onceq: unknown dispatch option(s): ' . implode(', ', $unknown) .
                ' (known: ' . implode(', ', $known) . ')');
        }
        $job = ['type' => $type];
        foreach (self::JOB_OPTIONS as $name) {
            if (array_key_exists($name, $options) && $options[$name] !== null) {
                $job[$name] = $options[$name];
            }
        }
        if (isset($job['backoff']) && !is_array($job['backoff'])) {
            $job['backoff'] = [$job['backoff']];
        }
        $job['payload'] = (object)$payload; // a map, also when empty
        $dispatchId = (string)($options['dispatch_id'] ?? bin2hex(random_bytes(16)));
        $fields = ['dispatch_id' => $dispatchId, 'job' => $job];
        // A chain (docs/workflows.md): the links after this job, each run once
        // on the ok of the one before; chain_catch once on a final failure.
        foreach (['chain', 'chain_catch'] as $name) {
            if (!isset($options[$name])) {
                continue;
            }
            $links = $name === 'chain' ? $options[$name] : [$options[$name]];
            if (!is_array($links) || !array_is_list($links)) {
                throw new ConfigException("onceq: option $name must be " .
                    ($name === 'chain' ? 'a list of jobs' : 'a job') . " ['type' => string, 'payload' => array, ...]");
            }
            $maps = [];
            foreach ($links as $i => $link) {
                if (!is_array($link) || !is_string($link['type'] ?? null) || isset($link['chain']) ||
                    isset($link['chain_catch']) || isset($link['dispatch_id']) || isset($link['unique_key'])) {
                    throw new ConfigException("onceq: $name entry $i must be ['type' => string, 'payload' => array, ...] " .
                        'without dispatch_id, unique_key or a chain of its own');
                }
                $linkOptions = $link;
                unset($linkOptions['type'], $linkOptions['payload']);
                $maps[] = $this->dispatchFields($link['type'], (array)($link['payload'] ?? []), $linkOptions)[0]['job'];
            }
            $fields[$name] = $name === 'chain' ? $maps : $maps[0];
        }
        return [$fields, $dispatchId];
    }

    /** The job id of a dispatched or waited reply (Check::reply() has seen it). */
    private static function jobId(array $reply): int
    {
        return Check::id($reply, $reply['cmd']);
    }

    /**
     * Wait until job $id has ended, for at most $timeout seconds (0 to 3600;
     * 0 only asks): ['state' => 'done'|'failed'|'review'|'cancelled'|'pending',
     * 'error' => the failed job's error or the reviewed job's reason, else ''].
     * 'pending': the job had not ended by then; wait again. A job the broker
     * no longer holds has ended (docs/protocol.md §5, wait). An id the broker
     * never issued is a NotFoundException; one below 1 a ConfigException, sent nowhere.
     */
    public function wait(int $id, int|float $timeout = 30): array
    {
        if ($id < 1) {
            throw new ConfigException("onceq: a job id is an integer from 1, not $id");
        }
        self::checkWaitTimeout($timeout);
        $reply = $this->request('wait', ['id' => $id, 'timeout' => $timeout], 'waited', null,
            (int)ceil($timeout * 1000));
        return self::waitOutcome($reply);
    }

    /** A wait's timeout in seconds: 0 to 3600 (docs/protocol.md §2), else a ConfigException. */
    private static function checkWaitTimeout(int|float $timeout): void
    {
        if (is_nan($timeout) || $timeout < 0 || $timeout > 3600) {
            throw new ConfigException("onceq: a wait lasts 0 to 3600 seconds, not $timeout");
        }
    }

    /** ['state' => …, 'error' => …] of a waited reply (Check::reply() has seen it). */
    private static function waitOutcome(array $reply): array
    {
        return ['state' => $reply['state'], 'error' => $reply['error'] ?? ''];
    }

    /**
     * The broker's stats map (docs/protocol.md §5, stats). Its 'workers' is
     * one page: at most $workers of them (0 … 1,000; null: the broker's
     * default, 100), those registered after the cursor $after (0: from the
     * first). While more remain, 'workers_next' is the $after of the next
     * page; 'broker' => ['workers' => …] counts them all.
     */
    public function stats(?int $workers = null, int $after = 0): array
    {
        $fields = [];
        if ($workers !== null) {
            $fields['limit'] = $workers;
        }
        if ($after > 0) {
            $fields['after'] = $after;
        }
        return $this->request('stats', $fields, 'stats');
    }

    /**
     * Close the socket now. The client stays usable: the next request opens
     * a fresh one. Call it when done (a shutdown hook closes whatever is
     * left open, so a process never hangs at exit in zmq_ctx_term).
     */
    public function close(): void
    {
        $this->connection?->close();
        $this->connection = null;
    }

    public function __destruct()
    {
        $this->close();
    }

    /**
     * Cancel every job of $queue that has not started (ready, delayed,
     * waiting for its overlap key), as a `cancel` of each (docs/protocol.md
     * §5, clear): an admin command, so the client needs an admin key. The
     * broker cancels at most MAX_CLEAR_PER_CALL per request and says whether
     * more wait; this asks again until none does, and returns how many were
     * cancelled in all. Leased jobs finish or fail as usual. A request that
     * cancels nothing while the broker says more wait ends the loop with a
     * ProtocolException, so the loop always ends.
     */
    public function clear(string $queue): int
    {
        $total = 0;
        do {
            $reply = $this->request('clear', ['queue' => $queue], 'cleared');
            $count = (int)($reply['count'] ?? 0);
            $more = ($reply['more'] ?? false) === true;
            $total += $count;
            if ($more && $count === 0) {
                throw new ProtocolException("onceq: the broker says more jobs of queue $queue wait but cancelled none");
            }
        } while ($more);
        return $total;
    }

    /** True once the broker answers a ping; a TimeoutException otherwise. */
    public function ping(): bool
    {
        $this->request('ping', [], 'pong');
        return true;
    }

    /**
     * One request and its reply, resent on silence. $fields go next to v,
     * cmd and req; the reply is the broker's map, its cmd $expect (or one of
     * a list). $holdMs: how long the broker may hold the answer on purpose
     * (a wait), on top of the timeout.
     *
     * A reply the C client would refuse (a frame over 1 MiB, not one
     * msgpack map, a job id below 1, an error text over 1,024 bytes: see
     * Protocol\Check) is a ProtocolException naming what is wrong; one
     * that cannot be told to be ours is passed over, and named in the
     * TimeoutException if no answer follows. A reply over
     * Codec::MAX_WIRE_MSG_BYTES never reaches PHP: libzmq drops the
     * connection, and the request is sent again on a fresh one.
     */
    public function request(string $cmd, array $fields, string|array $expect, ?string $dispatchId = null,
        int $holdMs = 0): array
    {
        $expect = (array)$expect;
        $req = $this->nextReq++;
        $message = ['cmd' => $cmd, 'req' => $req] + $fields;
        $dropped = null;
        for ($try = 1; $try <= $this->tries; $try++) {
            $this->connection ??= new Connection($this->endpoint, $this->curve);
            $this->connection->send($message);
            $deadline = hrtime(true) + ($this->timeoutMs + $holdMs) * 1_000_000;
            while (($left = intdiv($deadline - hrtime(true), 1_000_000)) > 0) {
                $reply = $this->connection->receive($left);
                if ($reply instanceof Unreadable) {
                    if ($reply->req === $req) {
                        throw new ProtocolException("onceq: a bad reply from the broker at {$this->endpoint} to $cmd: " .
                            preg_replace('/^onceq: /', '', $reply->reason));
                    }
                    $dropped = $reply->reason;
                    continue;
                }
                if ($reply === null || ($reply['req'] ?? null) !== $req) {
                    continue; // nothing yet, or a late answer to an earlier request
                }
                try {
                    Check::reply($reply);
                } catch (ProtocolException $e) {
                    throw new ProtocolException("onceq: a bad reply from the broker at {$this->endpoint} to $cmd: " .
                        preg_replace('/^onceq: /', '', $e->getMessage()));
                }
                if ($reply['cmd'] === 'error') {
                    throw BrokerException::fromReply($reply);
                }
                if (!in_array($reply['cmd'], $expect, true)) {
                    throw new ProtocolException('onceq: expected "' . implode('" or "', $expect) .
                        '" from the broker, got ' . Check::show($reply['cmd']));
                }
                return $reply;
            }
            // Silence: drop this socket (and whatever it queued) and try again on a fresh one.
            $this->connection->close();
            $this->connection = null;
        }
        $what = $dispatchId !== null ? " (dispatch id $dispatchId: send it again with this id to be sure)" : '';
        $what .= $dropped !== null ? " (dropped an unreadable message: $dropped)" : '';
        throw new TimeoutException(sprintf(
            'onceq: no answer from the broker at %s to %s after %d tries of %d ms%s',
            $this->endpoint,
            $cmd,
            $this->tries,
            $this->timeoutMs + $holdMs,
            $what
        ), $dispatchId);
    }
}
