<?php
declare(strict_types=1);

namespace Onceq\Tests\Support;

/**
 * tests/support/scripted-broker.php as a child process: started with its
 * script, its endpoint read once it is bound, the requests it got read
 * back, and stopped by PID (stop(), or the destructor).
 */
final class ScriptedBroker
{
    private const READY_S = 20.0;

    public readonly string $endpoint;
    private string $dir;
    /** @var resource */
    private $proc;

    /** @param list<array|null> $script one reply map (or null: silence) per request */
    public function __construct(array $script)
    {
        $this->dir = sys_get_temp_dir() . '/onceq-php-scripted-' . bin2hex(random_bytes(4));
        mkdir($this->dir);
        file_put_contents("$this->dir/script.json", json_encode($script, JSON_THROW_ON_ERROR));
        $proc = proc_open([PHP_BINARY, __DIR__ . '/scripted-broker.php', "$this->dir/script.json", $this->dir],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', "$this->dir/log", 'a'], 2 => ['file', "$this->dir/log", 'a']],
            $pipes);
        if ($proc === false) {
            throw new \RuntimeException('cannot start scripted-broker.php');
        }
        $this->proc = $proc;
        $end = microtime(true) + self::READY_S;
        while (!is_file("$this->dir/endpoint")) {
            if (!proc_get_status($this->proc)['running'] || microtime(true) > $end) {
                $log = (string)@file_get_contents("$this->dir/log");
                $this->stop();
                throw new \RuntimeException("scripted-broker.php did not bind within " . self::READY_S . " s: $log");
            }
            usleep(20_000);
        }
        $this->endpoint = (string)file_get_contents("$this->dir/endpoint");
    }

    /** @return list<array> the requests it got, decoded, oldest first */
    public function requests(): array
    {
        $lines = @file("$this->dir/requests.jsonl", FILE_IGNORE_NEW_LINES) ?: [];
        return array_map(fn (string $line) => json_decode($line, true, 64, JSON_THROW_ON_ERROR), $lines);
    }

    public function stop(): void
    {
        if (!isset($this->dir)) {
            return;
        }
        $pid = proc_get_status($this->proc)['pid'];
        if (proc_get_status($this->proc)['running']) {
            posix_kill($pid, SIGKILL);
        }
        proc_close($this->proc);
        array_map('unlink', glob("$this->dir/*") ?: []);
        rmdir($this->dir);
        unset($this->dir);
    }

    public function __destruct()
    {
        $this->stop();
    }
}
