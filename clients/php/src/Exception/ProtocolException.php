<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** The broker sent something this client cannot read (not one msgpack map, an unexpected reply). */
class ProtocolException extends OnceqException
{
}
