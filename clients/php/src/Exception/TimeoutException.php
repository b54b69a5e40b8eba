<?php
declare(strict_types=1);

namespace Onceq\Exception;

/**
 * The broker did not answer within the client's tries. For a dispatch the
 * job may still have been queued: send it again with the same dispatch id
 * (getDispatchId()) and the broker answers with the first job's id.
 */
class TimeoutException extends OnceqException
{
    public function __construct(string $message, private ?string $dispatchId = null)
    {
        parent::__construct($message);
    }

    public function getDispatchId(): ?string
    {
        return $this->dispatchId;
    }
}
