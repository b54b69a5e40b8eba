<?php
declare(strict_types=1);

namespace Onceq\Protocol;

/**
 * An unsigned 64-bit integer as its decimal string. php-msgpack unpacks a
 * uint64 above PHP_INT_MAX (a lease token, half of them) as such a string;
 * wrapped in this class it is packed back as a msgpack uint64, so a token
 * is echoed exactly.
 */
final class Uint64
{
    public function __construct(public readonly string $decimal)
    {
        if (!preg_match('/^(0|[1-9][0-9]{0,19})$/', $decimal) ||
            (strlen($decimal) === 20 && strcmp($decimal, '18446744073709551615') > 0)) {
            throw new \InvalidArgumentException("not an unsigned 64-bit integer: \"$decimal\"");
        }
    }

    /** From what php-msgpack unpacked: an int >= 0 or a decimal string. */
    public static function of(int|string $value): self
    {
        if (is_int($value) && $value < 0) {
            throw new \InvalidArgumentException("not an unsigned 64-bit integer: $value");
        }
        return new self((string)$value);
    }

    /** The 8 bytes, big-endian. */
    public function bytes(): string
    {
        $digits = $this->decimal;
        $out = '';
        for ($i = 0; $i < 8; $i++) {
            // Long division of the decimal string by 256.
            $rest = 0;
            $quotient = '';
            for ($j = 0, $n = strlen($digits); $j < $n; $j++) {
                $rest = $rest * 10 + (ord($digits[$j]) - 48);
                $q = intdiv($rest, 256);
                $rest %= 256;
                if ($quotient !== '' || $q > 0) {
                    $quotient .= (string)$q;
                }
            }
            $out = chr($rest) . $out;
            $digits = $quotient === '' ? '0' : $quotient;
        }
        return $out;
    }

    public function __toString(): string
    {
        return $this->decimal;
    }
}
