<?php

namespace App\Points;

use Illuminate\Support\Facades\DB;

/**
 * The article's use case: grant an order's points once. The grant row is
 * the guard: UNIQUE (order_id, reason) lets it in once, and the balance
 * moves only in the transaction that inserted it.
 */
class GrantOrderPoints
{
    public const REASON = 'order_points';

    /** @return string 'applied' or 'already_applied' */
    public function execute(int $orderId, int $customerId, int $points): string
    {
        return DB::transaction(function () use ($orderId, $customerId, $points) {
            $inserted = DB::table('point_grants')->insertOrIgnore([
                'order_id' => $orderId,
                'reason' => self::REASON,
                'customer_id' => $customerId,
                'points' => $points,
            ]);
            if ($inserted === 0) {
                return 'already_applied';
            }
            DB::table('point_balances')->where('customer_id', $customerId)->increment('balance', $points);
            return 'applied';
        });
    }
}
