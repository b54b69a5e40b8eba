<?php
declare(strict_types=1);

namespace Onceq\Laravel;

use Illuminate\Contracts\Cache\Repository as Cache;
use Illuminate\Contracts\Queue\ClearableQueue;
use Illuminate\Contracts\Queue\Queue as QueueContract;
use Illuminate\Contracts\Queue\ShouldBeUnique;
use Illuminate\Contracts\Queue\ShouldBeUniqueUntilProcessing;
use Illuminate\Queue\Middleware\WithoutOverlapping;
use Illuminate\Queue\Queue;
use Onceq\Client;
use Onceq\Exception\ConfigException;

/**
 * A Laravel queue connection on onceq (config/queue.php: 'driver' => 'onceq').
 *
 * Producing: push(), later(), pushRaw() and bulk() send Laravel's JSON
 * payload whole, as the string `laravel` of the onceq job's payload map, so
 * getRawBody(), the failed store and queue:retry see it byte for byte. What
 * the broker enforces is taken from that JSON (not from the job object: the
 * JSON is what queue:retry sends again, and what every Laravel version
 * fills in): maxTries → max_tries, backoff → backoff, timeout → timeout
 * (the broker refuses one not shorter than the queue's retry_after by the
 * margin: a TimeoutRuleException naming the numbers), the queue, the delay.
 * ShouldBeUnique becomes a unique_key and WithoutOverlapping an
 * overlap_key, which the broker holds and which cannot leak; Laravel's own
 * unique lock is released once the broker has answered (unique_lock
 * 'broker', the default), so a stale cache lock can never swallow a
 * dispatch.
 *
 * Clearing: clear() (queue:clear) cancels the queue's jobs that have not
 * started, with the admin key; leased ones finish or fail as usual.
 *
 * Working: pop() leases one job through a WorkerLink (one per process, on
 * the back socket), or returns null when none comes within block_for, with
 * no credit left out while queue:work sleeps.
 */
class OnceqQueue extends Queue implements QueueContract, ClearableQueue
{
    public const DEFAULT_TYPE = 'laravel';
    public const DEFAULT_BLOCK_FOR_S = 1.0;
    /** How long a request waits for each answer (the client sends it 3 times in all). */
    public const DEFAULT_TIMEOUT_MS = 5000;
    /** max_tries for a job Laravel lets run for ever ($tries = 0, or retryUntil alone): the broker's most. */
    public const UNLIMITED_TRIES = 1000;
    /** The most backoff steps the broker keeps (docs/protocol.md §2). */
    public const MAX_BACKOFF_STEPS = 16;

    private array $config;
    private string $type;
    private string $default;
    private ?Client $client = null;
    private ?WorkerLink $worker = null;

    public function __construct(array $config)
    {
        $this->config = $config;
        $this->type = (string)($config['type'] ?? self::DEFAULT_TYPE);
        $this->default = (string)($config['queue'] ?? 'default');
        if (!preg_match('/^[A-Za-z0-9_.:\-]{1,64}$/', $this->type)) {
            throw new ConfigException("onceq: the connection's type \"{$this->type}\": 1-64 bytes of A-Z a-z 0-9 _ . : -");
        }
        $lock = $config['unique_lock'] ?? 'broker';
        if (!in_array($lock, ['broker', 'laravel'], true)) {
            throw new ConfigException("onceq: unique_lock is 'broker' or 'laravel', not " . json_encode($lock));
        }
    }

    /** The job type every job of this connection carries (config 'type', default 'laravel'). */
    public function type(): string
    {
        return $this->type;
    }

    /** The producer: the front socket with the connection's producer key. */
    public function client(): Client
    {
        return $this->client ??= new Client((string)($this->config['front'] ?? Client::DEFAULT_ENDPOINT),
            self::keys($this->config, 'key') + ['timeout_ms' => (int)($this->config['timeout_ms'] ?? self::DEFAULT_TIMEOUT_MS)]);
    }

    /** An admin client (config 'admin_key'), for clear() and the failed store; a ConfigException without one. */
    public function adminClient(): Client
    {
        if (empty($this->config['admin_key'])) {
            throw new ConfigException("onceq: the connection needs 'admin_key' (a key in the broker's admins/) for this");
        }
        return new Client((string)($this->config['front'] ?? Client::DEFAULT_ENDPOINT),
            self::keys($this->config, 'admin_key') + ['timeout_ms' => (int)($this->config['timeout_ms'] ?? self::DEFAULT_TIMEOUT_MS)]);
    }

    /** @return array{key?: string, broker_key?: string} */
    private static function keys(array $config, string $which): array
    {
        return array_filter(['key' => $config[$which] ?? null, 'broker_key' => $config['broker_key'] ?? null],
            static fn ($v) => $v !== null && $v !== '');
    }

    /** Jobs of the queue the broker holds that are not done: ready, delayed, leased and waiting. */
    public function size($queue = null)
    {
        $counts = $this->counts($queue);
        return $counts['ready'] + $counts['delayed'] + $counts['leased'] + $counts['waiting'];
    }

    /** Laravel 12+'s size methods (13's contract). */
    public function pendingSize($queue = null)
    {
        $counts = $this->counts($queue);
        return $counts['ready'] + $counts['waiting'];
    }

    public function delayedSize($queue = null)
    {
        return $this->counts($queue)['delayed'];
    }

    public function reservedSize($queue = null)
    {
        return $this->counts($queue)['leased'];
    }

    /**
     * queue:clear: cancel the jobs of the queue that have not started
     * (ready, delayed, waiting behind an overlap key) at the broker, each
     * journaled as a cancel; returns how many. Leased jobs are left to
     * finish or fail. Needs 'admin_key'.
     */
    public function clear($queue)
    {
        $client = $this->adminClient();
        try {
            return $client->clear(Names::queue($this->getQueue($queue)));
        } finally {
            $client->close();
        }
    }

    /** The broker keeps no creation time per queue. */
    public function creationTimeOfOldestPendingJob($queue = null)
    {
        return null;
    }

    /** @return array{ready: int, delayed: int, leased: int, waiting: int} */
    private function counts($queue): array
    {
        $name = Names::queue($this->getQueue($queue));
        $counts = ['ready' => 0, 'delayed' => 0, 'leased' => 0, 'waiting' => 0];
        foreach ($this->client()->stats(0)['queues'] ?? [] as $q) {
            if (is_array($q) && ($q['name'] ?? null) === $name) {
                foreach ($counts as $k => $_) {
                    $counts[$k] = (int)($q[$k] ?? 0);
                }
            }
        }
        return $counts;
    }

    public function push($job, $data = '', $queue = null)
    {
        $queue = $this->getQueue($queue);
        return $this->enqueueUsing($job, $this->createPayload($job, $queue, $data), $queue, null,
            fn ($payload, $queue) => $this->send($payload, $queue, 0, $job));
    }

    public function pushRaw($payload, $queue = null, array $options = [])
    {
        return $this->send((string)$payload, $this->getQueue($queue), $options['delay'] ?? 0, null);
    }

    public function later($delay, $job, $data = '', $queue = null)
    {
        $queue = $this->getQueue($queue);
        return $this->enqueueUsing($job, $this->createPayload($job, $queue, $data), $queue, $delay,
            fn ($payload, $queue, $delay) => $this->send($payload, $queue, $delay, $job));
    }

    public function getQueue($queue = null): string
    {
        return ($queue === null || $queue === '') ? $this->default : (string)$queue;
    }

    /**
     * Dispatch one Laravel payload; returns the onceq job id (a string, as
     * Laravel's drivers return theirs). $job is the object when there is one
     * (push, later): its unique and overlap keys come from it.
     */
    private function send(string $json, string $queue, $delay, $job): string
    {
        $fields = json_decode($json, true);
        if (!is_array($fields)) {
            throw new ConfigException('onceq: a Laravel payload that is not a JSON object');
        }
        $onceqQueue = Names::queue($queue);
        $payload = ['laravel' => $json];
        if ($onceqQueue !== $queue) {
            $payload['queue'] = $queue; // the Laravel name, for getQueue() and the failed store
        }
        $options = ['queue' => $onceqQueue] + $this->budget($fields);
        $seconds = $this->secondsUntil($delay ?? 0);
        if ($seconds > 0) {
            $options['delay'] = $seconds;
        }
        $uniqueLock = null;
        if (is_object($job)) {
            $uniqueLock = self::uniqueLockKey($job);
            if ($uniqueLock !== null) {
                $options['unique_key'] = Names::key($uniqueLock);
            }
            $overlapLock = self::overlapLockKey($job);
            if ($overlapLock !== null) {
                $options['overlap_key'] = Names::key($overlapLock);
                $payload['overlap_lock'] = $overlapLock;
            }
        }
        $reply = $this->client()->dispatchReply($this->type, $payload, $options);
        if ($uniqueLock !== null && ($this->config['unique_lock'] ?? 'broker') === 'broker') {
            // The broker's key decides from now on, and cannot leak: a lock
            // left in the cache (a holder cancelled, a worker killed) would
            // only ever swallow a later dispatch.
            self::uniqueCache($job, $this->container)?->lock($uniqueLock)->forceRelease();
        }
        return (string)$reply['id'];
    }

    /**
     * max_tries, backoff and timeout from the payload's own fields, with the
     * connection's 'tries' and 'timeout' for a job that has none (and the
     * broker's queue defaults where neither says).
     */
    private function budget(array $fields): array
    {
        $out = [];
        $tries = $fields['maxTries'] ?? null;
        if ($tries === null && !empty($fields['retryUntil'])) {
            $tries = 0; // retryUntil decides, as in Laravel
        }
        $tries ??= $this->config['tries'] ?? null;
        if ($tries !== null) {
            $tries = (int)$tries;
            $out['max_tries'] = $tries <= 0 ? self::UNLIMITED_TRIES : min($tries, self::UNLIMITED_TRIES);
        }
        $backoff = $fields['backoff'] ?? null;
        if ($backoff !== null && $backoff !== '') {
            $steps = is_array($backoff) ? $backoff : explode(',', (string)$backoff);
            $steps = array_map(static fn ($s) => max(0, (int)$s), array_slice(array_values($steps), 0, self::MAX_BACKOFF_STEPS));
            if ($steps !== []) {
                $out['backoff'] = $steps;
            }
        }
        $timeout = $fields['timeout'] ?? null;
        if ($timeout === null || (float)$timeout <= 0) {
            $timeout = $this->config['timeout'] ?? null; // 0: Laravel's "none"; the broker's default applies
        }
        if ($timeout !== null && (float)$timeout > 0) {
            $out['timeout'] = $timeout + 0;
        }
        return $out;
    }

    /** Laravel's unique-lock key for a ShouldBeUnique job, or null (ShouldBeUniqueUntilProcessing keeps Laravel's lock). */
    public static function uniqueLockKey(object $job): ?string
    {
        if (!$job instanceof ShouldBeUnique || $job instanceof ShouldBeUniqueUntilProcessing) {
            return null;
        }
        if (method_exists(\Illuminate\Bus\UniqueLock::class, 'getKey')) {
            return \Illuminate\Bus\UniqueLock::getKey($job); // 10+; 13 changed the format
        }
        $id = method_exists($job, 'uniqueId') ? $job->uniqueId() : ($job->uniqueId ?? '');
        return 'laravel_unique_job:' . get_class($job) . $id;
    }

    /** The cache store Laravel took the unique lock in. */
    private static function uniqueCache(object $job, $container): ?Cache
    {
        if (method_exists($job, 'uniqueVia')) {
            return $job->uniqueVia();
        }
        return $container?->bound(Cache::class) ? $container->make(Cache::class) : null;
    }

    /** The cache-lock key of the job's WithoutOverlapping middleware, or null. */
    public static function overlapLockKey(object $job): ?string
    {
        $middleware = array_merge(method_exists($job, 'middleware') ? (array)$job->middleware() : [],
            is_array($job->middleware ?? null) ? $job->middleware : []);
        foreach ($middleware as $m) {
            if ($m instanceof WithoutOverlapping) {
                return $m->getLockKey($job);
            }
        }
        return null;
    }

    public function pop($queue = null, $index = 0)
    {
        return $this->worker()->pop($this->getQueue($queue), (int)$index);
    }

    /** The worker side of this connection in this process (made on the first pop). */
    public function worker(): WorkerLink
    {
        return $this->worker ??= new WorkerLink($this, (string)($this->config['back'] ?? \Onceq\Worker::DEFAULT_ENDPOINT),
            self::keys($this->config, 'worker_key'), [
                'block_for' => (float)($this->config['block_for'] ?? self::DEFAULT_BLOCK_FOR_S),
                'keeper' => (bool)($this->config['keeper'] ?? true),
                'name' => $this->config['worker_name'] ?? null,
            ]);
    }

    /** Serve these Laravel queues, in this order (queue:work's --queue, from its Looping event). */
    public function serveQueues(string $queues): void
    {
        $this->worker()->serve(array_values(array_filter(explode(',', $queues), 'strlen')));
    }

    /** The container (for the jobs this connection pops). */
    public function container()
    {
        return $this->container;
    }
}
