<?php
declare(strict_types=1);

namespace Onceq\Laravel\Tests;

use App\Jobs\FailOnTimeoutProbe;
use App\Jobs\GrantOrderPointsJob;
use App\Jobs\OverlapProbe;
use App\Jobs\Probe;
use App\Jobs\UniqueProbe;
use Illuminate\Contracts\Console\Kernel;
use Illuminate\Queue\Events\JobQueued;
use Illuminate\Support\Facades\Bus;
use Illuminate\Support\Facades\Cache;
use Illuminate\Support\Facades\DB;
use Illuminate\Support\Facades\Event;
use Onceq\Client;
use Onceq\Exception\TimeoutRuleException;
use Onceq\Laravel\OnceqQueue;
use PHPUnit\Framework\TestCase;

/**
 * Laravel's jobs, unchanged, through `php artisan queue:work onceq`, against
 * the broker (heartbeat 1 s x liveness 3, retry_after 90 s, timeout 60 s),
 * the C worker (queue "c") and the cluster of tests/run.sh. This process
 * boots the same app to dispatch; each case uses queues of its own and
 * starts its queue:work processes, stopped by PID in tearDown. Customers
 * 1-6 exist with balance 0; each case uses its own customer and orders.
 */
final class LaravelQueueTest extends TestCase
{
    private const WAIT_S = 60.0;
    private static $app = null;

    /** @var list<array{proc: resource, pid: int, log: string}> */
    private array $workers = [];

    public static function setUpBeforeClass(): void
    {
        if (getenv('ONCEQ_TEST_WORK') === false) {
            self::markTestSkipped('needs the broker and PostgreSQL of clients/laravel/tests/run.sh');
        }
        self::$app = require __DIR__ . '/app/bootstrap/app.php';
        self::$app->make(Kernel::class)->bootstrap();
        DB::statement('CREATE TABLE IF NOT EXISTS probe_runs (id bigserial PRIMARY KEY, name text NOT NULL,
            attempt int NOT NULL, pid int NOT NULL, started_at double precision NOT NULL,
            ended_at double precision, error text)');
    }

    protected function tearDown(): void
    {
        foreach ($this->workers as $w) {
            $this->stopWorker($w, SIGKILL);
        }
        $this->workers = [];
    }

    // ---- helpers -----------------------------------------------------------

    private static function artisan(): string
    {
        return __DIR__ . '/app/artisan';
    }

    private function queue(): OnceqQueue
    {
        return self::$app['queue']->connection('onceq');
    }

    private function admin(): Client
    {
        return $this->queue()->adminClient();
    }

    /** Start `php artisan queue:work onceq` with $args; its log is $name.log in the test dir. */
    private function startWorker(string $name, array $args, array $env = []): array
    {
        $log = getenv('ONCEQ_TEST_WORK') . "/worker-$name.log";
        $proc = proc_open([PHP_BINARY, self::artisan(), 'queue:work', 'onceq', '--sleep=0', ...$args],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', $log, 'a'], 2 => ['file', $log, 'a']], $pipes, null,
            $env + ['ONCEQ_WORKER_NAME' => "laravel-$name"] + getenv());
        $pid = proc_get_status($proc)['pid'];
        file_put_contents(getenv('ONCEQ_TEST_WORK') . '/pids', "$pid\n", FILE_APPEND);
        $w = ['proc' => $proc, 'pid' => $pid, 'log' => $log];
        $this->workers[] = $w;
        return $w;
    }

    /** Signal a worker and wait for it; its exit status (137 for SIGKILL). */
    private function stopWorker(array $w, int $signal): int
    {
        $status = proc_get_status($w['proc']);
        if ($status['running']) {
            posix_kill($w['pid'], $signal);
        }
        return $this->waitExit($w);
    }

    private function waitExit(array $w): int
    {
        $end = microtime(true) + self::WAIT_S;
        while (($s = proc_get_status($w['proc']))['running']) {
            if (microtime(true) > $end) {
                posix_kill($w['pid'], SIGKILL);
            }
            usleep(50_000);
        }
        static $codes = [];
        $key = (int)$w['pid'];
        if (!isset($codes[$key])) {
            $codes[$key] = $s['signaled'] ? 128 + $s['termsig'] : $s['exitcode'];
        }
        return $codes[$key];
    }

    private function waitUntil(callable $done, string $what, float $seconds = self::WAIT_S): void
    {
        $end = microtime(true) + $seconds;
        while (!$done()) {
            if (microtime(true) > $end) {
                $this->fail("$what: not within {$seconds}s");
            }
            usleep(100_000);
        }
    }

    /** Wait for a job's end at the broker: its state. */
    private function waitJob(string $id): array
    {
        $end = $this->queue()->client()->wait((int)$id, self::WAIT_S);
        $this->assertNotSame('pending', $end['state'], "job $id did not end");
        return $end;
    }

    /** @return list<object> the probe's runs, oldest first (attempt 0: its failed()) */
    private function runs(string $name): array
    {
        return DB::table('probe_runs')->where('name', $name)->orderBy('id')->get()->all();
    }

    private function failedJob(string $id): ?array
    {
        foreach ($this->admin()->request('failed', ['limit' => 1000], 'failed')['jobs'] as $job) {
            if ((string)$job['id'] === $id) {
                return $job;
            }
        }
        return null;
    }

    private function queueStats(string $name): array
    {
        foreach ($this->queue()->client()->stats(0)['queues'] as $q) {
            if ($q['name'] === $name) {
                return $q;
            }
        }
        return [];
    }

    private function balance(int $customer): int
    {
        return (int)DB::table('point_balances')->where('customer_id', $customer)->value('balance');
    }

    private function push(object $job): string
    {
        return $this->queue()->push($job, '', $job->queue ?? null); // as Bus does with onQueue()
    }

    // ---- the cases ---------------------------------------------------------

    /** The article's job: dispatch → handle → ok, with its own tries, backoff and timeout at the broker. */
    public function testTheArticlesJobRunsUnchanged(): void
    {
        $id = $this->push((new GrantOrderPointsJob(1001, 1, 120))->onQueue('t-grant'));
        $this->startWorker('grant', ['--queue=t-grant']);
        $this->assertSame('done', $this->waitJob($id)['state']);
        $this->assertSame(120, $this->balance(1));
        $this->assertSame(1, DB::table('point_grants')->where('order_id', 1001)->count());
    }

    /**
     * A process that dispatched through the driver exits at once, where PHP
     * freed the shared ZMQContext before its socket at shutdown and
     * zmq_ctx_term waited for ever (bounded here by timeout(1): 124).
     */
    public function testDispatchingProcessExits(): void
    {
        foreach ([1002, 1003, 1004] as $order) {
            $started = microtime(true);
            $out = [];
            exec('timeout 20 ' . escapeshellarg(PHP_BINARY) . ' ' . escapeshellarg(self::artisan()) .
                " demo:grant $order 1 5 2>&1", $out, $rc);
            $this->assertSame(0, $rc, 'exit status (124: it hung at exit) ' . implode("\n", $out));
            $this->assertStringContainsString("dispatched the grant of order $order", implode("\n", $out));
            $this->assertLessThan(10, microtime(true) - $started);
        }
    }

    /** $tries and backoff() end in failed(), in the broker's failed store (the one truth), and queue:retry brings it back. */
    public function testTriesAndBackoffEndInTheFailedStore(): void
    {
        $id = $this->push((new Probe('tries', 'throw', 0, 2, null, [1]))->onQueue('t-tries'));
        $this->startWorker('tries', ['--queue=t-tries']);
        $this->assertSame('failed', $this->waitJob($id)['state']);
        $this->waitUntil(fn () => count($this->runs('tries')) === 3, "Laravel's failed()");
        $runs = $this->runs('tries');
        $this->assertSame([1, 2, 0], array_map(static fn ($r) => (int)$r->attempt, $runs));
        $this->assertGreaterThanOrEqual(1.0, $runs[1]->started_at - $runs[0]->started_at, 'backoff [1]');
        $this->assertStringContainsString('RuntimeException: probe tries threw on attempt 2', $runs[2]->error);
        $failed = $this->failedJob($id);
        $this->assertNotNull($failed);
        $this->assertSame(2, $failed['max_tries']);
        $this->assertStringContainsString('RuntimeException: probe tries threw on attempt 2', $failed['error']);
        $this->assertSame('App\Jobs\Probe', json_decode($failed['payload']['laravel'], true)['displayName']);

        // queue:failed lists it; queue:retry pushes the same payload again and forgets the old job.
        exec(escapeshellarg(PHP_BINARY) . ' ' . escapeshellarg(self::artisan()) . ' queue:failed 2>&1', $out, $rc);
        $this->assertSame(0, $rc, implode("\n", $out));
        $this->assertStringContainsString($id, implode("\n", $out));
        $out = [];
        exec(escapeshellarg(PHP_BINARY) . ' ' . escapeshellarg(self::artisan()) . " queue:retry $id 2>&1", $out, $rc);
        $this->assertSame(0, $rc, implode("\n", $out));
        $this->assertNull($this->failedJob($id), 'queue:retry forgets the old job');
        $this->waitUntil(fn () => count($this->runs('tries')) >= 6, 'the retried job running its two tries');
        $uuid = json_decode($failed['payload']['laravel'], true)['uuid'];
        $again = array_values(array_filter($this->admin()->request('failed', ['limit' => 1000], 'failed')['jobs'],
            static fn ($j) => (json_decode($j['payload']['laravel'] ?? '{}', true)['uuid'] ?? null) === $uuid));
        $this->assertCount(1, $again);
        $this->assertSame($failed['payload']['laravel'], $again[0]['payload']['laravel'], 'the payload byte for byte');
    }

    /** release($delay) → retry after that delay; fail() → failed at once with the exception's class and message. */
    public function testReleaseAndFail(): void
    {
        $released = $this->push((new Probe('release', 'release', 1, 2))->onQueue('t-release'));
        $failed = $this->push((new Probe('fail', 'fail', 0, 5))->onQueue('t-release'));
        $this->startWorker('release', ['--queue=t-release']);
        $this->assertSame('failed', $this->waitJob($failed)['state']);
        // Laravel acks (delete()) before it calls failed(): the broker may answer first.
        $this->waitUntil(fn () => count($this->runs('fail')) === 2, "Laravel's failed()");
        $this->assertSame([1, 0], array_map(static fn ($r) => (int)$r->attempt, $this->runs('fail')));
        $this->assertSame('LogicException: probe fail gave up', $this->failedJob($failed)['error']);

        $this->assertSame('failed', $this->waitJob($released)['state']);
        $runs = $this->runs('release');
        $this->assertSame([1, 2], array_map(static fn ($r) => (int)$r->attempt, $runs));
        $this->assertGreaterThanOrEqual(1.0, $runs[1]->started_at - $runs[0]->started_at);
        $this->assertStringContainsString('released by the job', $this->failedJob($released)['error']);
    }

    /** $timeout: Laravel's SIGALRM kills the worker; the ack says timeout; the last try is failed by Laravel. */
    public function testTimeoutKillsTheWorker(): void
    {
        $id = $this->push((new Probe('timeout', 'sleep', 30, 2, 2, [1]))->onQueue('t-timeout'));
        $retried = (int)($this->queueStats('t-timeout')['retried'] ?? 0);
        $w = $this->startWorker('timeout-1', ['--queue=t-timeout']);
        $this->assertSame(137, $this->waitExit($w), 'killed by its own SIGKILL');
        $this->waitUntil(fn () => (int)($this->queueStats('t-timeout')['retried'] ?? 0) === $retried + 1,
            'the timeout ack reaching the broker');
        $w = $this->startWorker('timeout-2', ['--queue=t-timeout']);
        $this->assertSame(137, $this->waitExit($w));
        $this->assertSame('failed', $this->waitJob($id)['state']);
        $runs = $this->runs('timeout');
        $this->assertSame([1, 2, 0], array_map(static fn ($r) => (int)$r->attempt, $runs));
        $this->assertNull($runs[0]->ended_at);
        $this->assertStringContainsString('MaxAttemptsExceededException', $this->failedJob($id)['error']);
    }

    /** A timeout not shorter than retry_after by the margin is refused at dispatch, naming the numbers. */
    public function testTimeoutRuleIsRefused(): void
    {
        try {
            $this->push((new Probe('rule', 'ok', 0, 1, 120))->onQueue('t-rule'));
            $this->fail('a timeout of 120 s on a 90 s lease was accepted');
        } catch (TimeoutRuleException $e) {
            $this->assertStringContainsString('120', $e->getMessage());
            $this->assertStringContainsString('90', $e->getMessage());
        }
    }

    /** ShouldBeUnique: the broker's unique_key decides; Laravel's lock is let go, also after the holder is cancelled. */
    public function testShouldBeUnique(): void
    {
        $ids = [];
        Event::listen(JobQueued::class, static function (JobQueued $e) use (&$ids): void {
            $ids[] = (string)$e->id;
        });
        UniqueProbe::dispatch('unique-1')->onQueue('t-unique');
        $lockKey = OnceqQueue::uniqueLockKey(new UniqueProbe('unique-1'));
        $lock = Cache::lock($lockKey);
        $this->assertTrue($lock->get(), "Laravel's unique lock is free once the broker answered");
        $lock->release();
        UniqueProbe::dispatch('unique-1')->onQueue('t-unique');
        $this->assertCount(2, $ids);
        $this->assertSame($ids[0], $ids[1], 'the second dispatch is answered with the holder');
        $this->assertSame(1, $this->queue()->size('t-unique'));

        $this->admin()->request('cancel', ['id' => (int)$ids[0]], 'cancelled');
        UniqueProbe::dispatch('unique-1')->onQueue('t-unique');
        $this->assertCount(3, $ids);
        $this->assertNotSame($ids[0], $ids[2], 'a dispatch after the holder was cancelled is queued');

        $this->startWorker('unique', ['--queue=t-unique']);
        $this->assertSame('done', $this->waitJob($ids[2])['state']);
        $this->assertCount(1, $this->runs('unique-1'));
    }

    /** WithoutOverlapping: jobs of one key wait in the broker, run one at a time, and burn no try. */
    public function testWithoutOverlappingBurnsNoTries(): void
    {
        $a = $this->push((new OverlapProbe('overlap-a', 'sleep', 2, 1))->onQueue('t-overlap'));
        $b = $this->push((new OverlapProbe('overlap-b', 'sleep', 2, 1))->onQueue('t-overlap'));
        $this->startWorker('overlap-1', ['--queue=t-overlap']);
        $this->startWorker('overlap-2', ['--queue=t-overlap']);
        $this->assertSame('done', $this->waitJob($a)['state']);
        $this->assertSame('done', $this->waitJob($b)['state']);
        [$ra] = $this->runs('overlap-a');
        [$rb] = $this->runs('overlap-b');
        $this->assertSame([1, 1], [(int)$ra->attempt, (int)$rb->attempt]);
        $this->assertTrue($ra->ended_at <= $rb->started_at || $rb->ended_at <= $ra->started_at, 'never at once');
    }

    /** later() waits its delay; --queue=high,low serves high first. */
    public function testDelayAndQueuePriority(): void
    {
        $low = $this->push((new Probe('prio-low'))->onQueue('t-low'));
        $high = $this->push((new Probe('prio-high'))->onQueue('t-high'));
        $dispatched = microtime(true);
        $delayed = $this->queue()->later(3, new Probe('prio-delayed'), '', 't-high');
        $this->startWorker('prio', ['--queue=t-high,t-low']);
        foreach ([$low, $high, $delayed] as $id) {
            $this->assertSame('done', $this->waitJob($id)['state']);
        }
        [$rl] = $this->runs('prio-low');
        [$rh] = $this->runs('prio-high');
        [$rd] = $this->runs('prio-delayed');
        $this->assertLessThan($rl->started_at, $rh->started_at, 'high before low');
        $this->assertGreaterThanOrEqual($dispatched + 3, $rd->started_at);
    }

    /** SIGTERM: the running job finishes and is acked, the worker exits 0 and leaves the broker. */
    public function testSigtermDrains(): void
    {
        $id = $this->push((new Probe('drain', 'sleep', 3, 1))->onQueue('t-drain'));
        $w = $this->startWorker('drain', ['--queue=t-drain']);
        $this->waitUntil(fn () => count($this->runs('drain')) === 1, 'the job starting');
        $this->assertSame(0, $this->stopWorker($w, SIGTERM));
        $this->assertSame('done', $this->waitJob($id)['state']);
        $runs = $this->runs('drain');
        $this->assertCount(1, $runs);
        $this->assertNotNull($runs[0]->ended_at);
        $this->waitUntil(function () {
            $names = $this->queue()->client()->stats(100)['worker_names'] ?? [];
            return !in_array('laravel-drain', array_column($names, 'name'), true);
        }, 'the worker leaving the broker');
    }

    /** One C call of 10 s (pg_sleep) with liveness 3 s: the keeper heartbeats; the job runs once. */
    public function testLongCCallKeepsItsLease(): void
    {
        $id = $this->push((new Probe('long', 'pg_sleep', 10, 3, 30))->onQueue('t-long'));
        $this->startWorker('long-1', ['--queue=t-long']);
        $this->waitUntil(fn () => count($this->runs('long')) === 1, 'the job starting');
        $this->startWorker('long-2', ['--queue=t-long']); // would take a redelivery
        $this->assertSame('done', $this->waitJob($id)['state']);
        $runs = $this->runs('long');
        $this->assertCount(1, $runs, 'one run, no redelivery');
        $this->assertGreaterThanOrEqual(10.0, $runs[0]->ended_at - $runs[0]->started_at);
        $stats = $this->queueStats('t-long');
        $this->assertSame(0, $stats['redelivered']);
        $this->assertSame(0, $stats['late_acks']);
    }

    /** SIGKILL after COMMIT, before the ack: redelivered, the guard says already applied, the balance is exact. */
    public function testKilledAfterCommit(): void
    {
        $marker = getenv('ONCEQ_TEST_WORK') . '/killed-after-commit';
        $id = $this->push((new GrantOrderPointsJob(2001, 2, 300))->onQueue('t-kill'));
        $w = $this->startWorker('kill-1', ['--queue=t-kill'], ['ONCEQ_TEST_KILL_AFTER_COMMIT' => $marker]);
        $this->assertSame(137, $this->waitExit($w));
        $this->assertFileExists($marker);
        $w2 = $this->startWorker('kill-2', ['--queue=t-kill']);
        $this->assertSame('done', $this->waitJob($id)['state']);
        $this->assertSame(300, $this->balance(2));
        $this->assertSame(1, DB::table('point_grants')->where('order_id', 2001)->count());
        $this->waitUntil(fn () => str_contains((string)file_get_contents($w2['log']), 'grant order 2001: already_applied'),
            'the redelivery reporting already_applied');
        $this->assertGreaterThanOrEqual(1, $this->queueStats('t-kill')['redelivered']);
    }

    /** A Laravel worker and the C onceq-worker on one queue: each takes only its own type. */
    public function testMixedFleet(): void
    {
        $c = $this->queue()->client()->dispatch('grant_points', ['order_id' => 3001, 'customer_id' => 3, 'points' => 10],
            ['queue' => 'c']);
        $php = $this->push((new GrantOrderPointsJob(3002, 3, 20))->onQueue('c'));
        $w = $this->startWorker('fleet', ['--queue=c']);
        $this->assertSame('done', $this->queue()->client()->wait($c, self::WAIT_S)['state']);
        $this->assertSame('done', $this->waitJob($php)['state']);
        $this->assertSame(30, $this->balance(3));
        $this->assertSame(1, substr_count((string)file_get_contents($w['log']), 'Processed:'));
        $c_log = (string)file_get_contents(getenv('ONCEQ_TEST_WORK') . '/c-worker.log');
        $this->assertStringNotContainsString('type=laravel', $c_log);
    }

    /** size() and queue:monitor from the broker's stats. */
    public function testSizeAndMonitor(): void
    {
        $this->push((new Probe('size-1'))->onQueue('t-size'));
        $this->queue()->later(600, new Probe('size-2'), '', 't-size');
        $this->assertSame(2, $this->queue()->size('t-size'));
        exec(escapeshellarg(PHP_BINARY) . ' ' . escapeshellarg(self::artisan()) . ' queue:monitor onceq:t-size --max=1 2>&1',
            $out, $rc);
        $this->assertSame(0, $rc, implode("\n", $out));
        $this->assertMatchesRegularExpression('/t-size.*2/', implode("\n", $out));
    }

    /**
     * queue:clear cancels the queue's ready and delayed jobs at the broker
     * (counted as cancelled, a wait on one ends cancelled), and leaves the
     * other queue alone.
     */
    public function testQueueClearCancelsTheQueuesWaitingJobs(): void
    {
        $ready = $this->push((new Probe('clear-1'))->onQueue('t-clear'));
        $this->push((new Probe('clear-2'))->onQueue('t-clear'));
        $this->queue()->later(600, new Probe('clear-3'), '', 't-clear');
        $this->push((new Probe('clear-keep'))->onQueue('t-clear-keep'));
        exec(escapeshellarg(PHP_BINARY) . ' ' . escapeshellarg(self::artisan()) .
            ' queue:clear onceq --queue=t-clear --force 2>&1', $out, $rc);
        $this->assertSame(0, $rc, implode("\n", $out));
        $this->assertStringContainsString('Cleared 3 jobs from the [t-clear] queue', implode("\n", $out));
        $cleared = $this->queueStats('t-clear');
        $this->assertSame(0, $cleared['ready'] + $cleared['delayed'], json_encode($cleared));
        $this->assertSame(3, $cleared['cancelled']);
        $this->assertSame('cancelled', $this->queue()->client()->wait((int)$ready, 0)['state']);
        $this->assertSame(1, $this->queueStats('t-clear-keep')['ready']);
        $this->assertSame(0, $this->queue()->clear('t-clear'));
    }

    /** Queue names and keys onceq does not allow are mapped, never refused; bulk() sends each job. */
    public function testNamesOnceqDoesNotAllowAreMapped(): void
    {
        $this->queue()->bulk([new Probe('names-1'), new Probe('names-2')], '', 'emails/high');
        $long = str_repeat('k', 200);
        $ids = [];
        Event::listen(JobQueued::class, static function (JobQueued $e) use (&$ids): void {
            $ids[] = (string)$e->id;
        });
        UniqueProbe::dispatch($long)->onQueue('emails/high');
        UniqueProbe::dispatch($long)->onQueue('emails/high');
        $this->assertCount(2, $ids);
        $this->assertSame($ids[0], $ids[1], 'a 200-byte unique key, hashed, still holds');
        $this->assertSame(3, $this->queue()->size('emails/high'));
        $this->startWorker('names', ['--queue=emails/high']);
        $this->assertSame('done', $this->waitJob($ids[0])['state']);
        $this->waitUntil(fn () => count($this->runs('names-1')) === 1 && count($this->runs('names-2')) === 1,
            'the bulk jobs running');
        $this->assertCount(1, $this->runs($long));
    }

    /** A last try lost to its worker's death, where no PHP ran failed(), is in the failed store queue:failed reads. */
    public function testALastTryLostToWorkerDeathIsInTheFailedStore(): void
    {
        $id = $this->push((new Probe('death', 'sleep', 30, 1))->onQueue('t-death'));
        $w = $this->startWorker('death', ['--queue=t-death']);
        $this->waitUntil(fn () => count($this->runs('death')) === 1, 'the job starting');
        $this->assertSame(137, $this->stopWorker($w, SIGKILL));
        $this->assertSame('failed', $this->waitJob($id)['state']);
        $this->assertStringContainsString('worker died', $this->failedJob($id)['error']);
        exec(escapeshellarg(PHP_BINARY) . ' ' . escapeshellarg(self::artisan()) . ' queue:failed 2>&1', $out, $rc);
        $this->assertSame(0, $rc, implode("\n", $out));
        $this->assertMatchesRegularExpression("/\\b$id\\b.*t-death.*App.Jobs.Probe/", implode("\n", $out));
    }

    /** One ack per delivery: a job that releases and then throws on its last try stays decided by the release. */
    public function testTheFirstDecisionStands(): void
    {
        $before = (int)($this->queueStats('t-first')['ignored_acks'] ?? 0);
        $id = $this->push((new Probe('first', 'release_throw', 0, 1))->onQueue('t-first'));
        $this->startWorker('first', ['--queue=t-first']);
        $this->assertSame('failed', $this->waitJob($id)['state']);
        $this->assertStringContainsString('released by the job', $this->failedJob($id)['error']);
        $this->waitUntil(fn () => count($this->runs('first')) === 2, "Laravel's failed() after the throw");
        $this->assertSame($before, (int)$this->queueStats('t-first')['ignored_acks'], 'no second ack was sent');
    }

    /** --once with a queue list: the list grows as pop() sees names, and a job of a later queue runs. */
    public function testOnceServesTheWholeList(): void
    {
        $id = $this->push((new Probe('once'))->onQueue('t-once-b'));
        $w = $this->startWorker('once', ['--once', '--queue=t-once-a,t-once-b']);
        $this->assertSame(0, $this->waitExit($w));
        $this->assertSame('done', $this->waitJob($id)['state']);
        $this->assertCount(1, $this->runs('once'));
    }

    /** failOnTimeout: Laravel fails the job at its first timeout, and the broker's store has it at once. */
    public function testFailOnTimeout(): void
    {
        $id = $this->push((new FailOnTimeoutProbe('fail-on-timeout', 'sleep', 30, 3, 2))->onQueue('t-fot'));
        $w = $this->startWorker('fot', ['--queue=t-fot']);
        $this->assertSame(137, $this->waitExit($w));
        $this->assertSame('failed', $this->waitJob($id)['state']);
        // Laravel 8 fails it with MaxAttemptsExceededException, 9+ with TimeoutExceededException.
        $this->assertMatchesRegularExpression('/(MaxAttempts|Timeout)ExceededException/', $this->failedJob($id)['error']);
        $this->assertSame(1, $this->failedJob($id)['attempt'], 'failed at its first timeout, with tries left');
        $this->assertSame([1, 0], array_map(static fn ($r) => (int)$r->attempt, $this->runs('fail-on-timeout')));
    }

    /** No credit is out while queue:work sleeps: a job dispatched meanwhile waits ready, and runs at attempt 1. */
    public function testNoCreditWhileTheWorkerSleeps(): void
    {
        $this->startWorker('sleepy', ['--queue=t-sleepy', '--sleep=5']);
        $this->waitUntil(function () {
            foreach ($this->queue()->client()->stats(100)['workers'] ?? [] as $w) {
                if ($w['name'] === 'laravel-sleepy' && $w['credit'] === 0) {
                    return true; // its pop() found nothing and gave the credit back: it sleeps
                }
            }
            return false;
        }, 'the worker asleep with no credit');
        $id = $this->push((new Probe('sleepy'))->onQueue('t-sleepy'));
        usleep(500_000);
        $q = $this->queueStats('t-sleepy');
        $this->assertSame([1, 0], [$q['ready'], $q['leased']], 'ready, leased to nobody');
        $this->assertSame('done', $this->waitJob($id)['state']);
        $this->assertSame([1], array_map(static fn ($r) => (int)$r->attempt, $this->runs('sleepy')));
    }

    /** A chain: the worker pushes the next job itself, with the connection's producer key. */
    public function testAChainRunsInOrder(): void
    {
        Bus::chain([new Probe('chain-1'), new Probe('chain-2')])->onConnection('onceq')->onQueue('t-chain')->dispatch();
        $this->startWorker('chain', ['--queue=t-chain']);
        $this->waitUntil(fn () => count($this->runs('chain-2')) === 1, 'the chain ending');
        $this->assertLessThan($this->runs('chain-2')[0]->started_at, $this->runs('chain-1')[0]->started_at);
    }

    /** A keeper that dies is replaced at the next pop(): the worker registers again and runs the next job. */
    public function testAWorkerOutlivesItsKeeper(): void
    {
        $w = $this->startWorker('orphan', ['--queue=t-orphan']);
        $keeper = null;
        $this->waitUntil(function () use ($w, &$keeper) {
            $keeper = (int)trim((string)shell_exec('pgrep -P ' . (int)$w['pid']));
            return $keeper > 0;
        }, 'the keeper started');
        posix_kill($keeper, SIGKILL);
        $id = $this->push((new Probe('orphan'))->onQueue('t-orphan'));
        $this->assertSame('done', $this->waitJob($id)['state']);
        $this->assertTrue(proc_get_status($w['proc'])['running'], 'the same worker process');
    }
}
