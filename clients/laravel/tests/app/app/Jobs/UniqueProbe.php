<?php

namespace App\Jobs;

use Illuminate\Contracts\Queue\ShouldBeUnique;

/** A Probe that is unique per name (ShouldBeUnique, uniqueId()). */
class UniqueProbe extends Probe implements ShouldBeUnique
{
    public function uniqueId(): string
    {
        return $this->name;
    }
}
