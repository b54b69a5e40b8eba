<?php
declare(strict_types=1);

namespace Onceq\Tests\Unit;

use Onceq\Client;
use Onceq\Exception\ConfigException;
use Onceq\Exception\FullException;
use Onceq\Exception\ProtocolException;
use Onceq\Exception\TimeoutException;
use Onceq\Exception\TimeoutRuleException;
use Onceq\Tests\Support\ScriptedBroker;
use PHPUnit\Framework\TestCase;

/**
 * Client::dispatchWait() against a scripted stand-in for the broker: its
 * arguments, and every answer it may get, including those the real broker
 * gives only in conditions a test cannot make on demand (a broker from
 * before `wait` in `dispatch`, a wait refused after the dispatch, silence).
 * tests/integration/FleetTest.php runs it against the real broker.
 */
final class DispatchWaitTest extends TestCase
{
    private ?ScriptedBroker $broker = null;

    protected function tearDown(): void
    {
        $this->broker?->stop();
        $this->broker = null;
    }

    /** @param list<array|null> $script */
    private function client(array $script, array $options = []): Client
    {
        $this->broker = new ScriptedBroker($script);
        return new Client($this->broker->endpoint, $options + ['timeout_ms' => 5000, 'tries' => 1]);
    }

    public function testATimeoutOutOfRangeIsRefusedBeforeAnythingIsSent(): void
    {
        $client = $this->client([['cmd' => 'pong']]);
        foreach ([-1, -0.001, 3600.001, 3601, INF, -INF, NAN] as $timeout) {
            foreach (['dispatchWait' => fn () => $client->dispatchWait('noop', [], [], $timeout),
                      'wait' => fn () => $client->wait(1, $timeout)] as $method => $call) {
                try {
                    $call();
                    $this->fail("$method accepted a timeout of $timeout");
                } catch (ConfigException $e) {
                    $this->assertStringContainsString("a wait lasts 0 to 3600 seconds, not $timeout", $e->getMessage());
                }
            }
        }
        try {
            $client->dispatchWait('noop', [], ['wait' => 5]);
            $this->fail('dispatchWait took its timeout as an option');
        } catch (ConfigException $e) {
            $this->assertStringContainsString('unknown dispatch option(s): wait', $e->getMessage());
        }
        // The first request on the connection is this ping: nothing went before it.
        $this->assertTrue($client->ping());
        $this->assertSame(['ping'], array_column($this->broker->requests(), 'cmd'));
    }

    public function testAWaitedAnswerCarriesTheJobAndItsEnd(): void
    {
        $client = $this->client([['cmd' => 'waited', 'id' => 8, 'state' => 'failed', 'error' => 'the order does not exist']]);
        $this->assertSame(['id' => 8, 'unique' => false, 'state' => 'failed', 'error' => 'the order does not exist'],
            $client->dispatchWait('grant_points', ['order_id' => 42], ['queue' => 'c', 'dispatch_id' => 'grant:42'], 2.5));
        $requests = $this->broker->requests();
        $this->assertCount(1, $requests);
        $this->assertSame('dispatch', $requests[0]['cmd']);
        $this->assertSame(2.5, $requests[0]['wait']);
        $this->assertSame('grant:42', $requests[0]['dispatch_id']);
        $this->assertSame(['type' => 'grant_points', 'queue' => 'c', 'payload' => ['order_id' => 42]], $requests[0]['job']);
    }

    /** A broker from before `wait` in `dispatch` (or one holding no more waits) answers `dispatched`: a wait follows, for what is left. */
    public function testAPlainDispatchedGetsAWaitForWhatIsLeftOfTheTimeout(): void
    {
        $client = $this->client([['cmd' => 'dispatched', 'id' => 7], ['cmd' => 'waited', 'id' => 7, 'state' => 'done']]);
        $this->assertSame(['id' => 7, 'unique' => false, 'state' => 'done', 'error' => ''],
            $client->dispatchWait('noop', [], [], 5));
        [$dispatch, $wait] = $this->broker->requests();
        $this->assertSame(['dispatch', 5], [$dispatch['cmd'], $dispatch['wait']]);
        $this->assertSame(['wait', 7], [$wait['cmd'], $wait['id']]);
        $this->assertGreaterThan(0, $wait['timeout']);
        $this->assertLessThan(5, $wait['timeout']);
        $this->assertNotSame($dispatch['req'], $wait['req']);
    }

    public function testAWaitThatFailsAfterAPlainDispatchedNamesTheQueuedJob(): void
    {
        $client = $this->client([['cmd' => 'dispatched', 'id' => 11, 'unique' => true],
            ['cmd' => 'error', 'code' => 'full', 'message' => 'this connection holds 256 waits, the most it may']]);
        try {
            $client->dispatchWait('noop', [], ['unique_key' => 'k'], 5);
            $this->fail('a refused wait returned');
        } catch (FullException $e) {
            $this->assertSame(11, $e->getJobId());
            $this->assertStringContainsString('256 waits', $e->getMessage());
            $this->assertStringContainsString('job 11 is queued: wait(11) for its outcome', $e->getMessage());
        }
    }

    public function testARefusedDispatchNamesNoJob(): void
    {
        $client = $this->client([['cmd' => 'error', 'code' => 'timeout_rule', 'message' => 'timeout 3600 s']]);
        try {
            $client->dispatchWait('noop', [], ['timeout' => 3600], 5);
            $this->fail('a refused dispatch returned');
        } catch (TimeoutRuleException $e) {
            $this->assertNull($e->getJobId());
        }
        $this->assertCount(1, $this->broker->requests(), 'no wait after an error');
    }

    /** Silence: the same request again (same req, same dispatch id, same wait), each send given the wait on top of timeout_ms. */
    public function testSilenceResendsTheSameRequestAndWaitsItsHoldEachTime(): void
    {
        $client = $this->client([null, ['cmd' => 'waited', 'id' => 9, 'state' => 'pending']],
            ['timeout_ms' => 300, 'tries' => 2]);
        $started = microtime(true);
        $this->assertSame(['id' => 9, 'unique' => false, 'state' => 'pending', 'error' => ''],
            $client->dispatchWait('noop', [], [], 0.2));
        $this->assertGreaterThanOrEqual(0.45, microtime(true) - $started, 'the first send was given 300 + 200 ms');
        [$first, $again] = $this->broker->requests();
        $this->assertSame($first, $again);
        $this->assertSame(0.2, $first['wait']);
        $this->assertMatchesRegularExpression('/^[0-9a-f]{32}$/', $first['dispatch_id']);
    }

    public function testNoAnswerAtAllIsATimeoutNamingTheDispatchId(): void
    {
        $client = $this->client([null, null], ['timeout_ms' => 200, 'tries' => 2]);
        try {
            $client->dispatchWait('noop', [], ['dispatch_id' => 'resend-me'], 0.1);
            $this->fail('a dispatch nobody answered returned');
        } catch (TimeoutException $e) {
            $this->assertSame('resend-me', $e->getDispatchId());
            $this->assertNull($e->getJobId());
            $this->assertStringContainsString('dispatch id resend-me', $e->getMessage());
            // Each try waited timeout_ms and the wait it asked the broker for.
            $this->assertStringContainsString('2 tries of 300 ms', $e->getMessage());
        }
    }

    public function testAnAnswerOfAnotherShapeIsAProtocolError(): void
    {
        $client = $this->client([['cmd' => 'pong'], ['cmd' => 'waited', 'id' => 3], ['cmd' => 'waited', 'state' => 'done'],
            ['cmd' => 'dispatched']]);
        foreach (['expected "waited" or "dispatched" from the broker, got "pong"', 'to dispatch: missing field "state"',
                  'a waited reply without a job id', 'a dispatched reply without a job id'] as $message) {
            try {
                $client->dispatchWait('noop', [], [], 1);
                $this->fail("no ProtocolException ($message)");
            } catch (ProtocolException $e) {
                $this->assertStringContainsString($message, $e->getMessage());
            }
        }
    }
}
