<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `forbidden` (docs/protocol.md §3). */
final class ForbiddenException extends BrokerException
{
}
