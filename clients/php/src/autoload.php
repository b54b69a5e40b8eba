<?php
// PSR-4 autoloader for use without Composer (Debian's php-* packages, the
// project's tests): require this file, then use Onceq\Client etc.
declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'Onceq\\', 6) !== 0) {
        return;
    }
    $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, 6)) . '.php';
    if (is_file($file)) {
        require $file;
    }
});
