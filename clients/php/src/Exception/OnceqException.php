<?php
declare(strict_types=1);

namespace Onceq\Exception;

/** Every exception this library throws is one of these. */
class OnceqException extends \RuntimeException
{
    private ?int $jobId = null;

    /**
     * The id of a job that is queued although this was thrown: Client::dispatchWait()
     * dispatched it and only the wait for it failed (wait for it by this id).
     * Null when no job is known to be queued.
     */
    public function getJobId(): ?int
    {
        return $this->jobId;
    }

    /** @internal This exception, naming job $id as queued (Client::dispatchWait()). */
    public function withQueuedJob(int $id): static
    {
        $this->jobId = $id;
        $this->message .= " (job $id is queued: wait($id) for its outcome)";
        return $this;
    }
}
