<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `too_large` (docs/protocol.md §3). */
final class TooLargeException extends BrokerException
{
}
