<?php
declare(strict_types=1);

namespace Onceq\Tests\Unit;

use Onceq\Client;
use Onceq\Exception\ConfigException;
use Onceq\Exception\ProtocolException;
use Onceq\Exception\TimeoutException;
use Onceq\Job;
use Onceq\Protocol\Codec;
use Onceq\Result;
use Onceq\Tests\Support\ScriptedBroker;
use Onceq\Worker;
use PHPUnit\Framework\TestCase;

/**
 * A broker that sends what the protocol does not allow, played by the
 * scripted stand-in: the client throws one ProtocolException naming what is
 * wrong, where it returned a negative job id or read a 100 MB reply; the
 * worker logs a protocol error and answers the delivery without running it,
 * where a malformed lease token ended the process with a fatal error.
 */
final class MalformedBrokerTest extends TestCase
{
    /** Seconds a worker test may take at most; each ends on its own much sooner. */
    private const WORKER_DEADLINE_S = 20.0;

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

    private function assertRefused(callable $call, string $message): void
    {
        try {
            $call();
            $this->fail("accepted a reply that should fail with \"$message\"");
        } catch (ProtocolException $e) {
            $this->assertStringContainsString($message, $e->getMessage());
        }
    }

    public function testAJobIdBelowOneIsRefused(): void
    {
        $client = $this->client([['cmd' => 'dispatched', 'id' => -5], ['cmd' => 'dispatched', 'id' => 0],
            ['cmd' => 'dispatched', 'id' => 'abc'], ['cmd' => 'dispatched', 'id' => 1.5],
            ['cmd' => 'waited', 'id' => -1, 'state' => 'done'], ['cmd' => 'dispatched', 'id' => 3]]);
        $this->assertRefused(fn () => $client->dispatch('noop'), 'a dispatched reply with job id -5, not an integer from 1');
        $this->assertRefused(fn () => $client->dispatch('noop'), 'a dispatched reply with job id 0');
        $this->assertRefused(fn () => $client->dispatch('noop'), 'a dispatched reply with job id "abc"');
        $this->assertRefused(fn () => $client->dispatch('noop'), 'a dispatched reply with job id 1.5');
        $this->assertRefused(fn () => $client->wait(1, 0), 'a waited reply with job id -1');
        $this->assertSame(3, $client->dispatch('noop'), 'the client still works');
        // Nor does it send one: a wait for job 0 or -1 is refused before anything goes out.
        foreach ([0, -1] as $id) {
            try {
                $client->wait($id, 0);
                $this->fail("waited for job $id");
            } catch (ConfigException $e) {
                $this->assertStringContainsString("a job id is an integer from 1, not $id", $e->getMessage());
            }
        }
        $this->assertCount(6, $this->broker->requests());
    }

    public function testFieldsOfTheWrongTypeOrSizeAreRefused(): void
    {
        $client = $this->client([['cmd' => 'dispatched', 'id' => 1, 'unique' => 'yes'],
            ['cmd' => 'waited', 'id' => 1, 'state' => 'exploded'],
            ['cmd' => 'waited', 'id' => 1, 'state' => 'failed', 'error' => str_repeat('e', 1025)],
            ['cmd' => 'error', 'code' => ['full'], 'message' => 'x'],
            ['cmd' => 'error', 'code' => 'full', 'message' => str_repeat('m', 1025)],
            ['cmd' => 'pong', 'v' => 2], ['cmd' => 7]]);
        $this->assertRefused(fn () => $client->dispatch('noop'), 'field "unique" of a dispatched reply must be true or false');
        $this->assertRefused(fn () => $client->wait(1, 0), 'field "state" of a waited reply must be one of');
        $this->assertRefused(fn () => $client->wait(1, 0), 'field "error" is 1025 bytes, the limit is 1024');
        $this->assertRefused(fn () => $client->ping(), 'field "code" must be a string, not array');
        $this->assertRefused(fn () => $client->ping(), 'field "message" is 1025 bytes, the limit is 1024');
        $this->assertRefused(fn () => $client->ping(), 'a reply of protocol version 2, this client speaks 1');
        $this->assertRefused(fn () => $client->ping(), 'field "cmd" must be a string, not int');
    }

    /** Over 1 MiB and up to libzmq's cap: read, and refused by its size, matched to its request. */
    public function testAReplyOverTheFrameLimitIsRefusedByItsSize(): void
    {
        $client = $this->client([['cmd' => 'dispatched', 'id' => 1, '@pad' => 2 * Codec::MAX_FRAME_BYTES]]);
        $this->assertRefused(fn () => $client->dispatch('noop'),
            'bytes, the limit is ' . Codec::MAX_FRAME_BYTES);
    }

    /** A 100 MB reply never reaches PHP: libzmq drops the connection; the client answers with a timeout. */
    public function testAHundredMegabyteReplyIsNeverRead(): void
    {
        $client = $this->client([['cmd' => 'dispatched', 'id' => 1, '@pad' => 100 * 1024 * 1024]],
            ['timeout_ms' => 1500]);
        $before = memory_get_peak_usage();
        try {
            $client->dispatch('noop', [], ['dispatch_id' => 'big']);
            $this->fail('a 100 MB reply was taken');
        } catch (TimeoutException $e) {
            $this->assertSame('big', $e->getDispatchId());
        }
        $this->assertLessThan($before + Codec::MAX_WIRE_MSG_BYTES, memory_get_peak_usage(), 'the reply was not read into PHP');
    }

    /** Nested past the broker's limit behind a readable req: refused; a frame with no req is passed over, and named. */
    public function testFramesThatAreNotOneMapAreRefusedWhenTheyCarryOurReq(): void
    {
        $client = $this->client([['cmd' => 'dispatched', 'id' => 1, '@deep' => 40], ['@raw' => bin2hex("\x93\x01\x02\x03")]],
            ['timeout_ms' => 800]);
        $this->assertRefused(fn () => $client->dispatch('noop'), 'nested deeper than 32 levels');
        try {
            $client->dispatch('noop');
            $this->fail('took a frame that is not a reply to it');
        } catch (TimeoutException $e) {
            $this->assertStringContainsString('dropped an unreadable message: onceq: a frame that is not a msgpack map', $e->getMessage());
        }
    }

    /**
     * Each malformed delivery: the worker logs a protocol error, runs no
     * handler, and answers as onceq-worker does (fail with the reason,
     * echoing the token only if it is one); one without a readable id is
     * only logged. Then a good job still runs.
     */
    public function testAWorkerSurvivesMalformedDeliveriesAndAnswersThem(): void
    {
        $cases = [
            'negative lease' => [self::jobFrame(11, "\xff"), 'field "lease" is -1'],
            'binary lease' => [self::jobFrame(12, "\xc4\x03\x01\x02\x03"), 'field "lease" is "???"'],
            'non-decimal lease' => [self::jobFrame(13, "\xa3abc"), 'field "lease" is "abc"'],
            'float lease' => [self::jobFrame(14, "\xcb" . pack('E', 1.5)), 'field "lease" is 1.5'],
            'negative id' => [self::jobFrame(-15, "\x07"), 'ignoring a job the broker sent: onceq: field "id" is -15'],
            'bad timeout' => [self::jobFrame(16, "\x07", ['timeout' => -1]), 'field "timeout" is -1'],
            'list payload' => [self::jobFrame(17, "\x07", ['payload' => [1, 2]]), 'field "payload" must be a map'],
            'bad type' => [self::jobFrame(18, "\x07", ['type' => 'no spaces']), 'field "type" is "no spaces"'],
            'not a map' => [self::jobFrame(19, "\x07") . "\x00", 'ignoring a message from the broker'],
        ];
        $script = [];
        foreach ($cases as [$frame]) {
            $script[] = ['@raw' => bin2hex($frame)];
        }
        $script[] = ['@raw' => bin2hex(self::jobFrame(20, "\xcf\xfe\xdc\xba\x98\x76\x54\x32\x10"))];
        $this->broker = new ScriptedBroker($script);

        $lines = [];
        $ran = [];
        $deadline = microtime(true) + self::WORKER_DEADLINE_S;
        $worker = null;
        $worker = new Worker($this->broker->endpoint, ['name' => 'malformed', 'heartbeat_ms' => 200,
            'log' => function (string $line) use (&$lines, &$worker, $deadline): void {
                $lines[] = $line;
                if (microtime(true) > $deadline) {
                    $worker->stop();
                }
            }]);
        $worker->register('noop', function (Job $job) use (&$ran, &$worker): Result {
            $ran[] = $job->id;
            $worker->stop();
            return Result::ok();
        });
        $this->assertSame(0, $worker->run());

        $this->assertSame([20], $ran, 'only the well-formed job ran: ' . implode("\n", $lines));
        $log = implode("\n", $lines);
        foreach ($cases as $name => [, $message]) {
            $this->assertStringContainsString($message, $log, $name);
        }
        $acks = [];
        foreach ($this->broker->requests() as $request) {
            if ($request['cmd'] === 'ack') {
                $acks[$request['id']] = $request;
            }
        }
        foreach ([11, 12, 13, 14, 16, 17, 18] as $id) {
            $this->assertSame('fail', $acks[$id]['outcome'] ?? null, "job $id");
            $this->assertSame(1, $acks[$id]['credit'], "job $id gives its credit back");
            $this->assertStringContainsString('the worker could not decode the job', $acks[$id]['error']);
        }
        foreach ([11, 12, 13, 14] as $id) {
            $this->assertArrayNotHasKey('lease', $acks[$id], "job $id: no token to echo");
        }
        $this->assertSame(7, $acks[16]['lease'], 'a readable token is echoed');
        $this->assertArrayNotHasKey(-15, $acks);
        $this->assertArrayNotHasKey(19, $acks);
        $this->assertSame('ok', $acks[20]['outcome']);
    }

    /** A `job` message for job $id with a lease of these raw msgpack bytes; $set overrides fields. */
    private static function jobFrame(int $id, string $rawLease, array $set = []): string
    {
        $job = $set + ['id' => $id, 'type' => 'noop', 'queue' => 'default', 'attempt' => 1, 'max_tries' => 3,
                       'timeout' => 5, 'payload' => (object)[]];
        $map = Codec::map($job);
        $map = chr(ord($map[0]) + 1) . substr($map, 1) . "\xa5lease" . $rawLease;
        return "\x83\xa1v\x01\xa3cmd\xa3job\xa3job" . $map;
    }
}
