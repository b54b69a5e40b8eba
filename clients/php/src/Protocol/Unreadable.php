<?php
declare(strict_types=1);

namespace Onceq\Protocol;

/**
 * A frame from the broker that Codec::decode() refused: why, and its `req`
 * if that could still be read (a frame over the size limit), so that a
 * client can tell a refused answer to its request from a stray frame.
 */
final class Unreadable
{
    public function __construct(public readonly string $reason, public readonly ?int $req = null)
    {
    }
}
