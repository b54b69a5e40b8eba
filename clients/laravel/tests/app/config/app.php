<?php

return [
    'name' => 'onceq-laravel-test',
    'env' => 'testing',
    'debug' => true,
    'key' => 'base64:' . base64_encode(str_repeat('k', 32)),
    'cipher' => 'AES-256-CBC',
    'timezone' => 'UTC',
    'locale' => 'en',
    'providers' => [
        Illuminate\Bus\BusServiceProvider::class,
        Illuminate\Cache\CacheServiceProvider::class,
        Illuminate\Foundation\Providers\ConsoleSupportServiceProvider::class,
        Illuminate\Database\DatabaseServiceProvider::class,
        Illuminate\Encryption\EncryptionServiceProvider::class,
        Illuminate\Filesystem\FilesystemServiceProvider::class,
        Illuminate\Queue\QueueServiceProvider::class,
        Illuminate\Redis\RedisServiceProvider::class,
        Onceq\Laravel\OnceqServiceProvider::class,
        App\Providers\TestHooksProvider::class,
    ],
    'aliases' => [],
];
