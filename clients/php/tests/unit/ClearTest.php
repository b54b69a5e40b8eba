<?php
declare(strict_types=1);

namespace Onceq\Tests\Unit;

use Onceq\Client;
use Onceq\Exception\ProtocolException;
use Onceq\Exception\UnknownCommandException;
use Onceq\Tests\Support\ScriptedBroker;
use PHPUnit\Framework\TestCase;

/**
 * Client::clear() against a scripted stand-in for the broker: it asks
 * again while the broker says more wait and adds the counts, stops with an
 * error on a reply that says more but cancelled none (so the loop always
 * ends), and a broker from before `clear` is an UnknownCommandException.
 * tests/integration/test_queue_clear.c and the Laravel suite run it
 * against the real broker.
 */
final class ClearTest extends TestCase
{
    private ?ScriptedBroker $broker = null;

    protected function tearDown(): void
    {
        $this->broker?->stop();
        $this->broker = null;
    }

    /** @param list<array|null> $script */
    private function client(array $script): Client
    {
        $this->broker = new ScriptedBroker($script);
        return new Client($this->broker->endpoint, ['timeout_ms' => 5000, 'tries' => 1]);
    }

    public function testItAsksUntilNoneWaitsAndAddsTheCounts(): void
    {
        $client = $this->client([['cmd' => 'cleared', 'count' => 1000, 'more' => true],
            ['cmd' => 'cleared', 'count' => 7, 'more' => false]]);
        $this->assertSame(1007, $client->clear('mail'));
        $requests = $this->broker->requests();
        $this->assertCount(2, $requests);
        foreach ($requests as $r) {
            $this->assertSame(['clear', 'mail'], [$r['cmd'], $r['queue']]);
        }
    }

    public function testMoreWithNothingCancelledEndsTheLoop(): void
    {
        $client = $this->client([['cmd' => 'cleared', 'count' => 0, 'more' => true]]);
        $this->expectException(ProtocolException::class);
        $this->expectExceptionMessage('cancelled none');
        $client->clear('mail');
    }

    public function testABrokerFromBeforeClearSaysSo(): void
    {
        $client = $this->client([['cmd' => 'error', 'code' => 'unknown_command', 'error' => 'unknown command "clear"']]);
        $this->expectException(UnknownCommandException::class);
        $client->clear('mail');
    }
}
