<?php
declare(strict_types=1);

/*
 * A stand-in for the broker's front socket that answers from a script, for
 * the replies the real broker cannot be made to give on demand (one from
 * before `wait` in `dispatch`, silence, a wait refused after a dispatch).
 *
 *   php scripted-broker.php SCRIPT.json DIR
 *
 * SCRIPT.json is a list with one entry per request, in the order they come:
 * a reply map (its `req` is the request's; `v` is added), or null for no
 * answer. It binds a ROUTER to a free loopback port, writes the endpoint to
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

for ($n = 0; ; $n++) {
    [$identity, $frame] = $socket->recvMulti();
    $request = Codec::decode($frame);
    file_put_contents("$dir/requests.jsonl", json_encode($request) . "\n", FILE_APPEND);
    $reply = $script[$n] ?? null;
    if ($reply !== null) {
        $socket->sendMulti([$identity, Codec::encode(['v' => Codec::VERSION, 'req' => $request['req']] + $reply)]);
    }
}
