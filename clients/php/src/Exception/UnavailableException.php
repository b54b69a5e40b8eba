<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `unavailable` (docs/protocol.md §3). */
final class UnavailableException extends BrokerException
{
}
