<?php

namespace App\Jobs;

use Illuminate\Queue\Middleware\WithoutOverlapping;

/** A Probe that never overlaps another of the same $key (WithoutOverlapping). */
class OverlapProbe extends Probe
{
    public string $key = 'shared';

    public function middleware(): array
    {
        return [new WithoutOverlapping($this->key)];
    }
}
