<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `full` (docs/protocol.md §3). */
final class FullException extends BrokerException
{
}
