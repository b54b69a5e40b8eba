<?php
declare(strict_types=1);

namespace Onceq;

use Onceq\Exception\ConfigException;
use Onceq\Protocol\Codec;
use Onceq\Protocol\Unreadable;

/**
 * A worker's link to the broker through a keeper: a small PHP process
 * (bin/onceq-keeper.php) that holds the DEALER socket, forwards frames
 * between it and two pipes, and sends the worker's heartbeats itself.
 *
 * Why a process: PHP runs one thing at a time, and a handler blocked in one
 * C call (a slow query through PDO, an HTTP request) sends nothing, so a
 * worker that heartbeats from PHP goes silent and the broker gives its
 * lease to another worker while the first still runs. Signals cannot help:
 * PHP runs a handler only between opcodes, never inside a C call. The
 * keeper is not blocked by the handler, so the lease ends only as it
 * should: an ack, `retry_after`, or the worker's death (the keeper sees
 * the pipe close, sends `disconnect` and exits). Frames written to a pipe
 * survive the writer's SIGKILL, so an ack sent just before one (Laravel's
 * timeout) still arrives.
 *
 * Pipe frames are a 4-byte big-endian length and the msgpack bytes. The
 * first frame from the worker says where to connect and with which keys.
 */
final class KeeperLink implements Link
{
    /** A pipe frame's length prefix, and the largest frame a keeper forwards (the wire cap). */
    private const LENGTH_BYTES = 4;
    private const MAX_PIPE_FRAME_BYTES = Codec::MAX_WIRE_MSG_BYTES;

    /** @var resource|null */
    private $process;
    /** @var resource|null worker → keeper */
    private $toKeeper;
    /** @var resource|null keeper → worker */
    private $fromKeeper;
    private string $inbox = '';

    /**
     * Start a keeper connected to $endpoint with $curve's keys (null: plaintext).
     *
     * @param ?string $script the keeper script (default: bin/onceq-keeper.php beside src/)
     */
    public function __construct(public readonly string $endpoint, ?Curve $curve, ?string $script = null)
    {
        $script ??= dirname(__DIR__) . '/bin/onceq-keeper.php';
        if (!is_file($script)) {
            throw new ConfigException("onceq: the keeper script $script is missing");
        }
        $pipes = [];
        $this->process = proc_open([PHP_BINARY, '-d', 'memory_limit=32M', $script],
            [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => STDERR], $pipes);
        if (!is_resource($this->process)) {
            throw new ConfigException("onceq: could not start the keeper $script");
        }
        [$this->toKeeper, $this->fromKeeper] = [$pipes[0], $pipes[1]];
        $hello = ['endpoint' => $endpoint];
        if ($curve !== null) {
            $hello += ['public_key' => $curve->publicKey, 'secret_key' => $curve->secretKey,
                       'broker_key' => $curve->serverKey];
        }
        $this->writeFrame(Codec::encode($hello));
    }

    public function __destruct()
    {
        $this->close();
    }

    /** The keeper's process id (for a memory measurement), or null once closed. */
    public function keeperPid(): ?int
    {
        return is_resource($this->process) ? (proc_get_status($this->process)['pid'] ?? null) : null;
    }

    public function send(array $message): bool
    {
        return $this->writeFrame(Codec::encode(['v' => Codec::VERSION] + $message));
    }

    public function receive(int $timeoutMs): array|Unreadable|null
    {
        $frame = $this->readFrame($timeoutMs);
        if ($frame === null) {
            return null;
        }
        try {
            return Codec::decode($frame);
        } catch (\Onceq\Exception\ProtocolException $e) {
            return new Unreadable($e->getMessage(), Codec::peekReq($frame));
        }
    }

    /**
     * Closing the pipe is the keeper's cue: it flushes what it forwarded
     * (up to 2 s), sends `disconnect` and exits. $ms is how long to wait
     * for it to be gone.
     */
    public function flush(int $ms): void
    {
        if (!is_resource($this->process)) {
            return;
        }
        $this->closePipes();
        $end = hrtime(true) + max(0, $ms) * 1_000_000;
        while (($status = proc_get_status($this->process)) && $status['running'] && hrtime(true) < $end) {
            usleep(10_000);
        }
        $this->process = null; // not proc_close(): it would wait for a keeper still flushing
    }

    public function isOpen(): bool
    {
        return is_resource($this->process) && is_resource($this->fromKeeper);
    }

    public function close(): void
    {
        if (!is_resource($this->process)) {
            return;
        }
        $this->closePipes();
        $this->process = null;
    }

    private function closePipes(): void
    {
        foreach ([$this->toKeeper, $this->fromKeeper] as $pipe) {
            if (is_resource($pipe)) {
                fclose($pipe);
            }
        }
        $this->toKeeper = $this->fromKeeper = null;
    }

    private function writeFrame(string $frame): bool
    {
        if (!is_resource($this->toKeeper)) {
            return false;
        }
        $data = pack('N', strlen($frame)) . $frame;
        while ($data !== '') {
            $n = @fwrite($this->toKeeper, $data);
            if ($n === false || $n === 0) {
                return false; // the keeper is gone
            }
            $data = substr($data, $n);
        }
        return true;
    }

    private function readFrame(int $timeoutMs): ?string
    {
        $deadline = hrtime(true) + max(0, $timeoutMs) * 1_000_000;
        while (true) {
            if (strlen($this->inbox) >= self::LENGTH_BYTES) {
                $length = unpack('N', $this->inbox)[1];
                if ($length > self::MAX_PIPE_FRAME_BYTES) {
                    $this->close(); // the keeper is broken; the worker's silence handling reconnects
                    return null;
                }
                if (strlen($this->inbox) >= self::LENGTH_BYTES + $length) {
                    $frame = substr($this->inbox, self::LENGTH_BYTES, $length);
                    $this->inbox = substr($this->inbox, self::LENGTH_BYTES + $length);
                    return $frame;
                }
            }
            if (!is_resource($this->fromKeeper)) {
                return null;
            }
            $leftUs = intdiv($deadline - hrtime(true), 1000);
            if ($leftUs < 0) {
                return null;
            }
            $read = [$this->fromKeeper];
            $write = $except = null;
            $n = @stream_select($read, $write, $except, intdiv($leftUs, 1_000_000), $leftUs % 1_000_000);
            if ($n === false) {
                return null; // EINTR
            }
            if ($n === 0) {
                if ($leftUs === 0) {
                    return null;
                }
                continue;
            }
            $chunk = fread($this->fromKeeper, 65536);
            if ($chunk === false || $chunk === '') {
                if (feof($this->fromKeeper)) {
                    $this->close(); // the keeper died: silence, and the worker reconnects
                    return null;
                }
                continue;
            }
            $this->inbox .= $chunk;
        }
    }
}
