/**
 * `bun run status`: one screen of what the service is doing, from the environment's database (DATABASE_URL, else
 * the embedded PGlite in DATA_DIR, or the running service that holds it, through its control endpoint): per chain
 * the index against the head, progress, ETA and the last reorg; the keeper's balance and last hour; webhook
 * endpoints and the delivery backlog; renewals at risk per chain ("not computed yet" before the first outlook). Exit 1
 * when something needs attention, naming it.
 *
 *   bun run status [--json]
 */
import { formatEta } from "../domain/progress";
import { gatherStatus, type ChainStatus, type StatusReport } from "../http/features/control/status";
import { callControl, openLocal, parseFlags, runCli, UsageError } from "./common";

const USAGE = `usage:
  bun run status [--json]   what the service is doing; exit 1 when something needs attention`;

/** A parsed command line. */
export type StatusCommand = { cmd: "show"; json: boolean } | { cmd: "help" };

/** Parses the arguments; throws UsageError. */
export function parseStatusArgs(argv: string[]): StatusCommand {
  if (argv[0] === "help" || argv[0] === "--help" || argv[0] === "-h") return { cmd: "help" };
  const { flags, positional } = parseFlags(argv, [], ["json"]);
  if (positional.length) throw new UsageError(`unexpected argument ${positional[0]}`);
  return { cmd: "show", json: flags.json === true };
}

type Source = { report: () => Promise<StatusReport>; close: () => Promise<void> };

async function openSource(): Promise<Source> {
  const local = await openLocal();
  if (local.kind === "control") {
    const info = local.control;
    return { report: () => callControl<StatusReport>(info, "GET", "/status"), close: async () => {} };
  }
  return { report: () => gatherStatus(local.db.sql, local.config), close: () => local.db.close() };
}

const n = (v: string | number | null) => (v === null ? "?" : Number(v).toLocaleString("en-US"));
const ago = (iso: string | null, now: number) =>
  iso === null ? "never" : `${formatEta(Math.max(0, (now - Date.parse(iso)) / 1000))} ago`;

function chainLine(c: ChainStatus, now: number): string {
  const parts = [`block ${n(c.indexed_block)} of ${n(c.head_block)}`, `${n(c.lag_blocks)} behind`];
  if (c.progress !== null && c.progress < 1) {
    const eta = c.eta_s === null ? "unknown" : formatEta(c.eta_s);
    parts.push(`syncing ${(c.progress * 100).toFixed(1)} % · ETA ${eta}`);
  } else if (c.progress === 1) parts.push("caught up");
  parts.push(`head seen ${ago(c.head_seen_at, now)}`);
  const reorg = c.last_reorg_at ? `${ago(c.last_reorg_at, now)} (${c.last_reorg_depth} blocks)` : "none";
  parts.push(`last reorg ${reorg}`);
  if (c.rpc_cu_per_hour !== null && c.rpc_cu_per_hour !== undefined) parts.push(`RPC ${n(c.rpc_cu_per_hour)} CU/hour`);
  return `  ${c.chain_id}  ${parts.join(" · ")}`;
}

/** The report as a screen of text. */
export function formatStatus(r: StatusReport): string {
  const now = Date.parse(r.generated_at);
  const out = ["chains", ...(r.chains.length ? r.chains.map((c) => chainLine(c, now)) : ["  none indexed"])];
  if (!r.keeper) out.push("keeper  not configured here (KEEPER_PRIVATE_KEY unset)");
  else {
    out.push(`keeper  ${r.keeper.address}`);
    for (const k of r.keeper.chains) {
      const funds =
        k.balance === null
          ? `balance unknown (${k.error})`
          : `balance ${k.balance.replace(/(\.\d{6})\d+$/, "$1")} (native) (${n(k.charges_funded)} charges)`;
      out.push(
        `  ${k.chain_id}  ${funds} · last hour: ${k.charges_sent_1h} charges sent, ${k.charges_failed_1h} failed`,
      );
    }
  }
  const w = r.webhooks;
  const oldest = w.oldest_pending_age_s === null ? "" : `, oldest ${formatEta(w.oldest_pending_age_s)}`;
  const queued =
    w.queued_ranges === 0
      ? ""
      : ` · ${w.queued_ranges} ranges of events waiting for their deliveries` +
        (w.oldest_ready_range_age_s === null ? " (held while a chain catches up)" : "");
  out.push(
    `webhooks  ${w.endpoints} endpoints (${w.enabled} enabled, ${w.disabled.length} disabled) · ` +
      `${w.pending_deliveries} pending deliveries${oldest}${queued}`,
  );
  for (const d of w.disabled)
    out.push(`  disabled ${d.id} (${d.host}) ${d.merchant}${d.reason ? `: ${d.reason}` : ""}`);
  const risk = r.renewals_at_risk;
  if (risk === null) out.push("renewals at risk  not computed yet");
  else if (risk.length === 0) out.push("renewals at risk  none due");
  else {
    out.push("renewals at risk");
    for (const c of risk) {
      const reasons = Object.entries(c.by_reason)
        .filter(([, v]) => v > 0)
        .map(([k, v]) => `${k} ${n(v)}`);
      out.push(
        `  ${c.chain_id}  ${n(c.at_risk)} of ${n(c.due)} due renewals` +
          (reasons.length ? ` · ${reasons.join(", ")}` : ""),
      );
    }
  }
  const deferred = r.deferred_indexes;
  if (deferred.length > 0) {
    out.push(
      `indexes  ${deferred.length} left out until the initial backfill reaches the head (the API scans, the keeper ` +
        `waits): ${deferred.join(", ")}`,
    );
  }
  if (r.attention.length === 0) out.push("", "nothing needs attention");
  else out.push("", "needs attention:", ...r.attention.map((a) => `  ✗ ${a}`));
  return out.join("\n");
}

async function run(command: Extract<StatusCommand, { cmd: "show" }>, source: Source): Promise<void> {
  const report = await source.report();
  console.log(command.json ? JSON.stringify(report, null, 2) : formatStatus(report));
  if (report.attention.length > 0) process.exitCode = 1;
}

if (import.meta.main) {
  await runCli({ name: "status", usage: USAGE, parse: parseStatusArgs, open: openSource, run });
}
