-- Earlier versions of a claim's transaction at the same nonce (a replacement's predecessors, oldest first): a keeper
-- killed after recording a replacement but before broadcasting it leaves a claim naming a transaction no node has,
-- while the version before it is pending; the next holder of the key adopts that one (src/keeper/takeover.ts).
alter table keeper_claims add column earlier_tx_hashes text[] not null default '{}';
