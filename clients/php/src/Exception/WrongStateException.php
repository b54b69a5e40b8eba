<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker's error `wrong_state` (docs/protocol.md §3). */
final class WrongStateException extends BrokerException
{
}
