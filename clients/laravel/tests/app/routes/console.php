<?php

use App\Jobs\GrantOrderPointsJob;
use App\Jobs\Noop;
use Illuminate\Support\Facades\Artisan;
use Illuminate\Support\Facades\Queue;

Artisan::command('demo:grant {order} {customer} {points}', function ($order, $customer, $points) {
    GrantOrderPointsJob::dispatch((int)$order, (int)$customer, (int)$points);
    $this->info("dispatched the grant of order $order");
})->describe('Dispatch the article\'s GrantOrderPointsJob');

Artisan::command('bench:push {connection} {count} {--queue=bench}', function ($connection, $count) {
    $queue = Queue::connection($connection);
    for ($i = 0; $i < (int)$count; $i++) {
        $queue->push(new Noop(), '', $this->option('queue'));
    }
    $this->info("pushed $count noop jobs to $connection");
})->describe('Push COUNT noop jobs (the benchmark)');
