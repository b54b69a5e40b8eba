<?php

namespace App\Jobs;

/** A Probe that Laravel fails at its first timeout ($failOnTimeout), whatever tries remain. */
class FailOnTimeoutProbe extends Probe
{
    public $failOnTimeout = true;
}
