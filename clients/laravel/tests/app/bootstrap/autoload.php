<?php
// What Composer's vendor/autoload.php is in a Laravel skeleton: Debian's
// framework (php-laravel-framework, /usr/share/php/Illuminate), the onceq
// package (clients/laravel, which loads clients/php) and App\ from app/.
require_once 'Illuminate/autoload.php';
require_once __DIR__ . '/../../../src/autoload.php';

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'App\\', 4) === 0) {
        $file = __DIR__ . '/../app/' . str_replace('\\', '/', substr($class, 4)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
