<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `timeout_rule` (docs/protocol.md §3). */
final class TimeoutRuleException extends BrokerException
{
}
