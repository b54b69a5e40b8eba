<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `unknown_command` (docs/protocol.md §3). */
final class UnknownCommandException extends BrokerException
{
}
