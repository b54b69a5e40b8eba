-- 0001_points: the reference domain of the article, order points.
--
-- A customer's balance row exists from registration on (`onceq customer add`),
-- so a grant for a customer without one is refused rather than creating a
-- balance on the fly. Every grant is recorded once per (order_id, reason):
-- that UNIQUE constraint is what makes a job that runs twice take effect once
-- (see docs/points.md). Applied by `onceq db migrate` in one transaction with
-- its row in onceq_migrations; do not edit after release, add 0002_... instead.

CREATE TABLE point_balances (
    customer_id bigint PRIMARY KEY,
    balance     bigint NOT NULL DEFAULT 0 CHECK (balance >= 0)
);

CREATE TABLE point_grants (
    order_id    bigint      NOT NULL,
    reason      text        NOT NULL,
    customer_id bigint      NOT NULL REFERENCES point_balances,
    points      integer     NOT NULL CHECK (points > 0),
    granted_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (order_id, reason)
);

-- The foreign key's referencing side, for lookups by customer (and so that
-- changing a balance row's key never scans every grant).
CREATE INDEX point_grants_customer_id_idx ON point_grants (customer_id);
