<?php
declare(strict_types=1);

namespace Onceq;

use Onceq\Exception\ProtocolException;
use Onceq\Protocol\Codec;
use Onceq\Protocol\Unreadable;

/**
 * One DEALER socket to the broker: CURVE keys set before connect, linger 0
 * (a closed socket drops what it had not sent: the Lazy Pirate resends on a
 * fresh one), and libzmq's message size capped at Codec::MAX_WIRE_MSG_BYTES,
 * so a peer cannot make PHP allocate an unbounded frame (libzmq drops the
 * connection instead, as a protocol error, and does not reconnect it: the
 * caller's handling of silence opens a fresh Connection). A new Connection
 * is a new identity to the broker.
 */
final class Connection
{
    private static ?\ZMQContext $context = null;

    private \ZMQSocket $socket;
    /** @var resource|null the socket's ZMQ_FD as a stream */
    private $fd = null;

    public function __construct(public readonly string $endpoint, ?Curve $curve)
    {
        self::$context ??= new \ZMQContext(1, false);
        $this->socket = new \ZMQSocket(self::$context, \ZMQ::SOCKET_DEALER);
        $this->socket->setSockOpt(\ZMQ::SOCKOPT_LINGER, 0);
        $this->socket->setSockOpt(\ZMQ::SOCKOPT_MAXMSGSIZE, Codec::MAX_WIRE_MSG_BYTES);
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
     * null when none came, or when a signal interrupted the wait (the
     * caller loops, and sees a SIGTERM's flag). A frame Codec refuses comes
     * as an Unreadable saying why; a message of several frames (the broker
     * sends one) is dropped.
     *
     * It waits in stream_select() on the socket's ZMQ_FD, not in
     * ZMQPoll: a signal that interrupts zmq_poll() never reaches its
     * pcntl handler (php-zmq 1.1.3), so SIGTERM would be lost.
     */
    public function receive(int $timeoutMs): array|Unreadable|null
    {
        $deadline = hrtime(true) + max(0, $timeoutMs) * 1_000_000;
        $this->fd ??= $this->socket->getSockOpt(\ZMQ::SOCKOPT_FD);
        while (true) {
            // ZMQ_FD is edge-triggered: ask ZMQ_EVENTS before every wait.
            while ($this->socket->getSockOpt(\ZMQ::SOCKOPT_EVENTS) & \ZMQ::POLL_IN) {
                $parts = $this->socket->recvMulti(\ZMQ::MODE_DONTWAIT);
                if ($parts === false || count($parts) !== 1) {
                    continue;
                }
                try {
                    return Codec::decode($parts[0]);
                } catch (ProtocolException $e) {
                    return new Unreadable($e->getMessage(), Codec::peekReq($parts[0]));
                }
            }
            $leftUs = intdiv($deadline - hrtime(true), 1000);
            if ($leftUs <= 0) {
                return null;
            }
            $read = [$this->fd];
            $write = null;
            $except = null;
            if (@stream_select($read, $write, $except, intdiv($leftUs, 1_000_000), $leftUs % 1_000_000) === false) {
                return null; // EINTR
            }
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
