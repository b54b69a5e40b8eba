<?php
declare(strict_types=1);

namespace Onceq\Laravel;

use Illuminate\Queue\Failed\FailedJobProviderInterface;
use Illuminate\Queue\QueueManager;
use Onceq\Exception\NotFoundException;

/**
 * The broker's failed store as Laravel's (config/queue.php: 'failed' =>
 * ['driver' => 'onceq', 'queue_connection' => 'onceq']): one truth for
 * queue:failed, queue:retry, queue:forget and queue:flush.
 *
 * Every onceq job that fails is in the broker's store, whoever decided it:
 * Laravel's worker (`fail`, the last try, `failed()` called), and the
 * broker itself, for a lease that ran out or a worker that died on the last
 * try, where no PHP ran. So log() writes nothing (the job is there
 * already), and the commands read and change the broker's store through
 * the connection's admin key. Only jobs of the connection's type are shown
 * and touched; the C jobs beside them are not.
 */
class BrokerFailedJobProvider implements FailedJobProviderInterface
{
    /** The broker's largest page of failed jobs, and how many pages a listing reads at most. */
    private const PAGE_JOBS = 1000;
    private const MAX_PAGES = 100;

    public function __construct(private QueueManager $manager, private string $connection)
    {
    }

    private function queue(): OnceqQueue
    {
        return $this->manager->connection($this->connection);
    }

    /** The job is in the broker's store already (its worker acked `fail`). */
    public function log($connection, $queue, $payload, $exception)
    {
        return null;
    }

    /** @return list<object> newest failure first, as Laravel lists them */
    public function all()
    {
        return array_reverse($this->records());
    }

    public function ids($queue = null)
    {
        return array_map(static fn ($r) => $r->id, array_filter($this->all(),
            static fn ($r) => $queue === null || $r->queue === $queue));
    }

    public function find($id)
    {
        foreach ($this->records() as $record) {
            if ($record->id === (string)$id) {
                return $record;
            }
        }
        return null;
    }

    public function forget($id)
    {
        if (!ctype_digit((string)$id)) {
            return false;
        }
        try {
            $this->queue()->adminClient()->request('forget', ['id' => (int)$id], 'forgotten');
            return true;
        } catch (NotFoundException) {
            return false;
        }
    }

    public function flush($hours = null)
    {
        $before = $hours === null ? null : (time() - $hours * 3600) * 1000;
        foreach ($this->records() as $record) {
            if ($before === null || strtotime($record->failed_at) * 1000 < $before) {
                $this->forget($record->id);
            }
        }
    }

    /** The failed jobs of this connection's type, oldest failure first. @return list<object> */
    private function records(): array
    {
        $queue = $this->queue();
        $client = $queue->adminClient();
        $out = [];
        $cursor = [];
        for ($page = 0; $page < self::MAX_PAGES; $page++) {
            $reply = $client->request('failed', ['limit' => self::PAGE_JOBS] + $cursor, 'failed');
            foreach ($reply['jobs'] ?? [] as $job) {
                if (!is_array($job) || ($job['type'] ?? null) !== $queue->type() ||
                    !is_string($job['payload']['laravel'] ?? null)) {
                    continue;
                }
                $json = $job['payload']['laravel'];
                $at = (int)($job['failed_at'] ?? 0);
                // The fields in the order queue:failed prints them.
                $out[] = (object)[
                    'id' => (string)$job['id'],
                    'connection' => $this->connection,
                    'queue' => is_string($job['payload']['queue'] ?? null) ? $job['payload']['queue'] : (string)$job['queue'],
                    'payload' => $json,
                    'exception' => (string)($job['error'] ?? ''),
                    'failed_at' => date('Y-m-d H:i:s', intdiv($at, 1000)),
                ];
            }
            if (!isset($reply['next'], $reply['next_at'])) {
                break;
            }
            $cursor = ['after' => $reply['next'], 'after_at' => $reply['next_at']];
        }
        return $out;
    }
}
