<?php
declare(strict_types=1);

namespace Onceq;

use Onceq\Protocol\Codec;

/**
 * One DEALER socket to the broker: CURVE keys set before connect, linger 0
 * (a closed socket drops what it had not sent: the Lazy Pirate resends on a
 * fresh one). A new Connection is a new identity to the broker.
 */
final class Connection
{
    private static ?\ZMQContext $context = null;

    private \ZMQSocket $socket;

    public function __construct(public readonly string $endpoint, ?Curve $curve)
    {
        self::$context ??= new \ZMQContext(1, false);
        $this->socket = new \ZMQSocket(self::$context, \ZMQ::SOCKET_DEALER);
        $this->socket->setSockOpt(\ZMQ::SOCKOPT_LINGER, 0);
        $curve?->apply($this->socket);
        $this->socket->connect($endpoint);
    }

    /** Queue one message; false if libzmq would block (its buffer is full). */
    public function send(array $message): bool
    {
        $frame = Codec::encode(['v' => Codec::VERSION] + $message);
        try {
            return $this->socket->send($frame, \ZMQ::MODE_DONTWAIT) !== false;
        } catch (\ZMQSocketException $e) {
            if ($e->getCode() === (defined('SOCKET_EINTR') ? SOCKET_EINTR : 4)) {
                return false;
            }
            throw $e;
        }
    }

    /**
     * The next message, waiting at most $timeoutMs (0: only what is there);
     * null when none came. A frame that is not a map is dropped (the caller
     * cannot answer it) and counts as nothing.
     */
    public function receive(int $timeoutMs): ?array
    {
        $poll = new \ZMQPoll();
        $poll->add($this->socket, \ZMQ::POLL_IN);
        $readable = [];
        $writable = [];
        try {
            $events = $poll->poll($readable, $writable, max(0, $timeoutMs));
        } catch (\ZMQPollException $e) {
            return null; // EINTR: a signal (SIGTERM, the heartbeat alarm); the caller loops
        }
        if ($events === 0) {
            return null;
        }
        $parts = $this->socket->recvMulti(\ZMQ::MODE_DONTWAIT);
        if ($parts === false || count($parts) !== 1) {
            return null;
        }
        try {
            return Codec::decode($parts[0]);
        } catch (\Onceq\Exception\ProtocolException) {
            return null;
        }
    }

    /** Give what is queued up to $ms to leave (before an exit), then close. */
    public function flush(int $ms): void
    {
        $this->socket->setSockOpt(\ZMQ::SOCKOPT_LINGER, $ms);
        $this->close();
    }

    public function close(): void
    {
        try {
            $this->socket->disconnect($this->endpoint);
        } catch (\ZMQSocketException) {
        }
    }
}
