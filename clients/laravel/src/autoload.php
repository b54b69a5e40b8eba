<?php
// PSR-4 autoloader for use without Composer (Debian's php-laravel-framework,
// the project's tests): require this file, then list
// Onceq\Laravel\OnceqServiceProvider in config/app.php. It loads the PHP
// client (clients/php) too.
declare(strict_types=1);

require_once __DIR__ . '/../../php/src/autoload.php';

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'Onceq\\Laravel\\', 14) !== 0) {
        return;
    }
    $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, 14)) . '.php';
    if (is_file($file)) {
        require $file;
    }
});
