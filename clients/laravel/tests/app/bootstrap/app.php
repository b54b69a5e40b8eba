<?php
// The application, as a Laravel skeleton's bootstrap/app.php. Its writable
// paths (storage, the bootstrap caches) are under APP_STORAGE, so that the
// checked-in tree is never written to.
$storage = getenv('APP_STORAGE') ?: sys_get_temp_dir() . '/onceq-laravel-app';
foreach (['framework/cache/data', 'logs', 'cache'] as $dir) {
    @mkdir("$storage/$dir", 0700, true);
}
foreach (['APP_SERVICES_CACHE' => 'services.php', 'APP_PACKAGES_CACHE' => 'packages.php',
          'APP_CONFIG_CACHE' => 'config.php', 'APP_ROUTES_CACHE' => 'routes.php',
          'APP_EVENTS_CACHE' => 'events.php'] as $key => $file) {
    if (getenv($key) === false) {
        putenv("$key=$storage/cache/$file");
    }
}

$app = new Illuminate\Foundation\Application(dirname(__DIR__));
$app->useStoragePath($storage);
$app->singleton(Illuminate\Contracts\Console\Kernel::class, App\Console\Kernel::class);
$app->singleton(Illuminate\Contracts\Debug\ExceptionHandler::class, App\Exceptions\Handler::class);
return $app;
