<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Support\Facades\DB;

/**
 * A job for the tests: records each run in probe_runs (name, attempt, pid,
 * start and end), then does what $mode says: ok, throw, release (after
 * $seconds), fail, sleep ($seconds of PHP sleep), pg_sleep ($seconds inside
 * one C call, a query), release_throw (release, then throw: two decisions
 * for one delivery). failed() records a row with attempt 0.
 */
class Probe implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable;

    public $tries;
    public $timeout;
    public $backoff;

    public function __construct(public string $name, public string $mode = 'ok', public float $seconds = 0,
        ?int $tries = null, ?int $timeout = null, $backoff = null)
    {
        $this->tries = $tries;
        $this->timeout = $timeout;
        $this->backoff = $backoff;
    }

    public function handle(): void
    {
        $id = DB::table('probe_runs')->insertGetId(['name' => $this->name, 'attempt' => $this->attempts(),
            'pid' => getmypid(), 'started_at' => microtime(true)]);
        switch ($this->mode) {
            case 'throw':
                throw new \RuntimeException("probe {$this->name} threw on attempt {$this->attempts()}");
            case 'release':
                $this->release((int)$this->seconds);
                break;
            case 'fail':
                $this->fail(new \LogicException("probe {$this->name} gave up"));
                break;
            case 'sleep':
                $end = microtime(true) + $this->seconds;
                while (($left = $end - microtime(true)) > 0) {
                    usleep((int)min(100_000, $left * 1e6));
                }
                break;
            case 'release_throw':
                $this->release(0);
                throw new \RuntimeException("probe {$this->name} threw after its release");
            case 'pg_sleep':
                DB::select('SELECT pg_sleep(?)', [$this->seconds]);
                break;
        }
        DB::table('probe_runs')->where('id', $id)->update(['ended_at' => microtime(true)]);
    }

    public function failed(\Throwable $e): void
    {
        DB::table('probe_runs')->insert(['name' => $this->name, 'attempt' => 0, 'pid' => getmypid(),
            'started_at' => microtime(true), 'error' => get_class($e) . ': ' . $e->getMessage()]);
    }
}
