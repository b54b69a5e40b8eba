<?php
declare(strict_types=1);

namespace Onceq\Laravel;

use Onceq\Connection;
use Onceq\Curve;
use Onceq\KeeperLink;
use Onceq\Link;
use Onceq\Protocol\Check;
use Onceq\Protocol\Codec;
use Onceq\Protocol\Unreadable;

/**
 * A queue:work process's link to the broker's back socket, turning onceq's
 * push on credit (docs/protocol.md §6) into Laravel's pop().
 *
 * - One link per process, opened at the first pop(), registering with the
 *   connection's one job type and the whole queue list, in priority order
 *   (the broker takes the list from a link's first `ready`). queue:work
 *   names its list in its Looping event; in --once there is none, and the
 *   list grows as pop() sees names, on a fresh link each time it does.
 * - pop() offers one credit, waits up to block_for for a job, and with
 *   nothing sends `drain`, so no credit is out while queue:work sleeps,
 *   runs events or stops: nothing is leased to a process that is not
 *   listening. Only the first queue's pop() waits; the link serves every
 *   queue of the list in the broker's priority order. Acks give no credit.
 * - A job that raced the drain is kept and returned by the next pop():
 *   touched first if it waited 250 ms or more, handed back unrun (no try
 *   used) if it waited half its timeout, as onceq-worker does with held jobs.
 * - With the keeper (the default) a separate process holds the socket and
 *   heartbeats, also while a job blocks in one long C call and while
 *   queue:work sleeps; without it the heartbeats go out only while pop()
 *   waits.
 */
final class WorkerLink
{
    /** A kept job that waited this long is touched before it runs (onceq-worker's rule). */
    public const TOUCH_AFTER_S = 0.25;
    /** How long a leaving link's last frames (a timeout ack, disconnect) get to reach the broker. */
    public const LEAVE_FLUSH_MS = 2000;
    private const NAME_PATTERN = '/^[A-Za-z0-9_.:\-]{1,64}$/';

    /** @var list<\WeakReference<self>> every link of the process, for WorkerStopping */
    private static array $all = [];

    private ?Link $link = null;
    /** @var list<string> the onceq queues the link serves, highest priority first */
    private array $queues = [];
    /** @var array<string, string> onceq queue → the Laravel name it was learned from */
    private array $laravelNames = [];
    private bool $listChanged = false;
    private int $creditOut = 0;
    /** @var list<array{job: array, at: float}> deliveries kept for the next pop() */
    private array $kept = [];
    private float $drainedAt = 0.0;
    private int $heartbeatMs = 1000;
    private float $lastSent = 0.0;
    private ?Curve $curve;
    private string $name;
    private float $blockFor;
    private bool $keeper;
    /** The job handed to Laravel and not decided yet (for the timeout ack). */
    public ?OnceqJob $running = null;

    public function __construct(private OnceqQueue $queue, private string $endpoint, array $keys, array $options)
    {
        $this->curve = Curve::fromOptions($keys);
        $this->blockFor = max(0.0, (float)$options['block_for']);
        $this->keeper = (bool)$options['keeper'];
        $this->name = (string)($options['name'] ?? ('laravel-' . gethostname()));
        if (!preg_match(self::NAME_PATTERN, $this->name)) {
            $this->name = Names::queue($this->name);
        }
        self::$all[] = \WeakReference::create($this);
        register_shutdown_function(function (): void {
            $this->leave();
        });
    }

    /** Every live link of this process. @return list<self> */
    public static function all(): array
    {
        return array_values(array_filter(array_map(static fn ($r) => $r->get(), self::$all)));
    }

    /** Serve these Laravel queues, in this order; a fresh link at the next pop() if the list changed. */
    public function serve(array $laravelQueues): void
    {
        $list = [];
        foreach ($laravelQueues as $q) {
            $name = Names::queue((string)$q);
            $this->laravelNames[$name] = (string)$q;
            if (!in_array($name, $list, true)) {
                $list[] = $name;
            }
        }
        if ($list !== [] && $list !== $this->queues) {
            $this->queues = $list;
            $this->listChanged = true;
        }
    }

    /** The Laravel name of a delivered job's queue. */
    public function laravelQueue(array $job): string
    {
        $payloadQueue = $job['payload']['queue'] ?? null;
        return is_string($payloadQueue) ? $payloadQueue : ($this->laravelNames[$job['queue']] ?? $job['queue']);
    }

    public function pop(string $laravelQueue, int $index): ?OnceqJob
    {
        $name = Names::queue($laravelQueue);
        $this->laravelNames[$name] ??= $laravelQueue;
        if (!in_array($name, $this->queues, true)) {
            $this->queues[] = $name; // --once: learned as pop() sees it
            $this->listChanged = true;
        }
        $fresh = false;
        if ($this->link !== null && !$this->link->isOpen()) {
            $this->link = null; // its keeper died: the broker gave our leases back; register anew
            $this->creditOut = 0;
            $this->kept = [];
        }
        if ($this->link === null || $this->listChanged) {
            $this->reopen();
            $fresh = true;
        }
        if (($job = $this->takeKept()) !== null) {
            return $job;
        }
        // Only the first queue's pop() waits: the link serves the whole list.
        if (!$fresh && ($index > 0 || $name !== $this->queues[0])) {
            return null;
        }
        if ($this->creditOut === 0) {
            $this->sendReady(1);
        }
        $deadline = microtime(true) + $this->blockFor;
        while (($left = $deadline - microtime(true)) > 0) {
            $wait = $left;
            if (!$this->keeper) {
                $wait = min($wait, max(0.0, $this->lastSent + $this->heartbeatMs / 1000 - microtime(true)));
            }
            $message = $this->link->receive((int)ceil($wait * 1000));
            if ($message !== null) {
                $job = $this->handle($message, false);
                if ($job !== null) {
                    return $job;
                }
            }
            if (!$this->keeper && microtime(true) - $this->lastSent >= $this->heartbeatMs / 1000) {
                $this->send(['cmd' => 'heartbeat']);
            }
        }
        // Nothing came: take the credit back before queue:work sleeps.
        $this->send(['cmd' => 'drain']);
        $this->creditOut = 0;
        $this->drainedAt = microtime(true);
        return null;
    }

    /** Send one ack for a delivery (no credit: each pop() asks anew). */
    public function ack(array $job, string $outcome, array $extra = []): void
    {
        $this->send(['cmd' => 'ack', 'id' => $job['id'], 'attempt' => $job['attempt'], 'lease' => $job['lease'],
                     'outcome' => $outcome, 'credit' => 0] + $extra);
        if ($this->running !== null && $this->running->getJobId() === (string)$job['id']) {
            $this->running = null;
        }
    }

    /**
     * The worker stops (Laravel's WorkerStopping, JobTimedOut): a job that
     * was handed to Laravel and never decided is the one its timeout
     * killed, acked `timeout`; kept deliveries go back unrun; the link
     * disconnects and what it sent gets up to 2 s to leave.
     */
    public function stopping(): void
    {
        $this->running?->timedOut();
        $this->leave();
    }

    /** Hand back what is kept, disconnect, flush. Idempotent. */
    public function leave(): void
    {
        if ($this->link === null) {
            return;
        }
        $this->running?->timedOut();
        if ($this->creditOut > 0) {
            $this->send(['cmd' => 'drain']);
        }
        foreach ($this->kept as $kept) {
            $this->ack($kept['job'], 'return', ['held' => true]);
        }
        $this->kept = [];
        $this->send(['cmd' => 'disconnect']);
        $this->link->flush(self::LEAVE_FLUSH_MS);
        $this->link = null;
        $this->creditOut = 0;
    }

    private function reopen(): void
    {
        if ($this->link !== null) {
            $this->leave();
        }
        $this->listChanged = false;
        $this->link = $this->keeper ? new KeeperLink($this->endpoint, $this->curve) :
            new Connection($this->endpoint, $this->curve);
        $this->sendReady(1);
    }

    /** Always the full form: a broker that forgot us takes types and queues from whichever ready comes first. */
    private function sendReady(int $credit): void
    {
        $this->send(['cmd' => 'ready', 'credit' => $credit, 'pid' => getmypid(), 'name' => $this->name,
                     'types' => [$this->queue->type()], 'queues' => $this->queues]);
        $this->creditOut += $credit;
    }

    private function send(array $message): void
    {
        $this->link?->send($message);
        $this->lastSent = microtime(true);
    }

    /** One message from the broker; the job to return, if it is one to run now. */
    private function handle(array|Unreadable $message, bool $keep): ?OnceqJob
    {
        if ($message instanceof Unreadable) {
            error_log('onceq: ignoring a message from the broker: ' . $message->reason);
            return null;
        }
        switch ($message['cmd'] ?? null) {
            case 'welcome':
                try {
                    [$this->heartbeatMs] = Check::welcome($message);
                } catch (\Onceq\Exception\ProtocolException $e) {
                    error_log('onceq: ' . $e->getMessage());
                }
                return null;
            case 'reconnect':
                // The broker forgot this worker (it restarted, or found us silent): register again.
                $credit = $this->creditOut;
                $this->creditOut = 0;
                $this->sendReady($credit);
                return null;
            case 'job':
                $this->creditOut = max(0, $this->creditOut - 1);
                return $this->delivery($message['job'] ?? null, $keep);
            case 'error':
                error_log('onceq: broker error: ' . (string)($message['code'] ?? '?') . ': ' .
                    (string)($message['message'] ?? ''));
                return null;
            default:
                return null;
        }
    }

    private function delivery(mixed $raw, bool $keep): ?OnceqJob
    {
        try {
            $job = Check::delivery($raw);
        } catch (\Onceq\Exception\ProtocolException $e) {
            try {
                [$id, $attempt, $lease] = Check::deliveryIds(is_array($raw) ? $raw : []);
                $this->send(['cmd' => 'ack', 'id' => $id, 'attempt' => $attempt, 'outcome' => 'fail', 'credit' => 0,
                             'error' => 'the worker could not decode the job: ' . $e->getMessage()] +
                            ($lease !== null ? ['lease' => $lease] : []));
            } catch (\Onceq\Exception\ProtocolException) {
            }
            error_log('onceq: refused a job the broker sent: ' . $e->getMessage());
            return null;
        }
        if (!is_string($job['payload']['laravel'] ?? null)) {
            $this->ack($job, 'fail', ['error' => "onceq: job {$job['id']} of type {$job['type']} carries no Laravel payload (payload.laravel)"]);
            return null;
        }
        if ($keep) {
            $this->kept[] = ['job' => $job, 'at' => $this->drainedAt];
            return null;
        }
        return $this->make($job);
    }

    /** A kept delivery (one that raced a drain), or one waiting unread: touched or handed back by its age. */
    private function takeKept(): ?OnceqJob
    {
        while (($message = $this->link->receive(0)) !== null) {
            $this->handle($message, true);
        }
        while (($kept = array_shift($this->kept)) !== null) {
            $job = $kept['job'];
            $waited = microtime(true) - $kept['at'];
            if ($waited >= $job['timeout'] / 2) {
                $this->ack($job, 'return', ['held' => true]);
                continue;
            }
            if ($waited >= self::TOUCH_AFTER_S) {
                $this->send(['cmd' => 'touch', 'id' => $job['id'], 'attempt' => $job['attempt'], 'lease' => $job['lease']]);
            }
            return $this->make($job);
        }
        return null;
    }

    private function make(array $job): OnceqJob
    {
        $made = new OnceqJob($this->queue->container(), $this, $job, $this->queue->getConnectionName(),
            $this->laravelQueue($job));
        $this->running = $made;
        return $made;
    }
}
