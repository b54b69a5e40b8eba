<?php
declare(strict_types=1);

namespace Onceq;

/**
 * What a handler reports for one delivery: the `ack` outcome of
 * docs/protocol.md §6. A handler returns one of these, or the string
 * Guard returns ('applied' / 'already_applied'), or nothing (ok, effect
 * not reported). An exception it throws is a retry with its message.
 */
final class Result
{
    public const OK = 'ok';
    public const RETRY = 'retry';
    public const FAIL = 'fail';
    public const REVIEW = 'review';
    public const RETURN = 'return';
    public const TIMEOUT = 'timeout';

    public const APPLIED = 'applied';
    public const ALREADY_APPLIED = 'already_applied';
    public const NONE = 'none';

    private function __construct(
        public readonly string $outcome,
        public readonly string $result = self::NONE,
        public readonly ?string $error = null,
        public readonly int|float|null $delay = null,
    ) {
    }

    /** Done; this run wrote the effect (counted in stats as applied). */
    public static function applied(): self
    {
        return new self(self::OK, self::APPLIED);
    }

    /** Done; the effect was written before (a rerun the guard absorbed; counted as a duplicate). */
    public static function alreadyApplied(): self
    {
        return new self(self::OK, self::ALREADY_APPLIED);
    }

    /** Done, nothing to report about the effect. */
    public static function ok(): self
    {
        return new self(self::OK);
    }

    /** Try again after the job's backoff step, if tries remain; failed otherwise. */
    public static function retry(string $error): self
    {
        return new self(self::RETRY, self::NONE, $error);
    }

    /** Try again after $delay seconds of the handler's choosing (Laravel's release()); uses a try. */
    public static function release(int|float $delay, string $error = 'released by the handler'): self
    {
        return new self(self::RETRY, self::NONE, $error, $delay);
    }

    /** Failed at once: to the failed store (onceq failed list), whatever tries remain. */
    public static function fail(string $error): self
    {
        return new self(self::FAIL, self::NONE, $error);
    }

    /** The handler cannot know whether its effect happened: a person decides (onceq review). */
    public static function review(string $reason): self
    {
        return new self(self::REVIEW, self::NONE, $reason);
    }

    /** Hand the job back unrun: uses no try; ready again at once or after $delay seconds. */
    public static function giveBack(int|float|null $delay = null): self
    {
        return new self(self::RETURN, self::NONE, null, $delay);
    }

    /** The handler overran its timeout (sent by the worker itself). */
    public static function timedOut(string $error): self
    {
        return new self(self::TIMEOUT, self::NONE, $error);
    }

    /** A handler's return value as a Result. */
    public static function from(mixed $value): self
    {
        return match (true) {
            $value instanceof self => $value,
            $value === null, $value === true, $value === self::NONE => self::ok(),
            $value === self::APPLIED => self::applied(),
            $value === self::ALREADY_APPLIED => self::alreadyApplied(),
            default => self::fail('the handler returned ' . get_debug_type($value) .
                ', not a Onceq\\Result, "applied", "already_applied" or nothing'),
        };
    }
}
