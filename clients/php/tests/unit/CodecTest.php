<?php
declare(strict_types=1);

namespace Onceq\Tests\Unit;

use Onceq\Exception\ProtocolException;
use Onceq\Protocol\Codec;
use Onceq\Protocol\Uint64;
use PHPUnit\Framework\TestCase;

final class CodecTest extends TestCase
{
    /** A lease token above PHP_INT_MAX comes back as the same uint64, not a string or a float. */
    public function testLeaseTokenAboveIntMaxIsEchoedExactly(): void
    {
        $wire = "\x81\xa5lease\xcf\xfe\xdc\xba\x98\x76\x54\x32\x10";
        $decoded = Codec::decode($wire);
        $this->assertSame('18364758544493064720', $decoded['lease']);
        $this->assertSame($wire, Codec::encode(['lease' => Uint64::of($decoded['lease'])]));
        $this->assertSame("\x81\xa5lease\xcf\xfe\xdc\xba\x98\x76\x54\x32\x10",
            Codec::encode(['lease' => Uint64::of('18364758544493064720')]));
        $this->assertSame("\x81\xa1x\xcf\xff\xff\xff\xff\xff\xff\xff\xff", Codec::encode(['x' => Uint64::of('18446744073709551615')]));
        $this->assertSame("\x81\xa1x\xcf\x00\x00\x00\x00\x00\x00\x00\x07", Codec::encode(['x' => Uint64::of(7)]));
    }

    public function testUint64RejectsWhatIsNotOne(): void
    {
        foreach (['18446744073709551616', '-1', '01', 'x', ''] as $bad) {
            try {
                new Uint64($bad);
                $this->fail("accepted \"$bad\"");
            } catch (\InvalidArgumentException) {
                $this->addToAssertionCount(1);
            }
        }
    }

    /** The payload is a map also when empty; msgpack_pack would send an empty array. */
    public function testEmptyPayloadIsAMap(): void
    {
        $this->assertSame("\x81\xa7payload\x80", Codec::encode(['payload' => (object)[]]));
        $this->assertSame("\x81\xa7payload\x80", Codec::encode(['payload' => []]));
        $this->assertSame([], Codec::decode("\x81\xa7payload\x80")['payload']);
    }

    public function testValuesRoundTripThroughPhpMsgpack(): void
    {
        $message = ['i' => -5_000_000_000, 'j' => -33, 'k' => 200, 'big' => PHP_INT_MAX, 'f' => 0.25, 't' => true,
                    'n' => null, 's' => str_repeat('é', 100), 'list' => [1, 'two', [3]], 'map' => ['a' => ['b' => 1]]];
        $this->assertSame($message, msgpack_unpack(Codec::encode($message)));
    }

    public function testObjectsAreRefused(): void
    {
        $this->expectException(\InvalidArgumentException::class);
        Codec::encode(['payload' => ['when' => new \DateTimeImmutable()]]);
    }

    public function testNestingPastTheBrokersLimitIsRefused(): void
    {
        $deep = 1;
        for ($i = 0; $i < 40; $i++) {
            $deep = ['d' => $deep];
        }
        $this->expectException(\InvalidArgumentException::class);
        Codec::encode(['payload' => $deep]);
    }

    public function testAFrameThatIsNotAMapIsAProtocolError(): void
    {
        $this->expectException(ProtocolException::class);
        Codec::decode("\x93\x01\x02\x03");
    }
}
