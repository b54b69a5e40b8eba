<?php

namespace App\Jobs;

use App\Points\GrantOrderPoints;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\SerializesModels;
use Illuminate\Support\Facades\Log;

class GrantOrderPointsJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public $tries = 5;
    public $timeout = 30;

    public function __construct(
        public int $orderId,
        public int $customerId,
        public int $points,
    ) {
    }

    public function backoff(): array
    {
        return [10, 60, 300];
    }

    public function handle(GrantOrderPoints $useCase): void
    {
        $result = $useCase->execute($this->orderId, $this->customerId, $this->points);
        Log::info("grant order {$this->orderId}: {$result}");
    }
}
