<?php
// onceq-keeper: holds a worker's connection to the broker while PHP is busy
// (Onceq\KeeperLink starts it; it is not run by hand).
//
// It reads length-prefixed msgpack frames on stdin and sends them to the
// broker's back socket as they are, and writes what the broker sends to
// stdout the same way. It sends a heartbeat every interval the broker's
// welcome names, whatever the worker is doing, so a handler blocked inside
// one long C call keeps its lease. The broker's heartbeats are passed on
// only while the pipe has room: a worker that is busy for an hour does not
// come back to an hour of them, and never to a keeper blocked on a full
// pipe. Other frames are kept until the pipe takes them, at most
// MAX_BUFFERED_BYTES (beyond: the keeper exits, the broker sees the worker
// go, and nothing is lost: its leases are given back).
//
// It ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT: a stop sent to the whole
// process group (systemd's default KillMode, Ctrl-C) is for the worker,
// which finishes its job and then closes the pipe. End of stdin (the worker
// exited, or was SIGKILLed) is the keeper's stop: it sends `disconnect`
// (the broker gives back the worker's leases at once), lets what it queued
// leave for up to FLUSH_MS, and exits.
declare(strict_types=1);

require __DIR__ . '/../src/autoload.php';

use Onceq\Connection;
use Onceq\Curve;
use Onceq\Protocol\Codec;

const LENGTH_BYTES = 4;
const MAX_FRAME_BYTES = Codec::MAX_WIRE_MSG_BYTES;
const MAX_BUFFERED_BYTES = 16 * 1024 * 1024;
const DEFAULT_HEARTBEAT_MS = 1000;
const FLUSH_MS = 2000;
const READ_CHUNK_BYTES = 65536;

foreach ([SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE] as $signal) {
    pcntl_signal($signal, SIG_IGN);
}

function say(string $line): void
{
    fwrite(STDERR, "onceq-keeper: $line\n");
}

/** The next whole frame from $buffer, or null while it holds less. */
function take_frame(string &$buffer): ?string
{
    if (strlen($buffer) < LENGTH_BYTES) {
        return null;
    }
    $length = unpack('N', $buffer)[1];
    if ($length > MAX_FRAME_BYTES) {
        say("a frame of $length bytes from the worker, the limit is " . MAX_FRAME_BYTES . '; exiting');
        exit(1);
    }
    if (strlen($buffer) < LENGTH_BYTES + $length) {
        return null;
    }
    $frame = substr($buffer, LENGTH_BYTES, $length);
    $buffer = substr($buffer, LENGTH_BYTES + $length);
    return $frame;
}

$stdin = STDIN;
$stdout = STDOUT;
stream_set_blocking($stdout, false);

// The hello: where to connect, with which keys.
$in = '';
$hello = null;
while ($hello === null) {
    $chunk = fread($stdin, READ_CHUNK_BYTES);
    if ($chunk === false || $chunk === '') {
        exit(0); // the worker went before saying where
    }
    $in .= $chunk;
    $frame = take_frame($in);
    if ($frame !== null) {
        $hello = Codec::decode($frame);
    }
}
stream_set_blocking($stdin, false);
$curve = isset($hello['broker_key']) ? Curve::fromOptions(array_intersect_key($hello,
    ['public_key' => 1, 'secret_key' => 1, 'broker_key' => 1])) : null;
$connection = new Connection((string)$hello['endpoint'], $curve);

$heartbeatMs = DEFAULT_HEARTBEAT_MS;
$out = '';
$lastSent = microtime(true);
$heartbeatFrame = Codec::encode(['v' => Codec::VERSION, 'cmd' => 'heartbeat']);
$disconnectFrame = Codec::encode(['v' => Codec::VERSION, 'cmd' => 'disconnect']);

while (true) {
    // From the broker: everything there is (ZMQ_FD is edge-triggered).
    while (($frame = $connection->receiveFrame(0)) !== null) {
        $message = null;
        try {
            $message = Codec::decode($frame);
        } catch (\Throwable) {
            // The worker refuses it with its reason; pass it on.
        }
        $cmd = is_array($message) ? ($message['cmd'] ?? null) : null;
        if ($cmd === 'welcome' && is_int($message['heartbeat_ms'] ?? null) && $message['heartbeat_ms'] >= 10) {
            $heartbeatMs = $message['heartbeat_ms'];
        }
        if ($cmd === 'heartbeat' && $out !== '') {
            continue; // the worker is busy and its pipe full: it needs no stale heartbeats
        }
        $out .= pack('N', strlen($frame)) . $frame;
        if (strlen($out) > MAX_BUFFERED_BYTES) {
            say('the worker has not read ' . strlen($out) . ' bytes; exiting');
            exit(1);
        }
    }
    if ($out !== '') {
        $n = @fwrite($stdout, $out);
        if ($n === false) {
            break; // the worker closed its end
        }
        $out = substr($out, $n);
    }

    // From the worker.
    // From the worker (what came with the hello, the first time round).
    $chunk = fread($stdin, READ_CHUNK_BYTES);
    if ($chunk === '' && feof($stdin)) {
        break;
    }
    if (is_string($chunk)) {
        $in .= $chunk;
    }
    while (($frame = take_frame($in)) !== null) {
        $connection->sendFrame($frame);
        $lastSent = microtime(true);
    }

    $now = microtime(true);
    if ($now - $lastSent >= $heartbeatMs / 1000) {
        $connection->sendFrame($heartbeatFrame);
        $lastSent = $now;
    }
    $waitUs = (int)max(0, ($lastSent + $heartbeatMs / 1000 - microtime(true)) * 1_000_000);
    $read = [$stdin, $connection->stream()];
    $write = $out !== '' ? [$stdout] : null;
    $except = null;
    @stream_select($read, $write, $except, intdiv($waitUs, 1_000_000), $waitUs % 1_000_000);
}

$connection->sendFrame($disconnectFrame);
$connection->flush(FLUSH_MS);
exit(0);
