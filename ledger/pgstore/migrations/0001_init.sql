-- The ledger on PostgreSQL: every table the ledger.Store interface needs,
-- plus the change log the fleet follows.
--
-- Money is in bigint units, never negative, and every constraint the
-- database can check on one row is a CHECK here: an account's conservation
-- (invariant L1), its allowance within its budget (L5), a lease's bounded
-- spend and its funders' payments (L4). Sums are taken as numeric so that
-- the checks themselves cannot overflow. What ties rows together
-- (outstanding to active leases, loss to ended ones, settled to ingested
-- usage) is the reconciliation query's business (reconcile.sql).
--
-- Times are Unix nanoseconds (bigint), as the ledger passes them; only the
-- change log keeps the database's own clock.

CREATE TABLE accounts (
    id                text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
    parent            text REFERENCES accounts (id),
    capacity          smallint NOT NULL CHECK (capacity BETWEEN 0 AND 1),
    unmetered         boolean NOT NULL,
    scope             smallint NOT NULL CHECK (scope BETWEEN 1 AND 3), -- 1 agent, 2 workspace, 3 org
    status            smallint NOT NULL CHECK (status BETWEEN 0 AND 2), -- 0 active, 1 suspended, 2 closed
    policy            bytea, -- the admin API's document, verbatim; NULL when none was set
    policy_generation bigint NOT NULL CHECK (policy_generation >= 1),
    budget_allowance  bigint NOT NULL CHECK (budget_allowance >= 0),
    budget_period     smallint NOT NULL CHECK (budget_period BETWEEN 0 AND 3), -- 0 none, 1 day, 2 week, 3 month
    deposited         bigint NOT NULL CHECK (deposited >= 0),
    overage           bigint NOT NULL CHECK (overage >= 0),
    allowance_left    bigint NOT NULL CHECK (allowance_left >= 0),
    top_up_left       bigint NOT NULL CHECK (top_up_left >= 0),
    outstanding       bigint NOT NULL CHECK (outstanding >= 0),
    settled           bigint NOT NULL CHECK (settled >= 0),
    loss              bigint NOT NULL CHECK (loss >= 0),
    expired           bigint NOT NULL CHECK (expired >= 0),
    period_start      bigint NOT NULL,
    period_end        bigint NOT NULL,
    next_token        bigint NOT NULL CHECK (next_token >= 1),

    CONSTRAINT conserved CHECK (deposited::numeric + overage
        = allowance_left::numeric + top_up_left + outstanding + settled + loss + expired),
    CONSTRAINT allowance_within_budget CHECK (allowance_left <= budget_allowance),
    CONSTRAINT root_is_org_and_metered CHECK (parent IS NOT NULL OR (scope = 3 AND NOT unmetered)),
    CONSTRAINT unmetered_holds_no_money CHECK (NOT unmetered OR (deposited = 0 AND overage = 0 AND settled = 0
        AND allowance_left = 0 AND top_up_left = 0 AND outstanding = 0 AND loss = 0 AND expired = 0 AND budget_period = 0)),
    CONSTRAINT period_bounds CHECK (CASE WHEN budget_period = 0 THEN period_start = 0 AND period_end = 0
        ELSE period_start <= period_end END),
    CONSTRAINT closed_has_no_budget CHECK (status <> 2 OR (budget_period = 0 AND allowance_left = 0))
);
-- Children, in id order.
CREATE INDEX accounts_by_parent ON accounts (parent, id) WHERE parent IS NOT NULL;
-- Rollover: accounts whose period ends first.
CREATE INDEX accounts_due ON accounts (period_end, id) WHERE budget_period <> 0;

-- Deposit idempotency: a key is used once per account, with its units.
CREATE TABLE deposits (
    account text NOT NULL REFERENCES accounts (id),
    key     text NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 256),
    units   bigint NOT NULL CHECK (units > 0),
    at      bigint NOT NULL,
    PRIMARY KEY (account, key)
);

-- Lease ids are store-wide; a failed grant may leave a gap.
CREATE SEQUENCE lease_ids AS bigint;

CREATE TABLE leases (
    id         bigint PRIMARY KEY,
    account    text NOT NULL REFERENCES accounts (id),
    token      bigint NOT NULL CHECK (token >= 1),
    granted    bigint NOT NULL CHECK (granted > 0),
    used       bigint NOT NULL CHECK (used >= 0),
    credited   bigint NOT NULL CHECK (credited >= 0),
    state      smallint NOT NULL CHECK (state BETWEEN 1 AND 3), -- 1 active, 2 released, 3 reclaimed
    granted_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    -- The lease's funding chain, leaf first, and what each of its accounts
    -- paid: funded_allowance[i] from its allowance of the period that
    -- started at funded_period_start[i], funded_top_up[i] from top-ups.
    funders             text[] NOT NULL,
    funded_allowance    bigint[] NOT NULL,
    funded_top_up       bigint[] NOT NULL,
    funded_period_start bigint[] NOT NULL,

    CONSTRAINT bounded_spend CHECK (used::numeric + credited <= granted),
    CONSTRAINT active_credits_nothing CHECK (state <> 1 OR credited = 0),
    CONSTRAINT one_lease_per_token UNIQUE (account, token),
    CONSTRAINT funders_shape CHECK (
        array_ndims(funders) = 1 AND cardinality(funders) BETWEEN 1 AND 3
        AND array_position(funders, NULL) IS NULL
        AND cardinality(funded_allowance) = cardinality(funders) AND array_position(funded_allowance, NULL) IS NULL
        AND cardinality(funded_top_up) = cardinality(funders) AND array_position(funded_top_up, NULL) IS NULL
        AND cardinality(funded_period_start) = cardinality(funders) AND array_position(funded_period_start, NULL) IS NULL),
    -- Every funder pays the whole grant, from money it had.
    CONSTRAINT funders_pay_the_grant CHECK (
        0 <= ALL (funded_allowance) AND 0 <= ALL (funded_top_up)
        AND funded_allowance[1]::numeric + funded_top_up[1] = granted
        AND (cardinality(funders) < 2 OR funded_allowance[2]::numeric + funded_top_up[2] = granted)
        AND (cardinality(funders) < 3 OR funded_allowance[3]::numeric + funded_top_up[3] = granted))
);
-- Reclaim: active leases that expire first.
CREATE INDEX leases_due ON leases (expires_at, id) WHERE state = 1;

-- Ingest idempotency: every event id seen, with its verdict (1 accepted,
-- 3 rejected), until ForgetEvents drops it.
CREATE TABLE events (
    id          bytea PRIMARY KEY CHECK (octet_length(id) = 16),
    ingested_at bigint NOT NULL,
    verdict     smallint NOT NULL CHECK (verdict IN (1, 3))
);
CREATE INDEX events_by_age ON events (ingested_at, id);

-- Each account's most recent accepted usage, for UsageOf. lease_id and
-- token hold the event's uint64 fields bit for bit.
CREATE TABLE usage (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account     text NOT NULL REFERENCES accounts (id),
    event_id    bytea NOT NULL,
    source      smallint NOT NULL CHECK (source BETWEEN 1 AND 3), -- 1 lease, 2 overage, 3 post-paid
    lease_id    bigint NOT NULL,
    token       bigint NOT NULL,
    units       bigint NOT NULL CHECK (units > 0),
    occurred_at bigint NOT NULL
);
CREATE INDEX usage_by_account ON usage (account, seq);

-- Every unit of usage ever accepted, per event account and source: what
-- the reconciliation query compares Settled and lease usage with. Unlike
-- events and usage it is never pruned.
CREATE TABLE usage_totals (
    account text NOT NULL REFERENCES accounts (id),
    source  smallint NOT NULL CHECK (source BETWEEN 1 AND 3),
    events  bigint NOT NULL CHECK (events > 0),
    units   bigint NOT NULL CHECK (units > 0),
    PRIMARY KEY (account, source)
);

CREATE TABLE keys (
    id         text PRIMARY KEY CHECK (octet_length(id) BETWEEN 1 AND 256),
    account    text NOT NULL REFERENCES accounts (id),
    digest     bytea NOT NULL CHECK (octet_length(digest) = 32),
    created_at bigint NOT NULL,
    revoked    boolean NOT NULL
);
CREATE INDEX keys_by_account ON keys (account, id);

CREATE TABLE platform_tokens (
    id         text PRIMARY KEY CHECK (octet_length(id) BETWEEN 1 AND 256),
    digest     bytea NOT NULL CHECK (octet_length(digest) = 32),
    created_at bigint NOT NULL,
    revoked    boolean NOT NULL
);

-- Store-wide values set once, such as the admin token digest.
CREATE TABLE settings (
    name  text PRIMARY KEY,
    value bytea NOT NULL
);

-- Gapless sequences. A counter's row lock is held until commit, so its
-- numbers are also committed in order: a reader that has seen n has seen
-- every number below it.
CREATE TABLE counters (
    name  text PRIMARY KEY,
    value bigint NOT NULL CHECK (value >= 0)
);
INSERT INTO counters (name, value) VALUES ('audit', 0), ('changes', 0);

CREATE TABLE audit (
    seq    bigint PRIMARY KEY CHECK (seq >= 1),
    at     bigint NOT NULL,
    actor  text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    before bytea,
    after  bytea
);

-- The change log: one row per change to an account's configuration
-- (creation, status, policy, budget and rollover, deposits), a key, a
-- platform token or the admin token, appended in the transaction that
-- made it, with ids in commit order (counters 'changes'), and announced
-- with NOTIFY tollgated_changes, '<id>'. Money moved by leases and usage
-- is not a change: it is the data plane's traffic.
CREATE TABLE changes (
    id       bigint PRIMARY KEY CHECK (id >= 1),
    kind     text NOT NULL CHECK (kind IN ('account', 'status', 'policy', 'budget', 'deposit',
                                           'key', 'platform_token', 'admin_token')),
    account  text,
    key_id   text,
    token_id text,
    at       timestamptz NOT NULL DEFAULT now()
);
