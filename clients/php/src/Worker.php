<?php
declare(strict_types=1);

namespace Onceq;

use Onceq\Exception\ConfigException;
use Onceq\Exception\ProtocolException;
use Onceq\Protocol\Check;
use Onceq\Protocol\Codec;
use Onceq\Protocol\Unreadable;

/**
 * A worker on the broker's back socket (docs/protocol.md §6), one job at a
 * time, one credit out, like onceq-worker:
 *
 *     $worker = new Worker('tcp://127.0.0.1:7751', ['name' => 'php-points',
 *         'key' => '/etc/onceq/me/php.key_secret', 'broker_key' => '/etc/onceq/keys/broker.key']);
 *     $worker->register('grant_points', new GrantOrderPointsJob($pdo));   // an object with handle(Job)
 *     $worker->register('noop', fn (Job $job) => Result::ok());          // or a closure
 *     exit($worker->run());
 *
 * It sends `ready` with its types (and queues, if given), heartbeats every
 * interval of the broker's `welcome`, reconnects on a fresh socket with
 * backoff (0.25 s … 8 s) when the broker is silent for `liveness`
 * intervals, and answers `reconnect` with `ready`. Each ack echoes the
 * delivery's lease token. With pcntl (Debian's php-cli has it):
 *
 * - while a handler runs, a SIGALRM each second sends the heartbeats and
 *   checks the job's timeout: a handler past it gets the ack `timeout`
 *   and the process exits with status 3 (run it under a supervisor:
 *   systemd, supervisord), as onceq-worker does. The alarm cuts sleep()
 *   and usleep() in a handler short. Without the keeper, a handler that
 *   blocks in one C call (a query, an HTTP request) past the broker's
 *   liveness misses its heartbeats until it returns: its lease goes back,
 *   and its late ack still completes the job (keep effects guarded). With
 *   'keeper' => true a keeper process (KeeperLink) holds the connection
 *   and heartbeats through such calls.
 * - SIGTERM/SIGINT drain: the broker sends nothing more, the current job
 *   finishes and is acked, then the worker disconnects and run() returns 0.
 */
final class Worker
{
    public const DEFAULT_ENDPOINT = 'tcp://127.0.0.1:7751';
    public const EXIT_TIMEOUT = 3;

    private const MAX_ERROR_BYTES = Check::MAX_ERROR_BYTES;
    private const NAME_PATTERN = '/^[A-Za-z0-9_.:\-]{1,64}$/';

    /** @var array<string, callable|object|string> */
    private array $handlers = [];
    private ?Curve $curve;
    private string $name;
    /** @var list<string> */
    private array $queues;
    private int $heartbeatMs;
    private int $liveness = 3;
    /** @var callable(string): void */
    private $log;

    private ?Link $connection = null;
    private bool $keeper;
    private float $lastHeard = 0.0;
    private float $lastSent = 0.0;
    private bool $stopping = false;
    private bool $drained = false;
    private ?Job $current = null;
    private float $deadline = 0.0;
    private int $jobsDone = 0;
    private ?int $maxJobs;

    /**
     * @param array{name?: string, queues?: list<string>, heartbeat_ms?: int, max_jobs?: int,
     *              key?: string, public_key?: string, secret_key?: string, broker_key?: string,
     *              keeper?: bool, log?: callable(string): void} $options
     *        queues: highest priority first (default: every queue);
     *        heartbeat_ms: until the broker's welcome says (default 1000);
     *        max_jobs: return from run() after this many jobs (default: never);
     *        keeper: hold the connection in a keeper process (KeeperLink), which
     *        heartbeats while a handler blocks in one long C call (default false);
     *        log: one line per event (default: to STDERR)
     */
    public function __construct(private string $endpoint = self::DEFAULT_ENDPOINT, array $options = [])
    {
        $this->curve = Curve::fromOptions($options);
        $this->name = (string)($options['name'] ?? ('php-' . gethostname()));
        $this->queues = array_values($options['queues'] ?? []);
        $this->heartbeatMs = (int)($options['heartbeat_ms'] ?? 1000);
        $this->maxJobs = isset($options['max_jobs']) ? (int)$options['max_jobs'] : null;
        $this->keeper = (bool)($options['keeper'] ?? false);
        $this->log = $options['log'] ?? static function (string $line): void {
            fwrite(STDERR, $line . "\n");
        };
        if (!preg_match(self::NAME_PATTERN, $this->name)) {
            throw new ConfigException("onceq: worker name \"{$this->name}\": 1-64 bytes of A-Z a-z 0-9 _ . : -");
        }
        foreach ($this->queues as $queue) {
            if (!is_string($queue) || !preg_match(self::NAME_PATTERN, $queue)) {
                throw new ConfigException('onceq: queue name ' . json_encode($queue) . ': 1-64 bytes of A-Z a-z 0-9 _ . : -');
            }
        }
        if ($this->heartbeatMs < 10) {
            throw new ConfigException('onceq: heartbeat_ms must be at least 10');
        }
    }

    /**
     * Run jobs of $type with $handler: a callable taking a Job, an object
     * with a handle(Job) method, or the name of such a class (made once,
     * on its first job, with no arguments).
     */
    public function register(string $type, callable|object|string $handler): self
    {
        if (!preg_match(self::NAME_PATTERN, $type)) {
            throw new ConfigException("onceq: job type \"$type\": 1-64 bytes of A-Z a-z 0-9 _ . : -");
        }
        if (is_string($handler) && !is_callable($handler) && !class_exists($handler)) {
            throw new ConfigException("onceq: handler for \"$type\": no class $handler");
        }
        $this->handlers[$type] = $handler;
        return $this;
    }

    /** Ask the loop to drain and stop, as SIGTERM does. */
    public function stop(): void
    {
        $this->stopping = true;
        if ($this->current !== null && !$this->drained && $this->connection !== null) {
            $this->connection->send(['cmd' => 'drain']);
            $this->drained = true;
        }
    }

    /** Serve until stopped (SIGTERM, stop(), max_jobs); the exit status, 0. */
    public function run(): int
    {
        if ($this->handlers === []) {
            throw new ConfigException('onceq: register at least one handler before run()');
        }
        if (function_exists('pcntl_async_signals')) {
            pcntl_async_signals(true);
            foreach ([SIGTERM, SIGINT] as $signal) {
                pcntl_signal($signal, function (): void {
                    $this->stop();
                });
            }
            pcntl_signal(SIGALRM, function (): void {
                $this->tick();
            });
        }
        $backoff = 0.25;
        $this->connect();
        while (true) {
            if ($this->stopping) {
                $this->leave();
                return 0;
            }
            $now = microtime(true);
            $nextBeat = $this->lastSent + $this->heartbeatMs / 1000;
            $message = $this->connection->receive((int)max(0, ceil(($nextBeat - $now) * 1000)));
            $now = microtime(true);
            if ($message !== null) {
                $this->lastHeard = $now;
                $backoff = 0.25;
                $this->handle($message);
                if ($this->maxJobs !== null && $this->jobsDone >= $this->maxJobs) {
                    $this->stopping = true;
                }
                continue;
            }
            if ($now - $this->lastSent >= $this->heartbeatMs / 1000) {
                $this->send(['cmd' => 'heartbeat']);
            }
            if ($now - $this->lastHeard > $this->liveness * $this->heartbeatMs / 1000) {
                $this->say(sprintf('the broker at %s was silent for %d ms; reconnecting in %.2f s',
                    $this->endpoint, (int)(($now - $this->lastHeard) * 1000), $backoff));
                $this->connection->close();
                $this->connection = null;
                $this->sleep($backoff);
                $backoff = min(8.0, $backoff * 2);
                if (!$this->stopping) {
                    $this->connect();
                } else {
                    return 0;
                }
            }
        }
    }

    /** Close the link to the broker now, without draining (stop() drains). Idempotent. */
    public function close(): void
    {
        $this->connection?->close();
        $this->connection = null;
    }

    public function __destruct()
    {
        $this->close();
    }

    private function connect(): void
    {
        $this->connection = $this->keeper ? new KeeperLink($this->endpoint, $this->curve) :
            new Connection($this->endpoint, $this->curve);
        $this->lastHeard = microtime(true);
        $this->sendReady(1);
    }

    private function sendReady(int $credit): void
    {
        $ready = ['cmd' => 'ready', 'credit' => $credit, 'pid' => getmypid(), 'name' => $this->name,
                  'types' => array_map('strval', array_keys($this->handlers))];
        if ($this->queues !== []) {
            $ready['queues'] = $this->queues;
        }
        $this->send($ready);
    }

    private function send(array $message): void
    {
        $this->connection?->send($message);
        $this->lastSent = microtime(true);
    }

    /**
     * One message from the broker. What does not decode, or carries a field
     * the C worker would refuse, is logged as a protocol error and changes
     * nothing here (a malformed delivery is answered: runJob()); it still
     * counts as hearing from the broker, as in onceq-worker.
     */
    private function handle(array|Unreadable $message): void
    {
        if ($message instanceof Unreadable) {
            $this->say('protocol error: ignoring a message from the broker: ' . $message->reason);
            return;
        }
        try {
            if (($message['v'] ?? null) !== Codec::VERSION) {
                throw new ProtocolException('onceq: a message of protocol version ' .
                    Check::show($message['v'] ?? null) . ', this worker speaks ' . Codec::VERSION);
            }
            switch ($message['cmd'] ?? null) {
                case 'welcome':
                    [$this->heartbeatMs, $this->liveness] = Check::welcome($message);
                    $this->say(sprintf('connected to %s as %s (heartbeat %d ms, liveness %d)',
                        $this->endpoint, $this->name, $this->heartbeatMs, $this->liveness));
                    break;
                case 'job':
                    $this->runJob($message['job'] ?? null);
                    break;
                case 'reconnect':
                    $reason = Check::str($message, 'reason', false, Check::MAX_ERROR_BYTES) ?? '?';
                    $this->say("the broker does not know this worker ($reason); sending ready");
                    $this->sendReady($this->stopping ? 0 : 1);
                    break;
                case 'error':
                    $this->say('broker error: ' . Check::str($message, 'code', true, 64) . ': ' .
                        (Check::str($message, 'message', false, Check::MAX_ERROR_BYTES) ?? ''));
                    break;
                default:
                    break; // heartbeat, or a later revision's message
            }
        } catch (ProtocolException $e) {
            $this->say('protocol error: ignoring a "' . (is_string($message['cmd'] ?? null) ?
                Check::show($message['cmd']) : '?') . '" from the broker: ' . $e->getMessage());
        }
    }

    private function runJob(mixed $message): void
    {
        try {
            $job = Job::fromMessage($message, function (Job $job): void {
                $this->send(['cmd' => 'touch', 'id' => $job->id, 'attempt' => $job->attempt, 'lease' => $job->lease]);
                $this->deadline = microtime(true) + $job->timeout;
            });
        } catch (ProtocolException $e) {
            $this->refuseMalformed(is_array($message) ? $message : [], $e->getMessage());
            return;
        }
        if ($this->stopping || !isset($this->handlers[$job->type])) {
            // Unrun, no try used: stopping, or a type we never named.
            $this->ack($job, Result::giveBack(), 0.0);
            return;
        }
        $this->current = $job;
        $this->deadline = microtime(true) + $job->timeout;
        $started = microtime(true);
        if (function_exists('pcntl_alarm')) {
            pcntl_alarm(1);
        }
        try {
            $result = Result::from($this->call($job));
        } catch (\Throwable $e) {
            $result = Result::retry(get_class($e) . ': ' . $e->getMessage());
        } finally {
            if (function_exists('pcntl_alarm')) {
                pcntl_alarm(0);
            }
            $this->current = null;
        }
        $this->ack($job, $result, microtime(true) - $started);
        $this->jobsDone++;
    }

    /**
     * A delivery that does not decode runs nothing. If its id and attempt
     * can be read it is answered as onceq-worker answers one: `fail` with
     * the reason (to the failed store, where a person can requeue it; given
     * back unrun while stopping), echoing its lease token if that is
     * readable. An ack with no valid token changes nothing at the broker
     * but its credit: the job stays leased and is delivered again when the
     * lease ends. Without an id it is only logged.
     */
    private function refuseMalformed(array $message, string $reason): void
    {
        try {
            [$id, $attempt, $lease] = Check::deliveryIds($message);
        } catch (ProtocolException $e) {
            $this->say("protocol error: ignoring a job the broker sent: $reason");
            return;
        }
        $result = $this->stopping ? Result::giveBack() : Result::fail("the worker could not decode the job: $reason");
        $ack = ['cmd' => 'ack', 'id' => $id, 'attempt' => $attempt, 'outcome' => $result->outcome,
                'credit' => $this->stopping ? 0 : 1];
        if ($lease !== null) {
            $ack['lease'] = $lease;
        }
        if ($result->error !== null) {
            $ack['error'] = self::truncate($result->error);
        }
        $this->send($ack);
        $this->say(sprintf('protocol error: job %d attempt=%d outcome=%s: %s%s', $id, $attempt, $result->outcome,
            $reason, $lease === null ? ' (no lease token to echo: the ack changes nothing, the job comes again)' : ''));
    }

    private function call(Job $job): mixed
    {
        $handler = $this->handlers[$job->type];
        if (is_string($handler) && !is_callable($handler)) {
            $handler = $this->handlers[$job->type] = new $handler();
        }
        if (is_callable($handler)) {
            return $handler($job);
        }
        if (method_exists($handler, 'handle')) {
            return $handler->handle($job);
        }
        return Result::fail(get_debug_type($handler) . ' has no handle(Onceq\Job) method');
    }

    private function ack(Job $job, Result $result, float $seconds): void
    {
        $ack = ['cmd' => 'ack', 'id' => $job->id, 'attempt' => $job->attempt, 'lease' => $job->lease,
                'outcome' => $result->outcome, 'credit' => $this->stopping ? 0 : 1];
        if ($result->outcome === Result::OK) {
            $ack['result'] = $result->result;
        }
        if ($result->error !== null) {
            $ack['error'] = self::truncate($result->error);
        }
        if ($result->delay !== null) {
            $ack['delay'] = $result->delay;
        }
        $this->send($ack);
        $this->say(sprintf('job %d type=%s attempt=%d outcome=%s%s%s (%.1f ms)', $job->id, $job->type,
            $job->attempt, $result->outcome,
            $result->outcome === Result::OK ? ' result=' . $result->result : '',
            $result->error !== null ? ' error="' . $result->error . '"' : '', $seconds * 1000));
    }

    /** SIGALRM while a handler runs: heartbeats, and the job's time limit. */
    private function tick(): void
    {
        $job = $this->current;
        if ($job === null || $this->connection === null) {
            return;
        }
        $now = microtime(true);
        if ($now >= $this->deadline) {
            $this->ack($job, Result::timedOut(sprintf('timed out after %g s', $job->timeout)),
                $now - $this->deadline + $job->timeout);
            $this->connection->flush(2000);
            $this->say("job {$job->id} overran its timeout; exiting (status " . self::EXIT_TIMEOUT . ')');
            exit(self::EXIT_TIMEOUT);
        }
        if ($now - $this->lastSent >= $this->heartbeatMs / 1000 * 0.9) {
            $this->send(['cmd' => 'heartbeat']);
        }
        pcntl_alarm(1);
    }

    /** Graceful stop: drain, give back a job that was already on its way, disconnect. */
    private function leave(): void
    {
        if ($this->connection === null) {
            return;
        }
        if (!$this->drained) {
            $this->send(['cmd' => 'drain']);
            $this->drained = true;
        }
        // A job the broker sent before it read the drain: hand it back unrun.
        while (($message = $this->connection->receive(50)) !== null) {
            if (is_array($message) && ($message['cmd'] ?? null) === 'job') {
                $this->runJob($message['job'] ?? null);
            }
        }
        $this->send(['cmd' => 'disconnect']);
        $this->connection->flush(1000);
        $this->connection = null;
        $this->say("drained and disconnected after {$this->jobsDone} job(s)");
    }

    private function sleep(float $seconds): void
    {
        $end = microtime(true) + $seconds;
        while (!$this->stopping && ($left = $end - microtime(true)) > 0) {
            usleep((int)min(100_000, $left * 1_000_000));
        }
    }

    private static function truncate(string $error): string
    {
        if (strlen($error) <= self::MAX_ERROR_BYTES) {
            return $error;
        }
        $cut = mb_strcut($error, 0, self::MAX_ERROR_BYTES - 3, 'UTF-8');
        return $cut . '...';
    }

    private function say(string $line): void
    {
        ($this->log)('onceq-php-worker: ' . $line);
    }
}
