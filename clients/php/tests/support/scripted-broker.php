<?php
declare(strict_types=1);

/*
 * A stand-in for the broker's front socket that answers from a script, for
 * the replies the real broker cannot be made to give on demand (one from
 * before `wait` in `dispatch`, silence, a wait refused after a dispatch).
 *
 *   php scripted-broker.php SCRIPT.json DIR
 *
 * SCRIPT.json is a list with one entry per request, in the order they come
 * (a worker's heartbeats are not requests: they take no entry): a reply map
 * (its `req` is the request's, if the request had one; `v` is added unless
 * the map sets it), or null for no answer. Two keys make what JSON cannot
 * say: "@raw", the whole frame in hex, sent as it is; "@pad", a number of
 * bytes added to the reply as a string field "pad" (a reply too large);
 * "@deep", a depth of maps nested in a field "deep".
 * It also serves as a broker's back socket for a Worker. It binds a ROUTER to a free loopback port, writes the endpoint to
 * DIR/endpoint once bound, and appends each request it gets to
 * DIR/requests.jsonl. Requests past the script get no answer. It runs until
 * it is signalled (ScriptedBroker stops it by PID).
 */

require __DIR__ . '/../../src/autoload.php';

use Onceq\Protocol\Codec;

[, $scriptFile, $dir] = $argv + [null, null, null];
if ($scriptFile === null || $dir === null) {
    fwrite(STDERR, "usage: scripted-broker.php SCRIPT.json DIR\n");
    exit(2);
}
$script = json_decode((string)file_get_contents($scriptFile), true, 32, JSON_THROW_ON_ERROR);

$socket = new ZMQSocket(new ZMQContext(1, false), ZMQ::SOCKET_ROUTER);
$socket->setSockOpt(ZMQ::SOCKOPT_LINGER, 1000);
$socket->bind('tcp://127.0.0.1:*');
file_put_contents("$dir/endpoint.tmp", $socket->getSockOpt(ZMQ::SOCKOPT_LAST_ENDPOINT));
rename("$dir/endpoint.tmp", "$dir/endpoint");

for ($n = 0; ;) {
    [$identity, $frame] = $socket->recvMulti();
    $request = Codec::decode($frame);
    file_put_contents("$dir/requests.jsonl", json_encode($request, JSON_INVALID_UTF8_SUBSTITUTE) . "\n", FILE_APPEND);
    if (($request['cmd'] ?? null) === 'heartbeat') {
        continue;
    }
    $reply = $script[$n++] ?? null;
    if ($reply === null) {
        continue;
    }
    if (isset($reply['@raw'])) {
        $socket->sendMulti([$identity, hex2bin($reply['@raw'])]);
        continue;
    }
    if (isset($reply['@pad'])) {
        $reply['pad'] = str_repeat('x', $reply['@pad']);
        unset($reply['@pad']);
    }
    $head = ['v' => Codec::VERSION] + (array_key_exists('req', $request) ? ['req' => $request['req']] : []);
    $deep = $reply['@deep'] ?? null;
    unset($reply['@deep']);
    $frame = Codec::map($reply + $head);
    if ($deep !== null) {
        // Past the depth Codec writes: appended by hand, one map in the next.
        $frame = chr(ord($frame[0]) + 1) . substr($frame, 1) . "\xa4deep" . str_repeat("\x81\xa1d", $deep) . "\x01";
    }
    $socket->sendMulti([$identity, $frame]);
}
