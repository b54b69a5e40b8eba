<?php
declare(strict_types=1);

namespace Onceq\Examples;

use Onceq\Guard;
use Onceq\Job;
use Onceq\Result;

/**
 * The article's job in PHP: grant an order's points once, however many
 * times the job runs. It writes the same tables, with the same SQL, as the
 * C handler grant_points (worker/points/ledger_pg.c, deploy/sql/0001_points.sql),
 * so PHP and C workers can serve the type side by side:
 *
 *   1. INSERT the grant row, ON CONFLICT (order_id, reason) DO NOTHING:
 *      the row is the guard (UNIQUE (order_id, reason));
 *   2. it went in: add the points to the customer's balance, in the same
 *      transaction; no balance row: roll back and fail (unknown customer);
 *   3. it was there: already applied, unless that grant names another
 *      customer or amount, which is a contradiction a person should see (fail).
 *
 * Payload: {order_id, customer_id, points}, integers, points 1 … 1,000,000.
 */
final class GrantOrderPointsJob
{
    public const TYPE = 'grant_points';
    public const REASON = 'order_points';   // OQ_GRANT_REASON_ORDER
    public const MAX_POINTS = 1_000_000;    // OQ_MAX_POINTS

    private const SQLSTATE_FOREIGN_KEY = '23503';

    /** @param ?string $killAfterCommit test hook: a marker file; see handle() */
    public function __construct(private \PDO $pdo, private ?string $killAfterCommit = null)
    {
        $this->pdo->setAttribute(\PDO::ATTR_ERRMODE, \PDO::ERRMODE_EXCEPTION);
    }

    public function handle(Job $job): Result
    {
        $args = [];
        foreach (['order_id' => PHP_INT_MAX, 'customer_id' => PHP_INT_MAX, 'points' => self::MAX_POINTS] as $key => $max) {
            if (!array_key_exists($key, $job->payload)) {
                return Result::fail("{$job->type}: payload field \"$key\" is missing");
            }
            $value = $job->payload[$key];
            if (!is_int($value) || $value < 1 || $value > $max) {
                return Result::fail("{$job->type}: payload field \"$key\" must be an integer from 1 to $max");
            }
            $args[$key] = $value;
        }
        ['order_id' => $orderId, 'customer_id' => $customerId, 'points' => $points] = $args;

        try {
            $result = Guard::run(
                $this->pdo,
                'INSERT INTO point_grants (order_id, reason, customer_id, points) ' .
                'VALUES (?, ?, ?, ?) ON CONFLICT (order_id, reason) DO NOTHING',
                [$orderId, self::REASON, $customerId, $points],
                function (\PDO $pdo) use ($customerId, $points): void {
                    $update = $pdo->prepare('UPDATE point_balances SET balance = balance + ? WHERE customer_id = ?');
                    $update->execute([$points, $customerId]);
                    if ($update->rowCount() !== 1) {
                        throw new UnknownCustomer($customerId);
                    }
                }
            );
        } catch (UnknownCustomer $e) {
            return Result::fail("{$job->type}: " . $e->getMessage());
        } catch (\PDOException $e) {
            if ($e->getCode() === self::SQLSTATE_FOREIGN_KEY) {
                return Result::fail("{$job->type}: " . (new UnknownCustomer($customerId))->getMessage());
            }
            throw $e; // the connection, a serialization failure…: the worker retries the job
        }

        // Test hook (tests/php): die between the COMMIT and the ack, once,
        // as a worker killed at the worst moment; the redelivery must find
        // the grant and report already_applied.
        if ($result === Result::APPLIED && $this->killAfterCommit !== null && !file_exists($this->killAfterCommit)) {
            touch($this->killAfterCommit);
            posix_kill(getmypid(), SIGKILL);
        }

        if ($result === Result::ALREADY_APPLIED) {
            $find = $this->pdo->prepare('SELECT customer_id, points FROM point_grants WHERE order_id = ? AND reason = ?');
            $find->execute([$orderId, self::REASON]);
            $row = $find->fetch(\PDO::FETCH_ASSOC);
            if ($row !== false && ((int)$row['customer_id'] !== $customerId || (int)$row['points'] !== $points)) {
                return Result::fail(sprintf(
                    '%s: order %d was already granted %d points for customer %d; not granting %d points to customer %d',
                    $job->type, $orderId, (int)$row['points'], (int)$row['customer_id'], $points, $customerId
                ));
            }
            return Result::alreadyApplied();
        }
        return Result::applied();
    }
}

/** @internal */
final class UnknownCustomer extends \RuntimeException
{
    public function __construct(int $customerId)
    {
        parent::__construct("customer $customerId has no balance row (add it with: onceq customer add $customerId)");
    }
}
