-- 0002_once: the once-guard.
--
-- The once-guard of the effects SDK (oq_once in onceq/effects.h), for
-- effects that have no business table of their own to carry a UNIQUE
-- constraint: a row per effect that happened, keyed by what the effect is
-- (scope: its kind, e.g. the job type; key: the business operation). The
-- row is inserted in the same transaction as the effect, ON CONFLICT DO
-- NOTHING: whichever run inserts it owns the effect. job_id says which job
-- did it, for people (NULL when no job did, e.g. a tool).
CREATE TABLE onceq_once (
    scope      text        NOT NULL CHECK (octet_length(scope) BETWEEN 1 AND 64),
    key        text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 256),
    job_id     bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);
