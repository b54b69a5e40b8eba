<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** Every exception this library throws is one of these. */
class OnceqException extends \RuntimeException
{
}
