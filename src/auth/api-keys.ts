/** Merchant API keys: random secrets shown once, stored only as SHA-256 hashes, revocable. */
import { AppError } from "../common/errors";
import { isAddress } from "viem";
import type { Sql } from "../db/client";
import { lockForTransaction } from "../db/advisory-lock";
import { hashSecret, randomId, randomSecret } from "./hash";

/** Every API key starts with this, so it is recognizable (and findable by secret scanners). */
const API_KEY_PREFIX = "sk_live_";

/** How many leading characters of a key are kept in clear (`prefix` column) to tell keys apart. */
const DISPLAY_PREFIX_LENGTH = API_KEY_PREFIX.length + 4;

/** `last_used_at` is written at most once per this many seconds per key, not on every request. */
const LAST_USED_RESOLUTION_S = 60;

/** Longest accepted label. */
const MAX_LABEL_LENGTH = 200;

/** Most active (not revoked) keys a merchant may hold. */
export const MAX_ACTIVE_KEYS = 100;

/** Thrown when a merchant already holds MAX_ACTIVE_KEYS active keys. */
export class ApiKeyLimitError extends AppError {}

/** Thrown for a merchant that is not a 0x + 40 hex address. */
export class InvalidMerchantError extends AppError {}

/** Thrown for a label that is too long or has control characters. */
export class InvalidLabelError extends AppError {}

/** A newly created key: `key` is the secret, returned this once and never stored. */
export type CreatedApiKey = { id: string; key: string; merchant: string; chain_id: number | null };

/** A stored key as listed (never the secret, never its hash). */
export type ApiKeyInfo = {
  id: string;
  merchant: string;
  prefix: string;
  label: string | null;
  /** The one chain the key reads (a key minted by a SIWE session), or null: every chain. */
  chain_id: number | null;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
};

/** The key a request authenticated with; `chainId` null: every chain. */
export type ApiKeyMatch = { id: string; merchant: string; chainId: number | null };

const chainOf = (v: string | number | null): number | null => (v === null ? null : Number(v));

/** Lowercases a merchant address; throws InvalidMerchantError unless it is 0x + 40 hex. */
export function normalizeMerchant(merchant: string): string {
  const m = merchant.trim();
  if (!/^0x[0-9a-fA-F]{40}$/.test(m) || !isAddress(m, { strict: false })) {
    throw new InvalidMerchantError(`merchant ${JSON.stringify(merchant)} is not an address (0x + 40 hex)`);
  }
  return m.toLowerCase();
}

function normalizeLabel(label: string | undefined): string | null {
  if (label === undefined) return null;
  const l = label.trim();
  if (l.length > MAX_LABEL_LENGTH) throw new InvalidLabelError(`label is longer than ${MAX_LABEL_LENGTH} characters`);
  if (/[\u0000-\u001f\u007f]/.test(l)) throw new InvalidLabelError("label must not contain control characters");
  return l || null;
}

function iso(d: Date | string | null): string | null {
  return d === null ? null : new Date(d).toISOString();
}

/**
 * Creates a key for `merchant`, reading only `chainId` when given (a key minted by a SIWE session) or every chain;
 * the returned `key` is the only copy of the secret. Throws ApiKeyLimitError when the merchant already holds
 * MAX_ACTIVE_KEYS active keys: counted under a lock on the merchant, so concurrent creates cannot pass the cap together.
 */
export async function createApiKey(
  sql: Sql,
  opts: { merchant: string; label?: string; chainId?: number | null },
): Promise<CreatedApiKey> {
  const merchant = normalizeMerchant(opts.merchant);
  const label = normalizeLabel(opts.label);
  const chainId = opts.chainId ?? null;
  const id = randomId("key_");
  const key = randomSecret(API_KEY_PREFIX);
  await sql.begin(async (tx) => {
    await lockForTransaction(tx, `api_keys:${merchant}`);
    const [{ n }] = await tx<[{ n: number }]>`
      select count(*)::int as n from api_keys where merchant = ${merchant} and revoked_at is null`;
    if (n >= MAX_ACTIVE_KEYS) {
      throw new ApiKeyLimitError(
        `a merchant holds at most ${MAX_ACTIVE_KEYS} active API keys: revoke one before creating another`,
      );
    }
    await tx`
      insert into api_keys (id, merchant, key_hash, prefix, label, chain_id)
      values (${id}, ${merchant}, ${hashSecret(key)}, ${key.slice(0, DISPLAY_PREFIX_LENGTH)}, ${label}, ${chainId})`;
  });
  return { id, key, merchant, chain_id: chainId };
}

/** Revokes a key; true when it existed and was active, false when unknown or already revoked. */
export async function revokeApiKey(sql: Sql, id: string): Promise<boolean> {
  const rows = await sql`update api_keys set revoked_at = now() where id = ${id} and revoked_at is null returning id`;
  return rows.length > 0;
}

/** Lists keys (all, or one merchant's; with `chainId`, only the keys of that chain), oldest first. */
export async function listApiKeys(sql: Sql, merchant?: string, chainId?: number): Promise<ApiKeyInfo[]> {
  const ofChain = chainId === undefined ? sql`` : sql`and chain_id = ${chainId}`;
  const filter = merchant === undefined ? sql`` : sql`where merchant = ${normalizeMerchant(merchant)} ${ofChain}`;
  const rows = await sql<
    (Omit<ApiKeyInfo, "chain_id" | "created_at" | "last_used_at" | "revoked_at"> & {
      chain_id: string | null;
      created_at: Date;
      last_used_at: Date | null;
      revoked_at: Date | null;
    })[]
  >`
    select id, merchant, prefix, label, chain_id, created_at, last_used_at, revoked_at
    from api_keys ${filter}
    order by created_at, id`;
  return rows.map((r) => ({
    id: r.id,
    merchant: r.merchant,
    prefix: r.prefix,
    label: r.label,
    chain_id: chainOf(r.chain_id),
    created_at: iso(r.created_at)!,
    last_used_at: iso(r.last_used_at),
    revoked_at: iso(r.revoked_at),
  }));
}

/**
 * Finds the active key whose hash matches `key` (one indexed lookup); null when unknown or revoked.
 * No cache: a revocation takes effect on the next request. `last_used_at` is refreshed only when it is
 * older than LAST_USED_RESOLUTION_S, so a busy key costs one extra write per minute, not per request.
 */
export async function findApiKey(sql: Sql, key: string): Promise<ApiKeyMatch | null> {
  const [row] = await sql<{ id: string; merchant: string; chain_id: string | null; stale: boolean }[]>`
    select id, merchant, chain_id,
      (last_used_at is null or last_used_at < now() - make_interval(secs => ${LAST_USED_RESOLUTION_S})) as stale
    from api_keys
    where key_hash = ${hashSecret(key)} and revoked_at is null`;
  if (!row) return null;
  if (row.stale) {
    await sql`
      update api_keys set last_used_at = now()
      where id = ${row.id}
        and (last_used_at is null or last_used_at < now() - make_interval(secs => ${LAST_USED_RESOLUTION_S}))`;
  }
  return { id: row.id, merchant: row.merchant, chainId: chainOf(row.chain_id) };
}

/**
 * Revokes a key of `merchant` (a merchant revoking its own key); true when the merchant owns a key with that id
 * (revoking one already revoked keeps its first revocation time), false for an unknown id or another merchant's key.
 * With `chainId`, only a key of that chain (a chain-scoped session never revokes an all-chain or another chain's key).
 */
export async function revokeMerchantApiKey(sql: Sql, merchant: string, id: string, chainId?: number): Promise<boolean> {
  const ofChain = chainId === undefined ? sql`` : sql`and chain_id = ${chainId}`;
  const rows = await sql`
    update api_keys set revoked_at = coalesce(revoked_at, now())
    where id = ${id} and merchant = ${normalizeMerchant(merchant)} ${ofChain}
    returning id`;
  return rows.length > 0;
}
