<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `malformed` (docs/protocol.md §3). */
final class MalformedException extends BrokerException
{
}
