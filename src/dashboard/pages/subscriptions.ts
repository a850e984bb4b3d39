/** Subscriptions: status filter, wallet search (this page), paging, detail view with activity, CSV download. */
import { api, downloadCsv, nextCursor, qs } from "../api";
import { card, h, replace, table } from "../dom";
import { formatAmount, formatDateTime, shortHex } from "../format";
import { STATUSES, type Activity, type Subscription } from "../types";
import type { Page, PageContext } from "./page";
import { errorBox } from "./errors";

const PAGE_SIZE = 25;
/** Activity records scanned (newest first) for a subscription's detail view and the token of each plan. */
const ACTIVITY_SCAN = 1000;

type TokenInfo = { currency: string | null; decimals: number | null };

/** Token of each allocation, learned from its newest activity (the subscription record has no token). */
async function tokensByAllocation(merchant: string): Promise<Map<string, TokenInfo>> {
  const { data } = await api<Activity[]>(`/v0/activity/${merchant}${qs({ order: "desc", limit: ACTIVITY_SCAN })}`);
  const out = new Map<string, TokenInfo>();
  for (const a of data) {
    if (!out.has(a.allocation_id)) out.set(a.allocation_id, { currency: a.currency, decimals: a.token_decimals });
  }
  return out;
}

function spent(s: Subscription, tokens: Map<string, TokenInfo>): string {
  const t = tokens.get(s.allocation_id);
  if (!t) return s.total_spent === "0" ? "0" : `${s.total_spent} units`;
  return formatAmount(s.total_spent, t.decimals, t.currency);
}

async function list({ credential, root, query, navigate }: PageContext): Promise<void> {
  const status = STATUSES.find((s) => s === query.get("status"));
  const after = query.get("after") ?? undefined;
  const search = h("input", { type: "search", placeholder: "Search wallet (this page)", "aria-label": "Wallet" });
  const statusSelect = h(
    "select",
    {
      "aria-label": "Status",
      name: "status",
      onchange: (e: Event) => navigate(`#/subscriptions${qs({ status: (e.target as HTMLSelectElement).value })}`),
    },
    h("option", { value: "" }, "All statuses"),
    STATUSES.map((s) => h("option", { value: s, selected: s === status }, s[0] + s.slice(1).toLowerCase())),
  );
  const message = h("p", { class: "muted small" });
  const csv = h(
    "button",
    {
      class: "button secondary",
      type: "button",
      onclick: () =>
        downloadCsv(
          `/v0/subscriptions/${credential.merchant}${qs({ status, format: "csv" })}`,
          "subscriptions.csv",
        ).catch((err) => replace(message, errorBox(err))),
    },
    "Download CSV",
  );
  const body = h("div", null, h("p", { class: "muted" }, "Loading…"));
  replace(
    root,
    h("div", { class: "page-head" }, h("h1", null, "Subscriptions"), csv),
    card(null, h("div", { class: "filters" }, statusSelect, search), message, body),
  );
  const [{ data, headers }, tokens] = await Promise.all([
    api<Subscription[]>(
      `/v0/subscriptions/${credential.merchant}${qs({ status, limit: PAGE_SIZE, starting_after: after })}`,
    ),
    tokensByAllocation(credential.merchant),
  ]);
  const next = nextCursor(headers);
  const rows = data.map((s) =>
    h(
      "tr",
      {
        class: "link",
        dataset: { wallet: s.user_address, id: s.on_chain_id },
        onclick: () => navigate(`#/subscriptions/${s.on_chain_id}`),
      },
      h("td", null, h("a", { href: `#/subscriptions/${s.on_chain_id}` }, s.on_chain_id)),
      h("td", { class: "mono", title: s.user_address }, shortHex(s.user_address)),
      h("td", null, h("span", { class: `pill pill-${s.status.toLowerCase()}` }, s.status)),
      h("td", { class: "num" }, spent(s, tokens)),
      h("td", { class: "num" }, String(s.times_executed)),
      h("td", null, formatDateTime(s.next_charge_date)),
      h("td", null, formatDateTime(s.created_at)),
    ),
  );
  search.addEventListener("input", () => {
    const q = search.value.trim().toLowerCase();
    for (const r of rows) r.hidden = q !== "" && !r.dataset.wallet!.includes(q);
  });
  const pager = h(
    "div",
    { class: "pager" },
    h("span", { class: "muted small" }, `${data.length} shown`),
    after
      ? h("button", { class: "button secondary", type: "button", onclick: () => history.back() }, "Previous")
      : null,
    next
      ? h(
          "button",
          {
            class: "button secondary",
            type: "button",
            onclick: () => navigate(`#/subscriptions${qs({ status, after: next })}`),
          },
          "Next",
        )
      : null,
  );
  replace(
    body,
    table(
      ["ID", "Wallet", "Status", "Total spent", "Charges", "Next charge", "Created"],
      rows,
      "No subscriptions match.",
    ),
    pager,
  );
}

async function detail({ credential, root, args }: PageContext): Promise<void> {
  const id = args[0]!;
  replace(root, h("p", { class: "muted" }, "Loading…"));
  const [{ data: s }, { data: activity }] = await Promise.all([
    api<Subscription>(`/v0/subscriptions/${credential.merchant}/${encodeURIComponent(id)}`),
    api<Activity[]>(`/v0/activity/${credential.merchant}${qs({ order: "desc", limit: ACTIVITY_SCAN })}`),
  ]);
  const mine = activity.filter((a) => a.allocation_id === s.allocation_id);
  const token = mine[0] && { currency: mine[0].currency, decimals: mine[0].token_decimals };
  const field = (label: string, value: string, mono = false) =>
    h("div", { class: "field" }, h("dt", null, label), h("dd", { class: mono ? "mono" : "" }, value));
  replace(
    root,
    h(
      "div",
      { class: "page-head" },
      h("h1", null, h("a", { href: "#/subscriptions", class: "crumb" }, "Subscriptions"), ` / ${s.on_chain_id}`),
      h("span", { class: `pill pill-${s.status.toLowerCase()}` }, s.status),
    ),
    card(
      "Details",
      h(
        "dl",
        { class: "fields" },
        field("Wallet", s.user_address, true),
        field("Module", s.module_address, true),
        field("Plan", s.plan_id, true),
        field("Total spent", token ? formatAmount(s.total_spent, token.decimals, token.currency) : s.total_spent),
        field("Charges", String(s.times_executed)),
        field("Remaining charges", s.remaining_executions === null ? "Unlimited" : String(s.remaining_executions)),
        field("Next charge", formatDateTime(s.next_charge_date)),
        field(
          "Allowance expires",
          s.expires_at === null ? "Never" : formatDateTime(new Date(Number(s.expires_at) * 1000).toISOString()),
        ),
        field("Created", formatDateTime(s.created_at)),
        field("Blocked", s.is_blocked ? "Yes" : "No"),
      ),
    ),
    card(
      "Activity",
      table(
        ["Date", "Type", "Amount", "Fee", "Reason", "Transaction"],
        mine.map((a) =>
          h(
            "tr",
            null,
            h("td", null, formatDateTime(a.timestamp)),
            h("td", null, h("span", { class: `pill pill-${a.type.toLowerCase()}` }, a.type)),
            h(
              "td",
              { class: "num" },
              a.type === "FAIL" ? "—" : formatAmount(a.amount_charged, a.token_decimals, a.currency),
            ),
            h(
              "td",
              { class: "num" },
              a.fee_paid === null ? "—" : formatAmount(a.fee_paid, a.token_decimals, a.currency),
            ),
            h("td", null, a.reason ?? ""),
            h("td", { class: "mono", title: a.tx_hash }, shortHex(a.tx_hash, 10, 6)),
          ),
        ),
        activity.length === ACTIVITY_SCAN
          ? `No activity among the merchant's newest ${ACTIVITY_SCAN} records.`
          : "No activity yet.",
      ),
    ),
  );
}

export const subscriptionsPage: Page = {
  id: "subscriptions",
  title: "Subscriptions",
  render: (ctx) => (ctx.args.length ? detail(ctx) : list(ctx)),
};
