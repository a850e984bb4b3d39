/**
 * Quarantine of plan tokens whose reads fail pass after pass (renewals.md §3, a hostile or broken `balanceOf`): a
 * token the node judged failing in `afterPasses` passes in a row is left out of the reads for `forS` seconds (its
 * subscriptions keep their previous outlooks), then tried again. A failure of the node itself never counts.
 */

/** The quarantine of one chain's loop. */
export type TokenQuarantine = {
  /** Whether `token` (lowercase) is left out of the reads now. */
  has(token: string): boolean;
  /** After a pass: the tokens it read and those of them the node judged failing. Returns the tokens quarantined now. */
  record(read: Iterable<string>, rejected: ReadonlySet<string>): string[];
  /** Tokens in quarantine now. */
  size(): number;
};

/** Options of `createTokenQuarantine`. */
export type QuarantineOptions = { afterPasses: number; forS: number; now: () => number };

/** Creates an empty quarantine. */
export function createTokenQuarantine(opts: QuarantineOptions): TokenQuarantine {
  const streaks = new Map<string, number>();
  const until = new Map<string, number>();
  const has = (token: string) => {
    const t = until.get(token);
    if (t === undefined) return false;
    if (t > opts.now()) return true;
    until.delete(token); // served: tried again, and quarantined again only after another streak
    return false;
  };
  return {
    has,
    record(read, rejected) {
      const now: string[] = [];
      for (const token of read) {
        if (!rejected.has(token)) {
          streaks.delete(token);
          continue;
        }
        const n = (streaks.get(token) ?? 0) + 1;
        if (n < opts.afterPasses) {
          streaks.set(token, n);
          continue;
        }
        streaks.delete(token);
        until.set(token, opts.now() + opts.forS);
        now.push(token);
      }
      return now;
    },
    size: () => [...until.keys()].filter(has).length,
  };
}
