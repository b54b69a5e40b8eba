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
 *
 * Every Connection shares one ZMQContext, whose destructor (zmq_ctx_term)
 * blocks while any socket of it is open. At the end of a request PHP frees
 * leftover objects in handle order, not in the order they depend on each
 * other, so a context held in a long-lived object graph (a framework's
 * container) could be freed before its socket, and the process would hang
 * at exit for ever. So close() really closes the socket, and a shutdown
 * function closes every Connection still open before PHP frees anything.
 */
final class Connection implements Link
{
    private static ?\ZMQContext $context = null;
    /** @var array<int, \WeakReference<self>> the open connections, for the shutdown hook */
    private static array $open = [];
    private static bool $hooked = false;

    private ?\ZMQSocket $socket;
    /** @var resource|null the socket's ZMQ_FD as a stream */
    private $fd = null;

    public function __construct(public readonly string $endpoint, ?Curve $curve)
    {
        self::$context ??= new \ZMQContext(1, false);
        if (!self::$hooked) {
            self::$hooked = true;
            register_shutdown_function([self::class, 'closeAll']);
        }
        $this->socket = new \ZMQSocket(self::$context, \ZMQ::SOCKET_DEALER);
        $this->socket->setSockOpt(\ZMQ::SOCKOPT_LINGER, 0);
        $this->socket->setSockOpt(\ZMQ::SOCKOPT_MAXMSGSIZE, Codec::MAX_WIRE_MSG_BYTES);
        $curve?->apply($this->socket);
        $this->socket->connect($endpoint);
        self::$open[spl_object_id($this)] = \WeakReference::create($this);
    }

    public function __destruct()
    {
        $this->close();
    }

    /**
     * Close every Connection still open (a shutdown function, registered
     * with the first one): what they had queued leaves within its linger,
     * and the shared context can then end.
     */
    public static function closeAll(): void
    {
        foreach (self::$open as $ref) {
            $ref->get()?->close();
        }
        self::$open = [];
    }

    /** Queue one message; false if libzmq would block (its buffer is full) or the connection is closed. */
    public function send(array $message): bool
    {
        return $this->sendFrame(Codec::encode(['v' => Codec::VERSION] + $message));
    }

    /** Queue one frame as it is (already encoded); false as for send(). */
    public function sendFrame(string $frame): bool
    {
        if ($this->socket === null) {
            return false;
        }
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
        $frame = $this->receiveFrame($timeoutMs);
        if ($frame === null) {
            return null;
        }
        try {
            return Codec::decode($frame);
        } catch (ProtocolException $e) {
            return new Unreadable($e->getMessage(), Codec::peekReq($frame));
        }
    }

    /**
     * The next frame as it came, undecoded (a relay's view: a lease token
     * above PHP_INT_MAX stays exact), waiting as receive() does; null when
     * none came, on a signal, or once closed.
     */
    public function receiveFrame(int $timeoutMs): ?string
    {
        if ($this->socket === null) {
            return null;
        }
        $deadline = hrtime(true) + max(0, $timeoutMs) * 1_000_000;
        $this->fd ??= $this->socket->getSockOpt(\ZMQ::SOCKOPT_FD);
        while (true) {
            // ZMQ_FD is edge-triggered: ask ZMQ_EVENTS before every wait.
            while ($this->socket->getSockOpt(\ZMQ::SOCKOPT_EVENTS) & \ZMQ::POLL_IN) {
                $parts = $this->socket->recvMulti(\ZMQ::MODE_DONTWAIT);
                if ($parts === false || count($parts) !== 1) {
                    continue;
                }
                return $parts[0];
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

    /**
     * The socket's ZMQ_FD as a stream, for a caller that waits on it beside
     * other streams (stream_select). It is edge-triggered: call
     * receiveFrame(0) until null before every wait.
     */
    public function stream(): mixed
    {
        if ($this->socket === null) {
            return null;
        }
        return $this->fd ??= $this->socket->getSockOpt(\ZMQ::SOCKOPT_FD);
    }

    /** Give what is queued up to $ms to leave (before an exit), then close. */
    public function flush(int $ms): void
    {
        $this->socket?->setSockOpt(\ZMQ::SOCKOPT_LINGER, $ms);
        $this->close();
    }

    public function isOpen(): bool
    {
        return $this->socket !== null;
    }

    /**
     * Close the socket now (what it had not sent goes, unless flush() gave
     * it a linger); later sends return false and receives null. Idempotent.
     */
    public function close(): void
    {
        if ($this->socket === null) {
            return;
        }
        try {
            $this->socket->disconnect($this->endpoint);
        } catch (\ZMQSocketException) {
        }
        // Dropping the last reference is zmq_close(): the context no longer waits for it.
        $this->socket = null;
        $this->fd = null;
        unset(self::$open[spl_object_id($this)]);
    }
}
