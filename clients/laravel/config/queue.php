<?php

// The onceq connection and failed store for a Laravel app's config/queue.php:
// merge 'connections.onceq' and 'failed' into yours, set QUEUE_CONNECTION=onceq,
// and list Onceq\Laravel\OnceqServiceProvider in config/app.php's providers
// (bootstrap/providers.php on Laravel 11+). clients/laravel/README.md says
// what each key does.
return [
    'default' => env('QUEUE_CONNECTION', 'onceq'),

    'connections' => [
        'onceq' => [
            'driver' => 'onceq',
            'front' => env('ONCEQ_BROKER', 'tcp://127.0.0.1:7750'),        // producers: push, size
            'back' => env('ONCEQ_WORKER_BROKER', 'tcp://127.0.0.1:7751'),  // queue:work
            'key' => env('ONCEQ_KEY'),                 // a producer key: NAME.key_secret
            'worker_key' => env('ONCEQ_WORKER_KEY'),   // a worker key, for queue:work
            'admin_key' => env('ONCEQ_ADMIN_KEY'),     // only for the failed store below
            'broker_key' => env('ONCEQ_BROKER_KEY'),   // the broker's broker.key
            'queue' => 'default',
            'type' => 'laravel',        // the onceq job type of every job of this connection
            'block_for' => 1,           // seconds pop() waits for a job before queue:work sleeps
            'tries' => null,            // for jobs without $tries; null: the broker's queue default
            'timeout' => null,          // for jobs without $timeout; null: the broker's queue default
            'keeper' => true,           // heartbeats while a job blocks in one long C call
            'unique_lock' => 'broker',  // release Laravel's ShouldBeUnique lock once the broker answered
            'timeout_ms' => 5000,       // how long a dispatch waits for each answer (3 sends)
        ],
    ],

    // The broker's failed store is Laravel's: queue:failed, queue:retry,
    // queue:forget and queue:flush read and change it (with admin_key).
    'failed' => [
        'driver' => 'onceq',
        'queue_connection' => 'onceq',
    ],
];
