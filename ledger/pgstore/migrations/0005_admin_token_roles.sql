-- Admin token roles. A token may do what its role allows (the admin API
-- maps each role to its permissions): admin everything, operator accounts,
-- budgets, deposits and keys, viewer reads, metrics /metrics only. Every
-- token stored before had all the power there was, so each is an admin,
-- the bootstrap token included; so is a token inserted by a node of an
-- older build still running while a newer one migrated the database (the
-- default), which is what that build meant it to be.
ALTER TABLE admin_tokens ADD COLUMN role text NOT NULL DEFAULT 'admin'
    CHECK (role IN ('admin', 'operator', 'viewer', 'metrics'));
