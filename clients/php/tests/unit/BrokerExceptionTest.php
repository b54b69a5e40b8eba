<?php
declare(strict_types=1);

namespace Onceq\Tests\Unit;

use Onceq\Exception\BrokerException;
use Onceq\Exception\FullException;
use PHPUnit\Framework\TestCase;

final class BrokerExceptionTest extends TestCase
{
    /** Every code of common/src/proto.c s_err_names has its class (the C list is read, not copied). */
    public function testEveryProtocolErrorCodeHasItsClass(): void
    {
        $proto = file_get_contents(__DIR__ . '/../../../../common/src/proto.c');
        $this->assertNotFalse($proto);
        $this->assertSame(1, preg_match('/s_err_names\[[^\]]*\]\s*=\s*\{(.*?)\};/s', $proto, $m));
        preg_match_all('/\] = "([a-z_]+)"/', $m[1], $codes);
        $codes = array_values(array_diff($codes[1], ['none']));
        $this->assertNotEmpty($codes);
        $this->assertEqualsCanonicalizing($codes, array_keys(BrokerException::CLASSES));
        foreach ($codes as $code) {
            $e = BrokerException::fromReply(['cmd' => 'error', 'code' => $code, 'message' => "m $code"]);
            $this->assertSame(BrokerException::CLASSES[$code], get_class($e));
            $this->assertInstanceOf(BrokerException::class, $e);
            $this->assertSame($code, $e->getErrorCode());
            $this->assertSame("m $code", $e->getBrokerMessage());
            $this->assertStringContainsString($code, $e->getMessage());
        }
    }

    public function testAnUnknownCodeIsTheBaseClass(): void
    {
        $e = BrokerException::fromReply(['cmd' => 'error', 'code' => 'from_the_future', 'message' => 'x']);
        $this->assertSame(BrokerException::class, get_class($e));
        $this->assertSame('from_the_future', $e->getErrorCode());
        $this->assertInstanceOf(FullException::class, BrokerException::fromReply(['code' => 'full', 'message' => '']));
    }
}
