<?php
declare(strict_types=1);

namespace Onceq\Protocol;

use Onceq\Exception\ProtocolException;

/**
 * One frame, one msgpack map (docs/protocol.md §1).
 *
 * Decoding is php-msgpack's, held to what the C decoder (common/src/proto.c)
 * accepts, because a frame comes from the network: at most MAX_FRAME_BYTES,
 * exactly one map with nothing after it, nested at most MAX_DEPTH deep.
 * php-msgpack is used in its plain mode: in its default mode a map with a
 * nil key names a PHP class to instantiate, which a peer must never choose.
 * Anything else (a warning php-msgpack raises on a map key that is itself
 * a map, say) is a ProtocolException too, so a caller sees a value or the
 * library's own exception, never a PHP warning.
 *
 * Encoding is done here, because the protocol needs two things
 * msgpack_pack() cannot say: an empty map (a PHP [] packs as an empty
 * array; `payload` must be a map) and a uint64 above PHP_INT_MAX (a lease
 * token, see Uint64). Lists (arrays with keys 0..n-1) pack as arrays,
 * other arrays as maps; a stdClass or an ArrayObject always as a map.
 */
final class Codec
{
    public const VERSION = 1;

    /** Max nesting the broker accepts (§2). */
    public const MAX_DEPTH = 32;

    /** One message body at most, OQ_MAX_FRAME_BYTES of onceq/limits.h (§2). */
    public const MAX_FRAME_BYTES = 1024 * 1024;

    /**
     * Bytes libzmq reads of one message at most, OQ_MAX_WIRE_MSG_BYTES: a
     * larger one is never buffered (libzmq drops the connection instead),
     * one up to this size is read and refused as larger than MAX_FRAME_BYTES.
     */
    public const MAX_WIRE_MSG_BYTES = 4 * self::MAX_FRAME_BYTES;

    public static function encode(array $message): string
    {
        return self::map($message, 1);
    }

    /** The map of one frame, or a ProtocolException saying what is wrong with it. */
    public static function decode(string $frame): array
    {
        $size = strlen($frame);
        if ($size > self::MAX_FRAME_BYTES) {
            throw new ProtocolException("onceq: a frame of $size bytes, the limit is " . self::MAX_FRAME_BYTES);
        }
        if ($frame === '' || !self::looksLikeMap(ord($frame[0]))) {
            throw new ProtocolException("onceq: a frame that is not a msgpack map ($size bytes)");
        }
        $value = self::unpack($frame);
        if (!is_array($value)) {
            throw new ProtocolException("onceq: a frame that is not one msgpack map ($size bytes)");
        }
        return self::plain($value, 1);
    }

    /**
     * The `req` of a frame that decode() refused, if it can be read (a
     * frame larger than MAX_FRAME_BYTES but well-formed), so that the
     * refusal can be matched to its request; null otherwise.
     */
    public static function peekReq(string $frame): ?int
    {
        if ($frame === '' || strlen($frame) > self::MAX_WIRE_MSG_BYTES || !self::looksLikeMap(ord($frame[0]))) {
            return null;
        }
        try {
            $value = self::unpack($frame);
        } catch (ProtocolException) {
            return null;
        }
        $req = is_array($value) ? ($value['req'] ?? null) : null;
        return is_int($req) && $req >= 0 ? $req : null;
    }

    /** php-msgpack's plain-mode unpacking of exactly one value, or null; its warnings as a ProtocolException. */
    private static function unpack(string $frame): mixed
    {
        $unpacker = new \MessagePackUnpacker(false);
        $offset = 0;
        // Noted, not thrown: an exception thrown from inside the extension's
        // call is lost (php-msgpack 2.2 carries on and returns its result).
        $warning = null;
        set_error_handler(static function (int $errno, string $message) use (&$warning): bool {
            $warning ??= $message;
            return true;
        });
        try {
            $done = $unpacker->execute($frame, $offset);
        } finally {
            restore_error_handler();
        }
        if ($warning !== null) {
            throw new ProtocolException("onceq: a frame that is not well-formed msgpack ($warning)");
        }
        if ($done !== true || $offset !== strlen($frame)) {
            return null;
        }
        return $unpacker->data();
    }

    /**
     * php-msgpack unpacks an empty map as a stdClass: make every map an
     * array, and refuse nesting deeper than the broker's.
     */
    private static function plain(mixed $v, int $depth): mixed
    {
        if ($depth > self::MAX_DEPTH) {
            throw new ProtocolException('onceq: a frame nested deeper than ' . self::MAX_DEPTH . ' levels');
        }
        if ($v instanceof \stdClass) {
            $v = get_object_vars($v);
        } elseif (is_object($v)) {
            throw new ProtocolException('onceq: a frame holding a ' . get_debug_type($v));
        }
        if (is_array($v)) {
            foreach ($v as $k => $item) {
                if (is_array($item) || is_object($item)) {
                    $v[$k] = self::plain($item, $depth + 1);
                }
            }
        }
        return $v;
    }

    private static function looksLikeMap(int $b): bool
    {
        return ($b & 0xf0) === 0x80 || $b === 0xde || $b === 0xdf;
    }

    /** A map, whatever the keys: for payloads, where [] must be {}. */
    public static function map(array|object $value, int $depth = 1): string
    {
        if ($depth > self::MAX_DEPTH) {
            throw new \InvalidArgumentException('onceq: nested deeper than ' . self::MAX_DEPTH . ' levels');
        }
        $entries = is_array($value) ? $value : get_object_vars($value);
        if ($value instanceof \ArrayObject) {
            $entries = $value->getArrayCopy();
        }
        $n = count($entries);
        $out = $n < 16 ? chr(0x80 | $n) : ($n < 0x10000 ? "\xde" . pack('n', $n) : "\xdf" . pack('N', $n));
        foreach ($entries as $k => $v) {
            $out .= self::str((string)$k) . self::value($v, $depth + 1);
        }
        return $out;
    }

    private static function value(mixed $v, int $depth): string
    {
        if ($depth > self::MAX_DEPTH) {
            throw new \InvalidArgumentException('onceq: nested deeper than ' . self::MAX_DEPTH . ' levels');
        }
        if ($v === null) {
            return "\xc0";
        }
        if (is_bool($v)) {
            return $v ? "\xc3" : "\xc2";
        }
        if (is_int($v)) {
            return self::int($v);
        }
        if (is_float($v)) {
            return "\xcb" . pack('E', $v);
        }
        if (is_string($v)) {
            return self::str($v);
        }
        if ($v instanceof Uint64) {
            return "\xcf" . $v->bytes();
        }
        if ($v instanceof \BackedEnum) {
            return self::value($v->value, $depth);
        }
        if (is_array($v) && array_is_list($v) && $v !== []) {
            $n = count($v);
            $out = $n < 16 ? chr(0x90 | $n) : ($n < 0x10000 ? "\xdc" . pack('n', $n) : "\xdd" . pack('N', $n));
            foreach ($v as $item) {
                $out .= self::value($item, $depth + 1);
            }
            return $out;
        }
        if (is_array($v)) {
            // [] is ambiguous; the protocol's empty containers are maps
            // (payload), and an empty list is never valid where a list goes.
            return self::map($v, $depth);
        }
        if ($v instanceof \stdClass || $v instanceof \ArrayObject || $v instanceof \JsonSerializable) {
            return $v instanceof \JsonSerializable ? self::value($v->jsonSerialize(), $depth) : self::map($v, $depth);
        }
        throw new \InvalidArgumentException('onceq: cannot send a value of type ' . get_debug_type($v) .
            ' (a payload holds values, not objects)');
    }

    private static function int(int $v): string
    {
        if ($v >= 0) {
            if ($v < 0x80) {
                return chr($v);
            }
            if ($v <= 0xff) {
                return "\xcc" . chr($v);
            }
            if ($v <= 0xffff) {
                return "\xcd" . pack('n', $v);
            }
            if ($v <= 0xffffffff) {
                return "\xce" . pack('N', $v);
            }
            return "\xcf" . pack('J', $v);
        }
        if ($v >= -32) {
            return chr($v & 0xff);
        }
        if ($v >= -0x80) {
            return "\xd0" . pack('c', $v);
        }
        if ($v >= -0x8000) {
            return "\xd1" . strrev(pack('s', $v));
        }
        if ($v >= -0x80000000) {
            return "\xd2" . pack('N', $v & 0xffffffff);
        }
        return "\xd3" . pack('J', $v);
    }

    private static function str(string $s): string
    {
        $n = strlen($s);
        if ($n < 32) {
            return chr(0xa0 | $n) . $s;
        }
        if ($n <= 0xff) {
            return "\xd9" . chr($n) . $s;
        }
        if ($n <= 0xffff) {
            return "\xda" . pack('n', $n) . $s;
        }
        return "\xdb" . pack('N', $n) . $s;
    }
}
