-- A credential signed on one chain acts on that chain only: an API key minted by a SIWE session, and a webhook
-- endpoint created by a chain-scoped credential, carry that chain. Null: every chain (the CLI's keys, older rows).
alter table api_keys add column chain_id bigint;
alter table webhook_endpoints add column chain_id bigint;
