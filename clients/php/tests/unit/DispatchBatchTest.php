<?php
declare(strict_types=1);

namespace Onceq\Tests\Unit;

use Onceq\Client;
use Onceq\Exception\ConfigException;
use Onceq\Tests\Support\ScriptedBroker;
use PHPUnit\Framework\TestCase;

/**
 * Client::dispatchBatch(), batch() and cancelBatch() against a scripted
 * stand-in for the broker: the request they send (docs/protocol.md,
 * "dispatch_batch" and "batch") and what they make of the answers.
 */
final class DispatchBatchTest extends TestCase
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

    public function testABatchOfOrdersWithABonusThen(): void
    {
        $client = $this->client([['cmd' => 'batch_dispatched', 'batch' => 41, 'first' => 42, 'count' => 2]]);
        $got = $client->dispatchBatch([
            ['type' => 'grant_points', 'payload' => ['order_id' => 1001, 'customer_id' => 7, 'points' => 10]],
            ['type' => 'grant_points', 'payload' => ['order_id' => 1002, 'customer_id' => 7, 'points' => 10], 'queue' => 'points'],
        ], ['then' => ['type' => 'grant_bonus', 'payload' => ['customer_id' => 7]], 'dispatch_id' => 'campaign-7']);
        $this->assertSame(['batch' => 41, 'ids' => [42, 43]], $got);
        $requests = $this->broker->requests();
        $this->assertCount(1, $requests);
        $this->assertSame('dispatch_batch', $requests[0]['cmd']);
        $this->assertSame('campaign-7', $requests[0]['dispatch_id']);
        $this->assertCount(2, $requests[0]['jobs']);
        $this->assertSame('points', $requests[0]['jobs'][1]['queue']);
        $this->assertSame(['type' => 'grant_bonus', 'payload' => ['customer_id' => 7]], $requests[0]['then']);
        $this->assertArrayNotHasKey('catch', $requests[0]);
    }

    public function testBadInputIsRefusedBeforeAnythingIsSent(): void
    {
        $client = $this->client([['cmd' => 'pong']]);
        foreach ([fn () => $client->dispatchBatch([]),
                  fn () => $client->dispatchBatch([['payload' => []]]),
                  fn () => $client->dispatchBatch([['type' => 'noop']], ['later' => 1]),
                  fn () => $client->dispatchBatch([['type' => 'noop', 'unique_key' => 'k']]),
                  fn () => $client->dispatchBatch([['type' => 'noop']], ['then' => 'noop'])] as $call) {
            try {
                $call();
                $this->fail('a bad batch was sent');
            } catch (ConfigException $e) {
                $this->assertStringStartsWith('onceq: ', $e->getMessage());
            }
        }
        $this->assertTrue($client->ping());
        $this->assertSame(['ping'], array_column($this->broker->requests(), 'cmd'));
    }

    public function testAChainOfPointsThenShipment(): void
    {
        $client = $this->client([['cmd' => 'dispatched', 'id' => 50]]);
        $this->assertSame(50, $client->dispatch('grant_points', ['order_id' => 42], [
            'chain' => [['type' => 'request_shipment', 'payload' => ['order_id' => 42]]],
            'chain_catch' => ['type' => 'alert_ops', 'payload' => ['order_id' => 42]],
        ]));
        $request = $this->broker->requests()[0];
        $this->assertSame([['type' => 'request_shipment', 'payload' => ['order_id' => 42]]], $request['chain']);
        $this->assertSame(['type' => 'alert_ops', 'payload' => ['order_id' => 42]], $request['chain_catch']);
        try {
            $client->dispatch('noop', [], ['chain' => [['type' => 'x', 'unique_key' => 'k']]]);
            $this->fail('a link with a unique_key was sent');
        } catch (ConfigException $e) {
            $this->assertStringContainsString('chain entry 0', $e->getMessage());
        }
    }

    public function testShowAndCancel(): void
    {
        $batch = ['id' => 41, 'total' => 2, 'pending' => 0, 'done' => 2, 'failed' => 0, 'cancelled' => 0,
                  'state' => 'settled', 'callbacks' => ['then' => 44]];
        $client = $this->client([['cmd' => 'batch', 'op' => 'show', 'batch' => $batch],
                                 ['cmd' => 'batch', 'op' => 'cancel', 'batch' => $batch, 'withdrawn' => 0]]);
        $this->assertSame(44, $client->batch(41)['callbacks']['then']);
        $this->assertSame(0, $client->cancelBatch(41)['withdrawn']);
        $this->assertSame([['show', 41], ['cancel', 41]],
            array_map(fn ($r) => [$r['op'], $r['id']], $this->broker->requests()));
    }
}
