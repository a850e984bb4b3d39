/**
 * Deterministic event ids. Most are `evt_` + 40 hex digits of a SHA-256 over the fact's canonical parts; an activity
 * event's id spells its chain position (`evt_` + chain id, block number, log index in fixed-width hex, then 34 hex
 * digits of the block hash: 64 characters), so a lookup by id is a primary-key lookup of its activity row. The
 * database derives it (`activity_event_id`, migration 0014); it is not stored.
 */
/** The id of the fact named by `parts` (chain, block hash, position, kind, …): same parts, same id. */
export function eventIdOf(...parts: (string | number | bigint)[]): string {
  // Bun's one-shot hash: node:crypto's Hash object costs as much again per id (a batch derives thousands).
  return `evt_${(Bun.CryptoHasher.hash("sha256", parts.join("|"), "hex") as string).slice(0, 40)}`;
}

/** What an event id looks like (`evt_` + up to 60 lowercase hex or base58 characters). */
export const EVENT_ID_PATTERN = /^evt_[0-9a-z]{1,60}$/;

const ACTIVITY_ID = /^evt_([0-9a-f]{10})([0-9a-f]{10})([0-9a-f]{6})[0-9a-f]{34}$/;

/** The chain position an activity event id names, or undefined for any other id. */
export function activityEventKey(id: string): { chainId: number; blockNumber: bigint; logIndex: number } | undefined {
  const m = ACTIVITY_ID.exec(id);
  return m
    ? { chainId: parseInt(m[1]!, 16), blockNumber: BigInt(`0x${m[2]}`), logIndex: parseInt(m[3]!, 16) }
    : undefined;
}
