<?php
declare(strict_types=1);

namespace Onceq;

use Onceq\Protocol\Check;
use Onceq\Protocol\Uint64;

/**
 * One delivery of a job (docs/protocol.md §4): what the handler gets.
 * `id` is the same on every delivery of the job but never an idempotency
 * key: key effects by the business operation (Guard).
 */
final class Job
{
    /** @internal built by the Worker */
    public function __construct(
        public readonly int $id,
        public readonly string $type,
        public readonly string $queue,
        public readonly array $payload,
        public readonly int $attempt,
        public readonly int $maxTries,
        public readonly float $timeout,
        public readonly Uint64 $lease,
        private \Closure $toucher,
    ) {
    }

    /** @internal A delivery's job map, checked (Protocol\Check::delivery); a ProtocolException if malformed. */
    public static function fromMessage(mixed $job, \Closure $toucher): self
    {
        $f = Check::delivery($job);
        return new self($f['id'], $f['type'], $f['queue'], $f['payload'], $f['attempt'], $f['max_tries'],
            $f['timeout'], $f['lease'], $toucher);
    }

    /**
     * The handler is making progress: the broker restarts the lease and the
     * worker its time limit (a long job calls this more often than its
     * timeout). No reply; a touch of a lease that is no longer current
     * changes nothing.
     */
    public function touch(): void
    {
        ($this->toucher)($this);
    }

    /** True on the delivery that has no try after it. */
    public function isLastTry(): bool
    {
        return $this->attempt >= $this->maxTries;
    }
}
