-- Incarnations. A node id lives again when its node starts on an empty
-- data directory (a lost volume; on Kubernetes the pod name is the id):
-- that is a new incarnation, whose leases and export mark are kept under
-- its own holder name ("id#n", ledger.Incarnation.Holder), so it can
-- neither release nor credit the leases of the life before it, nor take
-- that life's spool positions for its own. A lease keeps its holder's
-- grace, so whichever node reclaims it forfeits it when its holder said.

-- One row per node id: its current incarnation, the grace (--lease-grace)
-- the leases it acquires keep (-1: none registered yet), its last start.
CREATE TABLE nodes (
    node        text COLLATE "C" PRIMARY KEY
                CHECK (octet_length(node) BETWEEN 1 AND 256 AND position('#' in node) = 0),
    incarnation bigint NOT NULL CHECK (incarnation >= 1),
    grace       bigint NOT NULL CHECK (grace >= -1),
    started_at  bigint NOT NULL
);

-- Every node that holds a lease or an export mark today is incarnation 1
-- of its id: the data directory that wrote them is that incarnation.
INSERT INTO nodes (node, incarnation, grace, started_at)
SELECT DISTINCT n, 1, -1, 0
FROM (SELECT holder AS n FROM leases WHERE holder <> '' UNION SELECT node FROM export_marks) AS known
WHERE position('#' in n) = 0 AND octet_length(n) BETWEEN 1 AND 256;

-- A lease's grace: its holder's when it was granted; -1 for a lease
-- granted before, or by a node of an older build still running while a
-- newer one migrated the database (the default): the reclaiming node's
-- grace applies to it.
ALTER TABLE leases ADD COLUMN grace bigint NOT NULL DEFAULT -1 CHECK (grace >= -1);

-- LeasesOf: the leases a holder still answers for (active, or forfeited
-- and not restored). Released ones, the bulk, are not indexed.
CREATE INDEX leases_held ON leases (holder, id) WHERE state <> 2;
