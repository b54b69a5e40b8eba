<?php

// The onceq connection as clients/laravel/config/queue.php gives it, with
// the test's broker and keys from the environment.
return [
    'default' => env('QUEUE_CONNECTION', 'onceq'),
    'connections' => [
        'onceq' => [
            'driver' => 'onceq',
            'front' => env('ONCEQ_BROKER'),
            'back' => env('ONCEQ_WORKER_BROKER'),
            'key' => env('ONCEQ_KEY'),
            'worker_key' => env('ONCEQ_WORKER_KEY'),
            'admin_key' => env('ONCEQ_ADMIN_KEY'),
            'broker_key' => env('ONCEQ_BROKER_KEY'),
            'queue' => 'default',
            'type' => 'laravel',
            'block_for' => (float)env('ONCEQ_BLOCK_FOR', 1),
            'keeper' => (bool)env('ONCEQ_KEEPER', true),
            'worker_name' => env('ONCEQ_WORKER_NAME'),
        ],
        'database' => [
            'driver' => 'database',
            'table' => 'jobs',
            'queue' => 'default',
            'retry_after' => 90,
        ],
        'redis' => [
            'driver' => 'redis',
            'connection' => 'default',
            'queue' => 'default',
            'retry_after' => 90,
            'block_for' => 1,
        ],
    ],
    'failed' => [
        'driver' => env('QUEUE_FAILED_DRIVER', 'onceq'),
        'queue_connection' => 'onceq',
        'database' => 'pgsql',
        'table' => 'failed_jobs',
    ],
];
