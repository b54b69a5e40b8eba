<?php

use App\Jobs\GrantOrderPointsJob;
use Illuminate\Support\Facades\Artisan;

Artisan::command('demo:grant {order} {customer} {points}', function ($order, $customer, $points) {
    GrantOrderPointsJob::dispatch((int)$order, (int)$customer, (int)$points);
    $this->info("dispatched the grant of order $order");
})->describe('Dispatch the article\'s GrantOrderPointsJob');
