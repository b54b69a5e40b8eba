<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** Bad options or key files: nothing was sent. */
class ConfigException extends OnceqException
{
}
