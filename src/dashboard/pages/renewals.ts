/**
 * Renewals: the outlook of every charge due within the horizon, at risk first, filtered by reason, with what the
 * subscriber must do for each; and the overview's "Renewals, next 7 days" card (per token: due, at risk by reason,
 * the amount at risk).
 */
import { api, downloadCsv, qs } from "../api";
import { card, h, replace, table } from "../dom";
import { formatAmount, formatDateTime, formatUnits, shortHex } from "../format";
import type { RenewalItem, Stats } from "../types";
import type { Page, PageContext } from "./page";
import { errorBox } from "./errors";

/** The reasons, in the contract's order of checks (then the one only spend permissions have). */
export const RENEWAL_REASONS = [
  "AllowanceExpired",
  "InsufficientAllowance",
  "InsufficientBalance",
  "ManagerNotOwner",
] as const;

const REASON_LABELS: Record<string, string> = {
  AllowanceExpired: "Allowance expires",
  InsufficientAllowance: "Allowance too low",
  InsufficientBalance: "Balance too low",
  ManagerNotOwner: "Permission manager removed",
};

/** What the subscriber must do for the renewal to go through: "approve 5.79 USDC more", "top up 5.79 USDC", … */
export function renewalAction(
  r: Pick<RenewalItem, "outlook" | "reason" | "shortfall" | "token_decimals" | "currency">,
) {
  const amount =
    `${formatUnits(r.shortfall, r.token_decimals)}${r.token_decimals === null ? " units" : ""} ${r.currency ?? ""}`.trim();
  if (r.outlook === "will_renew") return "Nothing: it will renew";
  if (r.reason === "AllowanceExpired") return "extend the allowance expiry";
  if (r.reason === "InsufficientAllowance") return `approve ${amount} more`;
  if (r.reason === "ManagerNotOwner") return "add the spend permission manager back as an owner of the account";
  return `top up ${amount}`;
}

async function list({ credential, root, query, navigate }: PageContext): Promise<void> {
  const reason = RENEWAL_REASONS.find((r) => r === query.get("reason"));
  const reasonSelect = h(
    "select",
    {
      "aria-label": "Reason",
      name: "reason",
      onchange: (e: Event) => navigate(`#/renewals${qs({ reason: (e.target as HTMLSelectElement).value })}`),
    },
    h("option", { value: "" }, "All renewals"),
    RENEWAL_REASONS.map((r) => h("option", { value: r, selected: r === reason }, REASON_LABELS[r]!)),
  );
  const message = h("p", { class: "muted small" });
  const csv = h(
    "button",
    {
      class: "button secondary",
      type: "button",
      onclick: () =>
        downloadCsv(`/v0/renewals/${credential.merchant}${qs({ reason, format: "csv" })}`, "renewals.csv").catch(
          (err) => replace(message, errorBox(err)),
        ),
    },
    "Download CSV",
  );
  const body = h("div", null, h("p", { class: "muted" }, "Loading…"));
  replace(
    root,
    h("div", { class: "page-head" }, h("h1", null, "Renewals"), csv),
    card(null, h("div", { class: "filters" }, reasonSelect), message, body),
  );
  // At risk first (each list ordered by due date), then those that will renew.
  const [risk, fine] = await Promise.all([
    api<RenewalItem[]>(`/v0/renewals/${credential.merchant}${qs({ outlook: "at_risk", reason, limit: 1000 })}`),
    reason
      ? Promise.resolve({ data: [] as RenewalItem[] })
      : api<RenewalItem[]>(`/v0/renewals/${credential.merchant}${qs({ outlook: "will_renew", limit: 1000 })}`),
  ]);
  const rows = [...risk.data, ...fine.data].map((r) =>
    h(
      "tr",
      { dataset: { id: r.on_chain_id, outlook: r.outlook } },
      h("td", null, h("a", { href: `#/subscriptions/${r.on_chain_id}` }, r.on_chain_id)),
      h("td", { class: "mono", title: r.user_address }, shortHex(r.user_address)),
      h("td", null, formatDateTime(r.due_at)),
      h("td", { class: "num" }, formatAmount(r.amount, r.token_decimals, r.currency)),
      h(
        "td",
        null,
        h(
          "span",
          { class: `pill ${r.outlook === "at_risk" ? "pill-fail" : "pill-active"}` },
          r.outlook === "at_risk" ? REASON_LABELS[r.reason!]! : "Will renew",
        ),
      ),
      h("td", { class: "action" }, renewalAction(r)),
    ),
  );
  replace(
    body,
    table(["ID", "Wallet", "Due", "Amount", "Outlook", "What the subscriber must do"], rows, "No renewals due."),
    h("p", { class: "muted small" }, `${rows.length} shown · judged from the chain before the charge; a forecast.`),
  );
}

/** The overview card: per token, the charges due in the horizon, those at risk by reason and the amount at risk. */
export function renewalsCard(stats: Stats): HTMLElement {
  const rows = stats.renewals.map((t) =>
    h(
      "tr",
      { dataset: { token: t.token ?? "" } },
      h("td", null, t.currency ?? shortHex(t.token ?? "")),
      h("td", { class: "num" }, String(t.due.count)),
      h("td", { class: "num" }, String(t.at_risk.count)),
      RENEWAL_REASONS.map((r) => h("td", { class: "num" }, String(t.at_risk.by_reason[r].count))),
      h("td", { class: "num at-risk" }, formatAmount(t.at_risk.amount, t.token_decimals, t.currency)),
    ),
  );
  return card(
    "Renewals, next 7 days",
    table(
      [
        "Token",
        "Due",
        "At risk",
        "Allowance expires",
        "Allowance too low",
        "Balance too low",
        "Permission manager removed",
        "Amount at risk",
      ],
      rows,
      "No renewals due.",
    ),
    h("p", null, h("a", { href: "#/renewals" }, "See every renewal")),
  );
}

export const renewalsPage: Page = {
  id: "renewals",
  title: "Renewals",
  render: (ctx) => list(ctx),
};
