/** Metrics of the renewal outlook (renewals.md): evaluations, their time, outlooks by reason, prediction accuracy. */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import type { Sql } from "../db/client";
import { heldOutlooks } from "../renewals/sql";

/** What the renewal loop and hook report into. */
export type RenewalMetrics = ReturnType<typeof renewalMetrics>;

/** Registers the renewal metrics; `failed` counts a scrape-time read that failed. */
export function renewalMetrics(reg: Registry[], sql: Sql, failed: (metric: string) => void) {
  const evaluated = new Counter({
    name: "renewal_subscriptions_evaluated_total",
    help: "Subscriptions whose renewal outlook was evaluated, by chain",
    labelNames: ["chain_id"] as const,
    registers: reg,
  });
  const readFailures = new Counter({
    name: "renewal_read_failures_total",
    help: "Wallets whose renewal reads failed (their previous outlooks kept), by chain",
    labelNames: ["chain_id"] as const,
    registers: reg,
  });
  const quarantined = new Gauge({
    name: "renewal_quarantined_tokens",
    help: "Plan tokens whose renewal reads failed pass after pass, left out of the reads for now, by chain",
    labelNames: ["chain_id"] as const,
    registers: reg,
  });
  const quarantines = new Counter({
    name: "renewal_token_quarantines_total",
    help: "Times a plan token was quarantined (its renewal reads failed pass after pass), by chain",
    labelNames: ["chain_id"] as const,
    registers: reg,
  });
  const duration = new Histogram({
    name: "renewal_evaluation_duration_seconds",
    help: "Time of one renewal evaluation pass (reads and writes), by chain",
    labelNames: ["chain_id"] as const,
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: reg,
  });
  const predictions = new Counter({
    name: "renewal_predictions_total",
    help:
      "Charges (by the keeper or anyone) against the outlook that stood for them: predicted will_renew, a reason, " +
      "or none; actual succeeded or the failure reason",
    labelNames: ["predicted", "actual"] as const,
    registers: reg,
  });
  const outlooks: Gauge<"chain_id" | "outlook" | "reason"> = new Gauge({
    name: "renewal_outlooks",
    help: "Current renewal outlooks by chain, outlook and reason (read at scrape time)",
    labelNames: ["chain_id", "outlook", "reason"] as const,
    registers: reg,
    async collect() {
      try {
        const rows = await sql<{ chain_id: string; outlook: string; reason: string | null; n: number }[]>`
          select h.chain_id, h.outlook, h.reason, count(*)::int as n
          from ${heldOutlooks(sql)}
          group by 1, 2, 3`;
        outlooks.reset();
        for (const r of rows) outlooks.set({ chain_id: r.chain_id, outlook: r.outlook, reason: r.reason ?? "" }, r.n);
      } catch {
        failed("renewal_outlooks");
      }
    },
  });
  return {
    /** One evaluation pass of `chainId`. */
    pass: (
      chainId: number,
      r: {
        evaluated: number;
        failedWallets: number;
        seconds: number;
        quarantined?: number;
        newlyQuarantined?: string[];
      },
    ) => {
      const l = { chain_id: String(chainId) };
      if (r.quarantined !== undefined) quarantined.set(l, r.quarantined);
      if (r.newlyQuarantined?.length) quarantines.inc(l, r.newlyQuarantined.length);
      evaluated.inc(l, r.evaluated);
      if (r.failedWallets) readFailures.inc(l, r.failedWallets);
      duration.observe(l, r.seconds);
    },
    /** One charge attempt indexed against the outlook that stood for it. */
    prediction: (predicted: string, actual: string) => predictions.inc({ predicted, actual }),
  };
}
