<?php
declare(strict_types=1);

namespace Onceq\Laravel;

/**
 * Laravel's names as onceq takes them (docs/protocol.md §2). Laravel allows
 * any string as a queue name or a lock key; onceq allows 1-64 bytes of
 * [A-Za-z0-9_.:-] for a queue and 1-128 printable bytes without spaces for
 * a key. A name that fits is sent as it is. One that does not is mapped,
 * never refused: the same name always maps to the same onceq name, and two
 * names map to one only if their SHA-256 prefixes collide.
 */
final class Names
{
    public const QUEUE_MAX_BYTES = 64;
    public const KEY_MAX_BYTES = 128;
    private const QUEUE_PATTERN = '/^[A-Za-z0-9_.:\-]{1,64}$/';
    private const KEY_PATTERN = '/^[\x21-\x7e]{1,128}$/';
    /** Hex digits of the hash in a mapped queue name: 64 bits, a collision needs ~4e9 names. */
    private const QUEUE_HASH_HEX = 16;
    /** Bytes of a mapped queue name kept readable: 64 - 1 ('~' separator) - the hash. */
    private const QUEUE_KEEP_BYTES = self::QUEUE_MAX_BYTES - 1 - self::QUEUE_HASH_HEX;

    /**
     * The onceq queue of a Laravel queue name: itself if it fits; otherwise
     * its allowed characters (others as '_', at most 47 bytes), '.', and 16
     * hex digits of its SHA-256: "emails/high" is "emails_high.3f1c…".
     */
    public static function queue(string $name): string
    {
        if (preg_match(self::QUEUE_PATTERN, $name)) {
            return $name;
        }
        $readable = substr((string)preg_replace('/[^A-Za-z0-9_.:\-]/', '_', $name), 0, self::QUEUE_KEEP_BYTES);
        return $readable . '.' . substr(hash('sha256', $name), 0, self::QUEUE_HASH_HEX);
    }

    /**
     * A unique or overlap key: itself if it is 1-128 printable bytes without
     * spaces, else "laravel-h:" and its SHA-256 in hex (74 bytes).
     */
    public static function key(string $key): string
    {
        if (preg_match(self::KEY_PATTERN, $key)) {
            return $key;
        }
        return 'laravel-h:' . hash('sha256', $key);
    }
}
