<?php
declare(strict_types=1);

namespace Onceq\Laravel;

use Illuminate\Queue\Connectors\ConnectorInterface;

/** Makes an OnceqQueue from a connection's config (config/queue.php, 'driver' => 'onceq'). */
final class OnceqConnector implements ConnectorInterface
{
    public function connect(array $config)
    {
        return new OnceqQueue($config);
    }
}
