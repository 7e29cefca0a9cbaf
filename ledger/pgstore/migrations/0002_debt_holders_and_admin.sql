-- What the ledger gained since 0001: overage is debt that arriving funds
-- repay first (accounts.repaid, and no balance beside a debt); leases name
-- the node that holds them; keys have a name, an expiry and a last use;
-- the admin API has named tokens beside the bootstrap one; the server
-- secret's fingerprint is kept. Ids sort as bytes, as the bbolt backend
-- sorts them, whatever the database's collation.

-- Ids in byte order: listings and their cursors ("id order") must not
-- depend on the locale the database was created with. Rebuilds the
-- primary keys and the indexes that lead with these columns.
ALTER TABLE accounts
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN parent TYPE text COLLATE "C";
ALTER TABLE keys
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN account TYPE text COLLATE "C";
ALTER TABLE platform_tokens ALTER COLUMN id TYPE text COLLATE "C";

-- Debt. Overage + repaid is every unit ever billed beyond funding; repaid
-- is history, not a term of the conservation equation.
ALTER TABLE accounts ADD COLUMN repaid bigint NOT NULL DEFAULT 0 CHECK (repaid >= 0);
ALTER TABLE accounts ALTER COLUMN repaid DROP DEFAULT;

-- Debts that 0001 let stand beside a balance are repaid from it, top-ups
-- first and then allowance, as the ledger's rules would have had it. Both
-- sides of the equation shrink by what is repaid, so it still holds.
UPDATE accounts AS a
SET top_up_left    = a.top_up_left - r.from_top_up,
    allowance_left = a.allowance_left - r.from_allowance,
    overage        = a.overage - r.from_top_up - r.from_allowance,
    repaid         = a.repaid + r.from_top_up + r.from_allowance
FROM (SELECT id, least(overage, top_up_left) AS from_top_up,
             least(overage - least(overage, top_up_left), allowance_left) AS from_allowance
      FROM accounts
      WHERE overage > 0 AND (top_up_left > 0 OR allowance_left > 0)) AS r
WHERE a.id = r.id;

-- An account that owes holds no balance: a balance beside a debt would
-- admit work the debt should stop.
ALTER TABLE accounts ADD CONSTRAINT no_balance_beside_debt
    CHECK (overage = 0 OR (allowance_left = 0 AND top_up_left = 0));

-- The node that holds a lease (its --node-id): after a crash it alone
-- releases it. Leases granted before 0002 name no holder ('').
ALTER TABLE leases ADD COLUMN holder text NOT NULL DEFAULT '' CHECK (octet_length(holder) <= 256);
ALTER TABLE leases ALTER COLUMN holder DROP DEFAULT;

-- Keys: the operator's label, when the key stops working (0: never) and
-- when it was last reported used (0: never).
ALTER TABLE keys
    ADD COLUMN name text NOT NULL DEFAULT '' CHECK (octet_length(name) <= 256),
    ADD COLUMN expires_at bigint NOT NULL DEFAULT 0,
    ADD COLUMN last_used bigint NOT NULL DEFAULT 0;
ALTER TABLE keys
    ALTER COLUMN name DROP DEFAULT,
    ALTER COLUMN expires_at DROP DEFAULT,
    ALTER COLUMN last_used DROP DEFAULT;
-- ExpireKeys: live keys with an expiry, earliest first.
CREATE INDEX keys_due ON keys (expires_at, id) WHERE NOT revoked AND expires_at <> 0;

-- The admin API's tokens. The one the first node started with is
-- 'bootstrap'; 0001 kept only its digest, in settings.
CREATE TABLE admin_tokens (
    id         text COLLATE "C" PRIMARY KEY CHECK (octet_length(id) BETWEEN 1 AND 256),
    name       text NOT NULL CHECK (octet_length(name) <= 256),
    digest     bytea NOT NULL CHECK (octet_length(digest) = 32),
    created_at bigint NOT NULL,
    revoked    boolean NOT NULL
);
INSERT INTO admin_tokens (id, name, digest, created_at, revoked)
SELECT 'bootstrap', 'bootstrap', value, 0, false FROM settings WHERE name = 'admin_token_digest';
DELETE FROM settings WHERE name = 'admin_token_digest';
