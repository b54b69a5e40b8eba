<?php
declare(strict_types=1);

namespace Onceq\Tests\Unit;

use Onceq\Exception\BrokerException;
use Onceq\Exception\OnceqException;
use Onceq\Job;
use Onceq\Protocol\Check;
use Onceq\Protocol\Codec;
use Onceq\Protocol\Unreadable;
use Onceq\Result;
use Onceq\Worker;
use PHPUnit\Framework\TestCase;

/**
 * A seeded random-input test of what the client and the worker do with a
 * frame from the broker (no PHP fuzzer is packaged for Debian): random
 * bytes, random msgpack built from the protocol's field names and every
 * msgpack type, and mutations of real replies and deliveries. Each frame
 * goes through the client's path (Codec::decode, Check::reply, the job id,
 * the wait's outcome, the broker error's exception) and the worker's
 * (Worker's message handler, with a handler that runs what is well-formed).
 * Either returns a value or throws the library's own OnceqException; a PHP
 * error, warning or notice (PHPUnit turns each into an exception) or any
 * other exception fails the test, naming the frame.
 */
final class DecoderFuzzTest extends TestCase
{
    private const SEED = 20261204;
    private const RANDOM_FRAMES = 6000;
    private const BUILT_FRAMES = 8000;
    private const MUTATED_FRAMES = 8000;
    /** Wall-clock bound on the whole run, far above what it takes (about 2 s). */
    private const MAX_SECONDS = 60.0;

    private const KEYS = ['v', 'cmd', 'req', 'id', 'job', 'lease', 'state', 'error', 'code', 'message', 'unique',
        'heartbeat_ms', 'liveness', 'reason', 'type', 'queue', 'attempt', 'max_tries', 'timeout', 'payload', 'pad'];
    private const CMDS = ['dispatched', 'waited', 'error', 'pong', 'stats', 'welcome', 'job', 'reconnect',
        'heartbeat', 'jobs', ''];

    private Worker $worker;
    private \Closure $handle;

    protected function setUp(): void
    {
        $this->worker = new Worker('tcp://127.0.0.1:1', ['name' => 'fuzz', 'log' => static function (string $line): void {
        }]);
        $this->worker->register('noop', fn (Job $job) => Result::ok());
        // The worker's own handler for one message, without a socket (its sends go nowhere).
        $this->handle = \Closure::bind(function (array|Unreadable $m): void {
            $this->handle($m);
        }, $this->worker, Worker::class);
    }

    public function testEveryFrameGivesAValueOrTheLibrarysException(): void
    {
        mt_srand(self::SEED);
        $started = microtime(true);
        $seeds = self::realFrames();
        $count = 0;
        $outcomes = ['value' => 0, 'exception' => 0];
        for ($i = 0; $i < self::RANDOM_FRAMES; $i++) {
            $this->feed(self::randomBytes(), $outcomes);
        }
        for ($i = 0; $i < self::BUILT_FRAMES; $i++) {
            $this->feed(self::built(), $outcomes);
        }
        for ($i = 0; $i < self::MUTATED_FRAMES; $i++) {
            $this->feed(self::mutate($seeds[mt_rand(0, count($seeds) - 1)], $seeds), $outcomes);
            $this->assertLessThan(self::MAX_SECONDS, microtime(true) - $started, 'the run is bounded');
        }
        foreach ($seeds as $frame) {
            $this->feed($frame, $outcomes);
        }
        $count = array_sum($outcomes);
        $this->assertSame(self::RANDOM_FRAMES + self::BUILT_FRAMES + self::MUTATED_FRAMES + count($seeds), $count);
        // Both ends were reached: the mutations are not all refused at the first byte.
        $this->assertGreaterThan(250, $outcomes['value']);
        $this->assertGreaterThan(1000, $outcomes['exception']);
    }

    /** @param array{value: int, exception: int} $outcomes */
    private function feed(string $frame, array &$outcomes): void
    {
        try {
            $this->client($frame);
            $outcomes['value']++;
        } catch (OnceqException) {
            $outcomes['exception']++;
        } catch (\Throwable $e) {
            $this->fail('the client threw ' . get_class($e) . ' (' . $e->getMessage() . ') on ' . bin2hex(substr($frame, 0, 200)));
        }
        try {
            try {
                $message = Codec::decode($frame);
            } catch (OnceqException $e) {
                $message = new Unreadable($e->getMessage(), Codec::peekReq($frame));
            }
            ($this->handle)($message);
        } catch (\Throwable $e) {
            $this->fail('the worker threw ' . get_class($e) . ' (' . $e->getMessage() . ') on ' . bin2hex(substr($frame, 0, 200)));
        }
    }

    /** What Client::request() and its callers do with a reply, without the socket. */
    private function client(string $frame): mixed
    {
        $reply = Codec::decode($frame);
        Check::reply($reply);
        return match ($reply['cmd']) {
            'error' => BrokerException::fromReply($reply),
            'dispatched' => [Check::id($reply, 'dispatched'), ($reply['unique'] ?? false) === true],
            'waited' => [Check::id($reply, 'waited'), $reply['state'], $reply['error'] ?? ''],
            default => $reply,
        };
    }

    /** Replies and deliveries as the broker sends them. */
    private static function realFrames(): array
    {
        $head = ['v' => 1];
        $job = ['id' => 42, 'type' => 'noop', 'queue' => 'default', 'attempt' => 2, 'max_tries' => 3, 'timeout' => 30,
                'payload' => ['order_id' => 7, 'note' => 'é'], 'backoff' => [1, 2.5]];
        $frames = [
            Codec::encode($head + ['cmd' => 'dispatched', 'req' => 9, 'id' => 1042]),
            Codec::encode($head + ['cmd' => 'dispatched', 'req' => 9, 'id' => 1042, 'unique' => true]),
            Codec::encode($head + ['cmd' => 'waited', 'req' => 9, 'id' => 8, 'state' => 'failed', 'error' => 'no such order']),
            Codec::encode($head + ['cmd' => 'waited', 'req' => 9, 'id' => 8, 'state' => 'pending']),
            Codec::encode($head + ['cmd' => 'error', 'req' => 9, 'code' => 'full', 'message' => 'the broker holds 1000000 jobs']),
            Codec::encode($head + ['cmd' => 'pong', 'req' => 9]),
            Codec::encode($head + ['cmd' => 'stats', 'req' => 9, 'queues' => [['name' => 'default', 'ready' => 3]]]),
            Codec::encode($head + ['cmd' => 'welcome', 'heartbeat_ms' => 1000, 'liveness' => 3]),
            Codec::encode($head + ['cmd' => 'reconnect', 'reason' => 'unknown worker']),
            Codec::encode($head + ['cmd' => 'heartbeat']),
        ];
        // A delivery with a lease token above PHP_INT_MAX (a uint64 on the wire).
        $map = Codec::map($job);
        $frames[] = "\x83\xa1v\x01\xa3cmd\xa3job\xa3job" . chr(ord($map[0]) + 1) . substr($map, 1) .
            "\xa5lease\xcf\xfe\xdc\xba\x98\x76\x54\x32\x10";
        $frames[] = Codec::encode($head + ['cmd' => 'job', 'job' => $job + ['lease' => 5]]);
        return $frames;
    }

    private static function randomBytes(): string
    {
        $n = mt_rand(0, 48);
        $out = '';
        for ($i = 0; $i < $n; $i++) {
            $out .= chr(mt_rand(0, 255));
        }
        // Most frames open a map, so that they get past the first byte.
        if ($out !== '' && mt_rand(0, 3) > 0) {
            $out[0] = chr(0x80 | mt_rand(0, 15));
        }
        return $out;
    }

    /** A random map of protocol keys and values of every msgpack type, written byte by byte. */
    private static function built(): string
    {
        $n = mt_rand(1, 8);
        $out = chr(0x80 | $n);
        for ($i = 0; $i < $n; $i++) {
            $key = self::KEYS[mt_rand(0, count(self::KEYS) - 1)];
            $out .= chr(0xa0 | strlen($key)) . $key;
            $out .= match ($key) {
                'cmd' => mt_rand(0, 4) > 0 ? self::str(self::CMDS[mt_rand(0, count(self::CMDS) - 1)]) : self::value(2),
                'v' => mt_rand(0, 3) > 0 ? "\x01" : self::value(2),
                'job' => mt_rand(0, 3) > 0 ? self::jobMap() : self::value(3),
                default => self::value(3),
            };
        }
        return $out;
    }

    private static function jobMap(): string
    {
        $keys = ['id', 'type', 'queue', 'attempt', 'max_tries', 'timeout', 'payload', 'lease'];
        $out = chr(0x80 | count($keys));
        foreach ($keys as $key) {
            $out .= self::str($key);
            if (mt_rand(0, 2) > 0) {
                $out .= match ($key) {
                    'id', 'attempt', 'max_tries', 'timeout' => chr(mt_rand(1, 5)),
                    'type' => self::str('noop'),
                    'queue' => self::str('default'),
                    'payload' => "\x80",
                    'lease' => "\xcf" . pack('J', mt_rand()),
                };
            } else {
                $out .= self::value(2);
            }
        }
        return $out;
    }

    private static function value(int $depth): string
    {
        $kind = mt_rand(0, $depth > 0 ? 19 : 15);
        return match ($kind) {
            0 => "\xc0",
            1 => mt_rand(0, 1) ? "\xc3" : "\xc2",
            2 => chr(mt_rand(0, 0x7f)),
            3 => chr(mt_rand(0xe0, 0xff)),
            4 => "\xd3" . pack('J', mt_rand(PHP_INT_MIN, -1)),
            5 => "\xcf" . pack('J', mt_rand(PHP_INT_MIN, -1)),   // above PHP_INT_MAX as a uint64
            6 => "\xcf" . pack('J', mt_rand(0, PHP_INT_MAX)),
            7 => "\xcb" . pack('E', [NAN, INF, -INF, 0.0, -0.5, 1e300, 1.5][mt_rand(0, 6)]),
            8 => "\xca" . pack('G', 2.5),
            9 => self::str(['', 'abc', '18446744073709551615', '-1', '007', "\xff\xfe", 'noop', str_repeat('e', 1100)][mt_rand(0, 7)]),
            10 => "\xc4" . chr(3) . "\x01\x02\x03",              // bin
            11 => "\xd4\x01\x07",                                  // fixext
            12 => "\xc7\x02\x05ab",                                // ext
            13 => "\xd9" . chr(40) . str_repeat('s', 40),
            14 => "\xdc\x00\x00",                                  // an empty array16
            15 => "\xc1",                                          // never used
            16 => "\x92" . self::value($depth - 1) . self::value($depth - 1),
            17 => "\x81" . self::value($depth - 1) . self::value($depth - 1), // any key type
            18 => "\x81" . self::str(self::KEYS[mt_rand(0, count(self::KEYS) - 1)]) . self::value($depth - 1),
            19 => str_repeat("\x91", mt_rand(20, 2000)) . "\x01",  // deep
        };
    }

    private static function str(string $s): string
    {
        $n = strlen($s);
        return $n < 32 ? chr(0xa0 | $n) . $s : ($n < 256 ? "\xd9" . chr($n) . $s : "\xda" . pack('n', $n) . $s);
    }

    /** A real frame, changed a little: bytes flipped, set to a type byte, cut, grown, or spliced. */
    private static function mutate(string $frame, array $seeds): string
    {
        $rounds = mt_rand(1, 4);
        for ($r = 0; $r < $rounds; $r++) {
            $len = strlen($frame);
            $at = $len > 0 ? mt_rand(0, $len - 1) : 0;
            switch (mt_rand(0, 6)) {
                case 0:
                    if ($len > 0) {
                        $frame[$at] = chr(ord($frame[$at]) ^ (1 << mt_rand(0, 7)));
                    }
                    break;
                case 1:
                    if ($len > 0) {
                        $frame[$at] = chr([0xc0, 0xc1, 0xc4, 0xca, 0xcb, 0xcf, 0xd3, 0xd9, 0xdc, 0xde, 0xdf, 0xff, 0x7f,
                            0x80, 0x90, 0xa0][mt_rand(0, 15)]);
                    }
                    break;
                case 2:
                    $frame = substr($frame, 0, $at);
                    break;
                case 3:
                    $frame = substr($frame, 0, $at) . chr(mt_rand(0, 255)) . substr($frame, $at);
                    break;
                case 4:
                    $frame = substr($frame, 0, $at) . substr($frame, min($len, $at + mt_rand(1, 4)));
                    break;
                case 5:
                    $other = $seeds[mt_rand(0, count($seeds) - 1)];
                    $frame = substr($frame, 0, $at) . substr($other, mt_rand(0, max(0, strlen($other) - 1)));
                    break;
                case 6:
                    $frame = substr($frame, 0, $at) . self::value(2) . substr($frame, $at);
                    break;
            }
        }
        return $frame;
    }
}
