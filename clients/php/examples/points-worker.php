#!/usr/bin/env php
<?php
// A PHP worker for grant_points, beside (or instead of) onceq-worker:
//
//   php points-worker.php --broker tcp://127.0.0.1:7751 --database "host=/var/run/postgresql dbname=onceq" \
//       --key ~/.onceq/php.key_secret --broker-key /etc/onceq/keys/broker.key [--name N] [--queue a,b] [--keeper]
//
// Every flag has an environment variable: ONCEQ_WORKER_BROKER, ONCEQ_DATABASE_URL,
// ONCEQ_WORKER_KEY (or ONCEQ_KEY), ONCEQ_BROKER_KEY, ONCEQ_WORKER_NAME, ONCEQ_QUEUE,
// ONCEQ_KEEPER=1. --keeper holds the connection in a keeper process, which
// heartbeats while a grant blocks in one long query (Onceq\KeeperLink).
// --database takes a libpq conninfo ("host=… port=… dbname=… user=…", what
// `deploy/pg.sh url` prints) or a postgresql:// URI. SIGTERM drains.
//
// Test hook: ONCEQ_PHP_TEST_KILL_AFTER_COMMIT=FILE makes the worker SIGKILL
// itself right after its first committed grant (and create FILE, so only once).
// ONCEQ_PHP_TEST_SLOW_QUERY_S=N runs `SELECT pg_sleep(N)` before each grant:
// one C call longer than the broker's liveness.
declare(strict_types=1);

require __DIR__ . '/../src/autoload.php';
require __DIR__ . '/GrantOrderPointsJob.php';

use Onceq\Examples\GrantOrderPointsJob;
use Onceq\Worker;

$opts = getopt('h', ['broker:', 'database:', 'key:', 'broker-key:', 'name:', 'queue:', 'keeper', 'help']);
if (isset($opts['h']) || isset($opts['help'])) {
    fwrite(STDOUT, "Usage: points-worker.php [--broker ENDPOINT] [--database CONNINFO] [--key FILE] [--broker-key FILE] [--name NAME] [--queue LIST] [--keeper]\n" .
        "Runs grant_points jobs (the C handler's tables and SQL). Environment: ONCEQ_WORKER_BROKER, ONCEQ_DATABASE_URL,\n" .
        "ONCEQ_WORKER_KEY, ONCEQ_BROKER_KEY, ONCEQ_WORKER_NAME, ONCEQ_QUEUE, ONCEQ_KEEPER=1.\n" .
        "--keeper: heartbeat from a keeper process, also while a grant blocks in one long query.\n");
    exit(0);
}
$get = static fn (string $flag, string ...$envs): ?string =>
    isset($opts[$flag]) ? (string)$opts[$flag] : array_reduce($envs, static fn ($found, $env) => $found ?? (getenv($env) ?: null));

/** A PDO DSN from a libpq conninfo or URI. */
function pdo_dsn(string $conninfo): string
{
    if (preg_match('#^postgres(ql)?://#', $conninfo)) {
        $u = parse_url($conninfo);
        $parts = ['host' => $u['host'] ?? null, 'port' => $u['port'] ?? null,
                  'dbname' => isset($u['path']) ? ltrim($u['path'], '/') : null,
                  'user' => isset($u['user']) ? urldecode($u['user']) : null,
                  'password' => isset($u['pass']) ? urldecode($u['pass']) : null];
        return 'pgsql:' . implode(';', array_map(fn ($k, $v) => "$k=$v", array_keys(array_filter($parts)), array_filter($parts)));
    }
    return 'pgsql:' . preg_replace('/\s+/', ';', trim($conninfo));
}

$database = $get('database', 'ONCEQ_DATABASE_URL') ?? 'dbname=onceq';
$queues = $get('queue', 'ONCEQ_QUEUE');
try {
    $pdo = new PDO(pdo_dsn($database));
    $worker = new Worker($get('broker', 'ONCEQ_WORKER_BROKER') ?? Worker::DEFAULT_ENDPOINT, array_filter([
        'name' => $get('name', 'ONCEQ_WORKER_NAME') ?? 'php-points',
        'queues' => $queues !== null ? explode(',', $queues) : null,
        'key' => $get('key', 'ONCEQ_WORKER_KEY', 'ONCEQ_KEY'),
        'broker_key' => $get('broker-key', 'ONCEQ_BROKER_KEY'),
        'keeper' => isset($opts['keeper']) || getenv('ONCEQ_KEEPER') === '1' ? true : null,
    ], static fn ($v) => $v !== null));
    $grant = new GrantOrderPointsJob($pdo, getenv('ONCEQ_PHP_TEST_KILL_AFTER_COMMIT') ?: null);
    $slow = (float)(getenv('ONCEQ_PHP_TEST_SLOW_QUERY_S') ?: 0);
    $worker->register(GrantOrderPointsJob::TYPE, $slow > 0 ? static function (Onceq\Job $job) use ($pdo, $grant, $slow) {
        $pdo->query('SELECT pg_sleep(' . $slow . ')');
        return $grant->handle($job);
    } : $grant);
    exit($worker->run());
} catch (Onceq\Exception\OnceqException | PDOException $e) {
    fwrite(STDERR, 'points-worker: ' . $e->getMessage() . "\n");
    exit(2);
}
