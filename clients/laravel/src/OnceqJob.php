<?php
declare(strict_types=1);

namespace Onceq\Laravel;

use Illuminate\Container\Container;
use Illuminate\Contracts\Cache\Repository as Cache;
use Illuminate\Contracts\Queue\Job as JobContract;
use Illuminate\Queue\Jobs\Job;

/**
 * One onceq delivery as Laravel's Job. Laravel's decisions become the
 * delivery's one ack (the first decision stands, as at the broker):
 *
 * - delete() after handle() → `ok`;
 * - release($delay) → `retry` with that delay (a try used, as in Laravel),
 *   with the error of the exception that caused it when there was one;
 * - fail($e), and delete() on Laravel's fail path → `fail` with the
 *   exception's class and message, to the broker's failed store;
 * - a job Laravel's timeout killed → `timeout` (WorkerLink::stopping()).
 *
 * attempts(), maxTries() and timeout() are the delivery's, so Laravel and
 * the broker agree on the last try and on the time limit (the broker checked
 * the timeout against the queue's retry_after).
 */
class OnceqJob extends Job implements JobContract
{
    private bool $decided = false;
    private ?\Throwable $failure = null;
    private ?\Throwable $lastException = null;

    public function __construct($container, private WorkerLink $link, private array $job, $connectionName, $queue)
    {
        $this->container = $container ?? Container::getInstance();
        $this->connectionName = $connectionName;
        $this->queue = $queue;
    }

    public function getJobId()
    {
        return (string)$this->job['id'];
    }

    public function getRawBody()
    {
        return $this->job['payload']['laravel'];
    }

    public function attempts()
    {
        return $this->job['attempt'];
    }

    public function maxTries()
    {
        return $this->job['max_tries'];
    }

    public function timeout()
    {
        return (int)ceil($this->job['timeout']);
    }

    /** The delivery as the broker sent it (id, attempt, lease, max_tries, timeout, payload …). */
    public function delivery(): array
    {
        return $this->job;
    }

    public function fire()
    {
        // The broker leases one job per overlap key at a time, so Laravel's
        // WithoutOverlapping lock is free by rule: one left by a killed
        // worker must not make this job release itself and burn its tries.
        $overlap = $this->job['payload']['overlap_lock'] ?? null;
        if (is_string($overlap) && $this->container->bound(Cache::class)) {
            $this->container->make(Cache::class)->lock($overlap)->forceRelease();
        }
        parent::fire();
    }

    public function delete()
    {
        parent::delete();
        if ($this->hasFailed()) {
            $e = $this->failure;
            $this->decide('fail', ['error' => $e !== null ? self::describe($e) : 'failed by the job']);
        } else {
            $this->decide('ok');
        }
    }

    public function release($delay = 0)
    {
        parent::release($delay);
        $error = $this->lastException !== null ? self::describe($this->lastException) : 'released by the job';
        $this->decide('retry', ['delay' => max(0, (int)$delay), 'error' => $error]);
    }

    public function fail($e = null)
    {
        $this->failure ??= $e;
        parent::fail($e);
    }

    /** The exception handle() threw (JobExceptionOccurred): the text of the retry that follows. */
    public function noteException(\Throwable $e): void
    {
        $this->lastException = $e;
    }

    /** Laravel's timeout is killing the worker: `timeout`, unless Laravel decided already (the last try: fail). */
    public function timedOut(): void
    {
        $this->decide('timeout', ['error' => "timed out after {$this->timeout()} s"]);
    }

    public function isDecided(): bool
    {
        return $this->decided;
    }

    private function decide(string $outcome, array $extra = []): void
    {
        if ($this->decided) {
            return; // one ack per delivery: the first decision stands
        }
        $this->decided = true;
        if (isset($extra['error'])) {
            $extra['error'] = self::truncate($extra['error']);
        }
        $this->link->ack($this->job, $outcome, $extra);
    }

    private static function describe(\Throwable $e): string
    {
        return get_class($e) . ': ' . $e->getMessage();
    }

    private static function truncate(string $error): string
    {
        $max = \Onceq\Protocol\Check::MAX_ERROR_BYTES;
        return strlen($error) <= $max ? $error : mb_strcut($error, 0, $max - 3, 'UTF-8') . '...';
    }
}
