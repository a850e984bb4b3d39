-- Secondary indexes an initial backfill goes without (src/db/deferred-indexes.ts): dropped when the indexer starts on
-- empty tables far below the head, built before the batch that reaches it. A row is an index that is missing; its
-- definition is what pg_get_indexdef gave when it was dropped. Migrations build them first (src/db/migrate.ts).
create table deferred_indexes (
  name         text primary key,
  definition   text not null,
  deferred_at  timestamptz not null default now()
);
