<?php
declare(strict_types=1);

namespace Onceq\Tests\Unit;

use Onceq\Connection;
use Onceq\KeeperLink;
use Onceq\Tests\Support\ScriptedBroker;
use PHPUnit\Framework\TestCase;

/**
 * The keeper against the scripted stand-in for the back socket: it relays
 * both ways, heartbeats on the welcome's interval while this process is
 * blocked in one C call, and says `disconnect` when its pipe closes.
 */
final class KeeperLinkTest extends TestCase
{
    private const WAIT_S = 20.0;
    private const HEARTBEAT_MS = 100;
    private const BLOCKED_US = 1_500_000;

    public function testHeartbeatsWhileTheWorkerIsBlockedAndDisconnectsAtClose(): void
    {
        $broker = new ScriptedBroker([['cmd' => 'welcome', 'heartbeat_ms' => self::HEARTBEAT_MS, 'liveness' => 3]]);
        try {
            $link = new KeeperLink($broker->endpoint, null);
            $this->assertTrue($link->send(['cmd' => 'ready', 'credit' => 0, 'types' => ['x']]));
            $welcome = null;
            $end = microtime(true) + self::WAIT_S;
            while ($welcome === null && microtime(true) < $end) {
                $m = $link->receive(500);
                if (is_array($m) && $m['cmd'] === 'welcome') {
                    $welcome = $m;
                }
            }
            $this->assertNotNull($welcome, 'the welcome relayed to the worker');
            $before = $this->requestsOf($broker, 'heartbeat');
            usleep(self::BLOCKED_US); // one C call: no PHP runs here, no signal handler either
            $beats = $this->requestsOf($broker, 'heartbeat') - $before;
            // 15 intervals passed; under load some may be late, none may be missing for liveness (3) in a row.
            $this->assertGreaterThanOrEqual(5, $beats, "heartbeats sent while the worker was blocked: $beats");

            $link->flush(5000);
            $this->waitFor(fn () => $this->requestsOf($broker, 'disconnect') === 1, 'the keeper saying disconnect');
        } finally {
            $broker->stop();
        }
    }

    public function testAClosedConnectionSendsNothingAndReceivesNull(): void
    {
        $connection = new Connection('tcp://127.0.0.1:9', null);
        $connection->close();
        $connection->close(); // idempotent
        $this->assertFalse($connection->send(['cmd' => 'ping']));
        $this->assertNull($connection->receive(0));
        $this->assertNull($connection->stream());
    }

    private function requestsOf(ScriptedBroker $broker, string $cmd): int
    {
        return count(array_filter($broker->requests(), static fn ($r) => ($r['cmd'] ?? null) === $cmd));
    }

    private function waitFor(callable $done, string $what): void
    {
        $end = microtime(true) + self::WAIT_S;
        while (!$done()) {
            if (microtime(true) > $end) {
                $this->fail("$what: not within " . self::WAIT_S . ' s');
            }
            usleep(20_000);
        }
    }
}
