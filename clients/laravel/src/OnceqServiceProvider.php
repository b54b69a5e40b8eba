<?php
declare(strict_types=1);

namespace Onceq\Laravel;

use Illuminate\Queue\Events\JobExceptionOccurred;
use Illuminate\Queue\Events\Looping;
use Illuminate\Queue\Events\WorkerStopping;
use Illuminate\Queue\QueueManager;
use Illuminate\Support\ServiceProvider;

/**
 * Registers the `onceq` queue driver and, with `'failed' => ['driver' =>
 * 'onceq']`, the broker's failed store as Laravel's (queue.failer).
 *
 * It listens to queue:work's events: Looping names the --queue list (the
 * link serves it in that order), JobExceptionOccurred gives the retry its
 * error text, WorkerStopping (raised by Laravel's timeout kill too) and
 * JobTimedOut (Laravel 10+) ack a killed job `timeout` and let the link go.
 */
class OnceqServiceProvider extends ServiceProvider
{
    public function register()
    {
        // QueueServiceProvider is deferred: add the connector whenever the manager is made.
        $this->app->afterResolving('queue', function (QueueManager $manager): void {
            $manager->addConnector('onceq', static fn () => new OnceqConnector());
        });
        if ($this->app->resolved('queue')) {
            $this->app['queue']->addConnector('onceq', static fn () => new OnceqConnector());
        }
        $this->app->extend('queue.failer', function ($failer, $app) {
            $config = $app['config']['queue.failed'] ?? [];
            if (($config['driver'] ?? null) !== 'onceq') {
                return $failer;
            }
            return new BrokerFailedJobProvider($app['queue'], (string)($config['queue_connection'] ?? 'onceq'));
        });
    }

    public function boot()
    {
        $events = $this->app['events'];
        $events->listen(Looping::class, function (Looping $event): void {
            $queue = $this->onceqConnection($event->connectionName);
            $queue?->serveQueues((string)$event->queue);
        });
        $events->listen(JobExceptionOccurred::class, static function (JobExceptionOccurred $event): void {
            if ($event->job instanceof OnceqJob) {
                $event->job->noteException($event->exception);
            }
        });
        $events->listen(WorkerStopping::class, static function (): void {
            foreach (WorkerLink::all() as $link) {
                $link->stopping();
            }
        });
        if (class_exists('Illuminate\Queue\Events\JobTimedOut')) {
            $events->listen('Illuminate\Queue\Events\JobTimedOut', static function ($event): void {
                if ($event->job instanceof OnceqJob) {
                    $event->job->timedOut();
                }
            });
        }
    }

    private function onceqConnection(?string $name): ?OnceqQueue
    {
        $name ??= $this->app['config']['queue.default'];
        if (($this->app['config']["queue.connections.$name.driver"] ?? null) !== 'onceq') {
            return null;
        }
        $queue = $this->app['queue']->connection($name);
        return $queue instanceof OnceqQueue ? $queue : null;
    }
}
