/** Overview: revenue per token over time (bars of gross revenue: net and fees), run rate, subscribers by status, failures by reason. */
import { api, qs } from "../api";
import { timeChart } from "../chart";
import { card, h, replace } from "../dom";
import { formatAmount, formatDate, formatExact, toFloat } from "../format";
import { STATUSES, type Stats } from "../types";
import type { Page } from "./page";
import { renewalsCard } from "./renewals";

const INTERVALS = [
  ["day", "Daily · 30 days"],
  ["week", "Weekly · 13 weeks"],
  ["month", "Monthly · 12 months"],
] as const;

const REASON_COLORS: Record<string, string> = {
  InsufficientBalance: "#e5484d",
  InsufficientAllowance: "#f5a524",
  AllowanceExpired: "#8e4ec6",
  TransferFailed: "#0090ff",
};

type TokenTotals = {
  token: string | null;
  currency: string | null;
  decimals: number | null;
  gross: bigint;
  fees: bigint;
  net: bigint;
  charges: number;
};

/** Sums the revenue rows per token over the whole range (exact, BigInt). */
export function revenueTotals(stats: Stats): TokenTotals[] {
  const by = new Map<string, TokenTotals>();
  for (const r of stats.revenue) {
    const key = r.token ?? "";
    const t = by.get(key) ?? {
      token: r.token,
      currency: r.currency,
      decimals: r.token_decimals,
      gross: 0n,
      fees: 0n,
      net: 0n,
      charges: 0,
    };
    t.gross += BigInt(r.gross);
    t.fees += BigInt(r.fees);
    t.net += BigInt(r.net);
    t.charges += r.charges;
    by.set(key, t);
  }
  return [...by.values()].sort((a, b) => (a.currency ?? "~").localeCompare(b.currency ?? "~"));
}

function revenueCard(stats: Stats, totals: TokenTotals[]): HTMLElement {
  const x = stats.periods.map((p) => Date.parse(p) / 1000);
  const blocks = totals.map((t) => {
    const rows = new Map(
      stats.revenue.filter((r) => (r.token ?? "") === (t.token ?? "")).map((r) => [r.period_start, r]),
    );
    const gross = stats.periods.map((p) => rows.get(p)?.gross ?? "0");
    const net = stats.periods.map((p) => rows.get(p)?.net ?? "0");
    const fees = stats.periods.map((p) => rows.get(p)?.fees ?? "0");
    const money = (v: bigint) => ({
      text: formatAmount(v.toString(), t.decimals, t.currency),
      exact: formatExact(v.toString(), t.decimals, t.currency),
      base: v.toString(),
    });
    return h(
      "div",
      { class: "token-block", dataset: { token: t.currency ?? t.token ?? "" } },
      h(
        "div",
        { class: "kpis" },
        kpi("Gross", money(t.gross), "gross"),
        kpi("Net", money(t.net), "net"),
        kpi("Fees", money(t.fees), "fees"),
        kpi("Charges", { text: t.charges.toLocaleString("en-US"), exact: "", base: String(t.charges) }, "charges"),
      ),
      // Bars of gross revenue per period: net at the bottom, the fee on top (each drawn at its cumulative height).
      timeChart({
        x,
        interval: stats.interval,
        hover: true,
        series: [
          {
            label: "Fees",
            color: "#f5a524",
            bars: true,
            values: gross.map((v) => toFloat(v, t.decimals)),
            display: fees.map((v) => formatAmount(v, t.decimals, t.currency)),
          },
          {
            label: "Net",
            color: "#635bff",
            bars: true,
            values: net.map((v) => toFloat(v, t.decimals)),
            display: net.map((v) => formatAmount(v, t.decimals, t.currency)),
          },
          {
            label: "Gross",
            color: "#1a1f36",
            legendOnly: true,
            values: gross.map((v) => toFloat(v, t.decimals)),
            display: gross.map((v) => formatAmount(v, t.decimals, t.currency)),
          },
        ],
        data: {
          token: t.token,
          currency: t.currency,
          token_decimals: t.decimals,
          periods: stats.periods,
          gross,
          net,
          fees,
        },
      }),
    );
  });
  return card("Revenue", blocks.length ? blocks : h("p", { class: "muted" }, "No charges in this range."));
}

/** A figure: rounded for reading, exact in its title, base units in `data-value` (what the API said). */
function kpi(label: string, value: { text: string; exact: string; base: string }, key: string): HTMLElement {
  return h(
    "div",
    { class: "kpi" },
    h("div", { class: "kpi-label" }, label),
    h("div", { class: "kpi-value", title: value.exact || null, dataset: { kpi: key, value: value.base } }, value.text),
  );
}

function runRateCard(stats: Stats): HTMLElement {
  const rows = stats.run_rate.map((r) =>
    h(
      "div",
      { class: "kpi", dataset: { runRate: r.currency ?? r.token ?? "" } },
      h("div", { class: "kpi-label" }, `${r.currency ?? "Unknown token"} · ${r.active_subscriptions} active`),
      h(
        "div",
        {
          class: "kpi-value",
          title: formatExact(r.amount_per_30d, r.token_decimals, r.currency),
          dataset: { value: r.amount_per_30d },
        },
        formatAmount(r.amount_per_30d, r.token_decimals, r.currency),
      ),
    ),
  );
  return card(
    "Run rate · per 30 days",
    rows.length ? h("div", { class: "kpis" }, rows) : h("p", { class: "muted" }, "No active subscriptions."),
  );
}

function statusCard(stats: Stats): HTMLElement {
  const created = stats.subscriptions.periods.reduce((n, p) => n + p.created, 0);
  const cancelled = stats.subscriptions.periods.reduce((n, p) => n + p.cancelled, 0);
  return card(
    "Subscribers",
    h(
      "ul",
      { class: "statuses" },
      STATUSES.map((s) =>
        h(
          "li",
          null,
          h("a", { href: `#/subscriptions?status=${s}` }, h("span", { class: `pill pill-${s.toLowerCase()}` }, s)),
          h("strong", { dataset: { status: s } }, String(stats.subscriptions.by_status[s])),
        ),
      ),
    ),
    h("p", { class: "muted small" }, `In this range: ${created} created, ${cancelled} cancelled.`),
  );
}

function failuresCard(stats: Stats): HTMLElement {
  const reasons = [...new Set(stats.failures.map((f) => f.reason))].sort();
  if (!reasons.length) return card("Failed charges", h("p", { class: "muted" }, "No failed charges in this range."));
  const x = stats.periods.map((p) => Date.parse(p) / 1000);
  const counts = (reason: string) => {
    const m = new Map(stats.failures.filter((f) => f.reason === reason).map((f) => [f.period_start, f.count]));
    return stats.periods.map((p) => m.get(p) ?? 0);
  };
  // Stacked bars: each series is drawn at its cumulative height, tallest first, so every reason stays visible.
  const raw = reasons.map((r) => ({ label: r, values: counts(r) }));
  const series = raw
    .map((s, i) => ({
      label: s.label,
      color: REASON_COLORS[s.label] ?? "#697386",
      values: stats.periods.map((_, p) => raw.slice(0, i + 1).reduce((n, r) => n + r.values[p]!, 0)),
      bars: true,
    }))
    .reverse();
  return card(
    "Failed charges",
    h(
      "ul",
      { class: "reasons" },
      reasons.map((r) =>
        h(
          "li",
          null,
          h("span", { class: "dot", dataset: { color: r } }),
          r,
          h(
            "strong",
            { dataset: { reason: r } },
            String(stats.failures.filter((f) => f.reason === r).reduce((n, f) => n + f.count, 0)),
          ),
        ),
      ),
    ),
    timeChart({
      x,
      interval: stats.interval,
      height: 180,
      series,
      valueFormat: (v) => (Number.isInteger(v) ? String(v) : ""),
      data: { periods: stats.periods, reasons: Object.fromEntries(raw.map((s) => [s.label, s.values])) },
    }),
  );
}

export const overviewPage: Page = {
  id: "overview",
  title: "Overview",
  async render({ credential, root, query, navigate }) {
    const interval = (INTERVALS.find(([v]) => v === query.get("interval")) ?? INTERVALS[0])[0];
    const select = h(
      "select",
      {
        "aria-label": "Period",
        onchange: (e: Event) => navigate(`#/overview?interval=${(e.target as HTMLSelectElement).value}`),
      },
      INTERVALS.map(([v, label]) => h("option", { value: v, selected: v === interval }, label)),
    );
    const body = h("div", { class: "grid" }, h("p", { class: "muted" }, "Loading…"));
    replace(root, h("div", { class: "page-head" }, h("h1", null, "Overview"), select), body);
    const { data: stats } = await api<Stats>(`/v0/stats/${credential.merchant}${qs({ interval })}`);
    const totals = revenueTotals(stats);
    root.dataset.stats = "loaded";
    replace(
      body,
      h(
        "p",
        { class: "muted small range" },
        `${formatDate(stats.since)} – ${formatDate(new Date(Date.parse(stats.until) - 1).toISOString())} · UTC`,
      ),
      revenueCard(stats, totals),
      renewalsCard(stats),
      h("div", { class: "two" }, runRateCard(stats), statusCard(stats)),
      failuresCard(stats),
    );
  },
};
