<?php
declare(strict_types=1);

namespace Onceq\Protocol;

use Onceq\Exception\ProtocolException;

/**
 * The fields of what the broker sends, checked as the C decoder checks them
 * (common/src/proto.c, s_decode_fields): a reply to a producer and a job
 * delivered to a worker. A message Codec decoded may still carry a negative
 * job id, a lease token that is a float or text, an error text of a
 * megabyte; each check returns the field in its type or throws a
 * ProtocolException naming the field, so the client throws one clear
 * exception and the worker logs one line and goes on.
 *
 * One ambiguity is php-msgpack's: a uint64 above PHP_INT_MAX comes out as
 * its decimal string, the same as a msgpack string of those digits, so a
 * decimal string is taken as such a uint (a lease token echoed back as it
 * came, which the broker checks).
 */
final class Check
{
    /** Names (job types, queues): 1-64 of these (OQ_MAX_NAME_LEN). */
    private const NAME_PATTERN = '/^[A-Za-z0-9_.:\-]{1,64}$/D';
    /** An error text or a reason, OQ_MAX_ERROR_LEN. */
    public const MAX_ERROR_BYTES = 1024;
    /** OQ_MAX_TRIES_LIMIT. */
    private const MAX_TRIES = 1000;
    /** OQ_MAX_TIMEOUT_MS, in seconds. */
    private const MAX_TIMEOUT_S = 24 * 3600;
    /** OQ_MIN_HEARTBEAT_MS, OQ_MAX_HEARTBEAT_MS, OQ_MAX_LIVENESS. */
    private const MIN_HEARTBEAT_MS = 10;
    private const MAX_HEARTBEAT_MS = 60000;
    private const MAX_LIVENESS = 100;
    private const UINT32_MAX = 0xffffffff;
    private const WAIT_STATES = ['pending', 'done', 'failed', 'review', 'cancelled'];

    /**
     * A reply to a producer: `v` is this protocol's, and the fields of
     * `error`, `dispatched` and `waited` are what they must be. Other
     * replies (stats, pong, …) are the caller's to read.
     */
    public static function reply(array $reply): void
    {
        if (($reply['v'] ?? null) !== Codec::VERSION) {
            throw new ProtocolException('onceq: a reply of protocol version ' . self::show($reply['v'] ?? null) .
                ', this client speaks ' . Codec::VERSION);
        }
        $cmd = self::str($reply, 'cmd', true, 64);
        switch ($cmd) {
            case 'error':
                self::str($reply, 'code', true, 64);
                self::str($reply, 'message', false, self::MAX_ERROR_BYTES);
                break;
            case 'dispatched':
                self::id($reply, $cmd);
                if (array_key_exists('unique', $reply) && !is_bool($reply['unique'])) {
                    throw new ProtocolException('onceq: field "unique" of a dispatched reply must be true or false');
                }
                break;
            case 'waited':
                self::id($reply, $cmd);
                $state = self::str($reply, 'state', true, 64);
                if (!in_array($state, self::WAIT_STATES, true)) {
                    throw new ProtocolException('onceq: field "state" of a waited reply must be one of ' .
                        implode(', ', self::WAIT_STATES) . ', not ' . self::show($state));
                }
                self::str($reply, 'error', false, self::MAX_ERROR_BYTES);
                break;
        }
    }

    /** The job id of a reply: an int from 1 (ids above PHP_INT_MAX are refused: an int cannot hold them). */
    public static function id(array $reply, string $what): int
    {
        $id = $reply['id'] ?? null;
        if ($id === null) {
            throw new ProtocolException("onceq: a $what reply without a job id");
        }
        if (!is_int($id) || $id < 1) {
            throw new ProtocolException("onceq: a $what reply with job id " . self::show($id) .
                ', not an integer from 1 to ' . PHP_INT_MAX);
        }
        return $id;
    }

    /**
     * A delivered job's fields (§4), as the C worker requires them:
     * ['id', 'attempt', 'lease' (Uint64), 'type', 'queue', 'payload',
     * 'max_tries', 'timeout' (seconds)].
     */
    public static function delivery(mixed $job): array
    {
        if (!is_array($job)) {
            throw new ProtocolException('onceq: field "job" must be a map');
        }
        [$id, $attempt, $lease] = self::deliveryIds($job);
        if ($lease === null) {
            throw new ProtocolException(array_key_exists('lease', $job)
                ? 'onceq: field "lease" is ' . self::show($job['lease']) . ', not an unsigned 64-bit integer'
                : 'onceq: missing field "lease"');
        }
        $type = self::name($job, 'type', true);
        $queue = self::name($job, 'queue', false) ?? 'default';
        $payload = $job['payload'] ?? [];
        if (!is_array($payload) || ($payload !== [] && array_is_list($payload))) {
            throw new ProtocolException('onceq: field "payload" must be a map');
        }
        $maxTries = self::int($job, 'max_tries', 1, self::MAX_TRIES);
        $timeout = $job['timeout'] ?? null;
        if (!(is_int($timeout) || is_float($timeout)) || is_nan((float)$timeout) || $timeout <= 0 ||
            $timeout > self::MAX_TIMEOUT_S) {
            throw new ProtocolException('onceq: field "timeout" is ' . self::show($timeout) .
                ', not a number of seconds above 0 and at most ' . self::MAX_TIMEOUT_S);
        }
        return ['id' => $id, 'attempt' => $attempt, 'lease' => $lease, 'type' => $type, 'queue' => $queue,
                'payload' => $payload, 'max_tries' => $maxTries, 'timeout' => (float)$timeout];
    }

    /**
     * What a delivery that fails delivery() still tells: [id, attempt,
     * lease or null], so that the worker can answer it (as the C worker's
     * oq_proto_entry_ids); a ProtocolException when even id or attempt is
     * unreadable.
     *
     * @return array{0: int, 1: int, 2: ?Uint64}
     */
    public static function deliveryIds(array $job): array
    {
        $id = self::int($job, 'id', 1, PHP_INT_MAX);
        $attempt = self::int($job, 'attempt', 1, self::UINT32_MAX);
        $lease = $job['lease'] ?? null;
        try {
            $token = is_int($lease) || is_string($lease) ? Uint64::of($lease) : null;
        } catch (\InvalidArgumentException) {
            $token = null;
        }
        return [$id, $attempt, $token];
    }

    /** A welcome's heartbeat_ms and liveness, within the C worker's bounds. */
    public static function welcome(array $message): array
    {
        return [self::int($message, 'heartbeat_ms', self::MIN_HEARTBEAT_MS, self::MAX_HEARTBEAT_MS),
                self::int($message, 'liveness', 1, self::MAX_LIVENESS)];
    }

    /** A string field of at most $max bytes; null when absent and not required. */
    public static function str(array $m, string $key, bool $required, int $max): ?string
    {
        if (!array_key_exists($key, $m)) {
            if ($required) {
                throw new ProtocolException("onceq: missing field \"$key\"");
            }
            return null;
        }
        $v = $m[$key];
        if (!is_string($v)) {
            throw new ProtocolException("onceq: field \"$key\" must be a string, not " . get_debug_type($v));
        }
        if (strlen($v) > $max) {
            throw new ProtocolException("onceq: field \"$key\" is " . strlen($v) . " bytes, the limit is $max");
        }
        return $v;
    }

    /** A value for a log line or a message: short, printable, whatever its type. */
    public static function show(mixed $v): string
    {
        if (is_string($v)) {
            $text = '"' . preg_replace('/[^\x20-\x7e]/', '?', substr($v, 0, 64)) . '"';
            return strlen($v) > 64 ? $text . ' (' . strlen($v) . ' bytes)' : $text;
        }
        if (is_int($v) || is_float($v)) {
            return var_export($v, true);
        }
        return get_debug_type($v);
    }

    private static function int(array $m, string $key, int $min, int $max): int
    {
        if (!array_key_exists($key, $m)) {
            throw new ProtocolException("onceq: missing field \"$key\"");
        }
        $v = $m[$key];
        if (!is_int($v) || $v < $min || $v > $max) {
            throw new ProtocolException("onceq: field \"$key\" is " . self::show($v) .
                ", not an integer from $min to $max");
        }
        return $v;
    }

    private static function name(array $m, string $key, bool $required): ?string
    {
        $v = self::str($m, $key, $required, 64);
        if ($v !== null && !preg_match(self::NAME_PATTERN, $v)) {
            throw new ProtocolException("onceq: field \"$key\" is " . self::show($v) .
                ', not 1 to 64 characters of A-Z a-z 0-9 _ . : -');
        }
        return $v;
    }
}
