<?php

// PostgreSQL, from a libpq conninfo in ONCEQ_TEST_DATABASE ("host=… port=… dbname=… user=…").
$conninfo = [];
foreach (preg_split('/\s+/', trim((string)env('ONCEQ_TEST_DATABASE', ''))) as $pair) {
    if (str_contains($pair, '=')) {
        [$k, $v] = explode('=', $pair, 2);
        $conninfo[$k] = $v;
    }
}

return [
    'default' => 'pgsql',
    'connections' => [
        'pgsql' => [
            'driver' => 'pgsql',
            'host' => $conninfo['host'] ?? '127.0.0.1',
            'port' => $conninfo['port'] ?? 5432,
            'database' => $conninfo['dbname'] ?? 'onceq',
            'username' => $conninfo['user'] ?? 'postgres',
            'password' => $conninfo['password'] ?? '',
            'charset' => 'utf8',
            'prefix' => '',
            'schema' => 'public',
            'sslmode' => 'disable',
        ],
    ],
    'redis' => [
        'client' => 'phpredis',
        'default' => ['host' => '127.0.0.1', 'port' => env('REDIS_PORT', 6379), 'database' => 0],
    ],
];
