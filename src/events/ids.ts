/** Deterministic event ids: `evt_` + 40 hex digits of a SHA-256 over the fact's canonical parts. */
import { createHash } from "node:crypto";

/** The id of the fact named by `parts` (chain, block hash, position, kind, …): same parts, same id. */
export function eventIdOf(...parts: (string | number | bigint)[]): string {
  return `evt_${createHash("sha256").update(parts.join("|")).digest("hex").slice(0, 40)}`;
}
