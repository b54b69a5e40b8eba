<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `internal` (docs/protocol.md §3). */
final class InternalException extends BrokerException
{
}
