-- The nonce of the transaction a claim names, recorded with its hash before the transaction is broadcast. A keeper
-- taking over a dead holder's key reads it for a transaction its node never saw: one whose nonce another
-- transaction took can never be mined, and one whose nonce nothing holds is taken by the new holder's own sends.
alter table keeper_claims add column tx_nonce bigint;
