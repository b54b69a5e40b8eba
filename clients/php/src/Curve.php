<?php
declare(strict_types=1);

namespace Onceq;

use Onceq\Exception\ConfigException;

/**
 * The three CURVE keys of a client (docs/protocol.md §1): its own public and
 * secret key and the broker's public key, each 40 characters of Z85. Read
 * from czmq zcert files (`onceq keygen NAME` writes NAME.key and
 * NAME.key_secret) or given as Z85 strings.
 */
final class Curve
{
    private function __construct(
        public readonly string $publicKey,
        public readonly string $secretKey,
        public readonly string $serverKey,
    ) {
    }

    /**
     * From options: 'key' (our NAME.key_secret file) or 'public_key' and
     * 'secret_key' (Z85 strings or zcert files), and 'broker_key' (the
     * broker's broker.key file, or its Z85 public key). Null when none is
     * given (a broker started with --insecure); a ConfigException when only
     * some are.
     */
    public static function fromOptions(array $options): ?self
    {
        $key = $options['key'] ?? null;
        $public = $options['public_key'] ?? null;
        $secret = $options['secret_key'] ?? null;
        $broker = $options['broker_key'] ?? null;
        if ($key === null && $public === null && $secret === null && $broker === null) {
            return null;
        }
        if ($key !== null) {
            [$public, $secret] = self::readCert((string)$key, true);
        } else {
            if ($public === null || $secret === null) {
                throw new ConfigException('onceq: CURVE needs "key" (a NAME.key_secret file) or both "public_key" and "secret_key"');
            }
            $public = self::z85OrFile((string)$public, 'public_key', false);
            $secret = self::z85OrFile((string)$secret, 'secret_key', true);
        }
        if ($broker === null) {
            throw new ConfigException('onceq: CURVE needs "broker_key" (the broker\'s broker.key file or its Z85 public key)');
        }
        return new self($public, $secret, self::z85OrFile((string)$broker, 'broker_key', false));
    }

    /** Set the keys on a socket before it connects. */
    public function apply(\ZMQSocket $socket): void
    {
        $socket->setSockOpt(\ZMQ::SOCKOPT_CURVE_SERVERKEY, $this->serverKey);
        $socket->setSockOpt(\ZMQ::SOCKOPT_CURVE_PUBLICKEY, $this->publicKey);
        $socket->setSockOpt(\ZMQ::SOCKOPT_CURVE_SECRETKEY, $this->secretKey);
    }

    public static function isZ85Key(string $s): bool
    {
        return strlen($s) === 40 && preg_match('#^[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$\#]{40}$#', $s) === 1;
    }

    private static function z85OrFile(string $value, string $what, bool $secret): string
    {
        if (self::isZ85Key($value) && !is_file($value)) {
            return $value;
        }
        [$pub, $sec] = self::readCert($value, $secret);
        return $secret ? $sec : $pub;
    }

    /**
     * [public, secret] of a zcert file: the `curve` section's `public-key`
     * and `secret-key`; secret is null when the file has none and none is
     * needed. A `#` inside the quotes is part of the key.
     *
     * @return array{0: string, 1: ?string}
     */
    public static function readCert(string $path, bool $needSecret): array
    {
        $text = @file_get_contents($path);
        if ($text === false) {
            throw new ConfigException("onceq: cannot read the key file $path");
        }
        $section = null;
        $keys = [];
        foreach (preg_split('/\r?\n/', $text) as $line) {
            if (preg_match('/^\s*#/', $line) || trim($line) === '') {
                continue;
            }
            if (preg_match('/^(\S+)\s*$/', $line, $m)) {
                $section = $m[1];
                continue;
            }
            if ($section === 'curve' && preg_match('/^\s+(public-key|secret-key)\s*=\s*"(.*)"\s*$/', $line, $m)) {
                $keys[$m[1]] = $m[2];
            }
        }
        $public = $keys['public-key'] ?? null;
        $secret = $keys['secret-key'] ?? null;
        if ($public === null || !self::isZ85Key($public)) {
            throw new ConfigException("onceq: $path holds no public-key of 40 Z85 characters in its curve section");
        }
        if ($needSecret && ($secret === null || !self::isZ85Key($secret))) {
            throw new ConfigException("onceq: $path holds no secret-key (use the NAME.key_secret file)");
        }
        return [$public, $secret];
    }
}
