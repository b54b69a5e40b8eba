<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `bad_version` (docs/protocol.md §3). */
final class BadVersionException extends BrokerException
{
}
