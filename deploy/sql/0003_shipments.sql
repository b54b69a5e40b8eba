-- 0003_shipments: the shipment requests of the article's second use case.
--
-- Requesting a shipment is an external call (the carrier's API), so no
-- transaction here can make it happen once: the carrier's idempotency key
-- does (shipment-request:{order_id}, never a job id). This table is the
-- record of each order's request: what was sent under which key, how many
-- calls were made, and where it stands:
--   requested  a call is due or under way (reason: the last try's, if any)
--   confirmed  the carrier holds the shipment: its reference
--   failed     the carrier refused it, or could not be reached in time (reason)
--   review     nobody can tell from here; a person decides (reason)
-- See docs/shipments.md. Do not edit after release: add 0004_... instead.

CREATE TABLE shipment_requests (
    order_id        bigint      PRIMARY KEY CHECK (order_id BETWEEN 1 AND 9007199254740991),
    idempotency_key text        NOT NULL UNIQUE CHECK (octet_length(idempotency_key) BETWEEN 1 AND 255),
    request         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'requested'
                                CHECK (status IN ('requested', 'confirmed', 'failed', 'review')),
    reference       text        CHECK (octet_length(reference) BETWEEN 1 AND 64),
    reason          text,
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    confirmed_at    timestamptz,
    CHECK (status <> 'confirmed' OR reference IS NOT NULL)
);

-- What an operator looks for first: the requests that need a person.
CREATE INDEX shipment_requests_open_idx ON shipment_requests (status)
    WHERE status IN ('failed', 'review');
