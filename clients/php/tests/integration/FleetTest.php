<?php
declare(strict_types=1);

namespace Onceq\Tests\Integration;

use Onceq\Client;
use Onceq\Exception\BadRequestException;
use Onceq\Exception\ForbiddenException;
use Onceq\Exception\NotFoundException;
use Onceq\Exception\TimeoutException;
use Onceq\Exception\TimeoutRuleException;
use Onceq\Exception\TooLargeException;
use PHPUnit\Framework\TestCase;

/**
 * Against the broker, the C worker (queue "c") and the cluster that
 * tests/run.sh starts; PHP workers (examples/points-worker.php, queue
 * "php") are started here and stopped by PID. Each test uses its own
 * customers and orders (customers 1-6 exist with balance 0).
 */
final class FleetTest extends TestCase
{
    private const WAIT_S = 60.0;

    /** @var array<int, array{proc: resource, pid: int, log: string}> */
    private array $workers = [];
    private \PDO $pdo;

    protected function setUp(): void
    {
        if (getenv('ONCEQ_TEST_FRONT') === false) {
            $this->markTestSkipped('needs the broker and PostgreSQL of clients/php/tests/run.sh');
        }
        $dsn = 'pgsql:' . preg_replace('/\s+/', ';', trim((string)getenv('ONCEQ_TEST_DATABASE')));
        $this->pdo = new \PDO($dsn, null, null, [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION]);
    }

    protected function tearDown(): void
    {
        foreach ($this->workers as $w) {
            $this->stopWorker($w, SIGKILL);
        }
        $this->workers = [];
    }

    // ---- helpers -----------------------------------------------------------

    private static function env(string $name): string
    {
        return (string)getenv($name);
    }

    private function client(string $key = 'app', array $options = []): Client
    {
        return new Client(self::env('ONCEQ_TEST_FRONT'), $options + [
            'key' => self::env('ONCEQ_TEST_ME') . "/$key.key_secret",
            'broker_key' => self::env('ONCEQ_TEST_KEYS') . '/broker.key',
        ]);
    }

    private function waitFor(string $what, callable $condition): void
    {
        $end = microtime(true) + self::WAIT_S;
        while (!$condition()) {
            if (microtime(true) > $end) {
                $this->fail("$what: not within " . self::WAIT_S . ' s' . $this->logs());
            }
            usleep(100_000);
        }
    }

    private function logs(): string
    {
        $out = '';
        foreach ($this->workers as $w) {
            $out .= "\n---- {$w['log']}\n" . @file_get_contents($w['log']);
        }
        return $out;
    }

    private function balance(int $customer): int
    {
        $q = $this->pdo->prepare('SELECT balance FROM point_balances WHERE customer_id = ?');
        $q->execute([$customer]);
        return (int)$q->fetchColumn();
    }

    private function grants(int $order): int
    {
        $q = $this->pdo->prepare("SELECT count(*) FROM point_grants WHERE order_id = ? AND reason = 'order_points'");
        $q->execute([$order]);
        return (int)$q->fetchColumn();
    }

    /** @return array<string, mixed> the stats row of $name in $section ('queues', 'types') */
    private function statsOf(string $section, string $name): array
    {
        foreach ($this->client()->stats()[$section] as $row) {
            if ($row['name'] === $name) {
                return $row;
            }
        }
        return [];
    }

    private function workerConnected(string $name): bool
    {
        foreach ($this->client()->stats()['workers'] as $w) {
            if ($w['name'] === $name) {
                return true;
            }
        }
        return false;
    }

    /** Start examples/points-worker.php on queue "php"; its PID goes to run.sh's list too. */
    private function startWorker(string $name, array $env = [], ?string $insecureBack = null, array $flags = []): array
    {
        $log = self::env('ONCEQ_TEST_WORK') . "/$name.log";
        $cmd = [PHP_BINARY, __DIR__ . '/../../examples/points-worker.php', '--broker', $insecureBack ?? self::env('ONCEQ_TEST_BACK'),
                '--database', self::env('ONCEQ_TEST_DATABASE'), '--name', $name, '--queue', 'php', ...$flags];
        if ($insecureBack === null) {
            array_push($cmd, '--key', self::env('ONCEQ_TEST_ME') . '/php-worker.key_secret',
                '--broker-key', self::env('ONCEQ_TEST_KEYS') . '/broker.key');
        }
        $proc = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['file', $log, 'a'], 2 => ['file', $log, 'a']],
            $pipes, null, $env + getenv());
        $this->assertIsResource($proc);
        $pid = proc_get_status($proc)['pid'];
        file_put_contents(self::env('ONCEQ_TEST_WORK') . '/pids', "$pid\n", FILE_APPEND);
        $w = ['proc' => $proc, 'pid' => $pid, 'log' => $log];
        $this->workers[$pid] = $w;
        if ($insecureBack === null) {
            $this->waitFor("worker $name connected", fn () => $this->workerConnected($name));
        }
        return $w;
    }

    /** Signal a worker and wait for it; its exit status, or -N for signal N. */
    private function stopWorker(array $w, int $signal): int
    {
        $status = proc_get_status($w['proc']);
        if ($status['running']) {
            posix_kill($w['pid'], $signal);
        }
        $end = microtime(true) + 20;
        while (($status = proc_get_status($w['proc']))['running'] && microtime(true) < $end) {
            usleep(50_000);
        }
        if ($status['running']) {
            posix_kill($w['pid'], SIGKILL);
            usleep(200_000);
            $status = proc_get_status($w['proc']);
        }
        proc_close($w['proc']);
        unset($this->workers[$w['pid']]);
        return $status['signaled'] ? -$status['termsig'] : $status['exitcode'];
    }

    /** Wait for a worker to exit; its final status (proc_get_status reports the exit only once). */
    private function waitExit(array $w): array
    {
        $final = null;
        $this->waitFor("worker {$w['pid']} exited", function () use ($w, &$final): bool {
            $status = proc_get_status($w['proc']);
            if ($status['running']) {
                return false;
            }
            $final = $status;
            return true;
        });
        proc_close($w['proc']);
        unset($this->workers[$w['pid']]);
        return $final;
    }

    // ---- PHP and C in one fleet -------------------------------------------

    public function testDispatchedFromPhpRunsInTheCWorker(): void
    {
        $client = $this->client();
        $payload = ['order_id' => 1001, 'customer_id' => 1, 'points' => 120];
        $id = $client->dispatch('grant_points', $payload, ['queue' => 'c', 'dispatch_id' => 'php-test-1001']);
        // The same dispatch id again (a resend): the same job, nothing queued twice.
        $this->assertSame($id, $client->dispatch('grant_points', $payload, ['queue' => 'c', 'dispatch_id' => 'php-test-1001']));
        $this->waitFor('the C worker granted order 1001', fn () => $this->balance(1) === 120);
        $this->waitFor('queue c settled', fn () => ($q = $this->statsOf('queues', 'c')) && $q['done'] === 1 &&
            $q['ready'] + $q['leased'] + $q['delayed'] === 0);
        $this->assertSame(1, $this->statsOf('queues', 'c')['dispatched']);
        $this->assertSame(1, $this->grants(1001));
        $this->assertSame(120, $this->balance(1));
    }

    public function testDispatchedByTheCliRunsInPhpAndSigtermDrains(): void
    {
        $w = $this->startWorker('php-a');
        $out = [];
        exec(implode(' ', array_map('escapeshellarg', [
            self::env('ONCEQ_TEST_BIN') . '/onceq', 'dispatch', 'grant_points', '--queue', 'php',
            '--payload', '{"order_id": 2001, "customer_id": 2, "points": 50}', '--broker', self::env('ONCEQ_TEST_FRONT'),
            '--key', self::env('ONCEQ_TEST_ME') . '/app.key_secret', '--broker-key', self::env('ONCEQ_TEST_KEYS') . '/broker.key',
        ])) . ' 2>&1', $out, $rc);
        $this->assertSame(0, $rc, implode("\n", $out));
        $jobId = (int)trim($out[0]);
        $this->waitFor('the PHP worker granted order 2001', fn () => $this->balance(2) === 50);
        $this->waitFor('the PHP worker acked applied',
            fn () => str_contains((string)file_get_contents($w['log']), "job $jobId type=grant_points attempt=1 outcome=ok result=applied"));
        $this->waitFor('queue php settled', fn () => ($q = $this->statsOf('queues', 'php')) && $q['done'] >= 1 &&
            $q['leased'] === 0);
        // A grant the C worker would fail, failed the same way by PHP: the customer is named.
        $this->client()->dispatch('grant_points', ['order_id' => 2002, 'customer_id' => 999, 'points' => 5], ['queue' => 'php']);
        $this->client()->dispatch('grant_points', ['order_id' => 2003, 'points' => 5], ['queue' => 'php']);
        $this->waitFor('two bad grants failed', function () use ($w): bool {
            $log = (string)file_get_contents($w['log']);
            return str_contains($log, 'customer 999 has no balance row (add it with: onceq customer add 999)') &&
                str_contains($log, 'payload field "customer_id" is missing');
        });
        $failed = $this->client('admin')->request('failed', ['queue' => 'php'], 'failed');
        $this->assertSame(2, $failed['total']);
        $this->assertSame(0, $this->grants(2002));

        $this->assertSame(0, $this->stopWorker($w, SIGTERM), 'SIGTERM: a clean exit' . $this->logs());
        $this->assertStringContainsString('drained and disconnected', (string)file_get_contents($w['log']));
        $this->waitFor('the worker gone from the broker', fn () => !$this->workerConnected('php-a'));
    }

    public function testAPhpWorkerKilledAfterCommitIsRedeliveredAndReportsAlreadyApplied(): void
    {
        $marker = self::env('ONCEQ_TEST_WORK') . '/killed-after-commit';
        $before = $this->statsOf('types', 'grant_points');
        $victim = $this->startWorker('php-victim', ['ONCEQ_PHP_TEST_KILL_AFTER_COMMIT' => $marker]);
        $id = $this->client()->dispatch('grant_points', ['order_id' => 3001, 'customer_id' => 3, 'points' => 70], ['queue' => 'php']);
        $status = $this->waitExit($victim);
        $this->assertTrue($status['signaled'], 'the worker killed itself' . $this->logs());
        $this->assertSame(SIGKILL, $status['termsig']);
        $this->assertFileExists($marker);
        $this->assertSame(70, $this->balance(3), 'the grant was committed before the kill');
        $this->assertStringNotContainsString("job $id ", (string)file_get_contents($victim['log']), 'no ack left the victim');

        $rescuer = $this->startWorker('php-rescuer');
        $this->waitFor('the redelivery acked already_applied', fn () => str_contains(
            (string)file_get_contents($rescuer['log']), "job $id type=grant_points attempt=2 outcome=ok result=already_applied"));
        $this->waitFor('the job done, counted as a duplicate', function () use ($before): bool {
            $t = $this->statsOf('types', 'grant_points');
            return $t['duplicates'] === ($before['duplicates'] ?? 0) + 1 && $t['done'] === ($before['done'] ?? 0) + 1;
        });
        $this->assertSame(70, $this->balance(3), 'the balance exact: granted once');
        $this->assertSame(1, $this->grants(3001));
        $this->assertGreaterThanOrEqual(1, $this->statsOf('queues', 'php')['redelivered']);
        $this->assertSame(0, $this->stopWorker($rescuer, SIGTERM));
    }

    /**
     * A grant that blocks 5 s in one query (pg_sleep) at liveness 3 s: with
     * the keeper the worker is not found silent, its lease stays, and the job
     * runs once, where without it the broker gave the lease to the spare.
     */
    public function testAKeeperHoldsTheLeaseThroughALongCCall(): void
    {
        $before = $this->statsOf('queues', 'php');
        $slow = $this->startWorker('php-slow', ['ONCEQ_PHP_TEST_SLOW_QUERY_S' => '5'], null, ['--keeper']);
        $id = $this->client()->dispatch('grant_points', ['order_id' => 5101, 'customer_id' => 5, 'points' => 40], ['queue' => 'php']);
        $this->waitFor('the slow worker took the job', fn () => ($this->statsOf('queues', 'php')['leased'] ?? 0) === 1);
        $spare = $this->startWorker('php-spare');
        $this->waitFor('the grant acked applied at attempt 1', fn () => str_contains(
            (string)file_get_contents($slow['log']), "job $id type=grant_points attempt=1 outcome=ok result=applied"));
        $after = $this->statsOf('queues', 'php');
        $this->assertSame($before['redelivered'] ?? 0, $after['redelivered'], 'no redelivery' . $this->logs());
        $this->assertSame($before['late_acks'] ?? 0, $after['late_acks']);
        $this->assertStringNotContainsString("job $id ", (string)file_get_contents($spare['log']));
        $this->assertSame(40, $this->balance(5));
        $this->assertSame(0, $this->stopWorker($slow, SIGTERM));
        $this->assertSame(0, $this->stopWorker($spare, SIGTERM));
    }

    private static function freePort(): int
    {
        $sock = stream_socket_server('tcp://127.0.0.1:0');
        $port = (int)substr(strrchr(stream_socket_get_name($sock, false), ':'), 1);
        fclose($sock);
        return $port;
    }

    /** A broker of this test's own (plaintext, on loopback), started by PID. */
    private function startBroker(int $front, int $back, string $data): array
    {
        $log = self::env('ONCEQ_TEST_WORK') . '/own-broker.log';
        $proc = proc_open([self::env('ONCEQ_TEST_BIN') . '/onceq-broker', '--insecure', '--front', "tcp://127.0.0.1:$front",
            '--back', "tcp://127.0.0.1:$back", '--data-dir', $data],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', $log, 'a'], 2 => ['file', $log, 'a']], $pipes);
        $pid = proc_get_status($proc)['pid'];
        file_put_contents(self::env('ONCEQ_TEST_WORK') . '/pids', "$pid\n", FILE_APPEND);
        $b = ['proc' => $proc, 'pid' => $pid, 'log' => $log];
        $this->workers[$pid] = $b;
        return $b;
    }

    /** The broker dies (SIGKILL) and comes back after the worker's liveness: the worker reconnects on a fresh socket and runs the next job. */
    public function testAPhpWorkerReconnectsToARestartedBroker(): void
    {
        [$front, $back] = [self::freePort(), self::freePort()];
        $data = self::env('ONCEQ_TEST_WORK') . '/own-broker';
        $broker = $this->startBroker($front, $back, $data);
        $client = new Client("tcp://127.0.0.1:$front", ['timeout_ms' => 1000, 'tries' => 30]);
        $client->ping();
        $w = $this->startWorker('php-reconnect', [], "tcp://127.0.0.1:$back");
        $client->dispatch('grant_points', ['order_id' => 6001, 'customer_id' => 6, 'points' => 11], ['queue' => 'php']);
        $this->waitFor('the first grant', fn () => $this->balance(6) === 11);

        $this->assertSame(-SIGKILL, $this->stopWorker($broker, SIGKILL));
        // Away for longer than its liveness: the worker gives up the socket and reconnects with backoff.
        $this->waitFor('the worker noticed the silence', fn () => str_contains((string)file_get_contents($w['log']), 'was silent for'));
        $broker = $this->startBroker($front, $back, $data);
        $client->dispatch('grant_points', ['order_id' => 6002, 'customer_id' => 6, 'points' => 22], ['queue' => 'php']);
        $this->waitFor('the grant dispatched after the restart', fn () => $this->balance(6) === 33);
        $this->assertSame(1, $this->grants(6002));
        $this->assertSame(0, $this->stopWorker($w, SIGTERM));
        $this->stopWorker($broker, SIGTERM);
    }

    // ---- errors --------------------------------------------------------------

    public function testAPayloadOverTheLimitIsTooLarge(): void
    {
        try {
            $this->client()->dispatch('grant_points', ['blob' => str_repeat('x', 300 * 1024)]);
            $this->fail('a 300 KiB payload was accepted');
        } catch (TooLargeException $e) {
            $this->assertSame('too_large', $e->getErrorCode());
            $this->assertStringContainsString('262144', $e->getMessage());
        }
    }

    public function testOutOfRangeOptionsAreBadRequestsAndTheTimeoutRuleHolds(): void
    {
        try {
            $this->client()->dispatch('grant_points', [], ['max_tries' => 0]);
            $this->fail('max_tries 0 was accepted');
        } catch (BadRequestException $e) {
            $this->assertStringContainsString('max_tries', $e->getMessage());
        }
        $this->expectException(TimeoutRuleException::class);
        $this->client()->dispatch('grant_points', [], ['timeout' => 3600]);
    }

    public function testAUniqueKeyAnswersWithTheJobHoldingItAndOverlapKeysPassThrough(): void
    {
        // A queue no worker serves: the first job stays queued and holds its key.
        $options = ['queue' => 'held', 'unique_key' => 'php-order-7:ship', 'unique_for' => 'done'];
        $first = $this->client()->dispatchReply('grant_points', ['order_id' => 7007], $options);
        $this->assertFalse($first['unique']);
        $again = $this->client()->dispatchReply('grant_points', ['order_id' => 7007], $options);
        $this->assertSame(['id' => $first['id'], 'unique' => true], $again);
        $this->assertSame($first['id'], $this->client()->dispatch('grant_points', [], $options + ['unique_for' => 60]));
        $other = $this->client()->dispatch('grant_points', ['order_id' => 7008],
            ['queue' => 'held', 'unique_key' => 'php-order-8:ship', 'unique_for' => 90, 'overlap_key' => 'customer-8']);
        $this->assertGreaterThan($first['id'], $other);
        try {
            $this->client()->dispatch('grant_points', [], ['queue' => 'held', 'unique_key' => 'k', 'unique_for' => 31 * 86400]);
            $this->fail('a unique_for of 31 days was accepted');
        } catch (BadRequestException $e) {
            $this->assertStringContainsString('2592000', $e->getMessage());
        }
    }

    public function testStatsListsTheWorkersAPageAtATime(): void
    {
        $client = $this->client();
        $first = $client->stats();
        $connected = $first['broker']['workers'];
        $this->assertGreaterThanOrEqual(1, $connected); // the C worker
        $this->assertCount(min($connected, 100), $first['workers']);

        $none = $client->stats(0);
        $this->assertSame([], $none['workers']);
        $this->assertArrayNotHasKey('workers_next', $none);
        $this->assertSame($connected, $none['broker']['workers']);

        // One worker a page, following the cursor, adds up to all of them.
        $listed = 0;
        $after = 0;
        do {
            $page = $client->stats(1, $after);
            $listed += count($page['workers']);
            $after = $page['workers_next'] ?? 0;
        } while ($after > 0 && $listed <= $connected);
        $this->assertSame($connected, $listed);

        $this->expectException(BadRequestException::class);
        $client->stats(1001);
    }

    public function testAWorkerKeyOnTheFrontIsForbidden(): void
    {
        $this->expectException(ForbiddenException::class);
        $this->expectExceptionMessage('php-worker');
        $this->client('php-worker')->dispatch('grant_points', ['order_id' => 4001, 'customer_id' => 4, 'points' => 1]);
    }

    public function testAProducerWaitsForItsJobToEnd(): void
    {
        $client = $this->client();
        $id = $client->dispatch('noop', [], ['queue' => 'c']);
        $this->assertSame(['state' => 'done', 'error' => ''], $client->wait($id, self::WAIT_S));
        $this->assertSame('done', $client->wait($id, 0)['state']); // ended: answered at once
        $later = $client->dispatch('noop', [], ['queue' => 'c', 'delay' => 600]);
        $started = microtime(true);
        $this->assertSame('pending', $client->wait($later, 0.3)['state']);
        $this->assertGreaterThanOrEqual(0.25, microtime(true) - $started);
        $failed = $client->dispatch('fail', ['permanent' => true], ['queue' => 'c']);
        $end = $client->wait($failed, self::WAIT_S);
        $this->assertSame('failed', $end['state']);
        $this->assertStringContainsString('failed on purpose', $end['error']);
        $this->expectException(NotFoundException::class);
        $client->wait($later + 1000000, 1);
    }

    public function testAProducerDispatchesAndWaitsInOneRequest(): void
    {
        $client = $this->client();
        $options = ['queue' => 'c', 'dispatch_id' => 'php-dispatch-wait-1'];
        $done = $client->dispatchWait('noop', [], $options, self::WAIT_S);
        $this->assertIsInt($done['id']);
        $this->assertSame(['id' => $done['id'], 'unique' => false, 'state' => 'done', 'error' => ''], $done);
        // A resend (the same dispatch id) waits for the first dispatch's job, which has ended.
        $this->assertSame($done, $client->dispatchWait('noop', [], $options, self::WAIT_S));
        $this->assertSame('done', $client->wait($done['id'], 0)['state']);

        $failed = $client->dispatchWait('fail', ['permanent' => true], ['queue' => 'c'], self::WAIT_S);
        $this->assertGreaterThan($done['id'], $failed['id']);
        $this->assertSame('failed', $failed['state']);
        $this->assertStringContainsString('failed on purpose', $failed['error']);
    }

    /** A type no connected worker takes: pending at the timeout, queued all the same; a second dispatch naming its unique_key waits for it apart. */
    public function testADispatchWaitForAJobNoWorkerTakesIsPending(): void
    {
        $client = $this->client();
        $options = ['queue' => 'c', 'unique_key' => 'php-dispatch-wait:untaken'];
        $started = microtime(true);
        $end = $client->dispatchWait('php_nobody_handles', [], $options, 0.3);
        $this->assertGreaterThanOrEqual(0.25, microtime(true) - $started);
        $this->assertSame(['id' => $end['id'], 'unique' => false, 'state' => 'pending', 'error' => ''], $end);
        $this->assertSame(1, $this->statsOf('types', 'php_nobody_handles')['unhandled'] ?? null);

        // The key's holder: a plain `dispatched` (unique) at once, then a wait of its own for the holder.
        $started = microtime(true);
        $this->assertSame(['id' => $end['id'], 'unique' => true, 'state' => 'pending', 'error' => ''],
            $client->dispatchWait('php_nobody_handles', [], $options, 0.3));
        $this->assertGreaterThanOrEqual(0.25, microtime(true) - $started);
        $this->assertSame(1, $this->statsOf('types', 'php_nobody_handles')['ready'] ?? null, 'nothing queued twice');

        $this->client('admin')->request('cancel', ['id' => $end['id']], 'cancelled');
        $this->assertSame('cancelled', $client->wait($end['id'], 0)['state']);
    }

    /** A unique_key held past its job's end (unique_for): the holder's id as a plain `dispatched`, and its outcome by a wait apart. */
    public function testADispatchWaitNamingAUniqueKeysHolderGetsThatJobsEnd(): void
    {
        $client = $this->client();
        $options = ['queue' => 'c', 'unique_key' => 'php-dispatch-wait:held', 'unique_for' => 600];
        $first = $client->dispatchWait('fail', ['permanent' => true], $options, self::WAIT_S);
        $this->assertSame([false, 'failed'], [$first['unique'], $first['state']]);
        $again = $client->dispatchWait('noop', [], $options, self::WAIT_S);
        $this->assertSame(['id' => $first['id'], 'unique' => true, 'state' => 'failed', 'error' => $first['error']], $again);
    }

    public function testAnAdminCommandOnAJobTheBrokerDoesNotHoldIsNotFound(): void
    {
        $this->expectException(NotFoundException::class);
        $this->client('admin')->request('forget', ['id' => 987654321], 'forgotten');
    }

    public function testNoBrokerIsATimeoutWithTheDispatchIdToResend(): void
    {
        $sock = stream_socket_server('tcp://127.0.0.1:0');
        $port = (int)substr(strrchr(stream_socket_get_name($sock, false), ':'), 1);
        fclose($sock); // a port nothing listens on
        $client = new Client("tcp://127.0.0.1:$port", ['timeout_ms' => 300, 'tries' => 2]);
        $started = microtime(true);
        try {
            $client->dispatch('grant_points', ['order_id' => 5001, 'customer_id' => 5, 'points' => 1], ['dispatch_id' => 'resend-me']);
            $this->fail('a dispatch to no broker returned');
        } catch (TimeoutException $e) {
            $this->assertSame('resend-me', $e->getDispatchId());
            $this->assertStringContainsString('2 tries of 300 ms', $e->getMessage());
        }
        $this->assertLessThan(10.0, microtime(true) - $started);
    }
}
