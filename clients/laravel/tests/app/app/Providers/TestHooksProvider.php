<?php

namespace App\Providers;

use Illuminate\Database\Events\TransactionCommitted;
use Illuminate\Support\Facades\Event;
use Illuminate\Support\ServiceProvider;

/**
 * ONCEQ_TEST_KILL_AFTER_COMMIT=FILE: the worker SIGKILLs itself right after
 * its first committed transaction, between the COMMIT and the ack (once:
 * FILE marks that it happened), the worst moment for a worker to die.
 */
class TestHooksProvider extends ServiceProvider
{
    public function boot()
    {
        $marker = getenv('ONCEQ_TEST_KILL_AFTER_COMMIT');
        if ($marker === false || $marker === '') {
            return;
        }
        Event::listen(TransactionCommitted::class, static function () use ($marker): void {
            if (!file_exists($marker)) {
                touch($marker);
                posix_kill(getmypid(), SIGKILL);
            }
        });
    }
}
