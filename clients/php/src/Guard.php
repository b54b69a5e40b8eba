<?php
declare(strict_types=1);

namespace Onceq;

/**
 * Exactly-once effects in PostgreSQL: the guard row and the effect commit
 * together, or neither does (docs/design.md). In one transaction, the
 * guard's INSERT … ON CONFLICT DO NOTHING either takes the key, and this run
 * applies the effect, or finds it taken, and an earlier run already did;
 * its row count (1 or 0) is the answer, with no window in which two runs
 * both see "not yet" (unlike a SELECT first).
 *
 *     $result = Guard::once($pdo, 'welcome_mail', "user:$userId", $job->id,
 *         fn (PDO $pdo) => $pdo->prepare('INSERT INTO outbox …')->execute([...]));
 *     return $result; // 'applied' or 'already_applied': the worker acks ok with it
 *
 * The effect must write through the same PDO handle (it runs inside the
 * transaction). An exception from the effect or the database rolls
 * everything back and is rethrown (the worker retries the job).
 */
final class Guard
{
    /**
     * The guard row is your own INSERT (say, into a table whose UNIQUE key is
     * the business operation, as point_grants (order_id, reason)); it must
     * say ON CONFLICT DO NOTHING. $effect runs only when it inserted a row.
     *
     * @param callable(\PDO): mixed $effect
     * @return string Result::APPLIED or Result::ALREADY_APPLIED
     */
    public static function run(\PDO $pdo, string $guardSql, array $params, callable $effect): string
    {
        if (!preg_match('/\bON\s+CONFLICT\b.*\bDO\s+NOTHING\b/is', $guardSql)) {
            throw new \InvalidArgumentException('onceq: the guard INSERT must say ON CONFLICT … DO NOTHING');
        }
        $pdo->setAttribute(\PDO::ATTR_ERRMODE, \PDO::ERRMODE_EXCEPTION);
        $pdo->beginTransaction();
        try {
            $statement = $pdo->prepare($guardSql);
            $statement->execute($params);
            $inserted = $statement->rowCount() === 1;
            if ($inserted) {
                $effect($pdo);
            }
            $pdo->commit();
        } catch (\Throwable $e) {
            if ($pdo->inTransaction()) {
                $pdo->rollBack();
            }
            throw $e;
        }
        return $inserted ? Result::APPLIED : Result::ALREADY_APPLIED;
    }

    /**
     * The same over onceq's own guard table, onceq_once (deploy/sql/0002_once.sql):
     * one row per ($scope, $key), $scope 1-64 bytes and $key 1-256, e.g.
     * ('welcome_mail', 'user:42'). $jobId is recorded with the row.
     *
     * @param callable(\PDO): mixed $effect
     */
    public static function once(\PDO $pdo, string $scope, string $key, ?int $jobId, callable $effect): string
    {
        return self::run(
            $pdo,
            'INSERT INTO onceq_once (scope, key, job_id) VALUES (?, ?, ?) ON CONFLICT (scope, key) DO NOTHING',
            [$scope, $key, $jobId],
            $effect
        );
    }
}
