<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `not_found` (docs/protocol.md §3). */
final class NotFoundException extends BrokerException
{
}
