/**
 * Revenue: per token, MRR now (with ARR, ARPA, customers, LTV), MRR over time with its movements as stacked bars
 * (new, expansion, reactivation above zero; contraction, churn below), churn by reason (voluntary and involuntary)
 * with the revenue recovered, the rates per period, and cohort retention as a heatmap. Every number is the MRR and
 * cohorts API's, exact in base units in `data-value`.
 */
import { INVOLUNTARY_REASONS } from "../../domain/mrr";
import { api, downloadCsv, qs } from "../api";
import { timeChart, type Series } from "../chart";
import { card, h, replace, table } from "../dom";
import { formatAmount, formatDate, formatExact, toFloat } from "../format";
import type { CohortsResponse, MrrPeriod, MrrResponse } from "../types";
import { errorBox } from "./errors";
import type { Page } from "./page";

const INTERVALS = [
  ["week", "Weekly · 13 weeks"],
  ["month", "Monthly · 12 months"],
  ["day", "Daily · 30 days"],
] as const;

const COHORT_INTERVALS = [
  ["month", "Monthly cohorts"],
  ["week", "Weekly cohorts"],
] as const;

const KINDS = {
  new: { label: "New", color: "#635bff" },
  expansion: { label: "Expansion", color: "#00a67e" },
  reactivation: { label: "Reactivation", color: "#0090ff" },
  contraction: { label: "Contraction", color: "#f5a524" },
  churn: { label: "Churn", color: "#e5484d" },
} as const;
type Kind = keyof typeof KINDS;

const REASON_LABELS: Record<string, string> = {
  cancelled_by_subscriber: "Cancelled by the subscriber",
  cancelled_by_merchant: "Cancelled by you",
  blocked: "Blocked",
  paused: "Paused",
  InsufficientBalance: "Balance too low",
  InsufficientAllowance: "Allowance too low",
  AllowanceExpired: "Allowance expired",
  TransferFailed: "Token transfer failed",
  not_charged: "Not charged (no keeper ran)",
};
const REASON_COLORS: Record<string, string> = {
  cancelled_by_subscriber: "#8792a2",
  cancelled_by_merchant: "#545969",
  blocked: "#1a1f36",
  paused: "#c1c9d2",
  InsufficientBalance: "#e5484d",
  InsufficientAllowance: "#f5a524",
  AllowanceExpired: "#8e4ec6",
  TransferFailed: "#0090ff",
  not_charged: "#a3acb9",
};

type Token = MrrResponse["tokens"][number];
const involuntary = (reason: string) => (INVOLUNTARY_REASONS as readonly string[]).includes(reason);

/** Formatting of one token's amounts. */
function money(t: { token: string; currency: string | null; token_decimals: number | null }) {
  return {
    text: (base: string) => formatAmount(base, t.token_decimals, t.currency),
    exact: (base: string) => formatExact(base, t.token_decimals, t.currency),
    float: (base: string) => toFloat(base, t.token_decimals),
  };
}

/** A figure: rounded for reading, exact in its title, the API's value in `data-value`. */
function figure(label: string, key: string, value: string, text: string, exact = ""): HTMLElement {
  return h(
    "div",
    { class: "kpi" },
    h("div", { class: "kpi-label" }, label),
    h("div", { class: "kpi-value", title: exact || null, dataset: { kpi: key, value } }, text),
  );
}

/** "12.5 %" from a 6-digit decimal string; "—" for null. */
function percent(ratio: string | null): string {
  if (ratio === null) return "—";
  return `${(Number(ratio) * 100).toLocaleString("en-US", { maximumFractionDigits: 1 })} %`;
}

function nowCard(t: Token): HTMLElement {
  const m = money(t);
  return h(
    "div",
    { class: "kpis" },
    figure("MRR", "mrr", t.mrr, m.text(t.mrr), m.exact(t.mrr)),
    figure("ARR", "arr", t.arr, m.text(t.arr), m.exact(t.arr)),
    figure("Customers", "customers", String(t.customers), t.customers.toLocaleString("en-US")),
    figure("ARPA", "arpa", t.arpa, m.text(t.arpa), m.exact(t.arpa)),
    figure("LTV", "ltv", t.ltv ?? "", t.ltv === null ? "—" : m.text(t.ltv), t.ltv === null ? "" : m.exact(t.ltv)),
  );
}

/**
 * MRR at each period's end (a line on the right axis) over the period's movements as stacked bars: each series is
 * drawn at its cumulative height from zero, outermost first, so every kind stays visible; the legend under the
 * cursor shows each kind's own amount.
 */
function mrrChart(t: Token, interval: string): HTMLElement {
  const m = money(t);
  const x = t.periods.map((p) => Date.parse(p.period_start) / 1000);
  const amount = (k: Kind) => t.periods.map((p) => p.movements[k].amount);
  const stack = (kinds: Kind[]): Series[] =>
    kinds
      .map((k, i) => ({
        label: KINDS[k].label,
        color: KINDS[k].color,
        bars: true,
        values: t.periods.map((p) => kinds.slice(0, i + 1).reduce((n, j) => n + m.float(p.movements[j].amount), 0)),
        display: t.periods.map((p) => `${m.text(p.movements[k].amount)} (${p.movements[k].count})`),
      }))
      .reverse();
  const series: Series[] = [
    ...stack(["new", "expansion", "reactivation"]),
    ...stack(["contraction", "churn"]),
    {
      label: "MRR",
      color: "#1a1f36",
      axis: "right",
      values: t.periods.map((p) => m.float(p.mrr_end)),
      display: t.periods.map((p) => m.text(p.mrr_end)),
    },
  ];
  const chart = timeChart({
    x,
    interval,
    height: 260,
    hover: true,
    series,
    data: {
      token: t.token,
      periods: t.periods.map((p) => p.period_start),
      mrr_end: t.periods.map((p) => p.mrr_end),
      ...Object.fromEntries((Object.keys(KINDS) as Kind[]).map((k) => [k, amount(k)])),
    },
  });
  chart.classList.add("mrr-chart");
  return chart;
}

/** Σ over the periods of one reason's churn (count, amount), and of the recovered reactivations. */
function churnTotals(periods: MrrPeriod[]) {
  const reasons = new Map<string, { count: number; amount: bigint }>();
  const recovered = { count: 0, amount: 0n };
  for (const p of periods) {
    for (const [r, f] of Object.entries(p.churn_by_reason)) {
      const t = reasons.get(r) ?? { count: 0, amount: 0n };
      t.count += f.count;
      t.amount += BigInt(f.amount);
      reasons.set(r, t);
    }
    recovered.count += p.recovered.count;
    recovered.amount += BigInt(p.recovered.amount);
  }
  return { reasons, recovered };
}

/** Churn by reason over the range: voluntary and involuntary groups, a bar per reason, and the recovered revenue. */
function churnCard(t: Token, interval: string): HTMLElement {
  const m = money(t);
  const { reasons, recovered } = churnTotals(t.periods);
  const lost = [...reasons.values()].reduce((n, r) => n - r.amount, 0n);
  const group = (title: string, key: string, names: string[]) => {
    const total = names.reduce((n, r) => n + (reasons.get(r)?.count ?? 0), 0);
    const amount = names.reduce((n, r) => n + (reasons.get(r)?.amount ?? 0n), 0n);
    return h(
      "div",
      { class: "reason-group", dataset: { group: key } },
      h(
        "h3",
        null,
        title,
        h("span", { class: "muted", dataset: { groupCount: String(total), groupAmount: amount.toString() } }, [
          ` · ${total} · ${m.text(amount.toString())}`,
        ]),
      ),
      h(
        "ul",
        { class: "reasons bars" },
        names.map((r) => {
          const f = reasons.get(r) ?? { count: 0, amount: 0n };
          const bar = h("span", { class: "bar", dataset: { color: r } });
          bar.style.width = lost > 0n ? `${Number((-f.amount * 1000n) / lost) / 10}%` : "0";
          bar.style.background = REASON_COLORS[r] ?? "#697386";
          return h(
            "li",
            { dataset: { reasonRow: r } },
            h("span", { class: "reason-name" }, REASON_LABELS[r] ?? r),
            h("span", { class: "bar-track" }, bar),
            h(
              "strong",
              { dataset: { churnReason: r, count: String(f.count), value: f.amount.toString() } },
              `${f.count} · ${m.text(f.amount.toString())}`,
            ),
          );
        }),
      ),
    );
  };
  const names = [...reasons.keys()];
  // Per period, the churned MRR by reason (as positive heights), stacked.
  const shown = names.filter((r) => reasons.get(r)!.count > 0);
  const x = t.periods.map((p) => Date.parse(p.period_start) / 1000);
  const series: Series[] = shown
    .map((r, i) => ({
      label: REASON_LABELS[r] ?? r,
      color: REASON_COLORS[r] ?? "#697386",
      bars: true,
      values: t.periods.map((p) =>
        shown
          .slice(0, i + 1)
          .reduce((n, s) => n - m.float(p.churn_by_reason[s as keyof MrrPeriod["churn_by_reason"]].amount), 0),
      ),
      display: t.periods.map((p) => {
        const f = p.churn_by_reason[r as keyof MrrPeriod["churn_by_reason"]];
        return `${m.text(f.amount)} (${f.count})`;
      }),
    }))
    .reverse();
  return h(
    "div",
    { class: "churn" },
    h(
      "div",
      { class: "kpis" },
      figure("Churned MRR", "churned", (-lost).toString(), m.text((-lost).toString()), m.exact((-lost).toString())),
      figure(
        "Recovered MRR",
        "recovered",
        recovered.amount.toString(),
        `${m.text(recovered.amount.toString())} · ${recovered.count}`,
        `${m.exact(recovered.amount.toString())} from ${recovered.count} reactivations within 30 days of an involuntary churn`,
      ),
    ),
    h(
      "div",
      { class: "two flat" },
      group(
        "Voluntary",
        "voluntary",
        names.filter((r) => !involuntary(r)),
      ),
      group("Involuntary", "involuntary", names.filter(involuntary)),
    ),
    shown.length
      ? timeChart({
          x,
          interval,
          height: 180,
          hover: true,
          series,
          data: {
            periods: t.periods.map((p) => p.period_start),
            reasons: Object.fromEntries(
              shown.map((r) => [r, t.periods.map((p) => p.churn_by_reason[r as keyof MrrPeriod["churn_by_reason"]])]),
            ),
          },
        })
      : h("p", { class: "muted" }, "No churn in this range."),
  );
}

/** The rates of every period, newest first. */
function ratesTable(t: Token, interval: string): HTMLElement {
  const m = money(t);
  const cell = (key: string, value: string, text: string) =>
    h("td", { class: "num", dataset: { rate: key, value } }, text);
  const rows = [...t.periods]
    .reverse()
    .map((p) =>
      h(
        "tr",
        { dataset: { period: p.period_start } },
        h("td", null, formatDate(p.period_start)),
        cell("mrr_end", p.mrr_end, m.text(p.mrr_end)),
        ...(Object.keys(KINDS) as Kind[]).map((k) =>
          cell(k, p.movements[k].amount, p.movements[k].count ? m.text(p.movements[k].amount) : "—"),
        ),
        cell("subscriber_churn_rate", p.subscriber_churn_rate ?? "", percent(p.subscriber_churn_rate)),
        cell("gross_revenue_churn", p.gross_revenue_churn ?? "", percent(p.gross_revenue_churn)),
        cell("nrr", p.nrr ?? "", percent(p.nrr)),
        cell("grr", p.grr ?? "", percent(p.grr)),
      ),
    );
  return h(
    "details",
    { class: "rates" },
    h("summary", null, `Rates per ${interval}`),
    table(
      [
        "Period",
        "MRR at end",
        ...Object.values(KINDS).map((k) => k.label),
        "Subscriber churn",
        "Revenue churn",
        "NRR",
        "GRR",
      ],
      rows,
    ),
  );
}

/** A cohort heatmap: rows are cohorts, columns periods since their start, shade = retention. */
function cohortTable(t: CohortsResponse["tokens"][number], metric: "customers" | "revenue"): HTMLElement {
  const m = money(t);
  const width = Math.max(0, ...t.cohorts.map((c) => c.periods.length));
  const rows = t.cohorts.map((c) =>
    h(
      "tr",
      { dataset: { cohort: c.cohort_start } },
      h("th", { scope: "row" }, formatDate(c.cohort_start)),
      h("td", { class: "num", dataset: { size: String(c.size) } }, String(c.size)),
      h("td", { class: "num", dataset: { mrrStart: c.mrr_start } }, m.text(c.mrr_start)),
      Array.from({ length: width }, (_, n) => {
        const p = c.periods.find((q) => q.n === n);
        if (!p) return h("td", { class: "heat empty" });
        const ratio = metric === "customers" ? p.customer_retention : p.revenue_retention;
        const td = h(
          "td",
          {
            class: "heat num",
            title: `${p.customers} of ${c.size} customers · ${m.exact(p.mrr)}`,
            dataset: { n: String(n), value: ratio ?? "", customers: String(p.customers), mrr: p.mrr },
          },
          ratio === null ? "—" : `${Math.round(Number(ratio) * 100)}%`,
        );
        const shade = Math.max(0, Math.min(1, Number(ratio ?? 0)));
        td.style.background = `rgba(99, 91, 255, ${(0.08 + 0.77 * shade).toFixed(3)})`;
        if (shade > 0.55) td.classList.add("dark");
        return td;
      }),
    ),
  );
  return h(
    "div",
    { class: "table-wrap heatmap", dataset: { token: t.currency ?? t.token, metric } },
    h(
      "table",
      null,
      h(
        "thead",
        null,
        h(
          "tr",
          null,
          h("th", null, "Cohort"),
          h("th", null, "Size"),
          h("th", null, "MRR"),
          Array.from({ length: width }, (_, n) => h("th", { class: "num" }, String(n))),
        ),
      ),
      h(
        "tbody",
        null,
        rows.length ? rows : h("tr", null, h("td", { class: "empty", colspan: "3" }, "No customers yet.")),
      ),
    ),
  );
}

export const revenuePage: Page = {
  id: "revenue",
  title: "Revenue",
  async render({ credential, root, query, navigate }) {
    const interval = (INTERVALS.find(([v]) => v === query.get("interval")) ?? INTERVALS[0])[0];
    const cohortInterval = (COHORT_INTERVALS.find(([v]) => v === query.get("cohorts")) ?? COHORT_INTERVALS[0])[0];
    const metric = query.get("metric") === "revenue" ? "revenue" : "customers";
    const go = (change: Record<string, string>) => {
      const q = new URLSearchParams({ interval, cohorts: cohortInterval, metric, ...change });
      navigate(`#/revenue?${q}`);
    };
    const select = (label: string, options: readonly (readonly [string, string])[], value: string, key: string) =>
      h(
        "select",
        { "aria-label": label, onchange: (e: Event) => go({ [key]: (e.target as HTMLSelectElement).value }) },
        options.map(([v, text]) => h("option", { value: v, selected: v === value }, text)),
      );
    const base = `/v0/stats/${credential.merchant}`;
    const message = h("div");
    // Every movement, newest first: Stripe's "MRR changes" report.
    const csv = h(
      "button",
      {
        class: "button secondary small",
        type: "button",
        dataset: { movementsCsv: "" },
        onclick: () =>
          downloadCsv(`${base}/mrr/movements${qs({ format: "csv" })}`, "mrr-movements.csv").catch((err) =>
            replace(message, errorBox(err)),
          ),
      },
      "Movements (CSV)",
    );
    const body = h("div", { class: "grid" }, h("p", { class: "muted" }, "Loading…"));
    replace(
      root,
      h(
        "div",
        { class: "page-head" },
        h("h1", null, "Revenue"),
        h("div", { class: "controls" }, csv, select("Period", INTERVALS, interval, "interval")),
      ),
      message,
      body,
    );
    const [{ data: mrr }, { data: cohorts }] = await Promise.all([
      api<MrrResponse>(`${base}/mrr${qs({ interval })}`),
      api<CohortsResponse>(`${base}/cohorts${qs({ interval: cohortInterval })}`),
    ]);
    root.dataset.mrr = "loaded";
    const range = h(
      "p",
      { class: "muted small range" },
      `${formatDate(mrr.since)} – ${formatDate(new Date(Date.parse(mrr.until) - 1).toISOString())} · UTC`,
    );
    if (!mrr.tokens.length) {
      replace(body, range, card("MRR", h("p", { class: "muted" }, "No recurring revenue yet.")));
      return;
    }
    const cohortSelects = h(
      "div",
      { class: "controls" },
      select("Cohort period", COHORT_INTERVALS, cohortInterval, "cohorts"),
      select(
        "Retention of",
        [
          ["customers", "Customer retention"],
          ["revenue", "Revenue retention"],
        ],
        metric,
        "metric",
      ),
    );
    replace(
      body,
      range,
      mrr.tokens.map((t) =>
        h(
          "div",
          { class: "token-section", dataset: { token: t.currency ?? t.token } },
          card(`MRR · ${t.currency ?? t.token}`, nowCard(t), mrrChart(t, mrr.interval), ratesTable(t, mrr.interval)),
          card(`Churn by reason · ${t.currency ?? t.token}`, churnCard(t, mrr.interval)),
        ),
      ),
      card(
        "Cohort retention",
        h(
          "p",
          { class: "muted small" },
          "Rows: customers grouped by the period of their first payment. Columns: periods since then. " +
            "Cells: the share still paying at each period's end.",
        ),
        cohortSelects,
        cohorts.tokens.map((t) =>
          h(
            "div",
            { class: "token-block", dataset: { token: t.currency ?? t.token } },
            h("h3", null, t.currency ?? t.token),
            cohortTable(t, metric),
          ),
        ),
      ),
    );
  },
};
