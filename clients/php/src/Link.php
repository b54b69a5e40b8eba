<?php
declare(strict_types=1);

namespace Onceq;

use Onceq\Protocol\Unreadable;

/**
 * A worker's way to the broker's back socket: a Connection of its own, or
 * a KeeperLink, whose keeper process holds the connection and heartbeats
 * while PHP is busy. The worker speaks the same messages through either.
 */
interface Link
{
    /** Queue one message; false if it could not be queued (the link is closed or full). */
    public function send(array $message): bool;

    /** The next message, waiting at most $timeoutMs; null when none came (or a signal cut the wait short). */
    public function receive(int $timeoutMs): array|Unreadable|null;

    /** Give what is queued up to $ms to reach the broker, then close. */
    public function flush(int $ms): void;

    /** Close now; idempotent. */
    public function close(): void;

    /** False once closed, or once the other end is gone (a keeper that died). */
    public function isOpen(): bool;
}
