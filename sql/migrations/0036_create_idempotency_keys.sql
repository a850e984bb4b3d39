-- Answers of POSTs sent with an `Idempotency-Key` by a merchant credential, kept 24 hours so a retried request gets
-- the first answer instead of acting twice (src/http/plugins/idempotency.ts). The key itself is not stored, only its
-- hash; the answer (which may hold a secret shown once, such as a new API key) is encrypted with a key derived from
-- the Idempotency-Key (AES-256-GCM, base64), so a reader of this table alone cannot recover it. `status` is null
-- while the first request is in flight; `locked_at` lets a later request take over a claim whose process died.
create table idempotency_keys (
  merchant text not null,
  key_hash text not null,
  fingerprint text not null,
  status integer,
  response text,
  locked_at timestamptz not null default now(),
  created_at timestamptz not null default now(),
  primary key (merchant, key_hash)
);

create index idempotency_keys_created_at on idempotency_keys (created_at);
