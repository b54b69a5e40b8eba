<?php
declare(strict_types=1);

namespace Onceq\Exception;

/**
 * An `error` reply of the broker (docs/protocol.md §3). getErrorCode() is the
 * protocol's code string; each code has its own subclass, so callers catch
 * what they can handle (FullException, UnavailableException: try later) and
 * let the rest (BadRequestException: a bug) surface.
 */
class BrokerException extends OnceqException
{
    public const MALFORMED = 'malformed';
    public const TOO_LARGE = 'too_large';
    public const BAD_VERSION = 'bad_version';
    public const UNKNOWN_COMMAND = 'unknown_command';
    public const BAD_REQUEST = 'bad_request';
    public const TIMEOUT_RULE = 'timeout_rule';
    public const FULL = 'full';
    public const INTERNAL = 'internal';
    public const UNAVAILABLE = 'unavailable';
    public const NOT_FOUND = 'not_found';
    public const WRONG_STATE = 'wrong_state';
    public const FORBIDDEN = 'forbidden';

    /** Code => class; the codes of common/src/proto.c s_err_names. */
    public const CLASSES = [
        self::MALFORMED => MalformedException::class,
        self::TOO_LARGE => TooLargeException::class,
        self::BAD_VERSION => BadVersionException::class,
        self::UNKNOWN_COMMAND => UnknownCommandException::class,
        self::BAD_REQUEST => BadRequestException::class,
        self::TIMEOUT_RULE => TimeoutRuleException::class,
        self::FULL => FullException::class,
        self::INTERNAL => InternalException::class,
        self::UNAVAILABLE => UnavailableException::class,
        self::NOT_FOUND => NotFoundException::class,
        self::WRONG_STATE => WrongStateException::class,
        self::FORBIDDEN => ForbiddenException::class,
    ];

    public function __construct(private string $errorCode, string $message)
    {
        parent::__construct("onceq broker: $errorCode: $message");
        $this->brokerMessage = $message;
    }

    private string $brokerMessage;

    /** The protocol's code, e.g. "too_large" (getCode() stays PHP's int code, 0). */
    public function getErrorCode(): string
    {
        return $this->errorCode;
    }

    /** The broker's text alone. */
    public function getBrokerMessage(): string
    {
        return $this->brokerMessage;
    }

    /** The exception for an `error` reply; an unknown code (a newer broker) gives this base class. */
    public static function fromReply(array $reply): self
    {
        $code = is_string($reply['code'] ?? null) ? $reply['code'] : 'internal';
        $message = is_string($reply['message'] ?? null) ? $reply['message'] : '(no message)';
        $class = self::CLASSES[$code] ?? self::class;
        return new $class($code, $message);
    }
}
