<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `bad_request` (docs/protocol.md §3). */
final class BadRequestException extends BrokerException
{
}
