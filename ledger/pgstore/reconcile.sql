-- Reconciliation: every row is a broken ledger invariant; a sound ledger
-- returns none. One read-only statement: it locks nothing and sees one
-- snapshot, so it can run beside live nodes.
--
--   psql "$TOLLGATED_LEDGER" -f reconcile.sql
--
-- Columns: rule (what is broken), account, lease (when the rule is about
-- one lease), detail (the numbers).
WITH lease_funding AS ( -- one row per funder of every lease
    SELECT l.id, l.account AS lessee, l.state, l.granted, l.used, l.credited,
           f.account, f.allowance, f.top_up
    FROM leases AS l,
         unnest(l.funders, l.funded_allowance, l.funded_top_up) AS f (account, allowance, top_up)
), held AS ( -- L2: units active leases hold, per funder
    SELECT account, sum(granted - used) AS units FROM lease_funding WHERE state = 1 GROUP BY account
), forfeited AS ( -- L3: units ended leases forfeited and no late usage claimed, per funder
    SELECT account, sum(granted - used - credited) AS units FROM lease_funding WHERE state <> 1 GROUP BY account
), charged AS ( -- usage accepted for an account is billed to it and its ancestors (the metered ones pay)
    SELECT x.payer AS account, sum(t.units) AS units
    FROM usage_totals AS t
    JOIN accounts AS d ON d.id = t.account
    LEFT JOIN accounts AS p ON p.id = d.parent,
    LATERAL (VALUES (d.id), (d.parent), (p.parent)) AS x (payer)
    WHERE x.payer IS NOT NULL
    GROUP BY x.payer
), lease_used AS ( -- usage settled against each account's leases
    SELECT account, sum(used) AS units FROM leases GROUP BY account
)
SELECT 'L1 conservation' AS rule, a.id AS account, NULL::bigint AS lease,
       format('deposited %s + overage %s <> allowance left %s + top-ups left %s + outstanding %s + settled %s + loss %s + expired %s',
              a.deposited, a.overage, a.allowance_left, a.top_up_left, a.outstanding, a.settled, a.loss, a.expired) AS detail
FROM accounts AS a
WHERE a.deposited::numeric + a.overage
   <> a.allowance_left::numeric + a.top_up_left + a.outstanding + a.settled + a.loss + a.expired
UNION ALL
SELECT 'L1 debt beside balance', a.id, NULL,
       format('owes overage %s but holds allowance %s + top-ups %s', a.overage, a.allowance_left, a.top_up_left)
FROM accounts AS a
WHERE a.overage > 0 AND (a.allowance_left > 0 OR a.top_up_left > 0)
UNION ALL
SELECT 'L2 outstanding', a.id, NULL,
       format('outstanding %s, but its active leases hold %s', a.outstanding, coalesce(h.units, 0))
FROM accounts AS a LEFT JOIN held AS h ON h.account = a.id
WHERE a.outstanding <> coalesce(h.units, 0)
UNION ALL
SELECT 'L3 loss', a.id, NULL,
       format('loss %s, but its ended leases forfeited %s', a.loss, coalesce(f.units, 0))
FROM accounts AS a LEFT JOIN forfeited AS f ON f.account = a.id
WHERE a.loss <> coalesce(f.units, 0)
UNION ALL
SELECT 'L4 bounded spend', l.account, l.id,
       format('state %s: used %s + credited %s of granted %s', l.state, l.used, l.credited, l.granted)
FROM leases AS l
WHERE l.used::numeric + l.credited > l.granted OR (l.state = 1 AND l.credited <> 0)
UNION ALL
SELECT 'L4 funding', f.account, f.id,
       format('funder paid %s + %s of granted %s', f.allowance, f.top_up, f.granted)
FROM lease_funding AS f
WHERE f.allowance::numeric + f.top_up <> f.granted
UNION ALL
SELECT 'L4 funder', f.account, f.id,
       format('funder of a lease of %s is not %s or a metered ancestor of it', f.lessee, f.lessee)
FROM lease_funding AS f
JOIN accounts AS h ON h.id = f.lessee
LEFT JOIN accounts AS p ON p.id = h.parent
LEFT JOIN accounts AS a ON a.id = f.account
WHERE a.id IS NULL OR a.unmetered OR f.account NOT IN (h.id, coalesce(h.parent, ''), coalesce(p.parent, ''))
UNION ALL
SELECT 'L5 allowance', a.id, NULL,
       format('allowance left %s exceeds the allowance %s', a.allowance_left, a.budget_allowance)
FROM accounts AS a
WHERE a.allowance_left > a.budget_allowance
UNION ALL
SELECT 'settled vs usage', a.id, NULL,
       format('settled %s, but the usage ingested for it and its descendants is %s', a.settled,
              CASE WHEN a.unmetered THEN 0 ELSE coalesce(c.units, 0) END)
FROM accounts AS a LEFT JOIN charged AS c ON c.account = a.id
WHERE a.settled <> CASE WHEN a.unmetered THEN 0 ELSE coalesce(c.units, 0) END
UNION ALL
SELECT 'lease usage', a.id, NULL,
       format('its leases used %s, but the lease usage ingested for it is %s', coalesce(u.units, 0), coalesce(t.units, 0))
FROM accounts AS a
LEFT JOIN lease_used AS u ON u.account = a.id
LEFT JOIN usage_totals AS t ON t.account = a.id AND t.source = 1
WHERE coalesce(u.units, 0) <> coalesce(t.units, 0)
UNION ALL
SELECT 'hierarchy', c.id, NULL,
       format('scope %s under %s of scope %s', c.scope, p.id, p.scope)
FROM accounts AS c JOIN accounts AS p ON p.id = c.parent
WHERE c.scope <> p.scope - 1
ORDER BY rule, account, lease;
